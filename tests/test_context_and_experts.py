"""Context and expert parallelism (notebook 15): ring attention equal to one process at 2, 3 and 4 ranks with
controls that differ; the work per rank and the messages equal their formulas; torch's context_parallel runs and
stops where the notebook says; expert parallelism equal to one process at 2 and 4 ranks and with data parallelism;
the exercise check and the questions, wrong answers included.

One 4-rank launch (the notebook's) is shared by every test marked slow; the rest run in this process, the ring on
threads that pass its messages through queues.
"""

from __future__ import annotations

import math
import queue
import threading

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from gpulab.distributed.context_and_experts import driver, moe, ring  # noqa: E402
from gpulab.distributed.context_and_experts.worker import main as worker_main  # noqa: E402
from gpulab.exercises.context_and_experts import QUESTIONS_15, check_lse_merge  # noqa: E402
from gpulab.figures import has_title  # noqa: E402
from gpulab.figures import context_and_experts as pictures  # noqa: E402

EXACT = 1e-12  # float64


@pytest.fixture(scope="module")
def lesson():
    """The notebook's one launch of 4 ranks, every part; each test that reads it is marked slow."""
    return driver.run_lesson(timeout=240)


# ---- the launch: equal to one process, controls that differ ------------------------------------------------


@pytest.mark.slow
def test_rings_equal_one_process_at_2_and_4_ranks_and_the_controls_differ(lesson):
    rows = driver.ring_rows(lesson)
    rings = [r for r in rows if not r["control"]]
    assert sorted((r["ranks"], r["split"]) for r in rings) == [(2, "plain"), (2, "zigzag"), (4, "plain"), (4, "zigzag")]
    assert all(r["forward"] < EXACT and r["backward"] < EXACT for r in rings), rings
    control = {r["control"]: r for r in rows if r["control"]}
    assert control["average merge"]["forward"] > 1e-3
    assert control["gradients not sent home"]["forward"] < EXACT < 1e-3 < control["gradients not sent home"]["backward"]


@pytest.mark.slow
def test_each_pair_ran_its_own_ring(lesson):
    for rank in range(4):
        pair = [run for run in lesson.part("ring", rank)["runs"] if run["ranks"] == 2]
        plain = next(run for run in pair if run["layout"] == "plain")
        assert plain["chunks"] == [list(c) for c in ring.spans("plain", 32, 2)[rank % 2]]


@pytest.mark.slow
def test_work_per_rank_follows_the_formula_and_the_zigzag_split_evens_it(lesson):
    rows = driver.work_rows(lesson)
    assert len(rows) == 8 and all(r["total"] == r["formula"] for r in rows)
    plain = [r["total"] for r in rows if r["split"] == "plain"]
    zigzag = [r["total"] for r in rows if r["split"] == "zigzag"]
    assert plain == sorted(plain) and plain[-1] == 4 * plain[0]  # the last rank sees every block
    assert len(set(zigzag)) == 1
    two = driver.work_rows(lesson, ranks=2)
    assert [r["total"] for r in two if r["split"] == "plain"] == ring.work_formula("plain", 32, 2)


@pytest.mark.slow
def test_messages_and_bytes_counted_by_the_profiler_equal_the_prediction(lesson):
    rows = driver.message_rows(lesson)
    assert len(rows) == 8
    assert all(r["messages"] == r["predicted messages"] and r["bytes"] == r["predicted bytes"] for r in rows), rows
    assert {r["messages"] for r in rows if r["phase"] == "forward"} == {3}


@pytest.mark.slow
def test_memory_each_ring_rank_keeps_a_quarter_of_the_fused_kernel(lesson):
    rows = driver.memory_rows(lesson)
    assert [r["tokens"] for r in rows] == [256, 512, 1024, 2048]
    assert all(4 * r["ring, each rank"] == r["one process, fused kernel"] for r in rows)
    last, before = rows[-1], rows[-2]
    assert last["one process, fused kernel"] == 2 * before["one process, fused kernel"]
    assert 3.5 < last["one process, scores kept"] / before["one process, scores kept"] <= 4


