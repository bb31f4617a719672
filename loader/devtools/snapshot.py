"""Write a migration for the SQL functions of ``sql_functions/`` that changed.

``python -m loader.devtools.snapshot -m "hybrid search takes weights"`` compares every file of
``sql_functions/`` with the function store (``alembic/functions/<name>/<revision>.sql``, each
function's text as each revision left it) and, for every function that differs, adds its file to
the store under the next revision, then writes a small migration in ``alembic/versions/`` that
names them (``FUNCTIONS``). A removed file becomes ``<revision>.dropped`` (the revision drops
the function). Table changes are written into that migration by hand.

``--amend`` writes the newest revision's store files and ``FUNCTIONS`` again (after more edits),
only while that revision has not landed (it is not listed in ``alembic/versions/frozen.txt``).
``--renumber FILE`` moves an unlanded migration to the end of the chain (when another branch
landed a migration with the same number first): new number, ``down_revision``, file names and
store files, then its functions are snapshotted again against the new chain.
``--freeze`` lists every migration and store file in the ``frozen.txt`` files: run by whoever
lands them on main. ``--freeze --through REVISION`` lists only those of revisions up to
``REVISION`` (at a release's squash, a migration not yet landed stays out).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import hashlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from loader import resources
from loader.migration_ops import DROPPED, entry

FROZEN = "frozen.txt"
FROZEN_HEADERS = {
    "versions": (
        "# SHA-256 of every migration that has landed on main; tests/sql/test_migrations.py fails\n"
        "# if one changes. `python -m loader.devtools.snapshot --freeze` adds the new ones.\n"
    ),
    "functions": (
        "# SHA-256 of every file of the function store (<name>/<revision>) that has landed on\n"
        "# main; tests/sql/test_migrations.py fails if one changes.\n"
        "# `python -m loader.devtools.snapshot --freeze` adds the new ones.\n"
    ),
}

function_files = resources.function_files


@dataclasses.dataclass
class Migration:
    path: Path
    revision: str
    down_revision: str | None
    functions: tuple[str, ...]


def _literal(tree: ast.Module, name: str) -> object:
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name) and target.id == name and value is not None:
                return ast.literal_eval(value)
    return None


def read_migration(path: Path) -> Migration | None:
    """The revision, down_revision and ``FUNCTIONS`` of the migration at ``path`` (read with
    ``ast``, never imported), or None when the file is not a migration."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    revision = _literal(tree, "revision")
    if not isinstance(revision, str):
        return None
    down = _literal(tree, "down_revision")
    functions = _literal(tree, "FUNCTIONS") or ()
    if not isinstance(functions, tuple) or not all(isinstance(n, str) for n in functions):
        raise SystemExit(f"{path}: FUNCTIONS must be a tuple of function names")
    return Migration(path, revision, down if isinstance(down, str) else None, functions)


def migrations(versions_dir: Path | None = None, exclude: Path | None = None) -> list[Migration]:
    """The migrations in revision order (base first), ``exclude`` left out."""
    versions_dir = versions_dir or resources.alembic_dir() / "versions"
    found: dict[str | None, Migration] = {}
    for path in sorted(versions_dir.glob("*.py")):
        if exclude is not None and path.resolve() == exclude.resolve():
            continue
        migration = read_migration(path)
        if migration is None:
            continue
        if migration.down_revision in found:
            raise SystemExit(
                f"two migrations revise {migration.down_revision}: "
                f"{found[migration.down_revision].path.name} and {path.name} "
                "(renumber the unlanded one: --renumber FILE)"
            )
        found[migration.down_revision] = migration
    ordered: list[Migration] = []
    parent: str | None = None
    while parent in found:
        ordered.append(found[parent])
        parent = found[parent].revision
    if len(ordered) != len(found):
        raise SystemExit("the migrations do not form one chain; fix down_revision")
    return ordered


def store_state(chain: Sequence[Migration], store: Path | None = None) -> dict[str, str]:
    """The function texts a database at the end of ``chain`` has: for each function, the store
    file of the newest revision that names it (none when that revision dropped it)."""
    store = store or resources.alembic_dir() / "functions"
    state: dict[str, str] = {}
    for migration in chain:
        for name in migration.functions:
            path = entry(store, name, migration.revision)
            if path.suffix == DROPPED:
                state.pop(name, None)
            else:
                state[name] = path.read_bytes().decode("utf-8")
    return state


