"""gpulab.sharding.checkpointing and memory.profiled_timeline: checkpointing keeps fewer activations, computes the same gradients."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpulab import memory
from gpulab.sharding import checkpointing as activation_checkpointing


@pytest.fixture()
def blocks():
    torch.manual_seed(0)
    return activation_checkpointing.BlockMLP(width=16, blocks=2, layers_per_block=3), torch.randn(64, 16), torch.randn(64, 1)


def gradients(model, x, y):
    model.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_checkpointing_gives_the_same_outputs_and_gradients(blocks):
    model, x, y = blocks
    plain_out, plain = model(x), gradients(model, x, y)
    model.checkpointing = True
    assert torch.equal(model(x), plain_out)
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(gradients(model, x, y), plain))


def test_compare_measures_fewer_activation_bytes_with_checkpointing(blocks):
    model, x, y = blocks
    off, on = activation_checkpointing.compare(model, x, y, min_run_time=0.01)
    assert (off["checkpointing"], on["checkpointing"]) == ("off", "on")
    # Off: each of the 6 Linear+ReLU layers keeps a (64, 16) float32 output; on: each block keeps its input only.
    assert off["activations peak"] >= 6 * 64 * 16 * 4 > on["activations peak"] > 0
    assert off["step peak"] > off["activations peak"] and off["seconds per step"] > 0 and on["seconds per step"] > 0
    assert model.checkpointing is False  # restored


def test_kept_for_backward_counts_each_storage_once(blocks):
    model, x, y = blocks
    # Off: the batch and the 6 layer outputs (each Linear's input is the ReLU output before it); the MSE loss
    # keeps the prediction and the targets.
    assert activation_checkpointing.kept_for_backward(model, x, y) == {(64, 16): 1 + 6, (64, 1): 2}
    model.checkpointing = True  # each block keeps its input; the head keeps the last block's output
    assert activation_checkpointing.kept_for_backward(model, x, y) == {(64, 16): 3, (64, 1): 2}


def test_timeline_categories_add_up_to_the_peak(blocks):
    model, x, y = blocks
    timeline = memory.profiled_timeline(model, x, y)
    assert {"parameter", "gradient", "activation", "optimizer state"} <= set(timeline[0])
    params = sum(p.nbytes for p in model.parameters())
    assert max(t["parameter"] for t in timeline) == params
    assert max(t["optimizer state"] for t in timeline) >= 2 * params  # Adam's two moments
    assert memory.profiled_peak(model, x, y) == max(sum(t.values()) for t in timeline)


@pytest.mark.parametrize("kwargs,name", [({"width": 0}, "width"), ({"blocks": -1}, "blocks"),
                                         ({"layers_per_block": 1.5}, "layers_per_block"), ({"width": True}, "width")])
def test_bad_shapes(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}=.* must be a whole number >= 1$"):
        activation_checkpointing.BlockMLP(**kwargs)


def test_bad_compare_inputs(blocks):
    model, x, y = blocks
    with pytest.raises(ValueError, match="must be a gpulab.sharding.checkpointing.BlockMLP, got Sequential"):
        activation_checkpointing.compare(nn.Sequential(nn.Linear(16, 1)), x, y)
    with pytest.raises(ValueError, match=r"^min_run_time=0 must be a finite positive number$"):
        activation_checkpointing.step_seconds(model, x, y, min_run_time=0)
