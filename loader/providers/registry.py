"""The database's record of the embedding model: :func:`ensure_model` registers the configured
model in ``kb.embedding_models`` and refuses to work when the database's active model is
another one (or the same one with other prompts)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.rows import class_row

from loader.db import queries
from loader.errors import ModelMismatchError
from loader.providers.embeddings import Embedder, identity, identity_mismatch


def ensure_model(
    conn: psycopg.Connection[Any],
    embedder: Embedder,
    hnsw: tuple[int | None, int | None] | None = None,
) -> int:
    """The id of ``embedder``'s model in ``kb.embedding_models``, registering it if new.

    Refuses (:class:`ModelMismatchError`) when the database's active model is another one:
    vectors of different models are never compared, so embedding with a model that searches do
    not use would be wasted work (switch with ``kb.activate_model`` after embedding everything
    with the new model, or fix the configuration). Commits the registration.
    """
    with conn.cursor(row_factory=class_row(queries.ModelRow)) as cur:
        row = cur.execute(queries.ACTIVE_MODEL).fetchone()
    if row is not None and (row.name, row.dims) != (embedder.name, embedder.dims):
        conn.rollback()
        raise ModelMismatchError(
            f"the configured embedding model {embedder.name} ({embedder.dims} dims) is not the "
            f"database's active model {row.name} ({row.dims} dims)",
            hint=f"set PGKB_EMBEDDING_MODEL={row.name} and PGKB_EMBEDDING_DIMS={row.dims}, or "
            "switch the database to the new model deliberately with "
            f"SELECT kb.activate_model('{embedder.name}', {embedder.dims})",
        )
    if row is not None:
        registered = conn.execute(queries.MODEL_CONFIG, (row.id,)).fetchone()
        differs = identity_mismatch(dict(registered[0] or {}) if registered else {}, embedder)
        conn.commit()
        if differs:
            raise ModelMismatchError(
                f"the configured embedding model {embedder.name} differs from the database's "
                f"active model in what changes its vectors: {differs}",
                hint="set them back to the registered values (pgkb models list --json shows "
                "them): other prompts make another vector space, which needs a fresh "
                "knowledge base or another model name",
            )
        return row.id
    # what pgkb needs to embed with it again (kb.embedding_models.config; never an API key), and
    # hnsw: (m, ef_construction) of the model's index, None = sized from the corpus
    config: dict[str, Any] = {"max_input_tokens": embedder.max_input_tokens}
    config.update({k: v for k, v in identity(embedder).items() if v})  # unset: not stored
    base_url = getattr(embedder, "base_url", None)
    if base_url:
        config["base_url"] = str(base_url)
    got = conn.execute(
        queries.REGISTER_MODEL,
        (
            embedder.name,
            embedder.dims,
            embedder.provider,
            json.dumps(config),
            *(hnsw or (None, None)),
        ),
    ).fetchone()
    conn.commit()
    assert got is not None
    return int(got[0])
