"""``python -m bench <scenario> [options]``: run one benchmark scenario (``--help`` for each)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bench import ask, commands, ingest, latency, scale, serve

SCENARIOS = {
    "latency": latency,
    "ingest": ingest,
    "serve": serve,
    "commands": commands,
    "ask": ask,
    "scale": scale,
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = top.add_subparsers(dest="scenario", required=True, metavar="scenario")
    for name, module in SCENARIOS.items():
        doc = module.__doc__ or ""
        one = sub.add_parser(
            name,
            help=doc.split("\n\n")[0].split(": ", 1)[-1],
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(one)
        one.add_argument(
            "--json", type=Path, help="write the results here (default: bench/results/)"
        )
    return top


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parser().parse_args(argv)
    result: dict[str, Any] = SCENARIOS[args.scenario].run(args)
    return result


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
