"""Notebook 05: one process per rank and torchrun's rendezvous, the gradient all-reduce, a global batch sharded
over ranks, and checkpoint and resume on a timeline.

The first two are schematics (``STATIC``). The other two are drawn from what the notebook ran:

    batch_shards(shares, detail=3)       # shares[world][step] = rows of each rank, from gpulab.train.shard_batches
    crash_timeline(60, killed_after=10, resumed_from=10, kept=["epoch0058.pt", "epoch0059.pt"])
"""

from __future__ import annotations

from typing import Mapping, Sequence

from gpulab.figures import COLORS, FONT, arrow, box, canvas, label, rank_color

RANKS = 3  # the schematics draw three ranks, like the notebook's 43/43/42 example


def torchrun_rendezvous():
    """torchrun starts one process per rank, each with its numbers in its environment; they meet at one store."""
    fig, ax = canvas(11, 6.2, "torchrun starts one process per rank; the ranks meet at one address and port")
    box(ax, 3.2, 5.0, 4.6, 0.8, "torchrun --standalone --nproc-per-node 3 train.py\n(the launcher: one process)",
        color=COLORS["light"], fontsize=FONT)
    label(ax, 8.0, 5.4, "Before it starts them, torchrun\nagrees on the ranks (its own\nrendezvous, on a free port).",
          ha="left", fontsize=FONT - 1)
    label(ax, 0.2, 5.4, "1. it starts one process\nper rank and sets each one's\nenvironment variables", ha="left",
          fontsize=FONT - 1)
    xs = [0.5 + k * 3.6 for k in range(RANKS)]
    for k, x in enumerate(xs):
        arrow(ax, (3.5 + 2.0 * k, 5.0), (x + 1.5, 4.15))
        box(ax, x, 2.45, 3.0, 1.7, "", color="white", edge=rank_color(k))
        label(ax, x + 1.5, 3.85, f"process: rank {k}", weight="bold", color=rank_color(k))
        label(ax, x + 1.5, 3.15, f"RANK={k}   LOCAL_RANK={k}\nWORLD_SIZE={RANKS}\nMASTER_ADDR, MASTER_PORT",
              fontsize=FONT - 1)
        label(ax, x + 1.5, 2.65, "runs train.py from the top", fontsize=FONT - 2)
        arrow(ax, (x + 1.5, 2.45), (5.5, 1.35), color=COLORS["comm"])
    for a, b in ((0, 1), (1, 2)):
        arrow(ax, (xs[a] + 3.0, 3.3), (xs[b], 3.3), both=True, color=COLORS["grad"])
    ax.annotate("", xy=(xs[2] + 0.3, 4.15), xytext=(xs[0] + 2.7, 4.15),
                arrowprops={"arrowstyle": "<|-|>", "color": COLORS["grad"], "lw": 1.4,
                            "connectionstyle": "arc3,rad=-0.12", "mutation_scale": 12})
    label(ax, 0.2, 0.95, "2. init_process_group():\nevery rank connects to\nMASTER_ADDR:MASTER_PORT", ha="left",
          fontsize=FONT - 1, color=COLORS["comm"])
    box(ax, 3.0, 0.55, 5.0, 0.8, "TCPStore at MASTER_ADDR:MASTER_PORT\na small key-value server (torchrun or rank 0 "
        "hosts it)", color=COLORS["comm"], fontsize=FONT - 1)
    label(ax, 8.2, 0.95, "each rank writes how to reach it\nand reads how to reach the others", ha="left",
          fontsize=FONT - 1)
    label(ax, 5.5, 0.2, "3. then the backend (gloo or nccl) moves tensors directly between the ranks (red arrows)",
          fontsize=FONT - 1, color=COLORS["grad"])
    return fig


def _bars(ax, x: float, y: float, values: Sequence[float], color: str, scale: float = 0.5) -> None:
    """A tiny bar chart of a gradient: one bar a number, drawn up (positive) or down (negative) from ``y``."""
    from matplotlib.patches import Rectangle

    ax.plot([x - 0.05, x + 0.3 * len(values) + 0.05], [y, y], color=COLORS["text"], lw=0.8)
    for i, v in enumerate(values):
        ax.add_patch(Rectangle((x + 0.3 * i + 0.04, min(y, y + v * scale)), 0.22, abs(v) * scale, facecolor=color,
                               edgecolor=COLORS["text"], linewidth=0.6))


#: made-up gradients of four weights on three ranks (a drawing: each rank's rows give a different gradient)
_GRADS = ((0.9, -0.4, 0.5, 0.2), (0.3, -0.8, 0.7, -0.3), (0.6, -0.3, -0.3, 0.4))


