"""What every pgkb command shares: the App object, setting-bound options, JSON output.

Kept apart from ``loader.cli`` (which imports every command module) so commands can import it
at the top without an import cycle. Imports only click and the settings, so ``pgkb --help``
stays instant.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

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
    click.echo(json.dumps(data, indent=2, default=str, ensure_ascii=False))
