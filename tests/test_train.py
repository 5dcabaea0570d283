"""The one training loop: fit on tensors and DataLoaders, reproducibility, metrics, sharding."""

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gpulab.models import Net1
from gpulab.train import History, epoch_permutation, evaluate, fit, regression_metrics, shard_batches


def _data(n=50, d=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    y = X[:, :1] * 2.0 - X[:, 1:2] + 0.1 * torch.randn(n, 1, generator=g)
    return X, y


def _model(d=5, seed=0):
    torch.manual_seed(seed)
    return Net1(d, 8, 6, 1)


def _weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_fit_on_tensors_returns_history_and_lowers_loss():
    X, y = _data()
    model = _model()
    h = fit(model, (X, y), epochs=30, batch_size=16, device="cpu", progress=False)
    assert isinstance(h, History)
    assert h.epochs == list(range(30))
    assert len(h.loss) == len(h.seconds) == len(h.samples_per_s) == 30
    assert h.device == "cpu"
    assert all(s > 0 for s in h.seconds)
    assert h.loss[-1] < h.loss[0]
    assert set(h.to_dict()) == {"loss", "seconds", "samples_per_s", "device", "epochs"}


def test_fit_on_dataloader():
    X, y = _data()
    model = _model()
    loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(0))
    h = fit(model, loader, epochs=20, device="cpu", progress=False)
    assert len(h.loss) == 20
    assert h.loss[-1] < h.loss[0]
    # samples/s counts every row once per epoch
    assert h.samples_per_s[0] == pytest.approx(len(X) / h.seconds[0])


def test_seeded_runs_are_reproducible_on_cpu():
    X, y = _data()
    a, b = _model(seed=3), _model(seed=3)
    ha = fit(a, (X, y), epochs=5, batch_size=8, seed=7, device="cpu", progress=False)
    hb = fit(b, (X, y), epochs=5, batch_size=8, seed=7, device="cpu", progress=False)
    wa, wb = _weights(a), _weights(b)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert ha.loss == hb.loss


def test_different_data_seed_changes_weights():
    X, y = _data()
    a, b = _model(seed=3), _model(seed=3)
    fit(a, (X, y), epochs=3, batch_size=8, seed=1, device="cpu", progress=False)
    fit(b, (X, y), epochs=3, batch_size=8, seed=2, device="cpu", progress=False)
    wa, wb = _weights(a), _weights(b)
    assert any(not torch.equal(wa[k], wb[k]) for k in wa)


def test_fit_zero_epochs_leaves_weights():
    X, y = _data()
    model = _model()
    before = _weights(model)
    h = fit(model, (X, y), epochs=0, device="cpu", progress=False)
    assert h.loss == []
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("epochs", [-1, 1.5, "3"])
def test_fit_bad_epochs(epochs):
    X, y = _data()
    with pytest.raises(ValueError, match="epochs") as info:
        fit(_model(), (X, y), epochs=epochs, device="cpu", progress=False)
    assert "\n" not in str(info.value)


def test_fit_mismatched_rows():
    X, y = _data()
    with pytest.raises(ValueError, match="rows") as info:
        fit(_model(), (X, y[:-1]), epochs=1, device="cpu", progress=False)
    assert "\n" not in str(info.value)


def test_fit_unknown_device():
    X, y = _data()
    with pytest.raises(ValueError, match="unknown device"):
        fit(_model(), (X, y), epochs=1, device="gpu7", progress=False)


def test_regression_metrics_against_hand_computed_values():
    pred = torch.tensor([1.0, 2.0, 4.0])
    y = torch.tensor([[1.0], [3.0], [2.0]])
    errors = [0.0, -1.0, 2.0]
    mse = sum(e * e for e in errors) / 3
    mean = (1.0 + 3.0 + 2.0) / 3
    ss_tot = sum((v - mean) ** 2 for v in (1.0, 3.0, 2.0))
    m = regression_metrics(pred, y)
    assert m["mse"] == pytest.approx(mse)
    assert m["rmse"] == pytest.approx(math.sqrt(mse))
    assert m["r2"] == pytest.approx(1 - mse * 3 / ss_tot)


def test_regression_metrics_perfect_and_constant_target():
    y = torch.tensor([1.0, 2.0, 3.0])
    assert regression_metrics(y.clone(), y) == {"mse": 0.0, "rmse": 0.0, "r2": 1.0}
    assert math.isnan(regression_metrics(torch.ones(3), torch.full((3,), 5.0))["r2"])


