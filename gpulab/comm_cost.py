"""What a collective costs: bandwidths as nccl-tests define them, a latency + bandwidth fit, DDP's buckets.

Pure functions, no process group needed::

    from gpulab import comm_cost as cost
    cost.bus_factor("all_reduce", 4)                 # 1.5 = 2 (n - 1) / n
    fit = cost.fit_alpha_beta(sizes, seconds)        # t = alpha + beta * bytes
    cost.ddp_buckets(cost.gradient_bytes(model))     # bytes of each all-reduce DDP makes per step
    cost.predict_allreduce_seconds(buckets, fit)     # one step's all-reduce time, predicted
    cost.bytes_sent_per_step("fsdp", nbytes, 8)      # bytes each rank sends in one step (ring algorithms)
    cost.best_rank_count(...)                        # beyond this many ranks a step stops getting faster

Sizes follow nccl-tests (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): the
size of all_gather is its output (all ranks' pieces), of reduce_scatter its input; algbw = size / time;
busbw = algbw x a factor that makes ranks comparable with the hardware's link speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from gpulab.validate import positive_int, positive_number

COLLECTIVES = ("broadcast", "all_reduce", "reduce_scatter", "all_gather")
STRATEGIES = ("ddp", "fsdp")
MIB = 2**20
# Fallbacks only, for a torch that lacks the names ddp_bucket_defaults reads (its docs give these values)
DOCUMENTED_BUCKET_MB = 25.0
DOCUMENTED_FIRST_BUCKET_MB = 1.0


def check_collective(name: object) -> str:
    """``name`` if it is one of :data:`COLLECTIVES`."""
    if name not in COLLECTIVES:
        raise ValueError(f"collective {name!r} is not one of {', '.join(COLLECTIVES)}")
    return str(name)


def bus_factor(collective: str, ranks: int) -> float:
    """busbw / algbw: 2(n-1)/n for all_reduce, (n-1)/n for all_gather and reduce_scatter, 1 for broadcast."""
    collective, n = check_collective(collective), positive_int(ranks, "ranks")
    return {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n,
            "broadcast": 1.0}[collective]


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s: the message size over the time."""
    return positive_number(nbytes, "nbytes") / positive_number(seconds, "seconds")


def busbw(collective: str, nbytes: float, seconds: float, ranks: int) -> float:
    """Bus bandwidth in bytes/s: algbw x :func:`bus_factor`."""
    return algbw(nbytes, seconds) * bus_factor(collective, ranks)


@dataclass(frozen=True)
class AlphaBeta:
    """``t = alpha + beta * bytes``: alpha seconds of latency per call, beta seconds per byte."""

    alpha: float
    beta: float

    def seconds(self, nbytes: float) -> float:
        """The predicted time of one call moving ``nbytes``."""
        return self.alpha + self.beta * positive_number(nbytes, "nbytes")

    @property
    def bandwidth(self) -> float:
        """1 / beta in bytes/s: the rate large messages approach."""
        return float("inf") if self.beta <= 0 else 1.0 / self.beta


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float], relative: bool = True) -> AlphaBeta:
    """Least-squares fit of ``t = alpha + beta * bytes``.

    ``relative=True`` (default) weights each point by 1 / t, minimising relative errors: sizes over
    several decades then all count, not only the largest ones.
    """
    import numpy as np

    if len(nbytes) != len(seconds):
        raise ValueError(f"nbytes has {len(nbytes)} values but seconds has {len(seconds)}: give one time per size")
    x = np.array([positive_number(b, "nbytes") for b in nbytes])
    t = np.array([positive_number(s, "seconds") for s in seconds])
    if len(set(x.tolist())) < 2:
        raise ValueError(f"nbytes={list(nbytes)!r} needs at least two different sizes to fit a line")
    w = 1.0 / t if relative else np.ones_like(t)
    (alpha, beta), *_ = np.linalg.lstsq(np.stack([w, w * x], axis=1), w * t, rcond=None)
    return AlphaBeta(float(alpha), float(beta))


