"""The one settings object of pgkb.

Every tunable lives here. Values come, in increasing order of precedence, from the field
defaults, an optional TOML config file, ``PGKB_*`` environment variables, and finally explicit
overrides (the CLI options, which Click fills from the same environment variables).

The config file is the first of: the ``--config`` option / ``PGKB_CONFIG``, ``./pgkb.toml``, and
``<user config dir>/pgkb/pgkb.toml`` (``~/.config/pgkb/pgkb.toml`` on Linux). Its keys are the
field names below, at the top level (``chunk_tokens = 200``).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from loader import settings_checks
from loader.errors import ConfigError
from loader.filters import SearchFilters
from loader.safety import echo
from loader.settings_checks import DEFAULT_CHUNK_TOKENS as DEFAULT_CHUNK_TOKENS
from loader.settings_checks import PG_INT_MAX as PG_INT_MAX

ENV_PREFIX = "PGKB_"
CONFIG_FILE_NAME = "pgkb.toml"


def _user_data_dir() -> Path:
    import platformdirs

    return platformdirs.user_data_path("pgkb")


def _user_config_file() -> Path:
    import platformdirs

    return platformdirs.user_config_path("pgkb") / CONFIG_FILE_NAME


@dataclasses.dataclass(frozen=True)
class Settings:
    """All of pgkb's configuration. Field ``x`` is read from ``PGKB_X`` and config key ``x``."""

    # --- database ---------------------------------------------------------------------------
    database_url: str | None = None
    """PostgreSQL URL. Unset: pgkb starts (or reuses) its embedded server in ``data_dir``."""
    read_database_url: str | None = None
    """PostgreSQL URL that the read-only commands and functions (search, ask, docs, graph, stats,
    stale, models list) use, e.g. a streaming hot standby of ``database_url`` (or a libpq URL
    with several hosts and ``target_session_attrs=prefer-standby``). Writes (ingest, remove,
    models add/activate, db upgrade) always go to ``database_url``. Unset: reads go there too."""
    data_dir: Path = dataclasses.field(default_factory=_user_data_dir)
    """Where the embedded server keeps its data (``pgdata/``)."""
    cache_dir: Path | None = None
    """Where pgkb keeps what it can make again: the default embedding model, fetched once when
    its package is not installed (``models/``, 92 MB), and the ONNX graphs of local models
    (``onnx/``). Unset: the user's cache folder (``~/.cache/pgkb`` on Linux)."""

    # --- embedding model ----------------------------------------------------------------------
    embedding_provider: Literal["local", "openai"] = "local"
    """``local`` (sentence-transformers, offline) or ``openai`` (any OpenAI-compatible API)."""
    embedding_model: str = "sentence-transformers/all-MiniLM-L6-v2"
    """Embedding model: ``local``, a model folder or a Hugging Face Hub name (from the Hub
    cache, else downloaded where there is internet); ``openai``, the endpoint's model name. Name
    + dims is one vector space, which must be the active model."""
    embedding_dims: int = 384
    """Dimensions of the embedding model's vectors."""
    embedding_base_url: str | None = None
    """Base URL of an OpenAI-compatible embeddings API (OpenAI, Azure, Ollama, vLLM, ...)."""
    embedding_api_key: str | None = None
    """API key for ``embedding_base_url`` (never stored in the database)."""
    embedding_max_input_tokens: int | None = None
    """The model's input limit in its own tokens; unset: what a local model's folder declares
    (``max_seq_length``, else its tokenizer's ``model_max_length``: 256 for all-MiniLM-L6-v2),
    8191 for an API."""
    embedding_query_prompt: str | None = None
    """Put before every query (e.g. ``"query: "``); unset: the local model's ``query`` prompt
    (``config_sentence_transformers.json``), else none. Part of the model's identity."""
    embedding_document_prompt: str | None = None
    """Put before every passage (e.g. ``"passage: "``); unset: the local model's ``document``
    (or ``passage``) prompt, else none. Part of the model's identity."""
    embedding_backend: Literal["onnx", "torch"] = "onnx"
    """How a local model runs: ``onnx``, ONNX Runtime on the model's graph (shipped in its
    folder, else made once in ``cache_dir``; no torch), or ``torch``, sentence-transformers
    (``pip install 'pgkb[torch]'``; for models the ONNX backend does not run). The same
    vectors either way."""
    embedding_request_dimensions: bool = False
    """Send ``embedding_dims`` as the API request's ``dimensions`` (OpenAI text-embedding-3 and
    servers that shorten vectors of Matryoshka models)."""
    embedding_batch_size: int = 64
    """Texts per embedding call (the OpenAI API accepts up to 2,048)."""

    embedding_timeout: float = 60.0
    """Seconds to wait for one embeddings API request before retrying it."""
    embedding_max_retries: int = 5
    """Retries (exponential backoff, honouring Retry-After) on 429, 5xx and timeouts."""

    # --- chunking -----------------------------------------------------------------------------
    chunk_tokens: int | None = None
    """Chunk size in tokens of the embedding model; must leave room for its special tokens and
    document prompt. Unset: 200, or what the model's input limit leaves when it reads less."""
    chunk_overlap: int = 32
    """Tokens repeated between neighbouring chunks (below ``chunk_tokens``)."""
    embed_heading_path: bool = True
    """Give the model each chunk prefixed with its heading path (or title): the embedded text."""

    # --- ingestion ----------------------------------------------------------------------------
    max_file_mb: float = 50.0
    """Files larger than this (in MB) are reported as failed, not read."""
    max_text_mb: float = 20.0
    """Files whose extracted text exceeds this (in millions of characters) are reported as failed
    (a small compressed PDF can hold a huge text)."""
    extract_timeout: float = 120.0
    """Seconds the extraction of one file may take; a slower file is reported as failed (its
    worker process is killed, so it stops using CPU and memory at once)."""
    extract_memory_mb: float = 2000.0
    """Address-space cap (MB) of the extraction worker process: a file whose parsing needs more
    is reported as failed instead of growing the run without bound."""
    prune_max_fraction: float = 0.5
    """``ingest --prune`` refuses (without ``--force``) to delete more than this share of the
    documents under the given folders: an unmounted disk looks like deleted files."""
    source_root: Path | None = None
    """Store ``source_uri`` relative to this folder (``pgkb ingest --root``), so the same folder
    mounted elsewhere is the same set of documents; unset: absolute paths."""
    web_timeout: float = 30.0
    """Seconds ``pgkb ingest URL`` waits for a web page (each connect, read and write); a
    slower page is reported as failed and the run goes on."""
    web_user_agent: str = "pgkb"
    """The User-Agent ``pgkb ingest URL`` sends, and the name it looks for in robots.txt."""
    web_max_pages: int = 100
    """Pages one ``pgkb ingest URL`` run fetches at most (``--max-pages``), sitemaps and crawls
    included."""
    web_deadline: float = 120.0
    """Seconds one web fetch may take in all (connection, redirects, headers and body): a
    server that trickles its answer is cut there and the page reported as failed
    (``web_timeout`` bounds each read only)."""
    web_allowed_origins: str | None = None
    """Other origins (``scheme://host[:port]``, comma-separated) that redirects, crawled links
    and sitemap entries may lead to (``--allow-origin``). Unset: only the origins of the URLs
    and sitemaps given (and the same host's ``https://`` for an ``http://`` one)."""
    web_max_links: int = 5000
    """Links read from one page for the crawl (``--crawl-depth``); the others are not followed
    and a note says so. The page's text is ingested whole."""
    web_robots_max_kb: float = 500.0
    """robots.txt read at most (KiB, counted after decompression); what follows is ignored, as
    Google does at 500 KiB, and a note says so."""
    web_sitemap_max_mb: float = 50.0
    """A sitemap read at most (MB after decompression, a ``.xml.gz`` file included; the
    sitemaps.org limit is 50 MB); a larger one is reported as failed."""
    graph_across_collections: bool = False
    """Let links and mentions become graph edges to documents of other collections; off: an
    ingest links a document only to documents of its own collection."""

    # --- the write queue (pgkb worker) -----------------------------------------------------------
    worker_poll_seconds: float = 5.0
    """How often an idle ``pgkb worker`` looks at the queue when no notification came (a
    submission notifies it at once)."""
    worker_lease_seconds: int = 600
    """How long a worker holds a job it took: a worker killed while processing gives the job back
    to the others after this long. Keep it above the slowest document (extract_timeout plus its
    embedding)."""
    worker_max_attempts: int = 5
    """Attempts of a job whose failure may pass (the embedding API's 5xx or timeout after its own
    retries, a lost connection) before it fails for good."""
    worker_backoff_base: float = 5.0
    """Seconds before a failed job's second attempt; doubled at each further attempt."""
    worker_backoff_max: float = 600.0
    """The longest wait between two attempts of a job."""

    # --- vector index (HNSW, pgvector) ------------------------------------------------------------
    hnsw_m: int | None = None
    """HNSW graph degree of a model's index when it is built; unset (the default): sized from the
    model's embeddings at that moment (kb.hnsw_parameters: 16 below 250,000 embeddings, 48 from
    250,000). Set, it overrides the size for every index built from then on."""
    hnsw_ef_construction: int | None = None
    """HNSW build-time candidate list (at least 2 * m); unset (the default): sized from the
    model's embeddings when the index is built (64 below 250,000 embeddings, 200 from 250,000)."""
    hnsw_ef_search: int | None = None
    """HNSW query-time candidate list; unset (the default): the one recorded with the model's
    index when it was built (200 below 250,000 embeddings, 400 from 250,000; ``pgkb db status``
    shows it), or 2 * candidates when that is more."""
    hnsw_bulk_threshold: int = 500
    """A load writing at least this many embeddings of a model, and more than its index holds,
    drops the model's HNSW index and builds it after the load (several times faster than
    inserting row by row; see the bulk index builds measurements); 0: always row by row."""

    # --- retrieval ----------------------------------------------------------------------------
    vector_candidates: int = 20
    """Candidates the vector leg brings to the fusion."""
    keyword_candidates: int = 20
    """Candidates the keyword leg brings to the fusion."""
    rrf_k: int = 10
    """Reciprocal Rank Fusion constant (chosen on the tuning questions)."""
    match_count: int = 5
    """Results a search returns (and chunks ``pgkb ask`` starts from)."""
    vector_weight: float = 2.0
    """The vector leg counts twice the keyword leg in the fusion (chosen on the whole-manual
    and bundled tuning questions; see the retrieval measurements)."""
    keyword_weight: float = 1.5
    """The keyword leg's weight in the fusion when its best chunk holds all the query's words
    (chosen with keyword_confidence and lead_slot on the tuning halves of three vocabularies)."""
    exact_keyword_weight: float = 3.0
    """The keyword leg's weight for queries that ask for exact matching (a quoted phrase, an
    identifier such as 40P01 or work_mem): such queries lean on the keyword leg."""
    keyword_confidence: float = 2.0
    """How far the keyword leg steps back when its evidence is weak: for a plain question its
    weight is keyword_weight * share ** keyword_confidence, share = the IDF share of the query's
    words its best chunk holds (kb.hybrid_search); 0 keeps keyword_weight whatever it matched."""
    lead_slot: int = 3
    """Each confident leg's best chunk is placed within the first lead_slot results: the vector
    leg's always, the keyword leg's when the query asks for exact matching or its best chunk holds
    at least half the query's IDF mass (kb.hybrid_search); 0 turns the lead slots off."""
    min_similarity: float | None = None
    """Drop vector hits whose cosine similarity is below this."""
    max_per_document: int | None = None
    """At most this many chunks of one document among the hybrid results (unset: no cap)."""
    keyword_ranking: Literal["bm25", "ts_rank"] = "bm25"
    """How the keyword leg ranks its matches: ``bm25`` (IDF, length-normalised) or ``ts_rank``."""
    keyword_backend: Literal["auto", "sql", "pg_textsearch"] = "auto"
    """What computes the keyword leg's BM25: ``sql`` (pgkb's own, in SQL, any server),
    ``pg_textsearch`` (the pg_textsearch extension's bm25 index, compiled: much faster on large
    corpora; an error when the database does not have it) or ``auto`` (pg_textsearch when the
    extension and its index are in the database, ``pgkb db upgrade`` creates them when the server
    can load it; the SQL BM25 otherwise). Each connection sets it as ``pgkb.keyword_backend``;
    ``pgkb db status`` shows which one serves."""
    search_filters: str | None = None
    """Filters applied to every search (JSON object, keys of kb.search_filters: category,
    metadata, source, collections), e.g. ``{"source": "%/sql-%"}``; ``pgkb search/ask
    --source/--meta``."""
    collections: str | None = None
    """Collections the reading commands and the servers keep to (comma-separated names; unset:
    every collection the database role may read); ``--collection`` sets it. Each connection
    sets it as ``pgkb.collections``, which every kb function applies."""

    # --- reranking (loader/providers/rerank.py) --------------------------------------------------
    rerank_provider: Literal["off", "api", "local"] = "off"
    """Rerank the fused candidates: ``api`` (a ``POST /rerank`` endpoint: Cohere, Jina, Text
    Embeddings Inference, vLLM), ``local`` (a sentence-transformers CrossEncoder), ``off``."""
    rerank_model: str | None = None
    """``api``: the endpoint's model name; ``local``: a CrossEncoder folder or Hub name."""
    rerank_base_url: str | None = None
    """Base URL of the rerank API (``{rerank_base_url}/rerank`` is called)."""
    rerank_api_key: str | None = None
    """Sent as a bearer token to the rerank API (local servers ignore it)."""
    rerank_candidates: int = 20
    """Fused candidates given to the reranker; the best ``match_count`` come out."""
    rerank_timeout: float = 30.0
    """Seconds to wait for one rerank request; past it (retries used), the fused order."""
    rerank_max_retries: int = 2
    """Retries (with backoff, honouring Retry-After) on 429, 5xx, timeouts, lost connections."""

    # --- abstention gate (loader/answer/abstention/) ---------------------------------------------
    abstention: bool = True
    """Abstain ("I don't know") before any model call when retrieval signals say so."""
    abstention_rule: str | None = None
    """JSON rule overriding the one `pgkb eval --calibrate` stored in kb.settings."""

    # --- answering (chat model) -----------------------------------------------------------------
    chat_base_url: str | None = None
    """Base URL of an OpenAI-compatible chat API; unset with a chat_model: OpenAI's own API."""
    chat_model: str | None = None
    """Chat model name; unset: ``pgkb ask`` returns the cited passages (extractive answer)."""
    chat_api_key: str | None = None
    """API key for the chat endpoint (required by OpenAI; local servers ignore it)."""
    chat_timeout: float = 60.0
    """Seconds to wait for one chat request before it counts as failed."""
    chat_deadline: float = 300.0
    """Seconds one chat completion may take in all, streamed or not (``chat_timeout`` bounds
    each read): a server that trickles tokens cannot hold ``pgkb ask``; past it, the extractive
    answer."""
    chat_max_retries: int = 2
    """Retries (with backoff, honouring Retry-After) on 429, 5xx, timeouts, lost connections."""
    chat_context_tokens: int = 8192
    """The chat model's context window in tokens; bounds the prompt and the agent's reading."""
    agent_max_steps: int = 4
    """Model calls the reader agent (``pgkb ask --agent``) may make per question."""
    agent_chat_model: str | None = None
    """A (cheaper) chat model for the reader agent's steps; unset: ``chat_model``."""

    # --- serving (pgkb serve) -------------------------------------------------------------------
    serve_token: str | None = None
    """Bearer token ``pgkb serve`` requires on every request but ``/healthz``; unset: none (keep
    the server on 127.0.0.1 then). Visible ASCII characters only (no spaces), as HTTP carries
    it: a token that could never be sent is refused at startup. Also sent by ``pgkb search`` and
    ``pgkb ask`` to ``serve_url``. Its web interface asks for it once in a sign-in form."""
    serve_write_token: str | None = None
    """Bearer token that lets a client write through ``pgkb serve``: ``POST``, ``PUT`` and
    ``DELETE`` on ``/v1/documents`` need it (the read token gets 403 there; unset: the write
    routes answer 403 and nothing is written). What it may write is decided by the database: the
    server's role and its per-collection writing grants (``pgkb db grant ROLE --write
    --collection NAME``; another collection: 403). It also reads, like ``serve_token``. Visible
    ASCII characters only, and not the same as ``serve_token``."""
    serve_max_upload: int = 20_000_000
    """Largest file upload (``multipart/form-data`` on ``POST``/``PUT /v1/documents``) in bytes
    that ``pgkb serve`` reads (larger: 413); JSON bodies keep ``--max-body``."""
    serve_allowed_hosts: str | None = None
    """Names ``pgkb serve`` answers to besides localhost and the address it is bound to
    (comma-separated, e.g. ``kb.internal,kb.example.com``): the ``Host`` header of every request
    must name one (421 otherwise), so a web page that rebinds its own name to this machine's
    address reaches nothing. ``*`` turns the check off."""
    stale_days: int = 180
    """The web interface marks documents not updated for longer than this many days as stale
    (0: never)."""
    serve_url: str | None = None
    """A running ``pgkb serve`` (e.g. ``http://127.0.0.1:8000``) that ``pgkb search`` and
    ``pgkb ask`` ask to embed their query (its ``/v1/embeddings``), instead of loading the model
    themselves; when it does not answer within ``serve_timeout`` or refuses (another model, a
    wrong token), they embed locally. The results are the same either way."""
    serve_timeout: float = 2.0
    """Seconds ``pgkb search`` and ``pgkb ask`` wait for ``serve_url`` before embedding locally."""

    @property
    def cache_path(self) -> Path:
        """``cache_dir``, or the user's cache folder when unset."""
        if self.cache_dir is not None:
            return self.cache_dir
        import platformdirs

        return platformdirs.user_cache_path("pgkb")

    @property
    def agent_model(self) -> str | None:
        """The model the reader agent uses: ``agent_chat_model``, else ``chat_model``."""
        return self.agent_chat_model or self.chat_model

    def filters(self) -> SearchFilters:
        """``search_filters``, parsed (empty when unset)."""
        return settings_checks.parse_filters(self.search_filters)

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied (``None`` values are ignored)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    def allowed_hosts(self) -> tuple[str, ...]:
        """``serve_allowed_hosts``, split (empty when unset)."""
        raw = self.serve_allowed_hosts or ""
        return tuple(h.strip() for h in raw.split(",") if h.strip())

    def collection_names(self) -> tuple[str, ...]:
        """``collections``, split and checked (empty when unset)."""
        return settings_checks.collection_names(self.collections)

    def validate(self) -> Settings:
        """These settings, checked (:func:`loader.settings_checks.problems_of`); every invalid
        value is named in one :class:`ConfigError`."""
        problems = settings_checks.problems_of(self)
        if problems:
            raise ConfigError("invalid configuration: " + "; ".join(problems))
        return self


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(Settings)]


