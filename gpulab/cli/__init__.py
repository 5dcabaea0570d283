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

# Sub-command name -> module under gpulab.cli that implements it.
COMMANDS = {
    "doctor": "gpulab.cli.doctor",
    "bench": "gpulab.cli.bench",
    "train": "gpulab.cli.train",
    "ddp": "gpulab.cli.ddp",
    "evaluate": "gpulab.cli.evaluate",
    "preflight": "gpulab.cli.preflight",
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


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive integer")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def add_recipe_options(parser: argparse.ArgumentParser) -> None:
    """The article recipe's options, shared by `gpulab train`, `gpulab ddp` and the DDP worker."""
    from gpulab.experiment import Recipe

    d = Recipe()
    parser.add_argument("--epochs", type=positive_int, default=d.epochs, help=f"epochs (default {d.epochs})")
    parser.add_argument("--batch-size", type=positive_int, default=d.batch_size,
                        help=f"GLOBAL batch size, shared by all ranks (default {d.batch_size})")
    parser.add_argument("--lr", type=positive_float, default=d.lr, help=f"Adam learning rate (default {d.lr})")
    parser.add_argument("--seed", type=non_negative_int, default=d.seed,
                        help=f"initial weights and data order (default {d.seed})")
    parser.add_argument("--split-seed", type=non_negative_int, default=d.split_seed,
                        help=f"train/test split (default {d.split_seed})")
    parser.add_argument("--no-b", action="store_true", help="leave out the B column of the data")


def recipe_from(args: argparse.Namespace):
    """The ``Recipe`` that options added by ``add_recipe_options`` describe."""
    from gpulab.experiment import Recipe

    return Recipe(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                  split_seed=args.split_seed, drop_b=args.no_b)
