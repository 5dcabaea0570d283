"""Collectives and their cost: what each rank ends with, busbw factors, the alpha/beta fit, DDP's buckets,
no_sync accumulation = one big batch with one all-reduce per bucket, and notebook 09's exercise check.

One 2-rank launch (module-scoped fixture) serves every test that needs ranks.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from gpulab.distributed import cost, ddp_profile
from gpulab.distributed.collectives import (after_last_arrival, check_sizes, expected_semantics, fit_sweep,
                                            run_collectives, semantics_table)
from gpulab.exercises.collectives import RankScenario, check_rank_limit
from gpulab.exercises.quiz import check

STEPS = 2


@pytest.fixture(scope="module")
def launch():
    return run_collectives(2, parts=("semantics", "sweep", "ddp"), sizes=(64, 4096), repeats=1, steps=STEPS,
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
        ddp_profile.train_step(model, opt, X, y)
    got = launch.no_sync_weights
    assert max((got[k] - v).abs().max().item() for k, v in model.state_dict().items()) < 1e-6


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
])
def test_bad_inputs_raise_one_line_value_errors(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_after_last_arrival_leaves_waiting_out():
    assert after_last_arrival([[[0, 10e3]], [[6e3, 10.5e3]]]) == [pytest.approx(4.5e-3)]


# ----------------------------------------------------------------------------- exercise and questions


SCENARIO = RankScenario(compute_per_sample=1.5e-3, batch=1024, nbytes=20_996_100, alpha=1.7e-3, beta=1.5e-9)


def test_rank_limit_check_right_and_typical_wrong_answers():
    right = SCENARIO.answer()
    assert 1 < right < SCENARIO.max_ranks
    assert check_rank_limit(right, SCENARIO).ok and check_rank_limit(float(right), SCENARIO).ok
    assert str(check_rank_limit(torch.tensor(right), SCENARIO)).startswith("Correct:")
    for answer, hint in ((None, "whole number"), (2.5, "whole number"), (True, "whole number"), (0, "outside"),
                         (SCENARIO.max_ranks, "long before"), (right + 1, "last count that still helps"),
                         (right - 1, "one more rank still helps"), (1, "one more rank still helps"),
                         (right + 7, "stop where it no longer falls")):
        feedback = check_rank_limit(answer, SCENARIO)
        assert not feedback.ok and hint in feedback.message, (answer, feedback)
        assert str(feedback).startswith("Not yet:")


def test_notebook_09_questions():
    assert check("09", 1, "a").ok and not check("09", 1, "b").ok
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
