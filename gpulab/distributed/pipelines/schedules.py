"""Pipeline schedules on two CPU ranks: timelines, the bubble, the activations in flight, gradients vs one process.

Run inside a process group by ``gpulab.distributed.pipelines.worker`` (part ``schedules``), on the ranks of
``group``. The model (``pipelines.probe.blocks``) is cut into one stage per rank (two per rank for the looped
schedules); ``torch.distributed.pipelining`` sends each micro-batch's activations forward and its gradients
back. :func:`run_schedules` returns, on the group's first rank, a JSON-ready dict:

- ``runs``: for GPipe and 1F1B at each micro-batch count: the bubble of every timed step and its forwards and
  backwards (``spans``: per step, per rank, ``[name, start_s, end_s]``, each timed by the stage itself), the peak
  bytes of live activations per rank, and the largest gradient difference to one process running the whole batch;
- ``traces``: every rank's forward and backward ranges of one profiled step of each of :data:`TRACED`;
- ``looped``: the same gradient check for the schedules with several stages per rank;
- ``control``: GPipe with ``scale_grads=False`` (the micro-batch gradients summed, not averaged): it must differ;
- ``refused``: what each rank says for the :data:`REFUSED` cases (too few micro-batches, a count the interleaved
  schedule cannot split into rounds, a batch with fewer rows than micro-batches): all raise before any message;
- ``uneven``: what each rank says when the batch does not divide by the micro-batches (``tensor_split`` makes
  unequal chunks), on a group that gives up after :data:`UNEVEN_TIMEOUT_S` seconds.
"""

from __future__ import annotations

import datetime
import re
import statistics

import torch
import torch.distributed as dist
from torch.distributed.pipelining import (Schedule1F1B, ScheduleDualPipeV, ScheduleGPipe, ScheduleInterleaved1F1B,
                                          ScheduleInterleavedZeroBubble, ScheduleLoopedBFS, ScheduleZBVZeroBubble)
from torch.profiler import ProfilerActivity, profile

from gpulab.distributed.pipelines.probe import LABEL, LabelledStage, SavedBytes, batch, blocks, mse, spans
from gpulab.timing import Stopwatch

SCHEDULES = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}
#: Schedules with several stages per rank (the looped ones); ZBVZeroBubble and DualPipeV place them in a V.
LOOPED = {"Interleaved1F1B": ScheduleInterleaved1F1B, "LoopedBFS": ScheduleLoopedBFS,
          "InterleavedZeroBubble": ScheduleInterleavedZeroBubble, "ZBVZeroBubble": ScheduleZBVZeroBubble,
          "DualPipeV": ScheduleDualPipeV}
V_SHAPED = ("ZBVZeroBubble", "DualPipeV")
#: Cases torch refuses on every rank before any message: (what, schedule, micro-batches, stages per rank, rows).
REFUSED = (("1F1B, 1 micro-batch, 2 stages", "1F1B", 1, 1, None),
           ("DualPipeV, 2 micro-batches, 4 stages", "DualPipeV", 2, 2, None),
           ("Interleaved1F1B, 5 micro-batches, 2 ranks", "Interleaved1F1B", 5, 2, None),
           ("GPipe, 4 micro-batches, a batch of 3 rows", "GPipe", 4, 1, 3))
UNEVEN_ROWS, UNEVEN_MICRO = 10, 4  # tensor_split: 3, 3, 2, 2 rows
UNEVEN_TIMEOUT_S = 1.0
BUILD_PATH = re.compile(r"^\[[^\]]*\] ")  # gloo's "[/where/it/was/built/pair.cc:553] " before a message
MICRO_BATCHES = (1, 2, 4, 8)
#: The steps profiled for their timelines: (schedule, micro-batches, stages per rank).
TRACED = (("GPipe", 4, 1), ("1F1B", 4, 1), ("Interleaved1F1B", 4, 2))


def stage_indices(schedule: str, rank: int, ranks: int, per_rank: int) -> list[int]:
    """The stages rank ``rank`` runs: ``rank``, ``rank + ranks``, ... (a loop), or a V for :data:`V_SHAPED`."""
    if schedule in V_SHAPED:
        return [rank, 2 * ranks - 1 - rank]
    return [rank + k * ranks for k in range(per_rank)]


