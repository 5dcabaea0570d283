"""Notebook 10: how distributed runs break, on a timeline of the ranks.

- ``mismatch_timeout()`` (a schematic): two ranks in different collectives wait for each other until a timeout;
- ``uneven_join(batches, shadows)`` (from a run): ranks with different numbers of batches, without Join
  (the rank with more batches waits in an all-reduce nobody else calls) and with Join (the finished rank runs
  shadow all-reduces of zeros), drawn from the counts the run printed.
"""

from __future__ import annotations

from typing import Sequence

from gpulab.figures import COLORS, arrow, box, canvas, label, rank_color

BATCH, REDUCE, LANE = 1.7, 0.75, 0.9  # widths of one batch's compute and its all-reduce; height of a rank's lane


def _lane(ax, y: float, rank: int) -> None:
    label(ax, 0.55, y + 0.3, f"rank {rank}", color=rank_color(rank), weight="bold")


def _wait(ax, x: float, y: float, w: float, text: str) -> None:
    """A hatched bar: a rank blocked in a collective."""
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((x, y), w, 0.6, facecolor="white", edgecolor=COLORS["grad"], hatch="///",
                           linewidth=1.0))
    ax.text(x + w / 2, y + 0.3, text, ha="center", va="center", fontsize=9, color=COLORS["text"],
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none"})


def _error(ax, x: float, y: float, text: str) -> None:
    ax.plot([x, x], [y - 0.1, y + 0.7], color=COLORS["grad"], lw=2.5)
    label(ax, x + 0.1, y + 0.3, text, ha="left", fontsize=9, color=COLORS["grad"], weight="bold")


def mismatch_timeout():
    """Rank 0 in all_reduce, rank 1 in broadcast: each waits for data the other never sends, until a timeout."""
    fig, ax = canvas(11, 3.6, "Different collectives without DETAIL: both ranks wait, until a timeout")
    for rank, (call, waits) in enumerate([("all_reduce", "waits for rank 1's part of the all-reduce"),
                                          ("broadcast", "waits for rank 0's broadcast")]):
        y = 2.1 - rank * 1.1
        _lane(ax, y, rank)
        box(ax, 1.1, y, BATCH, 0.6, "its own work", color=COLORS["cpu"], fontsize=9)
        box(ax, 1.1 + BATCH, y, 1.7, 0.6, f"calls {call}", color=COLORS["comm"], fontsize=9)
        end = 8.0 if rank == 0 else 9.3
        _wait(ax, 1.1 + BATCH + 1.7, y, end - (1.1 + BATCH + 1.7), waits)
        _error(ax, end, y, "times out: error" if rank == 0 else "its own, later limit")
    label(ax, 8.0, 0.55, "rank 0's limit is the shorter, so its error\n"
                         "\"Timed out waiting ... for recv\" comes first", fontsize=9, ha="center")
    arrow(ax, (1.1, 0.25), (10.8, 0.25))
    label(ax, 10.8, 0.05, "time", ha="right", fontsize=9)
    return fig


def _batches(ax, x: float, y: float, count: int, rank: int) -> list[float]:
    """``count`` batches, each compute then its gradient all-reduce; the x of each all-reduce's middle."""
    middles = []
    for b in range(count):
        box(ax, x, y, BATCH, 0.6, f"batch {b + 1}", color=rank_color(rank), fontsize=9)
        box(ax, x + BATCH, y, REDUCE, 0.6, "AR", color=COLORS["comm"], fontsize=9)
        middles.append(x + BATCH + REDUCE / 2)
        x += BATCH + REDUCE
    return middles


def _pair(ax, xs: Sequence[float], ys: Sequence[float]) -> None:
    """A dashed line through the all-reduce every rank takes part in at once."""
    ax.plot([xs[0]] * 2, [min(ys) + 0.6, max(ys)], color=COLORS["comm"], ls="--", lw=1.2)


def uneven_join(batches: Sequence[int], shadows: Sequence[int]):
    """Ranks with ``batches[r]`` batches each: without Join one rank waits; with Join the others shadow it.

    ``shadows[r]`` is how many all-reduces of zeros rank r ran inside Join (the run counts them).
    """
    n = len(batches)
    if n < 2 or len(shadows) != n or min(batches) < 1:
        raise ValueError(f"batches {list(batches)} and shadows {list(shadows)}: one count each for 2 or more ranks, "
                         "at least one batch each")
    most = max(batches)
    if any(b + s != most for b, s in zip(batches, shadows)):
        raise ValueError(f"batches {list(batches)} + shadows {list(shadows)} must equal the most batches ({most}) "
                         "on every rank: Join pairs every extra all-reduce with one of zeros")
    width = 1.1 + most * (BATCH + REDUCE) + 4.2
    top = 2 * (n * LANE + 0.9)
    fig, ax = canvas(width, top + 0.5, "Ranks with different numbers of batches under DDP (this run's counts; "
                     "AR = the gradient all-reduce)")
    for panel, title in enumerate(("Without Join: the rank with more batches waits in an all-reduce nobody joins",
                                   "With Join([model]): a finished rank runs all-reduces of zeros, so none waits")):
        base = top - (panel + 1) * (n * LANE + 0.9) + 0.5
        label(ax, 0.2, base + n * LANE + 0.35, title, ha="left", weight="bold")
        middles = {}
        for r in range(n):
            y = base + (n - 1 - r) * LANE
            _lane(ax, y, r)
            middles[r] = _batches(ax, 1.1, y, batches[r], r)
            end = 1.1 + batches[r] * (BATCH + REDUCE)
            if panel == 0 and batches[r] < most:
                box(ax, end, y, 2.6, 0.6, "done: goes on", color=COLORS["idle"], fontsize=9)
            elif panel == 0:
                _wait(ax, end - REDUCE, y, REDUCE + 1.9, "AR waits: no partner")
                _error(ax, end + 1.9, y, "timeout")
            else:
                for s in range(shadows[r]):
                    x = end + s * (BATCH + REDUCE)
                    box(ax, x, y, BATCH, 0.6, "joined", color=COLORS["light"], fontsize=9)
                    _wait(ax, x + BATCH, y, REDUCE, "0")
                    middles[r].append(x + BATCH + REDUCE / 2)
                box(ax, 1.1 + most * (BATCH + REDUCE), y, 2.8, 0.6, "Join ends: same model", color=COLORS["gpu"],
                    fontsize=9)
        ys = [base + (n - 1 - r) * LANE for r in range(n)]
        for k in range(most if panel else min(batches)):
            _pair(ax, [middles[0][k]], ys)
    label(ax, width - 0.2, 0.1, "hatched \"0\": Join's shadow all-reduce of zeros", ha="right", fontsize=9)
    label(ax, 1.1, 0.1, "time runs to the right", ha="left", fontsize=9)
    return fig


STATIC = {"10-mismatch-timeout": mismatch_timeout}
