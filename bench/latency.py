"""``latency``: search latency inside the database by corpus size, and the common-word bound.

For each corpus: p50/p95/p99 of each call over N real questions, one client, warm (each call
first runs the first 20 questions), timed by the server itself (EXPLAIN ANALYZE's Execution
Time: no client, no network), the calls interleaved question by question (A B C, B C A, ...)
so the machine's load falls on all alike. Then the common-word bound: the corpus's most
frequent words and a few known common ones, each call's worst word against its typical query.

The calls are kb.hybrid_search, kb.keyword_search and kb.vector_search with their defaults, plus
any variant: ``--call NAME=SQL`` (``%(q)s`` the query text, ``%(v)s`` its vector) or a TOML file
(``--calls``) that can also set parameters around each call and run setup SQL once per corpus,
e.g. an older text of a function in a schema of its own, beside today's:

    defaults = true                         # keep the three default calls
    setup = "more.sql"                      # SQL run once per corpus database (a file or text)
    [[function]]                            # a function file, created as kb_0017.keyword_search
    file = "old/keyword_search.sql"         # (kb.<name>( of the listed files renamed alike)
    schema = "kb_0017"
    [[call]]
    name = "keyword 0017"
    sql = "SELECT * FROM kb_0017.keyword_search(%(q)s, 20)"
    [[call]]
    name = "hybrid, other backend"
    sql = "SELECT * FROM kb.hybrid_search(%(q)s, %(v)s)"
    settings = { "pgkb.keyword_backend" = "pg_textsearch" }
"""

from __future__ import annotations

import argparse
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench import common, corpus

CALLS = {
    "hybrid": "SELECT * FROM kb.hybrid_search(%(q)s, %(v)s)",
    "keyword": "SELECT * FROM kb.keyword_search(%(q)s, 20)",
    "vector": "SELECT * FROM kb.vector_search(%(v)s, 20)",
}
COMMON_WORDS = ["chapter", "table", "function", "data"]
WARM = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    corpus.add_options(parser, sizes="5000,source,100000")
    parser.add_argument("--queries", type=int, default=300, help="questions timed per call")
    parser.add_argument(
        "--questions", type=Path, action="append", default=[], help="eval JSON or BEIR jsonl"
    )
    parser.add_argument("--words", type=int, default=10, help="most frequent words timed")
    parser.add_argument("--call", action="append", default=[], metavar="NAME=SQL")
    parser.add_argument("--calls", type=Path, help="TOML file of calls (see the module doc)")
    parser.add_argument("--setup", type=Path, help="SQL file run once in each corpus database")
    parser.add_argument("--prewarm", action="store_true", help="pg_prewarm what searches read")
    parser.add_argument("--plans", action="store_true", help="keep the calls' nested plans")
    keyword_backends(parser)


