"""The checked stream: a model's reply passed on as it arrives, only as far as the citation check
lets it through. Every reply is fed in pieces of every size; what the client received must be
the checked answer (or, if the check ever disagreed, end with it)."""

from __future__ import annotations

import uuid

import pytest

from loader.answer.citations import check_citations
from loader.answer.passages import Passage
from loader.answer.stream import CORRECTION, CheckedStream, safe_cut

INDEX = Passage(uuid.uuid4(), "Index Types", "/docs/indexes-types.html", 2, "B-tree.", 0.03)
VACUUM = Passage(uuid.uuid4(), "VACUUM", "/docs/sql-vacuum.html", 0, "VACUUM reclaims.", 0.02)
CONTEXT = [INDEX, VACUUM]

REPLIES = [
    "B-tree is the default [Index Types]. VACUUM reclaims storage [VACUUM].",
    "B-tree is the default [Index Types] and [Wikipedia] agrees.",
    "The default is B-tree, says [Wikipedia].",
    "I don't know",
    "I don't know [Index Types]",
    "<think>maybe [Index Types]</think>B-tree [Index Types].",
    "Use `CREATE INDEX ... [ONLY]` with B-tree [Index Types].",
    "B-tree [Index Types](https://example.org) is a link, then [VACUUM] cites.",
    "```sql\nSELECT [x]\n```\nB-tree [Index Types; VACUUM].",
    "B-tree [Index Types] .\n\nSecond paragraph [VACUUM] , done.",
    # Markdown that would load or run: what arrives of it, at any point, is text
    'B-tree [Index Types]. ![pixel](https://evil.example/t.png "a pixel") and [the form]'
    '(javascript:alert(document.cookie) "click") and <img src="https://evil.example/i.png"'
    ' alt="x"> done [VACUUM].',
]


def streamed(reply: str, size: int) -> tuple[str, list[str]]:
    sent: list[str] = []
    stream = CheckedStream(CONTEXT, sent.append)
    before_finish: list[str] = []
    for i in range(0, len(reply), size):
        stream.feed(reply[i : i + size])
    before_finish.extend(sent)
    stream.finish(check_citations(reply, CONTEXT).answer)
    return "".join(sent), before_finish


@pytest.mark.parametrize("reply", REPLIES)
@pytest.mark.parametrize("size", [1, 3, 8, 1000])
def test_what_is_streamed_is_the_checked_answer(reply: str, size: int) -> None:
    final = check_citations(reply, CONTEXT)
    text, early = streamed(reply, size)
    assert text == final.answer
    assert CORRECTION not in text
    if final.abstained:
        assert early == []  # not a word of a reply that ends as "I don't know"
    assert "Wikipedia" not in "".join(early)


@pytest.mark.parametrize("size", [1, 3, 8, 1000])
def test_no_prefix_a_client_receives_loads_or_runs_anything(size: int) -> None:
    from markdown_it import MarkdownIt

    reply = REPLIES[-1]
    sent: list[str] = []
    stream = CheckedStream(CONTEXT, sent.append)
    for i in range(0, len(reply), size):
        stream.feed(reply[i : i + size])
        html = MarkdownIt("commonmark").render("".join(sent))
        assert "<img" not in html and "javascript:" not in html and "evil.example" not in html
    stream.finish(check_citations(reply, CONTEXT).answer)
    assert "".join(sent) == "B-tree [Index Types]. pixel and the form and done [VACUUM]."


def test_text_flows_before_the_reply_ends() -> None:
    reply = REPLIES[0] + " More words follow here, and more still."
    sent: list[str] = []
    stream = CheckedStream(CONTEXT, sent.append)
    for i in range(0, len(reply), 4):
        stream.feed(reply[i : i + 4])
    assert "".join(sent).startswith("B-tree is the default [Index Types].")
    assert len(sent) > 3  # in pieces, as it came


def test_a_final_answer_that_disagrees_comes_after_a_correction_line() -> None:
    sent: list[str] = []
    stream = CheckedStream(CONTEXT, sent.append)
    stream.feed("B-tree is the default [Index Types]. ")
    stream.finish("I don't know")  # e.g. the model failed and the fallback answer differs
    assert "".join(sent).endswith(CORRECTION + "I don't know")


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        ("one two", 3),
        ("one [Index", 3),
        ("see `code [x", 3),
        ("a ```sql\nSELECT [x] ", 1),
        ("<think>a b c", 0),
        ("nospace", 0),
        ('a b ![p](https://x.example/t.png "t', 3),
        ("a b [x](javascript:alert(1", 3),
        ('a b <img src="https://x.example/i.png" alt', 3),
        ("a < b c", 5),
    ],
)
def test_safe_cut(text: str, cut: int) -> None:
    assert safe_cut(text) == cut
