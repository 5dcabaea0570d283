"""Checks for notebook 10 (when distributed training breaks): diagnose logs, and its self-check questions.

``LOGS`` holds log excerpts of other runs, in forms the notebook does not print: nccl's watchdog lines,
torchrun's summary, other ranks, sizes and timeouts. Several need reasoning across ranks, not one searched
phrase. ``check_diagnosis(causes, first_look)`` checks a cause for every log (a name of
``gpulab.distributed.failures.driver.CASES``) and, for the logs of ``FIRST_LOOK``, the rank to look at first. A
wrong answer gets a clue about where to look in the log, never the answer.
"""

from __future__ import annotations

from gpulab.distributed.failures.driver import BY_NAME
from gpulab.exercises import Feedback, as_number, correct, wrong
from gpulab.exercises import Option as O
from gpulab.exercises import Question

_WATCHDOG = ("[rank{r}]:[E ProcessGroupNCCL.cpp] [Rank {r}] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for {ms} "
             "milliseconds before timing out.")

LOGS: dict[str, str] = {
    "A": "\n".join(_WATCHDOG.format(r=r, seq=4113, op=op, n=1, ms=ms) for r, op, ms in (
        (1, "ALLREDUCE", 600043), (3, "ALLREDUCE", 600051), (0, "BROADCAST", 600012), (2, "ALLREDUCE", 600047))),
    "B": "\n".join((
        "[rank 0] loaded part-000.parquet: 9,984 rows, batch size 64",
        "[rank 1] loaded part-001.parquet: 10,240 rows, batch size 64",
        "[rank 0] epoch 0 done. Training finished.",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "train.py", line 41, in <module>',
        "[rank1]:     loss.backward()",
        "[rank1]:   [...]",
        "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [10.0.0.7]:45810: "
        "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application. "
        "Check the logs of the remote worker before reporting an error.",
    )),
    "C": "\n".join((
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "train.py", line 77, in <module>',
        "[rank0]:     dist.monitored_barrier(timeout=datetime.timedelta(minutes=5), wait_all_ranks=True)",
        "[rank0]:   [...]",
        "[rank0]: RuntimeError: [Rank 0]: Ranks 2 failed to pass monitoredBarrier in 300000 ms",
        "[...]",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : 1 (pid: 31337)",
        "  error_file: <N/A>",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "============================================================",
    )),
    "D": "\n".join((
        "[rank 1] step 0: batch with images and captions",
        "[rank 1] step 1: batch with captions only, the image encoder is skipped",
        "[rank1]: RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. "
        "This error indicates that your module has parameters that were not used in producing loss. [...]",
        "[rank1]: Parameter indices which did not receive grad for rank 1: 12 13 14 15",
        "[rank1]:  In addition, you can set the environment variable TORCH_DISTRIBUTED_DEBUG to either INFO or DETAIL "
        "to print out information about which particular parameters did not receive gradient on this rank as part "
        "of this error",
    )),
    "E": "\n".join((
        "[rank 0] epoch 7: 1,563 batches",
        "[rank 1] epoch 7: 1,563 batches",
        "[rank 2] epoch 7: 1,563 batches",
        "[rank 3] epoch 7: 1,562 batches",
        "[rank 3] epoch 7 done. Training finished.",
        *(_WATCHDOG.format(r=r, seq=90613, op="ALLREDUCE", n=2359296, ms=ms) for r, ms in (
            (0, 600039), (2, 600044), (1, 600052))),
    )),
    "F": "\n".join((
        "[rank 1] epoch 3, first batch: tensor([ 702,  118, 9031,  455, 6377, ...])",
        "[rank 0] epoch 3, first batch: tensor([4410,   87, 6120, 2093,  311, ...])",
        "[rank 1] epoch 4, first batch: tensor([ 702,  118, 9031,  455, 6377, ...])",
        "[rank 0] epoch 4, first batch: tensor([4410,   87, 6120, 2093,  311, ...])",
    )),
    "G": "\n".join((
        "(every rank prints its own loss while debugging; the dashboard gets what rank 0 prints)",
        "[rank 2] epoch 20: loss 0.351",
        "[rank 0] epoch 20: loss 0.184",
        "[rank 3] epoch 20: loss 0.251",
        "[rank 1] epoch 20: loss 0.402",
        "dashboard: epoch 20, training loss 0.184, best run so far",
    )),
    "H": "\n".join((
        "[rank 0] classes seen in this evaluation: 3",
        "[rank 1] classes seen in this evaluation: 4",
        "[rank 0] correct per class (summed over ranks): tensor([2., 2., 2.])",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "train.py", line 63, in evaluate',
        "[rank1]:     dist.all_reduce(correct_per_class)",
        "[rank1]:   [...]",
        "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
        "1800000ms for recv operation to complete",
    )),
}
DIAGNOSIS = {"A": "mismatch", "B": "uneven", "C": "missing", "D": "unused", "E": "uneven", "F": "sampler",
             "G": "loss", "H": "shapes"}
