"""``pgkb mcp`` and ``pgkb serve``: the knowledge base as a warm process for agents and services.

Both open one :class:`~loader.serve.service.KnowledgeService` (the model loaded once, a pool of
read-only connections, the category scope) before they accept anything, so a wrong URL, a
missing grant or a schema behind this pgkb stops them with one ``Error:`` line.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from loader.cli.base import App, setting_option

_category = click.option(
    "--category",
    help="Serve only documents of this category: every tool passes it to SQL.",
)
_collections = click.option(
    "--collection",
    "collections",
    multiple=True,
    metavar="NAME",
    help="Serve only this collection (repeatable); every connection keeps to them in SQL. "
    "Default: every collection the database role may read.",
)
_pool = click.option(
    "--pool-size",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Database connections kept open.",
)
_timeout = click.option(
    "--timeout",
    "wait_timeout",
    type=click.FloatRange(0.1, 300),
    default=10.0,
    show_default=True,
    help="Seconds a call waits for a database connection before it reports the database down.",
)
_host = click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind (another than 127.0.0.1 exposes the server to the network).",
)


_LIMITS = [
    click.option(
        "--max-body",
        type=click.IntRange(1024),
        default=1_000_000,
        show_default=True,
        help="Largest request body in bytes (larger: 413).",
    ),
    click.option(
        "--concurrency",
        type=click.IntRange(1, 256),
        default=8,
        show_default=True,
        help="Requests handled at once; the others wait in the queue.",
    ),
    click.option(
        "--queue-size",
        type=click.IntRange(0, 100_000),
        default=256,
        show_default=True,
        help="Requests that may wait for a slot; past it, 503 at once.",
    ),
    click.option(
        "--queue-timeout",
        type=click.FloatRange(0.1, 600),
        default=30.0,
        show_default=True,
        help="Seconds a request waits in the queue before it gets a 503.",
    ),
]


def _limit_options(command: Callable[..., None]) -> Callable[..., None]:
    """The request limits ``pgkb serve`` and ``pgkb mcp --http`` share (the guard's)."""
    for option in reversed(_LIMITS):
        command = option(command)
    return command


@click.command("mcp")
@_category
@_collections
@click.option("--http", "over_http", is_flag=True, help="Streamable HTTP (at /mcp), not stdio.")
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Offer add_document and remove_document, writing into the --collection collections "
    "only (required with it), as the server's database role within its writing grants.",
)
@_host
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@_limit_options
@_pool
@_timeout
@click.pass_obj
def mcp(
    app: App,
    category: str | None,
    collections: tuple[str, ...],
    over_http: bool,
    allow_writes: bool,
    host: str,
    port: int,
    max_body: int,
    concurrency: int,
    queue_size: int,
    queue_timeout: float,
    pool_size: int,
    wait_timeout: float,
) -> None:
    """A Model Context Protocol server: search, ask, read_document, neighbor_chunks,
    explore_graph and list_documents as tools, over stdio (how desktop and coding agents start
    tools) or streamable HTTP (--http, with GET /metrics beside /mcp).

    It runs as the role its database URL names: a role given `pgkb db grant ROLE --read` can
    use every tool. With --allow-writes an agent also adds and removes documents (what it adds
    carries "origin": "mcp" in its metadata) in the --collection collections, which needs
    `pgkb db grant ROLE --write --collection NAME`; a worker (pgkb worker) processes them.

    Over HTTP it has pgkb serve's limits: the Host header must name this server, a request
    head must arrive within 10 s and a body (at most --max-body) within 30 s, a client that
    reads nothing of its answer for 30 s is disconnected, and --concurrency tool calls run at
    once while --queue-size more wait up to --queue-timeout seconds (then 503)."""
    from loader.serve.guard import Limits
    from loader.serve.mcp import run
    from loader.serve.service import KnowledgeService

    if allow_writes and not collections:
        raise click.UsageError(
            "--allow-writes needs the collections an agent may write into; name them: "
            "pgkb mcp --allow-writes --collection notes"
        )
    settings = app.settings(collections=",".join(collections) or None)
    service = KnowledgeService(
        settings,
        category=category,
        pool_size=pool_size,
        wait_timeout=wait_timeout,
    )
    limits = Limits(
        max_body=max_body,
        concurrency=concurrency,
        queue_size=queue_size,
        queue_timeout=queue_timeout,
        allowed_hosts=settings.allowed_hosts(),
    )
    with service:
        if over_http:
            click.echo(f"pgkb mcp: streamable HTTP on http://{host}:{port}/mcp", err=True)
        run(
            service,
            http=over_http,
            host=host,
            port=port,
            limits=limits,
            writable=tuple(collections) if allow_writes else (),
        )