@pytest.mark.slow
def test_torch_context_parallel_runs_non_causal_and_stops_on_causal(lesson):
    cp = lesson.part("torch_cp")
    cases = {c["case"]: c for c in cp["cases"]}
    ran = cases["non-causal, MATH kernel"]
    assert ran["ok"] and ran["difference"] < 1e-5
    assert ran["forward"] == {"all_gather_into_tensor": 2}
    assert ran["backward"] == {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 2}
    assert ran["positions_per_rank"] == [ring.positions(c) for c in ring.spans("zigzag", cp["seq"], 4)]
    math_causal, fused_causal = cases["causal, MATH kernel"], cases["causal, torch's choice of kernel"]
    assert not math_causal["ok"] and "mixed torch.Tensor and DTensor" in math_causal["message"]
    assert not fused_causal["ok"] and fused_causal["error"] == "NotImplementedError"
    assert "_scaled_dot_product_flash_attention_for_cpu" in fused_causal["message"]
    assert [r["ran"] for r in driver.cp_rows(lesson)] == [True, False, False]


@pytest.mark.slow
def test_expert_parallelism_equals_one_process_and_the_controls_differ(lesson):
    rows = {r["run"]: r for r in driver.moe_rows(lesson)}
    measures = ("output", "input gradient", "router gradient", "expert gradients")
    for name in ("EP 2", "EP 4", "DP 2 x EP 2"):
        assert all(rows[name][m] < EXACT for m in measures), rows[name]
    unsorted = rows["EP 4, results not put back in token order"]
    assert unsorted["output"] > 1e-3
    unsummed = rows["DP 2 x EP 2, expert gradients not summed over DP"]
    assert unsummed["expert gradients"] > 1e-3 and unsummed["output"] < EXACT and unsummed["router gradient"] < EXACT