def gradient_allreduce():
    """Each rank's own gradient goes into the all-reduce; every rank gets the average back and takes the same step."""
    fig, ax = canvas(11, 6.4, "DDP's all-reduce: every rank's gradient in, the average out on every rank")
    mean = [sum(g[i] for g in _GRADS) / len(_GRADS) for i in range(len(_GRADS[0]))]
    xs = [0.6 + k * 3.6 for k in range(RANKS)]
    box(ax, 0.4, 2.55, 10.4, 0.75, "all-reduce (average): every rank sends its gradient and receives "
        "(g0 + g1 + g2) / 3", color=COLORS["comm"], fontsize=FONT)
    for k, x in enumerate(xs):
        c = rank_color(k)
        label(ax, x + 1.3, 6.05, f"rank {k}: the same weights", weight="bold", color=c)
        box(ax, x, 4.95, 2.6, 0.65, "forward + backward\non its own rows", color="white", edge=c, fontsize=FONT - 1)
        _bars(ax, x + 0.7, 4.05, _GRADS[k], c)
        label(ax, x + 0.15, 4.05, f"g{k}", color=c, weight="bold", ha="left")
        arrow(ax, (x + 1.3, 3.6), (x + 1.3, 3.3))
        arrow(ax, (x + 1.3, 2.55), (x + 1.3, 2.2))
        _bars(ax, x + 0.7, 1.75, mean, COLORS["idle"])
        label(ax, x + 0.15, 1.75, "avg", weight="bold", ha="left")
        arrow(ax, (x + 1.3, 1.42), (x + 1.3, 1.05))
        box(ax, x, 0.45, 2.6, 0.6, "optimizer.step()", color="white", edge=c, fontsize=FONT - 1)
    label(ax, 5.6, 4.65, "each rank's gradient differs: its rows differ", fontsize=FONT - 1, ha="center")
    label(ax, 5.6, 0.2, "The same average and the same weights on every rank, so every rank takes the same step.\n"
          "DDP starts sending groups of gradients while backward() is still running (not drawn).",
          fontsize=FONT - 1, va="top")
    ax.set_ylim(-0.45, 6.4)
    return fig


