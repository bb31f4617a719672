"""kb.hybrid_search's lead slots and evidence-weighted keyword leg, on a tiny hand-made corpus.

Eight one-chunk documents with 3-dimensional vectors: six "near" pages whose vectors approach the
query [1, 0, 0] in a known order, and two pages pointing away from it that only the keyword leg
can find. Every expected order below follows from the RRF formula by hand, and holds on both
keyword backends (the SQL BM25 and pg_textsearch's index).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pgvector import Vector

from loader.errors import SqlState
from tests.helpers import raises_code, rows

pytestmark = pytest.mark.usefixtures("keyword_backend")  # both keyword backends

QUERY = Vector([1.0, 0.0, 0.0])

# (source, content, vector): near-1 is the vector leg's best chunk, near-6 its sixth
PAGES = [
    (f"near-{i}", f"ordinary page number {i} about everyday things", [1.0, 0.1 * i, 0.0])
    for i in range(1, 7)
] + [
    ("far-rare", "the tachyon drive manual: calibrating the tachyon_drive coil", [-1.0, 0.0, 0.2]),
    ("far-other", "spare parts list for the tachyon_drive housing", [-1.0, 0.3, 0.0]),
]


@pytest.fixture
def pages(conn: psycopg.Connection[Any]) -> dict[str, int]:
    model_id = conn.execute("SELECT kb.register_model('lead', 3, 'test')").fetchone()[0]
    ids: dict[str, int] = {}
    with conn.cursor() as cur:
        for source, content, vector in PAGES:
            cur.execute(
                "INSERT INTO kb.documents (source_uri, title, content_sha) "
                "VALUES (%s, %s, 'x') RETURNING id",
                (source, source),
            )
            doc = cur.fetchone()[0]
            cur.execute(
                "INSERT INTO kb.chunks (document_id, chunk_index, content, content_sha, "
                "token_count) VALUES (%s, 0, %s, 'x', 8) RETURNING id",
                (doc, content),
            )
            ids[source] = cur.fetchone()[0]
            cur.execute(
                "INSERT INTO kb.embeddings VALUES (%s, %s, %s)",
                (ids[source], model_id, Vector(vector)),
            )
    conn.commit()
    return ids


def hybrid(conn: psycopg.Connection[Any], text: str, **args: Any) -> list[dict[str, Any]]:
    names = ", ".join(f"{k} => %({k})s" for k in args)
    return rows(
        conn,
        "SELECT chunk_id, source_uri, score, vector_rank, keyword_rank FROM kb.hybrid_search("
        f"%(text)s, %(emb)s, match_count => 8, vector_candidates => 6, rrf_k => 10"
        f"{', ' if names else ''}{names})",
        {"text": text, "emb": QUERY, **args},
    )


def sources(got: list[dict[str, Any]]) -> list[str]:
    return [r["source_uri"] for r in got]


NEAR = [f"near-{i}" for i in range(1, 7)]


def test_the_vector_leg_alone_orders_the_near_pages(
    conn: psycopg.Connection[Any], pages: dict[str, int]
) -> None:
    got = rows(conn, "SELECT source_uri FROM kb.vector_search(%s, 8) ORDER BY rank", (QUERY,))
    assert [r["source_uri"] for r in got] == [*NEAR, "far-other", "far-rare"]


def test_a_confident_keyword_only_hit_gets_a_lead_slot(
    conn: psycopg.Connection[Any], pages: dict[str, int]
) -> None:
    # "tachyon" is held by the two far pages only; the best one holds every query word (share 1)
    # keyword weight 1: far-rare scores 1/11, below all six vector chunks (2/16 at rank 6)
    plain = hybrid(conn, "tachyon", keyword_weight=1.0, lead_slot=0)
    assert sources(plain)[:6] == NEAR
    assert plain[6]["source_uri"] == "far-rare" and plain[6]["keyword_rank"] == 1
    assert plain[6]["score"] == pytest.approx(1 / 11, rel=1e-12)
    # lead slot 3: the keyword leg's best chunk is placed before the third row
    led = hybrid(conn, "tachyon", keyword_weight=1.0, lead_slot=3)
    assert sources(led)[:5] == ["near-1", "near-2", "far-rare", "near-3", "near-4"]
    # it carries the score of the row it was placed before: scores never rise down the list
    assert led[2]["score"] == pytest.approx(2 / 13, rel=1e-12)
    assert [r["score"] for r in led] == sorted((r["score"] for r in led), reverse=True)
    # the default settings place it there too
    assert sources(hybrid(conn, "tachyon"))[2] == "far-rare"


def test_a_weak_keyword_leg_does_not_outvote_the_vector_leg(
    conn: psycopg.Connection[Any], pages: dict[str, int]
) -> None:
    # two words the corpus never uses carry most of the query's IDF mass: the keyword leg's best
    # chunk holds "tachyon" only, a share below one half, so it neither leads nor weighs much
    text = "tachyon quokkas wombats"
    got = hybrid(conn, text)
    assert sources(got)[:6] == NEAR
    far = [r for r in got if r["source_uri"] == "far-rare"]
    assert far and far[0]["keyword_rank"] == 1 and far[0]["score"] < 1.5 * 0.5**2 / 11
    # with the keyword leg at full weight whatever it matched, it would have reached the top 5
    flat = hybrid(conn, text, keyword_weight=3.0, keyword_confidence=0.0, lead_slot=0)
    assert "far-rare" in sources(flat)[:5]


def test_the_vector_leg_leads_too_when_an_exact_query_favours_the_keyword_leg(
    conn: psycopg.Connection[Any], pages: dict[str, int]
) -> None:
    # an identifier asks for exact matching: the keyword leg weighs exact_keyword_weight (3)
    # and its two chunks (3/11, 3/12) outscore the vector leg's best chunk (2/11)
    plain = hybrid(conn, "tachyon_drive", lead_slot=0)
    assert [r["keyword_rank"] for r in plain[:2]] == [1, 2]
    assert plain[2]["source_uri"] == "near-1" and plain[2]["vector_rank"] == 1
    # with lead slot 1 the vector leg's best chunk is placed before the first row, with its score
    led = hybrid(conn, "tachyon_drive", lead_slot=1)
    assert sources(led)[:3] == ["near-1", *sources(plain)[:2]]
    assert led[0]["score"] == pytest.approx(3 / 11, rel=1e-12) == led[1]["score"]
    # a chunk already within its slot stays where the fusion put it (default slot 3)
    assert sources(hybrid(conn, "tachyon_drive")) == sources(plain)


def test_lead_slot_is_validated(conn: psycopg.Connection[Any], pages: dict[str, int]) -> None:
    with raises_code(SqlState.INVALID_ARGUMENT, match="lead_slot"):
        rows(conn, "SELECT * FROM kb.hybrid_search('x', lead_slot => -1)")
    conn.rollback()
    # NULL turns the slots off, like 0; a huge slot acts as 1,000 (no row is lifted)
    off = hybrid(conn, "tachyon", keyword_weight=1.0, lead_slot=None)
    assert sources(off) == sources(hybrid(conn, "tachyon", keyword_weight=1.0, lead_slot=0))
    assert sources(hybrid(conn, "tachyon", keyword_weight=1.0, lead_slot=10**9)) == sources(off)
