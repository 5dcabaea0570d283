"""The rank program that breaks distributed training on purpose: ``torchrun ... -m gpulab.distributed.failures.worker``.

    torchrun --standalone --nproc-per-node 2 -m gpulab.distributed.failures.worker --case mismatch --case unused

Each ``--case`` runs, in the order given, in one process group: first the mistake, whose real error
is caught and printed (``case NAME error: <the exception's first line>``), then its fix
(``case NAME fixed: ...``). A mistake that leaves the group unusable (``missing``: a rank that never
reaches the barrier) is not caught: it ends the launch, and the launcher's ``LaunchError`` carries
the failing rank's last lines. Every collective has a short timeout (``--pg-timeout``).
The DDP cases (``unused``, ``uneven``) live in ``gpulab.distributed.failures.ddp_cases``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from gpulab import argtypes
from gpulab.distributed.failures.ddp_cases import short_group, uneven, unused
from gpulab.distributed.launch.rank_io import exit_worker, run_rank
from gpulab.timing import Stopwatch

FATAL = ("missing",)  # ends the launch: must come last
DETAIL = ("mismatch", "shapes")  # run in a group checked as under TORCH_DISTRIBUTED_DEBUG=DETAIL
DETAIL_STARTS = ("Collectives differ in the following aspects:", "Parameters which did not receive grad")


def say(case: str, what: str, text: str) -> None:
    """One whole output line: ``case NAME WHAT: TEXT`` (only the first line of ``text``)."""
    first = str(text).strip().splitlines()[0] if str(text).strip() else ""
    print(f"case {case} {what}: {first}", flush=True)


def first_sentence(text: str, most: int = 3) -> str:
    """The message's first line, joined with the next ones (at most ``most``) while a sentence runs on."""
    lines = [line.strip() for line in text.strip().splitlines()]
    said = lines[0] if lines else ""
    for line in lines[1:most]:
        if said.endswith(".") or not line:
            break
        said += " " + line
    return said


def report_error(case: str, exc: Exception) -> None:
    """The exception's first sentence, then the part of its message that names what differs (``detail``)."""
    text = f"{type(exc).__name__}: {exc}"
    say(case, "error", first_sentence(text))
    for start in DETAIL_STARTS:
        at = text.find(start)
        if at >= 0:
            say(case, "detail", " ".join(text[at:].split()))


def mismatch(rank: int, world: int, args: argparse.Namespace, group=None) -> tuple[Callable, Callable]:
    """Rank 0 all-reduces while the others broadcast; fixed: every rank all-reduces."""
    def broken() -> None:
        t = torch.ones(4)
        dist.all_reduce(t, group=group) if rank == 0 else dist.broadcast(t, src=0, group=group)

    def fixed() -> str:
        t = torch.ones(4)
        dist.all_reduce(t, group=group)
        return f"every rank called all_reduce, each element is now {t[0].item():g} (= world size)"
    return broken, fixed


def shapes(rank: int, world: int, args: argparse.Namespace, group=None) -> tuple[Callable, Callable]:
    """Each rank all-reduces a tensor of a different length; fixed: pad to the longest first."""
    def broken() -> None:
        dist.all_reduce(torch.ones(3 + rank), group=group)

    def fixed() -> str:
        mine = torch.ones(3 + rank)
        longest = torch.tensor([len(mine)])
        dist.all_reduce(longest, op=dist.ReduceOp.MAX, group=group)  # agree on one shape first
        padded = torch.zeros(int(longest.item()))
        padded[: len(mine)] = mine
        dist.all_reduce(padded, group=group)
        return f"agreed on length {int(longest.item())} and padded with zeros: sums {padded.tolist()}"
    return broken, fixed


def loss(rank: int, world: int, args: argparse.Namespace) -> tuple[Callable, Callable]:
    """Each rank's loss on its own shard: rank 0's alone is not the loss of the batch; all-reduced it is."""
    torch.manual_seed(0)
    X, y = torch.randn(64, 4), torch.randn(64, 1)
    model = nn.Linear(4, 1)
    xs, ys = X.tensor_split(world)[rank], y.tensor_split(world)[rank]

    def broken() -> None:
        mine = nn.functional.mse_loss(model(xs), ys).detach()
        if rank == 0:
            print(f"case loss rank 0 only: {mine.item():.4f}", flush=True)

    def fixed() -> str:
        mine = nn.functional.mse_loss(model(xs), ys, reduction="sum").detach()
        dist.all_reduce(mine)  # the sum over every rank's shard, then divide by the whole batch
        whole = nn.functional.mse_loss(model(X), y).item()
        return f"all-reduced {mine.item() / len(X):.4f}, the whole batch in one process {whole:.4f}"
    return broken, fixed


