"""gpulab.estimate and `gpulab estimate`: arithmetic checked against real tensors, steps and the profiler."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpulab import estimate as est
from gpulab import memory
from gpulab.cli import main
from gpulab.models import Net1

STATE = ("parameters", "gradients", "optimizer state")


def _models():
    torch.manual_seed(0)
    return {
        "wide MLP": (nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1)),
                     torch.randn(128, 64), torch.randn(128, 1)),
        "deep MLP": (nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                                   nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 1)),
                     torch.randn(512, 32), torch.randn(512, 1)),
        "small CNN": (nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16 * 16, 10)),
                      torch.randn(32, 3, 16, 16), torch.randn(32, 10)),
    }


MODELS = _models()


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("precision", ["fp32", "bf16-autocast", "bf16"])
def test_one_rank_state_equals_the_bytes_after_a_real_adam_step(name, precision):
    model, x, y = MODELS[name]
    row = memory.training_memory(model, x, y, est.MEASURABLE[precision])
    got = est.estimate(model, precision, "adam").components
    assert (got["parameters"], got["gradients"], got["optimizer state"]) == (row.parameters, row.gradients,
                                                                            row.optimizer)


@pytest.mark.parametrize("optimizer, make", [
    ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1)),
    ("sgd-momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
    ("adamw", lambda ps: torch.optim.AdamW(ps)),
])
def test_other_optimizers_state_equals_a_real_step(optimizer, make):
    model, x, y = MODELS["deep MLP"]
    opt = make(model.parameters())
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    model.zero_grad(set_to_none=True)
    assert est.estimate(model, "fp32", optimizer).components["optimizer state"] == memory.optimizer_state_bytes(opt)


@pytest.mark.parametrize("name", MODELS)
def test_whole_step_against_the_profiler_peak(name):
    """Peak >= the state that must all exist at the Adam step (plus the batch), and <= everything accounted
    plus two scratch tensors of the largest size (Adam's step, or a layer's gradients in backward)."""
    model, x, y = MODELS[name]
    r = est.compare(name, model, x, y)
    assert r["state estimated"] == r["state measured"]
    batch = x.nbytes + y.nbytes
    assert r["state measured"] + batch <= r["profiler peak"] <= r["step accounted"] + 2 * r["largest tensor"]


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("strategy", list(est.STRATEGIES))
def test_rank_0_holds_what_torch_chunk_gives_it(ranks, strategy):
    model = MODELS["small CNN"][0]
    # Shapes here: (8,3,3,3), (8,), (10,2048), (10,): 8 rows over 3 is 3/3/2, over 5 is 2/2/2/2/0, 10 over 4 is 3/3/3/1.
    chunks = [torch.chunk(p.detach(), ranks, dim=0) for p in model.parameters()]
    for p, pieces in zip(model.parameters(), chunks):
        sizes = [c.numel() for c in pieces] + [0] * (ranks - len(pieces))
        assert est.shard_numels(p.shape, ranks) == sizes and sum(sizes) == p.numel()
    shard = sum(pieces[0].numel() for pieces in chunks)
    whole = sum(p.numel() for p in model.parameters())
    sharded = {"none": set(), "zero1": {"optimizer state"}, "zero2": {"optimizer state", "gradients"},
               "zero3": set(STATE)}[strategy]
    n = {c: shard if c in sharded else whole for c in STATE}
    got = est.estimate(model, "fp32", "adam", strategy, ranks).components
    assert got == {"parameters": 4 * n["parameters"], "gradients": 4 * n["gradients"],
                   "optimizer state": 2 * 4 * n["optimizer state"] + 4 * len(chunks)}


def test_zero3_falls_as_one_over_n_for_a_count():
    one = est.estimate(7_000_000_000, "bf16", "adam", "zero3", 1)
    eight = est.estimate(7_000_000_000, "bf16", "adam", "zero3", 8)
    assert one.total == 7_000_000_000 * (2 + 2 + 2 * 2) + 4
    assert eight.total == 875_000_000 * (2 + 2 + 2 * 2) + 4
    ddp = est.estimate(7_000_000_000, "bf16", "adam", "none", 8)
    assert ddp.components == one.components  # DDP replicates everything


def test_mixed_precision_adds_a_whole_2_byte_copy_and_activations_are_kept_as_given():
    e = est.estimate(1000, "bf16-mixed", "adam", "zero3", 4, activations=12345)
    assert e.components["parameters"] == 250 * 4 and e.components["weight copies"] == 1000 * 2
    assert e.components["activations"] == 12345
    assert e.total == sum(e.components.values())
    assert "activations" not in est.estimate(1000).components


def test_a_meta_model_allocates_nothing_and_counts_like_the_real_one():
    big = est.mlp_on_meta([8192, 8192, 8192, 8192, 1])
    assert all(p.is_meta for p in big.parameters())
    assert est.estimate(big).parameters == 3 * (8192 * 8192 + 8192) + 8192 + 1
    same = est.estimate(est.mlp_on_meta([13, 16, 32, 1]), "bf16-autocast", "adam", "zero2", 3)
    real = est.estimate(Net1(13, 16, 32, 1), "bf16-autocast", "adam", "zero2", 3)
    assert same == real


def test_format_lists_every_component_and_the_total():
    text = est.format_estimate(est.estimate(5000, "bf16-autocast", "adam", "zero2", 2, activations=100))
    for word in ("parameters", "gradients", "optimizer state", "weight copies", "activations", "total",
                 "1/N shard", "rank 0"):
        assert word in text
    assert f"{est.estimate(5000, 'bf16-autocast', 'adam', 'zero2', 2, activations=100).total:,}" in text


@pytest.mark.parametrize("kwargs, message", [
    ({"precision": "fp8"}, "unknown precision 'fp8': use one of fp32"),
    ({"optimizer": "lion"}, "unknown optimizer 'lion'"),
    ({"strategy": "zero4"}, "unknown strategy 'zero4': use one of none, zero1, zero2, zero3"),
    ({"ranks": 0}, "ranks must be a positive integer, got 0"),
    ({"activations": -1}, "activations must be a number of bytes >= 0, got -1"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        est.estimate(100, **kwargs)


@pytest.mark.parametrize("model", [0, -5, 1.5, "7e9", True, nn.ReLU()])
def test_bad_models(model):
    with pytest.raises(ValueError, match="parameter count|no parameters"):
        est.estimate(model)


def test_cli_prints_the_table(capsys):
    assert main(["estimate", "--params", "7e9", "--precision", "bf16", "--strategy", "zero3", "--ranks", "8"]) == 0
    out = capsys.readouterr().out
    assert "7,000,000,000 parameters" in out and f"{875_000_000 * 8 + 4:,}" in out
    assert main(["estimate", "--mlp", "512,2048,2048,1", "--activations-gib", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "5,249,025 parameters" in out and f"{2**29:,}" in out


@pytest.mark.parametrize("argv, named", [
    (["--params", "1.5"], "'1.5'"), (["--params", "0"], "'0'"), (["--params", "lots"], "'lots'"),
    (["--mlp", "512,x"], "'512,x'"), (["--mlp", "0,4"], "'0,4'"), (["--mlp", "7"], "7"),
    (["--params", "10", "--ranks", "0"], "'0'"), (["--params", "10", "--strategy", "zero4"], "'zero4'"),
    (["--params", "10", "--precision", "fp8"], "'fp8'"), (["--params", "10", "--activations-gib", "-1"], "'-1'"),
    (["--params", "10", "--mlp", "4,4"], "--mlp"), ([], "--params"),
])
def test_cli_bad_input_exits_2_with_one_error_line(argv, named, capsys):
    try:
        code = main(["estimate", *argv])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error:") and named in err[0]
