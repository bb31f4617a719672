"""``pgkb search``: the best chunks for a query, as a table or JSON (kb.hybrid_search)."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

import click

from loader.cli.base import App, emit_json
from loader.cli.filters import filter_options, joined, search_filters
from loader.errors import PgkbError
from loader.safety import echo, one_line

if TYPE_CHECKING:
    from loader.providers.query_embedding import PrefetchedQuery
    from loader.search import SearchHit

SNIPPET_CHARS = 160


def snippet(text: str, width: int = SNIPPET_CHARS) -> str:
    """The text on one line, cut at a word boundary to ``width`` characters."""
    flat = " ".join(text.split())
    return textwrap.shorten(flat, width=width, placeholder=" ...") if flat else ""


def render_table(hits: list[SearchHit], mode: str) -> str:
    """A readable table: rank, score, title, source, then the snippet on its own line."""
    lines = []
    for rank, hit in enumerate(hits, start=1):
        legs = []
        if hit.vector_rank is not None:
            legs.append(f"vector #{hit.vector_rank} sim {hit.vector_similarity:.3f}")
        if hit.keyword_rank is not None:
            legs.append(f"keyword #{hit.keyword_rank} score {hit.keyword_score:.3f}")
        if hit.rerank_score is not None:
            legs.append(f"rerank {hit.rerank_score:.3f}")
        where = one_line(hit.source_uri) + (
            f"  [{one_line(hit.heading_path)}]" if hit.heading_path else ""
        )
        lines.append(f"{rank:>2}. {hit.score:.4f}  {one_line(hit.title)}")
        lines.append(f"    {where}")
        lines.append(f"    chunk {hit.chunk_index} · {', '.join(legs)}")
        lines.append("    " + snippet(hit.content))
        lines.append("")
    header = f"{len(hits)} result(s), {mode} search"
    return header + "\n\n" + "\n".join(lines).rstrip()


@click.command()
@click.argument("query", nargs=-1, required=True)
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(min=1, max=50),
    default=None,
    help="Results to return, 1 to 50 (default: match_count, 5).",
)
@click.option("--category", help="Only documents of this category.")
@click.option(
    "--doc",
    "doc_ids",
    multiple=True,
    metavar="ID",
    help="Only this document (its uuid); repeat for several.",
)
@click.option(
    "--mode",
    type=click.Choice(["hybrid", "vector", "keyword"]),
    default="hybrid",
    show_default=True,
    help="Which retriever(s) to use.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of result objects.")
@filter_options
@click.pass_obj
def search(
    app: App,
    query: tuple[str, ...],
    limit: int | None,
    category: str | None,
    doc_ids: tuple[str, ...],
    mode: str,
    as_json: bool,
    source_pattern: str | None,
    meta_filters: tuple[str, ...],
    collections: tuple[str, ...],
    min_similarity: float | None,
) -> None:
    """Search the knowledge base for QUERY and print the best chunks.

    Hybrid mode embeds QUERY with the active embedding model (through a running pgkb serve when
    PGKB_SERVE_URL is set) and fuses the vector and keyword rankings (kb.hybrid_search);
    keyword mode needs no model. Quote phrases ("write ahead log"),
    exclude words with -word.
    """
    settings = app.settings(min_similarity=min_similarity, collections=joined(collections))
    filters = search_filters(category, source_pattern, meta_filters, collections)
    text = " ".join(query).strip()
    if not text:
        raise PgkbError("the search query is empty", hint='pgkb search "how do I ..."')
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 arrive as lone surrogates
        raise PgkbError(
            "the search query holds bytes that are not UTF-8 text",
            hint="pgkb reads its arguments as UTF-8: type the query again in a UTF-8 terminal, "
            "or convert it (iconv -f latin1 -t utf-8)",
        ) from None
    prefetched: PrefetchedQuery | None = None
    if mode != "keyword":
        # the query is embedded (by serve_url, else by the local model in a child process)
        # while this process loads the database driver and the search, and connects: started
        # before those imports, the model's load and theirs take the time of the longer
        from loader.providers.query_embedding import PrefetchedQuery, query_embedder

        prefetched = PrefetchedQuery(query_embedder(settings), text)
    from loader.app import KnowledgeBase, SearchOptions, SearchRequest

    request = SearchRequest(
        text,
        SearchOptions(
            mode=mode,  # type: ignore[arg-type]
            limit=limit,
            filters=filters,
            min_similarity=min_similarity,
            document_ids=doc_ids,
        ),
    )
    # a failed rerank: a warning on stderr, the fused order kept
    result = KnowledgeBase(settings, embedder=prefetched).search(request)
    if as_json:
        data: list[dict[str, Any]] = [hit.to_dict() for hit in result.hits]
        emit_json(data)
    elif not result.hits:
        echo("no results", err=True)
    else:
        echo(render_table(list(result.hits), mode))
    for note in result.notes:
        echo(f"note: {note}", err=True)
