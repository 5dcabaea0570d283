"""Checks for notebook 04 (DataParallel)."""

from __future__ import annotations

from gpulab.exercises import Feedback, correct, wrong
from gpulab.parallel import replica_batch_sizes


def check_replica_sizes(answer: object, batch_size: int, n_gpus: int) -> Feedback:
    """Check the rows each GPU gets when ``nn.DataParallel`` scatters ``batch_size`` rows over ``n_gpus``."""
    expected = replica_batch_sizes(batch_size, n_gpus)
    if answer is None or answer is ...:
        return wrong(f"fill in a list of batch sizes, one per GPU that gets rows ({batch_size} rows, {n_gpus} GPUs)")
    try:
        sizes = [int(a) for a in answer]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return wrong(f"give a list of whole numbers, got {answer!r}")
    if sum(sizes) != batch_size:
        return wrong(f"your sizes add up to {sum(sizes)}, but the batch has {batch_size} rows")
    if sizes == expected:
        return correct(f"{batch_size} rows on {n_gpus} GPUs -> {expected} "
                       f"({len(expected)} replica(s) run, chunks of ceil({batch_size}/{n_gpus}) = {expected[0]} rows)")
    step = expected[0]
    return wrong(f"DataParallel uses torch.chunk: every chunk has ceil({batch_size}/{n_gpus}) = {step} rows "
                 f"except the last, which gets what is left (and GPUs left without rows do not run)")