def build(schedule: str, micro_batches: int, rank: int, ranks: int, group, per_rank: int = 1,
          scale_grads: bool = True):
    """(full model, the schedule, this rank's stage indices, its stages) for one schedule; layers split evenly."""
    model = blocks()
    stages_total = ranks * per_rank
    per_stage = len(model) // stages_total
    mine = stage_indices(schedule, rank, ranks, per_rank)
    stages = [LabelledStage(model[s * per_stage:(s + 1) * per_stage], s, stages_total, torch.device("cpu"),
                            group=group) for s in mine]
    kind = {**SCHEDULES, **LOOPED}[schedule]
    runner = kind(stages[0] if per_rank == 1 else stages, micro_batches, loss_fn=mse, scale_grads=scale_grads)
    return model, runner, mine, stages


def run_step(runner, mine: list[int], stages_total: int, x: torch.Tensor, y: torch.Tensor) -> None:
    """One training step: the first stage gets the inputs, the last stage the targets."""
    first, last = 0 in mine, stages_total - 1 in mine
    args = (x,) if first else ()
    runner.step(*args, target=y) if last else runner.step(*args)


def reference_grads() -> dict[str, torch.Tensor]:
    """Gradients of one process computing the loss of the whole batch at once."""
    model = blocks()
    x, y = batch()
    mse(model(x), y).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def grad_error(own: dict[str, torch.Tensor], group, reference: dict | None) -> float | None:
    """Gather every rank's gradients of its stages; on the first rank, the largest difference to ``reference``."""
    gathered: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, own, group=group)
    if reference is None:
        return None
    merged = {k: v for part in gathered for k, v in part.items()}
    if set(merged) != set(reference):
        raise RuntimeError(f"the stages hold {len(merged)} gradients, the model has {len(reference)}")
    return max((merged[k] - reference[k]).abs().max().item() for k in reference)


def _grads(model, mine_only: bool = True) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None or not mine_only}


def bubble(per_rank: list[list[list]], ends: list[float]) -> float:
    """1 - (busy time / step time), averaged over ranks; the step ends when the last rank ends.

    ``per_rank[r]``: rank r's ``[name, start, end]`` forward and backward ranges of one step, ``ends[r]`` when
    its step ended, all on clocks started together (after a barrier).
    """
    busy = [sum(end - start for _, start, end in rank) for rank in per_rank]
    return 1.0 - statistics.fmean(busy) / max(ends)


def measure(schedule: str, micro_batches: int, rank: int, ranks: int, group, reference, repeats: int) -> dict:
    """``repeats`` steps of one schedule after a warm-up step: the bubble of each, live activations, gradients."""
    model, runner, mine, (stage,) = build(schedule, micro_batches, rank, ranks, group)
    x, y = batch()
    run_step(runner, mine, ranks, x, y)  # warm-up: the stages agree on shapes, buffers are made
    tracker, steps, error = SavedBytes(), [], None
    for i in range(repeats):
        model.zero_grad(set_to_none=True)
        dist.barrier(group=group)
        tracker.reset_peak()
        clock = Stopwatch().start()  # the ranks leave the barrier together: one clock for all
        stage.clock, stage.timed = clock, []
        with tracker.watch(model):
            run_step(runner, mine, ranks, x, y)
        steps.append([stage.timed, clock.elapsed()])
        stage.clock = None
        if i == 0:
            error = grad_error(_grads(model), group, reference)
    everyone: list = [None] * ranks
    dist.all_gather_object(everyone, {"steps": steps, "peak": tracker.peak}, group=group)
    spans = [[r["steps"][i][0] for r in everyone] for i in range(repeats)]
    bubbles = [bubble(spans[i], [r["steps"][i][1] for r in everyone]) for i in range(repeats)]
    return {"schedule": schedule, "micro_batches": micro_batches, "stages": ranks, "bubble": bubbles,
            "spans": spans, "peak_saved": [r["peak"] for r in everyone], "grad_error": error}


def trace(schedule: str, micro_batches: int, rank: int, ranks: int, group, per_rank: int = 1) -> list[list[list]]:
    """Every rank's forward and backward profiler ranges of one step (after a warm-up), on one clock."""
    model, runner, mine, _ = build(schedule, micro_batches, rank, ranks, group, per_rank=per_rank)
    x, y = batch()
    run_step(runner, mine, ranks * per_rank, x, y)
    dist.barrier(group=group)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run_step(runner, mine, ranks * per_rank, x, y)
    everyone: list = [None] * ranks
    dist.all_gather_object(everyone, spans(prof, LABEL), group=group)
    return everyone


