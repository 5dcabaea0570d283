"""Notebook 13's one launch and what it measured: pipeline schedules, a 2-D mesh, layouts against ``gpulab.planner.plan``.

    lesson = run_lesson(timeout=240)      # one torchrun launch of 4 CPU ranks (gpulab.distributed.pipelines.worker)
    bubble_rows(lesson)                   # the measured bubble against (p - 1) / (m + p - 1)
    in_flight_rows(lesson)                # micro-batches whose activations each rank held at once
    timeline(lesson, "1F1B")              # each rank's forwards and backwards of one step, from the profiler
    mesh_rows(lesson), mesh_checks(lesson)   # the 2-D mesh's collectives, their sizes, which dimension

The planner against the layouts the launch timed is ``gpulab.distributed.pipelines.plan``.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Callable

from gpulab.distributed.pipelines.probe import SHAPE
from gpulab.distributed.pipelines.worker import PARTS
from gpulab.distributed.launch.collect import run_ranks

RANKS = 4
SPAN = re.compile(r"^stage (\d+) ([FB])(\d+)$")
#: The 2-D mesh's collectives in the profiler -> (collective, who calls it, the mesh dimension it runs over).
MESH_CALLS = {"c10d::_allgather_base_": ("all-gather", "FSDP2", "dp"),
              "c10d::_reduce_scatter_base_": ("reduce-scatter", "FSDP2", "dp"),
              "_c10d_functional::all_reduce": ("all-reduce", "tensor parallelism (DTensor)", "tp")}


@dataclass
class Lesson:
    """What rank 0 reported (``gpulab.distributed.pipelines.worker``), the launch's lines, seconds and warnings."""

    report: dict
    lines: list[str]
    seconds: float
    notes: list[str]


def run_lesson(timeout: float = 240.0, on_line: Callable[[str], None] | None = None,
               parts: tuple[str, ...] = PARTS, repeats: int = 15, steps: int = 5, device: str = "cpu") -> Lesson:
    """Launch the rank program on 4 ranks once for ``parts``; stopped after ``timeout`` s.

    ``repeats``: timed steps of each pipeline schedule; ``steps``: rounds in which every layout steps once.
    ``device="cuda"``: one GPU a rank on nccl, for the ``calibrate`` and ``layouts`` parts only (the planner's
    calibration and validation on a GPU machine of 4 or more GPUs).
    """
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise ValueError(f"parts={list(parts)!r}: use some of {', '.join(PARTS)}")
    if device not in ("cpu", "cuda") or (device == "cuda" and set(parts) - {"calibrate", "layouts"}):
        raise ValueError(f"device={device!r} with parts={list(parts)!r}: use 'cpu', or 'cuda' with calibrate and "
                         "layouts only")
    args = ["--parts", ",".join(parts), "--repeats", str(repeats), "--steps", str(steps), "--device", device]
    with run_ranks("gpulab.distributed.pipelines.worker", args, nproc=RANKS, timeout=timeout,
                   backend="gloo" if device == "cpu" else "nccl", keep_warnings=True,  # "4 ranks on 2 CPU cores"
                   on_line=on_line) as ranks:
        report = ranks.json("report.json")
    return Lesson(report, ranks.result.lines, ranks.result.seconds, sorted(ranks.notes))


def bubble_formula(stages: int, micro_batches: int) -> float:
    """The share of a step a pipeline's ranks wait while it fills and drains: ``(p - 1) / (m + p - 1)``."""
    if stages < 1 or micro_batches < 1:
        raise ValueError(f"stages={stages!r} and micro_batches={micro_batches!r} must be whole numbers >= 1")
    return (stages - 1) / (micro_batches + stages - 1)


def _runs(lesson: Lesson) -> list[dict]:
    if "schedules" not in lesson.report:
        raise ValueError("this lesson has no 'schedules' part: run_lesson(parts=(..., 'schedules', ...))")
    return lesson.report["schedules"]["runs"]


def replayed_bubble(per_rank: list[list[list]]) -> float:
    """The bubble one step would have had with its own measured forwards and backwards and nothing else.

    ``per_rank[r]``: rank r's ``[name, start, end]`` ranges of one step (``stage S F3`` or ``stage S B3``). Each
    rank keeps its order and each range its measured length; a forward waits for the same micro-batch's forward
    on the previous stage, a backward for its backward on the next stage; messages take no time and no rank does
    anything between its ranges. What is left is the schedule's own waiting, with the real compute times.
    """
    ops = [[(int(st), kind, int(mb), end - start) for name, start, end in rank
            for st, kind, mb in [SPAN.match(name).groups()]] for rank in per_rank]
    last = max(op[0] for rank in ops for op in rank)
    done: dict[tuple, float] = {}
    free, at = [0.0] * len(ops), [0] * len(ops)
    while any(i < len(rank) for i, rank in zip(at, ops)):
        moved = False
        for r, rank in enumerate(ops):
            while at[r] < len(rank):
                stage, kind, mb, length = rank[at[r]]
                before = ((stage - 1, "F", mb) if kind == "F" and stage > 0 else
                          (stage + 1, "B", mb) if kind == "B" and stage < last else None)
                if before is not None and before not in done:
                    break
                done[(stage, kind, mb)] = free[r] = max(free[r], done.get(before, 0.0)) + length
                at[r] += 1
                moved = True
        if not moved:
            raise ValueError("these ranges wait for each other: not one step of a pipeline schedule")
    busy = [sum(op[3] for op in rank) for rank in ops]
    return 1.0 - statistics.fmean(busy) / max(free)


