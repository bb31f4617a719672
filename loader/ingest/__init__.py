"""Ingestion: sources in, chunks and embeddings out, incrementally and atomically.

The pipeline, per source:

1. **Hash first.** A file's bytes are read and hashed (sha256) together with what shapes its
   chunks (chunk size, overlap, prefix mode, model, category and ``--meta``). Equal to the stored
   ``kb.documents.content_sha``: skipped, without parsing, chunking or embedding.
2. **Extract and chunk** (:mod:`~loader.ingest.extract`, :mod:`~loader.ingest.chunking`). A file
   that cannot be read or parsed is reported with its reason; its stored version (if any) stays
   as it was.
3. **Embed what is new.** Chunks whose embedded text (``content_sha``) already has a vector of the
   active model anywhere in the knowledge base reuse it; the rest go to the model in batches that
   span documents (``embedding_batch_size``).
4. **Replace atomically.** One transaction per document: upsert the ``kb.documents`` row, delete
   its chunks, binary-``COPY`` the new chunks and their vectors. Readers see the old version or
   the new one, never a mix or nothing; a run killed at any moment leaves every document whole.
   A run that writes at least ``hnsw_bulk_threshold`` vectors, more than the model's HNSW index
   holds, drops that index first and builds it after the load, also when the load fails
   (:mod:`~loader.ingest.bulk_index`).

A run holds a session advisory lock (two runs never interleave; kill -9 releases it with the
connection). Run-level problems (configuration, connection, model mismatch, an embeddings API that
fails after its retries) stop the run; what was already committed stays, complete.
"""