def _said(exc: Exception) -> str:
    """``Type: message``, first line, without a ``[/path/file.cc:N]`` prefix naming the build machine."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {BUILD_PATH.sub('', text)}"


def _attempt(schedule: str, micro_batches: int, rank: int, ranks: int, group, per_rank: int, rows: int | None) -> str:
    """Build one schedule and run one step; what this rank raised, or "ran"."""
    try:
        _, runner, mine, _ = build(schedule, micro_batches, rank, ranks, group, per_rank=per_rank)
        x, y = batch()
        if rows is not None:
            x, y = x[:rows], y[:rows]
        run_step(runner, mine, ranks * per_rank, x, y)
    except Exception as exc:  # what torch raises is the measurement
        return _said(exc)
    return "ran"


def refused(ranks: int, rank: int, group) -> list[dict]:
    """What every rank says for each case of :data:`REFUSED`.

    The cases run on a group that gives up after :data:`UNEVEN_TIMEOUT_S` seconds: torch 2.13 refuses each on
    every rank before any message, but before 2.13 (pytorch/pytorch#180937) the last stage splits a too small
    batch's targets without a word and waits for the first stage, which has refused.
    """
    short = dist.new_group(list(range(ranks)), timeout=datetime.timedelta(seconds=UNEVEN_TIMEOUT_S),
                           use_local_synchronization=True)
    out = []
    for what, schedule, m, per_rank, rows in REFUSED:
        everyone: list = [None] * ranks
        dist.all_gather_object(everyone, _attempt(schedule, m, rank, ranks, short, per_rank, rows), group=group)
        out.append({"case": what, "per_rank": everyone})
    return out


def uneven(ranks: int, rank: int, group) -> dict:
    """GPipe on a batch of :data:`UNEVEN_ROWS` rows in :data:`UNEVEN_MICRO` micro-batches, on a group of its own.

    The last stage fails at once; the first then waits for a message that never comes, until the group gives up.
    """
    short = dist.new_group(list(range(ranks)), timeout=datetime.timedelta(seconds=UNEVEN_TIMEOUT_S),
                           use_local_synchronization=True)
    dist.barrier(group=group)  # both ranks start together: on a busy machine no 2 s wait comes from a late start
    said = _attempt("GPipe", UNEVEN_MICRO, rank, ranks, short, 1, UNEVEN_ROWS)
    everyone: list = [None] * ranks
    dist.all_gather_object(everyone, said, group=group)  # not on ``short``: it may be broken now
    sizes = [len(c) for c in torch.arange(UNEVEN_ROWS).tensor_split(UNEVEN_MICRO)]
    return {"rows": UNEVEN_ROWS, "micro_batches": UNEVEN_MICRO, "chunks": sizes, "per_rank": everyone}


def run_schedules(rank: int, ranks: int, group, repeats: int = 5) -> dict | None:
    """Every measurement of this module on the ``ranks`` ranks of ``group``; the dict on its first rank only."""
    first = rank == 0
    reference = reference_grads() if first else None
    x, y = batch()
    runs = [measure(name, m, rank, ranks, group, reference, repeats)
            for name in SCHEDULES for m in MICRO_BATCHES if not (name == "1F1B" and m < ranks)]
    traces = [{"schedule": name, "micro_batches": m, "stages_per_rank": k,
               "spans": trace(name, m, rank, ranks, group, per_rank=k)} for name, m, k in TRACED]
    looped = []
    for name in LOOPED:
        model, runner, mine, _ = build(name, 4, rank, ranks, group, per_rank=2)
        run_step(runner, mine, 2 * ranks, x, y)
        looped.append({"schedule": name, "stages": 2 * ranks, "micro_batches": 4,
                       "grad_error": grad_error(_grads(model), group, reference)})
    model, runner, mine, _ = build("GPipe", 4, rank, ranks, group, scale_grads=False)
    run_step(runner, mine, ranks, x, y)
    control = {"what": "GPipe, 4 micro-batches, scale_grads=False", "grad_error": grad_error(_grads(model), group, reference)}
    said, odd = refused(ranks, rank, group), uneven(ranks, rank, group)
    if not first:
        return None
    return {"runs": runs, "traces": traces, "looped": looped, "control": control, "refused": said, "uneven": odd,
            "ranks": ranks}
