"""gpulab.step.train_step: one step, micro-batches that add up to the whole batch, DDP's no_sync on all but the last."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from gpulab import step
from gpulab.models import mlp
from gpulab.step import train_step
from gpulab.train import fit, max_abs_difference


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    model = mlp([5, 16, 1])
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _data(rows: int = 37):
    g = torch.Generator().manual_seed(1)
    return torch.randn(rows, 5, generator=g), torch.randn(rows, 1, generator=g)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_micro_batches_give_the_whole_batch_step(k):
    X, y = _data()
    one, opt1 = _setup()
    many, optk = _setup()
    loss1 = train_step(one, opt1, X, y)
    lossk = train_step(many, optk, X, y, accumulate=k)  # 37 rows: unequal micro-batches
    assert max_abs_difference(one.state_dict(), many.state_dict()) < 1e-6
    assert lossk.item() == pytest.approx(loss1.item(), rel=1e-5)


def test_a_wrong_weighting_would_be_caught():
    """Control: plain summed micro-batch means (no share weights) do not equal the whole batch."""
    X, y = _data()
    one, opt1 = _setup()
    train_step(one, opt1, X, y)
    naive, opt = _setup()
    opt.zero_grad()
    for x, t in zip(X.tensor_split(3), y.tensor_split(3)):
        nn.functional.mse_loss(naive(x), t).backward()
    opt.step()
    assert max_abs_difference(one.state_dict(), naive.state_dict()) > 1e-4


def test_the_step_changes_the_weights_and_returns_the_mean_loss():
    X, y = _data()
    model, opt = _setup()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    expected = nn.functional.mse_loss(model(X), y).item()
    loss = train_step(model, opt, X, y)
    assert loss.item() == pytest.approx(expected) and not loss.requires_grad
    assert max_abs_difference(before, model.state_dict()) > 0


class CountingSync(nn.Module):
    """Stands in for DDP: counts the micro-batches run inside no_sync()."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.local, self.calls = inner, 0, 0
        self._quiet = False

    @contextlib.contextmanager
    def no_sync(self):
        self._quiet = True
        try:
            yield
        finally:
            self._quiet = False

    def forward(self, x):
        self.calls += 1
        self.local += self._quiet
        return self.inner(x)


def test_all_but_the_last_micro_batch_run_inside_no_sync():
    X, y = _data()
    inner, _ = _setup()
    model = CountingSync(inner)
    train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), X, y, accumulate=4)
    assert (model.calls, model.local) == (4, 3)


def test_fit_with_accumulation_trains_the_same_weights():
    X, y = _data(64)
    a, _ = _setup()
    b, _ = _setup()
    fit(a, (X, y), epochs=3, lr=0.01, batch_size=16, progress=False, device="cpu")
    fit(b, (X, y), epochs=3, lr=0.01, batch_size=16, progress=False, device="cpu", accumulate=4)
    assert max_abs_difference(a.state_dict(), b.state_dict()) < 1e-6


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_accumulate_must_be_a_whole_number(k):
    X, y = _data()
    model, opt = _setup()
    with pytest.raises(ValueError, match="accumulate="):
        train_step(model, opt, X, y, accumulate=k)
    with pytest.raises(ValueError, match="accumulate="):
        fit(model, (X, y), epochs=1, progress=False, accumulate=k)


def test_an_empty_shard_still_takes_part():
    model, opt = _setup()
    loss = train_step(model, opt, torch.zeros(0, 5), torch.zeros(0, 1))
    assert loss.item() == 0.0 and all(p.grad is not None for p in model.parameters())


def test_mlp_from_widths():
    m = mlp([4, 8, 8, 1])
    assert [type(l).__name__ for l in m] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert next(mlp([10**6, 10**6], device="meta").parameters()).is_meta
    for bad in ([4], [4, 0], [4, 2.0]):
        with pytest.raises(ValueError):
            mlp(bad)


def test_a_float64_model_trains_with_the_default_loss():
    # torch < 2.12 fails in mse_loss's backward on a float32 input and a float64 target (pytorch/pytorch#94086):
    # notebook 12's float64 run did so on the H200's torch 2.11.
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 1, dtype=torch.float64)
    loss = train_step(model, opt, x, y)
    assert loss.dtype == torch.float32 and model.weight.grad.dtype == torch.float64
    assert step._loss_input(torch.ones(2, dtype=torch.bfloat16), torch.ones(2)).dtype == torch.float32
    assert step._loss_input(torch.ones(2), torch.ones(2, dtype=torch.float64)).dtype == torch.float64
    assert step._loss_input(torch.ones(2), torch.ones(2, dtype=torch.long)).dtype == torch.float32
