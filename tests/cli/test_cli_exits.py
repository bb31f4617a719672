"""What a scheduler reads when a run fails: with ``--json``, every exit prints one JSON object
with ``error`` and ``hint`` on stdout (never empty stdout), and a run under cron's empty
environment (no ``HOME``) refuses instead of starting a second, empty database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from loader.cli import cli
from loader.ingest.writer import INGEST_LOCK_KEY

REPO = Path(__file__).resolve().parents[2]
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=3"


def _one_json_error(stdout: str) -> dict[str, Any]:
    """stdout holds exactly one JSON object, with a non-empty error and hint."""
    data = json.loads(stdout)  # raises on empty output or on two objects
    assert isinstance(data, dict), stdout
    assert isinstance(data.get("error"), str) and data["error"], data
    assert isinstance(data.get("hint"), str) and data["hint"], data
    return data


def _invoke(args: list[str], env: dict[str, str | None]) -> Result:
    return CliRunner().invoke(cli, args, env=env)


def test_lock_held_with_no_wait(cli_env: dict[str, str], db_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nSome text.\n", encoding="utf-8")
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (INGEST_LOCK_KEY,))
        result = _invoke(["ingest", str(folder), "--no-wait", "--json"], dict(cli_env))
    assert result.exit_code == 2, result.output
    data = _one_json_error(result.stdout)
    assert "another pgkb ingest is running" in data["error"]
    assert "--wait" in data["hint"] and data["exit_code"] == 2
    assert result.stderr == ""  # the error is the JSON object, once


@pytest.mark.parametrize(
    "args",
    [
        ["stats", "--json"],
        ["search", "vacuum", "--json"],
        ["db", "doctor", "--json"],
    ],
)
def test_database_unreachable(args: list[str], tmp_path: Path) -> None:
    env: dict[str, str | None] = {"PGKB_DATABASE_URL": UNREACHABLE}
    result = _invoke(args, env)
    if args[:2] == ["db", "doctor"]:  # doctor reports the failed check in its own JSON, exit 2
        assert result.exit_code != 0
        assert json.loads(result.stdout)
        return
    assert result.exit_code == 2, result.output
    data = _one_json_error(result.stdout)
    assert "127.0.0.1" in data["error"] or "connect" in data["error"]


def test_bad_settings(tmp_path: Path) -> None:
    env: dict[str, str | None] = {
        "PGKB_DATABASE_URL": UNREACHABLE,
        "PGKB_CHUNK_TOKENS": "many",
    }
    result = _invoke(["ingest", str(tmp_path), "--json"], env)
    assert result.exit_code == 2, result.output
    data = _one_json_error(result.stdout)
    assert "PGKB_CHUNK_TOKENS" in data["error"]

    missing = _invoke(["--config", str(tmp_path / "absent.toml"), "stats", "--json"], {})
    assert missing.exit_code == 2, missing.output
    assert "absent.toml" in _one_json_error(missing.stdout)["error"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["ingest", "--json", "--no-such-option", "x"], "--no-such-option"),
        (["ingest", "--json"], "PATHS"),
        (["search", "--json", "--limit", "many", "q"], "many"),
        (["no-such-command", "--json"], "no-such-command"),
        (["--no-such-root-option", "stats", "--json"], "--no-such-root-option"),
        (["db", "status", "--json", "extra"], "extra"),
    ],
)
def test_usage_errors(args: list[str], named: str) -> None:
    result = _invoke(args, {"PGKB_DATABASE_URL": UNREACHABLE})
    assert result.exit_code == 2, result.output
    data = _one_json_error(result.stdout)
    assert named in data["error"]
    assert "--help" in data["hint"]


def test_without_json_stdout_stays_empty_on_errors(tmp_path: Path) -> None:
    result = _invoke(["stats"], {"PGKB_DATABASE_URL": UNREACHABLE})
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "Error:" in result.stderr


def test_no_home_refuses_naming_the_settings(tmp_path: Path) -> None:
    result = _invoke(["stats", "--json"], {"HOME": None})
    assert result.exit_code == 2, result.output
    data = _one_json_error(result.stdout)
    assert "HOME is not set" in data["error"]
    assert "PGKB_DATA_DIR" in data["hint"] and "PGKB_DATABASE_URL" in data["hint"]
    # with the data folder (or a URL) given, HOME is not needed
    given = _invoke(["db", "url"], {"HOME": None, "PGKB_DATABASE_URL": "postgresql://h/kb"})
    assert given.exit_code == 0, given.output


def test_cron_environment_refuses_before_starting_a_database(tmp_path: Path) -> None:
    """``env -i pgkb ingest --json DIR``, as cron runs it: exit 2 and one JSON object naming
    PGKB_DATA_DIR (the refusal comes while loading the settings, before any server starts)."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nSome text.\n", encoding="utf-8")
    env = {"PATH": os.defpath, "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-m", "loader.cli.main", "ingest", "--json", str(folder)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    data = _one_json_error(run.stdout)
    assert "HOME is not set" in data["error"] and "PGKB_DATA_DIR" in data["hint"]


def _json_values(text: str) -> list[Any]:
    """The JSON values ``text`` is made of, in order (whitespace between them); a
    :class:`json.JSONDecodeError` at the first thing that is not JSON."""
    decoder = json.JSONDecoder()
    values, at = [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return values
        value, at = decoder.raw_decode(text, at)
        values.append(value)


def _pgkb(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """pgkb in a process of its own, stderr into stdout: what ``>> log 2>&1`` collects."""
    return subprocess.run(
        [sys.executable, "-c", "from loader.cli import main; main()", *args],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )


def test_a_json_run_writes_only_json_even_into_one_log(
    db_url: str, tmp_path: Path, fake_openai: Any, conn: psycopg.Connection[Any]
) -> None:
    """``pgkb ... --json >> log 2>&1``: the log holds JSON values only: the run's one object
    (its result, or its error: not the error again as text), and anything pgkb says on stderr
    on the way (a note, a log record) as one JSON object per line, with its level."""
    from loader.ingest.pipeline import ingest_paths
    from tests.helpers import ingest_settings, settings_env

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nSome text about vacuum.\n", encoding="utf-8")
    settings = ingest_settings(db_url, tmp_path, fake_openai)
    assert ingest_paths(settings, [folder]).exit_code == 0
    env = settings_env(settings)

    # an error: the lock is held and --no-wait; and a note on the way (a ./pgkb.toml that sets
    # a URL is named on stderr)
    work = tmp_path / "work"
    work.mkdir()
    (work / "pgkb.toml").write_text(f'database_url = "{db_url}"\n')
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (INGEST_LOCK_KEY,))
        run = _pgkb(["ingest", str(folder), "--no-wait", "--json"], env, work)
    assert run.returncode == 2, run.stdout
    values = _json_values(run.stdout)
    errors = [v for v in values if "error" in v]
    assert len(errors) == 1 and "another pgkb ingest is running" in errors[0]["error"]
    notes = [v for v in values if v is not errors[0]]
    assert any("pgkb.toml" in n["message"] and n["level"] for n in notes), values

    # a warning logged on the way (the model's HNSW index found missing), then the result
    conn.execute("SELECT kb.drop_model_index(id) FROM kb.embedding_models WHERE is_active")
    conn.commit()
    run = _pgkb(["models", "reembed", "--model", "fake-embed", "--json"], env, tmp_path)
    assert run.returncode == 0, run.stdout
    values = _json_values(run.stdout)
    assert values[-1]["index_was_missing"] is True and values[-1]["index_rebuilt"] is True
    logged = values[:-1]
    assert logged and all(v["level"] == "warning" and v["logger"] for v in logged), logged
    assert any("HNSW index" in v["message"] for v in logged), logged


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_a_query_that_is_not_utf8_is_refused_without_a_traceback(
    cli_env: dict[str, str], mode: str
) -> None:
    """Bytes that are not UTF-8 in the command line reach Python as lone surrogates: the
    tokenizer (hybrid) and psycopg (keyword) raised on them, "this is a bug in pgkb" and a
    traceback."""
    for extra in ([], ["--json"]):
        done = subprocess.run(
            [sys.executable, "-c", "from loader.cli import main; main()", "search",
             b"\xed\xa0\x80 keys \xff", "--mode", mode, *extra],
            env={**os.environ, **cli_env}, capture_output=True, timeout=300, check=False,
        )  # fmt: skip
        out, err = done.stdout.decode(), done.stderr.decode()
        assert done.returncode == 2, (out, err)
        assert "Traceback" not in err and "bug in pgkb" not in out + err, (out, err)
        said = json.loads(out)["error"] if extra else err
        assert "not UTF-8" in said, (out, err)