def batch_shards(shares: Mapping[int, Sequence[Sequence[int]]], detail: int | None = None):
    """How each global batch is cut over the ranks, from ``shares[world][step] = [rows of rank 0, rank 1, ...]``.

    Left: the first global batch for every world size. Right: every step of one epoch for ``detail`` ranks
    (default: the largest world size with unequal slices, else the largest).
    """
    import matplotlib.pyplot as plt

    if not shares:
        raise ValueError("shares is empty: pass {world_size: [[rows of each rank] for each step]}")
    for world, steps in shares.items():
        if not steps or any(len(step) != world for step in steps):
            raise ValueError(f"shares[{world}] must list, for each step, {world} row counts (one per rank)")
    uneven = [w for w in shares if len(set(shares[w][0])) > 1]
    detail = detail if detail is not None else max(uneven or shares)
    if detail not in shares:
        raise ValueError(f"detail={detail!r}: no shares for it; use one of {sorted(shares)}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8), width_ratios=(1, 1.05))
    first = sum(next(iter(shares.values()))[0])
    fig.suptitle(f"Global batches of {first} rows cut over the ranks (this run's sizes, from shard_batches)",
                 fontsize=FONT + 2)
    rows = [(f"{w} rank{'s' if w > 1 else ''}", shares[w][0]) for w in sorted(shares)]
    _stacked(left, rows, f"the first step, for {', '.join(str(w) for w in sorted(shares))} ranks")
    steps = [(f"step {s + 1}", sizes) for s, sizes in enumerate(shares[detail])]
    _stacked(right, steps, f"every step of one epoch with {detail} ranks")
    last = shares[detail][-1]
    if sum(last) < first:
        right.text(sum(last) + 3, len(steps) - 1, f"the last step takes the {sum(last)} rows left over",
                   va="center", fontsize=FONT - 1)
    fig.tight_layout()
    return fig


def _stacked(ax, rows: Sequence[tuple[str, Sequence[int]]], title: str) -> None:
    """One horizontal bar per row, cut into its ranks' slices, each labelled with its number of rows."""
    from matplotlib.patches import Patch

    for y, (_, sizes) in enumerate(rows):
        start = 0
        for r, n in enumerate(sizes):
            ax.barh(y, n, left=start, color=rank_color(r), edgecolor="white", linewidth=1.5)
            if n:
                ax.text(start + n / 2, y, str(n), ha="center", va="center", fontsize=FONT - 1, color="white",
                        weight="bold")
            start += n
    ax.set_yticks(range(len(rows)), [name for name, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("rows of the global batch (colour: the rank that takes them)")
    ax.set_title(title, fontsize=FONT + 1)
    world = max(len(sizes) for _, sizes in rows)
    handles = [Patch(color=rank_color(r), label=f"rank {r}") for r in range(world)]
    ax.legend(handles=handles, loc="lower right", fontsize=FONT - 2, ncols=world, frameon=False,
              bbox_to_anchor=(1.0, -0.42))


def crash_timeline(epochs: int, killed_after: int, resumed_from: int, kept: Sequence[str] = (),
                   history: Sequence[int] | None = None, killed_rank: int = 1):
    """A crash and a resume on an epoch axis, from the run: the kill, the checkpoint loaded, the resumed epochs.

    ``killed_after``: the last epoch rank 0 had logged when rank 1 was killed (counted from 1);
    ``resumed_from``: the epochs the loaded checkpoint holds (the worker's ``resumed_from_epoch``);
    ``kept``: the checkpoint files left at the end (``epoch0058.pt``: after epoch 59, counted from 1);
    ``history``: the finished run's epochs as its history lists them (counted from 0).
    """
    from gpulab.distributed.ddp.checkpoint import PATTERN

    if not 0 < resumed_from < epochs or not 0 < killed_after <= epochs:
        raise ValueError(f"resumed_from={resumed_from!r} must be in 1..{epochs - 1} and killed_after="
                         f"{killed_after!r} in 1..{epochs}")
    kept_epochs = []
    for name in kept:
        match = PATTERN.match(name)
        if not match:
            raise ValueError(f"kept={name!r} is not a checkpoint name like epoch0009.pt")
        kept_epochs.append(int(match.group(1)) + 1)
    fig, ax = canvas(11, 3.9, f"This run: rank {killed_rank} killed, the group restarted from the checkpoint after epoch "
                     f"{resumed_from}", axis=True)
    lanes = {"attempt 1": 2.0, "attempt 2 (restart)": 1.0, "the history": 0.0}
    if history is None:
        del lanes["the history"]
    ax.barh(lanes["attempt 1"], resumed_from, left=0, height=0.42, color=rank_color(0), label="epochs trained")
    ax.barh(lanes["attempt 1"], 1, left=resumed_from, height=0.42, color="white", edgecolor=COLORS["grad"],
            hatch="///", label="epoch in progress: lost, done again")
    ax.barh(lanes["attempt 2 (restart)"], epochs - resumed_from, left=resumed_from, height=0.42,
            color=rank_color(0))
    if history is not None:
        ax.barh(lanes["the history"], epochs, left=0, height=0.42, color=COLORS["idle"])
        once = list(history) == list(range(epochs))
        said = f"epochs 1-{epochs}, each once" if once else f"{len(history)} entries, {len(set(history))} epochs"
        ax.text(epochs / 2, lanes["the history"], f"the finished run's history: {said}", ha="center", va="center",
                fontsize=FONT - 1)
    ax.plot(range(1, resumed_from + 1), [lanes["attempt 1"] + 0.3] * resumed_from, "v", ms=4,
            color=COLORS["memory"], label="checkpoint saved by rank 0")
    ax.plot(range(resumed_from + 1, epochs + 1), [lanes["attempt 2 (restart)"] + 0.3] * (epochs - resumed_from),
            "v", ms=4, color=COLORS["memory"])
    ax.plot([killed_after + 0.5], [lanes["attempt 1"] + 0.32], "X", ms=11, color=COLORS["grad"], label=f"rank {killed_rank} killed")
    ax.text(killed_after + 1.6, lanes["attempt 1"] + 0.32, f"killed once rank 0 logged epoch {killed_after}",
            va="center", fontsize=FONT - 1, color=COLORS["grad"])
    arrow(ax, (resumed_from, lanes["attempt 1"] - 0.22), (resumed_from, lanes["attempt 2 (restart)"] + 0.22))
    ax.text(resumed_from + 0.6, 1.5, f"torchrun restarts every rank; each loads the checkpoint after epoch "
            f"{resumed_from}\nand goes on with epoch {resumed_from + 1}", va="center", fontsize=FONT - 1)
    for e in kept_epochs:
        ax.plot([e], [lanes["attempt 2 (restart)"] + 0.3], "v", ms=9, color=COLORS["grad"])
    if kept_epochs:
        ax.text(max(kept_epochs), lanes["attempt 2 (restart)"] - 0.38, f"files kept at the end: {', '.join(kept)}",
                ha="right", va="center", fontsize=FONT - 2)
    ax.set_yticks(list(lanes.values()), list(lanes))
    ax.set_xlim(0, epochs + 0.5)
    ax.set_ylim(min(lanes.values()) - 0.5, 2.75)
    ax.set_xlabel("epochs finished")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=FONT - 2, frameon=False)
    return fig


#: Schematics of this topic: name -> function returning a matplotlib figure (see gpulab.figures.catalog).
STATIC = {"05-torchrun-rendezvous": torchrun_rendezvous, "05-gradient-all-reduce": gradient_allreduce}
