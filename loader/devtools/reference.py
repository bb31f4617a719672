"""The reference pages of the documentation site, generated from the code so they cannot drift.

``docs/hooks.py`` (a MkDocs hook) replaces a marker line in three pages at build time:

- ``<!-- pgkb:settings -->``: every field of :class:`loader.settings.Settings` (its environment
  variable, default and the attribute docstring written under it in ``loader/settings.py``);
- ``<!-- pgkb:cli -->``: every command and option of the Click tree ``loader.cli.main.cli``;
- ``<!-- pgkb:sql -->``: every ``kb.`` function of ``sql_functions/``, with its header comment
  and its ``COMMENT ON FUNCTION`` text;
- ``<!-- pgkb:errors -->``: pgkb's own SQLSTATE codes (:data:`loader.errors.SQLSTATES`), with
  the functions of ``sql_functions/`` that raise each.

Nothing generated is committed; ``tests/acceptance/test_docs.py`` checks the built pages hold
every name.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import click

import loader.settings as module
from loader.cli.main import cli
from loader.errors import SQLSTATES
from loader.resources import sql_functions_dir
from loader.settings import ENV_PREFIX, Settings

MARKERS = {
    "settings": "<!-- pgkb:settings -->",
    "cli": "<!-- pgkb:cli -->",
    "sql": "<!-- pgkb:sql -->",
    "errors": "<!-- pgkb:errors -->",
}


def setting_docs() -> dict[str, str]:
    """Each settings field's docstring (the string literal written under it), by field name."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Settings")
    docs: dict[str, str] = {}
    body = cls.body
    for node, following in zip(body, [*body[1:], None], strict=True):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def _default(field: dataclasses.Field[Any]) -> str:
    if field.name == "data_dir":
        return "the user data folder (`~/.local/share/pgkb` on Linux)"
    if field.default is dataclasses.MISSING:
        return "computed"
    if field.default is None:
        return "unset"
    value = field.default
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def settings_markdown() -> str:
    docs = setting_docs()
    rows = [
        "| setting | environment variable | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for field in dataclasses.fields(Settings):
        rows.append(
            f"| `{field.name}` | `{ENV_PREFIX}{field.name.upper()}` | {_default(field)} | "
            f"{_cell(docs.get(field.name, ''))} |"
        )
    return "\n".join(rows) + "\n"


def _commands(
    command: click.Command, path: str, ctx: click.Context
) -> list[tuple[str, click.Command, click.Context]]:
    found = [(path, command, ctx)]
    if isinstance(command, click.Group):
        for name in sorted(command.list_commands(ctx)):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            found.extend(_commands(sub, f"{path} {name}", click.Context(sub, ctx, info_name=name)))
    return found


def cli_commands() -> list[str]:
    """Every command path of the ``pgkb`` tree, e.g. ``pgkb db grant``."""
    return [path for path, _, _ in _commands(cli, "pgkb", click.Context(cli, info_name="pgkb"))]


def cli_markdown() -> str:

    out: list[str] = []
    for path, command, ctx in _commands(cli, "pgkb", click.Context(cli, info_name="pgkb")):
        level = "##" if path.count(" ") <= 1 else "###"
        out.append(f"{level} `{path}`\n")
        usage = " ".join(command.collect_usage_pieces(ctx))
        out.append(f"```text\n{path} {usage}\n```\n")
        help_text = command.help or command.short_help or ""
        if help_text:
            out.append(_dedent_help(help_text) + "\n")
        rows = []
        for param in command.get_params(ctx):
            if isinstance(param, click.Argument):
                kind = "required" if param.required else "optional"
                if param.nargs == -1:
                    kind += ", one or more" if param.required else ", any number"
                rows.append(f"| `{param.human_readable_name}` (argument) | | {kind} |")
                continue
            record = param.get_help_record(ctx)
            if record is None:
                continue
            names, text = record
            env = ""
            if isinstance(param, click.Option) and param.envvar:
                envvars = [param.envvar] if isinstance(param.envvar, str) else param.envvar
                env = ", ".join(f"`{e}`" for e in envvars)
            text = re.sub(r"\s*\[env var: [^\]]*\]", "", text)
            rows.append(f"| `{_cell(names)}` | {env} | {_cell(text)} |")
        if rows:
            out.append("| option | environment | meaning |\n| --- | --- | --- |")
            out.append("\n".join(rows) + "\n")
        if isinstance(command, click.Group):
            subs = [
                p
                for p, _, _ in _commands(command, path, ctx)[1:]
                if p.count(" ") == path.count(" ") + 1
            ]
            out.append("Commands: " + ", ".join(f"`{s}`" for s in subs) + ".\n")
    return "\n".join(out)


def _dedent_help(text: str) -> str:

    text = inspect.cleandoc(text)
    return text.replace("\b\n", "")


COMMENT_RE = re.compile(
    r"COMMENT ON FUNCTION\s+kb\.(\w+)\s*\(([^)]*)\)\s+IS\s*'((?:[^']|'')*)'\s*;", re.S
)


@dataclasses.dataclass(frozen=True)
class SqlFunction:
    name: str
    argument_types: str
    header: str
    comment: str
    file: str


def sql_functions(directory: Path | None = None) -> list[SqlFunction]:
    """Every function of ``sql_functions/``: name, argument types, header comment, COMMENT ON."""
    directory = directory or sql_functions_dir()
    found = []
    for path in sorted(directory.glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        header_lines = []
        for line in text.splitlines():
            if not line.startswith("--"):
                break
            header_lines.append(line[2:].removeprefix(" "))
        for match in COMMENT_RE.finditer(text):
            found.append(
                SqlFunction(
                    name=match.group(1),
                    argument_types=" ".join(match.group(2).split()),
                    header="\n".join(header_lines).strip(),
                    comment=match.group(3).replace("''", "'"),
                    file=path.name,
                )
            )
    return found


def sql_markdown() -> str:
    out = []
    for function in sql_functions():
        out.append(f"### `kb.{function.name}`\n")
        out.append(
            f"`kb.{function.name}({function.argument_types})`, "
            f"in `sql_functions/{function.file}`.\n"
        )
        out.append(function.comment + "\n")
        if function.header:
            out.append('??? note "Header comment"\n')
            out.append("    ```text")
            out.extend("    " + line if line else "" for line in function.header.splitlines())
            out.append("    ```\n")
    return "\n".join(out)


_ERRCODE = re.compile(r"ERRCODE\s*=\s*'(\w+)'")


def raised_by(directory: Path | None = None) -> dict[str, list[str]]:
    """``{SQLSTATE: [function names]}``: which functions of ``sql_functions/`` raise each code."""
    directory = directory or sql_functions_dir()
    found: dict[str, list[str]] = {}
    for path in sorted(directory.glob("*.sql")):
        for code in sorted(set(_ERRCODE.findall(path.read_text(encoding="utf-8")))):
            found.setdefault(code, []).append(path.stem)
    return found


def errors_markdown() -> str:
    raisers = raised_by()
    out = [
        "| SQLSTATE | condition | Python error | meaning | raised by |",
        "| --- | --- | --- | --- | --- |",
    ]
    for code, (kind, meaning) in SQLSTATES.items():
        functions = ", ".join(f"`kb.{name}`" for name in raisers.get(code.value, []))
        out.append(
            f"| `{code.value}` | `{code.name.lower()}` | `{kind.__name__}` | {_cell(meaning)} "
            f"| {functions} |"
        )
    return "\n".join(out) + "\n"


GENERATORS = {
    "settings": settings_markdown,
    "cli": cli_markdown,
    "sql": sql_markdown,
    "errors": errors_markdown,
}


def expand(markdown: str) -> str:
    """``markdown`` with every marker line replaced by its generated reference."""
    for key, marker in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, GENERATORS[key]())
    return markdown
