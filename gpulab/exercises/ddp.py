"""Checks for notebook 05 (DistributedDataParallel)."""

from __future__ import annotations

import re
import shlex

from gpulab.exercises import Feedback, correct, wrong


def _option(words: list[str], *names: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` for any of ``names``."""
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                return words[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def check_torchrun_command(command: object, nproc: int = 4) -> Feedback:
    """Is ``command`` a modern one-machine launch of ``gpulab.ddp_worker`` with ``nproc`` ranks?

    Accepted: ``torchrun`` or ``python -m torch.distributed.run``, ``--nproc-per-node`` (or
    ``--nproc_per_node``) equal to ``nproc``, ``--standalone``, then ``-m gpulab.ddp_worker``.
    """
    if not isinstance(command, str) or not command.strip():
        return wrong("write the command as one string, e.g. 'torchrun ...'")
    try:
        words = shlex.split(command)
    except ValueError as exc:
        return wrong(f"the command does not parse as a shell line ({exc})")
    text = " ".join(words)
    if "torch.distributed.launch" in text:
        return wrong("torch.distributed.launch is the deprecated launcher; use torchrun")
    if words[0] != "torchrun" and not re.match(r"^(python3?|\S*/python3?) -m torch\.distributed\.run\b", text):
        return wrong("start with torchrun (or python -m torch.distributed.run)")
    ranks = _option(words, "--nproc-per-node", "--nproc_per_node")
    if ranks is None:
        return wrong("say how many ranks to start with --nproc-per-node")
    if ranks != str(nproc):
        return wrong(f"--nproc-per-node is {ranks}, the task asks for {nproc} ranks")
    if "--standalone" not in words:
        return wrong("on one machine add --standalone: torchrun then picks a free port on its own")
    worker = [i for i in range(1, len(words) - 1) if words[i] == "-m" and words[i + 1] == "gpulab.ddp_worker"]
    if not worker:
        return wrong("run the worker as a module: -m gpulab.ddp_worker (after torchrun's options)")
    module_at = worker[-1]
    for flag in ("--nproc-per-node", "--nproc_per_node", "--standalone"):
        if any(w == flag or w.startswith(flag + "=") for w in words[module_at:]):
            return wrong(f"{flag} comes after the worker's name, so the worker gets it, not torchrun: move it before -m")
    return correct(f"torchrun starts {nproc} copies of gpulab.ddp_worker, each with its own RANK and LOCAL_RANK")
