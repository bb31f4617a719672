"""``pgkb ask``: an answer with citations, or "I don't know"."""

from __future__ import annotations

import sys
from typing import Any

import click

from loader.cli.base import App, emit_json, setting_option
from loader.cli.filters import filter_options, joined, search_filters
from loader.safety import echo, printable, secho


@click.command()
@click.argument("question", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--category", help="Only use documents of this category.")
@click.option("--show-context", is_flag=True, help="Also print the passages given to the model.")
@click.option(
    "--agent",
    is_flag=True,
    help="Use the reader agent (searches and reads further, at most agent_max_steps calls).",
)
@setting_option("chat_model", help="Chat model; unset: answer with the cited passages.")
@setting_option("chat_base_url", help="OpenAI-compatible chat API base URL.")
@setting_option("agent_max_steps", type=int, help="Model calls the reader agent may make.")
@setting_option("agent_chat_model", help="Chat model for the agent's steps; unset: chat_model.")
@filter_options
@click.pass_obj
def ask(
    app: App,
    question: tuple[str, ...],
    as_json: bool,
    category: str | None,
    show_context: bool,
    agent: bool,
    chat_model: str | None,
    chat_base_url: str | None,
    agent_max_steps: int | None,
    agent_chat_model: str | None,
    source_pattern: str | None,
    meta_filters: tuple[str, ...],
    collections: tuple[str, ...],
    min_similarity: float | None,
) -> None:
    """Answer QUESTION from the knowledge base, citing sources, or say "I don't know".

    Retrieves the best passages (hybrid search), abstains before calling any model when
    retrieval is too weak, otherwise asks the configured chat model and checks that its answer
    cites retrieved sources. With no chat model configured, prints the best passages.
    """
    from loader.answer.prompt import prepare_question
    from loader.app import AskRequest, KnowledgeBase
    from loader.providers.query_embedding import PrefetchedQuery, query_embedder

    settings = app.settings(
        chat_model=chat_model,
        chat_base_url=chat_base_url,
        agent_max_steps=agent_max_steps,
        agent_chat_model=agent_chat_model,
        min_similarity=min_similarity,
        collections=joined(collections),
    )
    text = " ".join(question)
    prepare_question(text)  # an empty question is an error before anything loads
    streaming = bool(settings.chat_model) and not agent and not as_json and sys.stdout.isatty()
    streamed: list[str] = []

    def on_text(piece: str) -> None:
        streamed.append(piece)
        echo(piece, nl=False)

    request = AskRequest(
        text,
        filters=search_filters(category, source_pattern, meta_filters, collections),
        agent=agent,
    )
    # the question's embedding (through serve_url when set) is computed while the connection
    # opens; the agent embeds its own queries later
    embedder = PrefetchedQuery(query_embedder(settings), prepare_question(text)[1])
    answer = KnowledgeBase(settings, embedder=embedder).ask(
        request, on_text=on_text if streaming else None
    )

    if as_json:
        emit_json(answer.to_json(show_context=show_context))
        return
    _print(answer, show_context=show_context, streamed="".join(streamed))


CLOSEST_SHOWN = 3
"""Passages shown after "I don't know": the closest retrieval found, labelled as not an answer."""
EXCERPT_CHARS = 240


def _excerpt(text: str) -> str:
    """The start of ``text`` on one line, cut at a word near EXCERPT_CHARS."""
    flat = " ".join(text.split())
    if len(flat) <= EXCERPT_CHARS:
        return flat
    return flat[:EXCERPT_CHARS].rsplit(" ", 1)[0] + " ..."


def _print(answer: Any, *, show_context: bool, streamed: str) -> None:
    if show_context and answer.context:
        secho("Context given to the model:", bold=True)
        for passage in answer.context:
            span = (
                f"chunk {passage.chunk_index}"
                if passage.chunk_end is None
                else f"chunks {passage.chunk_index}-{passage.chunk_end}"
            )
            echo(f"--- {passage.title} ({passage.source_uri}, {span})")
            echo(passage.content.strip())
        echo()

    if streamed:
        echo()
        if streamed.strip() != answer.answer:
            label = "Checked answer:" if answer.mode == "model" else "The retrieved passages:"
            secho(f"\n{label}", bold=True)
            echo(answer.answer)
    else:
        echo(answer.answer)

    if answer.abstained and answer.context:
        echo()
        click.secho("Closest passages (closest, not an answer):", bold=True)
        for passage in answer.context[:CLOSEST_SHOWN]:
            echo(f"  [{passage.title}] {passage.source_uri} (chunk {passage.chunk_index})")
            echo(f"    {_excerpt(passage.content)}")

    for note in answer.notes:
        secho(printable(f"note: {note}"), fg="yellow", err=True)
    if answer.hint:
        secho(printable(f"note: {answer.hint}"), fg="yellow", err=True)

    if answer.citations:
        echo()
        secho("Sources:", bold=True)
        shown: set[tuple[str, int]] = set()
        for passage in answer.citations:
            key = (passage.document_id, passage.chunk_index)
            if key in shown:
                continue
            shown.add(key)
            score = "" if passage.score is None else f", score {passage.score:.4f}"
            echo(f"  [{passage.title}] {passage.source_uri} (chunk {passage.chunk_index}{score})")
    if answer.related_documents:
        echo()
        label = "Closest sources found:" if answer.abstained else "Related documents:"
        secho(label, bold=True)
        for doc in answer.related_documents:
            relation = "" if doc.relation == "retrieved" else f" ({doc.relation})"
            echo(f"  {doc.title}: {doc.source_uri}{relation}")
