"""`gpulab plan`: rank the ways to split training over N GPUs (DP/FSDP x TP x PP) by predicted step time."""

from __future__ import annotations

import argparse

from gpulab.argtypes import count, non_negative_float, positive_float, positive_int
from gpulab.sharding.estimate import OPTIMIZER_STATES, PRECISIONS
from gpulab.planner.blocks import BLOCKS, SP_STYLES
from gpulab.planner.layouts import DEFAULT_HEADROOM


def efficiency(text: str) -> float:
    """argparse type: a share of the peak rate, in (0, 1]."""
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1]: a share of the peak rate")
    return value


def headroom(text: str) -> float:
    """argparse type: a share of the memory kept free, in [0, 1)."""
    value = non_negative_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 1): a share of the memory kept free")
    return value


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `plan`."""
    parser = subparsers.add_parser(
        "plan", help="rank parallel layouts (data, tensor, pipeline) by predicted step time among those that fit",
        description="For a model, a cluster and a global batch, predict every layout dp x tp x pp = GPUs (DDP or "
                    "FSDP over dp, tensor parallelism over tp, a pipeline of pp stages with its micro-batches): "
                    "memory per rank (gpulab estimate plus the activations in flight, DDP's buckets, FSDP's gathered "
                    "parameters) and the step time split into compute (model FLOPs at --efficiency x the roofline), "
                    "exposed communication (ring collectives at the link's full bandwidth after its latency, none "
                    "hidden: an estimate, not a bound) and the pipeline bubble. Prints those that fit in memory less "
                    "--headroom, fastest first. Without a pipeline, micro-batches are gradient accumulation. Over dp: "
                    "DDP, ZeRO-1, FSDP and (with --gpus-per-node) HSDP; recomputation selective or full (and none "
                    "with --heads); interleaved 1F1B; tensor parallelism stays inside a node.")
    model = parser.add_argument_group("model")
    model.add_argument("--params", type=count, required=True, help="number of parameters (e.g. 7e9)")
    model.add_argument("--layers", type=positive_int, required=True, help="number of layers")
    model.add_argument("--hidden", type=positive_int, required=True, help="hidden size")
    model.add_argument("--seq", type=positive_int, required=True, help="tokens per sample (sequence length)")
    model.add_argument("--block", choices=list(BLOCKS), default="transformer", help="what a layer is (default transformer)")
    model.add_argument("--precision", choices=list(PRECISIONS), default="bf16-mixed", help="default bf16-mixed")
    model.add_argument("--optimizer", choices=list(OPTIMIZER_STATES), default="adam", help="default adam")
    model.add_argument("--bidirectional", action="store_true",
                       help="attention sees every token (an encoder); default causal, which computes half the scores")
    model.add_argument("--vocab", type=positive_int, default=None,
                       help="vocabulary: an embedding on the first stage and an output layer on the last, vocab x hidden "
                            "parameters each, counted in --params (default: none)")
    model.add_argument("--heads", type=positive_int, default=None,
                       help="attention heads: lets the planner keep the attention scores (no recomputation)")
    model.add_argument("--active-params", type=count, default=None,
                       help="a mixture of experts' parameters used per token (its FLOPs); expert parallelism is not "
                            "modelled")
    model.add_argument("--sp-style", choices=list(SP_STYLES), default="megatron",
                       help="sequence parallelism's activations: megatron (default) saves shards and gathers again in "
                            "backward, torch keeps the gathered inputs")
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--gpus", type=positive_int, required=True, help="number of GPUs")
    memory = cluster.add_mutually_exclusive_group(required=True)
    memory.add_argument("--memory-gib", type=positive_float, help="memory per GPU in GiB (2**30 bytes)")
    memory.add_argument("--memory-gb", type=positive_float,
                        help="memory per GPU in GB (10**9 bytes): a spec sheet's figure read as decimal, "
                        "the cautious reading (141 GB = 131.3 GiB); a real card's own total is better")
    cluster.add_argument("--latency-us", type=positive_float, required=True, help="one link's latency in microseconds")
    cluster.add_argument("--bandwidth-gbs", type=positive_float, required=True,
                         help="one link's bandwidth per direction in GB/s inside a node (nccl-tests' bus bandwidth)")
    cluster.add_argument("--gpus-per-node", type=positive_int, default=None,
                         help="GPUs in one node (default: one node holds them all)")
    cluster.add_argument("--inter-latency-us", type=positive_float, default=None,
                         help="latency between nodes in microseconds (with --gpus-per-node)")
    cluster.add_argument("--inter-bandwidth-gbs", type=positive_float, default=None,
                         help="bandwidth between nodes per GPU per direction in GB/s (with --gpus-per-node)")
    cluster.add_argument("--peak-tflops", type=positive_float, required=True, help="peak TFLOP/s of one GPU")
    cluster.add_argument("--memory-bandwidth-gbs", type=positive_float,
                         help="memory bandwidth of one GPU in GB/s (optional: turns on the roofline)")
    cluster.add_argument("--efficiency", type=efficiency, default=1.0,
                         help="share of the roofline rate whole steps reach (default 1: compute is a lower bound; "
                              "published model-FLOPs utilisation of whole steps is about 0.38-0.46)")
    cluster.add_argument("--headroom", type=headroom, default=DEFAULT_HEADROOM,
                         help=f"share of each GPU's memory kept free (default {DEFAULT_HEADROOM:g})")
    parser.add_argument("--batch", type=positive_int, required=True, help="global batch in samples")
    parser.add_argument("--top", type=positive_int, default=10, help="rows to print (default 10)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Print the ranking; 0, or 1 when no layout fits in memory."""
    from gpulab.planner.plan import GB, GIB, Cluster, Model, format_plan, plan

    model = Model(args.params, args.layers, args.hidden, args.seq, args.block, args.precision, args.optimizer,
                  causal=not args.bidirectional, vocab=args.vocab or 0, heads=args.heads,
                  active_parameters=args.active_params)
    membw = None if args.memory_bandwidth_gbs is None else args.memory_bandwidth_gbs * GB
    memory = args.memory_gib * GIB if args.memory_gb is None else args.memory_gb * GB
    inter_latency = None if args.inter_latency_us is None else args.inter_latency_us * 1e-6
    inter_bandwidth = None if args.inter_bandwidth_gbs is None else args.inter_bandwidth_gbs * GB
    cluster = Cluster(args.gpus, memory, args.latency_us * 1e-6, args.bandwidth_gbs * GB, args.peak_tflops * 1e12,
                      membw, args.efficiency, args.headroom, args.gpus_per_node, inter_latency, inter_bandwidth)
    predictions = plan(model, cluster, args.batch, args.sp_style)
    print(format_plan(predictions, args.top))
    if not predictions[0].fits:
        print(f"no layout fits in {memory / GIB:g} GiB per GPU less {args.headroom:.0%} headroom "
              f"({cluster.usable_memory / GIB:.2f} GiB): the smallest needs "
              f"{min(p.peak for p in predictions) / GIB:.2f} GiB")
        return 1
    return 0
