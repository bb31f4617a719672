"""Source identity that survives a move: ``source_uri`` relative to a source root.

With ``source_root`` (``pgkb ingest --root DIR``) set, a file's ``source_uri`` is its path
relative to the root, in POSIX form (``guides/vacuum.md``), so the same folder mounted elsewhere,
or ingested by a scheduler on another host, is the same set of documents. Without it,
``source_uri`` is the file's absolute path (pgkb's default).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path

from loader.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class SourceNames:
    root: Path | None = None
    """The resolved source root, or None for absolute paths."""

    @classmethod
    def for_root(cls, root: str | os.PathLike[str] | None) -> SourceNames:
        if root is None:
            return cls(None)
        path = Path(root).expanduser()
        if not path.is_dir():
            raise ConfigError(
                f"the source root {path} is not a folder",
                hint="give --root (or source_root) the folder your documents live under",
            )
        return cls(path.resolve())

    def uri(self, path: Path) -> str:
        """The ``source_uri`` of the (resolved) file ``path``."""
        if self.root is None:
            return str(path)
        return path.relative_to(self.root).as_posix()

    def path(self, uri: str) -> Path:
        """Where the document ``uri`` lives on this host."""
        if self.root is None or os.path.isabs(uri):
            return Path(uri)
        return self.root / uri

    def owns(self, uri: str) -> bool:
        """Whether ``uri`` was named under this scheme (relative under a root, absolute without)."""
        return os.path.isabs(uri) == (self.root is None)

    def like_prefix(self, folder: Path) -> str:
        """A LIKE pattern matching the source_uri of every file under ``folder``."""
        if self.root is not None and folder == self.root:
            return "%"
        text = (self.uri(folder) if self.root is not None else str(folder)).rstrip("/") + "/"
        return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"

    def check(self, paths: Iterable[Path]) -> None:
        """:class:`ConfigError` naming the first of ``paths`` outside the root."""
        if self.root is None:
            return
        for path in paths:
            if not path.is_relative_to(self.root):
                raise ConfigError(
                    f"{path} is outside the source root {self.root}",
                    hint="ingest files under --root only, or choose a root that contains them",
                )
