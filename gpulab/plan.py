"""Choose a parallel layout: predict each way to split training over N GPUs, keep those that fit, fastest first.

    from gpulab.plan import GB, Cluster, Model, format_plan, plan
    model = Model(parameters=7_000_000_000, layers=32, hidden=4096, sequence=4096)
    cluster = Cluster(gpus=8, memory=141 * GB, latency=5e-6, bandwidth=450e9, peak_flops=989e12)
    print(format_plan(plan(model, cluster, batch=64)))

Units: bytes, seconds, bytes/s and FLOP/s; tables print GiB (2**30 bytes). ``141 * GB`` reads an H200 spec
sheet's "141 GB" as decimal gigabytes, 141e9 bytes (131.3 GiB). The sheet does not say which unit it means, so this
is the cautious reading; for a real card, plan with the total it reports itself
(``torch.cuda.get_device_properties(0).total_memory``, in bytes).

A **layout** splits the GPUs by three degrees, with ``dp * tp * pp = gpus``: the data-parallel degree ``dp`` (the
ranks of one data-parallel group, which hold the same part of the model, whole with DDP or sharded with FSDP, and
each see a different part of the batch; there are ``tp * pp`` such groups), the tensor-parallel degree ``tp``
(each layer's matrices split over ``tp`` GPUs, with or without sequence parallelism) and ``pp`` pipeline stages
(each holding ``layers / pp`` layers);
its micro-batches are a pipeline's (with a schedule) or, without one, gradient accumulation. For each layout,
:func:`predict` gives per rank (how each layout runs: :mod:`gpulab.plan_costs`):

- **compute**: model FLOPs, 6 per parameter per token (forward 2, backward 4) plus attention's ``12 s h`` per
  token per layer (PaLM's count; a causal mask halves it, which PaLM's formula does not), at
  ``cluster.efficiency`` x the rate the roofline allows the blocks' largest matrix product
  (``gpulab.roofline.attainable``), plus the optimizer step read and written once at the memory bandwidth.
  ``efficiency=1`` (the default) makes it a lower bound: published whole training steps reach about 0.38 to
  0.46 of the peak in model FLOPs (model FLOPs utilisation, MFU: PaLM 46.2%, Chowdhery et al. 2022,
  https://arxiv.org/abs/2204.02311, whose count does not halve causal attention; Llama 3 405B 38 to 43%, Dubey
  et al. 2024, https://arxiv.org/abs/2407.21783). Megatron-LM's 52% (Narayanan et al. 2021,
  https://arxiv.org/abs/2104.04473) also counts the FLOPs of activation recomputation: its eq. 3 has the factor
  96 where the model FLOPs alone give 72;
- **exposed communication**: every collective's ring time and every pipeline send from the link's latency and
  per-direction bandwidth (``gpulab.distributed.cost``'s conventions). Assuming none of it hidden behind compute
  is pessimistic, but every call runs at the link's full bandwidth after an assumed latency, the best case. So
  this is an estimate, not a bound in either direction;
- **bubble**: a pipeline's ranks wait while it fills and drains, ``(pp - 1) / m`` of the forward and backward
  compute; in a step with nothing but that compute, this is ``(pp - 1) / (m + pp - 1)`` of the step;
- **memory**: parameters, gradients and optimizer state from ``gpulab.estimate``, the activations in flight
  (GPipe: all ``m``; 1F1B: ``pp`` on the first stage; accumulation: one micro-batch), and at the peak DDP's
  gradient buckets or FSDP's gathered parameters. A layout **fits** when its peak leaves ``cluster.headroom``
  of the memory free (default 10%, a rule of thumb for the CUDA context, NCCL's buffers, the allocator's
  fragmentation and temporaries the planner does not count).

Left out: activation checkpointing (recomputing activations in backward: less memory, about a third more
compute), the attention scores (flash attention does not keep them), interleaved and zero-bubble schedules, the
embedding and output layers (their parameters are spread evenly over the layers), a slower link between
machines (every group uses the one link) and any overlap of communication with compute.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.estimate import OPTIMIZER_STATES, PRECISIONS
from gpulab.plan_costs import communication_seconds, memory_bytes, model_flops
from gpulab.plan_layouts import BLOCKS, DEFAULT_HEADROOM, Layout, check_layout, layouts
from gpulab.roofline import attainable
from gpulab.tables import format_rows
from gpulab.validate import one_of, positive_int, positive_number

GB = 10**9  # a decimal gigabyte, as spec sheets and link speeds count
GIB = 2**30  # a binary gibibyte, as the tables print
#: Printed under every plan: what whole training steps reach (the module docstring gives the sources).
PUBLISHED_MFU = ("published model-FLOPs utilisation of whole steps: about 38-46%; "
                 "Megatron-LM's 52% also counts recomputed FLOPs")


@dataclass(frozen=True)
class Model:
    """What the planner needs to know about a model: its size and shape, precision and optimizer.

    ``block``: what one layer is, for its activations and tensor-parallel all-reduces (:data:`BLOCKS`);
    ``causal``: attention sees only earlier tokens (a decoder), so its kernel computes half the scores.
    """

    parameters: int
    layers: int
    hidden: int
    sequence: int
    block: str = "transformer"
    precision: str = "bf16-mixed"
    optimizer: str = "adam"
    causal: bool = True

    def __post_init__(self) -> None:
        for name in ("parameters", "layers", "hidden", "sequence"):
            positive_int(getattr(self, name), name)
        one_of(self.block, BLOCKS, "block")
        one_of(self.precision, PRECISIONS, "precision")
        one_of(self.optimizer, OPTIMIZER_STATES, "optimizer")
        if not isinstance(self.causal, bool):
            raise ValueError(f"causal={self.causal!r} must be True or False")

    @property
    def activation_itemsize(self) -> int:
        """Bytes of one activation value: the dtype the weights are computed in."""
        return PRECISIONS[self.precision].gather.itemsize


@dataclass(frozen=True)
class Cluster:
    """The machines: GPU count, memory per GPU (bytes), one link's latency (s) and bandwidth (bytes/s), peak FLOP/s.

    ``bandwidth``: per direction, as nccl-tests' bus bandwidth (an NVLink of 900 GB/s both ways is 450e9).
    ``memory_bandwidth`` (bytes/s, optional) turns on the roofline: small matrix products then run below the peak.
    ``efficiency``: the share of that rate whole steps reach, in (0, 1] (1: a lower bound on compute time;
    see the module docstring for measured values). ``headroom``: the share of ``memory`` kept free, in [0, 1).
    """

    gpus: int
    memory: float
    latency: float
    bandwidth: float
    peak_flops: float
    memory_bandwidth: float | None = None
    efficiency: float = 1.0
    headroom: float = DEFAULT_HEADROOM

    def __post_init__(self) -> None:
        positive_int(self.gpus, "gpus")
        for name in ("memory", "latency", "bandwidth", "peak_flops", "efficiency"):
            positive_number(getattr(self, name), name)
        if self.memory_bandwidth is not None:
            positive_number(self.memory_bandwidth, "memory_bandwidth")
        if self.efficiency > 1:
            raise ValueError(f"efficiency={self.efficiency!r} must be in (0, 1]: a share of the peak rate")
        if isinstance(self.headroom, bool) or not isinstance(self.headroom, (int, float)) or not 0 <= self.headroom < 1:
            raise ValueError(f"headroom={self.headroom!r} must be in [0, 1): the share of memory kept free")

    @property
    def usable_memory(self) -> float:
        """Bytes a layout's peak may use: ``memory`` less the headroom."""
        return self.memory * (1 - self.headroom)