@pytest.mark.slow
def test_routing_and_the_all_to_alls_follow_from_each_other(lesson):
    route = driver.routing(lesson)
    sent, received = route["sent"], route["received"]
    assert [list(col) for col in zip(*sent)] == received  # what i sent to j is what j received from i
    assert all(sum(row) == route["tokens"] // 4 * route["top_k"] for row in sent)
    assert sum(route["per_expert"]) == route["tokens"] * route["top_k"]
    calls = driver.all_to_all_rows(lesson)
    assert [r["phase"] for r in calls] == ["forward"] * 4 + ["backward"] * 2
    assert all(r["rows"] == r["predicted rows"] for r in calls)


# ---- ring attention in one process --------------------------------------------------------------------------


class ThreadRing:
    """A ring of threads: ``start_shift`` puts the tensor in the next rank's queue and waits on its own."""

    def __init__(self, boxes: list, me: int) -> None:
        self.boxes, self.me = boxes, me

    @property
    def size(self) -> int:
        return len(self.boxes)

    def start_shift(self, t: torch.Tensor):
        self.boxes[(self.me + 1) % self.size].put(t.clone())
        return lambda: self.boxes[self.me].get(timeout=30)


def threaded_ring(layout: str, ranks: int, seq: int, causal: bool = True, **options) -> list[float]:
    """Every rank of a ring on its own thread; each rank's largest difference from one process (output, grads)."""
    g = torch.Generator().manual_seed(ranks)
    q, k, v, grad = (torch.randn(2, 3, seq, 4, generator=g, dtype=torch.float64) for _ in range(4))
    whole = [t.clone().requires_grad_() for t in (q, k, v)]
    reference = ring.attention(*whole, causal=causal)
    (reference * grad).sum().backward()
    layout_spans, boxes = ring.spans(layout, seq, ranks), [queue.Queue() for _ in range(ranks)]
    found: list = [None] * ranks

    def rank(me: int) -> None:
        rows = ring.positions(layout_spans[me])
        local = [t[..., rows, :].clone().requires_grad_() for t in (q, k, v)]
        setup = ring.RingSetup(layout_spans, me, ThreadRing(boxes, me), causal, **options)
        out = ring.ring_attention(*local, setup)
        (out * grad[..., rows, :]).sum().backward()
        grads = [(mine.grad - full.grad[..., rows, :]).abs().max().item() for mine, full in zip(local, whole)]
        found[me] = max([(out - reference.detach()[..., rows, :]).abs().max().item(), *grads])

    threads = [threading.Thread(target=rank, args=(me,)) for me in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert None not in found, "a rank of the threaded ring did not finish"
    return found


@pytest.mark.parametrize("layout", ring.LAYOUTS)
@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("causal", [True, False])
def test_ring_on_threads_equals_one_process(layout, ranks, causal):
    assert max(threaded_ring(layout, ranks, seq=6 * ranks, causal=causal)) < EXACT


def test_ring_on_threads_controls_differ():
    assert max(threaded_ring("zigzag", 3, seq=18, combine=ring.average_merge)) > 1e-3
    assert max(threaded_ring("zigzag", 3, seq=18, send_home=False)) > 1e-3


def test_spans_cover_the_sequence_once():
    for layout in ring.LAYOUTS:
        for ranks in (1, 2, 3, 4):
            got = sorted(p for chunks in ring.spans(layout, 24, ranks) for p in ring.positions(chunks))
            assert got == list(range(24))
    assert ring.spans("zigzag", 16, 4)[0] == [(0, 2), (14, 16)]
    with pytest.raises(ValueError, match="do not cut into 8 equal pieces"):
        ring.spans("zigzag", 20, 4)
    with pytest.raises(ValueError, match="layout='diagonal'"):
        ring.spans("diagonal", 16, 4)
    with pytest.raises(ValueError, match="whole numbers"):
        ring.spans("plain", 16.0, 4)


def test_pair_kind_follows_the_causal_mask():
    assert ring.pair_kind((4, 8), (0, 4)) == "full"
    assert ring.pair_kind((4, 8), (8, 12)) == "skip"
    assert ring.pair_kind((4, 8), (4, 8)) == "diagonal"
    assert ring.pair_kind((4, 8), (8, 12), causal=False) == "full"
    with pytest.raises(ValueError, match="overlap"):
        ring.pair_kind((4, 8), (6, 10))


def test_blocks_merged_with_the_log_sum_exp_rule_equal_the_whole_attention():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 5, 8, 4, generator=g, dtype=torch.float64) for _ in range(3))
    scale = 1 / math.sqrt(4)
    parts = [ring.block_forward(q, k[..., i:i + 2, :], v[..., i:i + 2, :], False, scale) for i in range(0, 8, 2)]
    out, lse = parts[0]
    for part in parts[1:]:
        out, lse = ring.merge(out, lse, *part)
    assert (out - ring.attention(q, k, v, causal=False)).abs().max() < EXACT
    assert (lse - torch.logsumexp(q @ k.mT * scale, -1)).abs().max() < EXACT
    wrong, _ = ring.average_merge(*parts[0], *parts[1])
    right, _ = ring.merge(*parts[0], *parts[1])
    assert (wrong - right).abs().max() > 1e-3


@pytest.mark.parametrize("diagonal", [True, False])
def test_block_backward_equals_autograd(diagonal):
    g = torch.Generator().manual_seed(4)
    q, k, v, dout = (torch.randn(3, 6, 4, generator=g, dtype=torch.float64) for _ in range(4))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = ring.attention(*leaves, causal=diagonal)
    (out * dout).sum().backward()
    _, lse = ring.block_forward(q, k, v, diagonal, 0.5)
    delta = (dout * out.detach()).sum(-1)
    for mine, leaf in zip(ring.block_backward(q, k, v, dout, lse, delta, diagonal, 0.5), leaves):
        assert (mine - leaf.grad).abs().max() < EXACT


