"""The `gpulab` command line: one sub-command per module in this package.

Each sub-command module exposes ``add_parser(subparsers)`` and ``run(args) -> int``.
Bad input anywhere (argparse errors, ``ValueError``) ends with exit status 2 and a
single line starting with ``error:``; no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence


# Sub-command name -> module under gpulab.course.cli that implements it.
COMMANDS = {
    "doctor": "gpulab.course.cli.doctor",
    "bench": "gpulab.course.cli.bench",
    "train": "gpulab.course.cli.train",
    "ddp": "gpulab.course.cli.ddp",
    "evaluate": "gpulab.course.cli.evaluate",
    "preflight": "gpulab.course.cli.preflight",
    "estimate": "gpulab.course.cli.estimate",
    "plan": "gpulab.course.cli.plan",
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one `error:` line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every sub-command that is installed."""
    parser = _Parser(prog="gpulab", description="GPU acceleration for deep learning, measured.")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module_name in COMMANDS.values():
        importlib.import_module(module_name).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `gpulab` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
