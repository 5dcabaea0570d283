"""What a torchrun launch gives back: its lines, the result, and the errors that name the failing rank.

Lines are tagged by the rank that printed them (``[rank N] ...``, see ``gpulab.distributed.launch.rank_io``);
torchrun's own lines carry no tag. When a launch fails, ``failure(lines)`` names the rank that failed
first and shows its own error. A rank that raised ends with one ``FAILED`` line giving the time it failed
(``gpulab.distributed.launch.rank_io``): the earliest wins, except that an error which only reports a peer gone
(``Connection closed by peer``: the peer failed first) loses to any other. torchrun's own report cannot
tell: it keeps whole seconds and, on a tie, names rank 0. Without such lines (a rank killed by a signal),
its report is read, and failing that the first rank that printed a traceback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from gpulab.distributed.launch.rank_io import FAILED

RANK_LINE = re.compile(r"^\[rank (\d+)\] ")
FAILED_LINE = re.compile(r"^\[rank (\d+)\] " + re.escape(FAILED) + r" (\d+(?:\.\d*)?): (.*)$")
#: Errors that only say a peer went away: the rank that went away failed first.
PEER_GONE = re.compile(r"Connection (closed|reset) by peer|Broken pipe|Pair is closed|peer.*(closed|disconnected)", re.I)
ROOT_CAUSE_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
ROOT_CAUSE_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
TAIL = 20


class LaunchError(RuntimeError):
    """torchrun failed; ``rank`` is the rank that failed first (``None`` if unknown)."""

    def __init__(self, message: str, rank: int | None = None, returncode: int | None = None,
                 lines: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.rank, self.returncode, self.lines = rank, returncode, list(lines)


class LaunchTimeout(LaunchError):
    """torchrun ran past its timeout and was stopped with all its workers."""


@dataclass
class LaunchResult:
    """What a finished launch printed and how long it took."""

    returncode: int
    lines: list[str]
    seconds: float
    command: list[str] = field(default_factory=list)

    def rank_lines(self, rank: int) -> list[str]:
        """The lines rank ``rank`` printed, without their ``[rank N]`` prefix."""
        return [RANK_LINE.sub("", line) for line in self.lines if line_rank(line) == rank]


def line_rank(line: str) -> int | None:
    """The rank a ``[rank N] ...`` line came from, ``None`` for torchrun's own lines."""
    match = RANK_LINE.match(line)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class RankFailure:
    """One rank's ``FAILED`` line: which rank, when (seconds since 1970) and its error's first line."""

    rank: int
    when: float
    error: str

    @property
    def peer_gone(self) -> bool:
        """True when the error only says that another rank went away."""
        return bool(PEER_GONE.search(self.error))


def rank_failures(lines: Sequence[str]) -> list[RankFailure]:
    """Every ``FAILED`` line of the launch, the rank that failed first at the front.

    First come the errors of a rank's own, by time; then the ones that only report a peer gone, by time.
    """
    found = [RankFailure(int(m.group(1)), float(m.group(2)), m.group(3)) for m in map(FAILED_LINE.match, lines) if m]
    return sorted(found, key=lambda f: (f.peer_gone, f.when, f.rank))


def root_cause(lines: Sequence[str]) -> tuple[int | None, int | None]:
    """The first failed rank and its exit code from torchrun's report, else the rank with a traceback."""
    rank = exitcode = None
    for line in reversed(lines):
        if exitcode is None and (m := ROOT_CAUSE_EXIT.match(line)):
            exitcode = int(m.group(1))
        if (m := ROOT_CAUSE_RANK.match(line)):
            rank = int(m.group(1))
            break
    if rank is None:
        for line in lines:
            if line_rank(line) is not None and "Traceback" in line:
                return line_rank(line), exitcode
    return rank, exitcode


def report(what: str, lines: Sequence[str], rank: int | None, tail: int = TAIL) -> str:
    """``what``, then the last lines of ``rank`` (or of the whole output when it printed none)."""
    mine = [line for line in lines if line_rank(line) == rank and not FAILED_LINE.match(line)] if rank is not None else []
    shown_lines = mine[-tail:]
    who = f"rank {rank}"
    if not shown_lines:
        shown_lines, who = list(lines[-tail:]), "the output"
    shown = "\n".join(f"  {line}" for line in shown_lines) or "  (no output)"
    return f"{what}; last lines of {who}:\n{shown}"


def _first_failed(lines: Sequence[str]) -> tuple[int | None, str | None]:
    """The rank that failed first and its error's first line (None when no rank said it failed)."""
    failures = rank_failures(lines)
    if not failures:
        return None, None
    first = failures[0]
    if first.peer_gone:  # every rank that raised only lost a peer: a rank that died without raising went first
        reported, _ = root_cause(lines)
        if reported is not None and reported not in {f.rank for f in failures}:
            return reported, None
    return first.rank, first.error


def failure(lines: Sequence[str], returncode: int, shown: bool = False) -> LaunchError:
    """The ``LaunchError`` for a launch that ended with ``returncode`` != 0, naming the rank that failed first.

    ``shown``: every line was already printed as it came, so the message gives the rank's error in one
    line and points at its traceback above instead of printing it a second time.
    """
    rank, error = _first_failed(lines)
    exitcode = None
    if rank is None:
        rank, exitcode = root_cause(lines)
    if rank is None:
        what = "torchrun failed"
    elif error is None:
        what = f"rank {rank} failed first"
    else:
        what = f"rank {rank} failed first: {error}"
    if exitcode is not None:
        what += f" (exit code {exitcode})"
    if shown and rank is not None:
        return LaunchError(f"{what}; its traceback is above, in the lines marked [rank {rank}]", rank, returncode, lines)
    return LaunchError(report(what, lines, rank), rank, returncode, lines)
