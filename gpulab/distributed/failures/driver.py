"""The failures of notebook 10, reproduced on purpose: what goes wrong, the fix, and the line that gives it away.

``CASES`` lists every failure (``Failure``: name, what goes wrong, the fix, the tell-tale words of the real
error). ``reproduce(["mismatch", "shapes"])`` runs the rank cases in ONE short torchrun launch of
``gpulab.distributed.failures.worker`` (short timeouts everywhere, DETAIL checks where a case needs them) and
returns each case's real error line, its fixed run and the seconds it took (``Reproduced``). The cases that
need no process group run in this process: ``port_in_use()`` and ``sampler_orders()``.
"""

from __future__ import annotations

import datetime
import re
import socket
from dataclasses import dataclass, field
from typing import Callable, Sequence

from gpulab.distributed.launch.collect import run_ranks
from gpulab.distributed.launch.result import LaunchError, LaunchTimeout, line_rank
from gpulab.timing import Stopwatch

RANK_PREFIX = re.compile(r"^\[rank \d+\] ")
CASE_LINE = re.compile(r"^case (\w+) ([\w ]+?): (.*)$")


@dataclass(frozen=True)
class Failure:
    """One way distributed training breaks."""

    name: str
    what: str  # what goes wrong, in one sentence
    fix: str
    tell: str  # words of the real error (or output) that give it away
    launched: bool = True  # reproduced in a torchrun launch (False: in this process)


CASES: tuple[Failure, ...] = (
    Failure("port", "the rendezvous port is already taken by another program (often a run that never ended)",
            "let torchrun pick a free port (--standalone, or port 0), or stop the old run", "address already in use",
            launched=False),
    Failure("mismatch", "ranks call different collectives at the same step (an `if rank == 0:` around one)",
            "every rank calls the same collectives in the same order", "Detected mismatch between collectives"),
    Failure("shapes", "ranks pass tensors of different shapes to one collective",
            "agree on one shape first (pad, or all_gather the sizes)", "Detected mismatch between collectives"),
    Failure("timeout", "the same mismatch without DETAIL: nothing checks it, the ranks wait until the timeout",
            "give every group a timeout; rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to see why",
            "Timed out waiting"),
    Failure("missing", "one rank never reaches the barrier, so the others wait for it until the timeout",
            "find what that rank is stuck in; give collectives a timeout", "failed to pass monitoredBarrier"),
    Failure("unused", "a parameter takes no part in the loss: its gradient never comes, the step's reduction never "
            "ends, and the next step raises", "remove the parameter, or DDP(model, find_unused_parameters=True)",
            "Expected to have finished reduction in the prior iteration"),
    Failure("uneven", "ranks have different numbers of batches: one finishes and goes on, another waits in the "
            "all-reduce of its extra batch", "wrap the training loop in `with Join([ddp_model]):`, or give every "
            "rank the same number of batches", "Timed out waiting"),
    Failure("sampler", "DistributedSampler without set_epoch: the same order every epoch",
            "call sampler.set_epoch(epoch) at the start of every epoch", "the same order every epoch",
            launched=False),
    Failure("loss", "the loss printed by rank 0 is only rank 0's shard, not the batch's",
            "all-reduce the summed loss, divide by the whole batch", "rank 0 only"),
    Failure("spawn", "mp.spawn of a function typed into a notebook: the new processes cannot import it",
            "put the rank's code in a module and launch it with torchrun", "Can't get attribute", launched=False),
)
BY_NAME = {case.name: case for case in CASES}
LAUNCHED = tuple(case.name for case in CASES if case.launched)
FATAL = ("missing",)  # ends its launch (gpulab.distributed.failures.worker.FATAL)


def case(name: str) -> Failure:
    """The ``Failure`` called ``name``; ValueError naming the valid names otherwise."""
    if name not in BY_NAME:
        raise ValueError(f"unknown failure case {name!r}: use one of {', '.join(BY_NAME)}")
    return BY_NAME[name]


@dataclass
class Reproduced:
    """What one launched case printed: the real error line, its fix, the seconds it took in the ranks."""

    name: str
    error: str = ""  # the real error's first line (rank 0's, or the failing rank's)
    detail: str = ""  # the part of the message that names what differs, when it has one
    fixed: str = ""
    failed_rank: int | None = None  # the rank torchrun reports as the root cause (a case that ends the launch)
    seconds: float = float("nan")
    startup: float = float("nan")  # only for "launch": seconds until the ranks printed their first case
    lines: list[str] = field(default_factory=list)  # everything the case printed, every rank

    def said(self, what: str) -> dict[int, str]:
        """What each rank printed as ``case NAME WHAT: ...`` (``"fixed"``, ``"error"``, ``"no error"``), by rank."""
        out = {}
        for line in self.lines:
            m = CASE_LINE.match(RANK_PREFIX.sub("", line))
            if m and m.group(2) == what and line_rank(line) is not None:
                out[line_rank(line)] = m.group(3)
        return dict(sorted(out.items()))

    def text(self, width: int = 110) -> str:
        """The error, what differs and the fix, wrapped to ``width`` columns for reading."""
        import textwrap

        parts = [("error", self.error), ("detail", self.detail), ("fixed", self.fixed)]
        return "\n".join(textwrap.fill(f"{what}: {said}", width, subsequent_indent="    ")
                         for what, said in parts if said)

    @property
    def found(self) -> bool:
        """True when the error (or output) holds the case's tell-tale words."""
        return case(self.name).tell in self.error


