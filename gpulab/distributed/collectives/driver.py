"""Run the collectives rank program through torchrun and read what every rank wrote.

    from gpulab.distributed.collectives.driver import run_collectives
    result = run_collectives(4, parts=("semantics", "sweep"))       # one launch, 4 gloo ranks
    result.semantics[2]["all_reduce"]   # {'before': [20, 21, 22, 23], 'after': [60, 64, 68, 72]}
    result.sweep                        # rows: collective, bytes, seconds, algbw, busbw (bytes/s)
    result.ddp                          # rank 0's DDP report (gpulab.distributed.collectives.ddp_profile)
    result.fsdp                         # rank 0's FSDP2 collectives per step (parts including "fsdp")

A sweep row's time is, for each repeat, the slowest rank's (a collective ends when its last rank
is done), then the median over repeats.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from gpulab.distributed.collectives.worker import PARTS
from gpulab.comm_cost import COLLECTIVES, AlphaBeta, algbw, busbw, check_collective, fit_alpha_beta
from gpulab.validate import positive_int
DEFAULT_SIZES = tuple(2**k for k in range(10, 25, 2))  # 1 KiB .. 16 MiB, x4 apart


@dataclass
class CollectivesResult:
    """One launch: per-rank semantics, the combined sweep, rank 0's DDP report, output lines, seconds."""

    ranks: int
    semantics: list[dict] | None
    sweep: list[dict]
    ddp: dict | None
    ddp_per_rank: list[dict] | None
    lines: list[str]
    seconds: float
    cpu_count: int | None
    no_sync_weights: dict | None = None  # rank 0's weights after the no_sync accumulation run
    fsdp: dict | None = None  # rank 0's FSDP2 report (collectives_worker.fsdp_traffic)
    reduce_scatter_ops: list | None = None  # rank 0's operations of one reduce_scatter (with "semantics")


def check_sizes(sizes: Sequence[int], nproc: int) -> list[int]:
    """Byte sizes that split into whole float32 pieces over ``nproc`` ranks, or a one-line ValueError."""
    sizes = list(sizes)
    if not sizes:
        raise ValueError("sizes is empty: give at least one message size in bytes")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int) or s <= 0 or s % (4 * nproc):
            raise ValueError(f"size {s!r} must be a positive number of bytes divisible by 4 x {nproc} ranks "
                             f"= {4 * nproc} (whole float32 pieces per rank)")
    return sizes


def sweep_rows(per_rank: Sequence[Sequence[dict]], ranks: int) -> list[dict]:
    """Combine every rank's sweep: slowest rank per repeat, median over repeats, algbw and busbw."""
    rows = []
    for at, first in enumerate(per_rank[0]):
        times = [max(rank_rows[at]["seconds"][i] for rank_rows in per_rank) for i in range(len(first["seconds"]))]
        seconds = statistics.median(times)
        rows.append({"collective": first["collective"], "bytes": first["bytes"], "seconds": seconds,
                     "algbw": algbw(first["bytes"], seconds),
                     "busbw": busbw(first["collective"], first["bytes"], seconds, ranks)})
    return rows


def fit_sweep(rows: Sequence[dict], collective: str = "all_reduce") -> AlphaBeta:
    """The alpha + beta x bytes fit of one collective's sweep rows."""
    check_collective(collective)
    mine = [r for r in rows if r["collective"] == collective]
    if not mine:
        raise ValueError(f"no sweep rows for {collective!r}: the sweep measured "
                         f"{', '.join(sorted({r['collective'] for r in rows})) or 'nothing'}")
    return fit_alpha_beta([r["bytes"] for r in mine], [r["seconds"] for r in mine])


def expected_semantics(world: int) -> dict[str, list[list[int]]]:
    """What each rank must hold after each collective of the demonstration (rank r starts at ``10r + i``)."""
    n = positive_int(world, "world")
    start = [[10 * r + i for i in range(n)] for r in range(n)]
    total = [sum(row[i] for row in start) for i in range(n)]
    return {"broadcast": [start[0]] * n, "all_reduce": [total] * n,
            "reduce_scatter": [[total[r]] for r in range(n)], "all_gather": [total] * n}


def after_last_arrival(per_rank_calls: Sequence[Sequence[Sequence[float]]]) -> list[float]:
    """Seconds of each call from the moment its last rank started it to the moment its last rank finished.

    ``per_rank_calls[r][i]`` is ``[start_us, end_us]`` of call ``i`` on rank ``r`` (one clock for all ranks):
    the time each rank sees includes waiting for slower ranks; this leaves the waiting out.
    """
    lengths = {len(calls) for calls in per_rank_calls}
    if len(lengths) != 1:
        raise ValueError(f"the ranks recorded different numbers of calls ({sorted(lengths)}): they must match")
    return [(max(c[i][1] for c in per_rank_calls) - max(c[i][0] for c in per_rank_calls)) / 1e6
            for i in range(lengths.pop())]


