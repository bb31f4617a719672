"""Step time and peak RSS of tune_train.train: B pairs x steps, texts ~128+ tokens.
usage: python bench/tune_step_probe.py B STEPS neg|plain MODE OUTDIR
(MODE: as-is | noattndrop, the attention dropout off | cachedN, CachedMNRL of mini-batches of N)"""

import json
import sys
import time
from pathlib import Path
from typing import Any

import sentence_transformers as st
from sentence_transformers.sentence_transformer import losses

from loader.ops.tune_pairs import Pair
from loader.ops.tune_train import TrainOptions, train
from loader.providers.local import model_folder

B, steps, neg, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "neg", sys.argv[4]
if mode == "noattndrop":
    orig = st.SentenceTransformer

    def make(*a: Any, **k: Any) -> Any:
        m = orig(*a, **k)
        for name, mod in m.named_modules():
            if name.endswith("attention.self.dropout"):
                mod.p = 0.0
        return m

    st.SentenceTransformer = make  # type: ignore[misc,assignment]
elif mode.startswith("cached"):
    mini = int(mode[6:])

    def cached(model: Any) -> Any:
        return losses.CachedMultipleNegativesRankingLoss(model, mini_batch_size=mini)

    losses.MultipleNegativesRankingLoss = cached  # type: ignore[misc,assignment]
words = (
    (Path(__file__).resolve().parent.parent / "docs" / "guides" / "tuning.md").read_text().split()
)


def text(i: int, n: int) -> str:
    return " ".join(words[(i * 37) % 800 : (i * 37) % 800 + n])


pairs = [
    Pair(
        text(i, 25),
        text(i + 1, 160),
        "span",
        negative=text(i + 2, 160) if neg else "",
        negative_kind="section" if neg else "",
    )
    for i in range(B * steps)
]
out = Path(sys.argv[5]) / (f"probe-{B}-{steps}-{sys.argv[3]}-{mode}-{time.time():.0f}")
t = time.monotonic()
prov = train(
    model_folder("sentence-transformers/all-MiniLM-L6-v2"),
    pairs,
    out,
    TrainOptions(max_steps=steps, batch_size=B),
    provenance={},
)
print(
    json.dumps(
        {
            "B": B,
            "steps": steps,
            "neg": neg,
            "mode": mode,
            "train_s": prov["training"]["seconds"],
            "s_per_step": round(prov["training"]["seconds"] / steps, 2),
            "total_s": round(time.monotonic() - t, 1),
            "peak_mb": prov["training"]["peak_rss_mb"],
            "load": Path("/proc/loadavg").read_text().split()[:3],
        }
    ),
    flush=True,
)
