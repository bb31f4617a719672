"""Access that holds in SQL: a role granted one collection reads nothing of another, through
any kb function, whatever arguments it passes.

One small database per module, written straight into the tables: two collections, ``hr`` and
``eng``, with overlapping vocabulary (policy, index, leave, readme), the same source_uri in both,
relations and links across them, and words only ``eng`` holds (zanzibarite, quokka-flux). The
role ``hr`` reader (``pgkb db grant ROLE --read --collection hr``) calls every reader function
with the other collection's document ids, chunk ids, sources, depth-3 walks and wide neighbour
windows, and gets nothing of ``eng``; hypothesis varies the arguments. Row-level security is
checked by granting the role SELECT on the tables (which pgkb never does): it still sees only
its collection.
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from loader.errors import SqlState
from loader.ops.roles import grant, revoke
from tests.helpers import (
    create_database,
    drop_database,
    raises_code,
    skip_without_pg_textsearch,
    use_pg_textsearch,
)
from tests.serve_fixtures import (
    PASSWORD,
    _create_role,
    _drop_role,
    password_verifies,
    role_url,
)

ENG_MARKERS = ("zanzibarite", "quokka", "Engineering", "CREATE INDEX")
"""Text only the eng collection holds: none of it may reach the hr reader."""

ENG_VECTOR = [1.0, 0.0, 0.0, 0.0]
HR_VECTOR = [0.6, 0.8, 0.0, 0.0]

DOCS: dict[str, list[tuple[str, str, str, list[tuple[str, str]]]]] = {
    # collection: [(key, source_uri, title, [(heading, content), ...])]
    "hr": [
        (
            "hr_leave",
            "policies/leave.md",
            "Leave policy",
            [
                ("Leave", "Parental leave policy: sixteen weeks of paid leave for every parent."),
                (
                    "Leave > Asking",
                    "Ask your manager about leave eight weeks before; see the index.",
                ),
                (
                    "Leave > Returning",
                    "Returning from leave: the policy index lists the equipment.",
                ),
            ],
        ),
        (
            "hr_index",
            "policies/index.md",
            "Index of HR policies",
            [
                ("Index", "The index of every HR policy: leave, travel and equipment policy."),
            ],
        ),
        (
            "hr_readme",
            "shared/readme.md",
            "HR readme",
            [
                ("Readme", "HR readme: ask the people team about any policy or leave."),
            ],
        ),
    ],
    "eng": [
        (
            "eng_index",
            "policies/createindex.md",
            "CREATE INDEX",
            [
                (
                    "CREATE INDEX",
                    "CREATE INDEX builds an index; the policy for index builds on a "
                    "zanzibarite table is CONCURRENTLY, and leave the quokka-flux service alone.",
                ),
                (
                    "CREATE INDEX > Leave",
                    "Leave the index build running: zanzibarite tables are big.",
                ),
            ],
        ),
        (
            "eng_readme",
            "shared/readme.md",
            "Engineering readme",
            [
                (
                    "Readme",
                    "Engineering readme: deploy the quokka-flux service; the policy index "
                    "is in the wiki.",
                ),
            ],
        ),
    ],
}

RELATIONS = [  # (source, target): across the collections and within them
    ("hr_leave", "eng_index"),
    ("eng_index", "hr_index"),
    ("eng_index", "eng_readme"),
    ("hr_leave", "hr_index"),
    ("hr_index", "hr_readme"),
    ("eng_readme", "hr_readme"),
]


class TwoKbs:
    def __init__(self, url: str, reader_url: str, role: str) -> None:
        self.url = url
        self.reader_url = reader_url
        self.role = role
        self.ids: dict[str, str] = {}
        self.chunks: dict[str, list[int]] = {}

    def eng_ids(self) -> list[str]:
        return [v for k, v in self.ids.items() if k.startswith("eng")]

    def hr_ids(self) -> list[str]:
        return [v for k, v in self.ids.items() if k.startswith("hr")]

    def eng_chunks(self) -> list[int]:
        return [c for k, v in self.chunks.items() if k.startswith("eng") for c in v]

    def hr_chunks(self) -> list[int]:
        return [c for k, v in self.chunks.items() if k.startswith("hr") for c in v]


def _load(conn: psycopg.Connection[Any], kb: TwoKbs) -> None:
    conn.execute("SELECT kb.register_model('hand-4', 4, 'test')")
    conn.execute("INSERT INTO kb.collections (name) VALUES ('hr'), ('eng')")
    for collection, docs in DOCS.items():
        vector = ENG_VECTOR if collection == "eng" else HR_VECTOR
        for key, source, title, chunks in docs:
            doc_id = str(uuid.uuid4())
            kb.ids[key] = doc_id
            conn.execute(
                "INSERT INTO kb.documents (id, source_uri, title, content_sha, category, "
                "collection, summary) VALUES (%s, %s, %s, %s, 'policy', %s, %s)",
                (doc_id, source, title, hashlib.sha256(title.encode()).hexdigest(), collection,
                 chunks[0][1]),
            )  # fmt: skip
            kb.chunks[key] = []
            for index, (heading, content) in enumerate(chunks):
                row = conn.execute(
                    "INSERT INTO kb.chunks (document_id, chunk_index, heading_path, content, "
                    "content_sha, token_count) VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
                    (doc_id, index, heading, content,
                     hashlib.sha256(content.encode()).hexdigest(), len(content.split())),
                ).fetchone()  # fmt: skip
                assert row is not None
                kb.chunks[key].append(row[0])
                conn.execute(
                    "INSERT INTO kb.embeddings (chunk_id, model_id, embedding) "
                    "SELECT %s, id, %s::vector FROM kb.embedding_models WHERE name = 'hand-4'",
                    (row[0], str(vector)),
                )
    for source, target in RELATIONS:
        conn.execute(
            "INSERT INTO kb.document_relations (source_id, target_id, relation_type, origin, "
            "evidence) VALUES (%s, %s, 'references', 'link', 'see')",
            (kb.ids[source], kb.ids[target]),
        )
    conn.execute(
        "INSERT INTO kb.document_links (source_id, target_uri, href, anchor) VALUES "
        "(%s, 'policies/createindex.md', 'createindex.md', 'index builds'), "
        "(%s, 'policies/leave.md', 'leave.md', 'leave')",
        (kb.ids["hr_leave"], kb.ids["eng_index"]),
    )
    conn.commit()


@pytest.fixture(scope="module", params=["sql", "pg_textsearch"])
def two_kbs(pg_url: str, template_db: str, request: pytest.FixtureRequest) -> Iterator[TwoKbs]:
    """The two collections, with either keyword backend (pg_textsearch: the extension and each
    collection's bm25 index, so the searches' keyword leg runs on it)."""
    if request.param == "pg_textsearch":
        skip_without_pg_textsearch(pg_url)
    name = f"pgkb_access_{uuid.uuid4().hex[:8]}"
    role = f"hr_reader_{uuid.uuid4().hex[:6]}"
    url = create_database(pg_url, name, template=template_db)
    try:
        _create_role(pg_url, role)
        kb = TwoKbs(url, role_url(url, role), role)
        with psycopg.connect(url) as conn:
            _load(conn, kb)
            if request.param == "pg_textsearch":
                use_pg_textsearch(conn)
                assert conn.execute("SELECT kb.keyword_backend()").fetchone() == ("pg_textsearch",)
            grant(conn, role, read=True, write=False, collections=["hr"])
        yield kb
    finally:
        drop_database(pg_url, name)
        _drop_role(pg_url, role)


@pytest.fixture(scope="module")
def reader(two_kbs: TwoKbs) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(two_kbs.reader_url, autocommit=True) as conn:
        yield conn


def _rows(conn: psycopg.Connection[Any], query: str, params: Any = ()) -> list[tuple[Any, ...]]:
    return conn.execute(query, params).fetchall()  # type: ignore[call-overload, no-any-return]


def _no_eng(kb: TwoKbs, value: Any) -> None:
    text = json.dumps(value, default=str)
    for marker in ENG_MARKERS + tuple(kb.eng_ids()):
        assert marker not in text, (marker, text[:2000])


VEC = "[1,0,0,0]"


def test_the_reader_reads_its_collection_and_the_owner_both(
    two_kbs: TwoKbs, reader: psycopg.Connection[Any]
) -> None:
    assert _rows(reader, "SELECT kb.readable_collections()") == [(["hr"],)]
    assert [r[0] for r in _rows(reader, "SELECT name FROM kb.collection_list()")] == ["hr"]
    with psycopg.connect(two_kbs.url) as owner:
        assert _rows(owner, "SELECT kb.readable_collections()") == [(None,)]
        both = _rows(owner, "SELECT DISTINCT source_uri FROM kb.hybrid_search('policy index', "
                     f"'{VEC}'::vector, 20)")  # fmt: skip
        assert {r[0] for r in both} >= {"policies/createindex.md", "policies/leave.md"}
    hits = _rows(reader, f"SELECT source_uri FROM kb.hybrid_search('policy index', '{VEC}', 20)")
    assert hits and {r[0] for r in hits} <= {"policies/leave.md", "policies/index.md",
                                             "shared/readme.md"}  # fmt: skip


def test_every_search_with_the_other_collections_ids_finds_nothing_of_it(
    two_kbs: TwoKbs, reader: psycopg.Connection[Any]
) -> None:
    eng = two_kbs.eng_ids()
    for query, params in [
        (
            f"SELECT * FROM kb.hybrid_search('zanzibarite index policy', '{VEC}', 50, "
            "document_ids => %s::uuid[])",
            (eng,),
        ),
        (f"SELECT * FROM kb.vector_search('{VEC}', 50, document_ids => %s::uuid[])", (eng,)),
        ("SELECT * FROM kb.keyword_search('zanzibarite', 50, document_ids => %s::uuid[])", (eng,)),
        ("SELECT * FROM kb.keyword_search('quokka-flux OR zanzibarite OR engineering', 50)", ()),
        (f"SELECT * FROM kb.hybrid_search('\"quokka-flux\"', '{VEC}', 50)", ()),
        ("SELECT * FROM kb.document_list(document_ids => %s::uuid[])", (eng,)),
        ("SELECT * FROM kb.document_list()", ()),
        ("SELECT * FROM kb.find_documents(%s)", (eng[0],)),
        ("SELECT * FROM kb.find_documents('policies/createindex.md')", ()),
        ("SELECT * FROM kb.find_documents('createindex.md')", ()),
        ("SELECT * FROM kb.explore_graph(query_text => 'zanzibarite quokka', max_depth => 1)", ()),
        ("SELECT * FROM kb.explore_graph(max_results => 500)", ()),
        ("SELECT * FROM kb.explore_graph(document_ids => %s::uuid[])", (eng,)),
        ("SELECT * FROM kb.chunk_details(%s::bigint[])", (two_kbs.eng_chunks(),)),
        (
            "SELECT * FROM kb.chunk_lexemes(%s::bigint[], ARRAY['zanzibarit', 'index'])",
            (two_kbs.eng_chunks(),),
        ),
        ("SELECT * FROM kb.pseudo_queries(1000)", ()),
        ("SELECT kb.stats(100)", ()),
    ]:
        rows = _rows(reader, query, params)
        _no_eng(two_kbs, rows)
    assert _rows(reader, "SELECT * FROM kb.document_list(document_ids => %s::uuid[])", (eng,)) \
        == []  # fmt: skip
    stats = _rows(reader, "SELECT kb.stats()")[0][0]
    assert stats["documents"] == 3 and stats["collections"] == [
        {"collection": "hr", "documents": 3, "chunks": 5}
    ]
    assert stats["last_runs"] == [] and stats["tables"] == [] and stats["models"] == []


def test_walks_windows_and_reads_by_id_stop_at_the_boundary(
    two_kbs: TwoKbs, reader: psycopg.Connection[Any]
) -> None:
    ids = two_kbs.ids
    for doc in two_kbs.eng_ids():
        assert _rows(reader, "SELECT * FROM kb.explore_graph(%s::uuid, max_depth => 3)", (doc,)) \
            == []  # fmt: skip
        assert _rows(reader, "SELECT status FROM kb.read_document(%s::uuid)", (doc,)) == [
            ("not_found",)
        ]
        assert _rows(reader, "SELECT * FROM kb.read_document(%s::uuid, 0, 5, 1)", (doc,)) == [
            ("not_found", uuid.UUID(doc), None, None, 0, 0, None, None, None, None, None, None)
        ]
        assert _rows(reader, "SELECT * FROM kb.show_document(%s::uuid)", (doc,)) == []
    for chunk in two_kbs.eng_chunks():
        assert _rows(reader, "SELECT * FROM kb.neighbor_chunks(%s, 50, 50)", (chunk,)) == []
        assert _rows(reader, "SELECT * FROM kb.merge_neighbors(%s, 50, 50)", (chunk,)) == []
    # from its own documents, a depth-3 walk reaches its own documents only (the eng documents
    # in between are not crossed), and the edges and links shown are its own
    walk = _rows(
        reader, "SELECT document_id, path, edges FROM kb.explore_graph(%s::uuid, max_depth => 3)",
        (ids["hr_leave"],),
    )  # fmt: skip
    assert {str(r[0]) for r in walk} == set(two_kbs.hr_ids())
    _no_eng(two_kbs, walk)
    shown = _rows(reader, "SELECT * FROM kb.show_document(%s::uuid)", (ids["hr_leave"],))
    assert len(shown) == 1
    _no_eng(two_kbs, shown)
    # its link to policies/createindex.md is unresolved in hr (that source is eng's)
    assert [link["target_uri"] for link in shown[0][-1]] == ["policies/createindex.md"]
    window = _rows(reader, "SELECT * FROM kb.neighbor_chunks(%s, 50, 50)",
                   (two_kbs.chunks["hr_leave"][1],))  # fmt: skip
    assert [r[0] for r in window] == two_kbs.chunks["hr_leave"]
    read = _rows(reader, "SELECT content FROM kb.read_document(%s::uuid)", (ids["hr_readme"],))
    assert read == [("HR readme: ask the people team about any policy or leave.",)]


def test_asking_for_another_collection_is_one_error_whether_it_exists_or_not(
    two_kbs: TwoKbs, reader: psycopg.Connection[Any]
) -> None:
    messages = []
    for name in ("eng", "no_such_collection"):
        for query in (
            f"SELECT * FROM kb.hybrid_search('policy', '{VEC}', filters => %s::jsonb)",
            "SELECT * FROM kb.document_list(%s::jsonb)",
            "SELECT * FROM kb.explore_graph(filters => %s::jsonb)",
            "SELECT kb.stats(5, %s::jsonb)",
        ):
            with raises_code(SqlState.COLLECTION_NOT_READABLE) as caught:
                reader.execute(query, (json.dumps({"collections": [name]}),))
            messages.append(caught.value.diag.message_primary.replace(name, "X"))
    assert len(set(messages)) == 1, messages
    # the session's collections only narrow: eng cannot be set, hr can
    with psycopg.connect(two_kbs.reader_url, autocommit=True) as conn:
        conn.execute("SELECT set_config('pgkb.collections', 'eng', false)")
        with raises_code(SqlState.COLLECTION_NOT_READABLE):
            conn.execute("SELECT * FROM kb.read_document(%s::uuid)", (two_kbs.ids["hr_leave"],))
        conn.execute("SELECT set_config('pgkb.collections', 'hr', false)")
        assert conn.execute("SELECT count(*) FROM kb.document_list()").fetchone() == (3,)


def test_abstention_signals_do_not_tell_whether_a_word_is_in_another_collection(
    two_kbs: TwoKbs, reader: psycopg.Connection[Any]
) -> None:
    calls = {
        "word_lexemes": "SELECT absent FROM kb.word_lexemes(ARRAY['zanzibarite'])",
        "name_found": "SELECT kb.name_found('zanzibarite', '\\mzanzibarite\\M')",
        "query_terms": "SELECT df FROM kb.query_terms('zanzibarite')",
        "near_lexemes": "SELECT count(*) FROM kb.near_lexemes('zanzibarite')",
        "squashed_lexeme_found": "SELECT kb.squashed_lexeme_found('quokkaflux')",
        "term_df": "SELECT df FROM kb.term_df(ARRAY['zanzibarit', 'quokka-flux'])",
    }
    with psycopg.connect(two_kbs.url, autocommit=True) as owner:
        as_owner = {k: owner.execute(q).fetchall() for k, q in calls.items()}  # type: ignore[call-overload]
    as_reader = {k: _rows(reader, q) for k, q in calls.items()}
    # the owner sees the words; the hr reader gets what a database without eng would say
    assert as_owner == {
        "word_lexemes": [(False,)], "name_found": [(True,)], "query_terms": [(2,)],
        "near_lexemes": [(1,)], "squashed_lexeme_found": [(True,)], "term_df": [(2,), (2,)],
    }  # fmt: skip
    assert as_reader == {
        "word_lexemes": [(True,)], "name_found": [(False,)], "query_terms": [(0,)],
        "near_lexemes": [(0,)], "squashed_lexeme_found": [(False,)], "term_df": [(0,), (0,)],
    }  # fmt: skip
    # and a word hr holds: df and N of hr alone (5 chunks, "policy" in 4 of them)
    idf = math.log(1 + (5 - 4 + 0.5) / (4 + 0.5))
    [(lexeme, df, got)] = _rows(reader, "SELECT * FROM kb.query_terms('policy')")
    assert (lexeme, df) == ("polici", 4) and got == pytest.approx(idf)


def test_the_readers_term_counts_equal_a_direct_count_either_way_they_are_taken(
    two_kbs: TwoKbs, reader: psycopg.Connection[Any]
) -> None:
    """kb.term_df counts a granted reader's chunks through the GIN index (few postings: a rare
    word) or by reading its collections' chunks (more postings than it has chunks: many common
    words); both give hr's own counts, and a word only eng holds is 0."""
    with psycopg.connect(two_kbs.url, autocommit=True) as owner:
        every = [r[0] for r in _rows(owner, "SELECT lexeme FROM kb.term_stats ORDER BY lexeme")]
        direct = dict(
            _rows(
                owner,
                "SELECT l.lexeme, count(*)::int FROM kb.chunks c "
                "JOIN kb.documents d ON d.id = c.document_id, unnest(c.tsv) l "
                "WHERE d.collection = 'hr' GROUP BY l.lexeme",
            )
        )
        postings = dict(_rows(owner, "SELECT lexeme, df FROM kb.term_stats"))
        hr_chunks = _rows(
            owner,
            "SELECT count(*) FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id "
            "WHERE d.collection = 'hr'",
        )[0][0]
    assert sum(postings.values()) > hr_chunks  # every lexeme at once: the scan way
    rare = min(every, key=lambda x: (postings[x], x))
    assert postings[rare] < hr_chunks  # one rare lexeme: the index way
    for asked in (every, [rare], [*every[:3], "nosuchlexeme"]):
        got = dict(_rows(reader, "SELECT lexeme, df FROM kb.term_df(%s)", (asked,)))
        assert got == {x: direct.get(x, 0) for x in asked}, asked


