"""Notebooks 07-08: what a 2-byte format can hold, a training step's memory over time, what ZeRO-1/2/3 shard.

FSDP2's gather and reduce-scatter, step by step, are in :mod:`gpulab.figures.sharding`.
"""

from __future__ import annotations

from typing import Sequence

from gpulab.figures import COLORS, FONT, box, canvas, label

#: One colour per kind of training memory, the same in every figure of notebooks 07 and 08.
KIND_COLORS = {"parameters": COLORS["cpu"], "gradients": COLORS["grad"], "optimizer state": COLORS["memory"],
               "saved activations": COLORS["data"], "the batch": COLORS["comm"], "temporaries": COLORS["idle"]}


def number_ranges(rows: Sequence, marks: Sequence[tuple[float, str]] = (),
                  scaled: tuple[float, float, float] | None = None, lo: float = 1e-10, hi: float = 1e6):
    """Each format's numbers on a log scale: what rounds to 0, the subnormals, the normal range, overflow.

    ``rows``: :func:`gpulab.precision.dtype_table` (``name``, ``max``, ``smallest_normal``,
    ``smallest_subnormal``). ``marks``: ``(value, text)`` drawn as vertical lines. ``scaled``: ``(gradient,
    scaled gradient, scale)``, drawn as the loss scaler's arrow. The axis shows ``lo`` to ``hi``; a range that goes on
    is labelled with its end.
    """
    if not rows or lo <= 0 or hi <= lo:
        raise ValueError(f"need rows and 0 < lo < hi, got {len(rows)} rows, lo={lo}, hi={hi}")
    fig, ax = canvas(9, 1.3 + 0.75 * len(rows), "What a format can hold: below its range a number becomes 0, "
                     "above it inf", axis=True)
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    for i, row in enumerate(rows):
        y = len(rows) - 1 - i
        zero_below, sub, normal, top = row.smallest_subnormal / 2, row.smallest_subnormal, row.smallest_normal, row.max
        spans = [(lo, zero_below, COLORS["idle"], "//", "rounds to 0"),
                 (zero_below, normal, "#a6d8a6", None, "subnormal (fewer digits)"),
                 (normal, top, COLORS["gpu"], None, "normal numbers"),
                 (top, hi, "#f4a3a3", "\\\\", "overflow: inf")]
        for start, end, color, hatch, what in spans:
            start, end = max(start, lo), min(end, hi)
            if end > start:
                ax.barh(y, end - start, left=start, height=0.55, color=color, hatch=hatch, edgecolor="white",
                        label=what if i == 0 or what not in ax.get_legend_handles_labels()[1] else None)
        if sub < lo:
            ax.text(lo * 1.3, y, f"< down to {sub:.2g}", va="center", fontsize=FONT - 2)
        if top > hi:
            ax.text(hi / 1.3, y, f"up to {top:.3g} >", va="center", ha="right", fontsize=FONT - 2)
    for k, (value, text) in enumerate(marks):
        ax.axvline(value, color=COLORS["text"], linestyle="--", linewidth=1)
        side = "left" if value < lo * 100 else "right" if value > hi / 100 else "center"
        ax.text(value, len(rows) - 0.4 + 0.35 * (k % 2), text, va="bottom", ha=side, fontsize=FONT - 2,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    if scaled is not None:
        gradient, after, scale = scaled
        ax.annotate("", xy=(after, -0.6), xytext=(gradient, -0.6),
                    arrowprops={"arrowstyle": "-|>", "color": COLORS["grad"], "lw": 1.6})
        ax.text((gradient * after) ** 0.5, -0.75, f"loss scaling: x {scale:g}", ha="center", va="top",
                fontsize=FONT - 1, color=COLORS["grad"])
    ax.set_ylim(-1.2, len(rows) + 0.4)
    ax.set_yticks(range(len(rows)), [row.name for row in reversed(rows)])
    ax.set_xlabel("size of a number (its absolute value, log scale)")
    handles, names = ax.get_legend_handles_labels()
    ax.legend(handles, names, fontsize=FONT - 2, loc="upper center", ncol=4, bbox_to_anchor=(0.5, -0.25))
    return fig


def step_moments(series: dict[str, Sequence[float]]) -> dict[str, int]:
    """Moments of one step's memory timeline, found in the data: label -> index of the memory event.

    ``series`` maps a kind to the bytes alive at each event; it needs ``"saved activations"`` and
    ``"gradients"``. The moments: the start, the most saved activations, the first moment every gradient
    exists, the peak of the whole step, the end; in time order.
    """
    for kind in ("saved activations", "gradients"):
        if kind not in series:
            raise ValueError(f"series needs {kind!r}; it has {', '.join(map(repr, series))}")
    n = len(series["gradients"])
    if n == 0 or any(len(v) != n for v in series.values()):
        raise ValueError("every kind needs one value per memory event, and at least one event")
    total = [sum(at) for at in zip(*series.values())]
    act, grad = series["saved activations"], series["gradients"]
    found = {"start": 0, "most activations saved": act.index(max(act)),
             "every gradient made": grad.index(max(grad)), "peak of the step": total.index(max(total)), "end": n - 1}
    return dict(sorted(found.items(), key=lambda item: item[1]))


def step_memory(series: dict[str, Sequence[float]], title: str, unit: str = "MiB"):
    """A step's memory over time (stacked areas) beside stacked bars of what is alive at its moments.

    ``series``: kind -> amount alive at each memory event, in ``unit`` (the kinds of :data:`KIND_COLORS`
    keep their colours). The moments are :func:`step_moments`; each is a dashed line on the left and a bar on
    the right.
    """
    import matplotlib.pyplot as plt

    moments = step_moments(series)
    colors = [KIND_COLORS.get(k, f"C{i}") for i, k in enumerate(series)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [1.6, 1]})
    fig.suptitle(title, fontsize=FONT + 2)
    left.stackplot(range(len(series["gradients"])), *series.values(), labels=list(series), colors=colors)
    left.set_ylim(0, left.get_ylim()[1] * 1.12)
    for k, (letter, (name, at)) in enumerate(zip("ABCDEFG", moments.items())):
        left.axvline(at, color=COLORS["text"], linestyle="--", linewidth=0.8)
        left.text(at, left.get_ylim()[1] * (0.98 - 0.09 * (k % 2)), letter, ha="center", va="top", fontsize=FONT,
                  bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    left.set_xlabel("memory events of one step, in order: forward, backward, Adam's step")
    left.set_ylabel(f"{unit} alive")
    left.set_title("over the whole step", fontsize=FONT)
    names = [f"{letter}: {name}" for letter, name in zip("ABCDEFG", moments)]
    bottom = [0.0] * len(moments)
    for (kind, values), color in zip(series.items(), colors):
        heights = [values[at] for at in moments.values()]
        right.bar(range(len(moments)), heights, bottom=bottom, color=color, label=kind)
        bottom = [b + h for b, h in zip(bottom, heights)]
    right.set_xticks(range(len(moments)), names, rotation=30, ha="right", fontsize=FONT - 1)
    right.set_ylabel(f"{unit} alive")
    right.set_title(f"at {len(moments)} moments (dashed lines on the left)", fontsize=FONT)
    right.legend(fontsize=FONT - 2, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def zero_stages(ranks: int = 4):
    """What each rank keeps under DDP, ZeRO-1, ZeRO-2 and ZeRO-3: each part whole, or only its 1/N slice."""
    if ranks < 2:
        raise ValueError(f"ranks={ranks}: sharding needs at least 2 ranks")
    widths = {"parameters": 0.55, "gradients": 0.55, "optimizer state": 1.1}  # float32 + Adam: 4, 4 and 8 bytes
    stages = [("DDP (none)", (), "4 + 4 + 8"), ("ZeRO-1", ("optimizer state",), "4 + 4 + 8/N"),
              ("ZeRO-2", ("optimizer state", "gradients"), "4 + (4 + 8)/N"),
              ("ZeRO-3 (FSDP)", ("optimizer state", "gradients", "parameters"), "(4 + 4 + 8)/N")]
    cell = sum(widths.values()) + 0.35
    width = 4.2 + ranks * cell
    fig, ax = canvas(width, 1.3 + 0.85 * len(stages), f"What each of {ranks} ranks keeps between steps: "
                     "a whole copy, or a 1/N slice")
    for r in range(ranks):
        label(ax, 2.2 + r * cell + cell / 2 - 0.15, 0.85 * len(stages) + 0.45, f"rank {r}", weight="bold")
    label(ax, width - 1.0, 0.85 * len(stages) + 0.45, "bytes a parameter", weight="bold")
    for row, (name, sharded, per_parameter) in enumerate(stages):
        y = 0.85 * (len(stages) - 1 - row) + 0.6
        label(ax, 0.1, y + 0.22, name, ha="left", weight="bold")
        label(ax, width - 1.0, y + 0.22, per_parameter)
        for r in range(ranks):
            x = 2.2 + r * cell
            for part, w in widths.items():
                color = KIND_COLORS[part]
                if part in sharded:  # the whole outline, only this rank's slice filled
                    box(ax, x, y, w, 0.45, color="white", edge=color, rounded=False)
                    box(ax, x + r * w / ranks, y, w / ranks, 0.45, color=color, edge=color, rounded=False)
                else:
                    box(ax, x, y, w, 0.45, color=color, edge=color, rounded=False)
                x += w
    x = 0.1
    for part, w in widths.items():
        box(ax, x, 0.05, 0.3, 0.25, color=KIND_COLORS[part], rounded=False)
        label(ax, x + 0.38, 0.17, part, ha="left", fontsize=FONT - 1)
        x += 0.6 + 0.09 * len(part)
    label(ax, width - 0.1, 0.17, "bar widths: float32 + Adam (4, 4, 8 bytes a parameter)", ha="right",
          fontsize=FONT - 1)
    return fig


STATIC = {"08-zero-stages": zero_stages}
