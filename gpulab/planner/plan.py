"""Choose a parallel layout: predict each way to split training over N GPUs, keep those that fit, fastest first.

    from gpulab.planner.plan import GB, Cluster, Model, format_plan, plan
    model = Model(parameters=7_000_000_000, layers=32, hidden=4096, sequence=4096)
    cluster = Cluster(gpus=8, memory=141 * GB, latency=5e-6, bandwidth=367.61e9, peak_flops=989e12)
    print(format_plan(plan(model, cluster, batch=64)))

Units: bytes, seconds, bytes/s and FLOP/s; tables print GiB (2**30 bytes). ``141 * GB`` reads an H200 spec
sheet's "141 GB" as decimal gigabytes, 141e9 bytes (131.3 GiB), the cautious reading; for a real card, plan with
the total it reports itself (``torch.cuda.get_device_properties(0).total_memory``, in bytes).

A **layout** (:class:`gpulab.planner.layouts.Layout`) splits the GPUs by three degrees, ``dp * tp * pp = gpus``.
For each, :func:`predict` gives per rank:

- **compute**: the slowest pipeline rank's FLOPs (:mod:`gpulab.planner.costs`) at ``cluster.efficiency`` x the rate a
  :class:`~gpulab.planner.calibration.Calibration` measured for the blocks' up-projection shape, else the roofline's
  (``gpulab.profiling.roofline.attainable``), plus the optimizer step (its state read and written once). ``efficiency=1``
  without a calibration makes it a lower bound: whole steps reach about 0.38 to 0.46 of the peak in model FLOPs
  (PaLM 46.2%, https://arxiv.org/abs/2204.02311; Llama 3 405B 38 to 43%, https://arxiv.org/abs/2407.21783);
  Megatron-LM's 52% (https://arxiv.org/abs/2104.04473) also counts recomputed FLOPs;
- **exposed communication**: every call of :func:`gpulab.planner.traffic.traffic` on its link, each class of traffic
  times its exposed share (1 unless measured: none hidden, none slowed);
- **bubble**: ``(pp - 1) / (v m)`` of the forward and backward compute (``v`` stages a rank). Where ranks share
  processors (``Calibration.alone`` < 1), a waiting rank leaves its share to the others: the bubble is only what
  the critical path, at the rate of a rank alone, adds beyond the work all ranks share;
- **memory**: :func:`gpulab.planner.costs.memory_bytes` on the rank that must fit most. A layout **fits** when its
  peak leaves ``cluster.headroom`` of the memory free (default 10%).

Left out: expert parallelism and its all-to-all (a mixture of experts is priced by its activated FLOPs with all
experts held like dense parameters), context parallelism, zero-bubble schedules, and any overlap not measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpulab.sharding.estimate import OPTIMIZER_STATES, PRECISIONS
from gpulab.planner.calibration import Calibration
from gpulab.planner.costs import compute_rate, memory_bytes, rank_flops
from gpulab.planner.blocks import BLOCKS, SP_STYLES
from gpulab.planner.layouts import DEFAULT_HEADROOM, Layout, check_layout, layouts
from gpulab.planner.traffic import exposed_seconds, traffic
from gpulab.tables import format_rows
from gpulab.validate import non_negative_int, one_of, positive_int, positive_number

GB = 10**9  # a decimal gigabyte, as spec sheets and link speeds count
GIB = 2**30  # a binary gibibyte, as the tables print
#: Printed under every plan: what whole training steps reach (the module docstring gives the sources).
PUBLISHED_MFU = ("published model-FLOPs utilisation of whole steps: about 38-46%; "
                 "Megatron-LM's 52% also counts recomputed FLOPs")


@dataclass(frozen=True)
class Model:
    """What the planner needs to know about a model: its size and shape, precision and optimizer.

    ``block``: what one layer is (:data:`gpulab.planner.layouts.BLOCKS`); ``causal``: attention sees only earlier
    tokens, so its kernel computes half the scores; ``vocab``: the vocabulary of the embedding and the (untied)
    output layer, ``vocab x hidden`` parameters each, included in ``parameters`` (0: none); ``heads``: attention
    heads, needed only to keep the attention scores (``recompute="none"``); ``active_parameters``: a mixture of
    experts' parameters used per token (its FLOPs), None for a dense model.
    """

    parameters: int
    layers: int
    hidden: int
    sequence: int
    block: str = "transformer"
    precision: str = "bf16-mixed"
    optimizer: str = "adam"
    causal: bool = True
    vocab: int = 0
    heads: int | None = None
    active_parameters: int | None = None

    def __post_init__(self) -> None:
        for name in ("parameters", "layers", "hidden", "sequence"):
            positive_int(getattr(self, name), name)
        one_of(self.block, BLOCKS, "block")
        one_of(self.precision, PRECISIONS, "precision")
        one_of(self.optimizer, OPTIMIZER_STATES, "optimizer")
        if not isinstance(self.causal, bool):
            raise ValueError(f"causal={self.causal!r} must be True or False")
        non_negative_int(self.vocab, "vocab")
        if self.heads is not None:
            positive_int(self.heads, "heads")
        if self.parameters <= 2 * self.vocab * self.hidden:
            raise ValueError(f"parameters={self.parameters} must exceed the embedding and output layer's "
                             f"2 x vocab x hidden = {2 * self.vocab * self.hidden}")
        if self.active_parameters is not None and not (
                2 * self.vocab * self.hidden < positive_int(self.active_parameters, "active_parameters")
                <= self.parameters):
            raise ValueError(f"active_parameters={self.active_parameters} must be at most parameters and exceed "
                             "the embedding and output layer")

    @property
    def activation_itemsize(self) -> int:
        """Bytes of one activation value: the dtype the weights are computed in."""
        return PRECISIONS[self.precision].gather.itemsize

    @property
    def layer_parameters(self) -> float:
        """Parameters of one layer: the model without its embedding and output layer, over the layers."""
        return (self.parameters - 2 * self.vocab * self.hidden) / self.layers

    @property
    def active_layer_parameters(self) -> float:
        """Parameters one token uses in one layer (all of them in a dense model)."""
        active = self.parameters if self.active_parameters is None else self.active_parameters
        return (active - 2 * self.vocab * self.hidden) / self.layers


@dataclass(frozen=True)
class Cluster:
    """The machines: GPU count, memory per GPU (bytes), the link inside a node, peak FLOP/s, what was measured.

    ``latency`` (s) and ``bandwidth`` (bytes/s): one link inside a node, the bandwidth per direction as nccl-tests'
    bus bandwidth measures it (8 H200 on NVLink 4 measured 367.61e9 with rings: ``gpulab.measured_elsewhere``; the line rate
    is 450e9 per direction). ``gpus_per_node`` (None: one node) with ``inter_latency`` and ``inter_bandwidth``:
    the network between nodes, per GPU. ``memory_bandwidth`` (bytes/s, optional) turns on the roofline.
    ``efficiency``: the share of that rate whole steps reach, in (0, 1]. ``headroom``: the share of ``memory`` kept
    free, in [0, 1). ``calibration``: what was measured (:class:`~gpulab.planner.calibration.Calibration`).
    """

    gpus: int
    memory: float
    latency: float
    bandwidth: float
    peak_flops: float
    memory_bandwidth: float | None = None
    efficiency: float = 1.0
    headroom: float = DEFAULT_HEADROOM
    gpus_per_node: int | None = None
    inter_latency: float | None = None
    inter_bandwidth: float | None = None
    calibration: Calibration | None = field(default=None, compare=False)

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
        if self.gpus_per_node is not None:
            positive_int(self.gpus_per_node, "gpus_per_node")
            if self.gpus % self.gpus_per_node:
                raise ValueError(f"gpus={self.gpus} is not a whole number of nodes of {self.gpus_per_node}")
            if self.gpus > self.gpus_per_node:
                for name in ("inter_latency", "inter_bandwidth"):
                    positive_number(getattr(self, name), f"{name} (the link between nodes)")
        if self.calibration is not None and not isinstance(self.calibration, Calibration):
            raise ValueError(f"calibration={self.calibration!r} must be a gpulab.planner.calibration.Calibration")

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
    memory: int  # parameters, gradients, optimizer state and activations held on the rank that must fit most
    peak: int  # memory plus DDP's buckets or FSDP's gathered parameters: what must fit
    fits: bool  # peak <= cluster.usable_memory
    usable: float = 0.0  # the cluster's usable memory (bytes) the fit was tested against
    efficiency: float = 1.0  # the cluster's efficiency the compute assumed
    calls: dict = field(default_factory=dict, compare=False)  # kind -> calls per step on the busiest rank
    traffic: dict = field(default_factory=dict, compare=False)  # traffic class -> exposed seconds
    calibration: str = ""  # the source of the calibration that priced it ("": the cluster's spec alone)

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
            raise ValueError(f"{name}={value!r} must be a {kind.__name__} (gpulab.planner.plan or gpulab.planner.layouts)")
    check_layout(model, cluster, batch, layout)
    pp, m = layout.pp, layout.micro_batches
    tokens = batch // layout.dp * model.sequence  # per rank per step
    per_micro = tokens // m
    state, held, peak = memory_bytes(model, layout, per_micro)
    optimizer_s = 0.0 if cluster.memory_bandwidth is None else 2 * state / cluster.memory_bandwidth
    busy = max(rank_flops(model, layout, tokens)) / (compute_rate(model, cluster, per_micro, layout.tp) * cluster.efficiency)
    share = (pp - 1) / (layout.stages_per_rank * m)
    alone = busy * (cluster.calibration.alone if cluster.calibration is not None else 1.0)  # the others waiting
    bubble = max(0.0, (1 + share) * alone - busy)
    calls = traffic(model, cluster, layout, per_micro)
    exposed = exposed_seconds(calls, cluster)
    counts: dict = {}
    for call in calls:
        counts[call.kind] = counts.get(call.kind, 0) + call.count
    return Prediction(layout, busy + optimizer_s, sum(exposed.values()), bubble, held, peak,
                      peak <= cluster.usable_memory, cluster.usable_memory, cluster.efficiency, counts, exposed,
                      cluster.calibration.source or "unnamed" if cluster.calibration is not None else "")


def plan(model: Model, cluster: Cluster, batch: int, sp_style: str = "megatron") -> list[Prediction]:
    """Every layout's prediction: those that fit first, fastest first (then the smallest); then those that do not.

    ``sp_style``: whose sequence parallelism the tensor-parallel layouts use (:data:`gpulab.planner.layouts.SP_STYLES`).
    """
    one_of(sp_style, SP_STYLES, "sp_style")
    found = [predict(model, cluster, batch, layout) for layout in layouts(model, cluster, batch, sp_style)]
    if not found:
        raise ValueError(f"no layout of {cluster.gpus} GPUs applies: batch={batch} must divide over the data-parallel "
                         f"ranks, hidden={model.hidden} over tensor parallelism, layers={model.layers} fill the stages")
    return sorted(found, key=lambda p: (not p.fits, p.step, p.peak))


def format_plan(predictions: list[Prediction], top: int = 10) -> str:
    """The ``top`` first predictions as a table between a line on what fits and four notes on what it means."""
    positive_int(top, "top")
    if not predictions:
        raise ValueError("predictions is empty: give plan()'s list")
    fit, first = sum(p.fits for p in predictions), predictions[0]
    head = (f"{len(predictions)} layouts considered, {fit} fit in memory "
            f"(peak <= {first.usable / GIB:.1f} GiB per GPU after the headroom)")
    if first.calibration:
        notes = [f"calibration ({first.calibration}): compute and calls as measured where measured, else the roofline "
                 "and the ring; each class of traffic times its exposed share"]
    else:
        bound = ": a lower bound" if first.efficiency == 1 else " (the cluster's efficiency)"
        notes = [f"compute: model FLOPs at {first.efficiency:.0%} of the roofline rate{bound}",
                 "communication: every call at the link's full bandwidth, none hidden behind compute: an estimate, "
                 "not a bound"]
    notes += [PUBLISHED_MFU, "left out: expert and context parallelism, zero-bubble schedules, unmeasured overlap"]
    return "\n".join([head, format_rows([p.row() for p in predictions[:top]]), *notes])
