"""Notebook 12: Megatron's column and row splits, what each rank holds, the all-reduces, sequence parallelism.

Schematics (``STATIC``): ``12-megatron-mlp`` (the split of an MLP over 2 ranks and its one all-reduce) and
``12-sequence-parallel`` (where tensor parallelism all-reduces, and where sequence parallelism gathers and
scatters instead). From a run's own numbers::

    megatron_shards(result.megatron)     # every rank's shards, hidden units and partial outputs, then the sum
    loss_curves({"vocabulary 11": [...], "padded to 12": [...]})
"""

from __future__ import annotations

from typing import Sequence

from gpulab.figures import COLORS, arrow, box, canvas, label, rank_color


def megatron_mlp():
    """An MLP split over 2 ranks: rows of the first layer, columns of the second, one all-reduce at the end."""
    fig, ax = canvas(11.6, 5.6, "Megatron's split of an MLP over 2 ranks: one all-reduce in the forward pass")
    box(ax, 0.2, 2.2, 1.3, 1.0, "x\n(every rank\nhas all of it)", fontsize=9)
    label(ax, 3.15, 5.25, "column-parallel: up", weight="bold")
    label(ax, 5.55, 5.25, "GELU", weight="bold")
    label(ax, 7.85, 5.25, "row-parallel: down", weight="bold")
    for r, y in ((0, 3.3), (1, 0.5)):
        color = rank_color(r)
        label(ax, 1.95, y + 1.55, f"rank {r}", color=color, weight="bold", ha="left")
        half = "first" if r == 0 else "second"
        box(ax, 2.2, y, 1.9, 1.3, f"{half} half of\nup.weight's rows\n(its hidden units)", color=color, fontsize=8)
        box(ax, 4.7, y, 1.7, 1.3, "GELU on its own\nhidden units:\nno exchange", fontsize=8)
        box(ax, 7.0, y, 1.9, 1.3, f"{half} half of\ndown.weight's\ncolumns", color=color, fontsize=8)
        arrow(ax, (1.5, 2.7), (2.2, y + 0.65))
        arrow(ax, (4.1, y + 0.65), (4.7, y + 0.65))
        arrow(ax, (6.4, y + 0.65), (7.0, y + 0.65))
        arrow(ax, (8.9, y + 0.65), (9.6, 2.7))
        label(ax, 7.95, y + 1.5, f"its output: partial sum z{r}", fontsize=9)
    box(ax, 9.6, 2.0, 1.9, 1.4, "all-reduce:\ny = z0 + z1\n+ down.bias", color=COLORS["comm"], fontsize=9)
    label(ax, 5.8, 0.1, "down.bias is added once, after the sum; every rank ends with the whole y", fontsize=9)
    return fig


def sequence_parallel():
    """One sub-block under tensor parallelism (all-reduce) and under sequence parallelism (gather, scatter)."""
    fig, ax = canvas(11.6, 4.6, "Tensor parallelism vs sequence parallelism: where the exchanges happen")
    rows = (("tensor parallel", 2.6, "LayerNorm\non the whole\nsequence\n(every rank)", None, "all-reduce",
             "sum of the\npartial outputs:\nwhole sequence"),
            ("sequence parallel", 0.3, "LayerNorm on\nthis rank's part\nof the sequence", "all-gather",
             "reduce-scatter", "sum, each rank\nkeeps its part\nof the sequence"))
    for name, y, norm, before, after, result in rows:
        label(ax, 0.1, y + 1.75, name, weight="bold", ha="left")
        box(ax, 0.1, y, 2.1, 1.4, norm, fontsize=8)
        if before:
            box(ax, 2.6, y + 0.25, 1.5, 0.9, before, color=COLORS["comm"], fontsize=9)
            arrow(ax, (2.2, y + 0.7), (2.6, y + 0.7))
            arrow(ax, (4.1, y + 0.7), (4.6, y + 0.7))
        else:
            arrow(ax, (2.2, y + 0.7), (4.6, y + 0.7), "nothing to send", offset=(0, 0.08))
        box(ax, 4.6, y, 2.5, 1.4, "attention or MLP\nsplit over the ranks\n(heads, hidden units)", fontsize=8,
            color=COLORS["light"])
        box(ax, 7.5, y + 0.25, 1.6, 0.9, after, color=COLORS["comm"], fontsize=9)
        arrow(ax, (7.1, y + 0.7), (7.5, y + 0.7))
        arrow(ax, (9.1, y + 0.7), (9.5, y + 0.7))
        box(ax, 9.5, y, 2.0, 1.4, result, fontsize=8)
    label(ax, 5.8, 0.05, "all-reduce = reduce-scatter + all-gather: the same bytes, split in two", fontsize=9)
    return fig