def ddp_rows(result: "CollectivesResult", part: str = "predict") -> list[dict]:
    """Rank 0's rows of one DDP part with ``after_arrival_s_per_step`` (and ``alone_s_per_step``) from every rank."""
    if result.ddp_per_rank is None or part not in result.ddp:
        raise ValueError(f"this result has no DDP part {part!r}: launch with parts including 'ddp'")
    rows = []
    for i, row in enumerate(result.ddp[part]):
        calls = [rank[part][i]["calls_us"] for rank in result.ddp_per_rank]
        steps = len(calls[0]) / row["calls_per_step"] if row["calls_per_step"] and None not in calls else None
        after = sum(after_last_arrival(calls)) / steps if steps else None
        extra = {"after_arrival_s_per_step": after}
        if "alone_s" in row:  # slowest rank per repeat, median over repeats, as in the sweep
            alone = [rank[part][i]["alone_s"] for rank in result.ddp_per_rank]
            extra["alone_s_per_step"] = statistics.median(max(a[j] for a in alone) for j in range(len(alone[0])))
        rows.append({**{k: v for k, v in row.items() if k not in ("calls_us", "alone_s")}, **extra})
    return rows


def prediction_rows(result: "CollectivesResult", fit: AlphaBeta) -> list[dict]:
    """For each model of the DDP ``predict`` part: the all-reduce time per step predicted from ``fit``
    (one ``alpha + beta x bytes`` per bucket ``ddp_buckets`` predicts), measured alone and inside the step,
    and the errors (%). Inside the step is None where the profiler lost some of the backend's events."""
    from gpulab.comm_cost import predict_allreduce_seconds

    rows = []
    for row in ddp_rows(result, "predict"):
        buckets = _predicted_buckets(row["model"])
        predicted = predict_allreduce_seconds(buckets, fit)
        alone, in_step = row["alone_s_per_step"], row["after_arrival_s_per_step"]
        rows.append({"model": row["model"], "gradient_bytes": row["gradient_bytes"], "buckets": len(buckets),
                     "predicted_ms": predicted * 1e3, "alone_ms": alone * 1e3,
                     "in_step_ms": None if in_step is None else in_step * 1e3,
                     "rank_sees_ms": row["allreduce_s_per_step"] * 1e3, "step_ms": row["step_s"] * 1e3,
                     "error_vs_alone_%": 100 * (predicted - alone) / alone,
                     "error_vs_in_step_%": None if in_step is None else 100 * (predicted - in_step) / in_step})
    return rows


def bucket_sweep_rows(result: "CollectivesResult", fit: AlphaBeta) -> list[dict]:
    """Each bucket of the DDP ``predict`` part next to the sweep's all_reduce at the nearest size it measured:
    the measured time there, the fit there, and the fit at the bucket's own size."""
    sweep = [r for r in result.sweep if r["collective"] == "all_reduce"]
    if not sweep:
        raise ValueError("this result has no all_reduce sweep: launch with parts including 'sweep'")
    rows = []
    for row in result.ddp["predict"]:
        for b in row["bucket_sizes"] or _predicted_buckets(row["model"]):
            near = min(sweep, key=lambda r: abs(math.log(r["bytes"] / b)))
            rows.append({"model": row["model"], "bucket_bytes": b, "sweep_bytes": near["bytes"],
                         "sweep_ms": near["seconds"] * 1e3, "fit_at_sweep_ms": fit.seconds(near["bytes"]) * 1e3,
                         "fit_at_bucket_ms": fit.seconds(b) * 1e3})
    return rows


