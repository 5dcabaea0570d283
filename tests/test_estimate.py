"""gpulab.sharding.estimate and `gpulab estimate`: arithmetic checked against real tensors, steps and the profiler."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpulab.sharding import estimate as est
from gpulab import memory
from gpulab.course.cli import main
from gpulab.models import Net1, mlp

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


def test_fsdp_mixed_precision_gathers_per_unit_and_activations_are_kept_as_given():
    e = est.estimate(1024, "bf16-mixed", "adam", "zero3", 4, activations=12345, units=4)
    assert e.components["parameters"] == 256 * 4 and "weight copies" not in e.components
    assert e.components["activations"] == 12345
    assert e.total == sum(e.components.values())
    assert "activations" not in est.estimate(1000).components
    # Outside zero3 FSDP2's policy keeps a whole bfloat16 copy gathered.
    assert est.estimate(1000, "bf16-mixed", "adam", "zero2", 4).components["weight copies"] == 1000 * 2
    # Per unit of 256 numbers, 2 bytes each: this unit and the prefetched one, then the unit's gradients.
    assert e.peak.parts["gathered weights"] == 2 * 256 * 2 and e.peak.parts["unsharded gradients"] == 256 * 2
    assert e.peak.parts["activations"] == 12345 and e.peak.total == sum(e.peak.parts.values())


def test_classic_mixed_precision_reproduces_the_zero_paper():
    """ZeRO (Rajbhandari et al. 2019, arxiv.org/abs/1910.02054), Figure 1: 7.5 B parameters over 64 GPUs, K = 12,
    in GB of 10^9 bytes: 120 (DDP), 31.4 (P_os), 16.6 (P_os+g), 1.9 (P_os+g+p)."""
    paper = {"none": 120.0, "zero1": 31.4, "zero2": 16.6, "zero3": 1.9}
    got = {s: round(est.estimate(7_500_000_000, "fp16-master", "adam", s, 64).total / 1e9, 1) for s in paper}
    assert got == paper
    one = est.estimate(1000, "fp16-master", "adam").components  # 2 + 2 + 8 + 4 bytes a parameter
    assert one == {"parameters": 2000, "gradients": 2000, "optimizer state": 8000 + 4, "master weights": 4000}
    # The master weights are sharded with the optimizer state, from zero1 on.
    assert est.estimate(1000, "fp16-master", "adam", "zero1", 4).components["master weights"] == 1000
    assert est.estimate(1000, "fp16-master", "adam", "zero1", 4).components["parameters"] == 2000


def test_fsdp_peak_by_hand():
    """Units of 6 numbers over 2 ranks, fp32, SGD: shards of 3 (12 bytes), a unit gathered 24 bytes, its gradients
    24, its reduce-scatter buffer 24. The peak comes in backward, when a unit computes next to the prefetched
    one and the buffer of the unit before."""
    e = est.estimate(24, "fp32", "sgd", "zero3", 2, units=4)
    assert e.peak.at == "backward of unit 1"
    assert e.peak.parts == {"parameters": 48, "gradient shards": 24, "gathered weights": 48, "unsharded gradients": 24,
                            "reduce-scatter buffer": 24}
    kept = est.estimate(24, "fp32", "sgd", "zero3", 2, units=4, reshard_after_forward=False)
    assert kept.peak.at == "backward of unit 2"  # units 0, 1, 2 all still gathered
    assert kept.peak.parts["gathered weights"] == 72 and kept.peak.total == e.peak.total + 12
    two = est.estimate(12, "fp32", "sgd", "zero3", 2, units=2)
    cpu = est.estimate(12, "fp32", "sgd", "zero3", 2, units=2, on_cpu=True)
    assert (two.peak.at, two.peak.total) == ("backward of unit 0", 24 + 12 + 24 + 24 + 24)
    assert (cpu.peak.at, cpu.peak.total) == ("reduce-scatter of unit 1", 24 + 24 + 24 + 24 + 24)
    assert cpu.peak.parts["copies into the buffer (CPU)"] == 24
    # Padding: 5 rows over 2 ranks are stored as 3 + 3; the gathered unit is 6 rows, and while its forward
    # copies it out of the all-gather's buffer both are alive (one unit, the root: at the forward).
    odd = est.estimate(mlp([4, 5], device="meta"), "fp32", "sgd", "zero3", 2, units=[])
    assert odd.peak.at == "forward of root" and odd.peak.parts["gathered weights"] == 2 * (2 * (3 * 4 + 3) * 4)


def test_units_from_modules_and_from_fully_shard():
    model = mlp([8, 16, 16, 1], device="meta")
    layers = [m for m in model if isinstance(m, nn.Linear)]
    e = est.estimate(model, "fp32", "adam", "zero3", 2, units=layers[1:])
    assert e.units == 3  # the first Linear stays with the root, gathered for the whole step
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        mesh = init_device_mesh("cpu", (1,))
        for layer in layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        found = est.estimate(model, "fp32", "adam", "zero3", 2)
        assert found.units == 3 and found.peak == est.estimate(model, "fp32", "adam", "zero3", 2, units=layers).peak
    finally:
        dist.destroy_process_group()


def test_a_meta_model_allocates_nothing_and_counts_like_the_real_one():
    big = mlp([8192, 8192, 8192, 8192, 1], device="meta")
    assert all(p.is_meta for p in big.parameters())
    assert est.estimate(big).parameters == 3 * (8192 * 8192 + 8192) + 8192 + 1
    same = est.estimate(mlp([13, 16, 32, 1], device="meta"), "bf16-autocast", "adam", "zero2", 3)
    real = est.estimate(Net1(13, 16, 32, 1), "bf16-autocast", "adam", "zero2", 3)
    assert same == real


def test_format_lists_every_component_and_the_total():
    text = est.format_estimate(est.estimate(5000, "bf16-autocast", "adam", "zero2", 2, activations=100))
    for word in ("parameters", "gradients", "optimizer state", "weight copies", "activations", "total",
                 "1/N shard", "rank 0"):
        assert word in text
    assert "peak" not in text
    whole = est.format_estimate(est.estimate(5000, "fp32", "adam", "zero3", 2))
    assert "1 unit(s)" in whole and "the whole model is gathered at once" in whole
    assert f"{est.estimate(5000, 'bf16-autocast', 'adam', 'zero2', 2, activations=100).total:,}" in text


@pytest.mark.parametrize("kwargs, message", [
    ({"precision": "fp8"}, "unknown precision 'fp8': use one of fp32"),
    ({"optimizer": "lion"}, "unknown optimizer 'lion'"),
    ({"strategy": "zero4"}, "unknown strategy 'zero4': use one of none, zero1, zero2, zero3"),
    ({"ranks": 0}, "ranks=0 must be a whole number >= 1"),
    ({"activations": -1}, r"activations \(bytes\)=-1 must be a whole number >= 0"),
    ({"units": 2}, "describe FSDP2's zero3, not strategy 'none'"),
    ({"strategy": "zero1", "reshard_after_forward": False}, "not strategy 'zero1'"),
    ({"strategy": "zero3", "units": 0}, r"units \(for a parameter count\)=0 must be a whole number >= 1"),
    ({"strategy": "zero3", "units": 101}, "units=101 is more than the 100 parameters"),
    ({"strategy": "zero3", "units": [nn.Linear(2, 2)]}, r"units \(for a parameter count\)=.* must be a whole number >= 1"),
    ({"strategy": "zero3", "reshard_after_forward": "no"}, "reshard_after_forward must be True or False"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        est.estimate(100, **kwargs)


@pytest.mark.parametrize("units, message", [
    (3, "units=3 as a number needs a parameter count"), (["layer"], "units must be a number or a list of nn.Module"),
    ([nn.Linear(3, 3)], "units must be modules of the model")])
def test_bad_units_for_a_model(units, message):
    with pytest.raises(ValueError, match=message):
        est.estimate(mlp([4, 4], device="meta"), "fp32", "adam", "zero3", 2, units=units)


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
    assert main(["estimate", "--params", "7.5e9", "--precision", "bf16-mixed", "--strategy", "zero3", "--ranks", "64",
                 "--units", "32"]) == 0
    out = capsys.readouterr().out
    peak = est.estimate(7_500_000_000, "bf16-mixed", "adam", "zero3", 64, units=32).peak
    assert "32 unit(s), reshard after forward" in out and f"{peak.total:,}" in out and "gathered weights" in out
    assert main(["estimate", "--mlp", "64,64,1", "--strategy", "zero3", "--ranks", "2", "--units", "layers",
                 "--keep-after-forward"]) == 0
    assert "2 unit(s), kept gathered after forward" in capsys.readouterr().out


@pytest.mark.parametrize("argv, named", [
    (["--params", "1.5"], "'1.5'"), (["--params", "0"], "'0'"), (["--params", "lots"], "'lots'"),
    (["--mlp", "512,x"], "'512,x'"), (["--mlp", "0,4"], "'0,4'"), (["--mlp", "7"], "7"),
    (["--params", "10", "--ranks", "0"], "'0'"), (["--params", "10", "--strategy", "zero4"], "'zero4'"),
    (["--params", "10", "--precision", "fp8"], "'fp8'"), (["--params", "10", "--activations-gib", "-1"], "'-1'"),
    (["--params", "10", "--mlp", "4,4"], "--mlp"), ([], "--params"),
    (["--params", "10", "--units", "2"], "--strategy none"), (["--params", "10", "--keep-after-forward"], "zero3"),
    (["--params", "10", "--strategy", "zero3", "--units", "x"], "'x'"),
    (["--params", "10", "--strategy", "zero3", "--units", "layers"], "--units layers needs --mlp"),
    (["--mlp", "4,4", "--strategy", "zero3", "--units", "2"], "use --units layers"),
    (["--params", "10", "--strategy", "zero3", "--units", "11"], "units=11"),
])
def test_cli_bad_input_exits_2_with_one_error_line(argv, named, capsys):
    try:
        code = main(["estimate", *argv])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error:") and named in err[0]
