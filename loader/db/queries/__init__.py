"""Every SQL statement the Python side sends, by name, in one place (like procrastinate's
``sql/queries.sql``); the rows that come back are typed (``psycopg.rows.class_row`` into the
frozen dataclasses beside them).

Rules: values are always bound parameters (``%(name)s`` or ``%s``), never formatted into the
text; identifiers go through ``psycopg.sql`` (only ``CREATE DATABASE`` and ``DROP DATABASE``
need one, see :data:`CREATE_DATABASE`). Retrieval and data logic belong in SQL functions
(``sql_functions/``), so most statements here are one-line calls of a ``kb.`` function. The
Alembic migrations and ``loader.migration_ops`` (frozen with them) carry their own SQL, as
migrations must.

The statements are kept in one module per part of pgkb, re-exported here, so a caller writes
``queries.HYBRID_SEARCH`` whichever part holds it:

- :mod:`~loader.db.queries.schema`: the schema's state and the active model;
- :mod:`~loader.db.queries.retrieval`: searches, the abstention gate, context for answers;
- :mod:`~loader.db.queries.ingest`: ingestion, the ingestion lock, bulk index loads;
- :mod:`~loader.db.queries.jobs`: the write queue (submissions, removals, the worker's claims);
- :mod:`~loader.db.queries.graph`: the document graph, read and written;
- :mod:`~loader.db.queries.ops`: operations (stats, removal, models, indexes, roles, doctor);
- :mod:`~loader.db.queries.web`: the web interface's pages (catalogue, facets, run log, snippets).
"""

from loader.db.queries.graph import *  # noqa: F403
from loader.db.queries.ingest import *  # noqa: F403
from loader.db.queries.jobs import *  # noqa: F403
from loader.db.queries.ops import *  # noqa: F403
from loader.db.queries.retrieval import *  # noqa: F403
from loader.db.queries.schema import *  # noqa: F403
from loader.db.queries.web import *  # noqa: F403