def _target_type(field: dataclasses.Field[Any]) -> Any:
    hints = typing.get_type_hints(Settings)
    hint = hints[field.name]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0]
    return hint


def _coerce(name: str, raw: Any, source: str) -> Any:
    field = next(f for f in dataclasses.fields(Settings) if f.name == name)
    target = _target_type(field)
    if raw is None:
        return None
    if isinstance(raw, str) and raw.strip() == "" and target is not str:
        return None
    try:
        if typing.get_origin(target) is Literal:
            allowed = typing.get_args(target)
            if raw not in allowed:
                raise ValueError(f"must be one of {', '.join(map(str, allowed))}")
            return raw
        if target is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError("must be true or false")
        if target is int:
            if isinstance(raw, bool):
                raise ValueError("must be an integer")
            return int(raw)
        if target is float:
            return float(raw)
        if target is Path:
            return Path(str(raw)).expanduser()
        return str(raw)
    except ValueError as exc:
        raise ConfigError(f"{source}: invalid value {raw!r} for {name}: {exc}") from None


def _find_config_file(
    explicit: str | os.PathLike[str] | None, env: Mapping[str, str]
) -> Path | None:
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist; create it or drop --config")
        return path
    if env.get("PGKB_CONFIG"):
        path = Path(env["PGKB_CONFIG"]).expanduser()
        if not path.is_file():
            raise ConfigError(f"PGKB_CONFIG names {path}, which does not exist")
        return path
    for candidate in (Path.cwd() / CONFIG_FILE_NAME, _user_config_file()):
        if candidate.is_file():
            return candidate
    return None


