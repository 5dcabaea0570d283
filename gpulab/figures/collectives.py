"""Notebook 09: every rank's buffer before and after each collective, the ring all-reduce step by step.

Both pictures are drawn from a run's own numbers (``run_collectives(...).semantics``): each cell is
coloured by the rank its number came from, and a sum is striped with the colours of every rank in it.

    collective_buffers(four.semantics)      # broadcast, all-reduce, reduce-scatter, all-gather
    steps = ring_steps([s["all_reduce"]["before"] for s in four.semantics])
    ring_grid(steps); ring_widget(steps)    # every step at once; a slider through them
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from gpulab.figures import COLORS, arrow, box, canvas, label, rank_color

COLLECTIVES = ("broadcast", "all_reduce", "reduce_scatter", "all_gather")
WHAT = {"broadcast": "rank 0's numbers reach every rank", "all_reduce": "every rank gets the sum",
        "reduce_scatter": "rank r gets piece r of the sum", "all_gather": "every rank gets every rank's piece"}
CELL, ROW = 0.62, 0.62  # one number's cell, one rank's row (figure units)


def origins(before: Sequence[Sequence[float]], value: float) -> tuple[int, ...]:
    """The ranks ``value`` came from: the one rank that held it, every rank if it is a column's sum, else ()."""
    holders = tuple(r for r, row in enumerate(before) if value in row)
    if len(holders) == 1:
        return holders
    width = min(len(row) for row in before)
    if any(sum(row[i] for row in before) == value for i in range(width)):
        return tuple(range(len(before)))
    return ()


def cell(ax, x: float, y: float, value: float, ranks: Sequence[int], *, w: float = CELL, fontsize: float = 9,
         edge: str = COLORS["text"], lw: float = 1.0) -> None:
    """One number: filled with its rank's colour, striped with several ranks' colours when it is a sum."""
    from matplotlib.patches import Rectangle

    colors = [rank_color(r) for r in ranks] or [COLORS["idle"]]
    for i, color in enumerate(colors):
        ax.add_patch(Rectangle((x + i * w / len(colors), y), w / len(colors), w * 0.9, facecolor=color,
                               edgecolor="none"))
    ax.add_patch(Rectangle((x, y), w, w * 0.9, facecolor="none", edgecolor=edge, linewidth=lw))
    text = f"{value:g}" if ranks else f"{value:g}?"
    ax.text(x + w / 2, y + w * 0.45, text, ha="center", va="center", fontsize=fontsize, color=COLORS["text"],
            bbox={"boxstyle": "round,pad=0.12", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})


def _legend(ax, x: float, y: float, world: int, fontsize: float = 9) -> None:
    for r in range(world):
        box(ax, x + r * 1.25, y, 0.3, 0.3, color=rank_color(r), rounded=False)
        label(ax, x + r * 1.25 + 0.38, y + 0.15, f"rank {r}", ha="left", fontsize=fontsize)
    cell(ax, x + world * 1.25 + 0.1, y - 0.02, 0, range(world), w=0.36, fontsize=0.1)
    label(ax, x + world * 1.25 + 0.55, y + 0.15, "striped: a sum of these ranks' numbers", ha="left",
          fontsize=fontsize)


