"""Chunking in the model's own tokens: boundaries, heading paths, prefixes, sizes, overlap."""

from __future__ import annotations

import hashlib
import itertools

import pytest

from loader.errors import ConfigError
from loader.ingest.chunking import Chunker
from loader.ingest.extract import Section
from loader.providers.embeddings import check_chunk_size
from loader.providers.local import LocalEmbedder
from loader.settings import Settings


@pytest.fixture(scope="module")
def tokenizer_only() -> LocalEmbedder:
    """The local model's tokenizer (tokenizer.json); the weights are never loaded here."""
    return LocalEmbedder()


def _paragraph(seed: str, words: int) -> str:
    return " ".join(f"{seed}{i}" for i in range(words)) + "."


def test_counts_tokens_without_special_tokens(tokenizer_only: LocalEmbedder) -> None:
    assert tokenizer_only.count_tokens("hello world") == 2
    assert tokenizer_only.special_tokens == 2  # [CLS] and [SEP]


def test_paragraph_boundaries_come_first(tokenizer_only: LocalEmbedder) -> None:
    paragraphs = [
        "Vacuum reclaims storage occupied by dead tuples. " * 6,
        "Analyze collects statistics about the contents of tables. " * 6,
        "Reindex rebuilds an index using the data stored in the table. " * 6,
    ]
    chunker = Chunker(tokenizer_only, 100, 0, embed_heading_path=False)
    chunks = chunker.chunk("Doc", [Section(("Maintenance",), "\n\n".join(paragraphs))])
    assert [c.content for c in chunks] == [p.strip() for p in paragraphs]


def test_chunks_fit_the_budget_with_their_prefix(tokenizer_only: LocalEmbedder) -> None:
    text = " ".join(f"Sentence number {i} talks about write-ahead logging." for i in range(200))
    chunker = Chunker(tokenizer_only, 64, 0)
    path = ("Chapter 30. Reliability and the Write-Ahead Log", "30.3. Write-Ahead Logging (WAL)")
    chunks = chunker.chunk("30.3. Write-Ahead Logging (WAL)", [Section(path, text)])
    assert len(chunks) > 10
    for chunk in chunks:
        assert chunk.heading_path == " > ".join(path)
        assert chunk.embed_text == f"{' > '.join(path)}\n\n{chunk.content}"
        assert tokenizer_only.count_tokens(chunk.embed_text) <= 64
        assert chunk.token_count == tokenizer_only.count_tokens(chunk.content)
        assert chunk.content_sha == hashlib.sha256(chunk.embed_text.encode()).hexdigest()
        # sentences, not words, are the next boundary after paragraphs
        assert chunk.content.endswith(".")
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_title_prefix_without_headings_and_no_prefix_mode(tokenizer_only: LocalEmbedder) -> None:
    section = Section((), "Short text.")
    [with_title] = Chunker(tokenizer_only, 64, 0).chunk("Leave Policy", [section])
    assert with_title.embed_text == "Leave Policy\n\nShort text."
    # the stored path leads with the title too, so its words are searchable (weight A)
    assert with_title.heading_path == "Leave Policy"
    [titled] = Chunker(tokenizer_only, 64, 0).chunk("Leave", [Section(("Leave", "Rules"), "x")])
    assert titled.heading_path == "Leave > Rules"  # a path that names the title keeps it once
    [bare] = Chunker(tokenizer_only, 64, 0, embed_heading_path=False).chunk("T", [section])
    assert bare.embed_text == bare.content == "Short text."
    assert bare.content_sha != with_title.content_sha


def test_a_very_long_heading_path_is_shortened_not_the_chunk(
    tokenizer_only: LocalEmbedder,
) -> None:
    path = tuple(f"Level {i} heading with several words in it" for i in range(12))
    chunks = Chunker(tokenizer_only, 48, 0).chunk("T", [Section(path, "Body text here. " * 40)])
    for chunk in chunks:
        assert tokenizer_only.count_tokens(chunk.embed_text) <= 48
        prefix = chunk.embed_text.split("\n\n")[0]
        assert prefix.endswith("Level 11 heading with several words in it")


def test_overlap_repeats_text_between_neighbours(tokenizer_only: LocalEmbedder) -> None:
    text = " ".join(f"Fact {i} is stated here." for i in range(120))
    chunks = Chunker(tokenizer_only, 60, 20, embed_heading_path=False).chunk(
        "T", [Section((), text)]
    )
    assert len(chunks) > 3
    for left, right in itertools.pairwise(chunks):
        tail = left.content.split()[-3:]
        assert " ".join(tail) in right.content
    no_overlap = Chunker(tokenizer_only, 60, 0, embed_heading_path=False).chunk(
        "T", [Section((), text)]
    )
    assert len(no_overlap) < len(chunks)


def test_sections_are_never_merged(tokenizer_only: LocalEmbedder) -> None:
    sections = [Section(("A",), "Alpha text."), Section(("A", "B"), "Beta text.")]
    chunks = Chunker(tokenizer_only, 200, 0).chunk("A", sections)
    assert [(c.heading_path, c.content) for c in chunks] == [
        ("A", "Alpha text."),
        ("A > B", "Beta text."),
    ]


def test_chunk_size_beyond_the_model_input_is_a_config_error(
    tokenizer_only: LocalEmbedder,
) -> None:
    check_chunk_size(Settings(chunk_tokens=254), tokenizer_only)  # 254 + 2 special = 256: fits
    with pytest.raises(ConfigError) as info:
        check_chunk_size(Settings(chunk_tokens=255), tokenizer_only)
    assert "chunk_tokens=255" in info.value.message
    assert info.value.hint == "set PGKB_CHUNK_TOKENS to at most 254"
    with pytest.raises(ConfigError):
        Chunker.from_settings(Settings(chunk_tokens=300, chunk_overlap=10), tokenizer_only)


def test_an_input_limit_above_what_the_model_reads_is_a_config_error() -> None:
    embedder = LocalEmbedder(max_input_tokens=512)
    assert embedder.model_max_tokens == 256  # from sentence_bert_config.json, no torch
    with pytest.raises(ConfigError, match=r"exceeds what .* reads \(256 tokens\)"):
        check_chunk_size(Settings(chunk_tokens=400, embedding_max_input_tokens=512), embedder)