@dataclass(frozen=True)
class Prediction:
    """One layout's predicted seconds per step (compute, exposed communication, bubble) and bytes per rank."""

    layout: Layout
    compute: float
    communication: float
    bubble: float
    memory: int  # parameters, gradients, optimizer state and activations held on the biggest rank
    peak: int  # memory plus DDP's buckets or FSDP's gathered parameters: what must fit
    fits: bool  # peak <= cluster.usable_memory
    usable: float = 0.0  # the cluster's usable memory (bytes) the fit was tested against
    efficiency: float = 1.0  # the cluster's efficiency the compute assumed

    @property
    def step(self) -> float:
        """Predicted seconds of one training step."""
        return self.compute + self.communication + self.bubble

    def row(self) -> dict:
        """A table row: the layout, peak memory in GiB, the step and its three parts in milliseconds."""
        return {"layout": self.layout.name, "GiB per rank": self.peak / GIB, "fits": "yes" if self.fits else "no",
                "step ms": self.step * 1e3, "compute ms": self.compute * 1e3,
                "comm ms": self.communication * 1e3, "bubble ms": self.bubble * 1e3}


def predict(model: Model, cluster: Cluster, batch: int, layout: Layout) -> Prediction:
    """The prediction for one layout (see the module docstring); ValueError if the layout does not apply."""
    for value, kind, name in ((model, Model, "model"), (cluster, Cluster, "cluster"), (layout, Layout, "layout")):
        if not isinstance(value, kind):
            raise ValueError(f"{name}={value!r} must be a {kind.__name__} (gpulab.plan or gpulab.plan_layouts)")
    check_layout(model, cluster, batch, layout)
    dp, tp, pp, m = layout.dp, layout.tp, layout.pp, layout.micro_batches
    act_size, block = model.activation_itemsize, BLOCKS[model.block]
    tokens = batch // dp * model.sequence  # per rank per step
    per_micro = tokens // m
    # compute: the blocks' up-projection (tokens x h) @ (h x k h / tp) sets the rate of the matrix products
    k, n = model.hidden, block.widen * model.hidden // tp
    intensity = 2 * per_micro * k * n / (act_size * (per_micro * k + k * n + per_micro * n))
    rate = cluster.peak_flops if cluster.memory_bandwidth is None else attainable(
        intensity, cluster.peak_flops, cluster.memory_bandwidth)
    state, held, peak = memory_bytes(model, layout, per_micro)
    optimizer_s = 0.0 if cluster.memory_bandwidth is None else 2 * state / cluster.memory_bandwidth
    forward_backward = model_flops(model, layout, tokens) / (rate * cluster.efficiency)
    comm = communication_seconds(model, cluster, layout, per_micro)
    bubble = (pp - 1) / m * forward_backward
    return Prediction(layout, forward_backward + optimizer_s, comm, bubble, held, peak,
                      peak <= cluster.usable_memory, cluster.usable_memory, cluster.efficiency)


