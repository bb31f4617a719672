"""pgkb models tune's training: the same seed and pairs make the same weights; the folder holds
its provenance and keeps the base's input limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loader.errors import PgkbError
from loader.ops.tune_pairs import Pair
from loader.ops.tune_train import PROVENANCE, TrainOptions, read_provenance, train
from loader.providers.local import folder_max_tokens
from tests.tiny_models import WORDS, build_sentence_model

PAIRS = [
    Pair(" ".join(WORDS[i : i + 3]), " ".join(WORDS[i + 3 : i + 12]), "span") for i in range(0, 24)
]


def _weights(folder: Path) -> dict[str, list[float]]:
    from safetensors.torch import load_file

    return {k: v.flatten().tolist() for k, v in load_file(folder / "model.safetensors").items()}


def test_same_seed_same_model_and_provenance(tmp_path: Path) -> None:
    base = build_sentence_model(tmp_path / "base", max_seq_length=24)
    options = TrainOptions(seed=5, max_steps=3, batch_size=4, learning_rate=1e-2, max_seq_length=16)
    made = [
        train(base, PAIRS, tmp_path / name, opts, provenance={"request": {"name": name}})
        for name, opts in (
            ("one", options),
            ("two", options),
            (
                "other",
                TrainOptions(
                    seed=6, max_steps=3, batch_size=4, learning_rate=1e-2, max_seq_length=16
                ),
            ),
        )
    ]
    one, two, other = (_weights(tmp_path / n) for n in ("one", "two", "other"))
    assert one == two
    assert one != other
    assert one != _weights(base)  # it did train
    written = read_provenance(tmp_path / "one")
    assert written == made[0] == json.loads((tmp_path / "one" / PROVENANCE).read_text())
    assert written["steps"] == 3 and written["training"]["seed"] == 5
    assert written["training"]["loss"] == "MultipleNegativesRankingLoss"
    assert written["libraries"]["sentence-transformers"]
    # the base's input limit, not the training's cut
    assert folder_max_tokens(tmp_path / "one") == folder_max_tokens(base) == 24
    assert not (tmp_path / "one.partial").exists()
    with pytest.raises(PgkbError, match="exists already"):
        train(base, PAIRS, tmp_path / "one", options, provenance={})


def test_hard_negatives_are_trained_on(tmp_path: Path) -> None:
    import dataclasses

    base = build_sentence_model(tmp_path / "base", max_seq_length=24)
    options = TrainOptions(seed=5, max_steps=3, batch_size=4, learning_rate=1e-2, max_seq_length=16)
    negatives = [
        dataclasses.replace(p, negative=" ".join(WORDS[i + 12 : i + 20]), negative_kind="section")
        for i, p in enumerate(PAIRS)
    ]
    plain = train(base, PAIRS, tmp_path / "plain", options, provenance={})
    hard = train(base, negatives, tmp_path / "hard", options, provenance={})
    assert not plain["training"]["hard_negatives"] and hard["training"]["hard_negatives"]
    assert _weights(tmp_path / "plain") != _weights(tmp_path / "hard")  # the negatives count
    with pytest.raises(ValueError, match="every pair needs a hard negative"):
        train(base, [*negatives[:-1], PAIRS[-1]], tmp_path / "mixed", options, provenance={})


def test_the_command_defaults_are_the_training_defaults() -> None:
    from loader.cli.models import models_tune

    defaults = {p.name: p.default for p in models_tune.params}
    for name in ("seed", "epochs", "max_steps", "batch_size", "max_seq_length", "learning_rate"):
        assert defaults[name] == getattr(TrainOptions(), name), name


def test_the_defaults_fit_a_two_core_machine() -> None:
    """The measured budget (docs/measurements/tuning.md): 100 steps of 16 pairs with hard
    negatives at 128 tokens train all-MiniLM-L6-v2 in under 30 minutes and 4 GB on a shared
    2-core CPU; 1,000 steps of 32 took hours and 4.3 to 4.6 GiB."""
    options = TrainOptions()
    assert (options.max_steps, options.batch_size, options.max_seq_length) == (100, 16, 128)
    assert options.steps(21_735) == 100  # the whole manual's pairs: the bound, not the epoch
