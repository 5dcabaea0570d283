"""Is ``gpulab.planner.plan``'s ranking right? Measure what it cannot know on a few layouts, test it on the others.

- :func:`fit_exposed`: the exposed share (``Calibration.exposed``) of each traffic class and group size, from one
  real step of a layout that brings it: the step's time minus the prediction without it, over its predicted time
  alone (exposed communication = step - everything else);
- :func:`spearman`: Spearman's rank correlation of two lists (ties share their mean rank);
- :func:`validate`: predicted against measured steps of layouts that were not used to calibrate, with each
  layout's spread over its steps; :data:`CRITERIA` says what a trustworthy ranking must reach.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Mapping, Sequence

from gpulab.planner.plan import Cluster, Model, predict
from gpulab.planner.layouts import Layout
from gpulab.planner.traffic import traffic

#: What the validation must show: this many layouts, Spearman's rho at least this, every step within this factor.
CRITERIA = {"layouts": 6, "spearman": 0.9, "factor": 1.5}


def _with(cluster: Cluster, shares: Mapping[tuple[str, int], float]) -> Cluster:
    return replace(cluster, calibration=cluster.calibration.with_exposed(shares))


def fit_exposed(model: Model, cluster: Cluster, batch: int,
                measured: Mapping[Layout, float]) -> dict[tuple[str, int], float]:
    """The exposed share of each (traffic class, group size), in the order of ``measured``.

    Each layout must bring exactly one (class, group size) whose share is not known yet: its share is the step's
    measured time minus the prediction without that traffic, over the traffic's predicted time alone.
    ``cluster`` must carry a calibration (the calls' measured times); ``measured``: layout -> median step seconds.
    A share of 0 means the traffic hides completely; the fit never goes below 0.
    """
    if cluster.calibration is None:
        raise ValueError("fit_exposed needs a cluster with a calibration: its calls' measured times")
    shares = dict(cluster.calibration.exposed)
    for layout, seconds in measured.items():
        per_micro = batch // layout.dp * model.sequence // layout.micro_batches
        keys = {(c.cls, c.ranks) for c in traffic(model, cluster, layout, per_micro) if c.ranks > 1}
        new = sorted(keys - set(shares))
        if len(new) != 1:
            raise ValueError(f"{layout.name} brings {len(new)} traffic classes not measured yet ({new}): "
                             "each calibration layout must bring exactly one")
        key = new[0]
        without = predict(model, _with(cluster, {**shares, key: 0.0}), batch, layout)
        whole = predict(model, _with(cluster, {**shares, key: 1.0}), batch, layout)
        shares[key] = max(0.0, (seconds - without.step) / (whole.step - without.step))
    return shares


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation: the Pearson correlation of the ranks (1: same order, -1: reversed)."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"spearman needs two lists of the same length >= 2, got {len(a)} and {len(b)}")
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    if den == 0:
        raise ValueError("spearman is undefined when one list has all values equal")
    return num / den


def validate(model: Model, cluster: Cluster, batch: int, steps: Mapping[Layout, Sequence[float]]) -> dict:
    """Predicted against measured for each layout (``steps``: its step seconds) and the ranking's verdict.

    Rows: predicted and measured (median) ms, their ratio, and the spread of the steps, (largest - smallest) /
    median. The verdict: Spearman's rho of predicted against measured, the worst factor either way, and whether
    each of :data:`CRITERIA` is met.
    """
    rows = []
    for layout, seconds in steps.items():
        p = predict(model, cluster, batch, layout)
        median = statistics.median(seconds)
        rows.append({"layout": layout.name, "predicted ms": p.step * 1e3, "measured ms": median * 1e3,
                     "measured / predicted": median / p.step, "fastest ms": min(seconds) * 1e3,
                     "slowest ms": max(seconds) * 1e3, "spread": (max(seconds) - min(seconds)) / median,
                     "steps": len(seconds)})
    if len(rows) < 2:
        raise ValueError(f"validate needs at least 2 layouts, got {len(rows)}")
    rho = spearman([r["predicted ms"] for r in rows], [r["measured ms"] for r in rows])
    worst = max(max(r["measured / predicted"], 1 / r["measured / predicted"]) for r in rows)
    met = {"layouts": len(rows) >= CRITERIA["layouts"], "spearman": rho >= CRITERIA["spearman"],
           "factor": worst <= CRITERIA["factor"]}
    return {"rows": rows, "spearman": rho, "worst factor": worst, "met": met}
