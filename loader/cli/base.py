"""What every pgkb command shares: the App object, setting-bound options, JSON output.

Kept apart from ``loader.cli`` (which imports every command module) so commands can import it
at the top without an import cycle. Imports only click and the settings, so ``pgkb --help``
stays instant.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import click

from loader.safety import echo, json_text
from loader.settings import ENV_PREFIX, Settings, load_settings

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass
class App:
    """What every command receives: the settings as the root options and environment made them."""

    config_file: str | None
    overrides: dict[str, Any]
    _settings: Settings | None = None

    def settings(self, **more: Any) -> Settings:
        """The settings, with this command's own options (``more``) applied on top."""
        if self._settings is None:
            self._settings = load_settings(self.config_file, **self.overrides)
        extra = {k: v for k, v in more.items() if v is not None}
        if not extra:
            return self._settings
        return load_settings(self.config_file, **{**self.overrides, **extra})


pass_app = click.make_pass_decorator(App)


def setting_option(name: str, *param_decls: str, **kwargs: Any) -> Callable[[F], F]:
    """A Click option for setting ``name``, read from ``PGKB_<NAME>`` and shown in ``--help``.

    The command receives the value under ``name`` (None when not given), to pass to
    ``app.settings(name=value)``, which validates it with every other setting.
    """
    decls = param_decls or (f"--{name.replace('_', '-')}",)
    kwargs.setdefault("default", None)
    return click.option(*decls, name, envvar=ENV_PREFIX + name.upper(), show_envvar=True, **kwargs)


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON: every ``--json`` output goes through here (C1 controls and bidi
    overrides escaped, see :func:`loader.safety.json_text`)."""
    echo(json_text(data))


def _more_verbose(ctx: click.Context, param: click.Parameter, count: int) -> None:
    """Lower the log level by one step per ``-v`` (``-vv``: debug), on top of the group's."""
    if count:
        root = logging.getLogger()
        root.setLevel(max(logging.DEBUG, min(root.level, logging.WARNING) - 10 * count))


VERBOSE_HELP = "More log output (-vv for debug)."


def accept_verbose(command: click.Command) -> None:
    """Give ``command`` (and every subcommand of a group) the root's ``-v/--verbose``, so
    ``pgkb ingest -v`` means what ``pgkb -v ingest`` does."""
    if not any("--verbose" in getattr(p, "opts", ()) for p in command.params):
        command.params.append(
            click.Option(
                ["-v", "--verbose"],
                count=True,
                expose_value=False,
                callback=_more_verbose,
                help=VERBOSE_HELP,
            )
        )
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            accept_verbose(sub)
