"""Collectives and their cost: what each rank ends with, busbw factors, the alpha/beta fit, DDP's buckets,
no_sync accumulation = one big batch with one all-reduce per bucket, and notebook 09's exercise check.

One 2-rank launch (module-scoped fixture) serves every test that needs ranks.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from gpulab import comm_cost as cost
from gpulab.distributed.collectives import ddp_profile
from gpulab.distributed.collectives.driver import (after_last_arrival, bucket_sweep_rows, check_sizes, expected_semantics,
                                            fit_sweep, run_collectives, semantics_table, traffic_rows)
from gpulab.exercises.collectives import PROBE_RANKS, RankScenario, check_rank_limit, check_step_seconds
from gpulab.exercises.quiz import check
from gpulab.step import train_step

STEPS = 2


@pytest.fixture(scope="module")
def launch():
    return run_collectives(2, parts=("semantics", "sweep", "ddp", "fsdp"), sizes=(64, 4096), repeats=1, steps=STEPS,
                           ddp_parts=("buckets", "accumulate"), timeout=180)


# ----------------------------------------------------------------------------- with ranks


@pytest.mark.slow
def test_every_rank_ends_with_what_each_collective_defines(launch):
    want = expected_semantics(2)
    for name, per_rank in want.items():
        assert [s[name]["after"] for s in launch.semantics] == per_rank, name
    assert [s["broadcast"]["before"] for s in launch.semantics] == [[0, 1], [10, 11]]
    assert want["all_reduce"] == [[10, 12], [10, 12]]  # computed independently: 0 + 10, 1 + 11
    assert want["reduce_scatter"] == [[10], [12]]
    assert "rank 1: [10, 11] -> [10, 12]" in semantics_table(launch.semantics, "all_reduce")


@pytest.mark.slow
def test_sweep_rows_carry_algbw_and_busbw(launch):
    assert [(r["collective"], r["bytes"]) for r in launch.sweep] == [(c, b) for c in cost.COLLECTIVES for b in (64, 4096)]
    for r in launch.sweep:
        assert r["seconds"] > 0
        assert r["algbw"] == pytest.approx(r["bytes"] / r["seconds"])
        assert r["busbw"] == pytest.approx(r["algbw"] * cost.bus_factor(r["collective"], 2))
    assert isinstance(fit_sweep(launch.sweep, "all_reduce"), cost.AlphaBeta)


def test_sweep_sizes_take_turns_so_a_burst_of_load_slows_every_size_alike(monkeypatch):
    from gpulab.distributed.collectives import worker as collectives_worker

    order = []
    monkeypatch.setattr(collectives_worker.dist, "barrier", lambda: None)
    monkeypatch.setattr(collectives_worker, "call", lambda name, inp, out: order.append((name, inp.numel() * 4)))
    rows = collectives_worker.sweep(("all_reduce", "broadcast"), [64, 256], 3, 1, torch.device("cpu"))
    assert order == [(c, b) for c in ("all_reduce", "broadcast") for b in [64, 256] * 4]  # a warm-up, then 3 rounds
    assert [(r["collective"], r["bytes"], len(r["seconds"])) for r in rows] == [
        ("all_reduce", 64, 3), ("all_reduce", 256, 3), ("broadcast", 64, 3), ("broadcast", 256, 3)]


@pytest.mark.slow
def test_all_reduces_per_step_follow_bucket_cap(launch):
    grads = cost.gradient_bytes(ddp_profile.build("deep"))[::-1]
    counts = []
    for per_rank in zip(*(r["buckets"] for r in launch.ddp_per_rank)):
        row = per_rank[0]
        want = cost.ddp_buckets(grads, row["bucket_cap_mb"])
        assert all(r["calls_per_step"] == len(want) for r in per_rank), (row["bucket_cap_mb"], want)
        if row["bucket_sizes"] is not None:
            assert row["bucket_sizes"] == want
        counts.append(len(want))
    assert len(set(counts)) >= 3  # the cap really changes the number of all-reduces


@pytest.mark.slow
def test_no_sync_accumulation_equals_one_big_batch_with_one_all_reduce_per_bucket(launch):
    rows = {r["variant"]: r for r in launch.ddp["accumulate"]}
    buckets = len(cost.ddp_buckets(cost.gradient_bytes(ddp_profile.build("deep"))[::-1]))
    assert rows["one batch"]["calls_per_step"] == buckets
    assert rows["no_sync"]["calls_per_step"] == buckets
    assert rows["all-reduce every micro-batch"]["calls_per_step"] == ddp_profile.ACCUMULATE * buckets
    for r in rows.values():
        assert r["max_weight_difference"] < 1e-6 and r["changed_from_start"] > 1e-3, r
    # independently: one process on both ranks' rows in one batch, the same number of steps
    model = ddp_profile.build("deep")
    opt = torch.optim.SGD(model.parameters(), lr=ddp_profile.LR)
    X, y = (torch.cat(t) for t in zip(*(ddp_profile.rows("deep", r) for r in range(2))))
    for _ in range(1 + STEPS):
        train_step(model, opt, X, y)
    got = launch.no_sync_weights
    assert max((got[k] - v).abs().max().item() for k, v in model.state_dict().items()) < 1e-6


@pytest.mark.slow
def test_first_step_has_one_bucket_then_ddp_rebuilds_before_the_next_forward(launch):
    deep = ddp_profile.build("deep")
    buckets = len(cost.ddp_buckets(cost.gradient_bytes(deep)[::-1]))
    assert buckets > 1
    for row in launch.ddp["buckets"]:
        assert row["first_step_calls"] == 1, row["bucket_cap_mb"]  # every gradient in one bucket at first
    rows = {r["variant"]: r for r in launch.ddp["accumulate"]}
    k = ddp_profile.ACCUMULATE
    # without no_sync the first step's first backward uses one bucket, the next k - 1 the rebuilt ones
    assert rows["all-reduce every micro-batch"]["first_step_calls"] == 1 + (k - 1) * buckets
    # the reducer scales each gradient once per synchronised backward: one per parameter tensor
    tensors = len(list(deep.parameters()))
    assert rows["one batch"]["divides_per_step"] == tensors
    assert rows["no_sync"]["divides_per_step"] == tensors
    assert rows["all-reduce every micro-batch"]["divides_per_step"] == k * tensors


@pytest.mark.slow
def test_gloo_reduce_scatter_runs_an_all_reduce_of_the_whole_input(launch):
    names = [name for name, _ in launch.reduce_scatter_ops]
    assert names[0] == "c10d::_reduce_scatter_base_"
    assert ["gloo:all_reduce", [2 * 1024]] in launch.reduce_scatter_ops  # 2 ranks x 1024 floats
    assert "gloo:reduce_scatter" not in names


@pytest.mark.slow
def test_fsdp2_gathers_each_unit_twice_and_counted_bytes_match_the_padded_prediction(launch):
    f = launch.fsdp
    assert f["units"] == ["layer1", "layer2", "layer3"]
    assert f["calls_per_step"] == {"all_gather": 6, "reduce_scatter": 3}
    padded = (16 * 13 + 16 + 32 * 16 + 32 + 2 * 32 + 2) * 4  # layer3's one row padded to 2 (2 ranks)
    assert f["bytes_per_step"] == {"all_gather": 2 * padded, "reduce_scatter": padded}
    assert f["gradient_bytes"] == 801 * 4
    ddp_like = type(launch)(**{**launch.__dict__, "ddp": {"predict": [
        {"model": "net1", "calls_per_step": 1.0, "gradient_bytes": 3204, "bucket_sizes": [3204]}]}})
    ddp, fsdp = traffic_rows(ddp_like)
    assert ddp["sent_counted"] == ddp["sent_predicted"] == 3204  # 2(n-1)/n = 1 at n = 2
    assert fsdp["sent_counted"] == fsdp["sent_predicted_padded"] == 1.5 * padded
    assert fsdp["sent_predicted"] == 1.5 * 3204 < fsdp["sent_counted"]


# ----------------------------------------------------------------------------- pure functions


@pytest.mark.parametrize("name, n, factor", [("all_reduce", 1, 0.0), ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75),
                                             ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875),
                                             ("broadcast", 8, 1.0)])
def test_bus_factor_follows_nccl_tests(name, n, factor):
    assert cost.bus_factor(name, n) == pytest.approx(factor)
    assert cost.busbw(name, 1e9, 0.01, n) == pytest.approx(1e11 * factor)


def test_alpha_beta_fit_recovers_synthetic_lines():
    sizes = [2**k for k in range(10, 25, 2)]
    exact = cost.fit_alpha_beta(sizes, [50e-6 + 1e-9 * s for s in sizes])
    assert exact.alpha == pytest.approx(50e-6, rel=1e-6) and exact.beta == pytest.approx(1e-9, rel=1e-6)
    assert exact.bandwidth == pytest.approx(1e9, rel=1e-6)
    rng = random.Random(0)
    noisy = [(50e-6 + 1e-9 * s) * (1 + rng.uniform(-0.02, 0.02)) for s in sizes]
    for relative in (True, False):
        fit = cost.fit_alpha_beta(sizes, noisy, relative=relative)
        assert fit.beta == pytest.approx(1e-9, rel=0.05)
    assert cost.fit_alpha_beta(sizes, noisy).alpha == pytest.approx(50e-6, rel=0.1)  # relative weights keep alpha


def test_ddp_buckets_close_at_the_cap_first_bucket_small_by_default():
    mib = cost.MIB
    grads = [4, 8192, 8192, 16 * mib, 8192, 4 * mib]  # 512-2048-2048-1, gradients in the order they are ready
    assert cost.ddp_buckets(grads) == [16 * mib + 16388, 4 * mib + 8192]
    assert cost.ddp_buckets(grads, 25, first_bucket_mb=25) == [sum(grads)]
    assert cost.ddp_buckets([mib] * 5, 2, first_bucket_mb=2) == [2 * mib, 2 * mib, mib]
    assert cost.ddp_buckets([mib] * 5, 2, first_bucket_mb=1) == [mib, 2 * mib, 2 * mib]
    if cost.explicit_cap_sets_first_bucket():  # torch 2.13: an explicit cap applies to the first bucket too
        assert cost.ddp_buckets(grads, 25) == [sum(grads)]
    assert cost.ddp_buckets([100], 25, first_bucket_mb=1) == [100]
    fit = cost.AlphaBeta(1e-3, 1e-9)
    assert cost.predict_allreduce_seconds([100, 1000], fit) == pytest.approx(2e-3 + 1100e-9)


def test_ring_model_and_where_ranks_stop_helping():
    fit = cost.AlphaBeta(3e-4, 2e-9)
    alpha, beta = cost.ring_from_fit(fit, 4)
    assert cost.ring_allreduce_seconds(1e6, 4, alpha, beta) == pytest.approx(fit.seconds(1e6))
    assert cost.ring_allreduce_seconds(1e6, 1, alpha, beta) == 0.0
    args = (2e-3, 512, 4e6, alpha, beta)
    times = {n: cost.step_seconds(n, *args) for n in range(1, 200)}
    best = cost.best_rank_count(*args, max_ranks=199)
    assert best == min(times, key=times.get)
    assert 1 < best < 199 and abs(best - math.sqrt((2e-3 * 512 - 2 * 4e6 * beta) / (2 * alpha))) <= 1  # calculus
    assert cost.best_rank_count(2e-3, 512, 4e6, 0.0, beta, max_ranks=64) == 64  # no latency: always faster


def test_bytes_sent_per_step_ddp_two_psi_fsdp_three_psi():
    psi = 8e9
    assert cost.bytes_sent_per_step("ddp", psi, 8) == pytest.approx(2 * 7 / 8 * psi)
    assert cost.bytes_sent_per_step("fsdp", psi, 8) == pytest.approx(3 * 7 / 8 * psi)
    assert cost.bytes_sent_per_step("fsdp", psi, 8, regather=False) == pytest.approx(cost.bytes_sent_per_step("ddp", psi, 8))
    assert cost.bytes_sent_per_step("fsdp", psi, 1) == 0.0
    assert cost.ring_bytes_sent("all_gather", 1000, 4) == 750


def test_fsdp_padded_bytes_rounds_dim0_up_to_the_ranks():
    assert cost.fsdp_padded_bytes([(16, 13), (1, 32), (1,)], 2) == (208 + 64 + 2) * 4
    assert cost.fsdp_padded_bytes([(10, 3)], 4, element_size=2) == 12 * 3 * 2
    assert cost.fsdp_padded_bytes([(8, 8)], 8) == 256  # even: no padding


def test_ddp_bucket_defaults_are_what_ddp_uses_and_fall_back_when_absent(monkeypatch):
    from torch.nn.parallel import distributed as ddp_module

    from gpulab import torch_private

    got = cost.ddp_bucket_defaults()
    assert (got["bucket_cap_mb"], got["first_bucket_mb"]) == (cost.DOCUMENTED_BUCKET_MB, cost.DOCUMENTED_FIRST_BUCKET_MB)
    if hasattr(ddp_module, "_BucketCapacityConfig"):  # torch 2.13: the object DDP itself builds agrees
        config = ddp_module._BucketCapacityConfig.create(bucket_cap_mb=None, bucket_cap_mb_list=None,
                                                         use_python_reducer=False)
        assert config.bucket_bytes_cap == got["bucket_cap_mb"] * cost.MIB
        assert config.first_bucket_bytes_cap == got["first_bucket_mb"] * cost.MIB
    assert "documented" not in got["source"]["bucket_cap_mb"]
    monkeypatch.delattr(ddp_module, "_DEFAULT_BUCKET_CAP_MB", raising=False)
    monkeypatch.setattr(torch_private, "_ddp_source", lambda: "")
    fallback = cost.ddp_bucket_defaults()
    assert fallback["bucket_cap_mb"] == cost.DOCUMENTED_BUCKET_MB
    assert "documented" in fallback["source"]["bucket_cap_mb"]


def test_bucket_sweep_rows_pick_the_nearest_sweep_size():
    from types import SimpleNamespace

    sweep = [{"collective": "all_reduce", "bytes": b, "seconds": t} for b, t in ((1024, 1e-3), (4096, 2e-3), (16384, 4e-3))]
    result = SimpleNamespace(sweep=sweep, ddp={"predict": [{"model": "net1", "bucket_sizes": [3204, 15000]}]})
    fit = cost.AlphaBeta(1e-3, 1e-7)
    rows = bucket_sweep_rows(result, fit)
    assert [(r["bucket_bytes"], r["sweep_bytes"], r["sweep_ms"]) for r in rows] == [(3204, 4096, 2.0), (15000, 16384, 4.0)]
    assert rows[0]["fit_at_bucket_ms"] == pytest.approx(fit.seconds(3204) * 1e3)
    with pytest.raises(ValueError, match="no all_reduce sweep"):
        bucket_sweep_rows(SimpleNamespace(sweep=[], ddp=result.ddp), fit)


@pytest.mark.parametrize("call, match", [
    (lambda: cost.bus_factor("all_reduce", 0), "ranks=0"),
    (lambda: cost.bus_factor("all_reduce", 2.5), "ranks=2.5"),
    (lambda: cost.bus_factor("gather", 2), "'gather' is not one of"),
    (lambda: cost.algbw(0, 1.0), "nbytes=0"),
    (lambda: cost.algbw(10, -1.0), "seconds=-1.0"),
    (lambda: cost.fit_alpha_beta([1, 2], [1.0]), "one time per size"),
    (lambda: cost.fit_alpha_beta([8, 8], [1.0, 2.0]), "two different sizes"),
    (lambda: cost.fit_alpha_beta([8, -8], [1.0, 2.0]), "nbytes=-8"),
    (lambda: cost.ddp_buckets([4], 0), "bucket_cap_mb=0"),
    (lambda: cost.predict_allreduce_seconds([], cost.AlphaBeta(1, 1)), "empty"),
    (lambda: cost.ring_from_fit(cost.AlphaBeta(1, 1), 1), "at least 2 ranks"),
    (lambda: cost.best_rank_count(1e-3, 0, 10, 1e-4, 1e-9), "batch=0"),
    (lambda: check_sizes([1024, 100], 4), "size 100 must be"),
    (lambda: check_sizes([], 2), "sizes is empty"),
    (lambda: run_collectives(0), "nproc=0"),
    (lambda: run_collectives(2, parts=("semantic",)), "parts="),
    (lambda: after_last_arrival([[[0, 1]], []]), "different numbers of calls"),
    (lambda: RankScenario(1e-3, 64, 100, -1.0, 0.0), "alpha=-1.0"),
    (lambda: cost.bytes_sent_per_step("zero", 10, 2), "'zero' is not one of"),
    (lambda: cost.fsdp_padded_bytes([(4,)], 0), "ranks=0"),
])
def test_bad_inputs_raise_one_line_value_errors(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_after_last_arrival_leaves_waiting_out():
    assert after_last_arrival([[[0, 10e3]], [[6e3, 10.5e3]]]) == [pytest.approx(4.5e-3)]


# ----------------------------------------------------------------------------- exercise and questions


SCENARIO = RankScenario(compute_per_sample=1.5e-3, batch=1024, nbytes=20_996_100, alpha=1.7e-3, beta=1.5e-9)
OTHER = RankScenario(compute_per_sample=4e-4, batch=512, nbytes=4_000_000, alpha=3e-4, beta=2e-9, max_ranks=64)


def model_of(sc):
    def step_seconds(n):
        compute = sc.compute_per_sample * sc.batch / n
        return compute if n == 1 else compute + 2 * (n - 1) * sc.alpha + 2 * (n - 1) / n * sc.nbytes * sc.beta
    return step_seconds


def flawed(sc, flaw):
    """The learner's step_seconds with one typical mistake."""
    def step_seconds(n):
        c, lat, bw = sc.compute_per_sample * sc.batch / n, 2 * (n - 1) * sc.alpha, 2 * (n - 1) / n * sc.nbytes * sc.beta
        return {"no latency": c + bw, "half latency": c + lat / 2 + bw, "no bandwidth": c + lat,
                "bandwidth not / n": c + lat + bw * n, "bandwidth no 2": c + lat + bw / 2, "no compute": lat + bw,
                "compute not split": c * n + lat + bw, "no all-reduce": c, "milliseconds": 1e3 * (c + lat + bw),
                "other": c + lat + bw + sc.alpha}[flaw]
    return step_seconds


