"""The graph's pure parts: outline, summary, type, entities, link resolution, mentions, and the
chat model's reply parser (fenced, truncated, schema-violating, enormous JSON; bad edges)."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest

from loader.graph import links, llm, metadata
from loader.graph.metadata import TocEntry
from loader.ingest.extract import extract


@dataclasses.dataclass(frozen=True)
class C:
    index: int
    heading_path: str
    content: str


def chunks(*items: tuple[str, str]) -> list[C]:
    return [C(i, path, text) for i, (path, text) in enumerate(items)]


# --- outline ------------------------------------------------------------------------------------


def test_outline_from_heading_paths_below_the_shared_part() -> None:
    doc = chunks(
        ("SQL Commands > CREATE INDEX", "CREATE INDEX — define a new index"),
        ("SQL Commands > CREATE INDEX > Synopsis", "CREATE INDEX name ON table"),
        ("SQL Commands > CREATE INDEX > Description", "Builds an index."),
        ("SQL Commands > CREATE INDEX > Description > Storage", "fillfactor"),
        ("SQL Commands > CREATE INDEX > Description", "More text."),
        ("SQL Commands > CREATE INDEX > Examples", "CREATE INDEX ..."),
    )
    assert metadata.outline(doc) == [
        TocEntry("Synopsis", 1, 1, 1),
        TocEntry("Description", 1, 2, 4),
        TocEntry("Storage", 2, 3, 3),
        TocEntry("Examples", 1, 5, 5),
    ]


def test_outline_of_numbered_plain_text() -> None:
    doc = chunks(
        ("", "1 Scope\nThis policy covers laptops."),
        ("", "2 Rules\nLock the screen.\n2.1 Passwords\nUse a manager."),
        ("", "2.2 Travel\nCarry it."),
        ("", "3 Exceptions\nAsk security."),
    )
    assert metadata.outline(doc) == [
        TocEntry("1 Scope", 1, 0, 0),
        TocEntry("2 Rules", 1, 1, 2),
        TocEntry("2.1 Passwords", 2, 1, 1),
        TocEntry("2.2 Travel", 2, 2, 2),
        TocEntry("3 Exceptions", 1, 3, 3),
    ]


def test_outline_without_headings_is_chunk_windows_and_bounded() -> None:
    short = chunks(("", "Just one paragraph of notes."))
    assert metadata.outline(short, "Notes") == [TocEntry("Notes", 1, 0, 0)]
    huge = [C(i, "", f"word{i} " * 5) for i in range(10_000)]
    toc = metadata.outline(huge, "Log")
    assert len(toc) == metadata.MAX_WINDOWS
    assert toc[0].chunk_start == 0 and toc[-1].chunk_end == 9_999
    assert all(a.chunk_end + 1 == b.chunk_start for a, b in itertools.pairwise(toc))


def test_a_deep_outline_keeps_the_shallow_levels() -> None:
    doc = [C(i, f"Root > Part {i // 100} > Item {i}", "x") for i in range(1000)]
    toc = metadata.outline(doc)
    assert len(toc) == 10 and {e.level for e in toc} == {1}


def test_summary_type_and_entities() -> None:
    doc = chunks(
        ("CREATE INDEX", "CREATE INDEX"),
        (
            "CREATE INDEX > Description",
            "CREATE INDEX constructs an index on the specified column(s). Indexes are used "
            "to enhance performance. The maintenance_work_mem setting limits memory. "
            "Write-Ahead Log records each change.",
        ),
        (
            "CREATE INDEX > Parameters",
            "fillfactor sets maintenance_work_mem for the Write-Ahead Log.",
        ),
        ("CREATE INDEX > Examples", "See also Write-Ahead Log."),
    )
    summary = metadata.summary(doc, "CREATE INDEX")
    assert summary.startswith("CREATE INDEX constructs an index on the specified column(s).")
    assert len(summary) <= metadata.SUMMARY_CHARS + 4
    assert metadata.doc_type("CREATE INDEX", "/m/sql-createindex.html", doc) == "reference"
    entities = metadata.key_entities("CREATE INDEX", doc)
    assert entities[:2] == ["Write-Ahead Log", "maintenance_work_mem"]
    assert "CREATE INDEX" not in entities
    policy = chunks(
        (
            "Acceptable Use Policy",
            "Employees shall not share passwords. Violation of this policy ...",
        )
    )
    assert metadata.doc_type("Acceptable Use Policy", "/p/aup.md", policy) == "policy"
    assert metadata.doc_type("Notes", "/n/notes.txt", chunks(("", "Shopping: milk."))) == "general"


# --- links --------------------------------------------------------------------------------------


def test_resolving_links() -> None:
    src = "/docs/html/sql-createindex.html"
    assert (
        links.resolve(src, "sql-altertable.html#SQL-ALTERTABLE-NOTES")
        == "/docs/html/sql-altertable.html"
    )
    assert links.resolve(src, "../guide/intro%20page.md?x=1") == "/docs/guide/intro page.md"
    assert links.resolve(src, "/abs/other.html") == "/abs/other.html"
    assert links.resolve(src, "file:///abs/x.html") == "/abs/x.html"
    for ignored in (
        "#notes",
        "",
        "https://www.postgresql.org/",
        "mailto:a@b.c",
        "sql-createindex.html#x",
    ):
        assert links.resolve(src, ignored) is None
    assert (
        links.resolve("https://example.com/a/b.html", "c.html#x") == "https://example.com/a/c.html"
    )
    resolved = links.resolve_links(
        src, [("a.html", ""), ("a.html#x", "A page"), ("b.html", "B"), ("#top", "Top")]
    )
    assert resolved == [
        links.Link("/docs/html/a.html", "a.html", "A page"),
        links.Link("/docs/html/b.html", "b.html", "B"),
    ]


def test_html_links_skip_navigation_and_tables_of_contents() -> None:
    page = b"""<html><head><title>CREATE INDEX</title></head><body>
    <div class="navheader"><a href="sql-creategroup.html">Prev</a>
    <a accesskey="u" href="sql-commands.html">Up</a></div>
    <div class="toc"><a href="#notes">Notes</a><a href="sql-createindex.html#x">Self</a></div>
    <h1>CREATE INDEX</h1><p>See <a href="sql-altertable.html">ALTER TABLE</a> and
    <a href="indexes.html#ix">Chapter 11</a>.<a class="indexterm" name="id-1"></a></p>
    <dl><dt>acosd, <a class="indexterm" href="functions-math.html">Math</a></dt></dl>
    <div class="navfooter"><a href="sql-createlanguage.html">Next</a></div></body></html>"""
    assert extract(page, "sql-createindex.html").links == [
        ("functions-math.html", "Math"),  # a back-of-the-book index entry
        ("sql-altertable.html", "ALTER TABLE"),
        ("indexes.html#ix", "Chapter 11"),
    ]
    markdown = b"# Guide\n\nRead [the setup](setup.md) first.\n\n```\n[not](a-link.md)\n```\n"
    assert extract(markdown, "guide.md").links == [("setup.md", "the setup")]


def test_mentions_of_titles_and_file_names() -> None:
    index = links.MentionIndex.build(
        [
            ("1", "Routine Database Maintenance Tasks", "/m/maintenance.html"),
            ("2", "CREATE INDEX", "/m/sql-createindex.html"),  # too short to be mentioned by title
            ("3", "Overview", "/m/a/index.html"),
            ("4", "Overview", "/m/b/index.html"),  # the same file name twice: ambiguous
            ("5", "Security Policy for Laptops", "/p/laptops.md"),
        ]
    )
    found = index.find(
        "9",
        [
            "Read routine database maintenance tasks. Then CREATE INDEX.\n"
            "The page sql-createindex.html says more; index.html is ambiguous.",
            "Our Security Policy for Laptops applies.",
        ],
    )
    assert found == {
        "2": "The page sql-createindex.html says more; index.html is ambiguous.",
        "1": "Read routine database maintenance tasks.",
        "5": "Our Security Policy for Laptops applies.",
    }
    assert index.find("1", ["Routine Database Maintenance Tasks"]) == {}  # not itself


# --- the chat model's reply ---------------------------------------------------------------------

CANDIDATES = [
    llm.Candidate("D1", "11111111-1111-1111-1111-111111111111", "ALTER TABLE", ""),
    llm.Candidate("D2", "22222222-2222-2222-2222-222222222222", "Indexes", ""),
]
ME = "99999999-9999-9999-9999-999999999999"
FALLBACK = metadata.DocumentMetadata("lead", "general", ["x"], [TocEntry("Intro", 1, 0, 4)])


def parse(
    text: str | None, chunk_count: int = 5
) -> tuple[metadata.DocumentMetadata, list[llm.ProposedEdge]]:
    return llm.parse_reply(
        text, document_id=ME, chunk_count=chunk_count, candidates=CANDIDATES, fallback=FALLBACK
    )


GOOD = {
    "summary": "Defines an index.",
    "doc_type": "reference",
    "key_entities": ["btree", "fillfactor", "btree", 7],
    "toc": [
        {"title": "Synopsis", "level": 1, "chunk_start": 0, "chunk_end": 0},
        {"title": "", "level": 9, "chunk_start": 4, "chunk_end": 2},
        {"title": "Far", "level": 1, "chunk_start": 3, "chunk_end": 99},
        {"title": "Bad", "level": 1, "chunk_start": "x", "chunk_end": None},
    ],
    "relations": [
        {"to": "D1", "relation_type": "references", "evidence": "mentions ALTER TABLE"},
        {"from": "D2", "relation_type": "supplements", "evidence": "chapter", "confidence": 3},
        {"to": "D7", "relation_type": "references"},
        {"to": ME, "relation_type": "references"},
        {"to": "D1", "relation_type": "cites"},
        {"to": "D1", "relation_type": "references"},
        {"to": "D1", "from": "D2", "relation_type": "references"},
        {"to": "33333333-3333-3333-3333-333333333333", "relation_type": "depicts"},
    ],
}


def test_a_good_reply_is_validated() -> None:
    meta, edges = parse(json.dumps(GOOD))
    assert meta.summary == "Defines an index." and meta.doc_type == "reference"
    assert meta.key_entities == ["btree", "fillfactor"]
    assert meta.toc == [
        TocEntry("Synopsis", 1, 0, 0),
        TocEntry("Section 2", 6, 2, 4),  # inverted range put in order, level clamped, title filled
        TocEntry("Far", 1, 3, 4),  # clamped to the last chunk
    ]
    assert meta.origin == "llm"
    assert edges == [
        llm.ProposedEdge(ME, CANDIDATES[0].document_id, "references", "mentions ALTER TABLE"),
        llm.ProposedEdge(CANDIDATES[1].document_id, ME, "supplements", "chapter", 1.0),
    ]


@pytest.mark.parametrize(
    "wrap",
    [
        lambda s: f"```json\n{s}\n```",
        lambda s: f"<think>let me think {{not json}}</think>\n{s}",
        lambda s: f"Here you go:\n```\n{s}\n```\nThanks!",
    ],
)
def test_fences_and_think_blocks_are_stripped(wrap: object) -> None:
    assert callable(wrap)
    meta, _ = parse(wrap(json.dumps(GOOD)))
    assert meta.summary == "Defines an index."


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (None, "empty reply"),
        ("", "empty reply"),
        (json.dumps(GOOD)[:120], "no JSON object|malformed JSON"),
        ('{"summary": "x", "toc": [', "no JSON object|malformed JSON"),
        ("<think>still thinking about {", "unfinished <think>"),
        ("[1, 2]", "no JSON object"),
        ('{"doc_type": "manual"}', "no summary"),
        ('{"summary": 42}', "no summary"),
        ('{"summary": "' + "x" * 200_000 + '"}', "reply too long"),
    ],
)
def test_unusable_replies_raise(text: str | None, reason: str) -> None:
    with pytest.raises(llm.ReplyError, match=reason):
        parse(text)


def test_schema_violations_fall_back_field_by_field() -> None:
    meta, edges = parse(
        '{"summary": "S", "doc_type": "novel", "key_entities": "x", "toc": {}, "relations": "no"}'
    )
    assert meta.doc_type == "general"
    assert meta.key_entities == FALLBACK.key_entities and meta.toc == FALLBACK.toc
    assert edges == []


def test_candidates_are_ranked_by_shared_entities_and_words() -> None:
    profiles = [
        ("a", "Index Types", "B-tree and hash indexes.", ["btree", "hash"]),
        ("b", "CREATE INDEX", "Defines an index.", ["btree"]),
        ("c", "Vacuum", "Reclaims storage.", []),
        ("me", "Index Types", "", ["btree"]),
    ] + [(f"x{i}", f"Index note {i}", "", []) for i in range(20)]
    ranked = llm.rank_candidates("me", "Index Types", "about indexes", ["btree", "hash"], profiles)
    assert [c.document_id for c in ranked[:2]] == ["a", "b"]  # 3*2+2, 3*1+0
    assert len(ranked) == llm.MAX_CANDIDATES and "c" not in [c.document_id for c in ranked]
    assert [c.short_id for c in ranked[:3]] == ["D1", "D2", "D3"]
    assert llm.rank_candidates("me", "T", "", [], [("me", "T", "", [])]) == []


def test_agent_chat_model_falls_back_to_chat_model() -> None:
    from loader.settings import load_settings

    assert load_settings(env={}, chat_model="big").agent_model == "big"
    cheap = load_settings(env={"PGKB_AGENT_CHAT_MODEL": "small"}, chat_model="big")
    assert (cheap.agent_chat_model, cheap.agent_model) == ("small", "small")
    assert load_settings(env={}).agent_model is None
