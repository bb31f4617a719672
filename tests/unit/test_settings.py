"""One settings object: defaults < config file < environment < options, with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from loader.errors import ConfigError
from loader.settings import load_settings


def test_defaults_match_the_spec() -> None:
    s = load_settings(env={})
    assert (s.vector_candidates, s.keyword_candidates, s.rrf_k, s.match_count) == (20, 20, 10, 5)
    assert s.embedding_provider == "local"
    assert s.embedding_dims == 384
    assert s.database_url is None


def test_precedence_file_env_override(tmp_path: Path) -> None:
    config = tmp_path / "pgkb.toml"
    config.write_text("rrf_k = 10\nmatch_count = 7\nchunk_tokens = 150\n")
    s = load_settings(config, env={"PGKB_RRF_K": "20", "PGKB_MATCH_COUNT": "8"}, match_count=9)
    assert s.chunk_tokens == 150  # file
    assert s.rrf_k == 20  # environment beats file
    assert s.match_count == 9  # option beats environment


def test_config_file_found_in_working_directory(tmp_path: Path) -> None:
    (tmp_path / "pgkb.toml").write_text('embedding_model = "other"\nembedding_dims = 8\n')
    s = load_settings(env={})
    assert (s.embedding_model, s.embedding_dims) == ("other", 8)


def test_pgkb_config_variable(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere.toml"
    path.write_text("rrf_k = 5\n")
    assert load_settings(env={"PGKB_CONFIG": str(path)}).rrf_k == 5
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(env={"PGKB_CONFIG": str(tmp_path / "missing.toml")})


def test_bad_values_name_the_source_and_the_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"PGKB_RRF_K.*'sixty'.*rrf_k"):
        load_settings(env={"PGKB_RRF_K": "sixty"})
    with pytest.raises(ConfigError, match="embedding_provider"):
        load_settings(env={"PGKB_EMBEDDING_PROVIDER": "magic"})
    with pytest.raises(ConfigError, match="chunk_overlap"):
        load_settings(env={"PGKB_CHUNK_OVERLAP": "500"})
    bad = tmp_path / "bad.toml"
    bad.write_text("rrf_kk = 3\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) rrf_kk"):
        load_settings(bad, env={})
    broken = tmp_path / "broken.toml"
    broken.write_text("rrf_k = = 3\n")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(broken, env={})


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (" s3cret", "whitespace"),
        ("s3cret\n", "whitespace"),
        ("s3cr\u00e9t", "position 5"),
        ("two words", "position 4"),
        ("tab\there", "position 4"),
        ("   ", "empty"),
    ],
)
def test_a_serve_token_that_no_client_could_send_is_refused(
    token: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP strips a header's surrounding whitespace and carries visible ASCII as it is: such a
    token could never authenticate. The message never shows the token."""
    from click.testing import CliRunner

    from loader.cli import cli

    monkeypatch.setenv("PGKB_SERVE_TOKEN", token)
    with pytest.raises(ConfigError, match=says) as refused:
        load_settings()
    assert "serve_token" in refused.value.message
    assert not token.strip() or token.strip() not in refused.value.message
    result = CliRunner().invoke(cli, ["serve", "--port", "0"])  # refused before it loads anything
    assert result.exit_code == 2, result.output
    assert "serve_token" in result.output and says in result.output
    monkeypatch.setenv("PGKB_SERVE_TOKEN", "0b3c-9f_A.~+/=")
    assert load_settings().serve_token == "0b3c-9f_A.~+/="


def test_allowed_hosts_are_split() -> None:
    settings = load_settings(serve_allowed_hosts=" kb.internal, ,kb.example.com ")
    assert settings.allowed_hosts() == ("kb.internal", "kb.example.com")


def test_a_writing_token_is_checked_and_differs_from_the_read_token() -> None:
    with pytest.raises(ConfigError, match="serve_write_token has a character"):
        load_settings(serve_write_token="two words")
    with pytest.raises(ConfigError, match="serve_write_token is the same as serve_token"):
        load_settings(serve_token="abc123", serve_write_token="abc123")
    with pytest.raises(ConfigError, match="serve_max_upload must be at least 1024"):
        load_settings(serve_max_upload=10)
    settings = load_settings(serve_token="abc123", serve_write_token="def456")
    assert settings.serve_write_token == "def456" and settings.serve_max_upload == 20_000_000


def test_mcp_allow_writes_needs_the_collections_it_writes() -> None:
    from click.testing import CliRunner

    from loader.cli import cli

    result = CliRunner().invoke(cli, ["mcp", "--allow-writes"])
    assert result.exit_code == 2, result.output
    assert "--allow-writes needs the collections" in result.output
