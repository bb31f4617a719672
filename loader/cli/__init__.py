"""The ``pgkb`` command line: the Click group (:mod:`loader.cli.main`), one module per command."""

from loader.cli.main import cli, main

__all__ = ["cli", "main"]
