"""pgkb models tune's training pairs: from the corpus's structure, labelled, held out, deduped."""

from __future__ import annotations

import json
from pathlib import Path

from loader.db.queries import TrainingPassage
from loader.evaluation.questions import Question
from loader.ops.tune_pairs import (
    Pair,
    beir_pairs,
    dedupe,
    digest,
    hold_out,
    normalise,
    question_pairs,
    structure_pairs,
)

LONG = (
    "Vacuum reclaims the storage held by dead rows in a table. It runs in the background "
    "by default and never blocks readers of that table. Without it a busy table grows until "
    "its disk fills, and old transaction ids wrap around after some billions of writes."
)


def passage(
    chunk_id: int,
    doc: str,
    index: int,
    content: str,
    *,
    title: str = "Routine Vacuuming",
    path: str = "",
    uri: str | None = None,
) -> TrainingPassage:
    return TrainingPassage(chunk_id, doc, uri or f"/docs/{doc}.html", title, path, index, content)


def render(p: TrainingPassage) -> str:
    return f"{p.title} > {p.heading_path}\n\n{p.content}"


def test_structure_pairs_title_heading_and_span() -> None:
    passages = [
        passage(1, "d1", 0, LONG, path="Routine Vacuuming"),
        passage(
            2,
            "d1",
            1,
            LONG.replace("Vacuum", "Autovacuum"),
            path="Routine Vacuuming > The Autovacuum Daemon",
        ),
        passage(
            3,
            "d1",
            2,
            "The daemon wakes up every minute and checks each database in turn for work.",
            path="Routine Vacuuming > The Autovacuum Daemon",
        ),
    ]
    pairs = structure_pairs(passages, render, seed=0)
    kinds = [p.kind for p in pairs]
    assert ("Routine Vacuuming", LONG) in [
        (p.anchor, p.positive) for p in pairs if p.kind == "title"
    ]
    headings = [p.anchor for p in pairs if p.kind == "heading"]
    # each heading path once, with its section's first passage, the title put first once
    # ("Routine Vacuuming" with the lead is the title pair already: deduplicated)
    assert headings == ["Routine Vacuuming > The Autovacuum Daemon"]
    heading_pair = next(p for p in pairs if p.anchor.endswith("Daemon"))
    assert heading_pair.positive.startswith("Autovacuum reclaims")
    spans = [p for p in pairs if p.kind == "span"]
    assert len(spans) == 2  # the third passage is too short for a span
    for span in spans:
        assert span.anchor in LONG or span.anchor in LONG.replace("Vacuum", "Autovacuum")
        assert span.anchor not in span.positive  # the inverse cloze task: cut from its passage
        assert span.positive.startswith("Routine Vacuuming > ")  # as the model reads it
    assert kinds.count("title") == 1
    # the title pair and the first heading pair share the anchor and positive: one is kept
    assert len({(normalise(p.anchor), normalise(p.positive)) for p in pairs}) == len(pairs)


def test_structure_pairs_are_seeded() -> None:
    passages = [
        passage(i, f"d{i}", 0, " ".join(f"{s} (table t{i})." for s in LONG.split(". ")))
        for i in range(1, 30)
    ]
    one = structure_pairs(passages, render, seed=1)
    assert one == structure_pairs(list(reversed(passages)), render, seed=1)  # order-free
    other = structure_pairs(passages, render, seed=2)
    assert [p.anchor for p in one if p.kind == "span"] != [
        p.anchor for p in other if p.kind == "span"
    ]


def test_ambiguous_anchors_are_dropped() -> None:
    passages = [
        passage(1, "a", 0, LONG, title="Introduction"),
        passage(2, "b", 0, LONG.replace("table", "index"), title="Introduction"),
        passage(3, "c", 0, LONG.replace("table", "view"), title="Views"),
    ]
    titles = [p.anchor for p in structure_pairs(passages, render) if p.kind == "title"]
    assert titles == ["Views"]


def test_dedupe_ignores_case_and_punctuation() -> None:
    pairs = [
        Pair("What is vacuum?", "Vacuum reclaims storage.", "labelled"),
        Pair("what is VACUUM", "vacuum reclaims storage", "labelled"),
        Pair("Vacuum", "vacuum", "title"),  # its own positive
        Pair("What is WAL?", "Vacuum reclaims storage.", "labelled"),
    ]
    assert [p.anchor for p in dedupe(pairs)] == ["What is vacuum?", "What is WAL?"]


def test_eval_questions_are_held_out() -> None:
    pairs = [
        Pair("Routine Vacuuming > The Autovacuum Daemon", "x " * 20, "heading"),
        Pair("How often does the autovacuum daemon wake up", "y " * 20, "span"),
        Pair("Vacuum reclaims storage held by dead rows", "z " * 20, "span"),
        Pair("Backups should be tested", "w " * 20, "span"),
    ]
    questions = [
        "routine vacuuming: the autovacuum daemon",  # the same words
        "How often does the autovacuum daemon wake up between runs?",  # contains the anchor
        "Which command reclaims storage held by dead rows?",  # shares most of its words
    ]
    kept, held = hold_out(pairs, questions)
    assert [p.anchor for p in kept] == ["Backups should be tested"]
    assert held == 3
    assert hold_out(pairs, []) == (pairs, 0)


def test_question_pairs_take_the_source_passage_sharing_most_words(tmp_path: Path) -> None:
    passages = [
        passage(1, "v", 0, "Routine maintenance keeps a database healthy.", uri="/m/vacuum.html"),
        passage(2, "v", 1, "Vacuum reclaims the storage of dead rows.", uri="/m/vacuum.html"),
        passage(3, "w", 0, "WAL archiving copies segments away.", uri="/m/wal.html"),
    ]
    questions = [
        Question("q1", "What reclaims storage of dead rows?", "paraphrase", ("vacuum.html",)),
        Question("q2", "Where do archived segments go?", "exact", ("wal.html", "gone.html")),
        Question("q3", "What is the capital of France?", "unanswerable", ()),
    ]
    pairs, missing = question_pairs(questions, passages, render)
    assert [(p.anchor, p.positive.split("\n\n")[1]) for p in pairs] == [
        ("What reclaims storage of dead rows?", "Vacuum reclaims the storage of dead rows."),
        ("Where do archived segments go?", "WAL archiving copies segments away."),
    ]
    assert missing == ["gone.html"]


def test_beir_pairs(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text(
        "\n".join(
            json.dumps(d)
            for d in (
                {"_id": "d1", "title": "Vacuum", "text": "Reclaims storage."},
                {"_id": "d2", "title": "", "text": "Archives WAL."},
                {"_id": "d3", "title": "Locks", "text": "Block writers."},
            )
        )
    )
    (tmp_path / "queries.jsonl").write_text(
        json.dumps({"_id": "1", "text": "what reclaims storage"})
        + "\n"
        + json.dumps({"_id": "2", "text": "where does wal go"})
    )
    qrels = tmp_path / "half.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n1\td1\t1\n2\td2\t1\n2\td3\t0\n")
    pairs, judged = beir_pairs(tmp_path, qrels_file=qrels)
    assert [(p.anchor, p.positive) for p in pairs] == [
        ("what reclaims storage", "Vacuum\n\nReclaims storage."),
        ("where does wal go", "Archives WAL."),
    ]
    assert judged == 2
    assert digest(pairs) == digest(list(pairs))
    assert digest(pairs) != digest(pairs[:1])
