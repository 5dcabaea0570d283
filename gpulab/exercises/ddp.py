"""Checks for notebook 05 (DistributedDataParallel)."""

from __future__ import annotations

import re
import shlex
from typing import Sequence

from gpulab.exercises import Feedback, Question, as_number, correct, wrong
from gpulab.exercises import Option as O


def _option(words: list[str], *names: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` for any of ``names``."""
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                return words[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def _environment(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """Leading ``NAME=value`` words (optionally after ``env``) and the rest of the command."""
    env, i = {}, 1 if words and words[0] == "env" else 0
    while i < len(words) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[i]):
        name, value = words[i].split("=", 1)
        env[name] = value
        i += 1
    return env, words[i:]


def check_torchrun_command(
    command: object, nproc: int = 4, worker_args: Sequence[str] = (), visible_gpus: str | None = None
) -> Feedback:
    """Is ``command`` a modern one-machine launch of ``gpulab.distributed.ddp.worker`` with ``nproc`` ranks?

    Accepted: ``torchrun`` or ``python -m torch.distributed.run``, ``--nproc-per-node`` (or
    ``--nproc_per_node``) equal to ``nproc``, ``--standalone``, then ``-m gpulab.distributed.ddp.worker``.
    ``worker_args`` (e.g. ``["--epochs", "30"]``) must follow the worker's name, with the same
    values. ``visible_gpus`` (e.g. ``"4,5,6,7"``) asks for ``CUDA_VISIBLE_DEVICES=...`` before the command.
    """
    if len(worker_args) % 2:
        raise ValueError(f"worker_args={list(worker_args)!r} must be name/value pairs, e.g. ['--epochs', '30']")
    if not isinstance(command, str) or not command.strip():
        return wrong("write the command as one string, e.g. 'torchrun ...'")
    try:
        env, words = _environment(shlex.split(command))
    except ValueError as exc:
        return wrong(f"the command does not parse as a shell line ({exc})")
    if not words:
        return wrong("after the environment variables comes the command: torchrun ...")
    text = " ".join(words)
    if "torch.distributed.launch" in text:
        return wrong("torch.distributed.launch is the deprecated launcher; use torchrun")
    if words[0] != "torchrun" and not re.match(r"^(python3?|\S*/python3?) -m torch\.distributed\.run\b", text):
        return wrong("start with torchrun (or python -m torch.distributed.run)")
    if visible_gpus is not None:
        shown = env.get("CUDA_VISIBLE_DEVICES")
        if shown is None:
            return wrong(f"only GPUs {visible_gpus} may be used: start the line with CUDA_VISIBLE_DEVICES={visible_gpus}")
        if shown.replace(" ", "") != visible_gpus:
            return wrong(f"CUDA_VISIBLE_DEVICES is {shown!r}, the task asks for {visible_gpus!r}")
    ranks = _option(words, "--nproc-per-node", "--nproc_per_node")
    if ranks is None:
        return wrong("say how many ranks to start with --nproc-per-node")
    if ranks != str(nproc):
        hint = " (one rank per visible GPU)" if visible_gpus is not None else ""
        return wrong(f"--nproc-per-node is {ranks}, the task asks for {nproc} ranks{hint}")
    if "--standalone" not in words:
        return wrong("on one machine add --standalone: torchrun then picks a free port on its own")
    worker = [i for i in range(1, len(words) - 1) if words[i] == "-m" and words[i + 1] == "gpulab.distributed.ddp.worker"]
    if not worker:
        return wrong("run the worker as a module: -m gpulab.distributed.ddp.worker (after torchrun's options)")
    module_at = worker[-1]
    for flag in ("--nproc-per-node", "--nproc_per_node", "--standalone"):
        if any(w == flag or w.startswith(flag + "=") for w in words[module_at:]):
            return wrong(f"{flag} comes after the worker's name, so the worker gets it, not torchrun: move it before -m")
    wanted = list(worker_args)
    for name, value in zip(wanted[::2], wanted[1::2]):
        given = _option(words[module_at + 2:], name)
        if given is None:
            if _option(words[:module_at], name) is not None:
                return wrong(f"{name} is the worker's option: put it after -m gpulab.distributed.ddp.worker, or torchrun takes it")
            return wrong(f"pass {name} {value} to the worker, after -m gpulab.distributed.ddp.worker")
        if given != value:
            return wrong(f"{name} is {given}, the task asks for {value}")
    where = (f" on GPUs {visible_gpus} (which each rank sees renumbered as cuda:0..cuda:{nproc - 1})"
             if visible_gpus is not None else "")
    extra = f" with {' '.join(wanted)}" if wanted else ""
    return correct(f"torchrun starts {nproc} copies of gpulab.distributed.ddp.worker{where}{extra}, each with its own RANK and LOCAL_RANK")


def _rows_per_rank(answer: object) -> Feedback:
    import torch

    batch, ranks = 96, 3
    sizes = [len(s) for s in torch.arange(batch).tensor_split(ranks)]
    if isinstance(answer, (list, tuple)) and len(set(answer)) == 1:
        answer = answer[0]
    value = as_number(answer)
    if value is None:
        return wrong(f"answer with a number of rows, got {answer!r}")
    if value == sizes[0]:
        return correct(f"the global batch of {batch} is sliced over {ranks} ranks: {sizes} rows, one slice each")
    if value == batch:
        return wrong(f"{batch} is the global batch: all {ranks} ranks together see {batch} rows per step")
    if value == batch * ranks:
        return wrong(f"{batch * ranks} is what DistributedSampler with batch_size={batch} on each rank would use: "
                     "a bigger batch, so a different training run")
    return wrong(f"every rank takes its own slice of the {batch} rows of a global batch")


QUESTIONS_05: tuple[Question, ...] = (
    Question("Why can the code a DDP rank runs not be a function typed into a notebook cell?", (
        O("Each rank is a new Python process that imports its code, and a function typed into the kernel "
          "cannot be imported.",
          "so the rank's code lives in a script or a module (here gpulab/distributed/ddp/worker.py), started by torchrun"),
        O("Notebooks cannot use the gloo backend.",
          "no: the problem is new processes finding the code, not the backend"),
        O("DDP only works on GPUs.", "no: with gloo, DDP runs on CPU processes, as in this notebook"),
    ), answer="a"),
    Question("This project's `--batch-size` is the GLOBAL batch. A run with 3 ranks and `--batch-size 96`: how "
             "many rows does each rank take in one step?", grade=_rows_per_rank, example="10"),
    Question("A rank is killed mid-training and `torchrun --max-restarts 1` restarts the group. What makes the "
             "finished run end with the same weights as an uninterrupted one?", (
        O("Epoch checkpoints (model, optimizer, epoch) written atomically, and a data order that depends only "
          "on the seed and the epoch.", "the restarted ranks load the last checkpoint and take the same steps"),
        O("torchrun keeps the weights in memory while it restarts the ranks.",
          "no: a restart starts new processes; only what was saved to disk survives"),
        O("Nothing: a restarted run always ends with different weights.",
          "no: the notebook compares both runs, weight by weight"),
    ), answer="a"),
)
