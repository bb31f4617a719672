"""Staleness and removal: ``kb.stale_documents`` and ``kb.remove_documents`` from Python.

``parse_interval`` reads ``--older-than``: ``90d``, ``12h``, ``2w`` or any PostgreSQL interval
text (``'3 months'``, ``'1 year 2 days'``), checked by the server, refused with a clear message.
"""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import class_row

from loader.db import queries
from loader.errors import PgkbError

_SHORT = re.compile(r"^\s*(\d+)\s*([dhw])\s*$", re.IGNORECASE)
_UNITS = {"d": "days", "h": "hours", "w": "weeks"}


class NothingMatched(PgkbError):
    """A removal named documents that do not exist (exit code 1: nothing was removed)."""

    exit_code = 1


def parse_interval(conn: psycopg.Connection[Any], text: str) -> str:
    """The PostgreSQL interval ``text`` denotes (``90d`` -> ``90 days``), validated by the server.

    Raises :class:`PgkbError` naming the value when it is not an interval or is negative."""
    hint = "use e.g. 90d, 12h, 2w, or PostgreSQL interval text such as '3 months'"
    raw = (text or "").strip()
    match = _SHORT.match(raw)
    candidate = f"{match.group(1)} {_UNITS[match.group(2).lower()]}" if match else raw
    if not candidate or re.fullmatch(r"[+-]?\d+(\.\d+)?", candidate):
        # PostgreSQL reads a bare number as seconds: almost surely not what was meant
        raise PgkbError(f"--older-than {text!r} is not an interval (no unit)", hint=hint)
    try:
        row = conn.execute(queries.INTERVAL_TEXT, (candidate,)).fetchone()
    except (
        psycopg.errors.InvalidDatetimeFormat,
        psycopg.errors.DatetimeFieldOverflow,
        psycopg.errors.IntervalFieldOverflow,
    ):
        conn.rollback()
        raise PgkbError(f"--older-than {text!r} is not an interval", hint=hint) from None
    conn.rollback()
    assert row is not None  # SELECT %s::interval::text: always one row
    value = str(row[0])
    if value.startswith("-"):
        raise PgkbError(f"--older-than {text!r} is negative", hint=hint)
    return value


def stale(
    conn: psycopg.Connection[Any], older_than: str, collections: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The documents not updated for longer than ``older_than`` (an interval text), oldest
    first, as dicts (``document_id`` as text); only of ``collections`` when given."""
    with conn.cursor(row_factory=class_row(queries.StaleDocument)) as cur:
        rows = cur.execute(
            queries.STALE_DOCUMENTS, (older_than, list(collections) or None)
        ).fetchall()
    conn.rollback()
    return [_as_dict(r) for r in rows]


def _as_dict(row: Any) -> dict[str, Any]:
    return {**dataclasses.asdict(row), "document_id": str(row.document_id)}


@dataclasses.dataclass
class Removal:
    removed: list[dict[str, Any]]
    dry_run: bool

    def totals(self) -> dict[str, int]:
        return {
            "documents": len(self.removed),
            "chunks": sum(int(r["chunks"]) for r in self.removed),
            "embeddings": sum(int(r["embeddings"]) for r in self.removed),
            "relations": sum(int(r["relations"]) for r in self.removed),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, **self.totals(), "documents_removed": self.removed}


def _candidates(target: str, source_root: Path | None) -> list[str]:
    """The source_uri values a SOURCE argument may mean: as given, as an absolute path, and
    relative to the source root (when configured)."""
    found = [target]
    try:
        absolute = os.path.abspath(os.path.expanduser(target))
    except (OSError, ValueError):
        return found
    found.append(absolute)
    found.append(str(Path(absolute).resolve()))
    if source_root is not None:
        for base in (str(source_root.expanduser().resolve()), str(source_root.expanduser())):
            for path in (absolute, str(Path(absolute).resolve())):
                rel = os.path.relpath(path, base)
                if not rel.startswith(".."):
                    found.append(Path(rel).as_posix())
    return list(dict.fromkeys(found))


def remove(
    conn: psycopg.Connection[Any],
    targets: Sequence[str],
    *,
    source_like: str | None = None,
    dry_run: bool = False,
    source_root: Path | None = None,
    collections: Sequence[str] = (),
) -> Removal:
    """Remove the documents named by ``targets`` (source URIs, paths or document ids) and/or
    matching the LIKE pattern ``source_like``, with their chunks, embeddings and relations;
    only documents of ``collections`` when given (the same source may be in several).

    All or nothing: when a target matches no document (or the pattern matches none), nothing is
    removed and :class:`NothingMatched` names what matched nothing."""
    if not targets and source_like is None:
        raise PgkbError(
            "name what to remove", hint="pgkb docs remove SOURCE|ID... or --source-like"
        )
    ids: list[uuid.UUID] = []
    sources: list[str] = []
    per_target: dict[str, list[str]] = {}
    for target in targets:
        try:
            ids.append(uuid.UUID(target))
            per_target[target] = [str(uuid.UUID(target))]
        except ValueError:
            cands = _candidates(target, source_root)
            sources.extend(cands)
            per_target[target] = cands
    with conn.transaction(), conn.cursor(row_factory=class_row(queries.RemovedDocument)) as cur:
        rows = cur.execute(
            queries.REMOVE_DOCUMENTS,
            (sources, ids, source_like, dry_run, list(collections) or None),
        ).fetchall()
        got = {r.source_uri for r in rows} | {str(r.document_id) for r in rows}
        unmatched = [t for t, cands in per_target.items() if not got.intersection(cands)]
        pattern_empty = source_like is not None and not any(
            _like(source_like, r.source_uri) for r in rows
        )
        if unmatched or pattern_empty:
            what = [repr(t) for t in unmatched]
            if pattern_empty:
                what.append(f"--source-like {source_like!r}")
            raise NothingMatched(  # inside the transaction: rolls it back
                "no document matches " + ", ".join(what) + "; nothing was removed",
                hint="pgkb search --json or pgkb docs stale show source_uri and document_id; "
                "a pattern uses % for any text",
            )
    removed = [_as_dict(r) for r in rows]
    return Removal(removed, dry_run)


def _like(pattern: str, text: str) -> bool:
    """SQL LIKE (with backslash escapes) in Python, to tell which rows the pattern matched."""
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.fullmatch("".join(out), text, re.S) is not None