def plan(model: Model, cluster: Cluster, batch: int) -> list[Prediction]:
    """Every layout's prediction: those that fit first, fastest first (then the smallest); then those that do not."""
    found = [predict(model, cluster, batch, layout) for layout in layouts(model, cluster, batch)]
    if not found:
        raise ValueError(f"no layout of {cluster.gpus} GPUs applies: batch={batch} must divide over the data-parallel "
                         f"ranks, layers={model.layers} over the stages, hidden={model.hidden} over tensor parallelism")
    return sorted(found, key=lambda p: (not p.fits, p.step, p.peak))


def format_plan(predictions: list[Prediction], top: int = 10) -> str:
    """The ``top`` first predictions as a table between a line on what fits and four notes on what it means."""
    positive_int(top, "top")
    if not predictions:
        raise ValueError("predictions is empty: give plan()'s list")
    fit, first = sum(p.fits for p in predictions), predictions[0]
    head = (f"{len(predictions)} layouts considered, {fit} fit in memory "
            f"(peak <= {first.usable / GIB:.1f} GiB per GPU after the headroom)")
    bound = ": a lower bound" if first.efficiency == 1 else " (the cluster's efficiency)"
    notes = [f"compute: model FLOPs at {first.efficiency:.0%} of the roofline rate{bound}",
             PUBLISHED_MFU,
             "communication: every call at the link's full bandwidth, none hidden behind compute: an estimate, "
             "not a bound",
             "left out: activation checkpointing, interleaved schedules, embedding and output layers"]
    return "\n".join([head, format_rows([p.row() for p in predictions[:top]]), *notes])
