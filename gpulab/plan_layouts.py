"""The layouts ``gpulab.plan`` compares: what a layer's activations and all-reduces are, and which splits apply.

A :class:`Layout` is ``dp`` x ``tp`` x ``pp`` GPUs (data, tensor and pipeline parallel degrees), FSDP or DDP over
``dp``, tensor parallelism with or without sequence parallelism, and its micro-batches: a pipeline's, with its
schedule, or without a pipeline the micro-batches of gradient accumulation. :func:`layouts` lists every one that
applies to a model, a cluster and a batch; :func:`check_layout` says why one does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.validate import positive_int

SCHEDULES = ("-", "GPipe", "1F1B")
#: The share of each GPU's memory a layout must leave free (``gpulab.plan.Cluster.headroom``'s default): a rule
#: of thumb for the CUDA context, NCCL's buffers, the allocator's fragmentation and uncounted temporaries.
DEFAULT_HEADROOM = 0.1


@dataclass(frozen=True)
class Block:
    """One layer, as the planner sees it.

    ``replicated`` and ``split``: values saved for backward per token, in units of the hidden size, that tensor
    parallelism without sequence parallelism keeps whole on every rank or splits over them (sequence parallelism
    splits both); ``tp_allreduces``: all-reduces of one micro-batch's activations per layer under tensor
    parallelism (forward and backward); ``widen``: the up-projection's factor (``hidden -> widen x hidden``),
    whose matrix product sets the compute rate; ``attention``: the layer has self-attention (its FLOPs grow with
    the sequence); ``sequence_parallel``: the planner knows the layer's sequence-parallel form.
    """

    replicated: float
    split: float
    tp_allreduces: int
    widen: int = 4
    attention: bool = False
    sequence_parallel: bool = False

    def bytes_per_token(self, hidden: int, tp: int, itemsize: int, sequence_parallel: bool = False) -> float:
        """Activation bytes one token leaves in one layer on one rank (``sequence_parallel``: all split over tp)."""
        whole = self.replicated / tp if sequence_parallel else self.replicated
        return itemsize * hidden * (whole + self.split / tp)


#: ``transformer``: Korthikanti et al. 2022 (https://arxiv.org/abs/2205.05198, section 4), per layer and token
#: with 16-bit activations: ``h (10 + 24 / t)`` bytes under tensor parallelism of ``t`` without sequence
#: parallelism (the two layer norms' inputs, the inputs of the QKV and first MLP matrices and two 1-byte dropout
#: masks stay whole: 10 h bytes, 5 values here), ``34 h / t`` with it; without the attention scores
#: (``5 a s / t`` more, ``a`` heads), which flash attention does not keep. Megatron's 2 all-reduces forward and 2
#: backward. Other itemsizes scale all of it (the 1-byte masks included: a small overcount in fp32).
#: ``mlp``: ``Linear(h, 4h) -> ReLU -> Linear(4h, h)`` (notebook 13's blocks): its input (h, whole on every rank)
#: and the ReLU's output (4h, split); one all-reduce forward (after the row-split Linear), one backward.
BLOCKS = {"transformer": Block(5.0, 12.0, 4, attention=True, sequence_parallel=True), "mlp": Block(1.0, 4.0, 2)}


@dataclass(frozen=True)
class Layout:
    """``dp`` x ``tp`` x ``pp`` GPUs; ``fsdp``: shard over ``dp`` (else DDP replicas); the micro-batches.

    With ``pp > 1`` the micro-batches are the pipeline's (``schedule`` GPipe or 1F1B); with ``pp == 1`` they
    are gradient accumulation (``schedule`` ``"-"``): one micro-batch at a time, one optimizer step.
    ``sequence_parallel``: tensor parallelism (``tp > 1``) with sequence parallelism (Korthikanti et al. 2022).
    """

    dp: int
    tp: int
    pp: int
    fsdp: bool = False
    micro_batches: int = 1
    schedule: str = "-"
    sequence_parallel: bool = False

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "micro_batches"):
            positive_int(getattr(self, name), name)
        for name in ("fsdp", "sequence_parallel"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r} is not one of {', '.join(SCHEDULES)}")
        if (self.pp == 1) != (self.schedule == "-"):
            raise ValueError(f"pp={self.pp} with schedule {self.schedule!r}: a pipeline (pp > 1) needs GPipe or "
                             "1F1B, no pipeline needs '-' (its micro-batches are gradient accumulation)")
        if self.schedule == "1F1B" and self.micro_batches < self.pp:
            raise ValueError(f"1F1B needs at least pp={self.pp} micro-batches, got {self.micro_batches} "
                             "(torch's Schedule1F1B refuses fewer; GPipe accepts them)")
        if self.fsdp and self.dp == 1:
            raise ValueError("fsdp=True needs dp > 1: there is nothing to shard over one data-parallel rank")
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence_parallel=True needs tp > 1: it splits tensor parallelism's whole activations")

    @property
    def gpus(self) -> int:
        """GPUs the layout uses."""
        return self.dp * self.tp * self.pp

    @property
    def in_flight(self) -> int:
        """Micro-batches whose activations the first stage holds at once: GPipe all, 1F1B at most ``pp``.

        Without a pipeline, gradient accumulation holds one micro-batch's activations at a time.
        """
        if self.schedule == "GPipe":
            return self.micro_batches
        return min(self.micro_batches, self.pp)

    @property
    def name(self) -> str:
        """Like ``FSDP 2 x TP 2 (SP)``, ``PP 4 (1F1B, 8 micro-batches)`` or ``DDP 8 (4 micro-batches accumulated)``."""
        parts = [f"{'FSDP' if self.fsdp else 'DDP'} {self.dp}"] * (self.dp > 1)
        parts += [f"TP {self.tp}{' (SP)' * self.sequence_parallel}"] * (self.tp > 1)
        if self.pp > 1:
            parts.append(f"PP {self.pp} ({self.schedule}, {self.micro_batches} micro-batches)")
        name = " x ".join(parts) or "1 GPU"
        if self.pp == 1 and self.micro_batches > 1:
            name += f" ({self.micro_batches} micro-batches accumulated)"
        return name


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
    if layout.sequence_parallel and not BLOCKS[model.block].sequence_parallel:
        usable = [name for name, block in BLOCKS.items() if block.sequence_parallel]
        raise ValueError(f"block {model.block!r} has no sequence-parallel form here: use sequence_parallel=False "
                         f"or a block of {', '.join(usable)}")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def micro_batch_counts(samples: int, pp: int) -> list[int]:
    """Micro-batch counts tried for ``pp`` stages: powers of two and ``pp`` x powers of two that divide ``samples``.

    With ``pp == 1`` these are the gradient-accumulation counts: 1, 2, 4, ... up to one sample per micro-batch.
    """
    counts = {c * 2**k for c in (1, pp) for k in range(samples.bit_length())}
    return sorted(c for c in counts if c <= samples and samples % c == 0)


def layouts(model, cluster, batch: int) -> list[Layout]:
    """Every layout of ``cluster.gpus`` GPUs that applies; a pipeline runs 1F1B, or GPipe below ``pp`` micro-batches.

    1F1B takes as long as GPipe and holds fewer activations, so GPipe is listed only where 1F1B cannot run.
    Without a pipeline every gradient-accumulation count of :func:`micro_batch_counts` is listed; tensor
    parallelism is listed without and (where the block has it) with sequence parallelism.
    """
    positive_int(batch, "batch")
    found = []
    for pp in _divisors(cluster.gpus):
        for tp in _divisors(cluster.gpus // pp):
            dp = cluster.gpus // (pp * tp)
            if model.layers % pp or model.hidden % tp or batch % dp or model.parameters < tp * pp:
                continue
            sp_choices = (False, True) if tp > 1 and BLOCKS[model.block].sequence_parallel else (False,)
            for fsdp in (False, True) if dp > 1 else (False,):
                for sp in sp_choices:
                    for m in micro_batch_counts(batch // dp, pp):
                        schedule = "-" if pp == 1 else "1F1B" if m >= pp else "GPipe"
                        found.append(Layout(dp, tp, pp, fsdp, m, schedule, sp))
    return found
