"""`gpulab estimate (--params N | --mlp W,W,...)`: training memory per rank, by component, for a sharding strategy."""

from __future__ import annotations

import argparse

from gpulab.argtypes import count, int_list, positive_float, positive_int
from gpulab.sharding.estimate import OPTIMIZER_STATES, PRECISIONS, STRATEGIES


def units_arg(text: str) -> int | str:
    """argparse type: a number of equal FSDP units, or ``layers`` (each Linear of --mlp its own unit)."""
    return "layers" if text.strip() == "layers" else positive_int(text)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `estimate`."""
    parser = subparsers.add_parser(
        "estimate", help="memory per rank for training a model: parameters, gradients, optimizer state",
        description="Bytes each rank holds to train a model, by component, for a precision, an optimizer and a "
                    "sharding strategy over N ranks: none (DDP: all replicated), zero1 (optimizer state sharded), "
                    "zero2 (+ gradients), zero3 (+ parameters, FSDP full shard). Shards follow torch.chunk "
                    "along dim 0; the figures are those of rank 0, the biggest. Under zero3 it also prints the "
                    "peak of one FSDP2 step (padded shards, gathered units, unsharded gradients). Nothing is "
                    "allocated.")
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--params", type=count, help="number of parameters, as one flat tensor (e.g. 7e9)")
    model.add_argument("--mlp", type=int_list, metavar="W,W,...",
                       help="layer widths of an MLP (Linear + bias, ReLU between), built on the meta device")
    parser.add_argument("--precision", choices=list(PRECISIONS), default="fp32", help="fp32 (default); bf16-autocast: fp32 weights, gradients and "
                        "state plus 2-byte weight copies; bf16: everything bfloat16; bf16-mixed: FSDP2 "
                        "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32); fp16-master: 16-bit weights "
                        "and gradients, fp32 master weights and Adam moments (the ZeRO paper's 16 bytes a parameter)")
    parser.add_argument("--optimizer", choices=list(OPTIMIZER_STATES), default="adam", help="default adam")
    parser.add_argument("--strategy", choices=list(STRATEGIES), default="none", help="default none")
    parser.add_argument("--ranks", type=positive_int, default=1, help="number of ranks N (default 1)")
    parser.add_argument("--activations-gib", type=positive_float, metavar="GIB",
                        help="activations one rank saves for backward, measured or estimated, in GiB (optional)")
    parser.add_argument("--units", type=units_arg, metavar="K|layers",
                        help="zero3 only: FSDP units, K equal ones for --params or 'layers' (one per Linear) for "
                             "--mlp (default: one unit, the whole model)")
    parser.add_argument("--keep-after-forward", action="store_true",
                        help="zero3 only: fully_shard(..., reshard_after_forward=False), units stay gathered "
                             "from forward to backward")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Print the table; 0."""
    from gpulab.sharding.estimate import estimate, format_estimate
    from gpulab.models import mlp

    if args.mlp is not None and len(args.mlp) < 2:
        raise ValueError(f"--mlp needs at least two widths (input and output), got {args.mlp[0]}")
    if args.strategy != "zero3" and (args.units is not None or args.keep_after_forward):
        raise ValueError(f"--units and --keep-after-forward describe zero3, not --strategy {args.strategy}")
    if args.units == "layers" and args.mlp is None:
        raise ValueError("--units layers needs --mlp; with --params give a number of units")
    if args.mlp is not None and isinstance(args.units, int):
        raise ValueError(f"--units {args.units} splits a --params count; with --mlp use --units layers")
    model = mlp(args.mlp, device="meta") if args.mlp is not None else args.params
    units = [m for m in model if m.__class__.__name__ == "Linear"] if args.units == "layers" else args.units
    activations = None if args.activations_gib is None else round(args.activations_gib * 2**30)
    print(format_estimate(estimate(model, args.precision, args.optimizer, args.strategy, args.ranks, activations,
                                   units=units, reshard_after_forward=not args.keep_after_forward)))
    return 0
