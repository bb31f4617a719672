"""Any local sentence-transformers model: by folder (offline) or Hub name, its prompts, its own
input limit driving the chunk size, and the ONNX Runtime backend against torch. Every model here
is a tiny one the tests build and save (tests/tiny_models.py); none is downloaded."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from loader.errors import ConfigError, ModelMismatchError
from loader.ingest.chunking import Chunker
from loader.ingest.extract import Section
from loader.providers.embeddings import chunk_size, get_embedder, reserved_tokens
from loader.providers.local import LocalEmbedder, model_folder
from loader.providers.registry import ensure_model
from loader.settings import Settings
from tests.tiny_models import build_sentence_model

PROMPTS = {"query": "query: ", "document": "passage: "}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model reading 24 tokens, with query and document prompts in its config."""
    return build_sentence_model(
        tmp_path_factory.mktemp("models") / "tiny", prompts=PROMPTS, max_seq_length=24
    )


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model_folder.cache_clear()


def _settings(folder: Path, tmp_path: Path, **changes: Any) -> Settings:
    return Settings(
        embedding_model=str(folder), embedding_dims=32, data_dir=tmp_path, **changes
    ).validate()


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_a_folder_loads_offline_with_its_prompts_and_input_limit(
    tiny: Path, tmp_path: Path
) -> None:
    embedder = get_embedder(_settings(tiny, tmp_path))
    assert isinstance(embedder, LocalEmbedder)
    assert (embedder.query_prompt, embedder.document_prompt) == ("query: ", "passage: ")
    assert embedder.max_input_tokens == 24  # the model's own limit, not the 256 of MiniLM
    passage = embedder.embed(["vacuum reclaims dead rows"])[0]
    query = embedder.embed_query("vacuum reclaims dead rows")
    assert len(query) == 32 and abs(_cosine(query, query) - 1) < 1e-5
    # the prompts are what tells the two apart: the same text, embedded with each prompt by hand
    model = embedder.model()
    by_hand = model.encode(
        ["query: vacuum reclaims dead rows", "passage: vacuum reclaims dead rows"],
        prompt="",
        normalize_embeddings=True,
    ).tolist()
    assert _cosine(query, by_hand[0]) > 0.9999
    assert _cosine(passage, by_hand[1]) > 0.9999
    assert _cosine(query, passage) < 0.9999


def test_prompt_settings_override_the_folders(tiny: Path, tmp_path: Path) -> None:
    plain = get_embedder(_settings(tiny, tmp_path, embedding_query_prompt=""))
    other = get_embedder(_settings(tiny, tmp_path, embedding_query_prompt="search: "))
    assert plain.query_prompt == "" and other.query_prompt == "search: "  # type: ignore[attr-defined]
    assert plain.document_prompt == "passage: "  # type: ignore[attr-defined]
    text = "btree range"
    assert (
        _cosine(plain.embed_query(text), plain.model().encode([text], prompt="")[0].tolist())
        > 0.9999
    )  # type: ignore[attr-defined]
    assert _cosine(plain.embed_query(text), other.embed_query(text)) < 0.9999


def test_the_models_input_limit_drives_and_caps_the_chunk_size(tiny: Path, tmp_path: Path) -> None:
    settings = _settings(tiny, tmp_path, chunk_overlap=4)
    embedder = get_embedder(settings)
    reserved = reserved_tokens(embedder)
    assert reserved == 2 + embedder.count_tokens("passage: ")  # [CLS] [SEP] and the prompt
    size = chunk_size(settings, embedder)
    assert size == 24 - reserved  # unset chunk_tokens: what the model's 24 tokens leave
    text = " ".join(["the vacuum reclaims storage of dead rows in the table"] * 12)
    chunker = Chunker.from_settings(settings, embedder)
    chunks = chunker.chunk("Vacuum", [Section(("Vacuum",), text)])
    assert len(chunks) > 3
    for chunk in chunks:
        assert embedder.count_tokens("passage: " + chunk.embed_text) + 2 <= 24
    with pytest.raises(ConfigError) as info:
        chunk_size(settings.replace(chunk_tokens=40), embedder)
    assert info.value.hint == f"set PGKB_CHUNK_TOKENS to at most {24 - reserved}"
    # the default model keeps its 200-token chunks
    assert chunk_size(Settings(), get_embedder(Settings())) == 200


