"""The web interface's parts that need no database: session cookies and CSRF values, the
sign-in's return address, the highlighted snippet's pieces, citations as links, the graph's
layout (200 nodes stay apart and inside the picture)."""

from __future__ import annotations

import types
import uuid

from loader.graph.catalogue import GraphNode
from loader.web import auth
from loader.web.app import answer_pieces, is_web_path, safe_next, url
from loader.web.graph_svg import HEIGHT, WIDTH, layout
from loader.web.reads import MARK_END, MARK_START, split_marks


def test_sessions_are_signed_expire_and_follow_the_token() -> None:
    sessions = auth.Sessions("tok-1", lifetime=60)
    value = sessions.issue(now=1000)
    assert "tok-1" not in value
    assert sessions.valid(value, now=1059)
    assert not sessions.valid(value, now=1061)  # expired
    body, _, signature = value.rpartition(".")
    assert not sessions.valid(f"{body}.{signature[:-2]}xx", now=1000)  # forged signature
    expiry, nonce = body.split(".")
    assert not sessions.valid(f"{int(expiry) + 999}.{nonce}.{signature}", now=1000)  # extended
    assert not auth.Sessions("tok-2").valid(value, now=1000)  # another token: signed out
    assert not sessions.valid(None) and not sessions.valid("") and not sessions.valid("a.b")
    assert sessions.token_matches(" tok-1 ") and not sessions.token_matches("tok-")
    csrf = sessions.csrf_for(value)
    assert sessions.csrf_matches(value, csrf)
    assert not sessions.csrf_matches(sessions.issue(now=1000), csrf)
    assert not sessions.csrf_matches(None, csrf) and not sessions.csrf_matches(value, "")


def test_double_submit_and_cross_site_requests() -> None:
    value = auth.new_csrf_value()
    assert auth.same_values(value, value) and value != auth.new_csrf_value()
    assert not auth.same_values(value, None) and not auth.same_values("", "")
    host = "127.0.0.1:8000"
    assert not auth.cross_site({"origin": "http://127.0.0.1:8000"}, host)
    assert not auth.cross_site({"sec-fetch-site": "same-origin"}, host)
    assert not auth.cross_site({}, host)
    assert auth.cross_site({"origin": "https://evil.example"}, host)
    assert auth.cross_site({"origin": "null"}, host)
    assert auth.cross_site(
        {"sec-fetch-site": "cross-site", "origin": "http://127.0.0.1:8000"}, host
    )
    assert auth.cross_site({"sec-fetch-site": "same-site"}, host)


def test_only_paths_of_this_server_are_returned_to() -> None:
    assert safe_next("/search?q=x") == "/search?q=x"
    for bad in (None, "", "//evil.example/", "/\\evil.example", "https://evil.example/", "x",
                "/a\r\nSet-Cookie: x"):  # fmt: skip
        assert safe_next(bad) == "/"


def test_web_paths_and_addresses() -> None:
    assert is_web_path("/") and is_web_path("/documents/x") and is_web_path("/static/app.js")
    assert not is_web_path("/v1/search") and not is_web_path("/healthz")
    assert url("/", {"q": "a b&c", "page": None, "type": ""}) == "/?q=a+b%26c"
    assert url("/d", {"x": [1, 2]}, "chunk-3") == "/d?x=1&x=2#chunk-3"


def test_marked_pieces() -> None:
    text = f"a {MARK_START}b{MARK_END} c {MARK_START}<d>{MARK_END}"
    assert split_marks(text) == [("a ", False), ("b", True), (" c ", False), ("<d>", True)]
    assert split_marks("plain") == [("plain", False)]
    assert split_marks(f"x {MARK_START}open") == [("x open", False)]


def test_citations_become_links_to_their_chunks() -> None:
    doc = uuid.uuid4()
    passage = types.SimpleNamespace(title="Travel", document_id=doc, chunk_index=3)
    answer = types.SimpleNamespace(
        answer="Trains [Travel], not [Unknown] <b>x</b> [travel]", citations=[passage]
    )
    pieces = answer_pieces(answer)
    href = f"/documents/{doc}?chunk=3#chunk-3"
    assert pieces == [
        ("Trains ", None), ("[Travel]", href), (", not [Unknown] <b>x</b> ", None),
        ("[travel]", href),
    ]  # fmt: skip


def _node(i: int, edges: list[dict[str, str]], doc_type: str = "manual") -> GraphNode:
    return GraphNode(f"id-{i}", f"Document {i} with a long title to cut", f"/kb/{i}.md", None,
                     doc_type, None, [], None, None, edges)  # fmt: skip


def test_a_graph_of_200_documents_is_laid_out_inside_the_picture() -> None:
    nodes = [
        _node(i, [{"target_id": f"id-{(i * 7 + k) % 200}", "relation_type": t, "origin": "link"}
                  for k, t in ((1, "references"), (3, "supplements"))],
              "policy" if i % 5 == 0 else "manual")
        for i in range(200)
    ]  # fmt: skip
    picture = layout(nodes, start="id-0")
    assert len(picture.nodes) == 200 and len(picture.edges) == 400
    for n in picture.nodes:
        assert 0 <= n.x <= WIDTH and 0 <= n.y <= HEIGHT and n.r > 0
    assert sum(n.major for n in picture.nodes) <= 26  # labels of the most connected only
    start = next(n for n in picture.nodes if n.start)
    assert start.major and start.label.endswith("…") and len(start.label) <= 32
    assert [t for t, _ in picture.node_types] == ["policy", "manual"]
    assert [t for t, _ in picture.relation_types] == ["references", "supplements"]
    # the same graph is drawn the same way
    again = layout(nodes, start="id-0")
    assert [(n.x, n.y) for n in again.nodes] == [(n.x, n.y) for n in picture.nodes]
    # sized by degree
    lonely = layout([_node(0, []), _node(1, [{"target_id": "id-0", "relation_type": "references",
                                               "origin": "mention"}]), _node(2, [])])  # fmt: skip
    sizes = {n.document_id: n.r for n in lonely.nodes}
    assert sizes["id-0"] > sizes["id-2"]
    assert layout([]).nodes == [] and len(layout([_node(0, [])]).nodes) == 1