URL_SETTINGS = (
    "database_url",
    "read_database_url",
    "embedding_base_url",
    "chat_base_url",
    "rerank_base_url",
)
"""Settings that decide where pgkb connects (and so where data and keys go)."""


def _name_working_directory_config(
    path: Path,
    data: Mapping[str, Any],
    explicit: str | os.PathLike[str] | None,
    env: Mapping[str, str],
) -> None:
    """A ``./pgkb.toml`` found by looking in the working directory (not named by --config or
    PGKB_CONFIG) that sets a URL is named on stderr: whoever can write a file in a directory
    could otherwise redirect the database or an API (and the keys from the environment)."""
    if explicit or env.get("PGKB_CONFIG") or path != Path.cwd() / CONFIG_FILE_NAME:
        return
    urls = [key for key in URL_SETTINGS if key in data]
    if urls:
        echo(
            f"pgkb: using {path} (a config file in the working directory), which sets "
            f"{', '.join(urls)}",
            err=True,
        )


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build the settings: defaults < config file < environment < ``overrides``."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    names = set(field_names())

    path = _find_config_file(config_file, env)
    if path is not None:
        try:
            data: dict[str, object] = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from None
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(
                f"config file {path}: unknown key(s) {', '.join(unknown)}; "
                f"valid keys: {', '.join(sorted(names))}"
            )
        for key, raw in data.items():
            values[key] = _coerce(key, raw, f"config file {path}")
        _name_working_directory_config(path, data, config_file, env)

    for name in names:
        env_name = ENV_PREFIX + name.upper()
        if env_name in env:
            coerced = _coerce(name, env[env_name], f"environment variable {env_name}")
            if coerced is not None:
                values[name] = coerced

    for name, raw in overrides.items():
        if name not in names:
            raise ConfigError(f"unknown setting {name!r}")
        if raw is not None:
            values[name] = _coerce(name, raw, f"option --{name.replace('_', '-')}")

    if "data_dir" not in values and not values.get("database_url"):
        _refuse_data_dir_without_home()
    return Settings(**values).validate()


def _refuse_data_dir_without_home() -> None:
    """No data folder and no database URL configured, and no ``HOME`` to find the user's data
    folder by (cron, ``env -i``): the folder derived without it is not the user's, and starting
    the embedded server there would serve a second, empty knowledge base."""
    if os.name != "posix" or os.environ.get("HOME"):
        return
    raise ConfigError(
        "HOME is not set (as under cron or `env -i`), so pgkb cannot find your data folder: it "
        f"would start a second, empty database in {_user_data_dir()}",
        hint="set PGKB_DATA_DIR to the folder holding your knowledge base's pgdata/ (in your "
        "own shell, `pgkb db url` shows it: host=<folder>/pgdata), or PGKB_DATABASE_URL to its "
        "server, e.g. at the start of the crontab line",
    )
