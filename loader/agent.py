"""The reader agent: a short, isolated tool loop for questions that need more than five snippets.

:func:`run_agent` (``pgkb ask --agent``) and :func:`ask_agent` (for other programs) start from
the first hybrid search and a short catalogue of the documents it matched, then let the chat
model call tools for at most ``agent_max_steps`` model calls (default 4):

``search_chunks``
    hybrid search (``kb.hybrid_search`` through :func:`loader.search.search`), optionally scoped
    to document ids;
``read_document``
    ``kb.read_document``, budget-guarded: a document or chunk range that does not fit 75% of the
    model's context window minus what the conversation already uses comes back as the
    document's outline and chunk count, so the model asks for a range;
``explore_graph``
    ``kb.explore_graph``, offered only when that function exists (its parameters are read from
    ``pg_proc``, so the tool always matches the installed function).

Every tool argument is validated before it reaches SQL: malformed JSON, unknown tools, unknown or
malformed document ids, inverted or out-of-range chunk ranges and repeated identical calls are
answered with a message the model can act on (ranges are clamped when that is unambiguous).
The caller receives only the distilled answer, its citations (checked against every chunk the
agent saw) and related documents, never the transcript. A model or network failure returns the
hybrid hits as the answer instead of failing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from loader.answer import (
    CONFIGURE_HINT,
    IDK,
    MAX_QUERY_CHARS,
    SYSTEM_RULES,
    Answer,
    ChatError,
    ChatModel,
    Passage,
    QueryEmbedder,
    RelatedDocument,
    abstained_answer,
    check_citations,
    checked_answer,
    default_gate,
    embed_query,
    estimate_tokens,
    fallback_answer,
    fit_passages,
    format_passage,
    messages_tokens,
    prepare_question,
    search_passages,
    truncate_question,
)
from loader.errors import PgkbError
from loader.safety import parse_int
from loader.settings import Settings

log = logging.getLogger(__name__)

READ_BUDGET_SHARE = 0.75
"""read_document may fill this share of the context window, minus what is already used."""
FIRST_MESSAGE_SHARE = 0.4
"""The first hits may fill this share of the context window (the rest is for tools and answer)."""
MIN_TOOL_BUDGET = 64
"""Below this many free tokens, reading and searching are refused: time to answer."""
MAX_SEARCH_LIMIT = 10
CATALOGUE_CANDIDATES = 20
CATALOGUE_SIZE = 8

AGENT_RULES = (
    SYSTEM_RULES
    + """

You are the reader agent of a knowledge base. The user's message holds the first search results
and a catalogue of matching documents. If they do not answer the question, call the tools to find
more: search_chunks (search again, with other words or inside given documents), read_document
(read a document or a range of its chunks; when it is too long you get its outline, then ask for
a chunk range)<graph>. Chunks returned by tools count as chunks: cite them by title too.
You have at most <steps> turns in all, including your final answer; each turn may call several
tools. Do not repeat a call you already made. When you have the evidence, answer."""
)

LAST_TURN = (
    "This is your last turn: no more tool calls. Answer now from the chunks above, citing their "
    f'titles, or answer exactly "{IDK}".'
)


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> Any:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


SEARCH_TOOL = _tool(
    "search_chunks",
    "Hybrid (meaning + keyword) search of the knowledge base. Returns chunks with their title, "
    "source_uri, document_id and chunk_index. Give document_ids to search only inside those "
    "documents.",
    {
        "query": {"type": "string", "description": "What to look for."},
        "document_ids": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Only search these documents (ids from the catalogue or results).",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT},
    },
    ["query"],
)

READ_TOOL = _tool(
    "read_document",
    "Read a document's chunks in order: the whole document, or chunks chunk_start..chunk_end "
    "(inclusive, counted from 0). When that does not fit the remaining context budget, returns "
    "the document's outline (headings with their chunk ranges) and chunk count instead: then "
    "ask for a smaller range.",
    {
        "document_id": {"type": "string"},
        "chunk_start": {"type": "integer", "minimum": 0},
        "chunk_end": {"type": "integer", "minimum": 0},
    },
    ["document_id"],
)


class ToolRefusal(Exception):
    """A tool call the agent refuses, with a message the model can act on."""


@dataclasses.dataclass(frozen=True)
class DocumentInfo:
    document_id: str
    title: str
    source_uri: str
    chunk_count: int


_DOCUMENTS_SQL = """
SELECT d.id::text, d.title, d.source_uri,
       (SELECT count(*) FROM kb.chunks c WHERE c.document_id = d.id)::int
  FROM kb.documents d
 WHERE d.id = ANY(%s::uuid[])
