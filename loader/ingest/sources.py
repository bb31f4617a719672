"""Sources on disk and in memory: walking folders, reading files safely, file metadata, and the
``source_uri`` a file is stored under (:class:`SourceNames`, relative to a source root if set)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from loader.errors import ConfigError
from loader.ingest.extract import FORMATS, ExtractionError, Section, mime_type


@dataclasses.dataclass(frozen=True)
class SourceDocument:
    """One document to ingest from memory (files go through :func:`ingest_paths`).

    ``sections`` carry heading paths when the source has headings; without them ``text`` is one
    section. ``source_uri`` is the document's identity: ingesting it again replaces it.
    """

    source_uri: str
    title: str
    text: str
    sections: list[Section] | None = None
    category: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Scan:
    files: list[Path] = dataclasses.field(default_factory=list)
    roots: list[Path] = dataclasses.field(default_factory=list)
    failures: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    unreadable: list[Path] = dataclasses.field(default_factory=list)
    """Folders that could not be listed: prune keeps every document under them."""
    identity: dict[Path, tuple[int, int]] = dataclasses.field(default_factory=dict)
    """Each file's ``(st_dev, st_ino)`` when it was scanned: :func:`read_file` reads that file
    or nothing (a file swapped for a link, or another file, between the scan and the read)."""
    outside: list[Path] = dataclasses.field(default_factory=list)
    """Paths under a scanned folder that are symbolic links leaving it: no file of the folder
    is there any more, so ``--prune`` removes what was stored under such a name."""


def shown_path(path: str) -> str:
    """A path as text that can be printed and stored: bytes that are not UTF-8 (kept by Python
    as surrogates) are shown as \\xNN escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