def gradient_bytes(model) -> list[int]:
    """Bytes of each parameter's gradient, in ``model.parameters()`` order (trainable ones only)."""
    return [p.numel() * p.element_size() for p in model.parameters() if p.requires_grad]


def ddp_bucket_defaults() -> dict:
    """DDP's default bucket caps in MiB, read from the installed torch, and where each came from.

    ``bucket_cap_mb``: ``torch.nn.parallel.distributed._DEFAULT_BUCKET_CAP_MB`` (torch 2.13) or the default
    written in ``DistributedDataParallel.__init__`` (earlier releases); ``first_bucket_mb``:
    ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` (exported by ``torch.distributed``, underscored).
    Where neither can be read, the documented values, and ``source`` says so.
    """
    from gpulab.torch_private import ddp_default_bucket_caps

    caps = ddp_default_bucket_caps()
    if caps is None:
        out = {"bucket_cap_mb": DOCUMENTED_BUCKET_MB, "first_bucket_mb": DOCUMENTED_FIRST_BUCKET_MB}
        out["source"] = {k: "documented value (not found in this torch)" for k in out}
        return out
    cap, first, where = caps
    return {"bucket_cap_mb": cap, "first_bucket_mb": first,
            "source": {"bucket_cap_mb": where, "first_bucket_mb": "torch.distributed._DEFAULT_FIRST_BUCKET_BYTES / 2**20"}}


def ddp_buckets(tensor_bytes: Sequence[int], bucket_cap_mb: float | None = None,
                first_bucket_mb: float | None = None) -> list[int]:
    """The bytes of each DDP bucket once DDP has rebuilt its buckets, i.e. of each all-reduce of a later step.

    torch 2.13's first step all-reduces every gradient in one bucket (without ``find_unused_parameters``);
    before the second forward pass DDP rebuilds its buckets: whole gradients in the order they became
    ready in backward (about the reverse of ``model.parameters()``: pass ``gradient_bytes(model)[::-1]``),
    a bucket closed as soon as it holds at least its cap. ``bucket_cap_mb=None`` is DDP's default: 25 MiB with a first bucket of
    1 MiB; a cap you pass applies to the first bucket too in torch 2.11 and 2.13 (see
    :func:`explicit_cap_sets_first_bucket`) unless ``first_bucket_mb`` is given.
    """
    defaults = ddp_bucket_defaults()
    cap_mb = defaults["bucket_cap_mb"] if bucket_cap_mb is None else positive_number(bucket_cap_mb, "bucket_cap_mb")
    if first_bucket_mb is not None:
        first_mb = positive_number(first_bucket_mb, "first_bucket_mb")
    elif bucket_cap_mb is not None and explicit_cap_sets_first_bucket():
        first_mb = cap_mb
    else:
        first_mb = defaults["first_bucket_mb"]
    cap, buckets, size = first_mb * MIB, [], 0
    for b in tensor_bytes:
        size += int(positive_number(b, "tensor bytes"))
        if size >= cap:
            buckets.append(size)
            size, cap = 0, cap_mb * MIB
    return buckets + ([size] if size else [])


def explicit_cap_sets_first_bucket() -> bool:
    """Whether this torch's DDP gives its first bucket an explicitly passed ``bucket_cap_mb`` too.

    Read from torch (:func:`gpulab.torch_private.ddp_explicit_cap_sets_first_bucket`): torch 2.11 and 2.13 do,
    keeping the 1 MiB first bucket for the default cap only; a torch where it cannot be read is taken to
    keep 1 MiB always.
    """
    from gpulab.torch_private import ddp_explicit_cap_sets_first_bucket

    return bool(ddp_explicit_cap_sets_first_bucket())


def predict_allreduce_seconds(bucket_bytes: Sequence[int], fit: AlphaBeta) -> float:
    """One step's all-reduce time: one call per bucket, ``alpha + beta * bytes`` each."""
    if not bucket_bytes:
        raise ValueError("bucket_bytes is empty: a DDP step all-reduces at least one bucket")
    return sum(fit.seconds(b) for b in bucket_bytes)


