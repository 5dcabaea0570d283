"""`gpulab plan`: rank the ways to split training over N GPUs (DP/FSDP x TP x PP) by predicted step time."""

from __future__ import annotations

import argparse

from gpulab.argtypes import count, positive_float, positive_int
from gpulab.estimate import OPTIMIZER_STATES, PRECISIONS
from gpulab.plan_layouts import BLOCKS


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `plan`."""
    parser = subparsers.add_parser(
        "plan", help="rank parallel layouts (data, tensor, pipeline) by predicted step time among those that fit",
        description="For a model, a cluster and a global batch, predict every layout dp x tp x pp = GPUs (DDP or "
                    "FSDP over dp, tensor parallelism over tp, a pipeline of pp stages with its micro-batches): "
                    "memory per rank (gpulab estimate plus the activations in flight) and the step time split into "
                    "compute (roofline), exposed communication (ring collectives from the link's latency and "
                    "bandwidth, none hidden) and the pipeline bubble. Prints those that fit, fastest first.")
    model = parser.add_argument_group("model")
    model.add_argument("--params", type=count, required=True, help="number of parameters (e.g. 7e9)")
    model.add_argument("--layers", type=positive_int, required=True, help="number of layers")
    model.add_argument("--hidden", type=positive_int, required=True, help="hidden size")
    model.add_argument("--seq", type=positive_int, required=True, help="tokens per sample (sequence length)")
    model.add_argument("--block", choices=list(BLOCKS), default="transformer", help="what a layer is (default transformer)")
    model.add_argument("--precision", choices=list(PRECISIONS), default="bf16-mixed", help="default bf16-mixed")
    model.add_argument("--optimizer", choices=list(OPTIMIZER_STATES), default="adam", help="default adam")
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--gpus", type=positive_int, required=True, help="number of GPUs")
    cluster.add_argument("--memory-gib", type=positive_float, required=True, help="memory per GPU in GiB")
    cluster.add_argument("--latency-us", type=positive_float, required=True, help="one link's latency in microseconds")
    cluster.add_argument("--bandwidth-gbs", type=positive_float, required=True, help="one link's bandwidth in GB/s")
    cluster.add_argument("--peak-tflops", type=positive_float, required=True, help="peak TFLOP/s of one GPU")
    cluster.add_argument("--memory-bandwidth-gbs", type=positive_float,
                         help="memory bandwidth of one GPU in GB/s (optional: turns on the roofline)")
    parser.add_argument("--batch", type=positive_int, required=True, help="global batch in samples")
    parser.add_argument("--top", type=positive_int, default=10, help="rows to print (default 10)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Print the ranking; 0, or 1 when no layout fits in memory."""
    from gpulab.plan import Cluster, Model, format_plan, plan

    model = Model(args.params, args.layers, args.hidden, args.seq, args.block, args.precision, args.optimizer)
    membw = None if args.memory_bandwidth_gbs is None else args.memory_bandwidth_gbs * 1e9
    cluster = Cluster(args.gpus, args.memory_gib * 2**30, args.latency_us * 1e-6, args.bandwidth_gbs * 1e9,
                      args.peak_tflops * 1e12, membw)
    predictions = plan(model, cluster, args.batch)
    print(format_plan(predictions, args.top))
    if not predictions[0].fits:
        print(f"no layout fits in {args.memory_gib:g} GiB per GPU: the smallest needs "
              f"{min(p.peak for p in predictions) / 2**30:.2f} GiB")
        return 1
    return 0
