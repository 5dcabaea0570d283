"""gpulab.planner.plan and `gpulab plan`: which layouts apply, what each costs and holds, the ranking, bad input."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpulab.course.cli import main
from gpulab.comm_cost import ring_allreduce_seconds
from gpulab.sharding.estimate import estimate
from gpulab.sharding.estimate import PRECISIONS
from gpulab.planner.plan import GB, GIB, Cluster, Model, format_plan, plan, predict
from gpulab.planner.blocks import BLOCKS
from gpulab.planner.layouts import Layout, layouts, micro_batch_counts
from gpulab.planner.traffic import Call, call_seconds

MODEL = Model(parameters=1_000_000_000, layers=16, hidden=2048, sequence=1024, precision="fp32")
CLUSTER = Cluster(gpus=8, memory=80e9, latency=5e-6, bandwidth=100e9, peak_flops=100e12)
BATCH = 32


def ring_seconds(kind: str, nbytes: float, ranks: int, cluster) -> float:
    """One call of ``kind`` priced on the cluster's link (no calibration: the ring)."""
    return call_seconds(Call("tp", kind, ranks, nbytes, 1), cluster)


def send_seconds(nbytes: float, cluster) -> float:
    return call_seconds(Call("pp", "send", 2, nbytes, 1), cluster)