def changed(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """The functions whose text differs (added, changed or removed), sorted by name."""
    return sorted(name for name in set(old) | set(new) if old.get(name) != new.get(name))


def write_store_files(
    store: Path, revision: str, names: Sequence[str], new: dict[str, str]
) -> None:
    """Add ``revision``'s file of each function of ``names``: its text in ``new``, or a
    ``.dropped`` marker when ``new`` has none."""
    for name in names:
        folder = store / name
        folder.mkdir(parents=True, exist_ok=True)
        if name in new:
            (folder / f"{revision}.sql").write_bytes(new[name].encode("utf-8"))
        else:
            (folder / f"{revision}{DROPPED}").write_text(
                f"-- kb.{name} is dropped by revision {revision}\n", encoding="utf-8"
            )


def remove_store_files(store: Path, revision: str, names: Sequence[str]) -> None:
    """Delete the store files of ``revision`` for ``names`` (those that exist)."""
    for name in names:
        for suffix in (".sql", DROPPED):
            (store / name / f"{revision}{suffix}").unlink(missing_ok=True)
        if (store / name).is_dir() and not any((store / name).iterdir()):
            (store / name).rmdir()


def render_functions(revision: str, names: Sequence[str]) -> str:
    """The ``FUNCTIONS`` assignment of a migration, formatted as ``ruff format`` leaves it."""
    comment = (
        "# The functions this revision changes, applied in this order from the store:\n"
        f"# alembic/functions/<name>/{revision}.sql\n"
    )
    if len(names) <= 1:
        return comment + "FUNCTIONS = (" + "".join(f'"{name}",' for name in names) + ")"
    body = "".join(f'    "{name}",\n' for name in names)
    return f"{comment}FUNCTIONS = (\n{body})"


_FUNCTIONS_BLOCK = re.compile(
    r"^# The functions this revision changes.*?\n(?:#.*\n)*FUNCTIONS = \((?:[^()]*)\)", re.M
)


def frozen_hashes(directory: Path) -> dict[str, str]:
    """``{path: sha256}`` from ``directory/frozen.txt`` (paths relative to ``directory``)."""
    frozen = directory / FROZEN
    result: dict[str, str] = {}
    if frozen.exists():
        for line in frozen.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                digest, name = line.split()
                result[name] = digest
    return result


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def store_files(store: Path) -> list[Path]:
    """Every file of the function store (``<name>/<revision>.sql`` or ``.dropped``)."""
    return sorted(p for p in store.glob("*/*") if p.is_file())


def landed(versions_dir: Path, migration: Migration) -> bool:
    return migration.path.name in frozen_hashes(versions_dir)


TEMPLATE = '''"""{message}

Revision ID: {revision}
Revises: {down_revision}
"""

from alembic import op

from loader.migration_ops import downgrade_functions, upgrade_functions

revision = "{revision}"
down_revision = {down_repr}
branch_labels = None
depends_on = None

{functions}


def upgrade() -> None:
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
'''


def _slug(message: str) -> str:
    """The file name's words: ``message`` in lower case, at most 40 characters of whole words."""
    slug = re.sub(r"[^a-z0-9]+", "_", message.lower()).strip("_")
    if len(slug) <= 40:
        return slug
    cut = slug[:41]
    return cut.rsplit("_", 1)[0] if "_" in cut else slug[:40]


def _next_revision(chain: Sequence[Migration]) -> str:
    numbers = [int(m.revision) for m in chain if m.revision.isdigit()]
    return f"{max(numbers, default=0) + 1:04d}"


def new_revision(alembic: Path, message: str, current: dict[str, str]) -> int:
    versions_dir, store = alembic / "versions", alembic / "functions"
    chain = migrations(versions_dir)
    old = store_state(chain, store)
    names = changed(old, current)
    if not names:
        print("sql_functions/ matches the function store; nothing to do")
        return 0
    revision = _next_revision(chain)
    down = chain[-1].revision if chain else None
    write_store_files(store, revision, names, current)
    first, *rest = message.strip().splitlines() or ["update SQL functions"]
    path = versions_dir / f"{revision}_{_slug(first)}.py"
    path.write_text(
        TEMPLATE.format(
            message="\n".join([first, *rest]),
            revision=revision,
            down_revision=down or "",
            down_repr=repr(down).replace("'", '"'),
            functions=render_functions(revision, names),
        ),
        encoding="utf-8",
    )
    print(f"wrote {path} and {len(names)} store file(s) under {store}/<name>/{revision}.*")
    return 0


def _rewrite_functions(migration: Migration, names: Sequence[str]) -> None:
    text = migration.path.read_text(encoding="utf-8")
    block = render_functions(migration.revision, names)
    found = _FUNCTIONS_BLOCK.search(text)
    if found is None:
        raise SystemExit(
            f"{migration.path}: no FUNCTIONS block written by this tool to rewrite "
            "(add `FUNCTIONS = ()` under its comment, or make a new revision)"
        )
    migration.path.write_text(text[: found.start()] + block + text[found.end() :], encoding="utf-8")


def amend(alembic: Path, current: dict[str, str]) -> int:
    versions_dir, store = alembic / "versions", alembic / "functions"
    chain = migrations(versions_dir)
    if not chain:
        print("there is no migration to amend", file=sys.stderr)
        return 1
    target = chain[-1]
    if landed(versions_dir, target):
        print(f"{target.path.name} has landed (frozen.txt); make a new revision", file=sys.stderr)
        return 1
    _resnapshot(store, chain[:-1], target, current)
    return 0


def _resnapshot(
    store: Path, before: Sequence[Migration], target: Migration, current: dict[str, str]
) -> None:
    names = changed(store_state(before, store), current)
    _rewrite_functions(target, names)  # first: a migration without a block is left as it was
    remove_store_files(store, target.revision, target.functions)
    write_store_files(store, target.revision, names, current)
    print(f"amended {target.path} ({len(names)} function(s))")


def renumber(alembic: Path, path: Path, current: dict[str, str]) -> int:
    versions_dir, store = alembic / "versions", alembic / "functions"
    moving = read_migration(path)
    if moving is None:
        print(f"{path} is not a migration", file=sys.stderr)
        return 1
    if landed(versions_dir, moving):
        print(f"{path.name} has landed (frozen.txt); it keeps its number", file=sys.stderr)
        return 1
    chain = migrations(versions_dir, exclude=path)
    revision, down = _next_revision(chain), chain[-1].revision
    old = moving.revision
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"^revision = .*$", f'revision = "{revision}"', text, count=1, flags=re.M)
    text = re.sub(r"^down_revision = .*$", f'down_revision = "{down}"', text, count=1, flags=re.M)
    text = re.sub(r"^Revision ID: .*$", f"Revision ID: {revision}", text, count=1, flags=re.M)
    text = re.sub(r"^Revises: .*$", f"Revises: {down}", text, count=1, flags=re.M)
    target = versions_dir / (revision + path.name[len(old) :])
    path.unlink()
    target.write_text(text, encoding="utf-8")
    # its store files go (the snapshot below writes them again under the new number), except
    # those the landed migration of the same number wrote
    claimed = {n for m in chain if m.revision == old for n in m.functions}
    remove_store_files(store, old, [n for n in moving.functions if n not in claimed])
    moved = Migration(target, revision, down, ())
    print(f"renumbered {path.name} to {target.name} (revises {down})")
    _resnapshot(store, chain, moved, current)
    return 0


