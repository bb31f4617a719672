"""Fine-tuning a local sentence-transformers model on training pairs, on the CPU.

:func:`train` runs sentence-transformers' trainer with ``MultipleNegativesRankingLoss`` (each
anchor against its positive, every other positive of the batch and, when the pairs have them,
every hard negative of the batch: the contrastive loss with in-batch negatives; batches never
hold the same text twice, so no false negative), seeded, for
a bounded number of steps, writing checkpoints so that an interrupted run resumes. The result is
saved into a new folder with ``pgkb-tune.json``, its provenance: base model, corpus digest,
pairs, steps, seed, library versions. The folder appears whole or not at all (written beside
it, then renamed).

A checkpoint appears whole or not at all too: the trainer writes it into
``checkpoints/.saving``, its files and folder are flushed to disk (fsync), then it is renamed
into place and marked complete (:data:`COMPLETE`). A run killed while it saved leaves the
``.saving`` folder, a checkpoint without its mark (written by an older pgkb) or a request file
cut short: the next run discards what is broken, says so in a line, and resumes from the last
whole checkpoint (or from the start).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import math
import os
import resource
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loader.errors import ConfigError, PgkbError

if TYPE_CHECKING:  # the command line reads TrainOptions' defaults without the database layer
    from loader.ops.tune_pairs import Pair

log = logging.getLogger(__name__)

COMPLETE = "pgkb-complete"
"""The file a checkpoint gets once it is whole on disk."""
SAVING = ".saving"
"""Where the trainer writes a checkpoint before it is renamed into place."""
PROVENANCE = "pgkb-tune.json"
"""The file of a tuned model's folder that says how it was made."""
LOSS = "MultipleNegativesRankingLoss"

