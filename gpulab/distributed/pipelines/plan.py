"""Notebook 13's planner against its own launch: this machine as a measured cluster, the ranking put to the test.

    machine = cluster(lesson)        # gpulab.planner.plan.Cluster with a Calibration: fits, rates, exposed shares
    exposed_rows(lesson)             # each traffic class's share, from the calibration layout that has only it
    calls_rows(lesson)               # calls per step: the planner's count against the profiler's
    verdict = ranking(lesson)        # the other layouts: predicted against measured, spreads, Spearman, criteria
    calibration_check(lesson)        # the same table for the calibration layouts (close by construction)
    memory_rows(lesson)              # bytes a rank holds: predicted against measured

The launch (``pipelines.run_lesson``) measured with every rank busy (``pipelines.calibrate``) and timed every
layout of ``pipelines.layouts.LAYOUTS`` in turns. The calibration layouts set the exposed shares; the others
never touch the planner before they are predicted.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from gpulab.comm_cost import ring_from_fit
from gpulab.distributed.pipelines.layouts import CALIBRATION, VALIDATION
from gpulab.distributed.pipelines.probe import SHAPE
from gpulab.planner.plan import Cluster, Model, predict
from gpulab.planner.calibration import from_measurements
from gpulab.planner.blocks import BLOCKS
from gpulab.planner.layouts import Layout
from gpulab.planner.traffic import call_seconds, traffic
from gpulab.planner.validation import fit_exposed, validate


def lesson_model() -> tuple[Model, int]:
    """The launch's blocks as ``gpulab.planner.plan`` sees them (fp32, Adam), and the global batch in samples."""
    h, layers = SHAPE["hidden"], SHAPE["layers"]
    params = layers * (2 * 4 * h * h + 4 * h + h)
    return Model(params, layers, h, SHAPE["sequence"], block="mlp", precision="fp32", optimizer="adam"), SHAPE["samples"]


def _report(lesson, part: str) -> dict | list:
    if part not in lesson.report:
        raise ValueError(f"this lesson has no {part!r} part: run_lesson(parts=(..., {part!r}, ...))")
    return lesson.report[part]


def _measured(lesson, names) -> dict[Layout, list[float]]:
    timed = _report(lesson, "layouts")
    return {Layout(*timed[name]["layout"]): timed[name]["seconds"] for name in names if name in timed}


def measured_cluster(lesson, memory: float = 2**30) -> Cluster:
    """This machine's ranks as a cluster, from the ``calibrate`` part only (no exposed shares yet).

    Every rank's compute and call times become a :class:`~gpulab.planner.calibration.Calibration`; the link's
    latency and bandwidth shown are the ring's per-step figures of the world all-reduce fit
    (``cost.ring_from_fit``); ``memory`` (bytes per rank) only decides what "fits".
    """
    per_rank = _report(lesson, "calibrate")
    world = lesson.report["world_size"]
    first = per_rank[0]

    def gathered(key: str) -> list[dict]:
        return [{**row, "seconds": [r[key][i]["seconds"] for r in per_rank]} for i, row in enumerate(first[key])]

    alone = {**first["alone"], "seconds": [r["alone"]["seconds"] for r in per_rank]}
    calibration = from_measurements(gathered("compute"), gathered("collectives"), SHAPE["hidden"],
                                    BLOCKS["mlp"].widen, alone, "this machine, every rank busy")
    alpha, beta = ring_from_fit(calibration.fit("all_reduce", world), world)
    return Cluster(world, memory, max(alpha, 1e-9), 1 / max(beta, 1e-15), max(calibration.rates.values()),
                   statistics.median(r["copy_gbs"] for r in per_rank) * 1e9, calibration=calibration)


def cluster(lesson, memory: float = 2**30) -> Cluster:
    """:func:`measured_cluster` with each traffic class's exposed share fitted on the calibration layouts."""
    machine = measured_cluster(lesson, memory)
    model, batch = lesson_model()
    medians = {layout: statistics.median(seconds) for layout, seconds in _measured(lesson, CALIBRATION).items()}
    shares = fit_exposed(model, machine, batch, medians)
    return replace(machine, calibration=machine.calibration.with_exposed(shares))


def exposed_rows(lesson) -> list[dict]:
    """Per calibration layout: the traffic it measured (class, group size), that traffic's time alone and its share."""
    model, batch = lesson_model()
    machine = measured_cluster(lesson)
    shares = cluster(lesson).calibration.exposed
    known: set = set()
    rows = []
    for layout in _measured(lesson, CALIBRATION):
        per_micro = batch // layout.dp * model.sequence // layout.micro_batches
        calls = [c for c in traffic(model, machine, layout, per_micro) if c.ranks > 1]
        key = next(iter({(c.cls, c.ranks) for c in calls} - known))
        known.add(key)
        alone = sum(c.count * call_seconds(c, machine) for c in calls if (c.cls, c.ranks) == key)
        rows.append({"layout": layout.name, "traffic": f"{key[0]} over {key[1]}",
                     "calls": sum(c.count for c in calls if (c.cls, c.ranks) == key),
                     "alone ms": alone * 1e3, "exposed share": shares[key]})
    return rows


def calls_rows(lesson) -> list[dict]:
    """Per calibration layout and kind of call: the calls per step the planner counts and the profiler saw."""
    model, batch = lesson_model()
    machine = measured_cluster(lesson)
    timed = _report(lesson, "layouts")
    rows = []
    for name in CALIBRATION:
        layout = Layout(*timed[name]["layout"])
        planned = predict(model, machine, batch, layout).calls
        seen = {k: v for k, v in timed[name]["calls"].items() if k != "recv"}  # the planner counts the sends
        for kind in sorted(set(planned) | set(seen)):
            rows.append({"layout": name, "call": kind, "planned": planned.get(kind, 0), "profiled": seen.get(kind, 0)})
    return rows


def calibration_check(lesson) -> dict:
    """``gpulab.planner.validation.validate`` on the calibration layouts: close by construction, each fitted one share."""
    model, batch = lesson_model()
    return validate(model, cluster(lesson), batch, _measured(lesson, CALIBRATION))


def ranking(lesson, calibrated: bool = True) -> dict:
    """``gpulab.planner.validation.validate`` on the layouts that did not calibrate the cluster.

    ``calibrated=False``: the same machine priced from sizes alone, as a cluster's spec would give it: every call a
    ring on one link (the world all-reduce fit's), every shape at the fastest rate measured, nothing exposed measured.
    """
    model, batch = lesson_model()
    machine = cluster(lesson) if calibrated else replace(measured_cluster(lesson), calibration=None)
    return validate(model, machine, batch, _measured(lesson, VALIDATION))


def memory_rows(lesson) -> list[dict]:
    """Each timed layout: bytes held (state + live activations) predicted and measured, and the predicted peak.

    ``predicted peak MiB`` is what the fit test uses: the bytes held plus DDP's buckets or FSDP's gathered units.
    No run measures a peak, so only the bytes held are compared.
    """
    model, batch = lesson_model()
    machine = measured_cluster(lesson)
    rows = []
    for name, measured in _report(lesson, "layouts").items():
        p = predict(model, machine, batch, Layout(*measured["layout"]))
        held = measured["state_bytes"] + measured["saved_bytes"]
        rows.append({"layout": name, "predicted MiB": p.memory / 2**20, "measured MiB": held / 2**20,
                     "measured / predicted": held / p.memory, "predicted peak MiB": p.peak / 2**20})
    return rows