def test_every_layout_uses_every_gpu_and_divides():
    found = layouts(MODEL, CLUSTER, BATCH)
    assert found and all(L.gpus == 8 for L in found)
    assert all(MODEL.layers % L.pp == 0 and MODEL.hidden % L.tp == 0 and BATCH % L.dp == 0 for L in found)
    assert all(BATCH // L.dp % L.micro_batches == 0 for L in found)
    plain = [L for L in found if L.stages_per_rank == 1]
    assert all(L.schedule == ("-" if L.pp == 1 else "1F1B" if L.micro_batches >= L.pp else "GPipe") for L in plain)
    looped = [L for L in found if L.stages_per_rank > 1]  # interleaved 1F1B, 2 stages a rank, where m divides by pp
    assert looped and all(L.schedule == "Interleaved1F1B" and L.stages_per_rank == 2 and L.micro_batches % L.pp == 0
                          and MODEL.layers >= 2 * L.pp for L in looped)
    assert {L.recompute for L in found} == {"selective", "full"}  # "none" needs the model's heads
    assert any(L.zero1 for L in found) and not any(L.replicas > 1 for L in found)  # HSDP needs nodes
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
    # PaLM's 12 s h, causal: half; selective recomputation (the default) runs the scores' forward 4 s h again
    attention = (12 + 4) * MODEL.sequence * MODEL.hidden / 2 * MODEL.layers * tokens
    assert p.compute == pytest.approx((6 * MODEL.parameters * tokens + attention) / CLUSTER.peak_flops)
    both_ways = predict(Model(10**9, 16, 2048, 1024, precision="fp32", causal=False), CLUSTER, BATCH, Layout(8, 1, 1))
    assert both_ways.compute == pytest.approx((6 * MODEL.parameters * tokens + 2 * attention) / CLUSTER.peak_flops)
    tp = predict(MODEL, CLUSTER, BATCH, Layout(1, 8, 1))  # heads split over tp: attention's FLOPs too
    assert tp.compute == pytest.approx((6 * MODEL.parameters * BATCH * MODEL.sequence / 8
                                        + attention) / CLUSTER.peak_flops)
    full = predict(MODEL, CLUSTER, BATCH, Layout(8, 1, 1, recompute="full"))  # the whole forward again: + 2 N
    assert full.compute == pytest.approx(p.compute + 2 * MODEL.parameters * tokens / CLUSTER.peak_flops)
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
    loss = tokens * MODEL.hidden * 4  # the loss keeps its output's error (a model without a vocabulary)
    assert ddp.memory == state + round(act + loss)
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
    assert "expert and context parallelism" in text.splitlines()[-1]
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
    (lambda: Layout(1, 1, 2, False, 4, "Interleaved1F1B"), "stages_per_rank"),
    (lambda: Layout(1, 1, 2, False, 7, "Interleaved1F1B", stages_per_rank=2), "rounds"),
    (lambda: Layout(8, 1, 1, fsdp=True, zero1=True), "zero1"),
    (lambda: Layout(1, 8, 1, zero1=True), "zero1"),
    (lambda: Layout(8, 1, 1, fsdp=False, replicas=2), "replicas"),
    (lambda: Layout(8, 1, 1, fsdp=True, replicas=3), "replicas"),
    (lambda: Layout(8, 1, 1, fsdp=True, replicas=8), "replicas"),
    (lambda: Layout(8, 1, 1, recompute="some"), "recompute"),
    (lambda: Layout(1, 8, 1, sp_style="torch"), "sp_style"),
    (lambda: Layout(1, 8, 1, sequence_parallel=True, sp_style="jax"), "sp_style"),
    (lambda: predict(MODEL, CLUSTER, BATCH, Layout(8, 1, 1, recompute="none")), "heads"),
    (lambda: Model(10**9, 16, 2048, 8, vocab=10**6), "vocab"),
    (lambda: Model(10**9, 16, 2048, 8, active_parameters=2 * 10**9), "active_parameters"),
    (lambda: Model(10**9, 16, 2048, 8, heads=0), "heads"),
    (lambda: Cluster(16, 1e9, 1e-6, 1e9, 1e12, gpus_per_node=8), "inter_latency"),
    (lambda: Cluster(16, 1e9, 1e-6, 1e9, 1e12, gpus_per_node=6), "nodes"),
    (lambda: Cluster(8, 1e9, 1e-6, 1e9, 1e12, calibration={"alone": 0.5}), "calibration"),
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
    (lambda: predict(Model(10**9, 6, 2048, 8), CLUSTER, BATCH, Layout(1, 1, 8, False, 8, "1F1B")), "layers=6"),
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
    act += BATCH // 8 * 1024 * 2048 * 2  # the loss keeps the last layer's output error
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
    calls = 16 * 4 - 1  # the first layer's input is data: its gradient is not needed, nor its all-reduce
    assert plain.communication == pytest.approx(calls * ring_seconds("all_reduce", boundary, 8, CLUSTER))
    assert sp.communication == pytest.approx(calls * (gather + ring_seconds("reduce_scatter", boundary, 8, CLUSTER))
                                             + 16 * 2 * gather)  # Megatron's backward gathers the inputs again


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


# ------------------------------------------------------------------ stages, imbalance, the embedding and output layer
from gpulab.comm_cost import AlphaBeta  # noqa: E402
from gpulab.planner.calibration import Calibration, from_measurements  # noqa: E402
from gpulab.planner.costs import activation_bytes, rank_flops, rank_parameters  # noqa: E402
from gpulab.planner.layouts import rank_layers, stage_layers  # noqa: E402
from gpulab.planner.traffic import pipeline_sends, traffic  # noqa: E402
from gpulab.planner.validation import fit_exposed, spearman, validate  # noqa: E402

VOCAB = Model(parameters=1_000_000_000, layers=16, hidden=2048, sequence=1024, vocab=32000, heads=16)


def test_stages_split_layers_evenly_with_the_extra_ones_in_the_middle():
    assert stage_layers(126, 16) == [7] + [8] * 14 + [7]  # Llama 3 405B: one layer fewer on the first and last
    assert stage_layers(10, 4) == [2, 3, 3, 2] and stage_layers(8, 4) == [2] * 4 and stage_layers(5, 1) == [5]
    assert stage_layers(4, 3) == [1, 2, 1] and stage_layers(5, 2) == [2, 3]  # the last before the first
    assert rank_layers(16, Layout(1, 1, 4, False, 8, "Interleaved1F1B", stages_per_rank=2)) == [4, 4, 4, 4]
    assert rank_layers(10, Layout(1, 1, 2, False, 4, "Interleaved1F1B", stages_per_rank=2)) == [5, 5]
    with pytest.raises(ValueError, match="at least 8 layers"):
        stage_layers(6, 8)


def test_the_embedding_sits_on_the_first_stage_and_the_output_layer_on_the_last():
    layout = Layout(1, 2, 4, False, 4, "1F1B")
    params = rank_parameters(VOCAB, layout)
    per_layer, edge = VOCAB.layer_parameters / 2, VOCAB.vocab * VOCAB.hidden / 2  # split over tp = 2
    assert params[1] == params[2] == round(4 * per_layer)
    assert params[0] == params[3] == round(4 * per_layer + edge)
    assert sum(params) == pytest.approx(VOCAB.parameters / 2, abs=4)  # every parameter once over the stages
    flops = rank_flops(VOCAB, layout, tokens=1024)
    assert flops[3] > flops[0] == flops[1]  # the output layer computes; the embedding is a look-up
    # the pipeline runs at its slowest stage: the last
    p = predict(VOCAB, CLUSTER, BATCH, layout)
    assert p.compute == pytest.approx(max(rank_flops(VOCAB, layout, BATCH * 1024)) / CLUSTER.peak_flops)
    even = predict(Model(VOCAB.parameters, 16, 2048, 1024, heads=16), CLUSTER, BATCH, layout)  # no vocabulary
    assert p.compute > even.compute


def test_a_stage_with_more_layers_paces_the_pipeline():
    ten = Model(10**9, 10, 2048, 1024, precision="fp32")  # 10 layers on 4 stages: 2, 3, 3, 2
    layout = Layout(2, 1, 4, False, 4, "1F1B")
    assert rank_layers(10, layout) == [2, 3, 3, 2]
    flops = rank_flops(ten, layout, tokens=16 * 1024)
    assert max(flops) == pytest.approx(flops[0] * 3 / 2)
    p = predict(ten, CLUSTER, BATCH, layout)
    assert p.compute == pytest.approx(max(flops) / CLUSTER.peak_flops)  # not the mean, 2.5 layers


def test_the_last_stage_keeps_the_logits_for_the_loss():
    layout = Layout(8, 1, 1)
    per_micro = BATCH // 8 * 1024
    with_vocab = activation_bytes(VOCAB, layout, per_micro, 0)
    without = activation_bytes(Model(VOCAB.parameters, 16, 2048, 1024, heads=16), layout, per_micro, 0)
    assert with_vocab - without == per_micro * (4 * VOCAB.vocab - 2 * 2048)  # fp32 logits instead of the output error


# ------------------------------------------------------------------ interleaved schedules
def test_interleaving_divides_the_bubble_and_holds_korthikantis_activations():
    one = predict(MODEL, CLUSTER, BATCH, Layout(2, 1, 4, False, 8, "1F1B"))
    two = predict(MODEL, CLUSTER, BATCH, Layout(2, 1, 4, False, 8, "Interleaved1F1B", stages_per_rank=2))
    assert one.bubble / one.compute == pytest.approx(3 / 8) and two.bubble / two.compute == pytest.approx(3 / 16)
    for p, v in ((4, 2), (4, 4), (8, 2)):  # Korthikanti et al.: the first stage holds p (1 + (p - 1) / (p v))
        layout = Layout(1, 1, p, False, 2 * p, "Interleaved1F1B", stages_per_rank=v)
        assert layout.in_flight == pytest.approx(p * (1 + (p - 1) / (p * v)))
        assert layout.in_flight_on(p - 1) < layout.in_flight
    assert Layout(1, 1, 4, False, 8, "1F1B").in_flight == 4 and Layout(1, 1, 4, False, 8, "GPipe").in_flight == 8
    assert two.memory > one.memory  # more micro-batches of its stage in flight
    sends = {c.kind: c.count for c in traffic(MODEL, CLUSTER, two.layout, BATCH // 2 * 1024 // 8)}
    assert sends["send"] == 8 * 4  # a middle rank's two stages each send forward and back, every micro-batch


def test_pipeline_sends_count_each_stage_boundary_a_rank_owns():
    assert [pipeline_sends(4, 1, r) for r in range(4)] == [1, 2, 2, 1]
    assert [pipeline_sends(2, 1, r) for r in range(2)] == [1, 1]  # no middle stage: one way each
    assert [pipeline_sends(2, 2, r) for r in range(2)] == [3, 3]  # stages 0, 2 and 1, 3 of four
    assert [pipeline_sends(4, 2, r) for r in range(4)] == [3, 4, 4, 3]


# ------------------------------------------------------------------ recomputation
def test_recomputation_trades_activation_memory_for_compute():
    layouts_ = {r: Layout(8, 1, 1, recompute=r) for r in ("none", "selective", "full")}
    p = {r: predict(VOCAB, CLUSTER, BATCH, layout) for r, layout in layouts_.items()}
    assert p["none"].memory > p["selective"].memory > p["full"].memory
    assert p["none"].compute < p["selective"].compute < p["full"].compute
    per_micro, size, h = BATCH // 8 * 1024, 2, 2048
    scores = 5 * VOCAB.heads * VOCAB.sequence * size / 2  # Korthikanti's 5 a s bytes at 16 bits, a token and layer
    assert p["none"].memory - p["selective"].memory == round(per_micro * 16 * scores)
    block = BLOCKS["transformer"]
    kept = per_micro * 16 * size * h + per_micro * block.bytes_per_token(h, 1, size)  # inputs + one layer rebuilt
    logits = per_micro * 4 * VOCAB.vocab
    assert activation_bytes(VOCAB, layouts_["full"], per_micro, 0) == round(kept + logits)


def test_the_sequence_parallel_styles_keep_different_activations_and_send_differently():
    block, h = BLOCKS["transformer"], 2048
    for t in (2, 4, 8):  # torch keeps the gathered inputs of the QKV and first MLP matrices whole: h (4 + 30 / t)
        assert block.bytes_per_token(h, t, 2, True, "torch") == pytest.approx(h * (4 + 30 / t))
        assert block.bytes_per_token(h, t, 2, True, "torch") > block.bytes_per_token(h, t, 2, True, "megatron")
    megatron = predict(BF16, CLUSTER, BATCH, Layout(1, 8, 1, sequence_parallel=True))
    torch_sp = predict(BF16, CLUSTER, BATCH, Layout(1, 8, 1, sequence_parallel=True, sp_style="torch"))
    assert torch_sp.layout.name == "TP 8 (SP, torch)" and torch_sp.memory > megatron.memory
    assert megatron.calls["all_gather"] - torch_sp.calls["all_gather"] == 16 * 2  # Megatron gathers again in backward
    assert all(L.sp_style == "torch" for L in layouts(BF16, CLUSTER, BATCH, "torch") if L.sequence_parallel)


# ------------------------------------------------------------------ ZeRO-1, HSDP, nodes and the mesh order
NODES = Cluster(gpus=16, memory=80e9, latency=5e-6, bandwidth=100e9, peak_flops=100e12, gpus_per_node=8,
                inter_latency=20e-6, inter_bandwidth=10e9)


def test_zero1_shards_only_the_optimizer_state_and_moves_ddps_bytes_as_two_collectives():
    ddp, zero1 = (predict(BF16, CLUSTER, BATCH, Layout(8, 1, 1, zero1=z)) for z in (False, True))
    state = {s: estimate(BF16.parameters, "bf16-mixed", "adam", s, 8).total for s in ("none", "zero1")}
    assert ddp.memory - zero1.memory == state["none"] - state["zero1"] > 0
    assert set(zero1.calls) == {"reduce_scatter", "all_gather"}
    assert zero1.calls["reduce_scatter"] == zero1.calls["all_gather"] == ddp.calls["all_reduce"]  # one each a bucket
    assert zero1.layout.name == "ZeRO-1 8"


def test_hsdp_shards_inside_a_node_and_all_reduces_across_nodes():
    found = layouts(BF16, NODES, BATCH)
    hsdp = Layout(16, 1, 1, fsdp=True, replicas=2)
    assert hsdp in found and hsdp.name == "HSDP 16 (2 replicas)" and hsdp.shard_ranks == 8
    assert not any(L.replicas > 1 for L in layouts(BF16, CLUSTER, BATCH))  # one node: nothing to replicate over
    calls = traffic(BF16, NODES, hsdp, BATCH // 16 * 1024)
    assert {(c.kind, c.ranks, c.across_nodes) for c in calls} == {
        ("all_gather", 8, False), ("reduce_scatter", 8, False), ("all_reduce", 2, True)}
    fsdp = predict(BF16, NODES, BATCH, Layout(16, 1, 1, fsdp=True))
    assert predict(BF16, NODES, BATCH, hsdp).memory > fsdp.memory  # shards over 8 ranks, not 16


def test_the_mesh_order_keeps_tensor_parallelism_on_nvlink_and_puts_data_parallelism_across_nodes():
    assert all(L.tp <= 8 for L in layouts(BF16, NODES, BATCH))  # tensor parallelism stays inside a node
    calls = traffic(BF16, NODES, Layout(2, 8, 1), BATCH // 2 * 1024)
    across = {c.cls: c.across_nodes for c in calls}
    assert across == {"tp": False, "ddp": True}
    pipe = {c.cls: c.across_nodes for c in traffic(BF16, NODES, Layout(1, 4, 4, False, 4, "1F1B"), 1024)}
    assert pipe["tp"] is False and pipe["pp"] is True  # 4 x 4 ranks span two nodes: some stage boundaries cross
    inside = {c.cls: c.across_nodes for c in traffic(BF16, NODES, Layout(2, 4, 2, False, 4, "1F1B"), 1024)}
    assert inside["pp"] is False and inside["ddp"] is True
    slow, fast = (call_seconds(Call("ddp", "all_reduce", 2, 1e9, 1, a), NODES) for a in (True, False))
    assert slow == pytest.approx(2 * 20e-6 + 1e9 / 10e9) and fast == pytest.approx(2 * 5e-6 + 1e9 / 100e9)


# ------------------------------------------------------------------ calibration
MLP = Model(parameters=4 * (8 * 256 * 256 + 5 * 256), layers=4, hidden=256, sequence=8, block="mlp",
            precision="fp32")  # notebook 13's blocks
FITS = {("all_reduce", 4): AlphaBeta(4e-3, 1e-9), ("all_reduce", 2): AlphaBeta(2e-3, 1e-9),
        ("all_gather", 4): AlphaBeta(3e-3, 1e-9), ("all_gather", 2): AlphaBeta(1e-3, 1e-9),
        ("reduce_scatter", 4): AlphaBeta(4e-3, 2e-9), ("reduce_scatter", 2): AlphaBeta(2e-3, 2e-9),
        ("send", 2): AlphaBeta(3e-4, 1e-9)}
RATES = {(rows, 1024 // tp): 3e10 for rows in (16, 32, 64, 128, 256) for tp in (1, 2, 4)}


def _measured(exposed=None, alone=1.0) -> Cluster:
    return Cluster(4, 2**30, 1e-3, 1e9, 3e10, 2e10,
                   calibration=Calibration(FITS, RATES, exposed or {}, alone, "test"))


def test_a_calibrated_cluster_prices_each_call_with_its_own_fit_and_each_shape_with_its_rate():
    machine = _measured()
    call = Call("fsdp", "reduce_scatter", 4, 2e6, 1)
    assert call_seconds(call, machine) == pytest.approx(4e-3 + 2e-9 * 2e6)  # gloo's, measured: not a ring
    ring = call_seconds(call, replace(machine, calibration=None))
    assert ring == pytest.approx(3 * 1e-3 + 3 / 4 * 2e6 / 1e9)
    p = predict(MLP, machine, 32, Layout(4, 1, 1))
    assert p.compute == pytest.approx(6 * MLP.parameters * 64 / 3e10 + 2 * 16 * MLP.parameters / 2e10, rel=1e-3)
    assert p.calibration == "test" and "calibration (test)" in format_plan([p])


def test_rates_are_read_at_the_shape_interpolated_between_and_clamped_outside():
    cal = Calibration(rates={(16, 1024): 1e10, (256, 1024): 4e10})
    assert cal.rate(16, 1024) == 1e10 and cal.rate(256, 1024) == 4e10
    assert cal.rate(64, 1024) == pytest.approx(2e10)  # halfway in log size, halfway in log rate
    assert cal.rate(1, 1024) == pytest.approx(1e10) and cal.rate(4096, 1024) == pytest.approx(4e10)
    assert Calibration().rate(64, 1024) is None


def test_exposed_shares_fall_back_to_the_nearest_group_size_then_to_one():
    cal = Calibration(exposed={("tp", 4): 2.0, ("tp", 2): 1.5})
    assert cal.share("tp", 4) == 2.0 and cal.share("tp", 2) == 1.5 and cal.share("tp", 8) == 2.0
    assert cal.share("tp", 3) == 2.0  # a tie: the larger group
    assert cal.share("fsdp", 4) == 1.0  # never measured: all of it counts


@pytest.mark.parametrize("make, named", [
    (lambda: Calibration(collectives={("all_to_all", 4): AlphaBeta(1e-3, 1e-9)}), "collectives"),
    (lambda: Calibration(collectives={("send", 1): AlphaBeta(1e-3, 1e-9)}), "collectives"),
    (lambda: Calibration(rates={(16, 1024): 0.0}), "rates"),
    (lambda: Calibration(exposed={"tp": 1.0}), "exposed key"),
    (lambda: Calibration(exposed={("tp", 4): -0.5}), "exposed"),
    (lambda: Calibration(alone=0.0), "alone"),
    (lambda: Calibration(alone=1.5), "alone"),
])
def test_bad_calibrations_are_one_line_errors(make, named):
    with pytest.raises(ValueError, match=named) as info:
        make()
    assert "\n" not in str(info.value)


def test_a_calibration_from_measurements_reads_each_kind_and_each_shape():
    compute = [{"rows": 64, "tp": 1, "parameters": 1000, "seconds": [[1e-3, 2e-3, 3e-3], [2e-3, 2e-3, 9e-3]]}]
    calls = [{"collective": "all_reduce", "ranks": 4, "bytes": b, "seconds": [[1e-3 + b * 1e-9] * 3,
                                                                            [2e-3 + b * 1e-9] * 3]}
             for b in (1e3, 1e5, 1e7)]
    alone = {"rows": 64, "tp": 1, "seconds": [[1e-3] * 3, [1e-3] * 3]}
    cal = from_measurements(compute, calls, hidden=256, alone=alone, source="here")
    assert cal.rates[(64, 1024)] == pytest.approx(6 * 1000 * 64 / 2e-3)  # the typical rank's median, not the slowest
    fit = cal.fit("all_reduce", 4)
    assert fit.alpha == pytest.approx(2e-3, rel=1e-3) and fit.beta == pytest.approx(1e-9, rel=1e-3)  # slowest rank
    assert cal.alone == pytest.approx(0.5) and cal.source == "here" and cal.fit("all_gather", 4) is None


def test_ranks_sharing_a_processor_shrink_the_bubble_by_the_rate_a_rank_reaches_alone():
    layout, gpipe = Layout(1, 1, 4, False, 4, "1F1B"), Layout(1, 1, 4, False, 1, "GPipe")
    own = {L: predict(MLP, _measured(alone=1.0), 32, L) for L in (layout, gpipe)}
    busy = {L: p.bubble / ((L.pp - 1) / L.micro_batches) for L, p in own.items()}  # the formula: (p - 1) / m of it
    assert busy[layout] == pytest.approx(busy[gpipe]) and busy[layout] < own[layout].compute  # plus the optimizer
    shared = {L: predict(MLP, _measured(alone=0.5), 32, L) for L in (layout, gpipe)}  # 4 ranks on 2 cores
    assert shared[layout].bubble == 0  # the critical path at twice the speed, (1 + 3/4) / 2 of the work, fits in it
    assert shared[gpipe].bubble == pytest.approx((1 + 3) * 0.5 * busy[gpipe] - busy[gpipe])  # 4 stages in a row
    assert shared[layout].compute == own[layout].compute  # all ranks busy: the measured rate as it is
    flat = predict(MLP, _measured(alone=0.5), 32, Layout(4, 1, 1))
    assert flat.bubble == 0 and flat.compute == predict(MLP, _measured(alone=1.0), 32, Layout(4, 1, 1)).compute


# ------------------------------------------------------------------ fitting the exposed shares, and the ranking test
CALIBRATING = [Layout(4, 1, 1), Layout(4, 1, 1, fsdp=True), Layout(1, 4, 1), Layout(1, 1, 4, False, 4, "1F1B"),
               Layout(1, 2, 2, False, 4, "1F1B")]
TRUE = {("ddp", 4): 0.3, ("fsdp", 4): 1.8, ("tp", 4): 2.5, ("pp", 2): 6.0, ("tp", 2): 1.2}


def test_fit_exposed_recovers_the_shares_that_made_the_steps():
    truth = _measured(TRUE)
    steps = {layout: predict(MLP, truth, 32, layout).step for layout in CALIBRATING}
    found = fit_exposed(MLP, _measured(), 32, steps)
    assert found == pytest.approx(TRUE)
    # a step faster than the prediction without the traffic: the share stops at 0, it never goes negative
    quick = fit_exposed(MLP, _measured(), 32, {Layout(4, 1, 1): 1e-6})
    assert quick == {("ddp", 4): 0.0}


def test_fit_exposed_refuses_a_layout_that_brings_two_unknowns_and_a_cluster_without_measurements():
    with pytest.raises(ValueError, match="brings 2 traffic classes"):
        fit_exposed(MLP, _measured(), 32, {Layout(1, 2, 2, False, 4, "1F1B"): 0.1})  # tp over 2 and pp: both new
    with pytest.raises(ValueError, match="brings 0"):
        fit_exposed(MLP, _measured(TRUE), 32, {Layout(4, 1, 1): 0.1})  # nothing left to measure
    with pytest.raises(ValueError, match="calibration"):
        fit_exposed(MLP, replace(_measured(), calibration=None), 32, {Layout(4, 1, 1): 0.1})


def test_spearman_compares_orders():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1)
    assert spearman([1, 2, 3, 4, 5, 6], [1, 3, 2, 4, 5, 6]) == pytest.approx(1 - 6 * 2 / (6 * 35))  # one swap
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486833, rel=1e-6)  # a tie shares its ranks
    with pytest.raises(ValueError, match="same length"):
        spearman([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="all values equal"):
        spearman([1, 1, 1], [1, 2, 3])


def test_validate_says_which_criteria_a_ranking_meets():
    truth = _measured(TRUE)
    others = [Layout(2, 2, 1, True), Layout(4, 1, 1, False, 4), Layout(4, 1, 1, True, 2), Layout(1, 4, 1, False, 2),
              Layout(1, 1, 4, False, 8, "1F1B"), Layout(1, 1, 4, False, 1, "GPipe")]
    exact = {L: [predict(MLP, truth, 32, L).step * f for f in (0.9, 1.0, 1.2)] for L in others}
    good = validate(MLP, truth, 32, exact)
    assert good["spearman"] == pytest.approx(1) and good["worst factor"] == pytest.approx(1)
    assert good["met"] == {"layouts": True, "spearman": True, "factor": True}
    row = good["rows"][0]
    assert row["spread"] == pytest.approx(0.3) and row["fastest ms"] < row["measured ms"] < row["slowest ms"]
    twice = validate(MLP, truth, 32, {L: [2 * s for s in steps] for L, steps in exact.items()})
    assert twice["met"] == {"layouts": True, "spearman": True, "factor": False}  # right order, wrong scale
    reversed_ = dict(zip(others, reversed(list(exact.values()))))
    assert not validate(MLP, truth, 32, reversed_)["met"]["spearman"]
    assert not validate(MLP, truth, 32, dict(list(exact.items())[:5]))["met"]["layouts"]  # fewer than 6


def test_cli_takes_nodes_a_vocabulary_and_the_sequence_parallel_style(capsys):
    assert main(CLI + ["--vocab", "32000", "--heads", "16", "--sp-style", "torch", "--gpus", "16",
                       "--gpus-per-node", "8", "--inter-latency-us", "20", "--inter-bandwidth-gbs", "25",
                       "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "16 GPUs" not in out and "layouts considered" in out
    assert main(CLI + ["--gpus", "16", "--gpus-per-node", "8"]) == 2  # the link between nodes is missing
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "inter_latency" in err[0]