def bubble_rows(lesson: Lesson) -> list[dict]:
    """Per schedule and micro-batch count: the measured bubble of the steps (median and the middle half of them:
    ``q25``, ``q75``), the median of each step's :func:`replayed_bubble`, and the formula."""
    rows = []
    for r in _runs(lesson):
        q25, _, q75 = statistics.quantiles(r["bubble"], n=4, method="inclusive") if len(r["bubble"]) > 1 else [
            r["bubble"][0]] * 3
        rows.append({"schedule": r["schedule"], "micro-batches": r["micro_batches"], "steps": len(r["bubble"]),
                     "measured (median)": statistics.median(r["bubble"]), "q25": q25, "q75": q75,
                     "replayed (median)": statistics.median(replayed_bubble(step) for step in r["spans"]),
                     "formula": bubble_formula(r["stages"], r["micro_batches"])})
    return rows


def in_flight_rows(lesson: Lesson) -> list[dict]:
    """Per run and rank: the peak bytes of live activations, and that peak in micro-batches.

    One micro-batch's activations on a rank are GPipe's peak at the same count divided by the count (GPipe
    keeps every micro-batch until its backward).
    """
    runs = _runs(lesson)
    gpipe = {r["micro_batches"]: r["peak_saved"] for r in runs if r["schedule"] == "GPipe"}
    rows = []
    for r in runs:
        m = r["micro_batches"]
        for rank, peak in enumerate(r["peak_saved"]):
            one = gpipe[m][rank] / m
            rows.append({"schedule": r["schedule"], "micro-batches": m, "rank": rank, "peak bytes": peak,
                         "micro-batches in flight": peak / one})
    return rows


def grad_rows(lesson: Lesson) -> list[dict]:
    """The largest gradient difference to one process of every pipeline run, the looped schedules and the control."""
    s = lesson.report["schedules"]
    rows = [{"run": f"{r['schedule']}, {r['micro_batches']} micro-batches", "stages": r["stages"],
             "max |difference|": r["grad_error"]} for r in s["runs"]]
    rows += [{"run": f"{r['schedule']}, {r['micro_batches']} micro-batches, 2 stages per rank", "stages": r["stages"],
              "max |difference|": r["grad_error"]} for r in s["looped"]]
    return rows + [{"run": f"control: {s['control']['what']}", "stages": s["ranks"],
                    "max |difference|": s["control"]["grad_error"]}]


def timeline(lesson: Lesson, schedule: str) -> list[list[dict]]:
    """One profiled step of ``schedule``: per rank, its forwards and backwards in order, in ms from the first start."""
    traces = {t["schedule"]: t for t in lesson.report["schedules"]["traces"]}
    if schedule not in traces:
        raise ValueError(f"no trace of {schedule!r}: traced {', '.join(traces)}")
    per_rank = traces[schedule]["spans"]
    origin = min(s[1] for rank in per_rank for s in rank)
    out = []
    for rank in per_rank:
        boxes = []
        for name, start, end in rank:
            stage, kind, micro = SPAN.match(name).groups()
            boxes.append({"stage": int(stage), "kind": kind, "micro_batch": int(micro),
                          "start_ms": (start - origin) / 1e3, "end_ms": (end - origin) / 1e3})
        out.append(boxes)
    return out


def order(boxes: list[dict]) -> str:
    """A rank's work as text, like ``F0 F1 B0 F2 B1 B2``."""
    return " ".join(f"{b['kind']}{b['micro_batch']}" for b in boxes)


def mesh_rows(lesson: Lesson, rank: int = 0) -> list[dict]:
    """The 2-D step's collectives on ``rank``: each kind, who calls it, how many, the shapes it moved."""
    calls = lesson.report["mesh"]["per_rank"][rank]["calls"]
    rows = []
    for name, (collective, caller, dim) in MESH_CALLS.items():
        mine = [shape for n, shape in calls if n == name]
        rows.append({"collective": collective, "called by": caller, "calls": len(mine),
                     "tensor shapes": " ".join(sorted({" ".join(map(str, s)) for s in mine})), "mesh dimension": dim})
    return rows


def mesh_checks(lesson: Lesson) -> dict[str, bool]:
    """What the 2-D trace's sizes show: all-gathers join ``dp`` pieces of each rank's TP share, all-reduces carry
    the activations of this data-parallel rank's tokens only, and each dimension's group holds 2 ranks."""
    mesh = lesson.report["mesh"]
    rank0 = mesh["per_rank"][0]
    dp, tp = (len(rank0["groups"][d]) for d in ("dp", "tp"))
    h, tokens = SHAPE["hidden"], SHAPE["samples"] * SHAPE["sequence"]
    block = 2 * 4 * h * h + 4 * h + h  # one block's parameters
    tp_share = (4 * h * h + 4 * h) // tp + (4 * h * h) // tp + h  # Colwise weight+bias, Rowwise weight, whole bias
    gathers = [s for n, s in rank0["calls"] if n == "c10d::_allgather_base_"]
    reduces = [s for n, s in rank0["calls"] if n == "_c10d_functional::all_reduce"]
    return {"every all-gather joins dp pieces into one rank's TP share of a block":
                all(shapes == [[tp_share], [tp_share // dp]] for shapes in gathers) and block > tp_share,
            "every all-reduce carries this dp rank's tokens x hidden":
                all(shapes[0] == [tokens // dp, h] for shapes in reduces),
            "each mesh dimension's group holds 2 ranks": dp == tp == 2}
