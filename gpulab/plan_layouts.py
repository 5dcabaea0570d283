"""The layouts ``gpulab.plan`` compares: what a layer's activations and all-reduces are, and which splits apply.

A :class:`Layout` is ``dp`` x ``tp`` x ``pp`` GPUs (data, tensor and pipeline parallel degrees), FSDP or DDP over
``dp``, and for a pipeline its micro-batches and schedule. :func:`layouts` lists every one that applies to a model,
a cluster and a batch; :func:`check_layout` says why one does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.validate import positive_int

SCHEDULES = ("-", "GPipe", "1F1B")


@dataclass(frozen=True)
class Block:
    """One layer, as the planner sees it.

    ``replicated`` and ``split``: values saved for backward per token, in units of the hidden size, that tensor
    parallelism keeps whole on every rank or splits over them; ``tp_allreduces``: all-reduces of one micro-batch's
    activations per layer under tensor parallelism (forward and backward); ``widen``: the up-projection's factor
    (``hidden -> widen x hidden``), whose matrix product sets the compute rate.
    """

    replicated: float
    split: float
    tp_allreduces: int
    widen: int = 4

    def bytes_per_token(self, hidden: int, tp: int, itemsize: int) -> float:
        """Activation bytes one token leaves in one layer on one rank."""
        return itemsize * hidden * (self.replicated + self.split / tp)


#: ``transformer``: 34 bytes x hidden per token per layer with 16-bit activations (Korthikanti et al. 2022,
#: https://arxiv.org/abs/2205.05198, without the attention scores that flash attention does not keep), all split
#: over tensor parallelism as with sequence parallelism; Megatron's 2 all-reduces forward and 2 backward.
#: ``mlp``: ``Linear(h, 4h) -> ReLU -> Linear(4h, h)`` (notebook 13's blocks): its input (h, whole on every rank)
#: and the ReLU's output (4h, split); one all-reduce forward (after the row-split Linear), one backward.
BLOCKS = {"transformer": Block(0.0, 17.0, 4), "mlp": Block(1.0, 4.0, 2)}


@dataclass(frozen=True)
class Layout:
    """``dp`` x ``tp`` x ``pp`` GPUs; ``fsdp``: shard over ``dp`` (else DDP replicas); a pipeline's micro-batches."""

    dp: int
    tp: int
    pp: int
    fsdp: bool = False
    micro_batches: int = 1
    schedule: str = "-"

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "micro_batches"):
            positive_int(getattr(self, name), name)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r} is not one of {', '.join(SCHEDULES)}")
        if (self.pp == 1) != (self.schedule == "-") or (self.pp == 1 and self.micro_batches != 1):
            raise ValueError(f"pp={self.pp} with schedule {self.schedule!r} and {self.micro_batches} micro-batches: "
                             "a pipeline (pp > 1) needs GPipe or 1F1B, no pipeline needs '-' and 1 micro-batch")
        if self.schedule == "1F1B" and self.micro_batches < self.pp:
            raise ValueError(f"1F1B needs at least pp={self.pp} micro-batches, got {self.micro_batches} "
                             "(torch's Schedule1F1B refuses fewer; GPipe accepts them)")
        if self.fsdp and self.dp == 1:
            raise ValueError("fsdp=True needs dp > 1: there is nothing to shard over one data-parallel rank")

    @property
    def gpus(self) -> int:
        """GPUs the layout uses."""
        return self.dp * self.tp * self.pp

    @property
    def in_flight(self) -> int:
        """Micro-batches whose activations the first stage holds at once: GPipe all, 1F1B at most ``pp``."""
        if self.schedule == "GPipe":
            return self.micro_batches
        return min(self.micro_batches, self.pp)

    @property
    def name(self) -> str:
        """Like ``FSDP 2 x TP 2`` or ``PP 4 (1F1B, 8 micro-batches)``."""
        parts = [f"{'FSDP' if self.fsdp else 'DDP'} {self.dp}"] * (self.dp > 1) + [f"TP {self.tp}"] * (self.tp > 1)
        if self.pp > 1:
            parts.append(f"PP {self.pp} ({self.schedule}, {self.micro_batches} micro-batches)")
        return " x ".join(parts) or "1 GPU"


def check_layout(model, cluster, batch: int, layout: Layout) -> None:
    """A one-line ValueError naming what does not divide (or add up), else nothing."""
    positive_int(batch, "batch")
    if layout.gpus != cluster.gpus:
        raise ValueError(f"{layout.name} uses {layout.gpus} GPUs, the cluster has {cluster.gpus}")
    if batch % layout.dp:
        raise ValueError(f"batch={batch} does not split into {layout.dp} equal data-parallel shares")
    if model.layers % layout.pp:
        raise ValueError(f"layers={model.layers} do not split into {layout.pp} equal pipeline stages")
    if model.hidden % layout.tp:
        raise ValueError(f"hidden={model.hidden} does not split over tensor parallelism of {layout.tp}")
    if batch // layout.dp % layout.micro_batches:
        raise ValueError(f"{batch // layout.dp} samples per data-parallel rank do not make "
                         f"{layout.micro_batches} equal micro-batches")
    if model.parameters < layout.tp * layout.pp:
        raise ValueError(f"parameters={model.parameters} cannot be split over {layout.tp * layout.pp} GPUs")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def micro_batch_counts(samples: int, pp: int) -> list[int]:
    """Micro-batch counts tried for ``pp`` stages: powers of two and ``pp`` x powers of two that divide ``samples``."""
    counts = {c * 2**k for c in (1, pp) for k in range(samples.bit_length())}
    return sorted(c for c in counts if c <= samples and samples % c == 0)


def layouts(model, cluster, batch: int) -> list[Layout]:
    """Every layout of ``cluster.gpus`` GPUs that applies; a pipeline runs 1F1B, or GPipe below ``pp`` micro-batches.

    1F1B takes as long as GPipe and holds fewer activations, so GPipe is listed only where 1F1B cannot run.
    """
    positive_int(batch, "batch")
    found = []
    for pp in _divisors(cluster.gpus):
        for tp in _divisors(cluster.gpus // pp):
            dp = cluster.gpus // (pp * tp)
            if model.layers % pp or model.hidden % tp or batch % dp or model.parameters < tp * pp:
                continue
            counts = micro_batch_counts(batch // dp, pp) if pp > 1 else [1]
            for fsdp in (False, True) if dp > 1 else (False,):
                for m in counts:
                    schedule = "-" if pp == 1 else "1F1B" if m >= pp else "GPipe"
                    found.append(Layout(dp, tp, pp, fsdp, m, schedule))
    return found