StepProgress = Callable[[str, dict[str, Any]], None]
"""``progress(event, info)``: ``train-start`` (steps, pairs), ``train-step`` (step)."""


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    seed: int = 0
    epochs: int = 1
    max_steps: int = 100
    """At most this many optimizer steps (the bound on time), whatever the epochs say: 100
    steps of 16 pairs with hard negatives train in under 30 minutes on a shared 2-core CPU
    (all-MiniLM-L6-v2, the measurements page)."""
    batch_size: int = 16
    """Pairs per step. 16 pairs with hard negatives at 128 tokens keep the whole command under
    4 GB (32 took 4.3 to 4.6 GiB: the attention of every text is kept for the backward pass)."""
    learning_rate: float = 2e-5
    max_seq_length: int = 128
    """Tokens read of each text while training (the bound on memory with the batch size); the
    saved model keeps the base's own input limit."""
    warmup_ratio: float = 0.1

    def steps(self, pairs: int) -> int:
        """Optimizer steps for ``pairs`` pairs: the epochs' worth, at most ``max_steps``."""
        per_epoch = max(1, math.ceil(pairs / self.batch_size))
        return min(self.max_steps, per_epoch * self.epochs)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def library_versions() -> dict[str, str]:
    """The versions of what shaped the weights (and of pgkb itself)."""
    found = {}
    for name in ("pgkb", "sentence-transformers", "transformers", "torch", "datasets"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def request_digest(base: Mapping[str, Any], pairs_digest: str, options: TrainOptions) -> str:
    """sha256 of what decides the weights: the base model, the pairs, the options."""
    blob = json.dumps(
        {"base": dict(base), "pairs": pairs_digest, "options": options.to_dict()},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def read_provenance(folder: Path) -> dict[str, Any] | None:
    """The provenance of a tuned model's folder (None when it is not one, or incomplete)."""
    try:
        data: object = json.loads((folder / PROVENANCE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _leftover_problem(marker: Path, request: Mapping[str, Any]) -> str | None:
    """Why the ``.partial`` folder of ``marker`` cannot be resumed for ``request`` ("" for
    another request's), or None when it can."""
    if not marker.is_file():
        return "it names no request (request.json is missing)"
    try:
        written = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"its request.json is unreadable ({exc}: the run was killed while it wrote it)"
    return None if written == request else ""


def _broken_checkpoints(checkpoints: Path) -> list[Path]:
    """The checkpoints (and the ``.saving`` folder) a kill left half written: without their
    :data:`COMPLETE` mark."""
    if not checkpoints.is_dir():
        return []
    found = [checkpoints / SAVING] if (checkpoints / SAVING).exists() else []
    found += [c for c in sorted(checkpoints.glob("checkpoint-*")) if not (c / COMPLETE).is_file()]
    return found


def _fsync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _fsync_tree(folder: Path) -> None:
    """Every file under ``folder`` and every folder of it on disk."""
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_file():
            with path.open("rb+") as handle:
                os.fsync(handle.fileno())
        elif path.is_dir():
            _fsync_folder(path)
    _fsync_folder(folder)


def _write_atomically(path: Path, text: str) -> None:
    """``text`` into ``path``: written beside it, flushed, renamed over it."""
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_folder(path.parent)


def _peak_rss_mb() -> float:
    """This process's peak resident memory (Linux reports kilobytes, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def _training_libraries() -> None:
    """The trainer's own dependencies, or a clear error naming the extra that brings them."""
    missing = []
    for module in ("datasets", "accelerate"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ConfigError(
            f"pgkb models tune needs {' and '.join(missing)} (sentence-transformers' trainer)",
            hint="pip install 'pgkb[tune]'",
        )


def train(
    base_folder: Path,
    pairs: Sequence[Pair],
    output: Path,
    options: TrainOptions,
    *,
    provenance: Mapping[str, Any],
    query_prompt: str = "",
    document_prompt: str = "",
    progress: StepProgress | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune the model in ``base_folder`` on ``pairs`` and save it into ``output`` (which
    must not exist) with its provenance (``provenance`` plus the training's own figures);
    returns the provenance written. Checkpoints go to ``<output>.partial``; an interrupted run
    with the same request resumes from the newest whole one there (``say`` gets a line for
    each broken leftover discarded)."""
    _training_libraries()
    import torch
    from datasets import Dataset
    from datasets.utils.logging import disable_progress_bar
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    try:  # sentence-transformers 6
        from sentence_transformers.base.sampler import BatchSamplers
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    except ImportError:  # 3 to 5
        from sentence_transformers.losses import (  # type: ignore[no-redef]
            MultipleNegativesRankingLoss,
        )
        from sentence_transformers.training_args import BatchSamplers  # type: ignore[no-redef]
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from transformers.utils import logging as hf_logging

    if output.exists():
        raise PgkbError(
            f"the tuned model folder {output} exists already",
            hint="pass another --output, or remove the folder",
        )
    tell = say or (lambda _: None)
    steps = options.steps(len(pairs))
    work = output.with_name(output.name + ".partial")
    request = dict(provenance.get("request") or {})
    marker = work / "request.json"
    if work.exists():
        problem = _leftover_problem(marker, request)
        if problem is not None:
            shutil.rmtree(work)
            if problem:  # another request's leftovers go without a word
                tell(f"discarded {work}: {problem}; training from the start")
    work.mkdir(parents=True, exist_ok=True)
    _write_atomically(marker, json.dumps(request, sort_keys=True))
    checkpoints = work / "checkpoints"
    for broken in _broken_checkpoints(checkpoints):
        shutil.rmtree(broken)
        tell(
            f"discarded {broken.name} of {work}: its save was interrupted (the run was "
            "killed while it saved); resuming from the last whole checkpoint, if any"
        )
    resume = checkpoints.is_dir() and any(checkpoints.glob("checkpoint-*"))

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    disable_progress_bar()
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    torch.manual_seed(options.seed)
    model = SentenceTransformer(str(base_folder), device="cpu", local_files_only=True)
    saved_length = model.max_seq_length
    model.max_seq_length = min(int(saved_length or options.max_seq_length), options.max_seq_length)
    # a widget example already set: the trainer does not scan the pairs for one (with a bar)
    model.model_card_data.widget = [{"text": "pgkb"}]
    columns = {"anchor": [p.anchor for p in pairs], "positive": [p.positive for p in pairs]}
    negatives = any(p.negative for p in pairs)
    if negatives:
        if not all(p.negative for p in pairs):
            raise ValueError("every pair needs a hard negative, or none may have one")
        columns["negative"] = [p.negative for p in pairs]
    data = Dataset.from_dict(columns)
    prompts = {
        column: prompt
        for column, prompt in (
            ("anchor", query_prompt),
            ("positive", document_prompt),
            ("negative", document_prompt if negatives else ""),
        )
        if prompt
    }
    arguments = SentenceTransformerTrainingArguments(
        output_dir=str(checkpoints),
        seed=options.seed,
        data_seed=options.seed,
        num_train_epochs=options.epochs,
        max_steps=steps,
        per_device_train_batch_size=options.batch_size,
        learning_rate=options.learning_rate,
        warmup_steps=math.ceil(options.warmup_ratio * steps),
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        prompts=prompts or None,
        use_cpu=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        logging_strategy="no",
        save_strategy="steps",
        save_steps=max(10, math.ceil(steps / 5)),
        save_total_limit=1,
        report_to="none",
        disable_tqdm=True,
    )

    class _AtomicCheckpoints(SentenceTransformerTrainer):
        """Each checkpoint written into ``checkpoints/.saving``, flushed, renamed into place,
        marked complete; then the older ones removed (``save_total_limit``)."""

        saving = False

        def _get_output_dir(self, trial: Any) -> str:
            if self.saving:
                return str(checkpoints / SAVING)
            return str(super()._get_output_dir(trial))

        def _save_checkpoint(self, model: Any, trial: Any) -> None:
            staging = checkpoints / SAVING
            shutil.rmtree(staging, ignore_errors=True)
            self.saving = True
            try:
                super()._save_checkpoint(model, trial)
            finally:
                self.saving = False
            (saved,) = staging.glob("checkpoint-*")
            _fsync_tree(saved)
            final = checkpoints / saved.name
            if final.exists():
                shutil.rmtree(final)
            saved.rename(final)
            _write_atomically(final / COMPLETE, str(self.state.global_step))
            _fsync_folder(checkpoints)
            shutil.rmtree(staging, ignore_errors=True)
            for older in checkpoints.glob("checkpoint-*"):
                if older != final:
                    shutil.rmtree(older, ignore_errors=True)

    class _Steps(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if progress:
                progress("train-step", {"step": int(state.global_step), "steps": steps})

    started = time.monotonic()
    if progress:
        progress("train-start", {"steps": steps, "pairs": len(pairs), "resume": resume})
    with warnings.catch_warnings():
        # the trainer's own deprecation notes about its dependencies: nothing a user can act on
        warnings.simplefilter("ignore")
        trainer = _AtomicCheckpoints(
            model=model,
            args=arguments,
            train_dataset=data,
            loss=MultipleNegativesRankingLoss(model),
            callbacks=[_Steps()],
        )
        trainer.remove_callback(PrinterCallback)  # its summary would go to stdout (--json)
        trainer.train(resume_from_checkpoint=True if resume else None)
    seconds = round(time.monotonic() - started, 1)
    model.max_seq_length = saved_length
    staged = work / "model"
    if staged.exists():
        shutil.rmtree(staged)
    model.save(str(staged), create_model_card=False)
    written = {
        **provenance,
        "steps": steps,
        "pairs_trained": len(pairs),
        "training": {
            **options.to_dict(),
            "loss": LOSS,
            "hard_negatives": negatives,
            "batch_sampler": "no_duplicates",
            "prompts": prompts,
            "resumed": resume,
            "seconds": seconds,
            "peak_rss_mb": _peak_rss_mb(),
            "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
        },
        "libraries": library_versions(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    (staged / PROVENANCE).write_text(json.dumps(written, indent=2) + "\n", encoding="utf-8")
    output.parent.mkdir(parents=True, exist_ok=True)
    _fsync_tree(staged)
    staged.rename(output)
    _fsync_folder(output.parent)
    shutil.rmtree(work, ignore_errors=True)
    return written
