"""gpulab.plan and `gpulab plan`: which layouts apply, what each costs and holds, the ranking, bad input."""

from __future__ import annotations

import pytest

from gpulab.cli import main
from gpulab.distributed.cost import ring_allreduce_seconds
from gpulab.estimate import estimate
from gpulab.estimate import PRECISIONS
from gpulab.plan import GB, GIB, Cluster, Model, format_plan, plan, predict
from gpulab.plan_costs import ring_seconds, send_seconds
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
    assert Layout(8, 1, 1, True, 4) in found  # gradient accumulation without a pipeline
    assert Layout(1, 8, 1, sequence_parallel=True) in found and Layout(1, 8, 1, sequence_parallel=False) in found
    mlp = Model(10**9, 16, 2048, 1024, block="mlp")
    assert not any(L.sequence_parallel for L in layouts(mlp, CLUSTER, BATCH))  # no sequence-parallel form known
    assert len(set(found)) == len(found)


def test_micro_batch_counts():
    assert micro_batch_counts(12, 3) == [1, 2, 3, 4, 6, 12]
    assert micro_batch_counts(8, 2) == [1, 2, 4, 8]


def test_the_bubble_is_the_formulas_share_of_the_step():
    for pp, m in ((2, 2), (4, 4), (4, 8), (8, 32)):
        p = predict(MODEL, CLUSTER, BATCH, Layout(8 // pp, 1, pp, False, m, "1F1B"))
        assert p.bubble / (p.compute + p.bubble) == pytest.approx((pp - 1) / (m + pp - 1))
    assert predict(MODEL, CLUSTER, BATCH, Layout(8, 1, 1)).bubble == 0


def test_compute_is_six_flops_a_parameter_a_token_plus_attention_at_the_peak():
    p = predict(MODEL, CLUSTER, BATCH, Layout(8, 1, 1))
    tokens = BATCH // 8 * MODEL.sequence
    attention = 12 * MODEL.sequence * MODEL.hidden / 2 * MODEL.layers * tokens  # PaLM's 12 s h, causal: half
    assert p.compute == pytest.approx((6 * MODEL.parameters * tokens + attention) / CLUSTER.peak_flops)
    both_ways = predict(Model(10**9, 16, 2048, 1024, precision="fp32", causal=False), CLUSTER, BATCH, Layout(8, 1, 1))
    assert both_ways.compute == pytest.approx((6 * MODEL.parameters * tokens + 2 * attention) / CLUSTER.peak_flops)
    tp = predict(MODEL, CLUSTER, BATCH, Layout(1, 8, 1))  # heads split over tp: attention's FLOPs too
    assert tp.compute == pytest.approx((6 * MODEL.parameters * BATCH * MODEL.sequence / 8
                                        + attention) / CLUSTER.peak_flops)
    mlp = Model(10**9, 16, 2048, 1024, block="mlp", precision="fp32")  # no attention: 6 N only
    assert predict(mlp, CLUSTER, BATCH, Layout(8, 1, 1)).compute == pytest.approx(
        6 * MODEL.parameters * tokens / CLUSTER.peak_flops)
    slow = Cluster(8, 80e9, 5e-6, 100e9, 100e12, memory_bandwidth=1e9)  # the roofline and the optimizer step
    assert predict(MODEL, slow, BATCH, Layout(8, 1, 1)).compute > p.compute


def test_efficiency_scales_the_compute_and_the_bubble():
    half = Cluster(8, 80e9, 5e-6, 100e9, 100e12, efficiency=0.5)
    for layout in (Layout(8, 1, 1), Layout(2, 1, 4, False, 8, "1F1B")):
        full, slow = predict(MODEL, CLUSTER, BATCH, layout), predict(MODEL, half, BATCH, layout)
        assert slow.compute == pytest.approx(2 * full.compute) and slow.bubble == pytest.approx(2 * full.bubble)
        assert slow.communication == full.communication
    assert "lower bound" in format_plan(plan(MODEL, CLUSTER, BATCH)) and "50%" in format_plan(plan(MODEL, half, BATCH))


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
    assert text.splitlines()[0].startswith(f"{len(ranked)} layouts considered, {len(fits)} fit in memory")
    assert f"{0.9 * 6e9 / GIB:.1f} GiB" in text.splitlines()[0]
    assert len(text.splitlines()) == 3 + 3 + 4  # the count, the table head and rule, three rows, four notes
    assert "activation checkpointing" in text.splitlines()[-1]
    assert "an estimate, not a bound" in text and "upper bound" not in text  # communication is timed at best case
    assert "38-46%" in text and "recomputed" in text  # Megatron-LM's 52% counts recomputation: not model FLOPs


@pytest.mark.parametrize("make, named", [
    (lambda: Layout(1, 1, 1, sequence_parallel=True), "sequence_parallel"),
    (lambda: Model(10, 1, 1, 1, causal="yes"), "causal"),
    (lambda: Cluster(8, 1e9, 1e-6, 1e9, 1e12, efficiency=1.5), "efficiency"),
    (lambda: Cluster(8, 1e9, 1e-6, 1e9, 1e12, efficiency=0), "efficiency"),
    (lambda: Cluster(8, 1e9, 1e-6, 1e9, 1e12, headroom=1.0), "headroom"),
    (lambda: Cluster(8, 1e9, 1e-6, 1e9, 1e12, headroom=-0.1), "headroom"),
    (lambda: predict(Model(10**9, 16, 2048, 8, block="mlp"), CLUSTER, BATCH, Layout(1, 8, 1, sequence_parallel=True)),
     "sequence-parallel"),
    (lambda: format_plan([]), "empty"),
    (lambda: predict(MODEL, CLUSTER, BATCH, "DDP 8"), "layout='DDP 8'"),
    (lambda: predict(MODEL, {"gpus": 8}, BATCH, Layout(8, 1, 1)), "cluster="),
    (lambda: Layout(8, 1, 1, fsdp="yes"), "fsdp='yes'"),
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
    assert "fit in memory" in out[0] and len(out) == 3 + 4 + 4  # the count, head and rule, 4 rows, 4 notes
    best = plan(MODEL, Cluster(8, 80 * 2**30, 5e-6, 100e9, 100e12), BATCH)[0]
    assert out[3].startswith(best.layout.name + " ")


def test_cli_memory_in_gb_or_gib(capsys):
    assert 141 * GB / GIB == pytest.approx(131.3, abs=0.05)  # an H200's 141 GB
    gib = CLI[:CLI.index("--memory-gib")] + CLI[CLI.index("--memory-gib") + 2:]
    for flag, value, usable in (("--memory-gb", "0.5", 0.9 * 0.5e9), ("--memory-gib", "0.5", 0.9 * 0.5 * GIB)):
        assert main(gib + [flag, value]) == 1
        out = capsys.readouterr().out
        assert f"({usable / GIB:.2f} GiB)" in out and "less 10% headroom" in out
    assert main(gib + ["--memory-gb", "80", "--top", "1"]) == 0
    assert f"{0.9 * 80e9 / GIB:.1f} GiB per GPU" in capsys.readouterr().out


def test_cli_says_when_nothing_fits(capsys):
    assert main(CLI[:-2] + ["--batch", "32", "--memory-gib", "0.5"]) == 1
    assert "no layout fits in 0.5 GiB" in capsys.readouterr().out


@pytest.mark.parametrize("change, named", [
    (["--gpus", "0"], "--gpus"), (["--batch", "x"], "--batch"), (["--params", "1.5"], "--params"),
    (["--block", "rnn"], "--block"), (["--batch", "33", "--layers", "7", "--hidden", "2047"], "no layout"),
    (["--memory-bandwidth-gbs", "-1"], "--memory-bandwidth-gbs"), (["--memory-gb", "80"], "--memory-gb"),
    (["--efficiency", "1.5"], "--efficiency"), (["--headroom", "1"], "--headroom"),
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


BF16 = Model(parameters=1_000_000_000, layers=16, hidden=2048, sequence=1024)  # bf16-mixed: 2-byte gathers


def test_fsdp_with_a_pipeline_gathers_once_a_step_and_holds_the_stage():
    """torchtitan's FSDP x PP: no reshard after forward, no reduce-scatter until the last micro-batch's backward."""
    stage = BF16.parameters // 4
    kind = PRECISIONS[BF16.precision]
    by_m = [predict(BF16, CLUSTER, BATCH, Layout(2, 1, 4, True, m, "1F1B")) for m in (4, 8, 16)]
    per_layer = stage / 4  # parameters: 4 layers a stage
    fsdp_part = 4 * (ring_seconds("all_gather", per_layer * kind.gather.itemsize, 2, CLUSTER)
                     + ring_seconds("reduce_scatter", per_layer * kind.grads.itemsize, 2, CLUSTER))
    for p in by_m:  # the sends grow with m; the data-parallel part is one all-gather and one reduce-scatter
        m = p.layout.micro_batches
        sends = 2 * m * send_seconds(BATCH // 2 // m * 1024 * 2048 * 2, CLUSTER)
        assert p.communication == pytest.approx(sends + fsdp_part)
        # the stage's unsharded parameters (bf16) and accumulated gradients (fp32) on top of the shards
        assert p.peak - p.memory == stage * (kind.gather.itemsize + kind.grads.itemsize)


def test_fsdp_accumulation_gathers_every_micro_batch_and_ddp_all_reduces_once():
    fsdp = [predict(BF16, CLUSTER, BATCH, Layout(8, 1, 1, True, m)) for m in (1, 2, 4)]
    assert [p.communication / fsdp[0].communication for p in fsdp] == pytest.approx([1, 2, 4])
    ddp = [predict(BF16, CLUSTER, BATCH, Layout(8, 1, 1, False, m)) for m in (1, 2, 4)]
    assert all(p.communication == pytest.approx(ddp[0].communication) for p in ddp)  # no_sync until the last


def test_accumulation_makes_an_activation_bound_layout_fit():
    one = predict(BF16, CLUSTER, BATCH, Layout(8, 1, 1, True, 1))
    four = predict(BF16, CLUSTER, BATCH, Layout(8, 1, 1, True, 4))
    act = BATCH // 8 * 1024 * 16 * BLOCKS["transformer"].bytes_per_token(2048, 1, 2)
    assert one.memory - four.memory == round(act) - round(act / 4)  # one micro-batch's activations held
    tight = Cluster(8, (four.peak + one.peak) / 2 / 0.9, 5e-6, 100e9, 100e12)
    ranked = plan(BF16, tight, BATCH)
    fits = {p.layout: p.fits for p in ranked}
    assert not fits[one.layout] and fits[four.layout]


def test_tensor_parallel_activations_follow_korthikanti():
    block, h = BLOCKS["transformer"], 2048
    for t in (1, 2, 4, 8):  # bytes per token per layer with 2-byte activations: h (10 + 24 / t), with SP 34 h / t
        assert block.bytes_per_token(h, t, 2) == pytest.approx(h * (10 + 24 / t))
        assert block.bytes_per_token(h, t, 2, sequence_parallel=True) == pytest.approx(34 * h / t)
    plain, sp = (predict(BF16, CLUSTER, BATCH, Layout(1, 8, 1, sequence_parallel=s)) for s in (False, True))
    tokens = BATCH * 1024
    assert plain.memory - sp.memory == round(tokens * 16 * h * (10 + 24 / 8)) - round(tokens * 16 * h * 34 / 8)
    assert "TP 8 (SP)" == sp.layout.name and "TP 8" == plain.layout.name
    boundary = tokens * h * 2
    gather = ring_seconds("all_gather", boundary, 8, CLUSTER)
    assert plain.communication == pytest.approx(16 * 4 * ring_seconds("all_reduce", boundary, 8, CLUSTER))
    assert sp.communication == pytest.approx(16 * (4 * (gather + ring_seconds("reduce_scatter", boundary, 8, CLUSTER))
                                                   + 2 * gather))  # backward gathers the inputs again


def test_ddp_counts_its_gradient_buckets():
    ddp = predict(MODEL, CLUSTER, BATCH, Layout(8, 1, 1))
    assert ddp.peak - ddp.memory == MODEL.parameters * 4  # fp32 gradients, a second copy in the buckets
    one_rank = Cluster(1, 80e9, 5e-6, 100e9, 100e12)
    alone = predict(MODEL, one_rank, BATCH, Layout(1, 1, 1))
    assert alone.peak == alone.memory  # no DDP on one GPU: no buckets


def test_every_link_use_is_per_direction_bus_bandwidth():
    cluster = Cluster(8, 80e9, 1e-6, 100e9, 100e12)
    pp = predict(MODEL, cluster, BATCH, Layout(1, 1, 8, False, 8, "1F1B"))
    boundary = BATCH // 8 * 1024 * 2048 * 4  # one micro-batch at a stage's edge, fp32
    assert pp.communication == pytest.approx(2 * 8 * (1e-6 + boundary / 100e9))  # a send: busbw = algbw
    assert ring_seconds("all_gather", 1e9, 8, cluster) == pytest.approx(7e-6 + 7 / 8 * 1e9 / 100e9)
    assert ring_seconds("all_reduce", 1e9, 8, cluster) == pytest.approx(
        ring_allreduce_seconds(1e9, 8, 1e-6, 1 / 100e9))
    assert ring_seconds("all_reduce", 1e9, 8, cluster) == pytest.approx(
        ring_seconds("all_gather", 1e9, 8, cluster) + ring_seconds("reduce_scatter", 1e9, 8, cluster))


def test_headroom_rejects_a_layout_that_fills_the_memory():
    layout = Layout(8, 1, 1, fsdp=True)
    peak = predict(MODEL, CLUSTER, BATCH, layout).peak
    full = dict(gpus=8, memory=peak / 0.999, latency=5e-6, bandwidth=100e9, peak_flops=100e12)
    assert predict(MODEL, Cluster(**full, headroom=0), BATCH, layout).fits
    assert not predict(MODEL, Cluster(**full), BATCH, layout).fits  # the default keeps 10% free
    assert Cluster(**full).usable_memory == pytest.approx(0.9 * full["memory"])