def test_work_formula_and_the_traffic_rules():
    assert ring.work_formula("plain", 16, 4) == [16, 32, 48, 64]
    assert ring.work_formula("zigzag", 16, 4) == [36] * 4
    assert ring.work_formula("plain", 16, 4, causal=False) == [64] * 4
    assert driver.ring_traffic(4, 100) == {"forward": (3, 600), "backward": (4, 1400)}
    assert driver.owners(3) == [[0, 2, 1], [1, 0, 2], [2, 1, 0]]


# ---- the mixture of experts in one process ----------------------------------------------------------------


def test_moe_reference_is_each_tokens_weighted_experts():
    g = torch.Generator().manual_seed(5)
    x, router = torch.randn(6, 4, generator=g, dtype=torch.float64), torch.randn(5, 4, generator=g, dtype=torch.float64)
    up = torch.randn(5, 4, 3, generator=g, dtype=torch.float64)
    down = torch.randn(5, 3, 4, generator=g, dtype=torch.float64)
    experts, weights, probs = moe.route(x @ router.T, 2)
    assert torch.allclose(weights.sum(-1), torch.ones(6, dtype=torch.float64)) and probs.shape == (6, 5)
    by_hand = torch.stack([sum(weights[t, s] * moe.expert_mlp(x[t], up[experts[t, s]], down[experts[t, s]])
                               for s in range(2)) for t in range(6)])
    assert (moe.moe_reference(x, router, up, down, 2) - by_hand).abs().max() < EXACT


def test_capacity_drops_and_split_sizes():
    assert moe.capacity(1024, 8, 2, 1.0) == 256 and moe.capacity(1024, 8, 2, 1.25) == 320
    assert moe.capacity(10, 3, 1, 1.0) == 4  # rounded up
    assert moe.dropped([300, 200, 256], 256) == 44
    with pytest.raises(ValueError, match="must be positive"):
        moe.capacity(0, 8, 2, 1.0)
    experts = torch.tensor([[0, 3], [1, 2], [3, 2]])
    assert moe.tokens_per_expert(experts, 4) == [1, 1, 2, 2]
    assert moe.send_counts(experts, experts_per_rank=2, ranks=2) == [2, 4]


def test_load_balancing_loss_is_one_when_even_and_more_when_not():
    even = torch.full((8, 4), 0.25)
    assert moe.load_balancing_loss(even, torch.tensor([[0], [1], [2], [3]] * 2)).item() == pytest.approx(1.0)
    skewed = torch.tensor([[0.7, 0.1, 0.1, 0.1]] * 8)
    assert moe.load_balancing_loss(skewed, torch.zeros(8, 1, dtype=torch.long)).item() == pytest.approx(2.8)


# ---- the driver and the worker without a launch ------------------------------------------------------------


def test_a_lesson_names_the_part_it_lacks():
    lesson = driver.Lesson([{"rank": 0}], [], 0.0, [])
    with pytest.raises(ValueError, match="no 'ring' part"):
        lesson.part("ring")
    with pytest.raises(ValueError, match="parts=\\['bogus'\\]"):
        driver.run_lesson(parts=("bogus",))


def test_the_worker_says_it_needs_torchrun(capsys, monkeypatch):
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert worker_main(["--out", "x"]) == 2
    assert "run me under torchrun" in capsys.readouterr().err


# ---- the exercise and the questions ------------------------------------------------------------------------


