"""gpulab.data_parallel reproduces nn.DataParallel's scatter/replicate/gather/reduce on one device."""

import pytest
import torch
from torch import nn

from gpulab.models import Net1
from gpulab.data_parallel import (
    data_parallel_step,
    full_batch_gradients,
    gather,
    max_grad_difference,
    replica_batch_sizes,
    replicate,
    scatter,
)


def _setup(n=128, seed=0):
    torch.manual_seed(seed)
    model = Net1(13, 16, 32, 1)
    return model, torch.randn(n, 13), torch.randn(n, 1)


@pytest.mark.parametrize("n,replicas", [(128, 1), (128, 2), (128, 3), (128, 5), (128, 7), (10, 4), (5, 4), (2, 3), (1, 8), (101, 7)])
def test_scatter_matches_torch_chunk_and_replica_sizes(n, replicas):
    x = torch.arange(n * 2.0).reshape(n, 2)
    chunks = scatter(x, replicas)
    assert [len(c) for c in chunks] == [len(c) for c in torch.chunk(x, replicas)]
    assert [len(c) for c in chunks] == replica_batch_sizes(n, replicas)
    assert torch.equal(torch.cat(chunks), x)
    assert len(chunks) <= replicas and all(len(c) > 0 for c in chunks)


def test_known_split_sizes():
    assert replica_batch_sizes(128, 2) == [64, 64]
    assert replica_batch_sizes(128, 3) == [43, 43, 42]
    assert replica_batch_sizes(10, 4) == [3, 3, 3, 1]
    assert replica_batch_sizes(2, 3) == [1, 1]


@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 5, 7, 8])
def test_reduced_gradient_equals_full_batch_gradient(replicas):
    model, x, y = _setup()
    step = data_parallel_step(model, x, y, replicas)
    full = full_batch_gradients(model, x, y)
    assert step.grads.keys() == full.keys()
    for k in full:
        torch.testing.assert_close(step.grads[k], full[k], rtol=1e-5, atol=1e-6)
    assert max_grad_difference(step.grads, full) < 1e-5
    assert sum(step.batch_sizes) == 128 and step.replicas == len(step.batch_sizes)


@pytest.mark.parametrize("n,replicas", [(2, 3), (1, 4), (3, 7), (6, 4)])
def test_small_batch_uses_fewer_replicas(n, replicas):
    model, x, y = _setup(n=n)
    step = data_parallel_step(model, x, y, replicas)
    assert step.replicas == len(torch.chunk(x, replicas)) < replicas
    for k, g in full_batch_gradients(model, x, y).items():
        torch.testing.assert_close(step.grads[k], g, rtol=1e-5, atol=1e-6)


def test_gathered_output_equals_full_forward_in_order():
    model, x, y = _setup(n=50)
    step = data_parallel_step(model, x, y, 3)
    with torch.no_grad():
        torch.testing.assert_close(step.output, model(x))
        assert step.loss == pytest.approx(nn.functional.mse_loss(model(x), y).item(), rel=1e-6)


def test_grads_land_in_original_and_accumulate():
    model, x, y = _setup(n=30)
    step = data_parallel_step(model, x, y, 3)
    for name, p in model.named_parameters():
        assert torch.equal(p.grad, step.grads[name])
    again = data_parallel_step(model, x, y, 3)  # like a second backward without zero_grad
    for name in step.grads:
        torch.testing.assert_close(again.grads[name], 2 * step.grads[name])


def test_replicas_are_independent_copies():
    model, _, _ = _setup()
    copies = replicate(model, 3)
    assert len(copies) == 3 and all(c is not model for c in copies)
    with torch.no_grad():
        copies[0].layer1[0].weight.zero_()
    assert model.layer1[0].weight.abs().sum() > 0
    torch.testing.assert_close(copies[1].layer1[0].weight, model.layer1[0].weight)


def test_per_replica_gradients_differ_but_sum_to_full():
    """A wrong reduction (e.g. averaging replicas' grads) would not match: the test can fail."""
    model, x, y = _setup()
    step = data_parallel_step(model, x, y, 4)
    full = full_batch_gradients(model, x, y)
    averaged = {k: v / 4 for k, v in step.grads.items()}
    assert max_grad_difference(averaged, full) > 1e-4


def test_each_replica_keeps_its_own_gradients_and_they_sum_to_the_step():
    model, x, y = _setup(n=10)
    step = data_parallel_step(model, x, y, 4)
    assert len(step.replica_grads) == step.replicas == 4
    for name, total in step.grads.items():
        torch.testing.assert_close(sum(g[name] for g in step.replica_grads), total)
    first, second = step.replica_grads[0]["layer3.0.bias"], step.replica_grads[1]["layer3.0.bias"]
    assert not torch.equal(first, second)  # different rows give different gradients


def test_gather_keeps_order():
    parts = [torch.full((2, 1), float(i)) for i in range(3)]
    assert gather(parts).flatten().tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError):
        gather([])


@pytest.mark.parametrize("bad", [0, -1, 2.0, 1.5, "2", True, False, None])
def test_bad_replica_count(bad):
    model, x, y = _setup(n=4)
    for call in (lambda: replica_batch_sizes(4, bad), lambda: scatter(x, bad),
                 lambda: replicate(model, bad), lambda: data_parallel_step(model, x, y, bad)):
        with pytest.raises(ValueError, match="n_replicas") as info:
            call()
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("bad", [0, -5, 2.5, True])
def test_bad_batch_size(bad):
    with pytest.raises(ValueError, match="batch_size"):
        replica_batch_sizes(bad, 2)


def test_bad_batches():
    model, x, y = _setup(n=4)
    with pytest.raises(ValueError, match="at least one row"):
        scatter(torch.zeros(0, 13), 2)
    with pytest.raises(ValueError, match="at least one row"):
        scatter([1, 2, 3], 2)
    with pytest.raises(ValueError, match="rows"):
        data_parallel_step(model, x, y[:3], 2)
    with pytest.raises(ValueError, match="names differ"):
        max_grad_difference({"a": torch.zeros(1)}, {"b": torch.zeros(1)})


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2+ CUDA GPUs")
@pytest.mark.gpu
def test_real_data_parallel_uses_same_split():
    model, x, y = _setup(n=10)
    n = torch.cuda.device_count()
    seen = []
    model = model.cuda()
    model.layer1.register_forward_hook(lambda m, inp, out: seen.append(len(inp[0])))
    dp = nn.DataParallel(model)
    dp(x.cuda())
    assert sorted(seen, reverse=True) == sorted(replica_batch_sizes(10, n), reverse=True)