def _parse(lines: Sequence[str], names: Sequence[str]) -> dict[str, Reproduced]:
    """Each case's lines; its error, detail and fix as rank 0 printed them (any rank if rank 0 did not)."""
    out = {name: Reproduced(name) for name in names}
    for line in lines:
        m = CASE_LINE.match(RANK_PREFIX.sub("", line))
        if not m or m.group(1) not in out:
            continue
        got, what, said = out[m.group(1)], m.group(2), m.group(3)
        got.lines.append(line)
        keep = line_rank(line) == 0
        if what in ("error", "rank 0 only") and (keep or not got.error):
            got.error = said if what == "error" else f"rank 0 only: {said}"
        elif what == "detail" and (keep or not got.detail):
            got.detail = said
        elif what == "fixed" and (keep or not got.fixed):
            got.fixed = said
        elif what == "seconds" and keep:
            got.seconds = float(said)
    return out


def _fatal_error(exc: LaunchError, name: str) -> str:
    """The tell-tale line of a case that ended the launch, from the failing rank's last lines."""
    said = [RANK_PREFIX.sub("", line) for line in exc.lines if line_rank(line) is not None]
    tell = case(name).tell
    return next((line for line in said if tell in line and "Error" in line),
                next((line for line in said if tell in line),
                     next((line for line in reversed(said) if "Error" in line), "no error line found")))


def plan(names: Sequence[str]) -> list[str]:
    """The cases in launch order: ``missing``, which ends the launch, last."""
    names = [case(name).name for name in names]  # ValueError for an unknown name
    local = [n for n in names if not BY_NAME[n].launched]
    if local:
        raise ValueError(f"case {local[0]!r} runs in this process, not under torchrun: launch one of "
                         f"{', '.join(LAUNCHED)}")
    if not names or len(set(names)) != len(names):
        raise ValueError(f"give each case once, at least one: {', '.join(LAUNCHED)}")
    return sorted(names, key=lambda n: n in FATAL)


def reproduce(names: Sequence[str] = LAUNCHED, *, nproc: int = 2, timeout: float = 60.0, short_timeout: float = 2.0,
              barrier_timeout: float = 2.0, launch: Callable | None = None) -> dict[str, Reproduced]:
    """Run the launched cases ``names`` in one torchrun launch; one ``Reproduced`` each.

    The launch runs with ``TORCH_DISTRIBUTED_DEBUG=INFO`` (DDP then names unused parameters); the worker
    checks the groups of ``mismatch`` and ``shapes`` as DETAIL does.

    ``"launch"`` in the result holds every line, the launch's wall time and its start-up time (until the
    first case's output: torchrun and the ranks starting, importing torch, joining the group). A launch running past
    ``timeout`` s is stopped with all its ranks (``LaunchTimeout``).
    """
    names = plan(names)
    args = [a for n in names for a in ("--case", n)]
    args += ["--short-timeout", str(short_timeout), "--barrier-timeout", str(barrier_timeout)]
    clock, first_case = Stopwatch().start(), []

    def stamp(line: str) -> None:  # when the ranks, started and in their group, print their first case
        if not first_case and CASE_LINE.match(RANK_PREFIX.sub("", line)):
            first_case.append(clock.elapsed())

    try:
        with run_ranks("gpulab.distributed.failures.worker", lambda _folder: args, nproc=nproc, timeout=timeout,
                       launch=launch, env={"TORCH_DISTRIBUTED_DEBUG": "INFO"}, on_line=stamp) as ranks:
            lines, error = ranks.result.lines, None
    except LaunchTimeout:
        raise
    except LaunchError as exc:
        lines, error = exc.lines, exc
    out = _parse(lines, names)
    fatal = [n for n in names if n in FATAL]
    if error is not None and not fatal:
        raise error
    if fatal:
        if error is None:
            raise RuntimeError(f"case {fatal[0]!r} ended without the error it reproduces")
        out[fatal[0]].error = _fatal_error(error, fatal[0])
        out[fatal[0]].failed_rank = error.rank
    out["launch"] = Reproduced("launch", seconds=clock.elapsed(), lines=list(lines),
                               startup=first_case[0] if first_case else float("nan"))
    return out


def port_in_use(timeout: float = 2.0) -> str:
    """Take a free port with a plain socket, then open a torch ``TCPStore`` on it: the real error's first line."""
    from torch.distributed import TCPStore

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            TCPStore("127.0.0.1", port, 1, True, timeout=datetime.timedelta(seconds=timeout))
        except Exception as exc:  # a DistNetworkError (a RuntimeError) naming the port
            return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return "no error: the store opened on a port in use"


def sampler_orders(n: int = 12, epochs: int = 3, *, set_epoch: bool, num_replicas: int = 2,
                   rank: int = 0, seed: int = 0) -> list[list[int]]:
    """The sample indices one rank's ``DistributedSampler`` gives in each epoch (no process group needed)."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(n), num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
    orders = []
    for epoch in range(epochs):
        if set_epoch:
            sampler.set_epoch(epoch)
        orders.append(list(sampler))
    return orders


def default_timeouts() -> dict[str, object]:
    """How long a collective waits by default, as this torch says it: ``torch.distributed.constants`` and the docs.

    ``"gloo"``: ``default_pg_timeout`` (every backend but nccl); ``"nccl"``: ``default_pg_nccl_timeout``, None
    in a torch built without NCCL; ``"documented"``: the sentence of ``init_process_group``'s docstring.
    """
    import torch.distributed as dist
    from torch.distributed import constants

    doc = " ".join((dist.init_process_group.__doc__ or "").split())
    said = re.search(r"Default value is [^.]*\.", doc)
    return {"gloo": constants.default_pg_timeout, "nccl": constants.default_pg_nccl_timeout,
            "documented": said.group(0) if said else ""}

