"""gpulab.memory and gpulab.tables: a training step's bytes by kind, derived here by hand for a tiny MLP."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from gpulab import memory, tables

B, D_IN, H, D_OUT = 10, 8, 32, 4


@pytest.fixture()
def mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D_IN, H), nn.ReLU(), nn.Linear(H, D_OUT))
    return model, torch.randn(B, D_IN), torch.randn(B, D_OUT)


PARAMS = D_IN * H + H + H * D_OUT + D_OUT  # numbers the model learns
STEP_COUNTS = 4 * 4  # Adam keeps one float32 step count per parameter tensor (4 tensors)


def test_float32_step(mlp):
    model, x, y = mlp
    row = memory.training_memory(model, x, y, "float32")
    assert row.parameters == row.gradients == PARAMS * 4
    assert row.optimizer == 2 * PARAMS * 4 + STEP_COUNTS  # exp_avg and exp_avg_sq, float32
    # Saved for backward: the ReLU's output (also the 2nd Linear's input) and the model's output (by MSELoss).
    assert row.saved_activations == B * H * 4 + B * D_OUT * 4
    assert row.saved_input == x.nbytes + y.nbytes
    # Only the 2nd Linear keeps its weight: the 1st one's input needs no gradient.
    assert row.saved_params == H * D_OUT * 4
    # Parameters are counted once, not again as saved tensors.
    assert row.peak is None and row.total == 4 * PARAMS * 4 + STEP_COUNTS + row.saved_activations + row.saved_input


def test_autocast_keeps_float32_weights_and_saves_2_byte_copies(mlp):
    model, x, y = mlp
    row = memory.training_memory(model, x, y, "autocast bfloat16")
    assert row.parameters == row.gradients == PARAMS * 4  # master weights, gradients and Adam stay float32
    assert row.optimizer == 2 * PARAMS * 4 + STEP_COUNTS
    # The bfloat16 copies: of x, of the ReLU output, of the 2nd weight; plus the output cast back to float32.
    assert row.saved_activations == B * D_IN * 2 + B * H * 2 + H * D_OUT * 2 + B * D_OUT * 4
    assert row.saved_input == y.nbytes and row.saved_params == 0


def test_a_grad_scaler_adds_its_loss_scale_to_what_backward_keeps(mlp):
    # On CUDA, float16 autocast trains through a GradScaler (gpulab.train.fit): backward of loss * scale keeps
    # the scale, one float32 number. The first H200 run counted those 4 bytes; here a CPU scaler shows them.
    from gpulab.step import train_step

    model, x, y = mlp
    counted = {}
    for name, scaler in (("plain", None), ("scaled", torch.amp.GradScaler("cpu"))):
        net = copy.deepcopy(model)
        optimizer = torch.optim.Adam(net.parameters())
        with memory.saved_tensors(net, x, y) as saved:
            train_step(net, optimizer, x, y, scaler=scaler)
        counted[name] = saved["saved_activations"]
    assert counted["scaled"] - counted["plain"] == torch.tensor(1.0).nbytes == 4


def test_bfloat16_weights_halve_everything_but_the_float32_targets(mlp):
    model, x, y = mlp
    row = memory.training_memory(model, x, y, "bfloat16 weights")
    assert row.parameters == row.gradients == PARAMS * 2
    assert row.optimizer == 2 * PARAMS * 2 + STEP_COUNTS
    assert row.saved_activations == B * H * 2 + B * D_OUT * 4
    assert row.saved_input == B * D_IN * 2 + y.nbytes and row.saved_params == H * D_OUT * 2


def test_the_model_and_batch_are_untouched(mlp):
    model, x, y = mlp
    before = {k: v.clone() for k, v in model.state_dict().items()}
    memory.memory_table(model, x, y)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert x.dtype == torch.float32 and all(p.grad is None for p in model.parameters())


def test_bad_inputs(mlp):
    model, x, y = mlp
    with pytest.raises(ValueError, match="unknown variant 'int8'"):
        memory.training_memory(model, x, y, "int8")
    with pytest.raises(ValueError, match="unknown variant"):
        memory.memory_table(model, x, y, ("float32", "fp8"))
    with pytest.raises(ValueError, match="10 and 3"):
        memory.training_memory(model, x, y[:3])
    with pytest.raises(ValueError, match="unknown unit"):
        memory.format_table([], "GB")


def test_saved_tensors_counts_each_storage_once():
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(4, 4)
    with memory.saved_tensors(nn.Module(), x) as saved:
        h = x @ w  # saves x (grad of w needs it)
        (h * h).sum()  # saves h twice, counted once
    assert saved == {"saved_activations": h.nbytes, "saved_input": x.nbytes, "saved_params": 0}


def test_peak_memory_is_none_off_cuda():
    with memory.peak_memory("cpu") as peak:
        torch.zeros(1000)
    assert peak.bytes is None and peak.device == "cpu"


def test_format_table_in_bytes_and_mib(mlp):
    rows = memory.memory_table(*mlp, variants=("float32",))
    text = memory.format_table(rows, "bytes")
    assert f"{rows[0].total:,}" in text and "float32" in text
    assert "MiB" in memory.format_table(rows).splitlines()[0]


def test_format_rows_aligns_and_marks_missing_values():
    text = tables.format_rows([{"name": "a", "n": 1200}, {"name": "bb", "x": 0.5}])
    lines = text.splitlines()
    assert lines[0].split() == ["name", "n", "x"]
    assert lines[2].split() == ["a", "1,200", "-"] and lines[3].split() == ["bb", "-", "0.5"]
    assert len({len(line) for line in lines[:2]}) == 1
    assert tables.format_rows([]) == "(no rows)"