"""

_GRAPH_FUNCTION_SQL = """
SELECT p.oid::regprocedure::text,
       coalesce(p.proargnames, '{}'::text[]),
       coalesce(p.proargmodes::text[], '{}'::text[]),
       array(SELECT format_type(t, NULL)
               FROM unnest(coalesce(p.proallargtypes, p.proargtypes::oid[])) AS t),
       p.pronargs, p.pronargdefaults,
       coalesce(obj_description(p.oid, 'pg_proc'), '')
  FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'kb' AND p.proname = 'explore_graph'
 ORDER BY p.pronargs DESC
 LIMIT 1
"""


@dataclasses.dataclass(frozen=True)
class GraphParam:
    name: str
    sql_type: str
    required: bool


@dataclasses.dataclass(frozen=True)
class GraphFunction:
    """``kb.explore_graph`` as installed: its input parameters and comment."""

    signature: str
    params: tuple[GraphParam, ...]
    comment: str

    def tool(self) -> Any:
        properties = {p.name: _json_schema(p.sql_type) for p in self.params}
        return _tool(
            "explore_graph",
            "Explore the document graph (typed relations between documents: references, "
            "supersedes, supplements, contradicts, depicts). "
            + (self.comment.strip() or f"Calls {self.signature}."),
            properties,
            [p.name for p in self.params if p.required],
        )


def _json_schema(sql_type: str) -> dict[str, Any]:
    base = sql_type.removesuffix("[]")
    if base in ("integer", "bigint", "smallint"):
        item: dict[str, Any] = {"type": "integer"}
    elif base in ("real", "double precision", "numeric"):
        item = {"type": "number"}
    elif base == "boolean":
        item = {"type": "boolean"}
    elif base in ("jsonb", "json"):
        item = {"type": "object"}
    else:
        item = {"type": "string"}
    return {"type": "array", "items": item} if sql_type.endswith("[]") else item


def graph_function(conn: psycopg.Connection[Any]) -> GraphFunction | None:
    """``kb.explore_graph`` when it exists (the graph tool is offered only then)."""
    row = conn.execute(_GRAPH_FUNCTION_SQL).fetchone()
    if row is None:
        return None
    signature, names, modes, types, nargs, ndefaults, comment = row
    params: list[GraphParam] = []
    inputs = [
        (names[i] if i < len(names) else "", types[i])
        for i in range(len(types))
        if not modes or modes[i] in ("i", "b", "v")
    ]
    for position, (name, sql_type) in enumerate(inputs):
        if not name:
            return None  # an unnamed parameter cannot be offered as a tool argument
        params.append(GraphParam(name, sql_type, position < int(nargs) - int(ndefaults)))
    return GraphFunction(str(signature), tuple(params), str(comment))


# --- argument validation ------------------------------------------------------------------


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ToolRefusal(f"{name} must be an integer, got {json.dumps(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    parsed = parse_int(value) if isinstance(value, str) else None  # ASCII digits, <= 18 of them
    if parsed is not None:
        return parsed
    shown = json.dumps(value, default=str)
    shown = shown if len(shown) <= 40 else shown[:40] + "..."
    raise ToolRefusal(f"{name} must be an integer (at most 18 digits), got {shown}")


def _optional_int(args: Mapping[str, Any], name: str) -> int | None:
    return None if args.get(name) is None else _as_int(name, args[name])


def _as_uuid(name: str, value: Any) -> str:
    try:
        return str(uuid.UUID(str(value).strip()))
    except (ValueError, AttributeError):
        raise ToolRefusal(
            f"{name} {json.dumps(value, default=str)} is not a document id (a UUID such as "
            "'0b3c...'); use a document_id from the catalogue or from search results"
        ) from None


class Toolbox:
    """The agent's tools over one connection, with validation and the budget guard."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        settings: Settings,
        embedder: QueryEmbedder,
        *,
        category: str | None = None,
    ) -> None:
        self.conn = conn
        self.settings = settings
        self.embedder = embedder
        self.category = category
        self.graph = graph_function(conn)
        self.seen: dict[tuple[str, int], Passage] = {}
        self.graph_documents: list[RelatedDocument] = []
        self._documents: dict[str, DocumentInfo] = {}
        self._calls: dict[str, int] = {}

    # -- the tools offered ------------------------------------------------------------------

    def tools(self) -> list[Any]:
        tools = [SEARCH_TOOL, READ_TOOL]
        if self.graph is not None:
            tools.append(self.graph.tool())
        return tools

    def remember(self, passages: Sequence[Passage]) -> None:
        for passage in passages:
            self.seen.setdefault((passage.document_id, passage.chunk_index), passage)

    def documents(self, ids: Sequence[str]) -> dict[str, DocumentInfo]:
        missing = [i for i in ids if i not in self._documents]
        if missing:
            for doc_id, title, uri, count in self.conn.execute(
                _DOCUMENTS_SQL, (missing,)
            ).fetchall():
                self._documents[doc_id] = DocumentInfo(doc_id, title, uri, int(count))
        return {i: self._documents[i] for i in ids if i in self._documents}

    # -- dispatch ---------------------------------------------------------------------------

    def call(self, name: str, raw_arguments: str, *, step: int, budget: int) -> str:
        """Run one tool call; always returns the text for the model (results or an error)."""
        try:
            arguments = json.loads(raw_arguments) if raw_arguments.strip() else {}
        except RecursionError:
            return _error(f"the arguments of {name} are nested too deeply; send a flat object")
        except json.JSONDecodeError as exc:
            return _error(
                f"the arguments of {name} are not valid JSON ({exc.msg} at character "
                f"{exc.pos}); send one JSON object, e.g. "
                + (
                    '{"query": "index types"}'
                    if name == "search_chunks"
                    else '{"document_id": "<id>", "chunk_start": 0, "chunk_end": 5}'
                )
            )
        if not isinstance(arguments, dict):
            return _error(f"the arguments of {name} must be a JSON object, got {raw_arguments!r}")
        key = name + " " + json.dumps(arguments, sort_keys=True, default=str)
        if key in self._calls:
            return _error(
                f"repeated call: you already called {name} with these arguments in turn "
                f"{self._calls[key]}; its result is above. Use it, change the arguments, or answer."
            )
        self._calls[key] = step
        handlers = {"search_chunks": self.search_chunks, "read_document": self.read_document}
        if self.graph is not None:
            handlers["explore_graph"] = self.explore_graph
        handler = handlers.get(name)
        if handler is None:
            return _error(f"there is no tool {name!r}; the tools are: {', '.join(handlers)}")
        if budget < MIN_TOOL_BUDGET:
            return _error(
                f"the context budget is used up (about {budget} tokens left); answer now from "
                "the chunks above"
            )
        try:
            result = handler(arguments, budget)
        except ToolRefusal as exc:
            return _error(str(exc))
        except psycopg.Error as exc:
            # a SQL error (e.g. bad filter) must not end the conversation; roll back and say so
            self.conn.rollback()
            detail = (exc.diag.message_primary or str(exc)).strip()
            return _error(f"{name} failed in the database: {detail}")
        except PgkbError as exc:
            # e.g. search() refusing an argument: the model can correct it
            if self.conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                self.conn.rollback()
            return _error(f"{name} failed: {exc.message}")
        return json.dumps(result, ensure_ascii=False, default=str)

    # -- search_chunks ----------------------------------------------------------------------

    def search_chunks(self, args: Mapping[str, Any], budget: int) -> dict[str, Any]:
        notes = _unknown_keys(args, {"query", "document_ids", "limit"})
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolRefusal('search_chunks needs a non-empty "query" string')
        query = query.strip()[:MAX_QUERY_CHARS]
        limit = self.settings.match_count
        if args.get("limit") is not None:
            asked = _as_int("limit", args["limit"])
            limit = min(max(asked, 1), MAX_SEARCH_LIMIT)
            if limit != asked:
                notes.append(f"limit {asked} clamped to {limit} (1..{MAX_SEARCH_LIMIT})")
        document_ids = self._document_ids(args.get("document_ids"))
        embedding = embed_query(self.embedder, query, notes)
        _hits, passages = search_passages(
            self.conn,
            self.settings,
            query,
            embedding,
            limit=limit,
            category=self.category,
            document_ids=document_ids,
        )
        results: list[Passage] = []
        used = 0
        for passage in passages:
            cost = estimate_tokens(passage.content) + 40
            if used + cost > budget:
                notes.append(
                    f"{len(passages) - len(results)} more result(s) left out: the context "
                    "budget is nearly used"
                )
                break
            used += cost
            results.append(passage)
        self.remember(results)
        out: dict[str, Any] = {
            "results": [
                {
                    "title": p.title,
                    "source_uri": p.source_uri,
                    "document_id": p.document_id,
                    "chunk_index": p.chunk_index,
                    "score": None if p.score is None else round(p.score, 5),
                    "content": p.content,
                }
                for p in results
            ]
        }
        if not results and not notes:
            notes.append("no chunk matched; try other words or drop document_ids")
        if notes:
            out["notes"] = notes
        return out

    def _document_ids(self, value: Any) -> list[str] | None:
        if value is None or value == []:
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise ToolRefusal("document_ids must be a list of document ids")
        if len(value) > 50:
            raise ToolRefusal("document_ids may name at most 50 documents")
        ids = [_as_uuid("document id", v) for v in value]
        known = self.documents(ids)
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise ToolRefusal(
                f"unknown document id(s): {', '.join(unknown)}; use document_id values from "
                "the catalogue or from search results"
            )
        return ids

    # -- read_document ----------------------------------------------------------------------

    def read_document(self, args: Mapping[str, Any], budget: int) -> dict[str, Any]:
        notes = _unknown_keys(args, {"document_id", "chunk_start", "chunk_end"})
        if args.get("document_id") is None:
            raise ToolRefusal('read_document needs "document_id"')
        doc_id = _as_uuid("document_id", args["document_id"])
        info = self.documents([doc_id]).get(doc_id)
        if info is None:
            raise ToolRefusal(
                f"unknown document id {doc_id}; use a document_id from the catalogue or from "
                "search results"
            )
        if info.chunk_count == 0:
            raise ToolRefusal(f"document {doc_id} ({info.title}) has no chunks")
        last = info.chunk_count - 1
        start = (
            None if args.get("chunk_start") is None else _as_int("chunk_start", args["chunk_start"])
        )
        end = None if args.get("chunk_end") is None else _as_int("chunk_end", args["chunk_end"])
        if start is not None and end is not None and start > end:
            raise ToolRefusal(
                f"chunk_start {start} is after chunk_end {end}; ask for chunk_start <= chunk_end "
                f"(this document has chunks 0..{last})"
            )
        if start is not None and start > last:
            raise ToolRefusal(
                f"chunk_start {start} is past the end: {info.title!r} has {info.chunk_count} "
                f"chunks (0..{last})"
            )
        if start is not None and start < 0:
            notes.append(f"chunk_start {start} clamped to 0")
            start = 0
        if end is not None and end < 0:
            raise ToolRefusal(f"chunk_end {end} is negative; chunks are numbered 0..{last}")
        if end is not None and end > last:
            notes.append(f"chunk_end {end} clamped to {last} (the document's last chunk)")
            end = last
        rows = self.conn.execute(
            "SELECT * FROM kb.read_document(%s::uuid, %s, %s, %s)",
            (doc_id, start, end, budget),
        )
        columns = [c.name for c in rows.description or []]
        records = [dict(zip(columns, r, strict=True)) for r in rows.fetchall()]
        return self._read_result(info, start, end, budget, records, notes)

    def _read_result(
        self,
        info: DocumentInfo,
        start: int | None,
        end: int | None,
        budget: int,
        records: list[dict[str, Any]],
        notes: list[str],
    ) -> dict[str, Any]:
        status = str(records[0]["status"]) if records else "empty"
        out: dict[str, Any] = {
            "document_id": info.document_id,
            "title": info.title,
            "source_uri": info.source_uri,
            "chunk_count": info.chunk_count,
            "status": status,
        }
        if status == "chunks":
            passages = [
                Passage(
                    document_id=info.document_id,
                    title=info.title,
                    source_uri=info.source_uri,
                    chunk_index=int(r["chunk_index"]),
                    content=str(r["content"]),
                    heading_path=str(r.get("heading_path") or ""),
                    chunk_id=None if r.get("chunk_id") is None else int(r["chunk_id"]),
                )
                for r in records
            ]
            self.remember(passages)
            out["chunks"] = [
                {"chunk_index": p.chunk_index, "heading_path": p.heading_path, "content": p.content}
                for p in passages
            ]
        elif status == "outline":
            span = (
                "the whole document"
                if start is None and end is None
                else f"chunks {start if start is not None else 0}.."
                f"{end if end is not None else info.chunk_count - 1}"
            )
            tokens = records[0].get("range_tokens")
            outline, left_out = _outline(records, budget)
            out["outline"] = outline
            out["message"] = (
                f"{span} ({tokens} tokens) does not fit the remaining context budget of "
                f"about {budget} tokens, so here is its outline instead (chunk ranges: "
                "heading, tokens); call read_document again with a smaller "
                "chunk_start..chunk_end range, choosing the section you need "
                f"(chunks 0..{info.chunk_count - 1})"
            )
            if left_out:
                out["message"] += (
                    f"; the outline itself was cut: {left_out} more section(s) after chunk "
                    f"{records[len(outline) - 1]['last_chunk_index']}, read a range from there "
                    "to see their outline"
                )
        else:
            out["message"] = "no chunk in that range"
        if notes:
            out["notes"] = notes
        return out

    # -- explore_graph ----------------------------------------------------------------------

    def explore_graph(self, args: Mapping[str, Any], budget: int) -> dict[str, Any]:
        assert self.graph is not None
        params = {p.name: p for p in self.graph.params}
        notes = _unknown_keys(args, set(params))
        missing = [p.name for p in self.graph.params if p.required and args.get(p.name) is None]
        if missing:
            raise ToolRefusal(f"explore_graph needs {', '.join(missing)}")
        names: list[str] = []
        values: list[Any] = []
        for name, value in args.items():
            param = params.get(name)
            if param is None or value is None:
                continue
            if param.sql_type == "uuid":
                value = _as_uuid(name, value)
                if not self.documents([value]):
                    raise ToolRefusal(
                        f"unknown document id {value} for {name}; use a document_id from the "
                        "catalogue or from search results"
                    )
            elif param.sql_type in ("integer", "bigint", "smallint"):
                value = _as_int(name, value)
            elif param.sql_type in ("jsonb", "json"):
                from psycopg.types.json import Jsonb

                value = Jsonb(value)
            names.append(name)
            values.append(value)
        query = sql.SQL("SELECT * FROM kb.explore_graph({})").format(
            sql.SQL(", ").join(
                sql.SQL("{} => %s::{}").format(sql.Identifier(n), sql.SQL(params[n].sql_type))
                for n in names
            )
        )
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, values)
            rows = cur.fetchall()
        kept: list[dict[str, Any]] = []
        used = 0
        for row in rows:
            cost = estimate_tokens(json.dumps(row, default=str))
            if used + cost > budget:
                notes.append(f"{len(rows) - len(kept)} more row(s) left out (context budget)")
                break
            used += cost
            kept.append(row)
            self._note_graph_document(row)
        out: dict[str, Any] = {"rows": kept}
        if notes:
            out["notes"] = notes
        return out

    def _note_graph_document(self, row: Mapping[str, Any]) -> None:
        doc_id = row.get("document_id") or row.get("target_id") or row.get("id")
        title = row.get("title")
        uri = row.get("source_uri")
        if doc_id and title and uri:
            relation = str(row.get("relation_type") or row.get("relation") or "graph")
            self.graph_documents.append(
                RelatedDocument(str(doc_id), str(title), str(uri), relation)
            )


