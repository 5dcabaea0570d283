"""The checks of notebooks 03 and 04 say 'Correct' for right answers and explain wrong ones."""

import pytest
import torch

from gpulab.exercises.data_parallel import UNSEEN_CASES, check_replica_sizes, check_rows_per_gpu
from gpulab.exercises.single_device import check_move_batch
from gpulab.data_parallel import replica_batch_sizes


def _right(batch, device):
    x, y = batch
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def test_move_batch_right_answer():
    fb = check_move_batch(_right)
    assert fb.ok and str(fb).startswith("Correct:")


def _in_place_attempt(batch, device):
    x, y = batch
    x.to(device)  # result thrown away: the classic mistake
    y.to(device)
    return x, y


@pytest.mark.parametrize("answer,word", [
    (lambda b, d: b, "still on cpu"),
    (_in_place_attempt, "still on cpu"),
    (lambda b, d: (b[0].to(d),), "pair"),
    (lambda b, d: (b[0].to(d), b[1]), "y is still on cpu"),
    (lambda b, d: (b[0].to(d).double(), b[1].to(d)), "dtype"),
    (lambda b, d: (b[0].to(d), "y"), "tensor"),
    (lambda b, d: 1 / 0, "ZeroDivisionError"),
    ("not a function", "function"),
])
def test_move_batch_wrong_answers(answer, word):
    fb = check_move_batch(answer)
    assert not fb.ok and str(fb).startswith("Not yet:") and word in fb.message


@pytest.mark.parametrize("batch,gpus", [(10, 4), (128, 3), (128, 2), (5, 4), (2, 3), (7, 7)])
def test_replica_sizes_right(batch, gpus):
    answer = [len(c) for c in torch.arange(batch).chunk(gpus)]
    fb = check_replica_sizes(answer, batch, gpus)
    assert fb.ok and str(fb).startswith("Correct:")


@pytest.mark.parametrize("answer,word", [
    (None, "fill in"),
    (..., "fill in"),
    ([3, 3, 2, 2], "even split"),  # the split DataParallel does NOT do
    ([3, 3, 3, 1, 0], "only 4 GPUs"),
    ([4, 4, 1, 1], "torch.chunk"),
    ([3, 3, 3], "add up to 9"),
    ("abc", "whole numbers"),
    (7, "whole numbers"),
])
def test_replica_sizes_wrong(answer, word):
    fb = check_replica_sizes(answer, 10, 4)
    assert not fb.ok and str(fb).startswith("Not yet:") and word in fb.message


def test_checker_agrees_with_parallel():
    assert check_replica_sizes(replica_batch_sizes(101, 7), 101, 7).ok


def test_idle_gpus_listed_as_zero_are_named():
    fb = check_replica_sizes([3, 3, 3, 0], 9, 4)
    assert not fb.ok and "leave out the GPUs that get no rows" in fb.message


def _chunk_sizes(batch, gpus):
    return [len(c) for c in torch.arange(batch).chunk(gpus)]


def test_rows_per_gpu_right_function():
    fb = check_rows_per_gpu(_chunk_sizes)
    assert fb.ok and str(fb).startswith("Correct:") and "[8, 8, 8, 6]" in fb.message


def _even(batch, gpus):
    base, extra = divmod(batch, gpus)
    return [base + 1] * extra + [base] * (gpus - extra)


@pytest.mark.parametrize("fn,word", [
    (_even, "even split"),  # also gives zeros for 1 row on 3 GPUs, but fails earlier on 9 on 4
    (lambda b, g: _chunk_sizes(b, g) + [0] * (g - len(_chunk_sizes(b, g))), "leave out the GPUs"),
    (lambda b, g: [b // g] * g, "add up to"),
    (lambda b, g: None, "returned None"),
    (lambda b, g: "3,3,3", "whole numbers"),
    (lambda b, g: 1 / 0, "ZeroDivisionError"),
    ([3, 3, 3, 1], "pass your function"),
])
def test_rows_per_gpu_wrong_functions(fn, word):
    fb = check_rows_per_gpu(fn)
    assert not fb.ok and str(fb).startswith("Not yet:") and word in fb.message


def test_unseen_cases_include_an_idle_gpu_and_an_uneven_last_chunk():
    sizes = {case: replica_batch_sizes(*case) for case in UNSEEN_CASES}
    assert any(len(s) < gpus for (_, gpus), s in sizes.items())  # some GPU gets nothing
    assert any(len(set(s)) > 1 for s in sizes.values())  # some last chunk is smaller