def test_row_level_security_holds_if_the_role_is_ever_given_the_tables(
    two_kbs: TwoKbs, reader: psycopg.Connection[Any]
) -> None:
    tables = ["documents", "chunks", "embeddings", "document_relations", "document_links"]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        reader.execute("SELECT count(*) FROM kb.documents")
    with psycopg.connect(two_kbs.url, autocommit=True) as owner:
        for table in tables:
            owner.execute(
                sql.SQL("GRANT SELECT ON kb.{} TO {}").format(
                    sql.Identifier(table), sql.Identifier(two_kbs.role)
                )
            )
        try:
            with psycopg.connect(two_kbs.reader_url, autocommit=True) as conn:
                counts = {
                    t: conn.execute(
                        sql.SQL("SELECT count(*) FROM kb.{}").format(sql.Identifier(t))
                    ).fetchone()
                    for t in tables
                }
                sources = conn.execute("SELECT collection FROM kb.documents").fetchall()
        finally:
            for table in tables:
                owner.execute(
                    sql.SQL("REVOKE SELECT ON kb.{} FROM {}").format(
                        sql.Identifier(table), sql.Identifier(two_kbs.role)
                    )
                )
    assert {r[0] for r in sources} == {"hr"}
    assert counts == {
        "documents": (3,), "chunks": (5,), "embeddings": (5,),
        "document_relations": (2,), "document_links": (1,),
    }  # fmt: skip


