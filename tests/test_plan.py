"""gpulab.plan and `gpulab plan`: which layouts apply, what each costs and holds, the ranking, bad input."""

from __future__ import annotations

import pytest

from gpulab.cli import main
from gpulab.distributed.cost import ring_allreduce_seconds
from gpulab.estimate import estimate
from gpulab.plan import Cluster, Model, format_plan, plan, predict
from gpulab.plan_layouts import BLOCKS, Layout, layouts, micro_batch_counts

MODEL = Model(parameters=1_000_000_000, layers=16, hidden=2048, sequence=1024, precision="fp32")
CLUSTER = Cluster(gpus=8, memory=80e9, latency=5e-6, bandwidth=100e9, peak_flops=100e12)
BATCH = 32


def test_every_layout_uses_every_gpu_and_divides():
    found = layouts(MODEL, CLUSTER, BATCH)
    assert found and all(L.gpus == 8 for L in found)
    assert all(MODEL.layers % L.pp == 0 and MODEL.hidden % L.tp == 0 and BATCH % L.dp == 0 for L in found)
    assert all(BATCH // L.dp % L.micro_batches == 0 for L in found)
    assert all(L.schedule == ("-" if L.pp == 1 else "1F1B" if L.micro_batches >= L.pp else "GPipe") for L in found)
    assert Layout(8, 1, 1) in found and Layout(8, 1, 1, fsdp=True) in found and Layout(1, 8, 1) in found
    assert len(set(found)) == len(found)


def test_micro_batch_counts():
    assert micro_batch_counts(12, 3) == [1, 2, 3, 4, 6, 12]
    assert micro_batch_counts(8, 2) == [1, 2, 4, 8]


def test_the_bubble_is_the_formulas_share_of_the_step():
    for pp, m in ((2, 2), (4, 4), (4, 8), (8, 32)):
        p = predict(MODEL, CLUSTER, BATCH, Layout(8 // pp, 1, pp, False, m, "1F1B"))
        assert p.bubble / (p.compute + p.bubble) == pytest.approx((pp - 1) / (m + pp - 1))
    assert predict(MODEL, CLUSTER, BATCH, Layout(8, 1, 1)).bubble == 0


def test_compute_is_six_flops_a_parameter_a_token_at_the_peak():
    p = predict(MODEL, CLUSTER, BATCH, Layout(8, 1, 1))
    assert p.compute == pytest.approx(6 * MODEL.parameters * BATCH // 8 * MODEL.sequence / CLUSTER.peak_flops)
    slow = Cluster(8, 80e9, 5e-6, 100e9, 100e12, memory_bandwidth=1e9)  # the roofline and the optimizer step
    assert predict(MODEL, slow, BATCH, Layout(8, 1, 1)).compute > p.compute


def test_communication_follows_the_ring_and_each_parallelism():
    ddp = predict(MODEL, CLUSTER, BATCH, Layout(8, 1, 1))
    per_layer = MODEL.parameters * 4 / MODEL.layers
    assert ddp.communication == pytest.approx(
        MODEL.layers * ring_allreduce_seconds(per_layer, 8, CLUSTER.latency, 1 / CLUSTER.bandwidth))
    fsdp = predict(MODEL, CLUSTER, BATCH, Layout(8, 1, 1, fsdp=True))
    assert fsdp.communication > ddp.communication  # two all-gathers and a reduce-scatter: 3 (n-1)/n against 2
    tp = predict(MODEL, CLUSTER, BATCH, Layout(1, 8, 1))
    assert tp.communication > 0 and predict(MODEL, CLUSTER, BATCH, Layout(1, 1, 8, False, 8, "1F1B")).communication > 0


def test_memory_is_the_estimate_plus_the_activations_in_flight():
    ddp = predict(MODEL, CLUSTER, BATCH, Layout(8, 1, 1))
    state = estimate(MODEL.parameters, "fp32", "adam", "none", 8).total
    tokens = BATCH // 8 * MODEL.sequence
    act = tokens * MODEL.layers * BLOCKS["transformer"].bytes_per_token(MODEL.hidden, 1, 4)
    assert ddp.memory == state + round(act)
    fsdp = predict(MODEL, CLUSTER, BATCH, Layout(8, 1, 1, fsdp=True))
    assert fsdp.memory < ddp.memory and fsdp.peak >= fsdp.memory
    gpipe = predict(MODEL, CLUSTER, BATCH, Layout(2, 1, 4, False, 16, "GPipe"))
    one = predict(MODEL, CLUSTER, BATCH, Layout(2, 1, 4, False, 16, "1F1B"))
    assert gpipe.memory > one.memory and gpipe.step == pytest.approx(one.step)
    assert Layout(2, 1, 4, False, 16, "1F1B").in_flight == 4 and Layout(2, 1, 4, False, 16, "GPipe").in_flight == 16


def test_the_plan_ranks_what_fits_fastest_first():
    small = Cluster(8, 6e9, 5e-6, 100e9, 100e12)
    ranked = plan(MODEL, small, BATCH)
    fits = [p for p in ranked if p.fits]
    assert fits and not all(p.fits for p in ranked)
    assert ranked[: len(fits)] == fits
    assert [p.step for p in fits] == sorted(p.step for p in fits)
    assert all(p.peak <= small.memory for p in fits)
    text = format_plan(ranked, top=3)
    assert text.splitlines()[0] == f"{len(ranked)} layouts considered, {len(fits)} fit in memory"
    assert len(text.splitlines()) == 3 + 3  # the count, the table head and rule, three rows


@pytest.mark.parametrize("make, named", [
    (lambda: Layout(2, 1, 1, False, 2, "-"), "micro-batch"),
    (lambda: Layout(1, 1, 4, False, 2, "1F1B"), "1F1B needs"),
    (lambda: Layout(1, 1, 2, False, 2, "-"), "pipeline"),
    (lambda: Layout(1, 2, 1, True), "fsdp"),
    (lambda: Layout(0, 1, 1), "dp"),
    (lambda: Layout(1, 1, 2, False, 2, "Zero"), "schedule"),
    (lambda: Model(0, 1, 1, 1), "parameters"),
    (lambda: Model(10, 1, 1, 1, block="rnn"), "block"),
    (lambda: Model(10, 1, 1, 1, precision="fp8"), "precision"),
    (lambda: Cluster(8, -1.0, 1e-6, 1e9, 1e12), "memory"),
    (lambda: Cluster(8, 1e9, 1e-6, 1e9, 1e12, memory_bandwidth=0), "memory_bandwidth"),
    (lambda: predict(MODEL, CLUSTER, BATCH, Layout(4, 1, 1)), "uses 4 GPUs"),
    (lambda: predict(MODEL, CLUSTER, 12, Layout(8, 1, 1)), "batch=12"),
    (lambda: predict(Model(10**9, 12, 2048, 8), CLUSTER, BATCH, Layout(1, 1, 8, False, 8, "1F1B")), "layers=12"),
    (lambda: predict(MODEL, CLUSTER, BATCH, Layout(1, 1, 8, False, 64, "1F1B")), "micro-batches"),
    (lambda: plan(Model(10**9, 7, 2047, 8), CLUSTER, 33), "no layout"),
])
def test_bad_input_is_a_one_line_value_error(make, named):
    with pytest.raises(ValueError, match=named) as info:
        make()
    assert "\n" not in str(info.value)


CLI = ["plan", "--params", "1e9", "--layers", "16", "--hidden", "2048", "--seq", "1024", "--gpus", "8",
       "--memory-gib", "80", "--latency-us", "5", "--bandwidth-gbs", "100", "--peak-tflops", "100", "--batch", "32"]


def test_cli_prints_the_ranking(capsys):
    assert main(CLI + ["--top", "4", "--precision", "fp32"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("fit in memory") and len(out) == 3 + 4
    best = plan(MODEL, Cluster(8, 80 * 2**30, 5e-6, 100e9, 100e12), BATCH)[0]
    assert out[3].startswith(best.layout.name)


def test_cli_says_when_nothing_fits(capsys):
    assert main(CLI[:-2] + ["--batch", "32", "--memory-gib", "0.5"]) == 1
    assert "no layout fits in 0.5 GiB" in capsys.readouterr().out


@pytest.mark.parametrize("change, named", [
    (["--gpus", "0"], "--gpus"), (["--batch", "x"], "--batch"), (["--params", "1.5"], "--params"),
    (["--block", "rnn"], "--block"), (["--batch", "33", "--layers", "7", "--hidden", "2047"], "no layout"),
    (["--memory-bandwidth-gbs", "-1"], "--memory-bandwidth-gbs"),
])
def test_cli_bad_input_exits_2_with_one_error_line(change, named, capsys):
    with pytest.raises(SystemExit) if named.startswith("--") else _no_raise():
        code = main(CLI + change)
        assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and named in err[0], err


def test_cli_needs_the_model_and_cluster(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["plan", "--params", "1e9"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


class _no_raise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