def collective_buffers(semantics: Sequence[dict], collectives: Sequence[str] = COLLECTIVES):
    """Every rank's tensor before and after each collective, one panel each, from the run's own numbers."""
    world = len(semantics)
    if world < 2:
        raise ValueError(f"semantics of {world} rank(s): a collective needs at least 2")
    unknown = [c for c in collectives if c not in semantics[0]]
    if unknown:
        raise ValueError(f"no run data for {unknown}: the run recorded {', '.join(semantics[0])}")
    length = max(len(s[c][k]) for s in semantics for c in collectives for k in ("before", "after"))
    pw, ph = 2 * length * CELL + 2.6, world * ROW + 1.1  # one panel
    cols = 2
    rows = -(-len(collectives) // cols)
    fig, ax = canvas(cols * pw + 0.2, rows * ph + 0.9, f"What each collective does on {world} ranks "
                     "(this run's numbers; colour = the rank a number came from)")
    for k, name in enumerate(collectives):
        px, py = (k % cols) * pw + 0.2, (rows - 1 - k // cols) * ph + 0.9
        before = [s[name]["before"] for s in semantics]
        label(ax, px + pw / 2 - 0.1, py + ph - 0.3, f"{name}: {WHAT.get(name, '')}".rstrip(": "), weight="bold",
              fontsize=11)
        label(ax, px + 0.9 + length * CELL / 2, py + ph - 0.75, "before", fontsize=9)
        label(ax, px + 1.9 + length * CELL * 1.5, py + ph - 0.75, "after", fontsize=9)
        for r, s in enumerate(semantics):
            y = py + (world - 1 - r) * ROW
            label(ax, px + 0.45, y + CELL * 0.45, f"rank {r}", fontsize=9, color=rank_color(r))
            for i, v in enumerate(s[name]["before"]):
                cell(ax, px + 0.9 + i * CELL, y, v, (r,))
            arrow(ax, (px + 1.0 + length * CELL, y + CELL * 0.45), (px + 1.8 + length * CELL, y + CELL * 0.45))
            for i, v in enumerate(s[name]["after"]):
                cell(ax, px + 1.9 + length * CELL + i * CELL, y, v, origins(before, v))
    _legend(ax, 0.4, 0.2, world)
    return fig


@dataclass(frozen=True)
class RingStep:
    """One moment of a ring all-reduce: every rank's numbers, the ranks in each, and what just moved."""

    phase: str  # "start", "reduce-scatter" or "all-gather"
    number: int  # 1.. within its phase (0 at the start)
    values: tuple[tuple[float, ...], ...]  # values[rank][chunk]
    sources: tuple[tuple[tuple[int, ...], ...], ...]  # the ranks summed into values[rank][chunk]
    sends: tuple[tuple[int, int, int, float], ...]  # (from rank, to rank, chunk, value sent) of this step

    @property
    def title(self) -> str:
        if self.phase == "start":
            return "start: every rank holds its own numbers"
        verb = "adds it to its own" if self.phase == "reduce-scatter" else "keeps it (a finished sum)"
        return f"{self.phase} step {self.number}: each rank sends one chunk to its neighbour, which {verb}"


def ring_steps(start: Sequence[Sequence[float]]) -> list[RingStep]:
    """The ring all-reduce of ``start`` (rank r's tensor, one number a chunk), state after state.

    n ranks make n - 1 reduce-scatter steps (rank r sends chunk r - s to rank r + 1, which adds it), after
    which rank r holds the whole sum of chunk r + 1; then n - 1 all-gather steps pass the sums on.
    """
    n = len(start)
    if n < 2 or any(len(row) != n for row in start):
        raise ValueError(f"start must hold n >= 2 ranks of n numbers each (one per chunk), got lengths "
                         f"{[len(row) for row in start]}")
    values = [list(row) for row in start]
    sources = [[(r,) for _ in range(n)] for r in range(n)]

    def state(phase: str, number: int, sends) -> RingStep:
        return RingStep(phase, number, tuple(map(tuple, values)), tuple(map(tuple, sources)), tuple(sends))

    steps = [state("start", 0, ())]
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(n - 1):
            shift = s if phase == "reduce-scatter" else s - 1
            sends = [(r, (r + 1) % n, (r - shift) % n) for r in range(n)]
            sent = [(values[r][c], sources[r][c]) for r, _, c in sends]  # every rank sends at once
            for (_, to, c), (v, src) in zip(sends, sent):
                if phase == "reduce-scatter":
                    values[to][c], sources[to][c] = values[to][c] + v, tuple(sorted(sources[to][c] + src))
                else:
                    values[to][c], sources[to][c] = v, src
            steps.append(state(phase, s + 1, [(r, to, c, v) for (r, to, c), (v, _) in zip(sends, sent)]))
    return steps


def _ring_positions(n: int, rx: float, ry: float) -> list[tuple[float, float]]:
    import math

    return [(rx * math.cos(math.pi / 2 - 2 * math.pi * r / n), ry * math.sin(math.pi / 2 - 2 * math.pi * r / n))
            for r in range(n)]


def draw_ring_step(ax, step: RingStep, *, x0: float = 0.0, y0: float = 0.0, fontsize: float = 8) -> None:
    """One ring state into ``ax`` around the centre ``(x0, y0)``: buffers on a ring, this step's sends as arrows."""
    n = len(step.values)
    w = len(step.values[0]) * CELL
    received = {(to, c) for _, to, c, _ in step.sends}
    centres = [(x0 + x, y0 + y) for x, y in _ring_positions(n, 1.6 + w / 2, 1.5)]
    for r, (cx, cy) in enumerate(centres):
        label(ax, cx - w / 2 - 0.1, cy, f"rank {r}", color=rank_color(r), fontsize=fontsize + 1, weight="bold",
              ha="right")
        for c, v in enumerate(step.values[r]):
            new = (r, c) in received
            cell(ax, cx - w / 2 + c * CELL, cy - CELL / 2, v, step.sources[r][c], fontsize=fontsize,
                 lw=2.6 if new else 0.8)
    for src, to, c, v in step.sends:
        (ax_, ay), (bx, by) = centres[src], centres[to]
        sx, sy = ax_ + (bx - ax_) * 0.3, ay + (by - ay) * 0.3
        ex, ey = ax_ + (bx - ax_) * 0.7, ay + (by - ay) * 0.7
        arrow(ax, (sx, sy), (ex, ey), color=rank_color(src))
        mx, my = (sx + ex) / 2, (sy + ey) / 2
        dx, dy = mx - x0, my - y0
        norm = max((dx * dx + dy * dy) ** 0.5, 1e-9)
        ax.text(mx + 0.6 * dx / norm, my + 0.3 * dy / norm, f"chunk {c}: {v:g}", fontsize=fontsize - 1,
                ha="center", va="center", color=COLORS["text"],
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": rank_color(src)})


def ring_figure(steps: Sequence[RingStep], index: int):
    """State ``index`` of a ring all-reduce, alone (the slider shows one at a time)."""
    if not 0 <= index < len(steps):
        raise ValueError(f"step {index} does not exist: use 0..{len(steps) - 1}")
    step = steps[index]
    fig, ax = canvas(9.5, 5.0, f"Ring all-reduce, {step.title}")
    ax.title.set_fontsize(10)
    draw_ring_step(ax, step, x0=4.75, y0=2.45, fontsize=9)
    label(ax, 4.75, 0.15, "thick border: just received    stripes: the ranks whose numbers were summed", fontsize=8)
    return fig


def ring_grid(steps: Sequence[RingStep], scale: float = 0.43):
    """Every state of a ring all-reduce: the start, then the reduce-scatter row, then the all-gather row."""
    n = len(steps[0].values)
    cols, pw, ph = max(n - 1, 2), 10.0, 4.9
    fig, ax = canvas(cols * pw, 3 * ph, f"Ring all-reduce on {n} ranks, step by step (this run's numbers)")
    fig.set_size_inches(cols * pw * scale, 3 * ph * scale)  # smaller drawing, same text: the grid stays readable
    for k, step in enumerate(steps):
        row, col = (0, 0) if step.phase == "start" else (1 if step.phase == "reduce-scatter" else 2, step.number - 1)
        cx, cy = col * pw + pw / 2, (2 - row) * ph + ph / 2 - 0.25
        head = f"{k}. start" if step.phase == "start" else f"{k}. {step.phase} step {step.number}"
        label(ax, cx, cy + 2.2, head, fontsize=9, weight="bold")
        draw_ring_step(ax, step, x0=cx, y0=cy, fontsize=7)
    notes = ["Each step, every rank sends one chunk (here one number) to the next rank on the ring.",
             f"Reduce-scatter ({n - 1} steps): the receiver adds the chunk to its own.",
             f"Then rank r holds the whole sum of chunk r + 1. All-gather ({n - 1} steps): the receiver",
             "keeps the finished sum. Thick border: just received. Stripes: the ranks summed in it."]
    for i, text in enumerate(notes):
        label(ax, pw + 0.3, 2 * ph + ph - 1.3 - i * 0.75, text, ha="left", fontsize=8)
    return fig


def ring_widget(steps: Sequence[RingStep]):
    """A slider through the states of a ring all-reduce (ipywidgets); each position draws ``ring_figure``."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    slider = widgets.IntSlider(value=0, min=0, max=len(steps) - 1, description="step",
                               continuous_update=False)

    def show(step: int) -> None:
        ring_figure(steps, step)
        plt.show()
    return widgets.VBox([slider, widgets.interactive_output(show, {"step": slider})])


STATIC: dict = {}
