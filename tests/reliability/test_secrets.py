"""Defect 7 of issue 12: secrets leaked.

- ``redact()`` masked only a password in the URL's user part; a ``password=`` keyword in a DSN or
  in the query string was printed as is by ``db status`` and by errors;
- ``OPENAI_API_KEY`` was sent to whatever ``embedding_base_url`` was configured;
- a ``./pgkb.toml`` in the working directory could redirect URLs silently.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from loader.cli import cli
from loader.db.connect import redact
from loader.settings import load_settings
from tests.fake_openai import FakeOpenAI

SECRET = "hunter2-Zq9"

LEAKY = [
    f"postgresql://kb:{SECRET}@db.example:5432/kb",
    f"postgresql://kb@db.example/kb?password={SECRET}",
    f"postgresql://db.example/kb?sslmode=require&password={SECRET}&application_name=x",
    f"host=db.example port=5432 dbname=kb user=kb password={SECRET}",
    f"host=db.example password = '{SECRET} with spaces' dbname=kb",
    f'host=db.example password="{SECRET}" dbname=kb',
    f"https://user:{SECRET}@llm.example/v1",
    f"https://llm.example/v1?api-key={SECRET}",
    f"cannot connect to the database host=h password={SECRET}: connection refused",
]


@pytest.mark.parametrize("text", LEAKY)
def test_redact_masks_every_form_of_password(text: str) -> None:
    masked = redact(text)
    assert SECRET not in masked and "with spaces" not in masked, masked
    assert "***" in masked
    assert "db.example" in masked or "llm.example" in masked or "host=h" in masked


def test_redact_keeps_what_is_not_secret() -> None:
    url = "postgresql://kb@localhost:5432/kb?sslmode=require"
    assert redact(url) == url
    assert redact("host=localhost dbname=kb") == "host=localhost dbname=kb"


def _cli_urls(db_url: str) -> list[str]:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    parts = urlsplit(db_url)
    return [
        f"{db_url}{'&' if parts.query else '?'}password={SECRET}",
        make_conninfo(**{**conninfo_to_dict(db_url), "password": SECRET}),
    ]


def test_db_status_never_prints_a_password(db_url: str, tmp_path: Path) -> None:
    runner = CliRunner()
    for url in _cli_urls(db_url):
        env = {"PGKB_DATABASE_URL": url, "PGKB_DATA_DIR": str(tmp_path / "data")}
        for args in (["db", "status"], ["db", "status", "--json"]):
            result = runner.invoke(cli, args, env=env)
            assert result.exit_code == 0, result.output
            assert SECRET not in result.output, (args, result.output)
        status = json.loads(runner.invoke(cli, ["db", "status", "--json"], env=env).output)
        assert "***" in status["database"]


def test_connection_errors_never_print_a_password(tmp_path: Path) -> None:
    runner = CliRunner()
    for url in (
        f"postgresql://kb:{SECRET}@127.0.0.1:1/kb",
        f"postgresql://kb@127.0.0.1:1/kb?password={SECRET}",
        f"host=127.0.0.1 port=1 dbname=kb password={SECRET}",
        f"host=127.0.0.1 port=1 dbname=kb password='{SECRET}' bogus",
    ):
        env = {"PGKB_DATABASE_URL": url, "PGKB_DATA_DIR": str(tmp_path / "data")}
        for args in (["db", "status"], ["search", "anything"], ["ingest", str(tmp_path)]):
            result = runner.invoke(cli, args, env=env)
            assert result.exit_code == 2, (args, result.output)
            assert SECRET not in result.output, (args, result.output)
            assert "Traceback" not in result.output


def test_openai_api_key_goes_only_to_openai(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loader.providers.embeddings import get_embedder
    from loader.providers.openai_embeddings import OpenAIEmbedder

    monkeypatch.setenv("OPENAI_API_KEY", f"sk-{SECRET}")
    settings = load_settings(
        env={},
        embedding_provider="openai",
        embedding_model="fake-embed",
        embedding_dims=fake_openai.dims,
        embedding_base_url=fake_openai.base_url,
        embedding_max_retries=0,
    )
    get_embedder(settings).embed_query("where does my key go?")
    (request,) = fake_openai.requests_to("/v1/embeddings")
    assert SECRET not in json.dumps(request.headers)

    # a key configured for that endpoint is sent to it
    explicit = OpenAIEmbedder(
        "fake-embed", fake_openai.dims, base_url=fake_openai.base_url, api_key="sk-for-this-one"
    )
    explicit.embed_query("and this one?")
    last = fake_openai.requests_to("/v1/embeddings")[-1]
    assert last.headers.get("authorization") == "Bearer sk-for-this-one"


def test_a_config_file_in_the_working_directory_that_changes_a_url_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pgkb.toml").write_text(
        f'database_url = "postgresql://kb:{SECRET}@evil.example/kb"\n'
        'chat_base_url = "http://evil.example/v1"\nchunk_tokens = 100\n'
    )
    settings = load_settings(env={})
    assert settings.chat_base_url == "http://evil.example/v1"
    err = capsys.readouterr().err
    assert str(tmp_path / "pgkb.toml") in err
    assert "database_url" in err and "chat_base_url" in err
    assert SECRET not in err

    (tmp_path / "pgkb.toml").write_text("chunk_tokens = 100\n")
    load_settings(env={})
    assert capsys.readouterr().err == ""  # no URL changed: nothing to say


# --- second review: URLs libpq does not parse, and an unclosed quote ----------------------------

UNPARSED = [
    f"postgresql+psycopg://kb:{SECRET}@127.0.0.1:1/kb",  # the SQLAlchemy form pgkb builds
    f"POSTGRESQL://kb:{SECRET}@127.0.0.1:1/kb",  # a scheme in capitals
    f"host=127.0.0.1 port=1 dbname=kb password='{SECRET}",  # an unclosed quote
    f'host=127.0.0.1 port=1 password="{SECRET} dbname=kb',
]


@pytest.mark.parametrize("url", UNPARSED)
def test_urls_libpq_cannot_parse_never_print_a_password(url: str, tmp_path: Path) -> None:
    """libpq quotes the whole string it could not parse in its error; ``doctor`` (text and
    ``--json``) and every other command printed that copy."""
    assert SECRET not in redact(f'missing "=" after "{url}" in connection info string')
    env = {"PGKB_DATABASE_URL": url, "PGKB_DATA_DIR": str(tmp_path / "data")}
    runner = CliRunner()
    for args in (["db", "doctor"], ["db", "doctor", "--json"], ["db", "status"], ["search", "x"]):
        result = runner.invoke(cli, args, env=env)
        assert "Traceback" not in result.output
        assert SECRET not in result.output, (args, result.output)
        assert "***" in result.output, (args, result.output)
