"""The layouts ``gpulab.planner.plan`` compares: how each splits the GPUs, which apply, how the stages divide the layers.

A :class:`Layout` is ``dp`` x ``tp`` x ``pp`` GPUs (data, tensor and pipeline parallel degrees); over ``dp`` DDP,
ZeRO-1, FSDP or HSDP; tensor parallelism with or without sequence parallelism (Megatron's or torch's); its
micro-batches (a pipeline's, with its schedule, or gradient accumulation); and what backward recomputes.
:func:`layouts` lists every one that applies to a model, a cluster and a batch; :func:`check_layout` says why one
does not; :func:`stage_layers` splits the layers over the stages.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.planner.blocks import BLOCKS, RECOMPUTE, SP_STYLES
from gpulab.validate import one_of, positive_int

SCHEDULES = ("-", "GPipe", "1F1B", "Interleaved1F1B")
#: The share of each GPU's memory a layout must leave free (``gpulab.planner.plan.Cluster.headroom``'s default): a rule
#: of thumb for the CUDA context, NCCL's buffers, the allocator's fragmentation and uncounted temporaries.
DEFAULT_HEADROOM = 0.1


@dataclass(frozen=True)
class Layout:
    """``dp`` x ``tp`` x ``pp`` GPUs and how each part runs.

    ``fsdp``: shard parameters, gradients and optimizer state over ``dp`` (else DDP replicas); ``replicas``: with
    FSDP, HSDP: shard inside groups of ``dp / replicas`` ranks, replicate over ``replicas`` of them; ``zero1``:
    DDP's replicas with the optimizer state sharded over ``dp`` (Megatron's distributed optimizer, ZeRO stage 1).
    With ``pp > 1`` the micro-batches are the pipeline's (``schedule`` GPipe, 1F1B or Interleaved1F1B with
    ``stages_per_rank`` > 1); with ``pp == 1`` they are gradient accumulation (``schedule`` ``"-"``).
    ``sequence_parallel``: tensor parallelism (``tp > 1``) with sequence parallelism, ``sp_style`` saying whose
    (:data:`SP_STYLES`); ``recompute``: :data:`RECOMPUTE`.
    """

    dp: int
    tp: int
    pp: int
    fsdp: bool = False
    micro_batches: int = 1
    schedule: str = "-"
    sequence_parallel: bool = False
    zero1: bool = False
    replicas: int = 1
    stages_per_rank: int = 1
    recompute: str = "selective"
    sp_style: str = "megatron"

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "micro_batches", "replicas", "stages_per_rank"):
            positive_int(getattr(self, name), name)
        for name in ("fsdp", "sequence_parallel", "zero1"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        one_of(self.schedule, SCHEDULES, "schedule")
        one_of(self.recompute, RECOMPUTE, "recompute")
        one_of(self.sp_style, SP_STYLES, "sp_style")
        if (self.pp == 1) != (self.schedule == "-"):
            raise ValueError(f"pp={self.pp} with schedule {self.schedule!r}: a pipeline (pp > 1) needs GPipe, 1F1B or "
                             "Interleaved1F1B, no pipeline needs '-' (its micro-batches are gradient accumulation)")
        if self.schedule == "1F1B" and self.micro_batches < self.pp:
            raise ValueError(f"1F1B needs at least pp={self.pp} micro-batches, got {self.micro_batches} "
                             "(torch's Schedule1F1B refuses fewer; GPipe accepts them)")
        if (self.schedule == "Interleaved1F1B") != (self.stages_per_rank > 1):
            raise ValueError(f"stages_per_rank={self.stages_per_rank} with schedule {self.schedule!r}: several stages "
                             "a rank need Interleaved1F1B, and Interleaved1F1B needs several")
        rounds = max(1, self.micro_batches // self.pp)
        if self.schedule == "Interleaved1F1B" and self.micro_batches % rounds:
            raise ValueError(f"Interleaved1F1B needs micro_batches={self.micro_batches} to be a multiple of the "
                             f"number of rounds ({rounds}), as torch's ScheduleInterleaved1F1B checks")
        if self.fsdp and self.dp == 1:
            raise ValueError("fsdp=True needs dp > 1: there is nothing to shard over one data-parallel rank")
        if self.zero1 and (self.fsdp or self.dp == 1):
            raise ValueError("zero1=True needs dp > 1 and fsdp=False: ZeRO-1 shards the optimizer state of DDP's replicas")
        if self.replicas > 1 and (not self.fsdp or self.dp % self.replicas or self.replicas == self.dp):
            raise ValueError(f"replicas={self.replicas} (HSDP) needs fsdp=True and dp={self.dp} to split into "
                             "shard groups of 2 or more ranks")
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence_parallel=True needs tp > 1: it splits tensor parallelism's whole activations")
        if self.sp_style != "megatron" and not self.sequence_parallel:
            raise ValueError(f"sp_style={self.sp_style!r} needs sequence_parallel=True")

    @property
    def gpus(self) -> int:
        """GPUs the layout uses."""
        return self.dp * self.tp * self.pp

    @property
    def shard_ranks(self) -> int:
        """Ranks that share one copy of the optimizer state (FSDP and ZeRO-1: ``dp``; HSDP: a shard group)."""
        return self.dp // self.replicas if (self.fsdp or self.zero1) else 1

    def in_flight_on(self, rank: int) -> float:
        """Micro-batches of pipeline rank ``rank``'s whole stage whose activations it holds at once.

        GPipe: all; 1F1B: at most ``pp - rank``; Interleaved1F1B: its warm-up chunks plus one, over
        ``stages_per_rank`` (torch's ``_get_warmup_ops``: ``(v - 1) m / r + 2 (pp - 1 - rank)`` chunks, ``r``
        rounds), which on the first rank is Korthikanti et al.'s ``pp (1 + (pp - 1) / (pp v))`` when ``m`` is a
        multiple of ``pp``. Without a pipeline, gradient accumulation holds one micro-batch at a time.
        """
        m, v, p = self.micro_batches, self.stages_per_rank, self.pp
        if self.schedule == "GPipe":
            return m
        if self.schedule == "Interleaved1F1B":
            per_round = m // max(1, m // p)
            return min(m * v, (v - 1) * per_round + 2 * (p - 1 - rank) + 1) / v
        return min(m, p - rank)

    @property
    def in_flight(self) -> float:
        """:meth:`in_flight_on` the first rank, which holds the most."""
        return self.in_flight_on(0)

    @property
    def name(self) -> str:
        """Like ``FSDP 2 x TP 2 (SP)``, ``PP 4 (1F1B, 8 micro-batches)`` or ``DDP 8 (4 micro-batches accumulated)``."""
        data = "HSDP" if self.replicas > 1 else "FSDP" if self.fsdp else "ZeRO-1" if self.zero1 else "DDP"
        parts = [f"{data} {self.dp}" + (f" ({self.replicas} replicas)" if self.replicas > 1 else "")] * (self.dp > 1)
        sp = {"megatron": " (SP)", "torch": " (SP, torch)"}[self.sp_style] if self.sequence_parallel else ""
        parts += [f"TP {self.tp}{sp}"] * (self.tp > 1)
        if self.pp > 1:
            schedule = (f"interleaved 1F1B, {self.stages_per_rank} stages a rank" if self.stages_per_rank > 1
                        else self.schedule)
            parts.append(f"PP {self.pp} ({schedule}, {self.micro_batches} micro-batches)")
        name = " x ".join(parts) or "1 GPU"
        if self.pp == 1 and self.micro_batches > 1:
            name += f" ({self.micro_batches} micro-batches accumulated)"
        if self.recompute != "selective":
            name += {"none": ", keeps attention scores", "full": ", full recomputation"}[self.recompute]
        return name


def stage_layers(layers: int, chunks: int) -> list[int]:
    """Layers of each of ``chunks`` pipeline stages (in order): as equal as can be, the extra ones in the middle.

    The first stage also holds the embedding and the last the output layer, so the middle stages take the
    remainder first, as Llama 3 did (Dubey et al. 2024, https://arxiv.org/abs/2407.21783, section 3.3.2: one
    layer fewer on the first and the last stage).
    """
    positive_int(layers, "layers")
    positive_int(chunks, "chunks")
    if chunks > layers:
        raise ValueError(f"{chunks} stages need at least {chunks} layers, the model has {layers}")
    base, extra = divmod(layers, chunks)
    order = list(range(1, chunks - 1)) + ([chunks - 1, 0] if chunks > 1 else [0])
    counts = [base] * chunks
    for stage in order[:extra]:
        counts[stage] += 1
    return counts


def rank_layers(layers: int, layout: Layout) -> list[int]:
    """Layers each pipeline rank holds (with ``stages_per_rank`` > 1, rank ``r`` holds stages ``r``, ``r + pp``, ...)."""
    counts = stage_layers(layers, layout.pp * layout.stages_per_rank)
    return [sum(counts[r::layout.pp]) for r in range(layout.pp)]


def check_layout(model, cluster, batch: int, layout: Layout) -> None:
    """A one-line ValueError naming what does not divide (or add up), else nothing."""
    positive_int(batch, "batch")
    if layout.gpus != cluster.gpus:
        raise ValueError(f"{layout.name} uses {layout.gpus} GPUs, the cluster has {cluster.gpus}")
    if batch % layout.dp:
        raise ValueError(f"batch={batch} does not split into {layout.dp} equal data-parallel shares")
    if model.layers < layout.pp * layout.stages_per_rank:
        raise ValueError(f"layers={model.layers} cannot fill {layout.pp * layout.stages_per_rank} pipeline stages")
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
    if layout.recompute == "none" and BLOCKS[model.block].attention and model.heads is None:
        raise ValueError("recompute='none' keeps the attention scores: give the model's heads")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def micro_batch_counts(samples: int, pp: int) -> list[int]:
    """Micro-batch counts tried for ``pp`` stages: powers of two and ``pp`` x powers of two that divide ``samples``.

    With ``pp == 1`` these are the gradient-accumulation counts: 1, 2, 4, ... up to one sample per micro-batch.
    """
    counts = {c * 2**k for c in (1, pp) for k in range(samples.bit_length())}
    return sorted(c for c in counts if c <= samples and samples % c == 0)


def _data_choices(dp: int, inner: int, cluster) -> list[dict]:
    """DDP, ZeRO-1 and FSDP over ``dp`` ranks; HSDP where a node holds a whole shard group but not all of dp."""
    if dp == 1:
        return [{}]
    found = [{}, {"zero1": True}, {"fsdp": True}]
    per_node = cluster.gpus_per_node or cluster.gpus
    shard = per_node // inner if per_node % inner == 0 else 0
    if 1 < shard < dp and dp % shard == 0:
        found.append({"fsdp": True, "replicas": dp // shard})
    return found


def layouts(model, cluster, batch: int, sp_style: str = "megatron") -> list[Layout]:
    """Every layout of ``cluster.gpus`` GPUs that applies.

    A pipeline runs 1F1B (GPipe where 1F1B cannot: fewer micro-batches than stages), and interleaved 1F1B with 2
    stages a rank where the layers allow; GPipe is not listed otherwise (it takes as long as 1F1B and holds more).
    Without a pipeline every gradient-accumulation count of :func:`micro_batch_counts` is listed. Over ``dp``:
    DDP, ZeRO-1, FSDP and (with nodes) HSDP; tensor parallelism without and (where the block has it) with
    sequence parallelism of ``sp_style``; recomputation ``selective`` and ``full`` (and ``none`` where the model's
    heads are known). With nodes (``cluster.gpus_per_node``), tensor parallelism stays inside one.
    """
    positive_int(batch, "batch")
    one_of(sp_style, SP_STYLES, "sp_style")
    attention = BLOCKS[model.block].attention
    recomputes = [r for r in RECOMPUTE if r != "none" or model.heads is not None or not attention]
    if not attention:
        recomputes = ["selective", "full"]
    found = []
    for pp in _divisors(cluster.gpus):
        for tp in _divisors(cluster.gpus // pp):
            dp = cluster.gpus // (pp * tp)
            if (model.layers < pp or model.hidden % tp or batch % dp or model.parameters < tp * pp
                    or (cluster.gpus_per_node and tp > cluster.gpus_per_node)):
                continue
            sp_choices = (False, True) if tp > 1 and BLOCKS[model.block].sequence_parallel else (False,)
            for data in _data_choices(dp, tp * pp, cluster):
                for sp in sp_choices:
                    style = sp_style if sp else "megatron"
                    for recompute in recomputes:
                        for m in micro_batch_counts(batch // dp, pp):
                            schedule = "-" if pp == 1 else "1F1B" if m >= pp else "GPipe"
                            found.append(Layout(dp, tp, pp, micro_batches=m, schedule=schedule, sequence_parallel=sp,
                                                recompute=recompute, sp_style=style, **data))
                            if pp > 1 and m >= pp and m % pp == 0 and model.layers >= 2 * pp:
                                found.append(Layout(dp, tp, pp, micro_batches=m, schedule="Interleaved1F1B",
                                                    sequence_parallel=sp, stages_per_rank=2, recompute=recompute,
                                                    sp_style=style, **data))
    return found
