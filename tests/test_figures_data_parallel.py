"""Notebook 04's picture is drawn from the step it is given: its chunk sizes, replicas and gradients."""

from __future__ import annotations

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from gpulab.figures.data_parallel import dataparallel_step  # noqa: E402
from gpulab.models import Net1  # noqa: E402
from gpulab.data_parallel import DataParallelStep, data_parallel_step, full_batch_gradients  # noqa: E402


def _step(rows: int, replicas: int):
    torch.manual_seed(0)
    model = Net1(13, 16, 32, 1)
    x, y = torch.randn(rows, 13), torch.randn(rows, 1)
    return data_parallel_step(model, x, y, replicas), full_batch_gradients(model, x, y)


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


@pytest.mark.parametrize("rows,replicas", [(128, 3), (10, 4), (5, 4)])
def test_the_picture_shows_this_steps_chunks_and_gradients(rows, replicas):
    step, full = _step(rows, replicas)
    fig = dataparallel_step(step, full)
    texts = _texts(fig)
    for k, size in enumerate(step.batch_sizes):
        assert any(f"({size} row" in t for t in texts) and any(f"replica {k}" in t for t in texts)
    assert not any(f"replica {step.replicas}" in t for t in texts)  # no replica that did not run
    assert any(f"output {tuple(step.output.shape)}" in t for t in texts)
    heights = [p.get_height() for p in fig.axes[1].patches]
    expected = [g["layer3.0.bias"].item() for g in step.replica_grads]
    assert heights[:-2] == pytest.approx(expected)
    assert heights[-2] == pytest.approx(sum(expected), abs=1e-6)  # the sum bar
    assert heights[-1] == pytest.approx(full["layer3.0.bias"].item(), abs=1e-6)  # one model, full batch
    assert f"{rows} rows over {step.replicas} replicas" in fig._suptitle.get_text()


def test_bad_input():
    step, _ = _step(8, 2)
    with pytest.raises(ValueError, match="unknown parameter"):
        dataparallel_step(step, param="nope")
    bare = DataParallelStep(batch_sizes=step.batch_sizes, output=step.output, loss=step.loss, grads=step.grads)
    with pytest.raises(ValueError, match="replica gradients"):
        dataparallel_step(bare)
