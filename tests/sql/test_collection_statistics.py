"""A word-presence oracle against the collection boundary: a reader granted ``hr`` must not learn,
through any reader function and any argument, whether a word occurs in ``eng``.

The database holds ``hr`` (five chunks, two of them with "acquisition") and ``eng``, which the
owner rewrites between four states while ``hr``'s rows stay untouched:

- ``holds``: eng's chunks say "acquisition" (and "merger-acquisition") four times;
- ``lacks``: the same chunks, lengths and chunk count with another word in its place, so only the
  word's document frequency differs from ``holds``;
- ``bigger``: forty eng chunks, every one with the word (more chunks, other lengths);
- ``empty``: no eng document at all.

Every function the reader may execute (the list is read from the catalogue, so a new one must be
added here) is called with the word and the argument tricks that exposed the counts before
(``k1 => 0``, ``keyword_confidence => 1, rrf_k => 0``, a heavy keyword weight, tiny and unbounded
``max_postings``, ts_rank, the reader's own document ids, quotes): its result must be the same in
the four states. The owner narrowing a session to ``hr`` (``pgkb.collections``, what
``--collection hr`` sets, and the ``collections`` filter) must get the same as the reader, as
if eng did not exist; and the owner reading everything does see the states differ, so the
oracle can tell.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from loader.ops.roles import grant
from tests.helpers import (
    create_database,
    drop_database,
    skip_without_pg_textsearch,
    use_pg_textsearch,
)
from tests.serve_fixtures import _create_role, _drop_role, role_url

WORD = "acquisition"
VEC = "[0.6,0.8,0,0]"

HR = [
    ("policies/leave.md", "Leave policy", [
        ("Leave", "Parental leave policy: sixteen weeks of paid leave for every parent."),
        ("Leave > Acquisition", "After an acquisition the leave policy of the buyer applies."),
    ]),
    ("policies/merger.md", "Mergers", [
        ("Mergers", "A merger-acquisition changes who signs the leave forms; see the policy."),
        ("Mergers > Staff", "Staff keep their leave and their equipment budget."),
    ]),
    ("shared/readme.md", "HR readme", [
        ("Readme", "Ask the people team about any policy, leave or travel question."),
    ]),
]  # fmt: skip

ENG_TEXTS = [
    ("CREATE INDEX", "The acquisition of locks by CREATE INDEX: a policy for index builds."),
    ("Readme", "Deploy the service after the acquisition review; merger-acquisition notes."),
    ("Vacuum", "Vacuum the tables of the acquisition project; layoffs of old rows."),
    ("Locks", "Lock acquisition order and the leave policy of long transactions."),
]


def _eng_state(state: str) -> list[tuple[str, str]]:
    if state == "holds":
        return ENG_TEXTS
    if state == "lacks":  # same words, lengths and count; only the probed word differs
        return [(h, t.replace("acquisition", "xylographer")) for h, t in ENG_TEXTS]
    if state == "bigger":
        return [
            (
                f"Part {i}",
                f"Acquisition step {i}: the acquisition of shares, part {i} "
                f"of {'many ' * (i % 7)}reports on policy and index {i}.",
            )
            for i in range(40)
        ]
    return []


STATES = ["holds", "lacks", "bigger", "empty"]


class Db:
    def __init__(self, url: str, reader_url: str) -> None:
        self.url = url
        self.reader_url = reader_url
        self.backend = "sql"
        self.hr_docs: list[str] = []
        self.hr_chunks: list[int] = []


def _insert_doc(conn: psycopg.Connection[Any], collection: str, source: str, title: str,
                chunks: list[tuple[str, str]], vector: str) -> tuple[str, list[int]]:  # fmt: skip
    doc = str(uuid.uuid4())
    conn.execute(
        "INSERT INTO kb.documents (id, source_uri, title, content_sha, collection) "
        "VALUES (%s, %s, %s, %s, %s)",
        (doc, source, title, hashlib.sha256(source.encode()).hexdigest(), collection),
    )
    ids = []
    for index, (heading, content) in enumerate(chunks):
        row = conn.execute(
            "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, content_sha, "
            "token_count) VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
            (doc, index, heading, content, hashlib.sha256(content.encode()).hexdigest(),
             len(content.split())),
        ).fetchone()  # fmt: skip
        assert row is not None
        ids.append(row[0])
        conn.execute(
            "INSERT INTO kb.embeddings (chunk_id, model_id, embedding) "
            "SELECT %s, id, %s::vector FROM kb.embedding_models WHERE name = 'hand-4'",
            (row[0], vector),
        )
    return doc, ids


def _set_state(db: Db, state: str) -> None:
    with psycopg.connect(db.url) as conn:
        conn.execute("DELETE FROM kb.documents WHERE collection = 'eng'")
        texts = _eng_state(state)
        for start in range(0, len(texts), 2):  # documents of two chunks
            _insert_doc(conn, "eng", f"eng/{state}-{start}.md", f"Engineering {start}",
                        list(texts[start:start + 2]), "[0.8,0.6,0,0]")  # fmt: skip
        conn.commit()


@pytest.fixture(scope="module", params=["sql", "pg_textsearch"])
def db(pg_url: str, template_db: str, request: pytest.FixtureRequest) -> Iterator[Db]:
    """The oracle's database, with either keyword backend: pg_textsearch's bm25 index per
    collection (the extension created, so kb.keyword_backend's auto picks it), or none."""
    if request.param == "pg_textsearch":
        skip_without_pg_textsearch(pg_url)
    name = f"pgkb_oracle_{uuid.uuid4().hex[:8]}"
    role = f"hr_oracle_{uuid.uuid4().hex[:6]}"
    url = create_database(pg_url, name, template=template_db)
    try:
        _create_role(pg_url, role)
        result = Db(url, role_url(url, role))
        result.backend = request.param
        with psycopg.connect(url) as conn:
            conn.execute("SELECT kb.register_model('hand-4', 4, 'test')")
            conn.execute("INSERT INTO kb.collections (name) VALUES ('hr'), ('eng')")
            if request.param == "pg_textsearch":
                use_pg_textsearch(conn)
            for source, title, chunks in HR:
                doc, ids = _insert_doc(conn, "hr", source, title, chunks, "[0.6,0.8,0,0]")
                result.hr_docs.append(doc)
                result.hr_chunks.extend(ids)
            conn.commit()
            grant(conn, role, read=True, write=False, collections=["hr"])
        yield result
    finally:
        drop_database(pg_url, name)
        _drop_role(pg_url, role)


def _calls(db: Db) -> list[tuple[str, str, tuple[Any, ...]]]:
    """(function, query, parameters): every reader function, with the word and the tricks."""
    docs, chunks = db.hr_docs, db.hr_chunks
    hr = json.dumps({"collections": ["hr"]})
    ks = "SELECT chunk_id, rank, score, strict_match FROM kb.keyword_search"
    hs = ("SELECT chunk_id, score, vector_rank, vector_similarity, keyword_rank, keyword_score "
          "FROM kb.hybrid_search")  # fmt: skip
    w = WORD
    return [
        ("keyword_search", f"{ks}(%s, 20)", (w,)),
        ("keyword_search", f"{ks}(%s, 20, bm25_k1 => 0)", (w,)),
        ("keyword_search", f"{ks}(%s, 20, bm25_k1 => 0, bm25_b => 0)", (f"{w} policy leave",)),
        ("keyword_search", f"{ks}(%s, 20, bm25_b => 1, heading_weight => 4)", (w,)),
        ("keyword_search", f"{ks}(%s, 20, max_postings => 1)", (f"policy {w} leave",)),
        ("keyword_search", f"{ks}(%s, 20, max_postings => 2)", (f"leave policy {w}",)),
        ("keyword_search", f"{ks}(%s, 20, max_postings => NULL)", (f"{w} index",)),
        ("keyword_search", f"{ks}(%s, 20, keyword_ranking => 'ts_rank')", (w,)),
        ("keyword_search", f"{ks}(%s, 20, document_ids => %s::uuid[])", (w, docs)),
        ("keyword_search", f"{ks}(%s, 20, %s::jsonb, bm25_k1 => 0)", (w, hr)),
        ("keyword_search", f"{ks}(%s, 20)", (f'"{w}" -layoffs',)),
        ("hybrid_search", f"{hs}(%s, %s::vector)", (w, VEC)),
        ("hybrid_search", f"{hs}(%s, %s::vector, 20, keyword_confidence => 1, rrf_k => 0)",
         (w, VEC)),
        ("hybrid_search", f"{hs}(%s, %s::vector, 20, rrf_k => 0, vector_weight => 0, "
         "keyword_confidence => 1, lead_slot => 0)", (f"{w} leave", VEC)),
        ("hybrid_search", f"{hs}(%s, %s::vector, 20, rrf_k => 0, keyword_weight => 1000, "
         "keyword_confidence => 100, lead_slot => 1)", (f"policy {w}", VEC)),
        ("hybrid_search", f"{hs}(%s, NULL, 20, keyword_confidence => 1, rrf_k => 0)", (w,)),
        ("hybrid_search", f"{hs}(%s, %s::vector, 20, filters => %s::jsonb, rrf_k => 0, "
         "keyword_confidence => 1, document_ids => %s::uuid[])", (w, VEC, hr, docs)),
        ("vector_search", "SELECT chunk_id, rank, similarity FROM kb.vector_search(%s::vector, 20)",
         (VEC,)),
        ("query_terms", "SELECT * FROM kb.query_terms(%s)", (f"{w} layoffs policy xylographer",)),
        ("term_df", "SELECT * FROM kb.term_df(%s) ORDER BY 1",
         (["acquisit", "layoff", "polici", "xylograph", "merger-acquisit"],)),
        ("word_lexemes", "SELECT * FROM kb.word_lexemes(%s) ORDER BY 1",
         ([w, "layoffs", "xylographer"],)),
        ("near_lexemes", "SELECT * FROM kb.near_lexemes(%s) ORDER BY 1", ("acquisiti",)),
        ("near_lexemes", "SELECT * FROM kb.near_lexemes(%s) ORDER BY 1", ("layof",)),
        ("squashed_lexeme_found", "SELECT kb.squashed_lexeme_found(%s)", ("mergeracquisition",)),
        ("squashed_lexeme_found", "SELECT kb.squashed_lexeme_found(%s)", ("mergerxylographer",)),
        ("name_found", "SELECT kb.name_found(%s, %s)", ("layoffs", "\\mlayoffs\\M")),
        ("name_found", "SELECT kb.name_found(%s, %s)", (w, f"\\m{w}\\M")),
        ("chunk_lexemes", "SELECT * FROM kb.chunk_lexemes(%s::bigint[], %s) ORDER BY 1",
         (chunks, ["acquisit", "polici"])),
        ("explore_graph", "SELECT document_id, distance FROM kb.explore_graph(query_text => %s)",
         (w,)),
        ("explore_graph", "SELECT document_id FROM kb.explore_graph(max_results => 500)", ()),
        ("document_list",
         "SELECT document_id, chunk_count, edges_out FROM kb.document_list() ORDER BY 1", ()),
        ("find_documents", "SELECT * FROM kb.find_documents(%s)", ("readme.md",)),
        ("show_document", "SELECT * FROM kb.show_document(%s::uuid)", (docs[0],)),
        ("read_document", "SELECT * FROM kb.read_document(%s::uuid)", (docs[1],)),
        ("neighbor_chunks", "SELECT * FROM kb.neighbor_chunks(%s, 50, 50)", (chunks[0],)),
        ("merge_neighbors", "SELECT * FROM kb.merge_neighbors(%s, 50, 50)", (chunks[2],)),
        # chunk_details' rows come in no particular order (its join's plan follows eng's size)
        ("chunk_details", "SELECT * FROM kb.chunk_details(%s::bigint[]) ORDER BY 1", (chunks,)),
        ("pseudo_queries", "SELECT * FROM kb.pseudo_queries(1000)", ()),
        ("collection_list", "SELECT name, documents, chunks FROM kb.collection_list()", ()),
        ("collection_readable", "SELECT kb.collection_readable('hr')", ()),
        ("collection_scope", "SELECT kb.collection_scope(NULL)", ()),
        ("readable_collections", "SELECT kb.readable_collections()", ()),
        ("stats", "SELECT kb.stats(100) - 'last_runs'", ()),
        ("active_model", "SELECT * FROM kb.active_model()", ()),
        ("schema_version", "SELECT kb.schema_version()", ()),
        ("abstention_rule", "SELECT kb.abstention_rule()", ()),
        ("similarity_profile", "SELECT kb.similarity_profile()", ()),
        ("search_filters", "SELECT * FROM kb.search_filters(%s::jsonb)", (hr,)),
        ("search_query", "SELECT * FROM kb.search_query(%s)", (f'"{w}" -layoffs',)),
        ("term_impacts", "SELECT * FROM kb.term_impacts(to_tsvector(%s))", (w,)),
        ("keyword_backend_status", "SELECT kb.keyword_backend_status()", ()),
        ("document_page", "SELECT document_id, chunk_count, edges_out, total "
         "FROM kb.document_page(title_words => %s) ORDER BY 1", (w,)),
        ("document_page", "SELECT document_id, chunk_count, edges_out, edges_in, total "
         "FROM kb.document_page(page_size => 500) ORDER BY 1", ()),
        ("document_facets", "SELECT * FROM kb.document_facets() ORDER BY 1, 2", ()),
        ("ingest_activity", "SELECT count(*) FROM kb.ingest_activity(100)", ()),
        # the write path: a reader may call these, and is refused the same way whatever eng holds
        ("writable_collections", "SELECT kb.writable_collections()", ()),
        ("collection_writable", "SELECT kb.collection_writable('eng')", ()),
        ("document_jobs", "SELECT count(*) FROM kb.document_jobs(NULL, 1000, NULL)", ()),
        ("submit_document", "SELECT kb.submit_document('x.md', 'X', %s, '{}', NULL, 'eng')",
         (w,)),
        ("submit_file", "SELECT kb.submit_file('x.md', %s, 'text/markdown', NULL, '{}', NULL, "
         "'eng')", (w.encode(),)),
        ("remove_document", "SELECT kb.remove_document('x.md', 'eng')", ()),
    ]  # fmt: skip


def _plain(value: Any) -> Any:
    """Rows as JSON-able values, floats to 10 significant digits (summation order aside)."""
    if isinstance(value, float):
        return float(f"{value:.10g}") if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value if isinstance(value, (int, str, bool, type(None))) else str(value)


def _observe(
    conn: psycopg.Connection[Any], calls: list[tuple[str, str, tuple[Any, ...]]]
) -> list[Any]:
    seen: list[Any] = []
    for _, query, params in calls:
        try:
            seen.append(_plain(conn.execute(query, params).fetchall()))  # type: ignore[call-overload]
        except psycopg.Error as exc:  # a refusal is compared too: it must not vary either
            seen.append(["error", exc.sqlstate, exc.diag.message_primary, exc.diag.message_hint])
    return seen


def _run_states(
    db: Db,
    url: str,
    session: str | None = None,
    calls: list[tuple[str, str, tuple[Any, ...]]] | None = None,
) -> dict[str, list[Any]]:
    seen = {}
    calls = calls if calls is not None else _calls(db)
    for state in STATES:
        _set_state(db, state)
        with psycopg.connect(url, autocommit=True) as conn:
            if session is not None:
                conn.execute("SELECT set_config('pgkb.collections', %s, false)", (session,))
            seen[state] = _observe(conn, calls)
    return seen


def _differences(
    seen: dict[str, list[Any]], calls: list[tuple[str, str, tuple[Any, ...]]]
) -> list[str]:
    found = []
    for i, (name, query, params) in enumerate(calls):
        values = {json.dumps(seen[s][i], sort_keys=True) for s in STATES}
        if len(values) > 1:
            found.append(
                f"{name}: {query} {params!r}: "
                + " | ".join(f"{s}={json.dumps(seen[s][i])[:300]}" for s in STATES)
            )
    return found


def test_the_oracle_covers_every_function_a_reader_may_call(db: Db) -> None:
    with psycopg.connect(db.url) as conn:
        granted = {
            r[0]
            for r in conn.execute(
                "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'kb'::regnamespace "
                "AND has_function_privilege('kb_reader', p.oid, 'EXECUTE') "
                "AND p.prorettype <> 'trigger'::regtype"
            ).fetchall()
        }
    assert granted == {name for name, _, _ in _calls(db)}


def test_a_reader_learns_nothing_of_a_word_in_another_collection(db: Db) -> None:
    with psycopg.connect(db.reader_url) as conn:
        serving = conn.execute("SELECT kb.keyword_backend_status() ->> 'backend'").fetchone()
    assert serving == (db.backend,)  # the backend under test serves the reader
    calls = _calls(db)
    seen = _run_states(db, db.reader_url)
    assert _differences(seen, calls) == []
    # the probes found something to compare: hr's chunks with the word, scored
    ranked = seen["holds"][0]
    assert len(ranked) == 2 and ranked[0][2] > 0
    assert seen["holds"][1][0][2] > 0  # k1 0: the score is the word's IDF


def test_the_owner_narrowed_to_hr_sees_what_the_reader_sees(db: Db) -> None:
    # the owner still gets the whole-database figures a reader never gets (stats' tables,
    # models and run log; the collections its role may read), the rest is the reader's
    whole_db = {"stats", "readable_collections", "collection_list"}
    # the owner may write: its writes are not probes (they would queue jobs)
    whole_db |= {"writable_collections", "collection_writable", "submit_document", "submit_file",
                 "remove_document"}  # fmt: skip
    calls = [c for c in _calls(db) if c[0] not in whole_db]
    narrowed = _run_states(db, db.url, session="hr", calls=calls)
    assert _differences(narrowed, calls) == []
    reader = _run_states(db, db.reader_url, calls=calls)
    for i, (name, query, _) in enumerate(calls):
        assert narrowed["holds"][i] == reader["holds"][i], (name, query)


def test_the_owner_reading_everything_does_see_the_word_elsewhere(db: Db) -> None:
    """The oracle can tell: unscoped, the same calls differ between the states."""
    calls = _calls(db)
    seen = _run_states(db, db.url)
    differing = {line.split(":")[0] for line in _differences(seen, calls)}
    assert {"keyword_search", "hybrid_search", "query_terms", "term_df", "word_lexemes",
            "near_lexemes", "squashed_lexeme_found", "name_found"} <= differing  # fmt: skip