def keyword_backends(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keyword-backends", metavar="A,B", help="time hybrid and keyword on each")


class Call:
    def __init__(self, name: str, statement: str, settings: dict[str, str] | None = None) -> None:
        self.name, self.sql, self.settings = name, statement, settings or {}
        self.reads_text = "%(q)s" in statement

    def timer(self, conn: psycopg.Connection[Any]) -> Callable[[tuple[str, Any]], float]:
        return lambda item: self.run(conn, *item)

    def run(self, conn: psycopg.Connection[Any], q: str, v: Any, timed: bool = True) -> float:
        for key, value in self.settings.items():
            conn.execute("SELECT set_config(%s, %s, false)", (key, value))
        try:
            if timed:
                return common.server_ms(conn, self.sql, {"q": q, "v": v})
            conn.execute(self.sql, {"q": q, "v": v}).fetchall()
            return 0.0
        finally:
            for key in self.settings:
                conn.execute("SELECT set_config(%s, NULL, false)", (key,))


def calls(args: Any) -> tuple[list[Call], str | None]:
    """The calls to time and the setup SQL, from the defaults, --calls and --call."""
    spec: dict[str, Any] = {}
    if args.calls:
        try:
            spec = tomllib.loads(args.calls.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SystemExit(f"--calls {args.calls}: {exc}") from exc
    backends = [b for b in (getattr(args, "keyword_backends", None) or "").split(",") if b]
    out = [Call(n, s) for n, s in CALLS.items() if not backends or n == "vector"]
    out = out if spec.get("defaults", True) else []
    for backend, name in ((b, n) for b in backends for n in ("hybrid", "keyword")):
        out.append(Call(f"{name}, {backend}", CALLS[name], {"pgkb.keyword_backend": backend}))
    for item in spec.get("call", []):
        if not {"name", "sql"} <= set(item):
            raise SystemExit(f"--calls {args.calls}: every [[call]] needs a name and an sql")
        out.append(Call(item["name"], item["sql"], item.get("settings")))
    for text in args.call:
        name, _, statement = text.partition("=")
        if not statement.strip():
            raise SystemExit(f"--call {text!r}: write NAME=SQL")
        out.append(Call(name.strip(), statement))
    setup = spec.get("setup")
    if setup and args.calls and (args.calls.parent / setup).is_file():
        setup = (args.calls.parent / setup).read_text()
    if spec.get("function"):
        setup = (setup or "") + "\n" + variant_functions(args.calls.parent, spec["function"])
    if args.setup:
        setup = (setup or "") + "\n" + args.setup.read_text()
    if len({c.name for c in out}) != len(out) or not out:
        raise SystemExit("give each call its own name, and at least one call")
    return out, setup


def variant_functions(folder: Path, items: list[dict[str, str]]) -> str:
    """SQL creating the function files of ``[[function]]`` entries (``file``, ``schema``) in
    their schema: ``kb.<name>(`` of every function listed becomes ``<schema>.<name>(`` in every
    text, so a variant calls its listed siblings and today's other functions."""
    texts: list[str] = []
    names: dict[str, str] = {}
    for item in items:
        path = folder / item.get("file", "")
        text = path.read_text() if path.is_file() else ""
        found = re.search(r"FUNCTION kb\.(\w+)\(", text)
        if found is None or not re.fullmatch(r"[a-z_][a-z0-9_]*", item.get("schema", "")):
            raise SystemExit(f"[[function]] {item}: a function file of sql_functions/ and a schema")
        texts.append(text)
        names[found[1]] = item["schema"]
    out = [f"CREATE SCHEMA IF NOT EXISTS {schema};" for schema in sorted(set(names.values()))]
    for text in texts:
        for name, schema in names.items():
            text = text.replace(f"kb.{name}(", f"{schema}.{name}(")
        out.append(text)
    return "\n".join(out)


def run(args: Any) -> dict[str, Any]:
    run = common.Run("latency", args)
    measured, setup = calls(args)
    figures: dict[str, Any] = {"corpora": {}}
    rows: list[list[Any]] = []
    for label, url, built in corpus.targets(args):
        run.postgres(url)
        if setup:
            with psycopg.connect(url) as conn:
                conn.execute(setup)
        result = measure(url, measured, args)
        result["built"] = built
        figures["corpora"][label] = result
        for call in measured:
            f = result["calls"][call.name]
            worst = result["common_words"].get(call.name, {})
            rows.append(
                [
                    label,
                    result["chunks"],
                    call.name,
                    f["n"],
                    f["p50"],
                    f["p95"],
                    f["p99"],
                    worst.get("word", "-"),
                    worst.get("ms", "-"),
                    worst.get("ratio", "-"),
                ]
            )
    run.table(
        "Server-side ms, one client, warm, calls interleaved",
        ["corpus", "chunks", "call", "queries", "p50", "p95", "p99", "worst word", "ms", "x p50"],
        rows,
    )
    return run.finish(figures)


def frequent_words(conn: psycopg.Connection[Any], n: int) -> list[str]:
    rows = conn.execute(
        "SELECT lexeme FROM kb.term_stats WHERE lexeme ~ '^[a-z]{3,}$' ORDER BY df DESC, lexeme "
        "LIMIT %s",
        (n,),
    ).fetchall()
    return list(dict.fromkeys(COMMON_WORDS + [r[0] for r in rows]))


def measure(url: str, measured: list[Call], args: Any) -> dict[str, Any]:
    from pgvector.psycopg import register_vector

    config = common.model_settings(url)
    texts = common.questions(url, args.queries, args.questions)
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        words = frequent_words(conn, args.words)
        vectors = common.embed(texts + words, config)
        items = list(zip(texts + words, vectors, strict=True))
        queries, word_items = items[: len(texts)], items[len(texts) :]
        out: dict[str, Any] = {
            "chunks": corpus.one(conn, "SELECT count(*) FROM kb.chunks"),
            "load_average_start": common.load_average(),
        }
        if args.prewarm:
            out["prewarm"] = prewarm(conn)
        for call in measured:
            for q, v in queries[:WARM]:
                call.run(conn, q, v, timed=False)
        times = common.interleaved(queries, {c.name: c.timer(conn) for c in measured})
        out["calls"] = {name: common.summary(values) for name, values in times.items()}
        out["common_words"] = {}
        for call in (c for c in measured if c.reads_text):
            per_word = {w: min(call.run(conn, w, v) for _ in range(3)) for w, v in word_items}
            word = max(per_word, key=per_word.__getitem__)
            typical = out["calls"][call.name]["p50"]
            out["common_words"][call.name] = {
                "word": word,
                "ms": round(per_word[word], 2),
                "ratio": round(per_word[word] / typical, 2) if typical else None,
                "words": {w: round(ms, 2) for w, ms in per_word.items()},
            }
        if args.plans:
            out["plans"] = plans(conn, measured, queries[0], out["common_words"], dict(word_items))
        out["load_average_end"] = common.load_average()
    return out


def plans(
    conn: psycopg.Connection[Any],
    measured: list[Call],
    typical: tuple[str, Any],
    worst: dict[str, Any],
    word_vectors: dict[str, Any],
) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of every statement inside each call (auto_explain, nested
    statements) for the first question and for the call's worst word."""
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    for setting in ("log_nested_statements = on", "log_analyze = on", "log_buffers = on"):
        conn.execute(f"SET auto_explain.{setting}")
    conn.execute("SET auto_explain.log_level = notice")
    out: dict[str, Any] = {}
    for call in measured:
        cases = {"typical": typical}
        if call.name in worst:
            cases["worst word"] = (worst[call.name]["word"], word_vectors[worst[call.name]["word"]])
        for case, (q, v) in cases.items():
            conn.execute("SET auto_explain.log_min_duration = 0")
            notices.clear()
            call.run(conn, q, v, timed=False)
            conn.execute("SET auto_explain.log_min_duration = -1")
            out[f"{call.name}, {case}"] = {"query": q, "plans": list(notices)}
    return out


def prewarm(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """pg_prewarm over what searches read (kb.search_relations()): with a shared_buffers that
    holds it, a warm corpus is served from PostgreSQL's own buffers."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm WITH SCHEMA public")
    row = conn.execute(
        "SELECT count(*)::int, coalesce(sum(public.pg_prewarm(r.relation)), 0)::bigint, "
        "pg_size_pretty(coalesce(sum(r.bytes), 0)::bigint) FROM kb.search_relations() r"
    ).fetchone()
    assert row is not None
    return {"relations": row[0], "blocks": row[1], "size": row[2]}
