"""Notebook 06: the article's label shapes broadcast into a square of comparisons, and a paired comparison
of two models on the same splits. Both are drawn from what the notebook computed:

    label_broadcasting(out, labels)          # out (n, 1), labels (n,): the top corner of the n x n comparison
    paired_splits(score_a, score_b, result)  # two gpulab.evaluation.Score, their gpulab.paired_comparison.Paired
"""

from __future__ import annotations

from typing import Protocol

from gpulab.figures import COLORS, FONT, box, canvas, label


def label_broadcasting(output, labels, shown: int = 5):
    """``(n, 1)`` outputs minus ``(n,)`` labels: every output meets every label; only the diagonal should count.

    Draws the first ``shown`` outputs (a column), the first ``shown`` labels (a row) and their squared
    differences, the top-left corner of the ``(n, n)`` square that ``nn.MSELoss`` averages.
    """
    import torch

    out, lab = torch.as_tensor(output).detach().cpu(), torch.as_tensor(labels).detach().cpu()
    if out.dim() != 2 or out.shape[1] != 1 or lab.dim() != 1 or len(lab) != len(out):
        raise ValueError(f"output {tuple(out.shape)} and labels {tuple(lab.shape)}: pass outputs shaped (n, 1) "
                         "and labels shaped (n,), as the article has them")
    n = len(out)
    k = max(1, min(shown, n))
    squares = (out[:k] - lab[:k]) ** 2  # (k, 1) - (k,) broadcasts to (k, k), as in the loss
    fig, ax = canvas(10.5, 5.8, f"The article's labels: outputs {tuple(out.shape)} against labels "
                     f"{tuple(lab.shape)} are compared as {tuple(torch.broadcast_shapes(out.shape, lab.shape))}")
    size, x0, y0 = 0.78, 3.2, 4.4  # one cell; the square's top-left corner
    label(ax, x0 + k * size / 2, y0 + 1.15, f"labels: the first {k} of {n}", fontsize=FONT)
    label(ax, x0 - 1.5, y0 - k * size / 2 + size, f"outputs:\nthe first\n{k} of {n}", fontsize=FONT)
    top = float(squares.max()) or 1.0
    from matplotlib import colormaps

    shade = colormaps["Oranges"]
    for j in range(k):
        box(ax, x0 + j * size, y0 + 0.1, size, size * 0.8, f"{float(lab[j]):.1f}", color=COLORS["light"],
            rounded=False, fontsize=FONT - 1)
    for i in range(k):
        y = y0 - (i + 1) * size
        box(ax, x0 - size - 0.15, y, size, size, f"{float(out[i, 0]):.1f}", color=COLORS["light"], rounded=False,
            fontsize=FONT - 1)
        for j in range(k):
            box(ax, x0 + j * size, y, size, size, f"{float(squares[i, j]):.0f}",
                color=shade(0.15 + 0.75 * float(squares[i, j]) / top), rounded=False, fontsize=FONT - 2)
    for i in range(k):  # drawn last, so no neighbour covers the thick edge
        box(ax, x0 + i * size, y0 - (i + 1) * size, size, size, color="none", rounded=False).set_linewidth(3)
    if k < n:
        label(ax, x0 + k * size + 0.35, y0 - k * size / 2, "…", fontsize=FONT + 4)
        label(ax, x0 + k * size / 2, y0 - k * size - 0.25, "⋮", fontsize=FONT + 2)
    right = x0 + k * size + 0.9
    label(ax, right, y0 + 0.4, "Each cell: (output − label)²", ha="left", weight="bold")
    label(ax, right, y0 - 0.5, f"With labels shaped (n,), MSELoss averages\nall {n} × {n} = {n * n} cells: "
          "every output\nagainst every label of the batch.", ha="left")
    label(ax, right, y0 - 1.9, f"With labels shaped (n, 1), it averages only\nthe {n} cells of the diagonal "
          "(thick edges):\neach output against its own label.", ha="left")
    label(ax, right, y0 - 3.2, "Trained on all cells, the best a model can do\nis predict about the mean "
          "label for every row.", ha="left", fontsize=FONT - 1)
    return fig


class Scored(Protocol):
    """What ``paired_splits`` needs of a score (``gpulab.evaluation.Score`` has it)."""

    model: str
    rmse: tuple[float, ...]
    seeds: tuple[int, ...]


def paired_splits(a: Scored, b: Scored, result=None, *, title: str | None = None):
    """Two models' test RMSE split by split (left) and their per-split differences A − B (right).

    ``result`` (a ``gpulab.paired_comparison.Paired`` of the same two) adds its interval to the right panel.
    """
    import matplotlib.pyplot as plt

    if tuple(a.seeds) != tuple(b.seeds) or len(a.rmse) != len(b.rmse) or not a.rmse:
        raise ValueError(f"not the same splits: seeds {list(a.seeds)} vs {list(b.seeds)}; pair only identical splits")
    seeds = list(a.seeds) or list(range(len(a.rmse)))
    diffs = [x - y for x, y in zip(a.rmse, b.rmse)]
    if result is not None and [round(d, 9) for d in result.differences] != [round(d, 9) for d in diffs]:
        raise ValueError(f"result compares {result.a} with {result.b}, not these two scores' splits")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), width_ratios=(1.4, 1))
    fig.suptitle(title or f"Paired: {a.model} against {b.model} on the same {len(seeds)} splits",
                 fontsize=FONT + 2)
    xs = range(len(seeds))
    for scores, name, color, marker in ((a.rmse, a.model, COLORS["cpu"], "o"), (b.rmse, b.model, COLORS["memory"], "s")):
        left.plot(xs, scores, marker=marker, color=color, label=f"{'A' if name == a.model else 'B'}: {name}", lw=1)
    for x, (p, q) in enumerate(zip(a.rmse, b.rmse)):
        left.plot([x, x], [p, q], color=COLORS["grad"] if p > q else COLORS["gpu"], lw=3, alpha=0.5)
    left.set_xticks(list(xs), [str(s) for s in seeds])
    left.set(xlabel="split (its seed)", ylabel="test RMSE ($1000s)",
             title="test RMSE on each split; the bar is that split's gap\n(red: A higher, green: A lower)")
    left.title.set_fontsize(FONT)
    left.legend(fontsize=FONT - 1, frameon=False)
    right.axhline(0, color=COLORS["text"], lw=1)
    right.scatter(list(xs), diffs, color=[COLORS["grad"] if d > 0 else COLORS["gpu"] for d in diffs], zorder=3)
    if result is not None:
        right.axhspan(result.low, result.high, color=COLORS["idle"], alpha=0.5,
                      label=f"{result.confidence:.0%} interval of the mean difference")
        right.axhline(result.mean, color=COLORS["text"], ls="--", lw=1, label="mean difference")
        right.legend(fontsize=FONT - 2, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncols=2)
    right.set_xticks(list(xs), [str(s) for s in seeds])
    right.set(xlabel="split (its seed)", ylabel="A − B (test RMSE)",
              title=f"A − B on each split (A = {a.model}, B = {b.model})\nabove 0: B had the lower RMSE")
    right.title.set_fontsize(FONT)
    fig.tight_layout()
    return fig


#: Schematics of this topic: none (both pictures are drawn from the notebook's own numbers).
STATIC: dict = {}