@pytest.mark.parametrize("flaw, hint", [
    ("no latency", "latency term 2 (n - 1) x alpha seems missing"), ("half latency", "2 (n - 1) ring steps"),
    ("no bandwidth", "bandwidth term 2 (n - 1) / n x nbytes x beta seems missing"),
    ("bandwidth not / n", "divide by n"), ("bandwidth no 2", "the factor 2"),
    ("no compute", "compute term"), ("compute not split", "not split"), ("no all-reduce", "all-reduce is missing"),
    ("milliseconds", "milliseconds"), ("other", "compare each term"),
])
@pytest.mark.parametrize("sc", [SCENARIO, OTHER])
def test_step_seconds_check_names_the_first_wrong_rank_count_and_the_missing_term(sc, flaw, hint):
    feedback = check_rank_limit(sc.answer(), sc, flawed(sc, flaw))
    assert not feedback.ok and hint in feedback.message, feedback
    first_wrong = next(n for n in PROBE_RANKS if not math.isclose(flawed(sc, flaw)(n), sc.step_seconds(n), rel_tol=1e-6))
    assert f"step_seconds({first_wrong}) does not match" in feedback.message


def test_step_seconds_check_tries_counts_beyond_the_small_ones_and_bad_returns():
    sc = SCENARIO
    right_when_small = lambda n: sc.step_seconds(n) if n <= 10 else sc.step_seconds(n) * 1.01  # noqa: E731
    assert "step_seconds(13) does not match" in check_step_seconds(right_when_small, sc).message
    assert "got None" in str(check_rank_limit(None, sc, lambda n: None))
    assert "got '0.1'" in str(check_rank_limit(3, sc, lambda n: "0.1"))
    assert "raised ZeroDivisionError" in str(check_rank_limit(3, sc, lambda n: 1 / 0))
    assert "as a function" in str(check_rank_limit(3, sc, None))
    assert check_step_seconds(model_of(sc), sc).ok
    assert check_step_seconds(lambda n: torch.tensor(sc.step_seconds(n), dtype=torch.float64), sc).ok


