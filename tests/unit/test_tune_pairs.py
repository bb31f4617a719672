"""pgkb models tune's training pairs: from the corpus's structure, labelled, held out, deduped."""

from __future__ import annotations

import json
from pathlib import Path

from loader.db.queries import TrainingPassage
from loader.evaluation.questions import Question
from loader.ops.tune import PairSources, build_pairs
from loader.ops.tune_pairs import (
    Pair,
    beir_pairs,
    dedupe,
    digest,
    hard_negatives,
    hold_out,
    negative_counts,
    normalise,
    question_pairs,
    structure_pairs,
    training_subset,
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


def test_structure_pairs_follow_the_corpus_not_its_ids() -> None:
    """The same corpus ingested again (other random document ids, other chunk ids) gives the
    same pairs in the same order: the trainer draws its batches by position, so the order
    decides the tuned model."""

    def corpus(ids: list[str], first_chunk: int) -> list[TrainingPassage]:
        found = []
        for n, doc in enumerate(ids):
            for index in range(2):
                found.append(
                    passage(
                        first_chunk + 2 * n + index,
                        doc,
                        index,
                        " ".join(f"{s} (table t{n}, part {index})." for s in LONG.split(". ")),
                        title=f"Page {n}",
                        path=f"Page {n} > Part {index}",
                        uri=f"/docs/page{n}.html",
                    )
                )
        return found

    def made(passages: list[TrainingPassage]) -> list[tuple[str, str, str]]:
        return [(p.kind, p.anchor, p.positive) for p in structure_pairs(passages, render)]

    ids = [f"{n:x}{n * 7919 % 97:02x}-ffff" for n in range(12)]
    one = corpus(ids, 1)
    again = corpus(ids[::-1], 500)  # ids drawn in another order, chunk ids further on
    assert made(one) == made(again)
    assert digest(structure_pairs(one, render)) == digest(structure_pairs(again, render))
    assert len(made(one)) > 24


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


def _manual() -> list[TrainingPassage]:
    """Two documents of two sections each, and a third on another topic sharing words."""
    return [
        passage(1, "v", 0, LONG, path="Routine Vacuuming", uri="/m/vacuum.html"),
        passage(
            2,
            "v",
            1,
            "Freezing marks old rows as visible to every transaction, so that transaction "
            "ids can be reused. A table must be frozen before two billion transactions pass.",
            path="Routine Vacuuming > Preventing Wraparound",
            uri="/m/vacuum.html",
        ),
        passage(
            3,
            "w",
            0,
            "Write-ahead logging records every change before the data files are written, so "
            "that a crash can be recovered by replaying the log from the last checkpoint on.",
            title="Reliability",
            path="Reliability > Write-Ahead Logging",
            uri="/m/wal.html",
        ),
        passage(
            4,
            "w",
            1,
            "Checkpoints flush every dirty page to disk and mark a point in the log from which "
            "recovery starts; their spacing trades crash recovery time against write load.",
            title="Reliability",
            path="Reliability > Checkpoints",
            uri="/m/wal.html",
        ),
    ]


def test_hard_negatives_other_sections_and_near_misses() -> None:
    passages = _manual()
    pairs = structure_pairs(passages, render, seed=0)
    by_chunk = {p.chunk_id: p for p in passages}
    assert {p.chunk_id for p in pairs} <= set(by_chunk)  # every pair knows its passage
    # BM25's ranking for each anchor, its own passage first (as for a real query)
    ranked = {
        normalise(p.anchor): [p.chunk_id, *[c for c in (4, 3, 2, 1) if c != p.chunk_id]]
        for p in pairs
    }
    with_negatives, dropped = hard_negatives(pairs, passages, ranked, render, seed=0)
    assert dropped == 0 and len(with_negatives) == len(pairs)
    kinds = negative_counts(with_negatives)
    assert set(kinds) == {"section", "near-miss"}, kinds
    for pair in with_negatives:
        own = by_chunk[pair.chunk_id]
        negative = pair.negative
        assert normalise(negative) != normalise(pair.positive)
        assert normalise(own.content) not in normalise(negative)  # never its own passage
        source = next(p for p in passages if normalise(p.content) in normalise(negative))
        if pair.negative_kind == "section":
            assert pair.kind != "title"  # a title's positive is the whole document's topic
            assert source.document_id == own.document_id
            assert source.heading_path != own.heading_path
        else:
            # the best-ranked hit of another document (its own document is skipped)
            assert source.document_id != own.document_id
            other = next(
                c
                for c in ranked[normalise(pair.anchor)]
                if by_chunk[c].document_id != own.document_id
            )
            assert source.chunk_id == other
        # given as its positive is: raw content for titles and headings, rendered otherwise
        assert negative.startswith(source.title) == (pair.kind == "span")
    # seeded: the same seed picks the same negatives, another seed other ones somewhere
    assert hard_negatives(pairs, passages, ranked, render, seed=0)[0] == with_negatives
    assert digest(with_negatives) != digest(pairs)


def test_hard_negatives_skip_every_positive_and_drop_pairs_without_one() -> None:
    passages = _manual()
    # a labelled question with two sources: neither may be the other's negative
    pairs = [
        Pair("how are old rows kept valid", render(passages[1]), "labelled", 2, "v"),
        Pair("how are old rows kept valid", render(passages[2]), "labelled", 3, "w"),
        Pair("what does a checkpoint do", passages[3].content, "heading", 4, "w"),
    ]
    ranked = {
        "how are old rows kept valid": [3, 2, 1, 4],
        "what does a checkpoint do": [3],  # only its own document's passages: no near miss
    }
    kept, dropped = hard_negatives(pairs, passages, ranked, render, seed=0)
    first, second, third = kept
    for pair in (first, second):
        assert pair.negative_kind in ("section", "near-miss")
        for source in (passages[1], passages[2]):
            assert normalise(source.content) not in normalise(pair.negative)
    assert third.negative_kind == "section" and third.negative == passages[2].content
    # no other section and no near miss: the pair is dropped, and counted
    lonely = [Pair("where is the log", passages[2].content, "heading", 3, "w")]
    assert hard_negatives(lonely, passages[2:3], {"where is the log": [3]}, render) == ([], 1)
    assert dropped == 0


def test_hard_negatives_of_beir_pairs_skip_texts_of_their_positives() -> None:
    passages = _manual()
    abstract = f"Vacuuming\n\n{LONG} {passages[1].content}"
    pairs = [Pair("why vacuum tables", abstract, "beir")]
    kept, _ = hard_negatives(pairs, passages, {"why vacuum tables": [1, 2, 3]}, render)
    assert kept[0].negative_kind == "near-miss"
    assert kept[0].negative == render(passages[2])  # 1 and 2 are parts of the positive


def test_training_subset_is_seeded_and_bounded() -> None:
    pairs = [Pair(f"anchor {i}", f"positive {i}", "span") for i in range(50)]
    assert training_subset(pairs, 80) == pairs
    one = training_subset(pairs, 20, seed=1)
    assert len(one) == 20 and one == training_subset(pairs, 20, seed=1)
    assert one != training_subset(pairs, 20, seed=2)
    assert one == [p for p in pairs if p in one]  # their order kept


def test_an_eval_question_never_appears_in_the_pairs(tmp_path: Path) -> None:
    passages = _manual()
    plain = build_pairs(passages, render, PairSources(), [], seed=0)[0]
    # each question is a text the structure makes an anchor of: a title, a heading path, a
    # sentence of a passage (the inverse cloze task) and a question with a labelled source
    asked = [
        plain[0].anchor,
        next(p.anchor for p in plain if p.kind == "heading"),
        *[p.anchor for p in plain if p.kind == "span"],
        "Where does recovery start after a crash?",
    ]
    questions = tmp_path / "q.json"
    questions.write_text(
        json.dumps(
            [
                {"id": f"q{i}", "question": q, "kind": "exact", "sources": ["wal.html"]}
                for i, q in enumerate(asked)
            ]
        )
    )
    labelled = PairSources(structure=True, pairs_file=questions)
    unheld = build_pairs(passages, render, labelled, [], seed=0)[0]
    assert {normalise(q) for q in asked} <= {normalise(p.anchor) for p in unheld}  # they would
    kept, held, _ = build_pairs(passages, render, labelled, asked, seed=0)
    assert held >= len(asked)
    anchors = {normalise(p.anchor) for p in kept}
    for question in asked:
        assert normalise(question) not in anchors
        assert not any(normalise(question) in a or a in normalise(question) for a in anchors)
    ranked = {a: [1, 2, 3, 4] for a in anchors}
    with_negatives, _ = hard_negatives(kept, passages, ranked, render)
    texts = [normalise(t) for p in with_negatives for t in (p.anchor, p.negative)]
    assert not any(normalise(q) == t for q in asked for t in texts)
