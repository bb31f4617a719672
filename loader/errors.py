"""Errors a user can act on.

Every error pgkb raises on purpose is a :class:`PgkbError`: a message that says what failed, for
which file or value, and what to do. The CLI prints it without a traceback and exits with
``exit_code`` (2 for configuration and connection problems, which a scheduler can tell apart from
1, "some inputs failed").

pgkb's SQL functions raise with pgkb's own SQLSTATE codes (:class:`SqlState`, class ``PK``), so
Python and any other caller tell errors apart by code, never by message text:
:func:`database_error` turns a database error carrying one into its :class:`PgkbError` kind.
"""

from __future__ import annotations

import enum


class PgkbError(Exception):
    """An error with a message meant for the person running pgkb."""

    exit_code = 2
    sqlstate: SqlState | None = None
    """pgkb's SQLSTATE, when one of its SQL functions raised the error (:func:`database_error`)."""
    transient: bool = False
    """A failure that may pass by itself (a model API's 5xx, timeout or lost connection after its
    retries): a queued job is tried again later instead of failing for good."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class ConfigError(PgkbError):
    """A setting or option has an invalid value."""


class DatabaseError(PgkbError):
    """The database cannot be reached or is not in a state pgkb can use."""


class ModelMismatchError(PgkbError):
    """The configured embedding model disagrees with the one the database knows."""


class SqlState(enum.StrEnum):
    """pgkb's own SQLSTATE codes: what its SQL functions raise (``RAISE ... USING ERRCODE``).

    They are class ``PK``: the SQL standard leaves classes beginning with I-Z to implementations,
    PostgreSQL defines none named ``PK`` (and never raises one), so a code of this class always
    comes from pgkb. A caller in any language branches on the code (``SQLSTATE 'PK010'``); the
    message says the rest. The table of codes in the documentation is generated from
    :data:`SQLSTATES`.
    """

    INVALID_ARGUMENT = "PK001"
    MODEL_NOT_REGISTERED = "PK010"
    NO_MODEL = "PK011"
    DIMENSION_MISMATCH = "PK012"
    MODEL_NOT_READY = "PK013"
    MODEL_IN_USE = "PK014"
    NOT_FOUND = "PK020"
    COLLECTION_NOT_READABLE = "PK030"
    COLLECTION_NOT_WRITABLE = "PK031"
    KEYWORD_BACKEND_UNAVAILABLE = "PK040"


SQLSTATES: dict[SqlState, tuple[type[PgkbError], str]] = {
    SqlState.INVALID_ARGUMENT: (
        PgkbError,
        "An argument is out of range or malformed (a count, weight, interval or filters object, "
        "a relation type, a model's name, dimensions or index parameters): the message names it "
        "and what it accepts.",
    ),
    SqlState.MODEL_NOT_REGISTERED: (
        ModelMismatchError,
        "The embedding model the call names is not registered in this knowledge base.",
    ),
    SqlState.NO_MODEL: (
        PgkbError,
        "No embedding model is registered yet, so there is nothing to search by vector: ingest "
        "documents first, or search by keyword.",
    ),
    SqlState.DIMENSION_MISMATCH: (
        ModelMismatchError,
        "A vector's dimensions differ from its model's: a query embedding, or an embedding "
        "written to kb.embeddings.",
    ),
    SqlState.MODEL_NOT_READY: (
        PgkbError,
        "The model cannot be activated while some chunks have no embedding of it "
        "(`pgkb models reembed --model NAME` first).",
    ),
    SqlState.MODEL_IN_USE: (
        PgkbError,
        "The active model cannot be dropped: activate another one first.",
    ),
    SqlState.NOT_FOUND: (
        PgkbError,
        "An id the call names does not exist: an embedding model's id, or an ingestion run's.",
    ),
    SqlState.COLLECTION_NOT_READABLE: (
        PgkbError,
        "A collection the call asks for is not one the role may read, or not one of the "
        "session's collections.",
    ),
    SqlState.COLLECTION_NOT_WRITABLE: (
        PgkbError,
        "A collection the call writes into (kb.submit_document, kb.submit_file, "
        "kb.remove_document) is not one the role may write into: `pgkb db grant ROLE --write "
        "--collection NAME` grants it.",
    ),
    SqlState.KEYWORD_BACKEND_UNAVAILABLE: (
        PgkbError,
        "The keyword backend asked for (`keyword_backend = pg_textsearch`) cannot serve: the "
        "pg_textsearch extension or a collection's bm25 index is missing in this database "
        "(`pgkb db upgrade` creates them when the server can load it); or the setting's value is "
        "not one of auto, sql, pg_textsearch.",
    ),
}
"""Each code's :class:`PgkbError` kind and what it means."""


def database_error(exc: BaseException) -> PgkbError | None:
    """The :class:`PgkbError` for a database error raised with one of pgkb's codes (its kind by
    :data:`SQLSTATES`; PostgreSQL's message and hint as its text), or None for any other error.
    Works on any exception with psycopg's ``sqlstate`` and ``diag``."""
    sqlstate = getattr(exc, "sqlstate", None)
    if not isinstance(sqlstate, str) or sqlstate not in SqlState.__members__.values():
        return None
    code = SqlState(sqlstate)
    diag = getattr(exc, "diag", None)
    message = getattr(diag, "message_primary", None) or str(exc).strip()
    kind, _meaning = SQLSTATES[code]
    error = kind(message, hint=getattr(diag, "message_hint", None))
    error.sqlstate = code
    return error
