"""Errors a user can act on.

Every error pgkb raises on purpose is a :class:`PgkbError`: a message that says what failed, for
which file or value, and what to do. The CLI prints it without a traceback and exits with
``exit_code`` (2 for configuration and connection problems, which a scheduler can tell apart from
1, "some inputs failed").
"""

from __future__ import annotations


class PgkbError(Exception):
    """An error with a message meant for the person running pgkb."""

    exit_code = 2

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