def ring_allreduce_seconds(nbytes: float, ranks: int, alpha: float, beta: float) -> float:
    """Ring all-reduce on ``ranks``: 2(n-1) steps of ``alpha`` each, 2(n-1)/n x bytes through each link.

    ``alpha``: seconds per ring step; ``beta``: seconds per byte on one link (1 / busbw). 0 for one rank.
    """
    n = positive_int(ranks, "ranks")
    positive_number(nbytes, "nbytes")
    if alpha < 0 or beta < 0:
        raise ValueError(f"alpha={alpha!r} and beta={beta!r} must be >= 0")
    return 0.0 if n == 1 else 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes * beta


def ring_from_fit(fit: AlphaBeta, ranks: int) -> tuple[float, float]:
    """The ring's (alpha per step, beta per byte per link) that give ``fit`` at ``ranks`` ranks."""
    n = positive_int(ranks, "ranks")
    if n < 2:
        raise ValueError(f"ranks={ranks!r}: an all-reduce fit needs at least 2 ranks")
    return fit.alpha / (2 * (n - 1)), fit.beta * n / (2 * (n - 1))


def step_seconds(ranks: int, compute_per_sample: float, batch: int, nbytes: float, alpha: float,
                 beta: float) -> float:
    """A data-parallel step on a fixed global ``batch``: compute split over ranks + one ring all-reduce."""
    n = positive_int(ranks, "ranks")
    positive_int(batch, "batch")
    return positive_number(compute_per_sample, "compute_per_sample") * batch / n + ring_allreduce_seconds(
        nbytes, n, alpha, beta)


def best_rank_count(compute_per_sample: float, batch: int, nbytes: float, alpha: float, beta: float,
                    max_ranks: int = 1024) -> int:
    """The rank count beyond which the step time stops falling (at most ``max_ranks`` and ``batch``)."""
    top = min(positive_int(max_ranks, "max_ranks"), positive_int(batch, "batch"))
    n = 1
    while n < top and (step_seconds(n + 1, compute_per_sample, batch, nbytes, alpha, beta)
                       < step_seconds(n, compute_per_sample, batch, nbytes, alpha, beta)):
        n += 1
    return n


def ring_bytes_sent(collective: str, nbytes: float, ranks: int) -> float:
    """Bytes each rank sends in one ring ``collective`` of ``nbytes`` (nccl-tests' size): :func:`bus_factor` x bytes."""
    return bus_factor(collective, ranks) * positive_number(nbytes, "nbytes")


def bytes_sent_per_step(strategy: str, nbytes: float, ranks: int, regather: bool = True) -> float:
    """Bytes each rank sends in one training step with ring collectives; ``nbytes``: the gradient bytes.

    ``ddp``: all-reduces of every gradient, 2(n-1)/n x nbytes. ``fsdp``: an all-gather of every parameter
    before forward, another before backward when ``regather`` (FSDP2's default for every unit but the
    root), and a reduce-scatter of every gradient, (n-1)/n x nbytes each: 3(n-1)/n x nbytes.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    if strategy == "ddp":
        return ring_bytes_sent("all_reduce", nbytes, ranks)
    gathers = 2 if regather else 1
    return gathers * ring_bytes_sent("all_gather", nbytes, ranks) + ring_bytes_sent("reduce_scatter", nbytes, ranks)


def fsdp_padded_bytes(shapes: Sequence[Sequence[int]], ranks: int, element_size: int = 4) -> int:
    """Bytes FSDP2 gathers for parameters of ``shapes``: dim 0 padded up to a multiple of ``ranks``.

    FSDP2 gives every rank an equal shard (``_get_dim0_padded_size`` in torch's ``_fsdp_common.py``).
    """
    n = positive_int(ranks, "ranks")
    total = 0
    for shape in shapes:
        dims = [int(d) for d in shape] or [1]  # a 0-d parameter is one element
        padded = -(-dims[0] // n) * n  # dim 0 rounded up to a multiple of n
        total += padded * math.prod(dims[1:])
    return total * positive_int(element_size, "element_size")
