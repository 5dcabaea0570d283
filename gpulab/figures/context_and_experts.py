"""Notebook 15: ring attention, experts on ranks, and every parallelism of the course on one cluster.

Schematics (``STATIC``): ``15-ring-attention`` (queries stay, key/value blocks go round), ``15-expert-parallel``
(router, all-to-all to the experts' ranks, all-to-all back) and ``15-all-dimensions`` (each dimension: what it
splits, its collective, the link large runs give it). From a run's own numbers::

    ring_steps({"plain": work, "zigzag": work}, owners)   # each rank's work at each step of the ring
    routing(sent, per_expert, capacities)                  # pairs sent rank to rank; pairs per expert
    expert_load({"before": counts, "after": counts}, cap)  # pairs per expert, and the capacity line
"""

from __future__ import annotations

import math
from typing import Sequence

from gpulab.figures import COLORS, arrow, box, canvas, label, rank_color


def ring_attention():
    """Four ranks in a ring: each keeps its queries and hands its key/value block to the next rank each step."""
    fig, ax = canvas(11.0, 6.4, "Ring attention on 4 ranks: queries stay, key/value blocks go round")
    centre, wide, high = (5.5, 3.2), 3.4, 2.15
    places = [(centre[0] + wide * math.sin(a), centre[1] + high * math.cos(a))
              for a in (math.pi * 2 * r / 4 for r in range(4))]
    for r, (x, y) in enumerate(places):
        box(ax, x - 0.95, y - 0.55, 1.9, 1.1, f"rank {r}\nqueries Q{r} stay\nholds one K/V block",
            color=rank_color(r), fontsize=8)
    for r in range(4):
        (x0, y0), (x1, y1) = places[r], places[(r + 1) % 4]
        start = (x0 + (x1 - x0) * 0.33, y0 + (y1 - y0) * 0.33)
        end = (x0 + (x1 - x0) * 0.67, y0 + (y1 - y0) * 0.67)
        arrow(ax, start, end, "K/V block", color=COLORS["comm"], offset=(0.0, 0.05))
    label(ax, centre[0], centre[1] + 0.2, "each step: attend to the block held,", fontsize=9)
    label(ax, centre[0], centre[1] - 0.15, "merge with log-sum-exp,", fontsize=9)
    label(ax, centre[0], centre[1] - 0.5, "pass the block on", fontsize=9)
    label(ax, 5.5, 0.15, "at step s, rank r holds the block of rank r - s; after 4 steps each rank has seen "
          "every block", fontsize=9)
    return fig


def expert_parallel():
    """Tokens of two ranks: the router picks experts, one all-to-all sends them there, one brings the results back."""
    fig, ax = canvas(12.4, 5.2, "Expert parallelism on 2 ranks: all-to-all there, experts, all-to-all back")
    for r, y in ((0, 2.9), (1, 0.5)):
        color = rank_color(r)
        label(ax, 0.1, y + 1.75, f"rank {r}", color=color, weight="bold", ha="left")
        box(ax, 0.1, y, 1.6, 1.3, "its own\ntokens", color=color, fontsize=9)
        box(ax, 2.1, y, 1.7, 1.3, "router:\ntop-k experts\nfor each token", fontsize=8)
        box(ax, 6.1, y, 2.0, 1.3, f"experts {2 * r} and {2 * r + 1}\n(only here)", color=color, fontsize=9)
        box(ax, 10.4, y, 1.9, 1.3, "weighted sum\nof its tokens'\nexpert outputs", fontsize=8)
        arrow(ax, (1.7, y + 0.65), (2.1, y + 0.65))
    box(ax, 4.2, 1.2, 1.5, 2.8, "all-to-all:\neach token\nto the rank\nof its expert", color=COLORS["comm"], fontsize=8)
    box(ax, 8.5, 1.2, 1.5, 2.8, "all-to-all:\neach result\nback to its\ntoken's rank", color=COLORS["comm"], fontsize=8)
    for y in (2.9, 0.5):
        arrow(ax, (3.8, y + 0.65), (4.2, 2.6))
        arrow(ax, (5.7, 2.6), (6.1, y + 0.65))
        arrow(ax, (8.1, y + 0.65), (8.5, 2.6))
        arrow(ax, (10.0, 2.6), (10.4, y + 0.65))
    label(ax, 6.2, 0.05, "the split sizes differ rank by rank: as many tokens as the router sent to each expert",
          fontsize=9)
    return fig


#: (dimension, what it splits, its collectives, where large runs put it, the notebook that ran it)
DIMENSIONS = (
    ("DP (DDP)", "the batch", "all-reduce of gradients", "across nodes (outermost)", "05, 09"),
    ("FSDP / ZeRO", "the batch; weights,\ngradients, optimizer state", "all-gather of weights,\n"
     "reduce-scatter of gradients", "across nodes, or inside a node\n(HSDP: shard inside, copy across)", "08, 13"),
    ("TP / SP", "every layer's weights;\nSP: norms by tokens", "all-reduce of activations;\nSP: all-gather + "
     "reduce-scatter", "inside a node (NVLink)", "12"),
    ("PP", "the layers, by depth", "send / recv of activations\nand their gradients", "across nodes", "13"),
    ("CP", "the sequence", "send / recv of K/V blocks (ring),\nor all-gather of K and V", "next after TP: across "
     "nodes\nwhen TP fills one (Llama 3: CP 16)", "15"),
    ("EP", "the experts of each\nMoE layer", "all-to-all of tokens,\nthere and back",
     "across nodes, limited per token\n(DeepSeek-V3: 4 nodes)", "15"),
)