def right(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b, lse


def stable_by_hand(out_a, lse_a, out_b, lse_b):
    top = torch.maximum(lse_a, lse_b)
    wa, wb = torch.exp(lse_a - top), torch.exp(lse_b - top)
    return (wa.unsqueeze(-1) * out_a + wb.unsqueeze(-1) * out_b) / (wa + wb).unsqueeze(-1), top + torch.log(wa + wb)


@pytest.mark.parametrize("answer", [right, stable_by_hand, ring.merge])
def test_the_exercise_accepts_right_answers(answer):
    assert check_lse_merge(answer).ok


def _overflowing(out_a, lse_a, out_b, lse_b):
    ea, eb = torch.exp(lse_a), torch.exp(lse_b)
    return (ea.unsqueeze(-1) * out_a + eb.unsqueeze(-1) * out_b) / (ea + eb).unsqueeze(-1), torch.log(ea + eb)


@pytest.mark.parametrize("answer,hint", [
    (lambda a, la, b, lb: ((a + b) / 2, torch.logaddexp(la, lb)), "you averaged the two outputs"),
    (lambda a, la, b, lb: (a + b, torch.logaddexp(la, lb)), "you added the two outputs"),
    (lambda a, la, b, lb: (torch.exp(la).unsqueeze(-1) * a + torch.exp(lb).unsqueeze(-1) * b, torch.logaddexp(la, lb)),
     "divide by their sum"),
    (_overflowing, "overflows"),
    (lambda a, la, b, lb: (right(a, la, b, lb)[0], torch.maximum(la, lb)), "output is right but lse is not"),
    (lambda a, la, b, lb: (torch.exp(la - torch.logaddexp(la, lb)) * a, la), "lse.unsqueeze(-1)"),
    (lambda a, la, b, lb: right(a, la, b, lb)[0], "must return two tensors"),
    (lambda a, la, b, lb: (a[..., :1, :], la[..., :1]), "keep the shapes"),
    (lambda a, la, b: a, "must take four arguments"),
    ("merge", "define merge"),
])
def test_the_exercise_says_what_is_wrong(answer, hint):
    verdict = check_lse_merge(answer)
    assert not verdict.ok and hint in str(verdict), str(verdict)


def test_a_row_weight_applied_to_columns_is_caught_on_the_square_case():
    def columns(out_a, lse_a, out_b, lse_b):  # broadcasts silently when queries == features
        lse = torch.logaddexp(lse_a, lse_b)
        if out_a.shape[-1] != out_a.shape[-2]:
            return right(out_a, lse_a, out_b, lse_b)
        return torch.exp(lse_a - lse).unsqueeze(-2) * out_a + torch.exp(lse_b - lse).unsqueeze(-2) * out_b, lse

    verdict = check_lse_merge(columns)
    assert not verdict.ok and "as many queries as features" in str(verdict)


def test_the_ring_question_grades_values_and_common_slips():
    q = QUESTIONS_15[0]
    assert q.check(234.88).ok and q.check("234.9").ok
    for value, hint in ((117.44, "keys only"), (268.44, "8 messages"), (33.55, "one message"),
                        (1879.05, "whole sequence"), ("lots", "answer with a number"), (5, "one block is")):
        verdict = q.check(value)
        assert not verdict.ok and hint in str(verdict), (value, str(verdict))


def test_three_questions_with_their_answers():
    assert len(QUESTIONS_15) == 3
    assert QUESTIONS_15[1].check("b").ok and not QUESTIONS_15[1].check("a").ok
    assert QUESTIONS_15[2].check("b").ok and "256" in str(QUESTIONS_15[2].check("b"))


# ---- pictures ------------------------------------------------------------------------------------------------


def test_pictures_have_titles_and_refuse_nothing_to_draw():
    import matplotlib.pyplot as plt

    for draw in pictures.STATIC.values():
        fig = draw()
        assert has_title(fig)
        plt.close(fig)
    steps = pictures.ring_steps({"plain": [[4, 0], [4, 4]], "zigzag": [[3, 2], [3, 2]]}, driver.owners(2))
    routed = pictures.routing([[3, 1], [2, 2]], [2, 2, 3, 1], {"1.0": 2})
    load = pictures.expert_load({"before": [3, 1], "after": [2, 2]}, 2)
    assert all(has_title(f) for f in (steps, routed, load))
    plt.close("all")
    with pytest.raises(ValueError, match="work is empty"):
        pictures.ring_steps({}, [])
    with pytest.raises(ValueError, match="counts is empty"):
        pictures.expert_load({}, 1)
