"""Checks for notebook 10 (when distributed training breaks): diagnose a log, and its self-check questions.

``LOGS`` holds excerpts of real error output, in the forms torch 2.13 prints them (other runs: other ranks,
sizes, timeouts). ``check_diagnosis({"A": "port", ...})`` says which excerpts are diagnosed right and, for
the first wrong one, which words of the log point the way. Causes are the names of
``gpulab.distributed.failures.CASES``.
"""

from __future__ import annotations

from gpulab.distributed.failures import BY_NAME
from gpulab.exercises import Feedback, as_number, correct, wrong
from gpulab.exercises.quiz import Option as O
from gpulab.exercises.quiz import Question

LOGS: dict[str, str] = {
    "A": "[rank 0] RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms",
    "B": ("[rank 1] RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
          "CollectiveFingerPrint(SequenceNumber=118, OpType=ALLREDUCE, TensorShape=[1000], ...), but Rank 0 is "
          "running collective: CollectiveFingerPrint(SequenceNumber=118, OpType=ALLREDUCE, TensorShape=[1024], "
          "...). Collectives differ in the following aspects: Tensor Tensor shapes: 1000vs 1024"),
    "C": ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
          "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"),
    "D": ("[rank 0] RuntimeError: Expected to have finished reduction in the prior iteration before starting a new "
          "one. [...] Parameters which did not receive grad for rank 0: classifier.aux.bias, classifier.aux.weight"),
    "E": ("[rank 3] RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
          "1800000ms for recv operation to complete"),
    "F": ("[rank 0] RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
          "CollectiveFingerPrint(SequenceNumber=7, OpType=BROADCAST, ...), but Rank 2 is running collective: "
          "CollectiveFingerPrint(SequenceNumber=7, OpType=ALLGATHER, ...). Collectives differ in the following "
          "aspects: Op type: BROADCASTvs ALLGATHER"),
    "G": "AttributeError: Can't get attribute 'train' on <module '__main__' (built-in)>",
    "H": ("[rank 0] epoch 1: first samples [812, 40, 377, 95, 610, 3]\n"
          "[rank 0] epoch 2: first samples [812, 40, 377, 95, 610, 3]"),
}
DIAGNOSIS = {"A": "missing", "B": "shapes", "C": "port", "D": "unused", "E": "timeout", "F": "mismatch",
             "G": "spawn", "H": "sampler"}
CLUES = {
    "A": "'failed to pass monitoredBarrier' names ranks that never reached the barrier",
    "B": "the fingerprints have the same OpType; what differs is 'Tensor Tensor shapes'",
    "C": "EADDRINUSE: another program already listens on that port",
    "D": "'Parameters which did not receive grad' lists parameters the loss never used",
    "E": "'Timed out waiting 1800000ms' is the process group's default timeout (30 min) running out: "
         "a collective some rank never joined, with nothing checking which",
    "F": "'Op type: BROADCASTvs ALLGATHER': the ranks called different collectives",
    "G": "\"Can't get attribute ... on <module '__main__'>\": a new process could not import a notebook's function",
    "H": "no error at all: the same indices start every epoch, the sampler's order never changes",
}


def check_diagnosis(answers: object) -> Feedback:
    """Is every excerpt of ``LOGS`` mapped to its cause (a case name such as ``"port"``)?"""
    if not isinstance(answers, dict):
        return wrong(f"answer with a dict from log letter to cause, e.g. {{'A': 'port'}}, got {type(answers).__name__}")
    unknown = sorted(set(map(str, answers)) - set(LOGS))
    if unknown:
        return wrong(f"there is no log {unknown[0]!r}: the logs are {', '.join(LOGS)}")
    missing = [letter for letter in LOGS if answers.get(letter) in (None, "", "?")]
    if missing:
        return wrong(f"diagnose every log: {', '.join(missing)} not answered yet")
    for letter, cause in answers.items():
        if cause not in BY_NAME:
            return wrong(f"log {letter}: {cause!r} is not a cause; use one of {', '.join(BY_NAME)}")
    off = [letter for letter in LOGS if answers[letter] != DIAGNOSIS[letter]]
    if off:
        first = off[0]
        return wrong(f"{len(LOGS) - len(off)} of {len(LOGS)} right. Look again at log {first}: {CLUES[first]}")
    return correct(f"all {len(LOGS)} logs diagnosed; the tell-tale words are the first thing to search for")


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
    Question("Training with DistributedSampler but without sampler.set_epoch(epoch): what happens?", (
        O("An error at the second epoch.", "no: nothing fails, which is why it goes unnoticed"),
        O("Every epoch visits the samples in the same order.",
          "the sampler shuffles with seed + epoch, and its epoch stays 0 unless you set it"),
        O("Two ranks get the same samples.", "no: the ranks still split the data; only the order per epoch repeats"),
    ), answer="b"),
    Question("Two ranks hold 32 samples each; the summed losses of their shards are 16.0 (rank 0) and 48.0 "
             "(rank 1). What is the mean loss of the whole batch of 64?", grade=_batch_loss, example="2.5"),
)
