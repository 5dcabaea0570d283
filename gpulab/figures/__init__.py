"""THE pictures of the course: every mechanism a learner must imagine, drawn by code with matplotlib.

Two kinds, one style:

- **schematics** (no data from the run): functions listed in :data:`gpulab.figures.catalog.STATIC`;
  ``python scripts/make_figures.py`` saves each as ``notebooks/figures/NAME.svg``, which the markdown
  embeds with alt text. ``tests/test_figures.py`` fails when a saved file is not what the code draws.
- **figures from a run's data** (the real split sizes, every rank's tensors, a trace): functions the
  notebooks call with what they measured, so the picture cannot disagree with the text.

Each topic module (``hardware``, ``transfers``, ``data_parallel``, ``ddp``, ``boston``, ``memory``, ``sharding``,
``collectives``, ``failures``, ``profiling``, ``tensor_parallel``, ``pipelines``) draws with the helpers below: :func:`canvas`, :func:`box`, :func:`arrow`,
:func:`label`. Every figure has a title, and labelled axes or labelled parts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.rcParams["svg.hashsalt"] = "gpulab"  # the same drawing gives the same SVG bytes, run after run
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small files, readable in any viewer

#: One palette for every figure (colour-blind-safe tab10 hues), by role.
COLORS = {
    "cpu": "#1f77b4", "gpu": "#2ca02c", "memory": "#ff7f0e", "data": "#9467bd", "grad": "#d62728",
    "comm": "#8c564b", "rank": ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                                "#7f7f7f"],
    "idle": "#c7c7c7", "text": "#222222", "light": "#f2f2f2",
}
FONT = 10


def rank_color(rank: int) -> str:
    """The colour of rank ``rank`` (the same rank has the same colour in every figure)."""
    return COLORS["rank"][rank % len(COLORS["rank"])]


def canvas(width: float, height: float, title: str, *, axis: bool = False):
    """A new figure of ``width`` x ``height`` inches with one axes in data units 0..width, 0..height.

    ``axis=False`` (a schematic) hides the axes frame; the title is always set.
    """
    import matplotlib.pyplot as plt

    if not title:
        raise ValueError("every figure needs a title")
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_title(title, fontsize=FONT + 2)
    if not axis:
        ax.set_xlim(0, width)
        ax.set_ylim(0, height)
        ax.set_aspect("equal")
        ax.axis("off")
    return fig, ax


def box(ax, x: float, y: float, w: float, h: float, text: str = "", *, color: str = COLORS["light"],
        edge: str = COLORS["text"], fontsize: float = FONT, text_color: str | None = None, rounded: bool = True,
        alpha: float = 1.0):
    """A labelled rectangle with its lower-left corner at ``(x, y)``; returns the patch."""
    from matplotlib.patches import FancyBboxPatch, Rectangle

    if rounded:
        patch = FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=0.08", facecolor=color,
                               edgecolor=edge, linewidth=1.0, alpha=alpha)
    else:
        patch = Rectangle((x, y), w, h, facecolor=color, edgecolor=edge, linewidth=1.0, alpha=alpha)
    ax.add_patch(patch)
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize,
                color=text_color or _readable_on(color), wrap=True)
    return patch


def arrow(ax, start: Sequence[float], end: Sequence[float], text: str = "", *, color: str = COLORS["text"],
          both: bool = False, fontsize: float = FONT - 1, offset: Sequence[float] = (0.0, 0.12), style: str = "-|>"):
    """An arrow from ``start`` to ``end`` (``both``: a two-way arrow), with an optional label at its middle."""
    ax.annotate("", xy=end, xytext=start,
                arrowprops={"arrowstyle": "<|-|>" if both else style, "color": color, "lw": 1.4,
                            "shrinkA": 2, "shrinkB": 2, "mutation_scale": 12})
    if text:
        mx, my = (start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1]
        ax.text(mx, my, text, ha="center", va="bottom", fontsize=fontsize, color=color)


def label(ax, x: float, y: float, text: str, *, fontsize: float = FONT, color: str = COLORS["text"],
          ha: str = "center", va: str = "center", weight: str = "normal"):
    """Plain text at ``(x, y)``."""
    ax.text(x, y, text, ha=ha, va=va, fontsize=fontsize, color=color, weight=weight)


def _readable_on(color: str) -> str:
    """Black or white text, whichever reads better on ``color``."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else COLORS["text"]


def has_title(fig) -> bool:
    """True when the figure or one of its axes has a title (every course figure needs one)."""
    suptitle = getattr(fig, "_suptitle", None)
    return bool(suptitle and suptitle.get_text()) or any(ax.get_title() for ax in fig.axes)


def save_svg(fig, path: str | Path) -> Path:
    """Write ``fig`` as an SVG whose bytes depend only on the drawing (no date, fixed ids); closes it."""
    import matplotlib.pyplot as plt

    from gpulab.atomic import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="svg", metadata={"Date": None, "Creator": None},
                                              bbox_inches="tight"))
    path.chmod(0o644)
    plt.close(fig)
    return path
