"""What a torchrun launch gives back: its lines, the result, and the errors that name the failing rank.

Lines are tagged by the rank that printed them (``[rank N] ...``, see ``gpulab.distributed.rank_io``);
torchrun's own lines carry no tag. When a launch fails, ``failure(lines)`` reads torchrun's
error report (``rank: N``, ``exitcode: C``) or, failing that, the first rank that printed a
traceback, and builds a ``LaunchError`` showing that rank's last lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

RANK_LINE = re.compile(r"^\[rank (\d+)\] ")
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
    shown_lines = [line for line in lines if line_rank(line) == rank][-tail:] if rank is not None else []
    who = f"rank {rank}"
    if not shown_lines:
        shown_lines, who = list(lines[-tail:]), "the output"
    shown = "\n".join(f"  {line}" for line in shown_lines) or "  (no output)"
    return f"{what}; last lines of {who}:\n{shown}"


def failure(lines: Sequence[str], returncode: int) -> LaunchError:
    """The ``LaunchError`` for a launch that ended with ``returncode`` != 0."""
    rank, exitcode = root_cause(lines)
    what = f"rank {rank} failed" if rank is not None else "torchrun failed"
    if exitcode is not None:
        what += f" with exit code {exitcode}"
    return LaunchError(report(what, lines, rank), rank, returncode, lines)