@pytest.mark.parametrize("pred,y", [(torch.ones(3), torch.ones(2)), (torch.ones(0), torch.ones(0))])
def test_regression_metrics_bad_sizes(pred, y):
    with pytest.raises(ValueError, match="non-empty") as info:
        regression_metrics(pred, y)
    assert "\n" not in str(info.value)


def test_evaluate_matches_metrics_of_predictions_and_keeps_train_mode():
    X, y = _data()
    model = _model()
    model.train()
    with torch.no_grad():
        expected = regression_metrics(model(X), y)
    assert evaluate(model, X, y) == expected
    assert model.training


def test_epoch_permutation_same_for_same_seed_and_epoch():
    assert torch.equal(epoch_permutation(20, 3, 4), epoch_permutation(20, 3, 4))
    assert sorted(epoch_permutation(20, 3, 4).tolist()) == list(range(20))
    assert not torch.equal(epoch_permutation(20, 3, 4), epoch_permutation(20, 3, 5))


@pytest.mark.parametrize("n,batch,world", [(404, 128, 3), (404, 128, 2), (10, 4, 3), (7, 7, 7), (5, 2, 4)])
def test_shards_union_is_each_global_batch(n, batch, world):
    whole = shard_batches(n, batch, seed=1, epoch=2)
    per_rank = [shard_batches(n, batch, seed=1, epoch=2, rank=r, world_size=world) for r in range(world)]
    assert len({len(p) for p in per_rank}) == 1 and len(per_rank[0]) == len(whole)
    for i, (global_idx, total) in enumerate(whole):
        assert total == len(global_idx)
        parts = [per_rank[r][i] for r in range(world)]
        assert all(t == total for _, t in parts)
        assert torch.equal(torch.cat([idx for idx, _ in parts]), global_idx)
    seen = torch.cat([idx for idx, _ in whole])
    assert sorted(seen.tolist()) == list(range(n))


def test_shard_sizes_128_over_3():
    sizes = [len(shard_batches(128, 128, 0, 0, rank=r, world_size=3)[0][0]) for r in range(3)]
    assert sizes == [43, 43, 42]


def test_empty_shards_when_batch_smaller_than_world():
    # 10 rows in batches of 4: the last global batch has 2 rows, shared over 3 ranks
    last = [shard_batches(10, 4, 0, 0, rank=r, world_size=3)[-1] for r in range(3)]
    assert [len(idx) for idx, _ in last] == [1, 1, 0]
    assert all(total == 2 for _, total in last)


@pytest.mark.parametrize("kwargs,word", [
    (dict(batch_size=0), "batch_size"),
    (dict(batch_size=-3), "batch_size"),
    (dict(rank=2, world_size=2), "rank"),
    (dict(rank=-1, world_size=2), "rank"),
])
def test_shard_batches_bad_input(kwargs, word):
    args = dict(n=10, batch_size=4, seed=0, epoch=0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=word) as info:
        shard_batches(**args)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("world", [2, 3])
def test_simulated_ranks_sum_to_full_batch_gradient(world):
    """Each rank's loss weighted as fit does (local/global*world), gradients averaged as DDP does."""
    X, y = _data(n=37)
    model = _model()
    loss_fn = nn.MSELoss()
    idx, total = shard_batches(len(X), 37, seed=0, epoch=0)[0]
    model.zero_grad()
    loss_fn(model(X[idx]), y[idx]).backward()
    full = {k: p.grad.clone() for k, p in model.named_parameters()}

    summed = {k: torch.zeros_like(v) for k, v in full.items()}
    for rank in range(world):
        (local, total), = shard_batches(len(X), 37, seed=0, epoch=0, rank=rank, world_size=world)
        model.zero_grad()
        weight = len(local) * world / total
        (loss_fn(model(X[local]), y[local]) * weight).backward()
        for k, p in model.named_parameters():
            summed[k] += p.grad
    for k in full:
        torch.testing.assert_close(summed[k] / world, full[k], rtol=1e-5, atol=1e-6)


def test_fit_as_two_ranks_equals_one_process_without_collectives():
    """fit with world_size=2 runs each rank's share; one step of summed rank grads = single step."""
    X, y = _data(n=20)
    single = _model()
    fit(single, (X, y), epochs=1, batch_size=20, seed=0, device="cpu", progress=False,
        optimizer=torch.optim.SGD(single.parameters(), lr=0.1))
    grads = []
    for rank in range(2):
        m = _model()
        opt = torch.optim.SGD(m.parameters(), lr=0.0)  # lr 0: weights stay, grads remain to inspect
        fit(m, (X, y), epochs=1, batch_size=20, seed=0, device="cpu", progress=False,
            optimizer=opt, rank=rank, world_size=2)
        grads.append({k: p.grad.clone() for k, p in m.named_parameters()})
    start = _model()
    with torch.no_grad():
        for k, p in start.named_parameters():
            p -= 0.1 * (grads[0][k] + grads[1][k]) / 2
    for k, v in start.state_dict().items():
        torch.testing.assert_close(v, single.state_dict()[k], rtol=1e-5, atol=1e-6)


