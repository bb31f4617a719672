"""``pgkb worker``: process the documents services, people and agents submitted."""

from __future__ import annotations

import signal
import threading

import click

from loader.cli.base import App, emit_json
from loader.safety import echo, one_line


@click.command()
@click.option(
    "--once",
    is_flag=True,
    help="Process every job ready now, then exit (for cron); without it, wait for more.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON at the end.")
@click.pass_obj
def worker(app: App, once: bool, as_json: bool) -> None:
    """Turn submitted documents into chunks, embeddings and graph, as pgkb ingest does.

    Takes the jobs of kb.document_jobs (kb.submit_document, kb.submit_file, kb.remove_document,
    uploads, agents' notes) one at a time; several workers share the queue without doing a job
    twice, and a killed worker's job comes back after worker_lease_seconds. A failure that may
    pass (the embedding API down) is retried with backoff; any other ends the job as failed with
    its reason (pgkb docs list --state failed). Stops on Ctrl-C or SIGTERM after the job at hand.
    Exit code 0, or 1 when a job failed (with --once).
    """
    from loader.ingest.jobs import Worker

    stop = threading.Event()

    def on_job(outcome: str, job: object, error: str | None) -> None:
        source = one_line(getattr(job, "source_uri", "?"))
        action = getattr(job, "action", "put")
        line = f"{outcome}: {action} {source}" + (f": {one_line(error)}" if error else "")
        echo(line, err=True)

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    report = Worker(app.settings(), on_job=on_job).run(once=once, stop=stop)
    if as_json:
        emit_json(report.to_dict())
    else:
        echo(
            f"{report.ready} ready, {report.removed} removed, {report.failed} failed, "
            f"{report.retried} to retry",
            err=True,
        )
    if once and report.failed:
        raise SystemExit(1)
