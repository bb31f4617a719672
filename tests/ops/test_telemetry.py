"""OpenTelemetry spans of search, ask and ingest, caught by the SDK's in-memory exporter; and
the telemetry hooks costing nothing when nobody listens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loader import telemetry
from loader.settings import Settings

pytestmark = pytest.mark.model


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # this provider, not the process-wide one (which can be set only once)
    monkeypatch.setattr(telemetry, "_tracer", provider.get_tracer("pgkb"))
    monkeypatch.setattr(telemetry, "_tracer_checked", True)
    return exporter


def test_the_tracer_comes_from_opentelemetry_when_it_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(telemetry, "_tracer_checked", False)
    assert telemetry._get_tracer() is not None


def test_search_ask_and_ingest_make_spans(
    spans: Any, settings: Settings, embedder: Any, tmp_path: Path
) -> None:
    from loader.app import AskRequest, KnowledgeBase
    from loader.db.session import connection
    from loader.ingest.pipeline import ingest_paths
    from loader.search import search

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "leave.md").write_text(
        "# Parental leave\n\nParents receive sixteen weeks of paid parental leave.\n"
    )
    (folder / "broken.pdf").write_bytes(b"not a pdf")
    report = ingest_paths(settings, [folder], embedder=embedder)
    with connection(settings, read=True) as conn:
        hits = search(conn, "parental leave", None, settings=settings, mode="keyword")
    answer = KnowledgeBase(settings, embedder=embedder).ask(
        AskRequest("How long is parental leave?")
    )

    by_name = {s.name: s for s in spans.get_finished_spans()}
    ingest = by_name["pgkb.ingest"]
    assert ingest.attributes["pgkb.new"] == report.new == 1
    assert ingest.attributes["pgkb.failed"] == 1
    assert ingest.attributes["pgkb.chunks_written"] == report.chunks_written
    found = [s for s in spans.get_finished_spans() if s.name == "pgkb.search"]
    assert found[0].attributes["pgkb.mode"] == "keyword"
    assert found[0].attributes["pgkb.hits"] == len(hits) == 1
    asked = by_name["pgkb.ask"]
    assert asked.attributes["pgkb.mode"] == answer.mode == "extractive"
    assert asked.attributes["pgkb.abstained"] is False
    # the ask's own search is a child of the ask span
    children = [
        s for s in found if s.parent is not None and s.parent.span_id == asked.context.span_id
    ]
    assert children


def test_events_reach_listeners_and_a_failing_listener_breaks_nothing() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def broken(name: str, labels: dict[str, Any]) -> None:
        raise RuntimeError("a broken exporter")

    def record(name: str, labels: dict[str, Any]) -> None:
        seen.append((name, labels))

    telemetry.add_listener(broken)
    telemetry.add_listener(record)
    try:
        telemetry.event("abstention", stage="gate")
    finally:
        telemetry.remove_listener(broken)
        telemetry.remove_listener(record)
    assert seen == [("abstention", {"stage": "gate"})]
