"""Notebooks 05 and 06: the pictures drawn from a run show that run's numbers, and refuse input that is not one."""

from __future__ import annotations

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from gpulab.evaluation import Score  # noqa: E402
from gpulab.figures import has_title  # noqa: E402
from gpulab.figures.boston import label_broadcasting, paired_splits  # noqa: E402
from gpulab.figures.ddp import STATIC, batch_shards, crash_timeline  # noqa: E402
from gpulab.paired_comparison import compare  # noqa: E402
from gpulab.train import shard_batches  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def _shares(n: int, batch: int, worlds=(1, 2, 3, 4)) -> dict[int, list[list[int]]]:
    steps = len(shard_batches(n, batch, 0, 0))
    return {w: [[len(shard_batches(n, batch, 0, 0, r, w)[s][0]) for r in range(w)] for s in range(steps)]
            for w in worlds}


@pytest.mark.parametrize("n,batch", [(404, 128), (50, 16)])
def test_the_shards_are_the_sizes_given(n, batch):
    shares = _shares(n, batch)
    fig = batch_shards(shares, detail=3)
    left, right = fig.axes
    assert [round(p.get_width()) for p in left.patches] == [s for w in sorted(shares) for s in shares[w][0]]
    assert [round(p.get_width()) for p in right.patches] == [s for step in shares[3] for s in step]
    assert f"{batch} rows" in fig._suptitle.get_text()
    last = sum(shares[3][-1])
    assert any(f"the {last} rows left over" in t for t in _texts(fig)) == (last < batch)


def test_the_shards_default_to_an_uneven_world_and_refuse_bad_input():
    fig = batch_shards({2: [[64, 64]], 3: [[43, 43, 42]], 4: [[32, 32, 32, 32]]})
    assert "with 3 ranks" in fig.axes[1].get_title()
    with pytest.raises(ValueError, match="one per rank"):
        batch_shards({3: [[64, 64]]})
    with pytest.raises(ValueError, match="detail=5"):
        batch_shards({2: [[64, 64]]}, detail=5)
    with pytest.raises(ValueError, match="empty"):
        batch_shards({})


@pytest.mark.parametrize("killed_after,resumed_from", [(10, 10), (10, 11), (30, 29)])
def test_the_timeline_shows_the_checkpoint_that_was_loaded(killed_after, resumed_from):
    fig = crash_timeline(60, killed_after, resumed_from, ["epoch0058.pt", "epoch0059.pt"], history=list(range(60)))
    ax = fig.axes[0]
    widths = [(round(p.get_x()), round(p.get_width())) for p in ax.patches]
    assert widths[:3] == [(0, resumed_from), (resumed_from, 1), (resumed_from, 60 - resumed_from)]
    texts = " ".join(_texts(fig))
    assert f"after epoch {resumed_from}" in ax.get_title() and f"epoch {resumed_from + 1}" in texts
    assert f"logged epoch {killed_after}" in texts and "epochs 1-60, each once" in texts


def test_the_timeline_says_when_the_history_repeats_and_refuses_bad_input():
    assert "61 entries, 60 epochs" in " ".join(_texts(crash_timeline(60, 10, 10, history=[*range(60), 9])))
    with pytest.raises(ValueError, match="resumed_from=60"):
        crash_timeline(60, 10, 60)
    with pytest.raises(ValueError, match="not a checkpoint name"):
        crash_timeline(60, 10, 10, ["model.pt"])


def test_the_schematics_have_titles():
    assert all(has_title(draw()) for draw in STATIC.values())


def test_the_broadcast_square_holds_the_real_squares():
    torch.manual_seed(0)
    out, labels = torch.randn(9, 1) * 5 + 20, torch.randn(9) * 5 + 20
    texts = _texts(label_broadcasting(out, labels, shown=4))
    squares = (out[:4] - labels[:4]) ** 2
    assert all(f"{float(v):.0f}" in texts for v in squares.flatten())
    assert f"{float(labels[3]):.1f}" in texts and f"{float(labels[4]):.1f}" not in texts
    assert any("9 × 9 = 81" in t for t in texts)
    with pytest.raises(ValueError, match="shaped \\(n, 1\\)"):
        label_broadcasting(out, labels.reshape(-1, 1))


def _score(name: str, rmse, seeds=(0, 1, 2)) -> Score:
    return Score(name, "with B", 0.0, 0.0, 0.0, 0.0, "cpu", tuple(rmse), tuple(seeds), 0.25)


def test_the_paired_picture_plots_each_splits_difference():
    a, b = _score("A model", [3.0, 4.0, 2.5]), _score("B model", [2.0, 4.5, 2.0])
    fig = paired_splits(a, b, compare(a, b))
    left, right = fig.axes[:2]
    assert list(left.lines[0].get_ydata()) == [3.0, 4.0, 2.5]
    assert [round(float(y), 6) for _, y in right.collections[0].get_offsets()] == [1.0, -0.5, 0.5]
    assert "A model" in fig._suptitle.get_text() and "B model" in fig._suptitle.get_text()
    with pytest.raises(ValueError, match="not the same splits"):
        paired_splits(a, _score("B model", [2.0, 4.5, 2.0], seeds=(5, 6, 7)))
    with pytest.raises(ValueError, match="not these two"):
        paired_splits(a, b, compare(b, a))
