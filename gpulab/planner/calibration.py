"""What a cluster measured about itself, for ``gpulab.planner.plan``: per-call fits, compute rates per shape, exposed shares.

Without a :class:`Calibration` the planner prices a cluster from its spec: every call a ring on its link at full
bandwidth, compute at the roofline, all communication exposed. With one, it uses what was measured:

- ``collectives``: ``alpha + beta x bytes`` for each kind (all_reduce, all_gather, reduce_scatter, send) and
  group size, measured with every group busy at once; what the backend really does is in it (gloo runs a
  reduce-scatter as a whole all-reduce plus copies, notebook 09);
- ``rates``: FLOP/s of a block's forward and backward at each ``(rows, columns)`` shape of its up-projection,
  measured with every rank busy, instead of one peak;
- ``exposed``: for each traffic class (``gpulab.planner.traffic.CLASSES``) and group size, the seconds its calls add
  to a real step over their measured time alone: below 1 where compute hides them (overlap), above 1 where the
  step slows them (shared cores, per-call bookkeeping). Measured from one real step of a layout whose only
  unmeasured traffic it is (``gpulab.planner.validation.fit_exposed``);
- ``alone``: a rank's compute time while the others wait, over its time with every rank busy: 1 where each rank
  has its own processor (GPUs), near ``cores / ranks`` where ranks share cores. Ranks that wait in a pipeline's
  bubble leave their share of a shared processor to the others.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from gpulab.comm_cost import AlphaBeta, fit_alpha_beta

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "send")


@dataclass(frozen=True)
class Calibration:
    """Measured figures of a cluster (see the module docstring); ``source`` says where they came from."""

    collectives: Mapping[tuple[str, int], AlphaBeta] = field(default_factory=dict)
    rates: Mapping[tuple[int, int], float] = field(default_factory=dict)
    exposed: Mapping[tuple[str, int], float] = field(default_factory=dict)
    alone: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        for (kind, ranks), fit in self.collectives.items():
            if kind not in KINDS or not isinstance(ranks, int) or ranks < 2 or not isinstance(fit, AlphaBeta):
                raise ValueError(f"collectives[{kind!r}, {ranks!r}] must be an AlphaBeta of one of {', '.join(KINDS)} "
                                 "over 2 or more ranks")
        for key, rate in self.rates.items():
            if not (isinstance(rate, (int, float)) and rate > 0 and math.isfinite(rate)):
                raise ValueError(f"rates[{key!r}]={rate!r} must be a positive FLOP/s")
        for key, share in self.exposed.items():
            if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], int)):
                raise ValueError(f"exposed key {key!r} must be (traffic class, group size)")
            if not (isinstance(share, (int, float)) and share >= 0 and math.isfinite(share)):
                raise ValueError(f"exposed[{key!r}]={share!r} must be a share >= 0")
        if isinstance(self.alone, bool) or not isinstance(self.alone, (int, float)) or not 0 < self.alone <= 1:
            raise ValueError(f"alone={self.alone!r} must be in (0, 1]: a rank alone is never slower than all busy")

    def fit(self, kind: str, ranks: int) -> AlphaBeta | None:
        """The measured fit of ``kind`` over ``ranks``, or None."""
        return self.collectives.get((kind, ranks))

    def share(self, cls: str, ranks: int) -> float:
        """The exposed share of a class's calls over ``ranks``: measured there, else at the class's nearest group
        size (the larger on a tie), else 1 (all of it adds to the step)."""
        sizes = [size for c, size in self.exposed if c == cls]
        if not sizes:
            return 1.0
        nearest = min(sizes, key=lambda size: (abs(size - ranks), -size))
        return float(self.exposed[(cls, nearest)])

    def rate(self, rows: int, columns: int) -> float | None:
        """FLOP/s at this shape: measured there, else interpolated in log-log over the product's size (clamped)."""
        if not self.rates:
            return None
        if (rows, columns) in self.rates:
            return float(self.rates[(rows, columns)])
        points = sorted((math.log(r * c), math.log(v)) for (r, c), v in self.rates.items())
        x = math.log(rows * columns)
        if x <= points[0][0]:
            return math.exp(points[0][1])
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if x <= x1:
                return math.exp(y0 + (y1 - y0) * (x - x0) / (x1 - x0 if x1 > x0 else 1.0))
        return math.exp(points[-1][1])

    def with_exposed(self, exposed: Mapping[tuple[str, int], float]) -> "Calibration":
        """The same calibration with these exposed shares."""
        return replace(self, exposed=dict(exposed))


def slowest_median(per_rank: Sequence[Sequence[float]]) -> float:
    """The median over repeats of the slowest rank in each (a synchronised call waits for its last rank)."""
    repeats = {len(times) for times in per_rank}
    if len(repeats) != 1 or not repeats.pop():
        raise ValueError("every rank must give the same number (>= 1) of times")
    return statistics.median(max(times[i] for times in per_rank) for i in range(len(per_rank[0])))


def typical_median(per_rank: Sequence[Sequence[float]]) -> float:
    """The median over ranks of each rank's median (work no rank waits for inside it, such as compute)."""
    return statistics.median(statistics.median(times) for times in per_rank)


def from_measurements(compute: Sequence[dict], collectives: Sequence[dict], hidden: int, widen: int = 4,
                      alone: dict | None = None, source: str = "") -> Calibration:
    """A calibration from measured rows (every rank's seconds gathered), exposed shares not yet known.

    ``compute``: ``{"rows", "tp", "parameters", "seconds": [per rank: [per repeat]]}``: one block's forward and
    backward, 6 x parameters x rows FLOPs, at ``columns = widen x hidden / tp``; the typical rank's median.
    ``collectives``: ``{"collective", "ranks", "bytes", "seconds": [per rank: [per repeat]]}``; the slowest rank's
    median, fitted per kind and group size (``cost.fit_alpha_beta``, relative errors). ``alone``: ``{"rows",
    "tp", "seconds": [per rank: [per repeat]]}``, one shape of ``compute`` timed one rank at a time (None: 1).
    """
    rates = {(c["rows"], widen * hidden // c["tp"]): 6.0 * c["parameters"] * c["rows"] / typical_median(c["seconds"])
             for c in compute}
    grouped: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for row in collectives:
        grouped.setdefault((row["collective"], row["ranks"]), []).append((row["bytes"], slowest_median(row["seconds"])))
    fits = {key: fit_alpha_beta([b for b, _ in points], [t for _, t in points]) for key, points in grouped.items()}
    share = 1.0
    if alone is not None:
        busy = next(c for c in compute if (c["rows"], c["tp"]) == (alone["rows"], alone["tp"]))
        share = min(1.0, typical_median(alone["seconds"]) / typical_median(busy["seconds"]))
    return Calibration(fits, rates, {}, share, source)