@pytest.mark.parametrize("sc", [SCENARIO, OTHER])
def test_rank_limit_check_right_answer_reveals_no_number(sc):
    right, fn = sc.answer(), model_of(sc)
    assert 1 < right < min(sc.max_ranks, sc.batch)
    for answer in (right, float(right), torch.tensor(right)):
        feedback = check_rank_limit(answer, sc, fn)
        assert feedback.ok and str(feedback).startswith("Correct:")
        assert not any(ch.isdigit() for ch in feedback.message.replace("2 x alpha", "")), feedback  # no count, no time


@pytest.mark.parametrize("sc", [SCENARIO, OTHER])
def test_rank_limit_wrong_answers_give_reasons_not_directions_or_times(sc):
    right, fn, top = sc.answer(), model_of(sc), min(sc.max_ranks, sc.batch)
    for answer, hint in ((None, "whole number"), (2.5, "whole number"), (True, "whole number"), (0, "outside"),
                         (top + 1, "outside"), (top, "long before")):
        feedback = check_rank_limit(answer, sc, fn)
        assert not feedback.ok and hint in feedback.message, (answer, feedback)
    generic = set()
    for n in {1, right - 1, right + 1, right + 7, right // 2} - {right, sc.answer(beta=0.0)}:
        feedback = check_rank_limit(n, sc, fn)
        text = feedback.message.replace(f"but {n} is", "but N is")
        assert not feedback.ok and "ms" not in text and str(right) not in text, feedback
        generic.add(text)
    assert len(generic) == 1  # the same reasoning below and above the right count: no direction to probe


def test_bandwidth_left_out_of_the_answer_is_named():
    sc = RankScenario(compute_per_sample=1.5e-3, batch=1024, nbytes=200_000_000, alpha=1.7e-3, beta=1.5e-8)
    assert sc.answer(beta=0.0) != sc.answer()
    feedback = check_rank_limit(sc.answer(beta=0.0), sc, model_of(sc))
    assert not feedback.ok and "bandwidth term" in feedback.message


def test_the_largest_count_can_be_right():
    sc = RankScenario(compute_per_sample=1e-2, batch=1024, nbytes=1000, alpha=1e-6, beta=1e-12, max_ranks=16)
    assert sc.answer() == 16
    feedback = check_rank_limit(16, sc, model_of(sc))
    assert feedback.ok and "largest count tried" in feedback.message


def test_one_rank_is_right_when_a_second_only_adds_latency():
    sc = RankScenario(compute_per_sample=1e-6, batch=64, nbytes=1000, alpha=1e-3, beta=1e-9)
    assert sc.answer() == 1
    assert check_rank_limit(1, sc, model_of(sc)).ok and "second rank" in check_rank_limit(1, sc, model_of(sc)).message


def test_notebook_09_questions():
    assert check("09", 1, "b").ok and not check("09", 1, "a").ok and "DDP's all-reduce" in check("09", 1, "a").message
    assert "(n-1)/n" in check("09", 1, "c").message
    assert check("09", 2, 175).ok and check("09", 2, "175").ok
    assert "algorithm bandwidth" in check("09", 2, 100).message and not check("09", 2, 200).ok
    assert check("09", 3, 3).ok and "without no_sync" in check("09", 3, 24).message


@pytest.mark.gpu
@pytest.mark.slow
def test_one_nccl_rank_runs_the_semantics_and_a_sweep_on_its_gpu():
    result = run_collectives(1, parts=("semantics", "sweep"), sizes=(1024, 1 << 20), repeats=2, backend="nccl",
                             timeout=180)
    assert [s["all_reduce"]["after"] for s in result.semantics] == expected_semantics(1)["all_reduce"]
    assert result.sweep and all(r["seconds"] > 0 for r in result.sweep)
