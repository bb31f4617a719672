"""The answer ``pgkb ask`` returns, and the ways one is settled: abstained, extractive (or
fallback), or the model's reply after its citations were checked.

Building an answer reads nothing: the related documents come from the graph neighbours the
retrieval step fetched (:attr:`loader.answer.retrieval.Retrieval.neighbours`)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from loader import telemetry
from loader.answer.citations import CheckedReply, cited_passages
from loader.answer.context import related_documents
from loader.answer.extractive import extractive_answer
from loader.answer.passages import Passage, RelatedDocument
from loader.answer.prompt import IDK
from loader.graph.catalogue import Neighbour

Neighbours = Mapping[uuid.UUID, Sequence[Neighbour]]
"""Graph neighbours of the retrieved (and cited) documents, fetched before the answer."""


@dataclasses.dataclass
class Answer:
    """What ``pgkb ask`` returns: the answer, whether it abstained, and its evidence."""

    question: str
    answer: str
    abstained: bool
    mode: str
    """``model`` (chat model, checked), ``extractive`` (no model configured), ``fallback``
    (the model failed: the hits are the answer), ``abstained`` (gate, before any model call),
    ``agent`` (the reader agent)."""
    citations: list[Passage]
    related_documents: list[RelatedDocument]
    context: list[Passage] = dataclasses.field(default_factory=list)
    """The passages the model was (or would have been) given."""
    removed_citations: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    abstention: dict[str, Any] | None = None
    model_reply: str | None = None
    """The model's reply before checking, when checking changed it."""
    hint: str | None = None
    steps: int = 0
    """Model calls made (the agent's steps; 1 for a plain answer, 0 when none was made)."""

    def to_json(self, *, show_context: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "question": self.question,
            "answer": self.answer,
            "abstained": self.abstained,
            "mode": self.mode,
            "citations": [p.citation_json() for p in self.citations],
            "related_documents": [d.to_json() for d in self.related_documents],
            "removed_citations": self.removed_citations,
            "notes": self.notes,
            "steps": self.steps,
        }
        if self.abstention is not None:
            data["abstention"] = self.abstention
        if self.model_reply is not None:
            data["model_reply"] = self.model_reply
        if self.hint:
            data["hint"] = self.hint
        if show_context:
            data["context"] = [p.citation_json() for p in self.context]
        return data


def abstained_answer(
    question: str,
    passages: Sequence[Passage],
    reason: str,
    signals: Mapping[str, Any] | None = None,
    *,
    neighbours: Neighbours,
) -> Answer:
    """ "I don't know" with the closest sources found, and why."""
    return Answer(
        question=question,
        answer=IDK,
        abstained=True,
        mode="abstained",
        citations=[],
        related_documents=related_documents([], passages, neighbours),
        context=list(passages),
        notes=[f"retrieval too weak to answer: {reason}"],
        abstention={"reason": reason, "signals": dict(signals or {})},
    )


def fallback_answer(
    question: str,
    passages: Sequence[Passage],
    *,
    mode: str,
    neighbours: Neighbours,
    notes: Sequence[str] = (),
    hint: str | None = None,
    steps: int = 0,
) -> Answer:
    """The extractive answer: the best passages, cited, instead of prose."""
    shown = list(passages[:3])
    return Answer(
        question=question,
        answer=extractive_answer(question, shown),
        abstained=False,
        mode=mode,
        citations=shown,
        related_documents=related_documents(shown, passages, neighbours),
        context=list(passages),
        notes=list(notes),
        hint=hint,
        steps=steps,
    )


def checked_answer(
    question: str,
    raw: str | None,
    checked: CheckedReply,
    context: Sequence[Passage],
    retrieved: Sequence[Passage],
    *,
    neighbours: Neighbours,
    steps: int,
    mode: str = "model",
    notes: Sequence[str] = (),
) -> Answer:
    all_notes = list(notes)
    if checked.removed_citations:
        all_notes.append(
            "removed citations of sources that were not retrieved: "
            + ", ".join(f"[{c}]" for c in checked.removed_citations)
        )
    if checked.note:
        all_notes.append(checked.note)
    cited = cited_passages(context, checked.cited_titles)
    return Answer(
        question=question,
        answer=checked.answer,
        abstained=checked.abstained,
        mode=mode,
        citations=cited,
        related_documents=related_documents(cited, retrieved, neighbours),
        context=list(context),
        removed_citations=checked.removed_citations,
        notes=all_notes,
        model_reply=raw if (raw or "").strip() != checked.answer else None,
        steps=steps,
    )


def record(answer: Answer) -> None:
    """Tell the metrics how ``answer`` was settled (its mode; an abstention and its stage:
    ``gate`` before any model call, ``model`` when the reply said so or cited nothing)."""
    telemetry.event("answer", mode=answer.mode)
    if answer.abstained:
        telemetry.event("abstention", stage="gate" if answer.mode == "abstained" else "model")