def timeout(rank: int, world: int, args: argparse.Namespace) -> tuple[Callable, Callable]:
    """The mismatch of ``mismatch`` without DETAIL, in a group with a short timeout: the ranks wait, then fail.

    Rank 0's limit is the shortest, so rank 0 times out first and its message is the one shown. With equal
    limits either rank may time out first; the other then sees its connection closed by the peer instead.
    """
    def broken() -> None:
        limit = args.short_timeout * (1 if rank == 0 else 2)
        mismatch(rank, world, args, short_group(args, limit))[0]()

    def fixed() -> str:
        said = mismatch(rank, world, args, short_group(args))[1]()
        return f"{said}, in a group whose timeout is {args.short_timeout:g} s"
    return broken, fixed


def missing(rank: int, world: int, args: argparse.Namespace) -> tuple[Callable, Callable]:
    """The last rank arrives late at a ``monitored_barrier``: in time (the fix first), then too late (fatal)."""
    limit = datetime.timedelta(seconds=args.barrier_timeout)

    def arrive(delay: float) -> None:
        if rank == world - 1:
            time.sleep(delay)  # a rank stuck in its own work (a slow disk, a deadlock, an endless loop)
        dist.monitored_barrier(timeout=limit, wait_all_ranks=True)  # rank 0 names every missing rank

    def fixed() -> str:
        arrive(args.barrier_timeout / 4)
        return f"the late rank arrived within the {args.barrier_timeout:g} s limit: every rank passed"

    def broken() -> None:
        arrive(args.barrier_timeout * 4)
    return broken, fixed


CASES: dict[str, Callable] = {"mismatch": mismatch, "shapes": shapes, "unused": unused, "uneven": uneven,
                              "loss": loss, "missing": missing, "timeout": timeout}


def detail_group() -> dist.ProcessGroup:
    """A new group of every rank whose collectives are checked as under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``.

    The level is read when a group is created; it goes back at once, because constructing DDP under
    DETAIL crashed (SIGSEGV) with torch 2.13 on CPU.
    """
    before = dist.get_debug_level()
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        return dist.new_group()
    finally:
        dist.set_debug_level(before)


def run_cases(names: Sequence[str], args: argparse.Namespace) -> None:
    """Run each case's mistake (its error caught and printed, unless fatal) and then its fix."""
    rank, world = dist.get_rank(), dist.get_world_size()
    for name in names:
        clock = Stopwatch().start()
        make = CASES[name]
        broken, fixed = make(rank, world, args, detail_group()) if name in DETAIL else make(rank, world, args)
        if name in FATAL:
            say(name, "fixed", fixed())
            dist.barrier()
            say(name, "seconds", f"{clock.elapsed():.2f}")
            sys.stdout.flush()
            broken()  # raises on the rank that waits; the launch ends here
            continue
        try:
            said = broken()
            say(name, "no error", said or "the mistake ran without an exception")
        except Exception as exc:  # the real message, first line
            report_error(name, exc)
        dist.barrier()  # both ranks are past the mistake before the fix starts
        say(name, "fixed", fixed())
        say(name, "seconds", f"{clock.elapsed():.2f}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The worker's options."""
    p = argparse.ArgumentParser(prog="gpulab.distributed.failures.worker", description=__doc__.splitlines()[0])
    p.add_argument("--case", action="append", choices=sorted(CASES), required=True, help="repeat to run several")
    p.add_argument("--pg-timeout", type=argtypes.positive_float, default=30.0, help="seconds any collective may wait")
    p.add_argument("--short-timeout", type=argtypes.positive_float, default=2.0,
                   help="the group timeout of cases timeout and uneven")
    p.add_argument("--barrier-timeout", type=argtypes.positive_float, default=2.0, help="seconds monitored_barrier waits")
    args = p.parse_args(argv)
    fatal = [c for c in args.case if c in FATAL]
    if fatal and (args.case[-1] != fatal[0] or len(fatal) > 1):
        p.error(f"--case {fatal[0]} ends the launch: give it once, last")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point under torchrun."""
    args = parse_args(argv)
    torch.set_num_threads(1)
    return run_rank("gloo", args.pg_timeout, lambda env: run_cases(args.case, args))


if __name__ == "__main__":
    exit_worker(main())