def _outline(records: Sequence[Mapping[str, Any]], budget: int) -> tuple[list[str], int]:
    """One line per section ("0-9: Heading > Sub (730 tokens)"), as many as fit ``budget``."""
    lines: list[str] = []
    used = 0
    for record in records:
        first, last = record["chunk_index"], record["last_chunk_index"]
        span = f"{first}" if first == last else f"{first}-{last}"
        heading = record.get("heading_path") or "(no heading)"
        line = f"{span}: {heading} ({record.get('token_count')} tokens)"
        cost = estimate_tokens(line) + 2
        if len(lines) >= 3 and used + cost > budget - 150:
            break
        lines.append(line)
        used += cost
    return lines, len(records) - len(lines)


def _unknown_keys(args: Mapping[str, Any], allowed: set[str]) -> list[str]:
    unknown = sorted(set(args) - allowed)
    if not unknown:
        return []
    return [f"ignored unknown argument(s): {', '.join(unknown)}"]


def _error(message: str) -> str:
    return json.dumps({"error": message}, ensure_ascii=False)


# --- the loop -----------------------------------------------------------------------------


def catalogue(passages: Sequence[Passage], toolbox: Toolbox) -> list[dict[str, Any]]:
    """The documents the first search matched, best first, with their size."""
    order: dict[str, list[Passage]] = {}
    for passage in passages:
        order.setdefault(passage.document_id, []).append(passage)
    ids = list(order)[:CATALOGUE_SIZE]
    infos = toolbox.documents(ids)
    entries = []
    for doc_id in ids:
        info = infos.get(doc_id)
        hits = order[doc_id]
        entries.append(
            {
                "document_id": doc_id,
                "title": hits[0].title,
                "source_uri": hits[0].source_uri,
                "chunk_count": info.chunk_count if info else None,
                "matching_chunks": sorted({p.chunk_index for p in hits}),
            }
        )
    return entries


