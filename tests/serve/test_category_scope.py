"""A server scoped to one category (``pgkb serve --category``) shows nothing of the others: not
the other categories' counts per collection on the status page, not the run log's paths and
failures (they name other categories' files), not in ``/v1/models`` a collection that holds none
of its documents."""

from __future__ import annotations

from pathlib import Path

import httpx

from loader.ingest.pipeline import ingest_paths
from tests.fake_openai import FakeOpenAI
from tests.helpers import ingest_settings
from tests.serve_fixtures import running


def test_a_category_scoped_server_shows_no_other_category(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    from loader.serve.http import create_app
    from loader.serve.service import KnowledgeService

    settings = ingest_settings(db_url, tmp_path, fake_openai)
    folders = {}
    for name, category, text in (
        ("hr-policies", "handbook", "# Leave\n\nParents receive sixteen weeks of leave.\n"),
        ("secret-eng", "engineering", "# Deploys\n\nDeploys happen on Tuesdays.\n"),
    ):
        folder = tmp_path / name
        folder.mkdir()
        (folder / f"{name}-notes.md").write_text(text)
        (folder / f"{name}-broken.pdf").write_bytes(b"not a pdf")  # a failure naming its file
        folders[name] = folder
        ingest_paths(settings, [folder], category=category, collection=name)
    service = KnowledgeService(settings, category="handbook", pool_size=1).open()
    with running(create_app(service)) as url:
        status = httpx.get(f"{url}/status", timeout=60)
        models = httpx.get(f"{url}/v1/models", timeout=60).json()
    assert status.status_code == 200, status.text[:300]
    assert "hr-policies" in status.text
    assert "secret-eng" not in status.text  # neither the collection nor its folder or files
    assert str(folders["hr-policies"]) not in status.text  # no run's paths at all
    ids = [m["id"] for m in models["data"]]
    assert any(i.endswith("/hr-policies") for i in ids)
    assert not any("secret-eng" in i for i in ids)
