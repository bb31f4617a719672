"""Defects of issue 12 in ingestion, each reproduced here first.

Defect 1: one NUL byte stopped the whole run (binary COPY refused it, the run ended in a
traceback and the good files were not stored either).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.ingest.pipeline import ingest_documents, ingest_paths
from loader.ingest.sources import SourceDocument
from tests.fake_openai import FakeOpenAI
from tests.helpers import check_whole, ingest_settings, settings_env, stored_documents


def _pdf_with_metadata(text: str, metadata: dict[str, str]) -> bytes:
    from pypdf import PdfReader, PdfWriter

    from tests.pdfs import text_pdf

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(text_pdf([[text]]))))
    writer.add_metadata(metadata)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_nul_byte_deep_in_a_file_fails_that_file_only(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text("# Good\n\nThis one is fine.\n")
    (root / "deep.txt").write_bytes(b"harmless words " * 700 + b"\x00 and more text\n")
    (root / "also.md").write_text("# Also good\n\nStored as well.\n")
    (root / "meta.pdf").write_bytes(
        _pdf_with_metadata(
            "Backups should be tested.", {"/Title": "Back\x00ups", "/Author": "A\x00B"}
        )
    )
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    result = CliRunner().invoke(cli, ["ingest", str(root), "--json"], env=settings_env(settings))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    reasons = {Path(f["source"]).name: f["reason"] for f in _failed(result.output)}
    assert set(reasons) == {"deep.txt"}
    assert "NUL" in reasons["deep.txt"] and "10500" in reasons["deep.txt"]
    docs = stored_documents(conn)
    assert set(docs) == {"good.md", "also.md", "meta.pdf"}
    # NUL characters in PDF metadata are dropped (they are never meaningful there)
    assert docs["meta.pdf"][0] == "Backups"
    author = conn.execute(
        "SELECT metadata->>'author' FROM kb.documents WHERE source_uri LIKE '%meta.pdf'"
    ).fetchone()
    assert author == ("AB",)
    conn.rollback()
    check_whole(conn)


def _failed(output: str) -> list[dict[str, str]]:
    import json

    start = output.index("{")
    data = json.loads(output[start:])
    failed: list[dict[str, str]] = data["failed"]
    return failed


def test_a_database_error_on_one_document_fails_that_document_only(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    """Whatever slips past extraction, the database refusing one document is a per-document
    failure: its transaction rolls back, the others are stored."""
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    from loader.db.connect import connect
    from loader.providers.embeddings import get_embedder

    docs = [
        SourceDocument("mem://one", "One", "The first document is fine."),
        SourceDocument("mem://nul-meta", "Meta", "Text.", metadata={"k": "a\u0000b"}),
        SourceDocument("mem://nul-title", "Ti\x00tle", "More text."),
        SourceDocument("mem://nul-text", "Text", "Some \x00 text."),
        SourceDocument("mem://two", "Two", "The last document is fine too."),
    ]
    with connect(str(settings.database_url)) as loader_conn:
        report = ingest_documents(loader_conn, docs, get_embedder(settings), settings)
    reasons = {f["source"]: f["reason"] for f in report.failed}
    assert set(reasons) == {"mem://nul-meta", "mem://nul-title", "mem://nul-text"}
    for reason in reasons.values():  # why, read from the document's values
        assert reason.endswith("; it holds a NUL character, which PostgreSQL text cannot store")
    assert report.exit_code == 1
    assert set(stored_documents(conn)) == {"one", "two"}
    check_whole(conn)


def test_a_later_run_over_the_fixed_file_stores_it(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    bad = root / "deep.txt"
    bad.write_bytes(b"x " * 6000 + b"\x00")
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).exit_code == 1
    bad.write_bytes(b"x " * 6000 + b"fixed")
    report = ingest_paths(settings, [root])
    assert report.exit_code == 0 and report.new == 1
    check_whole(conn)


# --- defect 5: prune deletes only what is certainly gone ----------------------------------------


def _corpus(root: Path, names: list[str]) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {path.stem}\n\nThe text of {name}, which is about {path.stem}.\n")


def test_prune_keeps_documents_whose_files_cannot_be_checked(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    """``lstat`` failing with anything but "not found" (here ELOOP: the folder became a symlink
    loop, as real as a permission or I/O error, which root cannot provoke) keeps the documents."""
    root = tmp_path / "docs"
    _corpus(root, ["sub/a.md", "sub/b.md", "c.md", "d.md", "e.md"])
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).new == 5
    import shutil

    shutil.rmtree(root / "sub")
    (root / "sub").symlink_to(root / "sub")
    report = ingest_paths(settings, [root], prune=True)
    assert report.pruned == 0
    assert set(stored_documents(conn)) == {"a.md", "b.md", "c.md", "d.md", "e.md"}


def test_prune_skips_folders_that_failed_to_scan(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    from loader.db.connect import connect
    from loader.ingest.report import IngestReport
    from loader.ingest.sources import scan_paths
    from loader.ingest.writer import prune_missing

    root = tmp_path / "docs"
    _corpus(root, ["sub/a.md", "sub/b.md", "c.md", "d.md", "e.md", "f.md"])
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])
    (root / "sub" / "a.md").unlink()
    (root / "c.md").unlink()
    scan = scan_paths([root])
    # what os.walk reports for a folder it cannot list (root ignores permissions, so the
    # failure is recorded here the way scan_paths records it)
    scan.unreadable.append(root / "sub")
    report = IngestReport()
    with connect(str(settings.database_url)) as loader_conn:
        assert prune_missing(loader_conn, scan, report) == 1
    assert set(stored_documents(conn)) == {"a.md", "b.md", "d.md", "e.md", "f.md"}


def test_a_prune_of_most_documents_refuses_without_force(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _corpus(root, ["a.md", "b.md", "c.md", "d.md"])
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])
    for name in ("a.md", "b.md", "c.md"):  # what an unmounted or half-synced folder looks like
        (root / name).unlink()
    runner = CliRunner()
    result = runner.invoke(
        cli, ["ingest", str(root), "--prune", "--json"], env=settings_env(settings)
    )
    assert result.exit_code == 1, result.output
    (failure,) = _failed(result.output)
    assert "would delete 3 of the 4 documents" in failure["reason"]
    assert "--force" in failure["reason"]
    assert len(stored_documents(conn)) == 4

    env = {**settings_env(settings), "PGKB_PRUNE_MAX_FRACTION": "0.8"}
    result = runner.invoke(cli, ["ingest", str(root), "--prune"], env=env)
    assert result.exit_code == 0, result.output
    assert set(stored_documents(conn)) == {"d.md"}  # 3/4 = 0.75 <= 0.8: allowed


def test_force_prunes_beyond_the_share(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    _corpus(root, ["a.md", "b.md"])
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])
    (root / "a.md").unlink()
    (root / "b.md").unlink()
    _corpus(root, ["c.md"])
    refused = ingest_paths(settings, [root], prune=True)
    assert refused.pruned == 0 and refused.exit_code == 1
    result = CliRunner().invoke(
        cli, ["ingest", str(root), "--prune", "--force"], env=settings_env(settings)
    )
    assert result.exit_code == 0, result.output
    assert set(stored_documents(conn)) == {"c.md"}


# --- defect 9: symlinks out of the root, extraction limits, decompression bombs, terminals ------


def test_symlinks_leaving_the_ingest_root_are_refused(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "docs"
    outside = tmp_path / "outside"
    _corpus(root, ["a.md", "sub/b.md"])
    _corpus(outside, ["secret.md", "more/deep.md"])
    (root / "link.md").symlink_to(outside / "secret.md")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    (root / "alias.md").symlink_to(root / "a.md")  # inside the root: the same document
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    report = ingest_paths(settings, [root])
    reasons = {Path(f["source"]).name: f["reason"] for f in report.failed}
    assert set(reasons) == {"link.md", "linked"}
    assert "outside the folder" in reasons["link.md"] and "not ingested" in reasons["link.md"]
    assert "not followed" in reasons["linked"]
    assert set(stored_documents(conn)) == {"a.md", "b.md"}
    # given by its own path, the outside file is ingested as usual
    assert ingest_paths(settings, [outside / "secret.md"]).new == 1


def test_extraction_time_and_text_size_are_bounded(
    db_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No wall-clock race: the slow file never finishes (it waits forever in its worker), so the
    small files have the whole 5 s each, however loaded the machine."""
    from loader.ingest import pipeline
    from tests.reliability.test_extract import hang_on_hang_files

    monkeypatch.setattr(pipeline, "EXTRACT", hang_on_hang_files)
    root = tmp_path / "docs"
    _corpus(root, ["small.md"])
    (root / "hang.html").write_text("<html><body><p>never parsed</p></body></html>")
    (root / "long.txt").write_text("many words " * 300)
    settings = ingest_settings(db_url, tmp_path, fake_openai, extract_timeout=5, max_text_mb=0.002)
    report = ingest_paths(settings, [root])
    reasons = {Path(f["source"]).name: f["reason"] for f in report.failed}
    assert "took longer than 5 s" in reasons["hang.html"]
    assert "extracted text too large" in reasons["long.txt"]
    assert "small.md" not in reasons
    assert set(stored_documents(conn)) == {"small.md"}
    assert report.exit_code == 1