def first_message(
    question: str, passages: Sequence[Passage], entries: Sequence[Mapping[str, Any]], ctx: int
) -> str:
    blocks = []
    for passage in passages:
        blocks.append(
            f"--- chunk ---\ndocument_id: {passage.document_id}\n{format_passage(passage)}"
        )
    lines = [
        f"- {e['title']} | document_id: {e['document_id']} | source_uri: {e['source_uri']} | "
        f"chunks: {e['chunk_count']} | matching chunks: "
        + ", ".join(str(i) for i in e["matching_chunks"])
        for e in entries
    ]
    return (
        "First search results (hybrid search for the question):\n\n"
        + "\n\n".join(blocks)
        + "\n\n--- end of chunks ---\n\nCatalogue of matching documents:\n"
        + "\n".join(lines)
        + f"\n\nQuestion: {truncate_question(question, ctx // 4)}"
    )


def run_agent(
    conn: psycopg.Connection[Any],
    settings: Settings,
    question: str,
    *,
    embedder: QueryEmbedder,
    client: ChatModel | None,
    category: str | None = None,
    gate: Any = None,
) -> Answer:
    """Answer ``question`` with the reader agent; never raises for model or network failures.

    Abstains before any model call when the abstention gate says so (as ``pgkb ask`` does);
    with no chat model configured the answer is extractive, as for ``pgkb ask``.
    """
    question, query_text = prepare_question(question)
    notes: list[str] = []
    embedding = embed_query(embedder, query_text, notes)
    answer = _run(conn, settings, question, query_text, embedding, embedder, client, category, gate)
    answer.notes[:0] = notes
    return answer