def test_onnx_and_torch_give_the_same_vectors(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loader.providers import local

    monkeypatch.setattr(local, "_MODELS", {})  # loaded afresh, from this cache folder
    cache = tmp_path / "cache"
    onnx_embedder = get_embedder(_settings(tiny, tmp_path, cache_dir=cache))
    torch_embedder = get_embedder(
        _settings(tiny, tmp_path, cache_dir=cache, embedding_backend="torch")
    )
    assert onnx_embedder.backend == "onnx"  # type: ignore[attr-defined]  # the default
    assert onnx_embedder is not torch_embedder
    texts = ["vacuum", "btree index range equality sorted data", "a b c " * 20]  # one truncated
    for a, b in zip(torch_embedder.embed(texts), onnx_embedder.embed(texts), strict=True):
        assert _cosine(a, b) >= 0.9999
    assert _cosine(torch_embedder.embed_query("lock"), onnx_embedder.embed_query("lock")) >= 0.9999
    graphs = list((cache / "onnx").glob("*/model.onnx"))
    assert len(graphs) == 1  # made once, into cache_dir/onnx, reused by later loads


def test_the_backend_is_not_part_of_the_identity_but_the_prompts_are(
    tiny: Path, tmp_path: Path, conn: psycopg.Connection[Any]
) -> None:
    settings = _settings(tiny, tmp_path)
    model_id = ensure_model(conn, get_embedder(settings))
    config = conn.execute("SELECT config FROM kb.embedding_models").fetchone()[0]  # type: ignore[index]
    assert config["query_prompt"] == "query: " and config["document_prompt"] == "passage: "
    assert ensure_model(conn, get_embedder(settings.replace(embedding_backend="torch"))) == model_id
    with pytest.raises(ModelMismatchError) as info:
        ensure_model(conn, get_embedder(settings.replace(embedding_document_prompt="doc: ")))
    assert "PGKB_EMBEDDING_DOCUMENT_PROMPT='doc: ' (registered: 'passage: ')" in info.value.message


def test_a_missing_folder_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        get_embedder(Settings(embedding_model=str(tmp_path / "nowhere"), data_dir=tmp_path))
    assert "no such model folder" in info.value.message
    assert "PGKB_EMBEDDING_MODEL" in (info.value.hint or "")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="holds no model"):
        get_embedder(Settings(embedding_model=str(empty), data_dir=tmp_path))


def test_a_hub_name_comes_from_the_cache_offline_or_fails_clearly(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    with pytest.raises(ConfigError) as info:
        get_embedder(Settings(embedding_model="someone/tiny-model", data_dir=tmp_path))
    message = info.value.message
    assert "neither a model folder nor a model in the Hugging Face cache" in message
    assert "HF_HUB_OFFLINE is set" in message
    assert "PGKB_EMBEDDING_MODEL" in (info.value.hint or "")
    # the same name once the Hub cache holds it (as a download elsewhere would leave it)
    repo = cache / "models--someone--tiny-model"
    revision = "0" * 40
    shutil.copytree(tiny, repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    model_folder.cache_clear()
    embedder = get_embedder(
        Settings(embedding_model="someone/tiny-model", embedding_dims=32, data_dir=tmp_path)
    )
    assert embedder.max_input_tokens == 24
    assert len(embedder.embed_query("vacuum")) == 32


def test_models_add_takes_a_local_models_prompts_from_its_folder(
    tiny: Path, tmp_path: Path, conn: psycopg.Connection[Any]
) -> None:
    from loader.ops.models import add_model, model_settings

    ensure_model(conn, get_embedder(Settings(data_dir=tmp_path)))  # the active model: MiniLM
    added = add_model(conn, str(tiny), 32, "local")
    assert added.config["query_prompt"] == "query: "
    assert added.config["document_prompt"] == "passage: "
    again = model_settings(Settings(data_dir=tmp_path), added)
    embedder = get_embedder(again)
    assert isinstance(embedder, LocalEmbedder)
    assert (embedder.query_prompt, embedder.document_prompt) == ("query: ", "passage: ")
