"""The query's embedding, started before the connection opens: in a forked child on Linux (the
vector comes back exactly), a thread otherwise; a failing child leaves the work, and its error,
to the caller."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from loader.errors import ConfigError
from loader.providers import query_embedding
from loader.providers.query_embedding import PrefetchedQuery


class Fake:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[str] = []

    def embed_query(self, text: str) -> list[float]:
        self.calls.append(text)
        if self.fail:
            raise ConfigError("no model here", hint="fix it")
        return [len(text) / 7, -1 / 3, 1e-30, 0.1]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]


@pytest.mark.parametrize("fork", [True, False], ids=["fork", "thread"])
def test_the_prefetched_vector_is_the_embedders(
    fork: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(query_embedding, "_can_fork", lambda: fork)
    fake = Fake()
    prefetched = PrefetchedQuery(fake, "vacuum")  # type: ignore[arg-type]
    assert prefetched.embed_query("vacuum") == [6 / 7, -1 / 3, 1e-30, 0.1]  # exact floats
    # forked: the child did the work (its calls are not in this process's list)
    assert fake.calls == ([] if fork else ["vacuum"])
    assert prefetched.embed_query("other") == [5 / 7, -1 / 3, 1e-30, 0.1]  # asked again: here
    assert fake.calls[-1] == "other"


@pytest.mark.parametrize("fork", [True, False], ids=["fork", "thread"])
def test_a_failure_is_raised_to_the_caller(fork: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(query_embedding, "_can_fork", lambda: fork)
    fake = Fake(fail=True)
    prefetched = PrefetchedQuery(fake, "vacuum")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no model here"):
        prefetched.embed_query("vacuum")
    assert fake.calls == ["vacuum"]  # forked: the child failed, the caller embedded (and raised)