def freeze(alembic: Path, through: str | None = None) -> int:
    """Add every migration and store file not yet listed to the frozen.txt files (only those of
    revisions up to ``through``, when given)."""
    for folder, found in (
        ("versions", sorted((alembic / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))),
        ("functions", store_files(alembic / "functions")),
    ):
        files = [
            path
            for path in found
            if through is None or (path.name[:4] if folder == "versions" else path.stem) <= through
        ]
        directory = alembic / folder
        frozen = frozen_hashes(directory)
        lines = [
            f"{file_hash(path)}  {path.relative_to(directory).as_posix()}\n"
            for path in files
            if path.relative_to(directory).as_posix() not in frozen
        ]
        listing = directory / FROZEN
        if not listing.exists():
            listing.write_text(FROZEN_HEADERS[folder], encoding="utf-8")
        with listing.open("a", encoding="utf-8") as out:
            out.writelines(lines)
        print(f"{listing}: {len(lines)} file(s) frozen")
    return 0


def main(
    argv: list[str] | None = None, alembic: Path | None = None, functions: Path | None = None
) -> int:
    """The command; ``alembic`` and ``functions`` (the sql_functions/ folder) default to this
    checkout's."""
    parser = argparse.ArgumentParser(
        prog="python -m loader.devtools.snapshot",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-m", "--message", default="update SQL functions")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--amend", action="store_true", help="rewrite the newest unlanded revision")
    action.add_argument(
        "--renumber", metavar="FILE", type=Path, help="move an unlanded migration to the end"
    )
    action.add_argument("--freeze", action="store_true", help="freeze every migration and file")
    parser.add_argument(
        "--through", metavar="REVISION", help="with --freeze: only revisions up to REVISION"
    )
    args = parser.parse_args(argv)
    if args.through is not None and not args.freeze:
        parser.error("--through goes with --freeze")

    alembic = alembic or resources.alembic_dir()
    if args.freeze:
        return freeze(alembic, args.through)
    current = function_files(functions)
    if args.amend:
        return amend(alembic, current)
    if args.renumber is not None:
        return renumber(alembic, args.renumber, current)
    return new_revision(alembic, args.message, current)


if __name__ == "__main__":
    raise SystemExit(main())