@click.command("serve")
@_category
@_collections
@_host
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@setting_option(
    "serve_token",
    "--token",
    help="Bearer token every request but /healthz must send.",
)
@setting_option(
    "serve_write_token",
    "--write-token",
    help="Bearer token that may write documents (POST, PUT, DELETE /v1/documents) as the "
    "server's database role, within its writing grants; unset: the server writes nothing.",
)
@setting_option(
    "serve_max_upload",
    "--max-upload",
    type=click.IntRange(1024),
    help="Largest file upload (multipart/form-data on /v1/documents) in bytes (larger: 413).",
)
@click.option(
    "--worker",
    "with_worker",
    is_flag=True,
    help="Also process the write queue (what pgkb worker does) in a thread of this server, "
    "stopped at shutdown.",
)
@_limit_options
@setting_option(
    "serve_allowed_hosts",
    "--allowed-host",
    help="Names the Host header may give besides localhost and the bound address "
    "(comma-separated; * turns the check off).",
)
@click.option(
    "--open",
    "open_browser",
    is_flag=True,
    help="Open the web interface in the default browser once the server answers.",
)
@_pool
@_timeout
@click.pass_obj
def serve(
    app: App,
    category: str | None,
    collections: tuple[str, ...],
    host: str,
    port: int,
    serve_token: str | None,
    serve_write_token: str | None,
    serve_max_upload: int | None,
    with_worker: bool,
    max_body: int,
    concurrency: int,
    queue_size: int,
    queue_timeout: float,
    serve_allowed_hosts: str | None,
    open_browser: bool,
    pool_size: int,
    wait_timeout: float,
) -> None:
    """An HTTP service and a web interface: POST /v1/embeddings (OpenAI's format, the knowledge
    base's model), POST /v1/chat/completions and GET /v1/models (OpenAI's chat API: chat UIs and
    OpenAI clients get cited answers, streamed), POST /v1/search, POST /v1/ask (streamed with
    "stream": true), GET /healthz, GET /metrics (Prometheus), and at / the web interface
    (documents, graph, search, ask, status) for people.

    A service in any language embeds its query here and calls hybrid_search in SQL as a
    `pgkb db grant --read` role; or asks /v1/search directly. Requests must name this server
    in their Host header (localhost, the bound address, or --allowed-host) and send JSON as
    application/json; a request head must arrive within 10 s and a body within 30 s, and a
    client that reads nothing of its answer for 30 s is disconnected. With a token set, the web
    interface asks for it once in a sign-in form.

    With --write-token, services add, replace and remove documents through /v1/documents (JSON
    or a file upload) with that token; a worker (pgkb worker, or --worker here) processes
    them."""
    from loader.serve.guard import Limits
    from loader.serve.http import run
    from loader.serve.service import KnowledgeService

    settings = app.settings(
        serve_token=serve_token,
        serve_write_token=serve_write_token,
        serve_max_upload=serve_max_upload,
        serve_allowed_hosts=serve_allowed_hosts,
        collections=",".join(collections) or None,
    )
    service = KnowledgeService(
        settings, category=category, pool_size=pool_size, wait_timeout=wait_timeout
    ).open()
    if host not in ("127.0.0.1", "localhost", "::1") and not settings.serve_token:
        click.secho(
            f"warning: serving on {host} without a token; set PGKB_SERVE_TOKEN",
            fg="yellow",
            err=True,
        )
    limits = Limits(
        token=settings.serve_token,
        max_body=max_body,
        write_token=settings.serve_write_token,
        max_upload=settings.serve_max_upload,
        concurrency=concurrency,
        queue_size=queue_size,
        queue_timeout=queue_timeout,
        allowed_hosts=settings.allowed_hosts(),
    )
    worker = None
    if with_worker:
        from loader.app.worker import BackgroundWorker

        worker = BackgroundWorker(settings, embedder=service.embedder).check()
    run(service, limits, host=host, port=port, open_browser=open_browser, worker=worker)