def traffic_rows(result: "CollectivesResult", model: str = "net1") -> list[dict]:
    """Bytes each rank sent in one training step of ``model``, DDP and FSDP2: counted from the run's
    collectives (sizes x the ring's factor) and predicted by ``cost.bytes_sent_per_step``."""
    from gpulab.comm_cost import bytes_sent_per_step, fsdp_padded_bytes, ring_bytes_sent

    if result.ddp is None or result.fsdp is None:
        raise ValueError("traffic_rows needs a launch with parts including 'ddp' and 'fsdp'")
    n, f = result.ranks, result.fsdp
    ddp = next(r for r in result.ddp["predict"] if r["model"] == model)
    buckets = ddp["bucket_sizes"] or _predicted_buckets(model)
    padded = fsdp_padded_bytes(f["shapes"], n, f["element_size"])
    calls, sizes = f["calls_per_step"], f["bytes_per_step"]
    return [{"strategy": "DDP", "all_reduces": ddp["calls_per_step"], "all_gathers": 0, "reduce_scatters": 0,
             "collective_bytes": sum(buckets), "sent_counted": sum(ring_bytes_sent("all_reduce", b, n) for b in buckets),
             "sent_predicted": bytes_sent_per_step("ddp", ddp["gradient_bytes"], n),
             "sent_predicted_padded": bytes_sent_per_step("ddp", ddp["gradient_bytes"], n)},
            {"strategy": "FSDP2", "all_reduces": 0, "all_gathers": calls["all_gather"],
             "reduce_scatters": calls["reduce_scatter"], "collective_bytes": sum(sizes.values()),
             "sent_counted": sum(ring_bytes_sent(c, b, n) for c, b in sizes.items()),
             "sent_predicted": bytes_sent_per_step("fsdp", f["gradient_bytes"], n),
             "sent_predicted_padded": bytes_sent_per_step("fsdp", padded, n)}]


def _predicted_buckets(model: str) -> list[int]:
    from gpulab.comm_cost import ddp_buckets, gradient_bytes
    from gpulab.distributed.collectives.ddp_profile import build

    return ddp_buckets(gradient_bytes(build(model))[::-1])


def semantics_table(semantics: Sequence[dict], collective: str) -> str:
    """One line per rank: its tensor before and after ``collective``."""
    check_collective(collective)
    width = max(len(str(s[collective]["before"])) for s in semantics)
    return "\n".join(f"rank {r}: {str(s[collective]['before']):<{width}} -> {s[collective]['after']}"
                     for r, s in enumerate(semantics))


def _progress(parts: Sequence[str], on_line: Callable[[str], None] | None, show: bool):
    if not show:
        return on_line, lambda: None
    from tqdm.auto import tqdm

    bar = tqdm(total=len(parts), desc="torchrun", unit="part")

    def line(text: str) -> None:
        if text.startswith("[rank 0] ") and " done" in text:
            bar.update(1)
        if on_line is not None:
            on_line(text)
    return line, bar.close


def run_collectives(nproc: int, parts: Sequence[str] = ("semantics", "sweep"), *, sizes: Sequence[int] = DEFAULT_SIZES,
                    repeats: int = 5, collectives: Sequence[str] = COLLECTIVES, steps: int = 3,
                    ddp_parts: Sequence[str] | None = None, backend: str = "gloo", timeout: float = 180.0,
                    progress: bool = False, on_line: Callable[[str], None] | None = None) -> CollectivesResult:
    """Launch ``gpulab.distributed.collectives.worker`` on ``nproc`` ranks (one torchrun) and read its results."""
    from gpulab.distributed.launch.collect import run_ranks

    nproc = positive_int(nproc, "nproc")
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise ValueError(f"parts={list(parts)!r}: use one or more of {', '.join(PARTS)}")
    for c in collectives:
        check_collective(c)
    sizes = check_sizes(sizes, nproc)
    positive_int(repeats, "repeats")
    positive_int(steps, "steps")
    args = ["--parts", ",".join(parts), "--sizes", ",".join(map(str, sizes)), "--repeats", str(repeats),
            "--collectives", ",".join(collectives), "--steps", str(steps), "--backend", backend]
    args += ["--ddp-parts", ",".join(ddp_parts)] if ddp_parts else []
    line, close = _progress(parts, on_line, progress)
    try:
        with run_ranks("gpulab.distributed.collectives.worker", args, nproc=nproc, timeout=timeout, backend=backend,
                       on_line=line) as launched:
            ranks = launched.per_rank()
            weights = launched.load("accumulate_no_sync.pt") if launched.has("accumulate_no_sync.pt") else None
            result = launched.result
    finally:
        close()
    ddp = [r["ddp"] for r in ranks] if "ddp" in parts else None
    return CollectivesResult(
        ranks=nproc, semantics=[r["semantics"] for r in ranks] if "semantics" in parts else None,
        sweep=sweep_rows([r["sweep"] for r in ranks], nproc) if "sweep" in parts else [],
        ddp=ddp[0] if ddp else None, ddp_per_rank=ddp, lines=result.lines, seconds=result.seconds,
        cpu_count=ranks[0].get("cpu_count"), no_sync_weights=weights, fsdp=ranks[0].get("fsdp"),
        reduce_scatter_ops=ranks[0].get("reduce_scatter_ops"))
