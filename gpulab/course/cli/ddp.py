"""`gpulab ddp`: train the article's model with DistributedDataParallel through torchrun.

    gpulab ddp --nproc 2 --epochs 20 --save model.pt --json run.json
    gpulab ddp --nproc 2 --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500  # on node 0
"""

from __future__ import annotations

import argparse
import os
import sys

from gpulab.argtypes import non_negative_int, port, positive_float, positive_int
from gpulab.experiment import add_recipe_options, recipe_from


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `gpulab ddp`."""
    p = subparsers.add_parser("ddp", help="train with DDP over several processes (torchrun)",
                              description="Train the article's model with DDP: torchrun runs gpulab.distributed.ddp.worker "
                                          "once per rank. --batch-size is the GLOBAL batch.")
    p.add_argument("--nproc", type=positive_int, required=True, help="ranks (processes) on this node")
    add_recipe_options(p)
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    p.add_argument("--save", metavar="PATH", help="save the final state_dict here")
    p.add_argument("--json", metavar="PATH", help="write metrics and history here")
    p.add_argument("--checkpoint-dir", metavar="DIR", help="checkpoint every epoch; resume from the newest")
    p.add_argument("--max-restarts", type=non_negative_int, default=0, help="restarts torchrun may make")
    p.add_argument("--nnodes", type=positive_int, default=1)
    p.add_argument("--node-rank", type=non_negative_int, default=0)
    p.add_argument("--master-addr", default=None, help="address of node 0 (several nodes)")
    p.add_argument("--master-port", type=port, default=None, help="port on node 0 (several nodes)")
    p.add_argument("--log-every", type=positive_int, default=1, help="log every N epochs")
    p.add_argument("--timeout", type=positive_float, default=3600.0, help="seconds before everything is stopped")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Validate, launch torchrun, stream its output; 0 on success, 1 if a rank failed."""
    from gpulab.distributed.ddp.driver import worker_args
    from gpulab.distributed.launch.result import LaunchError
    from gpulab.distributed.launch.torchrun import launch
    from gpulab.distributed.launch.command import backend_note, check_nproc

    if args.node_rank >= args.nnodes:
        raise ValueError(f"--node-rank {args.node_rank} must be below --nnodes {args.nnodes} (0..{args.nnodes - 1})")
    if args.nnodes > 1 and args.master_port is None:
        raise ValueError("--nnodes above 1 needs --master-port (and --master-addr of node 0)")
    recipe = recipe_from(args)
    backend = check_nproc(args.nproc, args.backend)
    note = backend_note(args.nproc, args.backend, backend)
    if note:
        print(note, flush=True)
    absolute = {k: os.path.abspath(v) if v else None for k, v in
                (("save", args.save), ("json", args.json), ("ckpt", args.checkpoint_dir))}
    wargs = worker_args(recipe, backend=backend, save=absolute["save"], json_path=absolute["json"],
                        checkpoint_dir=absolute["ckpt"], log_every=args.log_every)
    try:
        launch("gpulab.distributed.ddp.worker", wargs, nproc=args.nproc, timeout=args.timeout, backend=backend,
               nnodes=args.nnodes, node_rank=args.node_rank, master_addr=args.master_addr,
               master_port=args.master_port, max_restarts=args.max_restarts)
    except LaunchError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    return 0
