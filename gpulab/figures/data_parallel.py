"""Notebook 04: DataParallel's scatter, replicate, gather and gradient sum, drawn from one step the notebook ran."""

from __future__ import annotations

from gpulab.figures import COLORS, FONT, arrow, box, canvas, label, rank_color


def _first_value(tensor) -> float:
    """The first number of a gradient tensor (a bias of one output has only one)."""
    return float(tensor.detach().reshape(-1)[0].cpu())


def dataparallel_step(step, full_grads: dict | None = None, param: str = "layer3.0.bias", columns: int = 13):
    """One ``gpulab.data_parallel.DataParallelStep`` as a picture: the real chunk sizes, replicas, output and gradients.

    Left, the forward pass: the batch cut into ``step.batch_sizes`` rows (scatter), one copy of the model
    per chunk (replicate), each copy's output (parallel apply), the outputs joined on the first GPU (gather).
    Right, the backward pass: the first number of ``param``'s gradient in each replica, their sum, and
    (with ``full_grads``, one model on the whole batch) the same number computed without splitting.
    ``columns`` is the batch's number of features, for the labels.
    """
    sizes = list(step.batch_sizes)
    if not step.replica_grads or len(step.replica_grads) != len(sizes):
        raise ValueError(f"the step holds {len(step.replica_grads)} replica gradients for {len(sizes)} chunks: "
                         "pass a step from gpulab.data_parallel.data_parallel_step")
    if param not in step.grads:
        raise ValueError(f"unknown parameter {param!r}: use one of {', '.join(step.grads)}")
    rows, n = sum(sizes), len(sizes)
    title = f"DataParallel's steps, done by gpulab.data_parallel in this run: {rows} rows over {n} replicas"
    fig, ax = canvas(9.6, 5.8, title)
    ax.set_title("")
    fig.suptitle(title, fontsize=FONT + 2)
    fig.set_size_inches(14, 5.8)
    ax.set_position([0.0, 0.0, 0.66, 0.9])
    top, height = 4.75, 4.25
    tops, y = [], top
    for s in sizes:  # each chunk's height is proportional to its rows
        tops.append(y)
        y -= height * s / rows
    steps = [(0.85, "1. scatter\n(torch.chunk)"), (3.3, "2. replicate\n(in every forward)"),
             (5.85, "3. parallel apply\n(one thread per GPU)"), (8.35, "4. gather\n(torch.cat on GPU 0)")]
    for x, text in steps:
        label(ax, x, 5.35, text, fontsize=FONT, weight="bold")
    label(ax, 0.85, top + 0.12, f"batch ({rows}, {columns})", fontsize=FONT - 1, va="bottom")
    label(ax, 8.35, top + 0.12, f"output {tuple(step.output.shape)}", fontsize=FONT - 1, va="bottom")
    gathered = box(ax, 7.9, top - height, 0.9, height, color="none", rounded=False)
    gathered.set_linewidth(2.5)  # one tensor: the chunks joined
    start = 0
    for k, (s, t) in enumerate(zip(sizes, tops)):
        h, mid, color = height * s / rows, t - height * s / rows / 2, rank_color(k)
        small = FONT - 1 if h > 0.7 else FONT - 3
        span = f"rows {start}-{start + s - 1}" if s > 1 else f"row {start}"
        box(ax, 0.3, t - h, 1.1, h, f"{span}\n({s} rows)" if s > 1 else f"{span}\n(1 row)", color=color, rounded=False,
            fontsize=small)
        rh = min(0.8, 0.9 * h)
        box(ax, 2.5, mid - rh / 2, 1.6, rh, f"replica {k}\n(GPU {k})", color=color, fontsize=small)
        box(ax, 5.45, t - h, 0.8, h, f"output\n({s}, 1)" if h > 0.5 else f"({s}, 1)", color=color,
            rounded=False, fontsize=small)
        tall = (f"rows\n{start}-{start + s - 1}" if s > 1 else f"row\n{start}") if h > 0.5 else span
        box(ax, 7.9, t - h, 0.9, h, tall, color=color, rounded=False,
            fontsize=small)
        arrow(ax, (1.4, mid), (2.5, mid))
        arrow(ax, (4.1, mid), (5.45, mid))
        arrow(ax, (6.25, mid), (7.9, mid))
        start += s
    label(ax, 4.8, 0.12, f"The loss is the mean over all {rows} gathered rows, as with one model.\n"
          "Here every replica runs on this machine's one device; nn.DataParallel puts replica k on GPU k.",
          fontsize=FONT - 1)
    # backward: each replica's gradient of one number, and their sum
    bars = fig.add_axes([0.71, 0.17, 0.27, 0.6])
    values = [_first_value(g[param]) for g in step.replica_grads]
    names = [f"replica {k}" for k in range(n)] + ["sum"]
    heights = values + [_first_value(step.grads[param])]
    colors = [rank_color(k) for k in range(n)] + [COLORS["text"]]
    if full_grads is not None:
        names.append("one model,\nfull batch")
        heights.append(_first_value(full_grads[param]))
        colors.append(COLORS["idle"])
    bars.bar(range(len(heights)), heights, color=colors, edgecolor=COLORS["text"])
    bars.axhline(0, color=COLORS["text"], lw=0.8)
    for i, v in enumerate(heights):  # each bar's value, so a small sum is still readable
        bars.text(i, v, f"{v:+.4f}", ha="center", va="bottom" if v >= 0 else "top", fontsize=FONT - 2)
    low, high = min(heights + [0.0]), max(heights + [0.0])
    bars.set_ylim(low - 0.12 * (high - low), high + 0.12 * (high - low))
    bars.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=FONT - 1)
    bars.set_ylabel(f"gradient of {param}" + ("" if step.grads[param].numel() == 1 else " [0]"))
    bars.set_title("5. backward: the replicas' gradients\nare summed into the model", fontsize=FONT + 1,
                   weight="bold")
    return fig


#: Schematics of this topic: name -> function returning a matplotlib figure (see gpulab.figures.catalog).
STATIC: dict = {}