def not_regular(mode: int) -> str | None:
    """Why a file of this ``st_mode`` is not ingested (a FIFO would block ``open()`` forever, a
    device never end), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "a special file")
    return f"not a regular file ({kind}): skipped"


def scan_paths(paths: Sequence[str | os.PathLike[str]]) -> Scan:
    """Files (resolved, de-duplicated, sorted) under ``paths``; loops and dead links reported.

    A path that does not exist is a :class:`ConfigError` (nothing is done). Directories are
    walked recursively, following symbolic links but never into a directory already visited:
    a link back to a folder it is in (a symlink loop) is reported, not followed forever; a
    second way to a folder walked already (an alias link) is passed over quietly, its files
    being listed once, under their real paths. Hidden files and folders are skipped.
    """
    scan = Scan()
    seen: set[Path] = set()

    def add(path: Path, root: Path | None = None) -> None:
        try:
            real = path.resolve(strict=True)
        except RuntimeError:
            scan.failures.append((str(path.absolute()), "symlink loop"))
            return
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                scan.failures.append((str(path.absolute()), "symlink loop"))
            elif exc.errno == errno.ENOENT and os.path.islink(path):
                scan.failures.append((str(path.absolute()), "broken symbolic link"))
            else:
                scan.failures.append((str(path.absolute()), f"cannot read: {exc.strerror}"))
            return
        try:
            # ``real`` holds no link: lstat, so a link swapped in since resolve() is not followed
            st = os.lstat(real)
        except OSError as exc:
            scan.failures.append((str(path.absolute()), f"cannot read: {exc.strerror}"))
            return
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            scan.failures.append(
                (str(path.absolute()), "changed into a symbolic link while scanned: not followed")
            )
            return
        special = not_regular(mode)
        if special is not None:
            scan.failures.append((str(path.absolute()), special))
            return
        try:
            str(real).encode("utf-8")
        except UnicodeEncodeError:
            scan.failures.append(
                (
                    str(path.absolute()),
                    "the file name is not valid UTF-8, which PostgreSQL cannot store; rename the "
                    "file (e.g. convmv -f latin1 -t utf8 --notest NAME)",
                )
            )
            return
        if root is not None and not _inside(real, root):
            scan.outside.append(path.absolute())
            scan.failures.append(
                (
                    str(path.absolute()),
                    f"symbolic link to {real}, outside the folder {root}: not ingested "
                    "(give that path to ingest it)",
                )
            )
            return
        if real not in seen:
            seen.add(real)
            scan.files.append(real)
            scan.identity[real] = (st.st_dev, st.st_ino)

    for raw in paths:
        path = Path(raw).expanduser().absolute()
        if not os.path.lexists(path):
            raise ConfigError(f"{path} does not exist", hint="check the path you gave to ingest")
        try:
            is_dir = path.is_dir()
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                scan.failures.append((str(path), "symlink loop"))
                continue
            raise
        if not is_dir:
            if mime_type(path) is None and path.exists():
                scan.failures.append(
                    (
                        str(path.resolve()),
                        f"unsupported file type {path.suffix or '(none)'}; pgkb reads "
                        + ", ".join(sorted(FORMATS)),
                    )
                )
                continue
            add(path)
            continue
        root = path.resolve()
        scan.roots.append(root)
        visited: set[tuple[int, int]] = set()
        folders: dict[str, tuple[int, int]] = {}  # each folder walked, by the path it was walked at

        def on_error(exc: OSError) -> None:
            scan.failures.append((str(exc.filename), f"cannot read folder: {exc.strerror}"))
            if exc.filename is not None:
                scan.unreadable.append(Path(os.fsdecode(exc.filename)))

        for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=on_error):
            try:
                st = os.stat(dirpath)
            except OSError as exc:
                scan.failures.append((dirpath, f"cannot read folder: {exc.strerror}"))
                scan.unreadable.append(Path(dirpath))
                dirnames[:] = []
                continue
            real_dir = Path(os.path.realpath(dirpath))
            if not _inside(real_dir, root):
                scan.outside.append(Path(dirpath))
                scan.failures.append(
                    (
                        dirpath,
                        f"symbolic link to the folder {real_dir}, outside the folder {root}: "
                        "not followed (give that path to ingest it)",
                    )
                )
                dirnames[:] = []
                continue
            key = (st.st_dev, st.st_ino)
            here = Path(dirpath)
            ancestors = {folders[str(p)] for p in here.parents if str(p) in folders}
            if key in ancestors:  # a link back to a folder it is in: walking it never ends
                scan.failures.append(
                    (dirpath, f"symlink loop (leads back to {os.path.realpath(dirpath)})")
                )
                dirnames[:] = []
                continue
            if key in visited:  # another way to a folder walked already: its files are listed
                dirnames[:] = []
                continue
            visited.add(key)
            folders[dirpath] = key
            if (dirnames or filenames) and not os.access(dirpath, os.X_OK):
                # listed (read permission) but not entered (no search permission): nothing in
                # it can be opened or checked, so prune keeps what is stored under it
                scan.failures.append(
                    (
                        dirpath,
                        "cannot enter folder (permission denied: it can be listed but not "
                        "entered); skipped, give it search permission (chmod +x) to ingest it",
                    )
                )
                scan.unreadable.append(Path(dirpath))
                dirnames[:] = []
                continue
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.startswith(".") or mime_type(name) is None:
                    continue
                add(Path(dirpath) / name, root)
    scan.files.sort()
    return scan


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _opened_path(fd: int) -> str | None:
    """The path the kernel gives the open file ``fd`` (Linux's ``/proc/self/fd``), or None
    where that cannot be read."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def read_file(path: Path, max_bytes: int, expected: tuple[int, int] | None = None) -> bytes:
    """The file's bytes, or :class:`ExtractionError` (too large, vanished, changed while read,
    not a regular file, not the file that was scanned).

    ``path`` is a resolved path (no link in it). The file is opened non-blocking and without
    following a link (``O_NOFOLLOW``), then checked through the open descriptor: a path that
    became a named pipe or a device after the walk is refused, never waited on; one that became
    a symbolic link is not followed; and what was opened must be the file the scan saw
    (``expected``: its ``st_dev``, ``st_ino``) at ``path`` itself (``/proc/self/fd`` on Linux),
    so a folder on the way swapped for a link to elsewhere is not followed either: the text of
    a file outside the folder is never stored under a name inside it.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            if exc.errno == errno.ELOOP and os.path.islink(path):
                raise ExtractionError(
                    "replaced by a symbolic link after the folder was scanned: not followed, "
                    "nothing read (its stored version is kept; pgkb ingest refuses links that "
                    "leave the folder)"
                ) from None
            raise
        try:
            before = os.fstat(fd)
            special = not_regular(before.st_mode)
            if special is not None:
                raise ExtractionError(special)
            opened = _opened_path(fd)
            if opened == str(path):
                opened = None
            if opened is not None or (
                expected is not None and (before.st_dev, before.st_ino) != expected
            ):
                raise ExtractionError(
                    "replaced by another file after the folder was scanned"
                    + (f" (what opened is {shown_path(opened)})" if opened else "")
                    + ": not read, its stored version is kept; run again to pick up a real change"
                )
            if before.st_size > max_bytes:
                raise ExtractionError(
                    f"file too large ({before.st_size / 1e6:.1f} MB, the limit is "
                    f"{max_bytes / 1e6:.1f} MB); raise PGKB_MAX_FILE_MB to ingest it"
                )
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(max_bytes + 1)
            after = os.fstat(handle.fileno())
        if not os.path.lexists(path):
            raise FileNotFoundError(path)
    except FileNotFoundError:
        raise ExtractionError("deleted during the run (it will be pruned by --prune)") from None
    except IsADirectoryError:
        raise ExtractionError("is a directory") from None
    except PermissionError:
        raise ExtractionError("permission denied") from None
    except NotADirectoryError:
        raise ExtractionError(
            "a folder on its path was replaced by a file during the run (it will be pruned by "
            "--prune)"
        ) from None
    except OSError as exc:
        raise ExtractionError(f"cannot read: {exc.strerror or exc}") from None
    if (
        len(data) > max_bytes
        or (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns)
        or len(data) != after.st_size
    ):
        raise ExtractionError(
            "changed while being read; its stored version is kept, run again to pick it up"
        )
    return data


def file_metadata(path: Path, data: bytes, mime: str | None) -> dict[str, Any]:
    try:
        mtime = os.lstat(path).st_mtime
        modified = dt.datetime.fromtimestamp(mtime, dt.UTC).isoformat(timespec="seconds")
    except OSError:
        modified = None
    return {
        "file_name": path.name,
        "mime_type": mime,
        "size_bytes": len(data),
        "modified": modified,
    }


# --- source identity that survives a move ------------------------------------------------------
# With ``source_root`` (``pgkb ingest --root DIR``) set, a file's ``source_uri`` is its path
# relative to the root, in POSIX form (``guides/vacuum.md``), so the same folder mounted
# elsewhere, or ingested by a scheduler on another host, is the same set of documents. Without
# it, ``source_uri`` is the file's absolute path (pgkb's default).


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