def test_grants_follow_membership_and_revoke_takes_them_back(two_kbs: TwoKbs, pg_url: str) -> None:
    group = f"eng_group_{uuid.uuid4().hex[:6]}"
    bare = f"bare_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(group)))
    _create_role(pg_url, bare)
    try:
        with psycopg.connect(two_kbs.url, autocommit=True) as owner:
            owner.execute(sql.SQL("GRANT kb_reader TO {}").format(sql.Identifier(bare)))
            owner.execute("INSERT INTO kb.collection_grants VALUES (%s, 'eng')", (group,))
        # a kb_reader member without any grant reads nothing
        with psycopg.connect(role_url(two_kbs.url, bare), autocommit=True) as conn:
            assert conn.execute("SELECT kb.readable_collections()").fetchone() == ([],)
            assert conn.execute("SELECT count(*) FROM kb.document_list()").fetchone() == (0,)
            assert conn.execute(
                f"SELECT count(*) FROM kb.hybrid_search('policy', '{VEC}')"
            ).fetchone() == (0,)
        # a member of a role granted eng reads eng too
        with psycopg.connect(two_kbs.url, autocommit=True) as owner:
            owner.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(group),
                                                           sql.Identifier(bare)))  # fmt: skip
            owner.execute("INSERT INTO kb.collection_grants VALUES (%s, 'hr')", (bare,))
        with psycopg.connect(role_url(two_kbs.url, bare), autocommit=True) as conn:
            assert conn.execute("SELECT kb.readable_collections()").fetchone() == (["eng", "hr"],)
            assert conn.execute("SELECT count(*) FROM kb.document_list()").fetchone() == (5,)
        with psycopg.connect(two_kbs.url) as owner:
            done = revoke(owner, bare, ["hr"])
            assert done == [f"-- {bare} no longer reads collection hr"]
            with pytest.raises(Exception, match="has no grant of 'hr'"):
                revoke(owner, bare, ["hr"])
            revoke(owner, bare)  # every grant and kb_reader
        with (
            psycopg.connect(role_url(two_kbs.url, bare), autocommit=True) as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            conn.execute("SELECT * FROM kb.document_list()")
    finally:
        _drop_role(pg_url, bare)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(group)))
        with psycopg.connect(two_kbs.url, autocommit=True) as owner:
            owner.execute("DELETE FROM kb.collection_grants WHERE role_name = %s", (group,))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_arguments_reveal_nothing_of_the_other_collection(
    two_kbs: TwoKbs, reader: psycopg.Connection[Any], data: st.DataObject
) -> None:
    all_ids = list(two_kbs.ids.values())
    doc = data.draw(st.one_of(st.sampled_from(all_ids), st.uuids().map(str)), label="doc")
    docs = data.draw(st.lists(st.sampled_from(all_ids), max_size=5), label="docs")
    chunk = data.draw(
        st.one_of(st.sampled_from(two_kbs.hr_chunks() + two_kbs.eng_chunks()),
                  st.integers(-5, 10**6)),
        label="chunk",
    )  # fmt: skip
    depth = data.draw(st.integers(1, 3), label="depth")
    before, after = data.draw(st.integers(-5, 80)), data.draw(st.integers(-5, 80))
    start = data.draw(st.one_of(st.none(), st.integers(-3, 5)))
    end = data.draw(st.one_of(st.none(), st.integers(-3, 5)))
    budget = data.draw(st.one_of(st.none(), st.integers(0, 50)))
    words = data.draw(st.sampled_from(["policy index", "zanzibarite", "quokka-flux leave",
                                       "readme", "\"create index\""]))  # fmt: skip
    calls = [
        ("SELECT * FROM kb.read_document(%s::uuid, %s, %s, %s)", (doc, start, end, budget)),
        ("SELECT * FROM kb.show_document(%s::uuid)", (doc,)),
        ("SELECT * FROM kb.explore_graph(%s::uuid, max_depth => %s)", (doc, depth)),
        (
            "SELECT * FROM kb.explore_graph(query_text => %s, document_ids => %s::uuid[])",
            (words, docs or None),
        ),
        ("SELECT * FROM kb.neighbor_chunks(%s, %s, %s)", (chunk, before, after)),
        ("SELECT * FROM kb.merge_neighbors(%s, %s, %s)", (chunk, before, after)),
        ("SELECT * FROM kb.chunk_details(ARRAY[%s]::bigint[])", (chunk,)),
        ("SELECT * FROM kb.document_list(document_ids => %s::uuid[])", (docs,)),
        ("SELECT * FROM kb.find_documents(%s)", (doc,)),
        (
            f"SELECT * FROM kb.hybrid_search(%s, '{VEC}', 20, document_ids => %s::uuid[])",
            (words, docs or None),
        ),
        (
            "SELECT * FROM kb.keyword_search(%s, 20, document_ids => %s::uuid[])",
            (words, docs or None),
        ),
    ]
    for query, params in calls:
        rows = _rows(reader, query, params)
        if "read_document" in query:  # not_found echoes the id asked for, nothing else
            assert [r[0] for r in rows if r[0] == "not_found"] in ([], ["not_found"])
            assert doc not in two_kbs.eng_ids() or [r[0] for r in rows] == ["not_found"]
            rows = [r for r in rows if r[0] != "not_found"]
        _no_eng(two_kbs, rows)


def test_a_reader_granted_every_collection_reads_both(two_kbs: TwoKbs, pg_url: str) -> None:
    role = f"all_reader_{uuid.uuid4().hex[:6]}"
    _create_role(pg_url, role)
    try:
        with psycopg.connect(two_kbs.url) as owner:
            grant(owner, role, read=True, write=False)
        with psycopg.connect(role_url(two_kbs.url, role), autocommit=True) as conn:
            assert conn.execute("SELECT kb.readable_collections()").fetchone() == (None,)
            assert conn.execute("SELECT count(*) FROM kb.document_list()").fetchone() == (5,)
        # the roles log in with the fixtures' password: the embedded test server trusts local
        # connections, so the login alone does not show it; the stored verifier does
        assert password_verifies(pg_url, role, PASSWORD)
        assert not password_verifies(pg_url, role, PASSWORD + "-wrong")
    finally:
        _drop_role(pg_url, role)