def _flate_bomb_pdf(uncompressed_mb: int) -> bytes:
    import zlib

    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import EncodedStreamObject, NameObject, NumberObject

    from tests.pdfs import text_pdf

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(text_pdf([["Bomb"]]))))
    payload = b"BT /F1 11 Tf 72 720 Td (Bomb) Tj ET\n" + b" " * (uncompressed_mb * 1_000_000)
    stream = EncodedStreamObject()
    stream[NameObject("/Filter")] = NameObject("/FlateDecode")
    stream._data = zlib.compress(payload, 9)
    stream[NameObject("/Length")] = NumberObject(len(stream._data))
    writer.pages[0][NameObject("/Contents")] = writer._add_object(stream)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_pdf_decompression_bomb_is_refused(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    from importlib.metadata import version

    major, minor, *_ = (int(x) for x in version("pypdf").split(".")[:3])
    assert (major, minor) >= (6, 10), "pyproject pins pypdf>=6.10.2 (decompression limits)"
    root = tmp_path / "docs"
    _corpus(root, ["fine.md"])
    bomb = _flate_bomb_pdf(200)
    assert len(bomb) < 1_000_000  # 200 MB of text in a small file
    (root / "bomb.pdf").write_bytes(bomb)
    report = ingest_paths(ingest_settings(db_url, tmp_path, fake_openai), [root])
    reasons = {Path(f["source"]).name: f["reason"] for f in report.failed}
    assert set(reasons) == {"bomb.pdf"}
    assert "limit" in reasons["bomb.pdf"].lower(), reasons
    assert set(stored_documents(conn)) == {"fine.md"}


def test_control_sequences_never_reach_the_terminal(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    from loader.safety import printable

    assert printable("a\x1b]0;pwned\x07b\x1b[2J\x1b[31mc\x9b1Ad\re\x08f\tg\nh") == "abcdef\tg\nh"
    root = tmp_path / "docs"
    root.mkdir()
    (root / "evil.md").write_text(
        "# Title \x1b[2J\x1b]0;owned\x07clear\n\nvacuum text with \x1b[8mhidden\x1b[0m words\n"
    )
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    ingest_paths(settings, [root])
    env = settings_env(settings)
    result = CliRunner().invoke(cli, ["search", "vacuum", "--mode", "keyword"], env=env)
    assert result.exit_code == 0, result.output
    assert "vacuum" in result.output and "hidden" in result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    result = CliRunner().invoke(cli, ["ask", "vacuum text"], env=env)
    assert result.exit_code in (0, 1), result.output
    assert "\x1b" not in result.output and "\x07" not in result.output


# --- review 4: a folder replaced by a file ------------------------------------------------------


def test_a_folder_replaced_by_a_file_is_pruned_and_said(
    db_url: str, tmp_path: Path, fake_openai: FakeOpenAI, conn: psycopg.Connection[Any]
) -> None:
    """``lstat`` of a document under a folder that became a file fails with ENOTDIR, which
    prune took for "cannot tell": the documents stayed forever, even with --force, and nothing
    said so (exit 0)."""
    import json
    import shutil

    root = tmp_path / "docs"
    _corpus(root, ["sub/a.md", "sub/b.md", "c.md", "d.md", "e.md", "more/x.md", "more/y.md"])
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [root]).new == 7
    shutil.rmtree(root / "sub")
    (root / "sub").write_text("a file where the folder was\n")
    runner, env = CliRunner(), settings_env(settings)

    result = runner.invoke(cli, ["ingest", str(root), "--prune", "--json"], env=env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["pruned"] == 2, data
    assert any(f"{root / 'sub'} is no longer a folder" in n for n in data["notes"]), data
    assert set(stored_documents(conn)) == {"c.md", "d.md", "e.md", "x.md", "y.md"}

    # most of what is left under a folder turned into a file: refused without --force, and
    # the note names the folder; --force removes them
    shutil.rmtree(root / "more")
    (root / "more").write_text("another file\n")
    for name in ("c.md", "d.md"):
        (root / name).unlink()
    result = runner.invoke(cli, ["ingest", str(root), "--prune", "--json"], env=env)
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert "would delete 4 of the 5 documents" in data["failed"][0]["reason"], data
    assert any(f"{root / 'more'} is no longer a folder" in n for n in data["notes"]), data
    assert len(stored_documents(conn)) == 5
    result = runner.invoke(cli, ["ingest", str(root), "--prune", "--force", "--json"], env=env)
    assert result.exit_code == 0, result.output
    assert set(stored_documents(conn)) == {"e.md"}