def _run(
    conn: psycopg.Connection[Any],
    settings: Settings,
    question: str,
    query_text: str,
    embedding: Sequence[float] | None,
    embedder: QueryEmbedder,
    client: ChatModel | None,
    category: str | None,
    gate: Any,
) -> Answer:
    wide_hits, wide = search_passages(
        conn,
        settings,
        query_text,
        embedding,
        limit=max(CATALOGUE_CANDIDATES, settings.match_count),
        category=category,
    )
    hits, passages = wide_hits[: settings.match_count], wide[: settings.match_count]
    decision = (gate or default_gate)(conn, settings, query_text, hits)
    if not hits or decision.abstain:
        reason = decision.reason if decision.abstain else "retrieval found nothing"
        return abstained_answer(conn, question, passages, reason, decision.signals)
    if client is None:
        return fallback_answer(conn, question, passages, mode="extractive", hint=CONFIGURE_HINT)

    toolbox = Toolbox(conn, settings, embedder, category=category)
    toolbox.remember(passages)
    tools = toolbox.tools()
    graph_note = ", explore_graph (follow relations between documents)" if toolbox.graph else ""
    system = AGENT_RULES.replace("<graph>", graph_note).replace(
        "<steps>", str(settings.agent_max_steps)
    )
    entries = catalogue(wide, toolbox)
    shown = fit_passages(passages, int(settings.chat_context_tokens * FIRST_MESSAGE_SHARE))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {
            "role": "user",
            "content": first_message(question, shown, entries, settings.chat_context_tokens),
        },
    ]
    tools_tokens = estimate_tokens(json.dumps(tools))
    read_limit = int(settings.chat_context_tokens * READ_BUDGET_SHARE)
    notes: list[str] = []

    for step in range(1, settings.agent_max_steps + 1):
        last = step == settings.agent_max_steps
        if last and step > 1:
            messages.append({"role": "user", "content": LAST_TURN})
        try:
            reply = client.complete(messages, tools=tools, tool_choice="none" if last else "auto")
        except ChatError as exc:
            log.warning("reader agent: chat model failed at step %d: %s", step, exc.message)
            return fallback_answer(
                conn,
                question,
                passages,
                mode="fallback",
                notes=[f"{exc.message}; showing the hybrid search hits instead"],
                steps=step,
            )
        if reply.tool_calls and not last:
            messages.append(reply.assistant_message())
            for call in reply.tool_calls:
                used = messages_tokens(messages) + tools_tokens
                result = toolbox.call(
                    call.name, call.arguments, step=step, budget=read_limit - used
                )
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            continue
        if reply.tool_calls and not (reply.content or "").strip():
            notes.append(
                f"the agent was still calling tools after {step} model calls "
                f"(agent_max_steps = {settings.agent_max_steps})"
            )
            break
        seen = list(toolbox.seen.values())
        checked = check_citations(reply.content, seen)
        answer = checked_answer(
            conn, question, reply.content, checked, seen, wide, steps=step, mode="agent"
        )
        answer.context = list(passages)
        answer.related_documents = _merge_related(
            answer.related_documents, toolbox.graph_documents, answer.citations
        )
        return answer

    return fallback_answer(
        conn,
        question,
        passages,
        mode="fallback",
        notes=[*notes, "no final answer from the agent; showing the hybrid search hits instead"],
        steps=settings.agent_max_steps,
    )


