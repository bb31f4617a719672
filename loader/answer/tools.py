"""The reader agent's tools, each a thin, validated call of a SQL function.

``search_chunks``
    hybrid search (``kb.hybrid_search`` through :func:`loader.search.search`), optionally scoped
    to document ids;
``read_document``
    ``kb.read_document`` through :func:`loader.answer.reading.read_document` (which the servers
    call too), budget-guarded: a document or chunk range that does not fit 75% of the model's
    context window minus what the conversation already uses comes back as the document's
    outline and chunk count, so the model asks for a range;
``explore_graph``
    ``kb.explore_graph`` (through :func:`loader.graph.catalogue.explore`): the documents around
    a document (1 to 3 hops), the documents matching a query and their neighbours, or the
    catalogue; always within the question's category.

Every tool argument is validated before it reaches SQL: malformed JSON, unknown tools, unknown or
malformed document ids, inverted or out-of-range chunk ranges and repeated identical calls are
answered with a message the model can act on (ranges are clamped when that is unambiguous).
A new tool is one more schema constant, one more method and one more entry in
:meth:`Toolbox.tools` and the dispatch table.

Over 400 lines on purpose: each tool is its argument validation, and the checks of one tool
read best beside its call.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from loader.answer.passages import Passage, estimate_tokens
from loader.answer.prompt import MAX_QUERY_CHARS
from loader.answer.reading import DocumentInfo, Refusal, document_infos, read_document
from loader.answer.retrieval import QueryEmbedder, embed_query, search_passages
from loader.errors import PgkbError
from loader.filters import SearchFilters
from loader.graph.catalogue import explore
from loader.graph.relations import RELATION_TYPES
from loader.safety import parse_int
from loader.settings import Settings

READ_BUDGET_SHARE = 0.75
"""read_document may fill this share of the context window, minus what is already used."""
FIRST_MESSAGE_SHARE = 0.4
"""The first hits may fill this share of the context window (the rest is for tools and answer)."""
GRAPH_CATALOGUE_SHARE = 0.15
"""The document graph's catalogue in the first message may fill this share of the window."""
MIN_TOOL_BUDGET = 64
"""Below this many free tokens, reading and searching are refused: time to answer."""
MAX_SEARCH_LIMIT = 10
CATALOGUE_CANDIDATES = 20
CATALOGUE_SIZE = 8
MAX_GRAPH_DEPTH = 3
MAX_GRAPH_LIMIT = 25
GRAPH_LIMIT = 15
"""explore_graph returns this many documents unless asked for fewer or more (1..25)."""
GRAPH_SUMMARY_CHARS = 300


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


GRAPH_TOOL = _tool(
    "explore_graph",
    "Walk the document graph (hyperlinks, mentions and typed relations between documents). "
    "With document_id: the documents up to depth hops (1 to 3) from it, in both directions, "
    "each with its distance and the path of edges. With query: the documents whose text "
    "matches it and their direct neighbours. With neither: the catalogue of the most connected "
    "documents. Each document comes with its id, title, type, summary and key entities; read "
    "one with read_document.",
    {
        "document_id": {"type": "string", "description": "Start from this document."},
        "query": {"type": "string", "description": "Find documents matching these words."},
        "depth": {"type": "integer", "minimum": 1, "maximum": MAX_GRAPH_DEPTH},
        "relation_types": {
            "type": "array",
            "items": {"type": "string", "enum": list(RELATION_TYPES)},
            "description": "Follow only these relation types (default: all).",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_GRAPH_LIMIT},
    },
    [],
)


ARGUMENT_EXAMPLES = {
    "search_chunks": '{"query": "index types"}',
    "read_document": '{"document_id": "<id>", "chunk_start": 0, "chunk_end": 5}',
    "explore_graph": '{"document_id": "<id>", "depth": 1}',
}
"""What a tool's arguments look like, for the message answering malformed JSON."""


class ToolRefusal(Refusal):
    """A tool call the agent refuses, with a message the model can act on."""


# --- argument validation ------------------------------------------------------------------


def _as_int(name: str, value: object) -> int:
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


def _optional_int(args: Mapping[str, object], name: str) -> int | None:
    return None if args.get(name) is None else _as_int(name, args[name])


