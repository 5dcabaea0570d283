"""Notebooks 09-11: the pictures drawn from a run show that run's numbers, and refuse input that is not one."""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from gpulab.profiling.compiled_code import GraphKernels  # noqa: E402
from gpulab.distributed.collectives.driver import expected_semantics  # noqa: E402
from gpulab.figures import has_title  # noqa: E402
from gpulab.figures.collectives import (collective_buffers, origins, ring_figure, ring_grid,  # noqa: E402
                                        ring_steps)
from gpulab.figures.failures import uneven_join  # noqa: E402
from gpulab.figures.profiling import fused_ops, inductor_kernels, schedule_actions  # noqa: E402


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def _start(n: int) -> list[list[int]]:
    return [[10 * r + i for i in range(n)] for r in range(n)]


def _semantics(n: int, after: dict | None = None) -> list[dict]:
    want = {**expected_semantics(n), **(after or {})}
    start, pieces = _start(n), expected_semantics(n)["reduce_scatter"]
    return [{"broadcast": {"before": start[r], "after": want["broadcast"][r]},
             "all_reduce": {"before": start[r], "after": want["all_reduce"][r]},
             "reduce_scatter": {"before": start[r], "after": want["reduce_scatter"][r]},
             "all_gather": {"before": pieces[r], "after": want["all_gather"][r]}} for r in range(n)]


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_the_ring_ends_with_the_all_reduce_and_passes_one_chunk_a_step(n):
    steps = ring_steps(_start(n))
    assert len(steps) == 2 * (n - 1) + 1
    assert [list(v) for v in steps[-1].values] == expected_semantics(n)["all_reduce"]
    assert all(s == tuple(range(n)) for row in steps[-1].sources for s in row)
    after_scatter = steps[n - 1]
    for r in range(n):  # after the reduce-scatter phase rank r holds the whole sum of chunk r + 1
        assert after_scatter.sources[r][(r + 1) % n] == tuple(range(n))
        assert after_scatter.values[r][(r + 1) % n] == expected_semantics(n)["all_reduce"][0][(r + 1) % n]
    for step in steps[1:]:
        assert sorted(src for src, *_ in step.sends) == list(range(n))
        assert all(to == (src + 1) % n for src, to, *_ in step.sends)
        assert len({c for *_, c, _ in step.sends}) == n  # every chunk moves once a step


def test_the_ring_refuses_tensors_that_are_not_one_number_a_rank():
    with pytest.raises(ValueError, match="n >= 2 ranks of n numbers"):
        ring_steps([[1, 2, 3], [4, 5, 6]])
    with pytest.raises(ValueError, match="n >= 2"):
        ring_steps([[1]])
    steps = ring_steps(_start(3))
    with pytest.raises(ValueError, match="use 0..4"):
        ring_figure(steps, 5)


def test_a_number_is_coloured_by_the_rank_it_came_from():
    before = _start(4)
    assert origins(before, 12) == (1,)
    assert origins(before, 60) == (0, 1, 2, 3)  # the sum of column 0
    assert origins(before, 7) == ()  # nobody's number and no column's sum


def test_the_buffers_show_the_run_s_numbers_and_mark_a_wrong_one():
    plt.close("all")
    fig = collective_buffers(_semantics(4))
    assert has_title(fig) and not any(t.endswith("?") for t in _texts(fig))
    wrong = collective_buffers(_semantics(4, {"all_reduce": [[60, 64, 68, 72]] * 3 + [[60, 64, 68, 71]]}))
    assert "71?" in _texts(wrong)
    with pytest.raises(ValueError, match="at least 2"):
        collective_buffers(_semantics(4)[:1])
    with pytest.raises(ValueError, match="no run data"):
        collective_buffers(_semantics(4), ["all_to_all"])
    assert has_title(ring_grid(ring_steps(_start(4))))
    plt.close("all")


def test_the_join_timeline_takes_the_run_s_counts():
    fig = uneven_join([2, 3], [1, 0])
    texts = _texts(fig)
    assert texts.count("batch 3") == 2 and texts.count("0") == 1  # rank 1's third batch twice, one shadow
    assert "timeout" in texts
    with pytest.raises(ValueError, match="must equal the most batches"):
        uneven_join([2, 3], [0, 0])
    with pytest.raises(ValueError, match="one count each"):
        uneven_join([2, 3], [1])
    plt.close("all")


def test_the_schedule_is_torch_s_own():
    assert schedule_actions(1, 1, 5, 1, 8) == ["NONE", "WARMUP"] + ["RECORD"] * 4 + ["RECORD_AND_SAVE", "NONE"]
    long = schedule_actions(2, 1, 2, 2, 12)
    assert [i for i, a in enumerate(long) if a.startswith("RECORD")] == [3, 4, 8, 9]  # notebook 11's traces


def test_fused_kernels_are_read_into_aten_operations():
    assert fused_ops("cpp_fused_sum_threshold_backward_2") == ["sum", "threshold_backward"]
    assert fused_ops("triton_poi_fused_addmm_relu_0") == ["addmm", "relu"]
    assert fused_ops("mm") == ["mm"]
    graphs = [GraphKernels("forward", (("addmm", False), ("cpp_fused_relu_0", True), ("addmm", False)))]
    texts = _texts(inductor_kernels(graphs))
    assert texts.count("library call") == 2 and texts.count("one fused loop") == 1 and "relu" in texts
    with pytest.raises(ValueError, match="no compiled graphs"):
        inductor_kernels([])
    plt.close("all")
