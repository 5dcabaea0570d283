"""Choose a parallel layout: predict each way to split training over N GPUs, keep those that fit, fastest first.

    from gpulab.plan import Cluster, Model, format_plan, plan
    model = Model(parameters=7e9, layers=32, hidden=4096, sequence=4096)
    cluster = Cluster(gpus=8, memory=141e9, latency=5e-6, bandwidth=450e9, peak_flops=989e12)
    print(format_plan(plan(model, cluster, batch=64)))

A **layout** splits the GPUs into ``dp`` data-parallel groups (whole replicas with DDP, or shards with FSDP), a
tensor-parallel degree ``tp`` (each layer's matrices split over ``tp`` GPUs) and ``pp`` pipeline stages (each
holding ``layers / pp`` layers), with ``dp * tp * pp = gpus``; a pipeline also has a number of micro-batches and a
schedule. For each layout, :func:`predict` gives per rank:

- **compute**: 6 FLOPs per parameter per token (forward 2, backward 4) for the rank's share of parameters and
  tokens, at the rate the roofline allows the blocks' largest matrix product (``gpulab.roofline.attainable``), plus
  the optimizer step read and written once at the memory bandwidth;
- **exposed communication**: every collective's ring time from the link's latency and bandwidth
  (``gpulab.distributed.cost``): DDP's all-reduce of the gradients, FSDP's two all-gathers of the weights and
  reduce-scatter of the gradients, TP's all-reduces of activations, the pipeline's sends. None of it is assumed
  hidden behind compute, so this is an upper bound;
- **bubble**: a pipeline's ranks wait while it fills and drains, ``(pp - 1) / m`` of the compute, which makes
  ``(p - 1) / (m + p - 1)`` of the step;
- **memory**: parameters, gradients and optimizer state from ``gpulab.estimate`` (FSDP: ``zero3`` over ``dp``,
  with the peak of ``gpulab.fsdp_memory``), plus the activations of the micro-batches in flight (GPipe: all ``m``;
  1F1B: ``pp`` on the first stage). The rest of the layout arithmetic is in :mod:`gpulab.plan_layouts`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.distributed.cost import bus_factor, ring_allreduce_seconds
from gpulab.estimate import OPTIMIZER_STATES, PRECISIONS, estimate
from gpulab.plan_layouts import BLOCKS, Layout, check_layout, layouts
from gpulab.roofline import attainable
from gpulab.tables import format_rows
from gpulab.validate import one_of, positive_int, positive_number


@dataclass(frozen=True)
class Model:
    """What the planner needs to know about a model: its size and shape, precision and optimizer.

    ``block``: what one layer is, for its activations and tensor-parallel all-reduces (:data:`BLOCKS`).
    """

    parameters: int
    layers: int
    hidden: int
    sequence: int
    block: str = "transformer"
    precision: str = "bf16-mixed"
    optimizer: str = "adam"

    def __post_init__(self) -> None:
        for name in ("parameters", "layers", "hidden", "sequence"):
            positive_int(getattr(self, name), name)
        one_of(self.block, BLOCKS, "block")
        one_of(self.precision, PRECISIONS, "precision")
        one_of(self.optimizer, OPTIMIZER_STATES, "optimizer")

    @property
    def activation_itemsize(self) -> int:
        """Bytes of one activation value: the dtype the weights are computed in."""
        return PRECISIONS[self.precision].gather.itemsize


@dataclass(frozen=True)
class Cluster:
    """The machines: GPU count, memory per GPU (bytes), one link's latency (s) and bandwidth (bytes/s), peak FLOP/s.

    ``memory_bandwidth`` (bytes/s, optional) turns on the roofline: small matrix products then run below the peak.
    """

    gpus: int
    memory: float
    latency: float
    bandwidth: float
    peak_flops: float
    memory_bandwidth: float | None = None

    def __post_init__(self) -> None:
        positive_int(self.gpus, "gpus")
        for name in ("memory", "latency", "bandwidth", "peak_flops"):
            positive_number(getattr(self, name), name)
        if self.memory_bandwidth is not None:
            positive_number(self.memory_bandwidth, "memory_bandwidth")


@dataclass(frozen=True)
class Prediction:
    """One layout's predicted seconds per step (compute, exposed communication, bubble) and bytes per rank."""

    layout: Layout
    compute: float
    communication: float
    bubble: float
    memory: int  # parameters, gradients, optimizer state and activations held on the biggest rank
    peak: int  # memory, or FSDP's peak during a step when it is larger
    fits: bool

    @property
    def step(self) -> float:
        """Predicted seconds of one training step."""
        return self.compute + self.communication + self.bubble

    def row(self) -> dict:
        """A table row: the layout, memory in GiB, the step and its three parts in milliseconds."""
        return {"layout": self.layout.name, "GiB per rank": self.peak / 2**30, "fits": "yes" if self.fits else "no",
                "step ms": self.step * 1e3, "compute ms": self.compute * 1e3,
                "comm ms": self.communication * 1e3, "bubble ms": self.bubble * 1e3}