STATIC: dict = {"12-megatron-mlp": megatron_mlp, "12-sequence-parallel": sequence_parallel}


def _matrix(ax, values: Sequence[Sequence[float]], title: str, edge: str, vmax: float) -> None:
    """One matrix as coloured cells with its numbers, framed in ``edge``."""
    import numpy as np

    data = np.array(values, dtype=float).reshape(len(values), -1)
    ax.imshow(data, cmap="coolwarm", vmin=-vmax, vmax=vmax, aspect="equal")
    for (i, j), v in np.ndenumerate(data):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)
    for spine in ax.spines.values():
        spine.set_edgecolor(edge)
        spine.set_linewidth(2.5)


def megatron_shards(per_rank: Sequence[dict]):
    """Every rank's numbers from the hand-split MLP: its rows of up.weight, its hidden units, its columns of
    down.weight and its partial output; then the all-reduced output next to one process's."""
    import matplotlib.pyplot as plt

    world = len(per_rank)
    if world < 2:
        raise ValueError(f"{world} rank(s): a split needs at least 2")
    keys = ("up_weight", "hidden", "down_weight", "partial")
    vmax = max(abs(v) for r in per_rank for k in keys + ("output",) for row in r[k] for v in row) or 1.0
    fig, axes = plt.subplots(world + 1, 4, figsize=(11, 2.7 * (world + 1)))
    (n_up, h), (n_down, _) = per_rank[0]["full_up_shape"], per_rank[0]["full_down_shape"]
    start = 0
    for r, piece in enumerate(per_rank):
        rows = len(piece["up_weight"])
        span = f"{start}-{start + rows - 1}" if rows else "none"
        titles = (f"rank {r}: up.weight rows {span}\n(of {n_up} x {h})",
                  f"rank {r}: its hidden units\nGELU(x W_up^T + b_up)",
                  f"rank {r}: down.weight columns {span}\n(of {n_down} x {n_up})",
                  f"rank {r}: partial output z{r}\n(3 tokens)")
        for c, key in enumerate(keys):
            _matrix(axes[r, c], piece[key], titles[c], rank_color(r), vmax)
        start += rows
    last = axes[world]
    _matrix(last[0], per_rank[0]["x"], "x: the input, 3 tokens\n(every rank has it)", COLORS["text"], vmax)
    _matrix(last[1], per_rank[0]["output"], "after the all-reduce:\nsum of the z + down.bias", COLORS["comm"], vmax)
    _matrix(last[2], per_rank[0]["one_process"], "one process,\nno split", COLORS["text"], vmax)
    last[3].axis("off")
    last[3].text(0.0, 0.5, "Each rank's numbers, from this run.\nSame colour scale everywhere\n(blue < 0 < red).",
                 fontsize=9, va="center")
    fig.suptitle(f"Megatron's MLP split by hand on {world} ranks: what each rank holds and computes", fontsize=12)
    fig.tight_layout()
    return fig


def loss_curves(curves: dict[str, Sequence[float]], title: str = "Loss per step"):
    """One line per labelled run: loss against the step."""
    if not curves:
        raise ValueError("curves is empty: give at least one labelled run")
    fig, ax = canvas(7, 3.6, title, axis=True)
    styles = ("-", "--", ":", "-.")  # runs that match stay visible on top of each other
    for i, (name, losses) in enumerate(curves.items()):
        ax.plot(range(1, len(losses) + 1), losses, linestyle=styles[i % len(styles)], marker="os^v"[i % 4],
                markersize=3, linewidth=2.2 - 0.4 * (i % 3), label=name)
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig
