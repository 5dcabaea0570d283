"""Checks for notebook 04 (DataParallel): the rows each GPU gets when a batch is scattered."""

from __future__ import annotations

import math
from typing import Callable

from gpulab.exercises import Feedback, Question, correct, wrong
from gpulab.exercises import Option as O
from gpulab.data_parallel import replica_batch_sizes

#: Batches and GPU counts the notebooks never print, so a learner's function cannot copy an output.
UNSEEN_CASES: tuple[tuple[int, int], ...] = ((9, 4), (30, 4), (17, 5), (6, 4), (1, 3), (64, 8), (50, 3), (13, 13))


def _even_split(batch_size: int, n_gpus: int) -> list[int]:
    """The split DataParallel does NOT do: sizes differing by at most one (like numpy.array_split)."""
    base, extra = divmod(batch_size, n_gpus)
    return [base + 1] * extra + [base] * (n_gpus - extra)


def _diagnose(sizes: list[int], batch_size: int, n_gpus: int) -> Feedback:
    """Correct, or the specific mistake behind a wrong list of sizes."""
    expected = replica_batch_sizes(batch_size, n_gpus)
    where = f"{batch_size} rows on {n_gpus} GPUs"
    if sizes == expected:
        return correct(f"{where} -> {expected} ({len(expected)} replica(s) run, chunks of "
                       f"ceil({batch_size}/{n_gpus}) = {expected[0]} rows)")
    if sum(sizes) != batch_size:
        return wrong(f"{where}: your sizes {sizes} add up to {sum(sizes)}, but the batch has {batch_size} rows")
    if len(sizes) > n_gpus:
        return wrong(f"{where}: your list has {len(sizes)} entries, but there are only {n_gpus} GPUs")
    if sizes and sizes[-1] == 0 and [s for s in sizes if s] == expected:
        return wrong(f"{where}: leave out the GPUs that get no rows ({sizes} -> {expected}): DataParallel runs "
                     f"only as many replicas as there are chunks")
    if sizes == [s for s in _even_split(batch_size, n_gpus) if s]:
        return wrong(f"{where}: {sizes} is an even split (as numpy.array_split does); DataParallel uses "
                     "torch.chunk, whose chunks all have the same size except the last")
    return wrong(f"{where}: DataParallel uses torch.chunk: every chunk but the last has the same size, the "
                 "smallest that needs no more chunks than GPUs; the last gets what is left (GPUs without rows "
                 "do not run)")


def _sizes(answer: object) -> list[int] | None:
    try:
        return [int(a) for a in answer]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return None


def check_replica_sizes(answer: object, batch_size: int, n_gpus: int) -> Feedback:
    """Check the rows each GPU gets when ``nn.DataParallel`` scatters ``batch_size`` rows over ``n_gpus``."""
    if answer is None or answer is ...:
        return wrong(f"fill in a list of batch sizes, one per GPU that gets rows ({batch_size} rows, {n_gpus} GPUs)")
    sizes = _sizes(answer)
    if sizes is None:
        return wrong(f"give a list of whole numbers, got {answer!r}")
    return _diagnose(sizes, batch_size, n_gpus)


def check_rows_per_gpu(fn: Callable[[int, int], list[int]]) -> Feedback:
    """Call ``fn(batch_size, n_gpus)`` on batches and GPU counts the notebooks have not shown.

    Correct when every answer is the list of rows per GPU that gets rows, as ``torch.chunk`` splits.
    """
    if not callable(fn):
        return wrong(f"pass your function itself, e.g. check_rows_per_gpu(rows_per_gpu), not {type(fn).__name__}")
    for batch_size, n_gpus in UNSEEN_CASES:
        try:
            answer = fn(batch_size, n_gpus)
        except Exception as exc:  # the learner's code may raise anything
            return wrong(f"rows_per_gpu({batch_size}, {n_gpus}) raised {type(exc).__name__}: {exc}")
        if answer is None:
            return wrong(f"rows_per_gpu({batch_size}, {n_gpus}) returned None; return a list such as [3, 3, 3, 1]")
        sizes = _sizes(answer)
        if sizes is None:
            return wrong(f"rows_per_gpu({batch_size}, {n_gpus}) returned {answer!r}; return a list of whole numbers")
        feedback = _diagnose(sizes, batch_size, n_gpus)
        if not feedback:
            return feedback
    return correct(f"all {len(UNSEEN_CASES)} cases match torch.chunk, e.g. 30 rows on 4 GPUs -> "
                   f"{replica_batch_sizes(30, 4)} (chunks of ceil(30/4) = {math.ceil(30 / 4)}), and 9 on 4 -> "
                   f"{replica_batch_sizes(9, 4)}: the 4th GPU gets nothing")



QUESTIONS_04: tuple[Question, ...] = (
    Question("A batch of 22 rows goes to `nn.DataParallel` on 4 GPUs. How many rows does each GPU get? "
             "Answer with a list, one entry per GPU that gets rows.",
             grade=lambda answer: check_replica_sizes(answer, batch_size=22, n_gpus=4), example="[1, 2, 3]"),
    Question("DataParallel splits a batch unevenly over 3 GPUs. The gradients it produces are:", (
        O("those of one model on the whole batch, up to float rounding.",
          "the loss is taken over the gathered output and the replicas' gradients are summed into the model"),
        O("slightly wrong, because the chunks differ in size.",
          "no: the split changes where the arithmetic happens, not the result"),
        O("the average of three different models.",
          "no: there is one model; the replicas are copies made for each forward pass"),
    ), answer="a"),
    Question("Loading `dp.state_dict()` of an `nn.DataParallel` model into a plain `Net1` fails. Why?", (
        O("Every key starts with `module.`: save `dp.module.state_dict()` instead.",
          "the wrapper keeps your model as `dp.module`, so its keys gain a prefix"),
        O("The weights are still on the GPU.", "no: it fails on a CPU too; the key names differ"),
        O("DataParallel changes the shapes of the weights.", "no: the shapes are the same; only the names change"),
    ), answer="a"),
)