def _ring_seconds(collective: str, nbytes: float, ranks: int, cluster: Cluster) -> float:
    """One ring collective over ``ranks``: ``(n - 1)`` latencies (``2 (n - 1)`` for all-reduce) + bytes on a link."""
    if ranks == 1 or nbytes == 0:
        return 0.0
    if collective == "all_reduce":
        return ring_allreduce_seconds(nbytes, ranks, cluster.latency, 1 / cluster.bandwidth)
    return (ranks - 1) * cluster.latency + bus_factor(collective, ranks) * nbytes / cluster.bandwidth


def predict(model: Model, cluster: Cluster, batch: int, layout: Layout) -> Prediction:
    """The prediction for one layout (see the module docstring); ValueError if the layout does not apply."""
    check_layout(model, cluster, batch, layout)
    dp, tp, pp, m = layout.dp, layout.tp, layout.pp, layout.micro_batches
    kind, block = PRECISIONS[model.precision], BLOCKS[model.block]
    act_size = model.activation_itemsize
    params = model.parameters // (tp * pp)  # before data-parallel sharding
    layers = model.layers // pp
    tokens = batch // dp * model.sequence  # per rank per step
    per_micro = tokens // m
    # compute: the blocks' up-projection (tokens x h) @ (h x k h / tp) sets the rate of the matrix products
    k, n = model.hidden, block.widen * model.hidden // tp
    intensity = 2 * per_micro * k * n / (act_size * (per_micro * k + k * n + per_micro * n))
    rate = cluster.peak_flops if cluster.memory_bandwidth is None else attainable(
        intensity, cluster.peak_flops, cluster.memory_bandwidth)
    est = estimate(params, model.precision, model.optimizer, "zero3" if layout.fsdp else "none", dp,
                   activations=round(layout.in_flight * per_micro * layers * block.bytes_per_token(model.hidden, tp, act_size)),
                   units=layers if layout.fsdp else None)
    state = sum(v for name, v in est.components.items() if name != "activations")
    optimizer_s = 0.0 if cluster.memory_bandwidth is None else 2 * state / cluster.memory_bandwidth
    compute = 6 * params * tokens / rate + optimizer_s
    # exposed communication, per rank
    grad_bytes, weight_bytes = params * kind.grads.itemsize, params * kind.gather.itemsize
    comm = 0.0
    if dp > 1 and layout.fsdp:
        comm += layers * (2 * _ring_seconds("all_gather", weight_bytes / layers, dp, cluster)
                          + _ring_seconds("reduce_scatter", grad_bytes / layers, dp, cluster))
    elif dp > 1:
        comm += layers * _ring_seconds("all_reduce", grad_bytes / layers, dp, cluster)
    boundary = per_micro * model.hidden * act_size  # one micro-batch's activations at a block's edge
    comm += m * layers * block.tp_allreduces * _ring_seconds("all_reduce", boundary, tp, cluster)
    if pp > 1:
        comm += 2 * m * (cluster.latency + boundary / cluster.bandwidth)  # activations forward, gradients back
    bubble = (pp - 1) / m * (6 * params * tokens / rate)
    peak = max(est.total, est.peak.total if est.peak is not None else 0)
    return Prediction(layout, compute, comm, bubble, est.total, peak, peak <= cluster.memory)


def plan(model: Model, cluster: Cluster, batch: int) -> list[Prediction]:
    """Every layout's prediction: those that fit first, fastest first (then the smallest); then those that do not."""
    found = [predict(model, cluster, batch, layout) for layout in layouts(model, cluster, batch)]
    if not found:
        raise ValueError(f"no layout of {cluster.gpus} GPUs applies: batch={batch} must divide over the data-parallel "
                         f"ranks, layers={model.layers} over the stages, hidden={model.hidden} over tensor parallelism")
    return sorted(found, key=lambda p: (not p.fits, p.step, p.peak))


def format_plan(predictions: list[Prediction], top: int = 10) -> str:
    """The ``top`` first predictions as a table, and how many layouts were considered and fit."""
    positive_int(top, "top")
    fit = sum(p.fits for p in predictions)
    head = f"{len(predictions)} layouts considered, {fit} fit in memory"
    return head + "\n" + format_rows([p.row() for p in predictions[:top]])