def test_max_abs_difference_finds_the_largest_gap_and_rejects_other_names():
    from gpulab.train import max_abs_difference

    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.5])}
    b = {"w": torch.tensor([1.0, 2.25]), "b": torch.tensor([0.0])}
    assert max_abs_difference(a, b) == 0.5
    assert max_abs_difference(a, a) == 0.0
    with pytest.raises(ValueError, match="names differ"):
        max_abs_difference(a, {"w": a["w"]})


# ------------------------------------------------------------------ no float64 on an accelerator (Apple MPS)


class NoFloat64(torch.utils._python_dispatch.TorchDispatchMode):
    """Make the CPU behave like Apple MPS for dtypes: any op that produces a float64 tensor raises."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                raise TypeError(f"{func} made a float64 tensor: MPS has no float64")
        return out


def test_the_mps_simulation_catches_float64():
    with NoFloat64(), pytest.raises(TypeError, match="MPS has no float64"):
        torch.zeros((), dtype=torch.float64)


@pytest.mark.parametrize("loader", [False, True])
def test_fit_makes_no_float64_tensor_on_the_training_device(loader):
    """Every tensor fit makes lives on the training device: with float64 forbidden there, fit still runs."""
    X, y = _data()
    model = _model()
    data = DataLoader(TensorDataset(X, y), batch_size=16) if loader else (X, y)
    with NoFloat64():
        h = fit(model, data, epochs=3, batch_size=16, device="cpu", progress=False)
    assert len(h.loss) == 3 and all(math.isfinite(v) for v in h.loss)


def test_float32_loss_accumulation_matches_a_float64_sum():
    X, y = _data(n=203)
    model = _model()
    h = fit(model, (X, y), epochs=1, batch_size=32, lr=0.0, device="cpu", progress=False)
    with torch.no_grad():  # lr 0: the weights never change, so the epoch's mean loss is the full-data loss
        expected = nn.MSELoss()(model(X).double(), y.double()).item()
    assert h.loss[0] == pytest.approx(expected, rel=1e-6)


# ------------------------------------------------------------------ the epoch's order goes to the device once


class CountIndexCopies(torch.overrides.TorchFunctionMode):
    """Count ``.to(...)`` calls on integer (index) tensors."""

    def __init__(self):
        super().__init__()
        self.copies = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.to and args and not args[0].is_floating_point():
            self.copies += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("world", [1, 3])
def test_indices_are_moved_to_the_device_once_per_epoch(world):
    X, y = _data(n=50)
    with CountIndexCopies() as counter:
        fit(_model(), (X, y), epochs=3, batch_size=10, device="cpu", progress=False, rank=world - 1,
            world_size=world)
    assert counter.copies == 3  # 5 steps per epoch: one copy per epoch, not two per step


def test_shard_batches_on_a_device_are_views_of_one_permutation():
    shards = shard_batches(50, 10, seed=0, epoch=1, rank=1, world_size=2, device="meta")
    assert all(idx.device.type == "meta" for idx, _ in shards)
    base = shards[0][0]._base
    assert base is not None and all(idx._base is base for idx, _ in shards)  # slices of one copy


def test_totals_are_reduced_over_the_model_group_in_float32(monkeypatch):
    """With a process group up, fit all-reduces [loss sum, count] once per epoch over the DDP model's group."""
    from gpulab import train

    calls = []

    def fake_all_reduce(tensor, group=None):
        calls.append((tensor.dtype, group))
        tensor.mul_(2)  # as if a second rank had the same sums

    monkeypatch.setattr(train, "_distributed", lambda: True)
    monkeypatch.setattr(torch.distributed, "all_reduce", fake_all_reduce)
    X, y = _data(n=40)
    model = _model()
    model.process_group = "group-of-this-model"  # what DistributedDataParallel carries
    h = fit(model, (X, y), epochs=2, batch_size=40, device="cpu", progress=False, rank=0, world_size=2)
    assert calls == [(torch.float32, "group-of-this-model")] * 2
    assert h.samples_per_s[0] == pytest.approx(40 / h.seconds[0])  # 2 x this rank's 20 rows
