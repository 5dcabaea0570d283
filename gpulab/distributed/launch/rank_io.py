"""What a program running under torchrun uses: its place (``rank_env``), whole ``[rank N]`` lines, a clean exit.

``rank_env()`` reads torchrun's environment once (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``); outside torchrun it says so in one line and gives None, so every rank
program starts ``env = rank_env(); if env is None: return 2``. ``run_rank(backend, timeout_s, body)``
is that whole start and ``run_in_group`` in one call, for a worker with nothing to do in between.

``prefix_output(rank)`` makes ``print``, warnings and tracebacks write whole lines prefixed
``[rank N] ``, one ``os.write`` per batch of lines, so the lines of different ranks sharing one
pipe never mix and a launcher (``gpulab.distributed.launch.torchrun``) can tell them apart. ``exit_worker(code)``
leaves after the process group is destroyed without running C++ static destructors. A rank whose
work raises prints its traceback and then one :data:`FAILED` line with the wall-clock time it failed at,
so the launcher can name the rank that failed first (``gpulab.distributed.launch.result``).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable, NoReturn


#: How a rank's last line starts when its work raised: then the time (seconds since 1970) and the error.
FAILED = "gpulab: this rank failed at"


def failed_line(exc: BaseException, when: float) -> str:
    """The one line a failing rank ends with: ``FAILED``, the time it failed and its error's first line."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{FAILED} {when:.6f}: {type(exc).__name__}" + (f": {first}" if first else "")


@dataclass(frozen=True)
class RankEnv:
    """Where this process stands in a torchrun launch."""

    rank: int
    world: int
    local_rank: int
    local_world: int


def rank_env() -> RankEnv | None:
    """This process's place from torchrun's environment; None (and one line on stderr) outside torchrun."""
    env = os.environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        sys.stderr.write("error: run me under torchrun (RANK and WORLD_SIZE are not set)\n")
        return None
    world = int(env["WORLD_SIZE"])
    return RankEnv(int(env["RANK"]), world, int(env.get("LOCAL_RANK", 0)), int(env.get("LOCAL_WORLD_SIZE", world)))


class RankLines:
    """A text stream writing whole lines, each prefixed ``[rank N] ``, with one ``os.write``."""

    def __init__(self, rank: int, fd: int) -> None:
        self.prefix, self.fd, self.pending = f"[rank {rank}] ", fd, ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        if lines:  # a write to a pipe under 4 KiB is atomic: lines of two ranks never mix
            os.write(self.fd, "".join(f"{self.prefix}{line}\n" for line in lines).encode())
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.write("\n")

    def isatty(self) -> bool:
        return False


def prefix_output(rank: int) -> None:
    """In a worker: make ``print``, warnings and tracebacks write ``[rank N] ``-prefixed whole lines."""
    sys.stdout, sys.stderr = RankLines(rank, 1), RankLines(rank, 2)


def exit_worker(code: int) -> NoReturn:
    """End a worker process after its process group is destroyed, skipping C++ static destructors.

    With gloo, a background thread torn down at interpreter exit sometimes aborts the process
    ("terminate called without an active exception", signal 6) after a perfectly good run:
    measured here in 3 of 16 three-rank runs, and 0 of 10 when leaving this way. A core dump
    shows the cause (torch 2.13): gloo's worker thread frees its last work while Python finalizes,
    and taking the GIL there ends the thread inside a destructor. Notebook 05's stand-alone script,
    which cannot import this, drops DDP and runs ``gc.collect()`` before leaving the group instead.
    """
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def run_in_group(backend: str, timeout_s: float, body: Callable[[], object]) -> int:
    """Join the process group, run ``body``, always leave the group; 0 on success, 1 after a traceback.

    Every rank program's life under torchrun: ``init_process_group`` with a timeout (so no
    collective can hang forever), the work, and ``destroy_process_group`` on any exit path.
    """
    import datetime

    import torch.distributed as dist

    try:
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
        body()
        return 0
    except Exception as exc:
        when = time.time()  # wall clock, comparable between processes: which rank failed first
        sys.stderr.write(traceback.format_exc() + failed_line(exc, when) + "\n")
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()


def run_rank(backend: str, timeout_s: float, body: Callable[[RankEnv], object]) -> int:
    """A whole rank program: its place, ``[rank N]`` lines, ``body(env)`` inside the group; 2 outside torchrun."""
    env = rank_env()
    if env is None:
        return 2
    prefix_output(env.rank)
    return run_in_group(backend, timeout_s, lambda: body(env))
