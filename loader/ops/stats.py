"""``kb.stats()`` from Python, and its rendering for ``pgkb stats``."""

from __future__ import annotations

from typing import Any

import psycopg

from loader.db import queries


def stats(conn: psycopg.Connection[Any], last_runs: int = 5) -> dict[str, Any]:
    row = conn.execute(queries.KB_STATS, (last_runs,)).fetchone()
    conn.rollback()
    assert row is not None  # an aggregate: always one row
    return dict(row[0])


def human_bytes(n: int | float | None) -> str:
    value = float(n or 0)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"  # pragma: no cover


def _collections_and_categories(data: dict[str, Any]) -> list[str]:
    lines = [f"{'collection':<24} {'docs':>7} {'chunks':>8}"]
    for c in data.get("collections", []):
        lines.append(f"{c['collection']:<24} {c['documents']:>7} {c['chunks']:>8}")
    lines.append("")
    lines.append(
        f"{'category':<24} {'docs':>7} {'chunks':>8}  {'oldest update':<19}  newest update"
    )
    for c in data["categories"]:
        name = c["category"] if c["category"] is not None else "(none)"
        lines.append(
            f"{name:<24} {c['documents']:>7} {c['chunks']:>8}  {_when(c['oldest_update']):<19}  "
            f"{_when(c['newest_update'])}"
        )
    return lines


def _when(value: Any) -> str:
    return str(value or "-")[:19].replace("T", " ")


WHOLE_DATABASE_ONLY = (
    "(sizes, embeddings per model and ingestion runs count every collection: shown to roles "
    "that read every collection)"
)


def render(data: dict[str, Any]) -> str:
    lines: list[str] = []
    active = data.get("active_model")
    whole = data.get("whole_database", True)
    lines.append(
        f"documents {data['documents']}, chunks {data['chunks']}, relations {data['relations']}"
        + (f"; total size {human_bytes(data['total_bytes'])}" if whole else "")
    )
    lines.append(
        "active model: "
        + (f"{active['name']} ({active['dims']} dims, {active['provider']})" if active else "none")
    )
    if not whole:
        lines.append("")
        lines.extend(_collections_and_categories(data))
        lines.append("")
        lines.append(WHOLE_DATABASE_ONLY)
        return "\n".join(lines)
    lines.append("")
    lines.append("embeddings per model:")
    for m in data["models"]:
        mark = " (active)" if m["is_active"] else ""
        lines.append(
            f"  {m['name']} ({m['dims']} dims){mark}: {m['embeddings']} embeddings, "
            f"{m['missing']} chunks missing"
        )
    if not data["models"]:
        lines.append("  (no model registered)")
    lines.append("")
    lines.extend(_collections_and_categories(data))
    lines.append("")
    lines.append(f"{'table':<24} {'rows':>9} {'table':>10} {'indexes':>10} {'total':>10}")
    for t in data["tables"]:
        lines.append(
            f"{t['name']:<24} {t['rows']:>9} {human_bytes(t['table_bytes']):>10} "
            f"{human_bytes(t['index_bytes']):>10} {human_bytes(t['total_bytes']):>10}"
        )
    lines.append("")
    lines.append("indexes:")
    for i in data["indexes"]:
        state = "" if i["valid"] else "  INVALID (pgkb db reindex)"
        lines.append(f"  {i['name']:<40} {human_bytes(i['bytes']):>10}{state}")
    lines.append("")
    lines.append("last ingestion runs:")
    for r in data["last_runs"]:
        if r["finished_at"] is None:
            outcome = "did not finish (running, or killed)"
        else:
            outcome = (
                f"exit {r['exit_code']}: {r['docs_new']} new, {r['docs_changed']} changed, "
                f"{r['docs_unchanged']} unchanged, {r['docs_pruned']} pruned, "
                f"{r['docs_failed']} failed"
            )
            if r.get("error"):
                outcome += f" ({r['error']})"
        lines.append(f"  #{r['id']} {_when(r['started_at'])} {' '.join(r['paths'])}: {outcome}")
    if not data["last_runs"]:
        lines.append("  (none recorded)")
    return "\n".join(lines)
