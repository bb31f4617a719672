"""The old names of commands that moved under their nouns (``pgkb reindex`` is now
``pgkb db reindex``): hidden from ``--help`` and the reference, they run the same command with
the same options and exit codes, after one line on stderr naming the new command."""

from __future__ import annotations

import click

from loader.safety import echo


class MovedCommand(click.Command):
    """``pgkb OLD ...``: the command ``new`` under its old top-level name."""

    def __init__(self, target: click.Command, new: str) -> None:
        super().__init__(
            target.name,
            context_settings=target.context_settings,
            callback=target.callback,
            params=list(target.params),
            help=target.help,
            epilog=target.epilog,
            short_help=target.short_help,
            options_metavar=target.options_metavar,
            add_help_option=target.add_help_option,
            no_args_is_help=target.no_args_is_help,
            hidden=True,
        )
        self.new = new

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # before parsing, so even a usage error comes after the line; stderr only
        echo(f"note: `pgkb {self.name}` is now `{self.new}`; the old name still works", err=True)
        return super().parse_args(ctx, args)


def moved(group: click.Group, command: click.Command) -> MovedCommand:
    """The hidden top-level alias of ``command``, which now hangs under ``group``."""
    if group.commands.get(command.name or "") is not command:
        raise ValueError(f"{command.name} is not a command of {group.name}")
    return MovedCommand(command, f"pgkb {group.name} {command.name}")