def _merge_related(
    related: Sequence[RelatedDocument],
    graph: Sequence[RelatedDocument],
    cited: Sequence[Passage],
) -> list[RelatedDocument]:
    cited_ids = {p.document_id for p in cited}
    seen = {d.document_id for d in related} | cited_ids
    merged = list(related)
    for doc in graph:
        if doc.document_id not in seen:
            seen.add(doc.document_id)
            merged.append(doc)
    return merged


def ask_agent(
    question: str,
    settings: Settings | None = None,
    *,
    category: str | None = None,
) -> dict[str, Any]:
    """The reader agent for other programs: returns the distilled answer as a JSON-ready dict.

    ``{"answer", "abstained", "citations": [...], "related_documents": [...], ...}``; opens its
    own connection with ``settings`` (default: pgkb's configuration).
    """
    from loader.answer import ChatClient
    from loader.db import connection
    from loader.embedding import get_embedder
    from loader.settings import load_settings

    settings = settings or load_settings()
    embedder = get_embedder(settings)
    client = ChatClient.from_settings(settings)
    with connection(settings) as conn:
        conn.autocommit = True  # reads only; no transaction open while the model thinks
        answer = run_agent(
            conn, settings, question, embedder=embedder, client=client, category=category
        )
    return answer.to_json()


__all__ = ["Toolbox", "ask_agent", "graph_function", "run_agent"]