def all_dimensions():
    """Each way of splitting a training run: what it splits, the collective it needs, the link it is given."""
    fig, ax = canvas(13.4, 7.4, "Every parallelism of the course: what it splits, what it sends, where it runs")
    columns = (("dimension", 0.1, 1.7), ("what it splits", 1.9, 2.6), ("what it sends", 4.6, 3.6),
               ("where large runs put it", 8.3, 3.6), ("notebook", 12.0, 1.2))
    top = 6.5
    for name, x, w in columns:
        box(ax, x, top, w, 0.5, name, color=COLORS["text"], fontsize=9)
    for i, row in enumerate(DIMENSIONS):
        y = top - 0.95 * (i + 1)
        color = rank_color(i)
        for (name, x, w), text in zip(columns, row):
            box(ax, x, y, w, 0.85, text, color=color if name == "dimension" else COLORS["light"], fontsize=8)
    label(ax, 6.7, 0.2, "mesh order, innermost first, as Llama 3 ordered its groups: TP, CP, PP, DP", fontsize=9)
    return fig


STATIC: dict = {"15-ring-attention": ring_attention, "15-expert-parallel": expert_parallel,
                "15-all-dimensions": all_dimensions}


def ring_steps(work: dict[str, Sequence[Sequence[int]]], owners: Sequence[Sequence[int]]):
    """One panel per split: a cell per rank and step, shaded by the score entries the rank computed there,
    labelled with whose key/value block it held; the busiest rank of each step paces the step."""
    import matplotlib.pyplot as plt
    import numpy as np

    if not work:
        raise ValueError("work is empty: give {split: [per rank: [per step: score entries]]}")
    top = max(v for per_rank in work.values() for steps in per_rank for v in steps) or 1
    fig, axes = plt.subplots(1, len(work), figsize=(5.4 * len(work), 3.6), squeeze=False)
    for ax, (split, per_rank) in zip(axes[0], work.items()):
        data = np.array(per_rank, dtype=float)
        ax.imshow(data, cmap="Oranges", vmin=0, vmax=top, aspect="auto")
        for (r, s), v in np.ndenumerate(data):
            ax.text(s, r, f"K/V of {owners[r][s]}\n{int(v)}", ha="center", va="center", fontsize=8,
                    color="white" if v > 0.6 * top else COLORS["text"])
        ax.set_xticks(range(data.shape[1]), [f"step {s}" for s in range(data.shape[1])])
        ax.set_yticks(range(data.shape[0]), [f"rank {r}" for r in range(data.shape[0])])
        paced = int(data.max(axis=0).sum())
        ax.set_title(f"{split} split: busiest rank per step adds up to {paced}", fontsize=10)
    fig.suptitle("Score entries each rank computed at each step of the ring (from this run)", fontsize=12)
    fig.tight_layout()
    return fig


def routing(sent: Sequence[Sequence[int]], per_expert: Sequence[int], capacities: dict[str, int]):
    """Left: (token, expert) pairs each rank sent to each rank. Right: pairs per expert, with capacity lines."""
    import matplotlib.pyplot as plt
    import numpy as np

    data = np.array(sent, dtype=float)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.imshow(data, cmap="Blues", vmin=0)
    for (i, j), v in np.ndenumerate(data):
        left.text(j, i, f"{int(v)}", ha="center", va="center", fontsize=9,
                  color="white" if v > 0.6 * data.max() else COLORS["text"])
    left.set_xticks(range(data.shape[1]), [f"to {j}" for j in range(data.shape[1])])
    left.set_yticks(range(data.shape[0]), [f"from {i}" for i in range(data.shape[0])])
    left.set_title("pairs sent in the all-to-all (diagonal: kept)", fontsize=10)
    right.bar(range(len(per_expert)), per_expert, color=[rank_color(e // 2) for e in range(len(per_expert))])
    for (name, cap), style in zip(capacities.items(), ("--", ":", "-.")):
        right.axhline(cap, linestyle=style, color=COLORS["text"], label=f"capacity, factor {name}: {cap}")
    right.set_xlabel("expert (colour: the rank that holds it)")
    right.set_ylabel("(token, expert) pairs")
    right.set_title("pairs each expert received", fontsize=10)
    right.legend(fontsize="small")
    fig.suptitle("Where the router sent the tokens (from this run)", fontsize=12)
    fig.tight_layout()
    return fig


def expert_load(counts: dict[str, Sequence[int]], cap: int):
    """Pairs per expert for each labelled router, side by side, with one capacity line."""
    import numpy as np

    if not counts:
        raise ValueError("counts is empty: give {label: pairs per expert}")
    fig, ax = canvas(8, 3.8, "Pairs per expert before and after training on the load-balancing loss", axis=True)
    width = 0.8 / len(counts)
    for i, (name, values) in enumerate(counts.items()):
        ax.bar(np.arange(len(values)) + i * width, values, width, label=name)
    ax.axhline(cap, linestyle="--", color=COLORS["text"], label=f"capacity: {cap}")
    ax.set_xlabel("expert")
    ax.set_ylabel("(token, expert) pairs")
    ax.legend(fontsize="small")
    return fig