FIRST_LOOK = {"A": 0, "C": 2, "E": 3}  # the rank whose code to read first
WORLD = {"A": 4, "C": 4, "E": 4}  # how many ranks each of those runs had
CLUES = {
    "A": "every rank's watchdog line names the collective it was in; compare them at the same SeqNum",
    "B": "work out how many batches each rank has, then ask where rank 1 was when its peer went away",
    "C": "torchrun's summary names the rank that noticed; read that rank's own error above the summary",
    "D": "the error comes at the start of a step; which step skipped part of the model?",
    "E": "compare the ranks' batch counts for epoch 7, and see which rank has no watchdog line",
    "F": "compare each rank's first batch from one epoch to the next, and the two ranks with each other",
    "G": "no error here: compare what the dashboard shows with what all the ranks printed",
    "H": "compare what each rank counted before the collective, and which rank came back from it",
}
RANK_CLUES = {
    "A": "look for the rank whose line differs from all the others",
    "C": "the rank that raised only noticed; the error names the rank it waited for",
    "E": "the ranks that timed out were waiting for someone: which rank did not wait at all?",
}
TIMEOUT_HINT = ("a timeout says where a rank waited, not why it waited: find what the ranks did differently "
                "before it")


def _unknown(given: dict, valid: dict, what: str) -> Feedback | None:
    unknown = sorted(set(map(str, given)) - set(valid))
    if unknown:
        return wrong(f"there is no {what} {unknown[0]!r}: use {', '.join(valid)}")
    return None


def check_diagnosis(causes: object, first_look: object = None) -> Feedback:
    """A cause for every log of ``LOGS`` (``{"A": "port", ...}``) and, for ``FIRST_LOOK``'s logs, a rank each."""
    if not isinstance(causes, dict):
        return wrong(f"give the causes as a dict from log letter to cause, e.g. {{'A': 'port'}}, "
                     f"got {type(causes).__name__}")
    if (said := _unknown(causes, LOGS, "log")) is not None:
        return said
    blank = [letter for letter in LOGS if causes.get(letter) in (None, "", "?")]
    if blank:
        return wrong(f"give every log a cause: {', '.join(blank)} not answered yet")
    for letter in LOGS:
        if causes[letter] not in BY_NAME:
            return wrong(f"log {letter}: {causes[letter]!r} is not a cause; use one of {', '.join(BY_NAME)}")
    off = [letter for letter in LOGS if causes[letter] != DIAGNOSIS[letter]]
    if off:
        first = off[0]
        why = TIMEOUT_HINT if causes[first] == "timeout" else CLUES[first]
        return wrong(f"{len(LOGS) - len(off)} of {len(LOGS)} causes right. Look again at log {first}: {why}")
    if not isinstance(first_look, dict):
        return wrong(f"the causes are right. Now give the rank to look at first for logs {', '.join(FIRST_LOOK)} "
                     f"as a dict, e.g. {{'A': 1}}")
    if (said := _unknown(first_look, FIRST_LOOK, "rank question for log")) is not None:
        return said
    for letter in FIRST_LOOK:
        rank = first_look.get(letter)
        rank = None if isinstance(rank, bool) else as_number(rank)
        if rank is None or rank != int(rank) or not 0 <= rank < WORLD[letter]:
            return wrong(f"log {letter}: give a rank from 0 to {WORLD[letter] - 1}, got {first_look.get(letter)!r}")
        if rank != FIRST_LOOK[letter]:
            return wrong(f"the causes are right. Log {letter}: rank {int(rank)} is not the first to look at: "
                         f"{RANK_CLUES[letter]}")
    return correct(f"all {len(LOGS)} logs diagnosed, and the right rank found in {', '.join(FIRST_LOOK)}: "
                   "the rank that raises is often not the one to fix")


def _batch_loss(answer: object) -> Feedback:
    sums, sizes = (16.0, 48.0), (32, 32)
    value = as_number(answer)
    if value is None:
        return wrong(f"answer with a number, got {answer!r}")
    whole = sum(sums) / sum(sizes)
    if abs(value - whole) < 1e-9:
        return correct(f"all-reduce the sums ({sum(sums):g}) and divide by the whole batch ({sum(sizes)}): {whole:g}")
    if abs(value - sums[0] / sizes[0]) < 1e-9:
        return wrong("that is rank 0's own mean: its shard only, what a rank-0-only log shows")
    if abs(value - sum(sums)) < 1e-9:
        return wrong("that is the summed loss; the mean divides it by the number of samples of the whole batch")
    return wrong("add both ranks' summed losses, then divide by all the samples of both ranks")


QUESTIONS_10 = (
    Question("Two ranks stop at the same step, print nothing and go on waiting. What do you do first to see why?", (
        O("Rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL and a short process-group timeout.",
          "DETAIL compares every collective's fingerprint across ranks and names the difference; the timeout "
          "turns the silent wait into an error"),
        O("Add find_unused_parameters=True.", "no: that is the fix for parameters without a gradient, which "
          "fails loudly, naming them"),
        O("Start more ranks.", "no: every extra rank waits for the same missing collective"),
    ), answer="a"),
    Question("Only rank 0 calls sampler.set_epoch(epoch); the other ranks never do. What happens from the second "
             "epoch on?", (
        O("Nothing: rank 0 passes its epoch on to the other ranks' samplers.",
          "no: each rank's DistributedSampler is its own object in its own process; set_epoch changes only the "
          "sampler it is called on"),
        O("The ranks shuffle with different epochs, so their shares overlap: some samples are used twice in an "
          "epoch, others not at all.",
          "each rank takes every world-size-th index of its own permutation (seed + epoch): two different "
          "permutations give shares that overlap"),
        O("DDP raises an error, because the ranks now train on different samples.",
          "no: DDP never looks at the data, and different samples on each rank is the normal case, so nothing "
          "fails"),
    ), answer="b"),
    Question("Two ranks hold 32 samples each; the summed losses of their shards are 16.0 (rank 0) and 48.0 "
             "(rank 1). What is the mean loss of the whole batch of 64?", grade=_batch_loss, example="2.5"),
)