def _as_uuid(name: str, value: object) -> uuid.UUID:
    try:
        return uuid.UUID(str(value).strip())
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
        filters: SearchFilters | None = None,
    ) -> None:
        self.conn = conn
        self.settings = settings
        self.embedder = embedder
        self.category = category
        self.filters = filters
        self.seen: dict[tuple[uuid.UUID, int], Passage] = {}
        self._documents: dict[uuid.UUID, DocumentInfo] = {}
        self._calls: dict[str, int] = {}

    # -- the tools offered ------------------------------------------------------------------

    def tools(self) -> list[Any]:
        return [SEARCH_TOOL, READ_TOOL, GRAPH_TOOL]

    def remember(self, passages: Sequence[Passage]) -> None:
        for passage in passages:
            self.seen.setdefault((passage.document_id, passage.chunk_index), passage)

    def documents(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, DocumentInfo]:
        missing = [i for i in ids if i not in self._documents]
        if missing:
            self._documents.update(document_infos(self.conn, missing, self.category))
        return {i: self._documents[i] for i in ids if i in self._documents}

    # -- dispatch ---------------------------------------------------------------------------

    def call(self, name: str, raw_arguments: str, *, step: int, budget: int) -> str:
        """Run one tool call; always returns the text for the model (results or an error)."""
        try:
            arguments: object = json.loads(raw_arguments) if raw_arguments.strip() else {}
        except RecursionError:
            return _error(f"the arguments of {name} are nested too deeply; send a flat object")
        except json.JSONDecodeError as exc:
            return _error(
                f"the arguments of {name} are not valid JSON ({exc.msg} at character "
                f"{exc.pos}); send one JSON object, e.g. "
                + ARGUMENT_EXAMPLES.get(name, ARGUMENT_EXAMPLES["read_document"])
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
        handlers = {
            "search_chunks": self.search_chunks,
            "read_document": self.read_document,
            "explore_graph": self.explore_graph,
        }
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
        except Refusal as exc:  # a ToolRefusal, or a read refused (loader.answer.reading)
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

    def search_chunks(self, args: Mapping[str, object], budget: int) -> dict[str, Any]:
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
            filters=self.filters,
            notes=notes,
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
                    "document_id": str(p.document_id),
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

    def _document_ids(self, value: object) -> list[uuid.UUID] | None:
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
                f"unknown document id(s): {', '.join(map(str, unknown))}; use document_id "
                "values from the catalogue or from search results"
            )
        return ids

    # -- read_document ----------------------------------------------------------------------

    def read_document(self, args: Mapping[str, object], budget: int) -> dict[str, Any]:
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
        read = read_document(
            self.conn,
            info,
            chunk_start=_optional_int(args, "chunk_start"),
            chunk_end=_optional_int(args, "chunk_end"),
            budget=budget,
            notes=notes,
        )
        self.remember(read.passages)
        return read.to_dict()

    # -- explore_graph ----------------------------------------------------------------------

    def explore_graph(self, args: Mapping[str, object], budget: int) -> dict[str, Any]:
        notes = _unknown_keys(args, {"document_id", "query", "depth", "relation_types", "limit"})
        start: uuid.UUID | None = None
        if args.get("document_id") is not None:
            start = _as_uuid("document_id", args["document_id"])
            if start not in self.documents([start]):
                raise ToolRefusal(
                    f"unknown document id {start}; use a document_id from the catalogue or "
                    "from search results"
                )
        query = args.get("query")
        if query is not None and not isinstance(query, str):
            raise ToolRefusal('"query" must be a string')
        query = (query or "").strip()[:MAX_QUERY_CHARS] or None
        depth = 1
        if args.get("depth") is not None:
            asked = _as_int("depth", args["depth"])
            depth = min(max(asked, 1), MAX_GRAPH_DEPTH)
            if depth != asked:
                notes.append(f"depth {asked} clamped to {depth} (1..{MAX_GRAPH_DEPTH})")
            if start is None:
                notes.append("depth applies only with document_id; ignored")
        types = relation_type_list(args.get("relation_types"))
        limit = GRAPH_LIMIT
        if args.get("limit") is not None:
            asked = _as_int("limit", args["limit"])
            limit = min(max(asked, 1), MAX_GRAPH_LIMIT)
            if limit != asked:
                notes.append(f"limit {asked} clamped to {limit} (1..{MAX_GRAPH_LIMIT})")
        return self.explore_documents(
            start=start,
            query=query,
            depth=depth,
            relation_types=types,
            limit=limit,
            budget=budget,
            notes=notes,
        )

    def explore_documents(
        self,
        *,
        start: uuid.UUID | None,
        query: str | None,
        depth: int,
        relation_types: list[str] | None,
        limit: int,
        budget: int,
        notes: Sequence[str] = (),
    ) -> dict[str, Any]:
        """The documents around ``start``, matching ``query``, or the most connected ones
        (kb.explore_graph within the toolbox's category), as many as ``budget`` tokens hold: the
        typed call behind the agent's ``explore_graph`` and the servers' (each checks its own
        arguments first); ``notes`` are the caller's, returned with the walk's own."""
        if start is not None and query is not None:
            raise ToolRefusal(
                'give "document_id" (documents around it) or "query" (documents matching it), '
                "not both"
            )
        notes = list(notes)
        nodes = explore(
            self.conn,
            start=start,
            query=query,
            depth=depth,
            relation_types=relation_types,
            filters={"category": self.category} if self.category else None,
            limit=limit,
        )
        if start is not None and not nodes:
            # kb.explore_graph returns the start itself unless it is gone: removed since this
            # toolbox looked it up (a document of another category never gets here, it is refused
            # above as unknown, so the scope does not reveal that it exists)
            raise ToolRefusal(
                f"document {start} is no longer in the knowledge base; use a document_id from "
                "the catalogue or search results"
            )
        documents: list[dict[str, Any]] = []
        used = 0
        for node in nodes:
            summary = " ".join((node.summary or "").split())
            if len(summary) > GRAPH_SUMMARY_CHARS:
                summary = summary[: GRAPH_SUMMARY_CHARS - 4].rsplit(" ", 1)[0] + " ..."
            entry: dict[str, Any] = {
                "document_id": node.document_id,
                "title": node.title,
                "source_uri": node.source_uri,
                "doc_type": node.doc_type,
                "summary": summary,
                "key_entities": node.key_entities[:8],
            }
            if node.distance is not None:
                entry["distance"] = node.distance
            if node.path:
                entry["path"] = [
                    f"{e['source_id']} {e['relation_type']} {e['target_id']}" for e in node.path
                ]
            if node.edges:
                entry["edges"] = [f"{e['relation_type']} {e['target_id']}" for e in node.edges]
            cost = estimate_tokens(json.dumps(entry, ensure_ascii=False)) + 4
            if used + cost > budget:
                notes.append(
                    f"{len(nodes) - len(documents)} more document(s) left out: the context "
                    "budget is nearly used"
                )
                break
            used += cost
            documents.append(entry)
        out: dict[str, Any] = {"documents": documents}
        if not documents and not notes:
            notes.append(
                "no document found; try other words, or explore from a document_id"
                if query
                else "no related document found"
            )
        if notes:
            out["notes"] = notes
        return out


def relation_type_list(value: object) -> list[str] | None:
    """``relation_types`` as given (a name, a list of names, nothing): known, lower case, each
    once; :class:`ToolRefusal` naming the types otherwise."""
    if value is None or value == []:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ToolRefusal("relation_types must be a list of relation types")
    types: list[str] = []
    for item in value:
        kind = item.strip().lower() if isinstance(item, str) else None
        if kind is None or kind not in RELATION_TYPES:
            raise ToolRefusal(
                f"unknown relation type {json.dumps(item, default=str)}; the types are: "
                + ", ".join(RELATION_TYPES)
            )
        if kind not in types:
            types.append(kind)
    return types


def _unknown_keys(args: Mapping[str, object], allowed: set[str]) -> list[str]:
    unknown = sorted(set(args) - allowed)
    if not unknown:
        return []
    return [f"ignored unknown argument(s): {', '.join(unknown)}"]


def _error(message: str) -> str:
    return json.dumps({"error": message}, ensure_ascii=False)
