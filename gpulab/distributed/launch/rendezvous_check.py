"""The pre-class check's rendezvous (``gpulab preflight``): can this machine run DDP? Driver and rank program.

``rendezvous(world_size=2, timeout=60)`` opens a ``TCPStore`` on a free loopback port (port 0: the
system picks one, so parallel runs never clash), starts ``world_size`` Python processes of this module,
each joining a gloo process group through that store and all-reducing ``rank + 1``, and reports
whether every rank saw the right sum. Every process has the time limit; whatever still runs at the
end is killed. The DDP notebooks need exactly this: processes, a local TCP port, and gloo. It uses no
torchrun on purpose (it checks what torchrun itself needs), with this OS's rendezvous settings
(:func:`gpulab.distributed.launch.rendezvous.current_plan`).
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from gpulab import argtypes
from gpulab.distributed.launch.processes import last_line
from gpulab.distributed.launch.rank_io import exit_worker
from gpulab.distributed.launch.rendezvous import current_plan
from gpulab.timing import Stopwatch
from gpulab.validate import positive_number

HOST = "127.0.0.1"
POLL_S = 0.05


@dataclass
class Rendezvous:
    """The outcome: ``ok``, what happened in one line, the seconds it took, and the rank processes."""

    ok: bool
    detail: str
    seconds: float
    pids: list[int] = field(default_factory=list)


def _use_libuv() -> bool:
    return current_plan().env.get("USE_LIBUV", os.environ.get("USE_LIBUV", "1")) != "0"  # none on Windows


def _master_store(timeout: float):
    """The rendezvous store, listening on a port the system picks."""
    from torch.distributed import TCPStore

    return TCPStore(HOST, 0, None, True, timeout=datetime.timedelta(seconds=timeout),
                    wait_for_workers=False, use_libuv=_use_libuv())


def _rank_command(port: int, rank: int, world_size: int, timeout: float) -> list[str]:
    return [sys.executable, "-m", "gpulab.distributed.launch.rendezvous_check", "--port", str(port), "--rank", str(rank),
            "--world-size", str(world_size), "--timeout", str(timeout)]


def rendezvous(world_size: int = 2, timeout: float = 60.0) -> Rendezvous:
    """Start ``world_size`` ranks that meet on 127.0.0.1 and all-reduce; never runs past ``timeout`` (+ clean-up)."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
        raise ValueError(f"world_size={world_size!r}: a rendezvous needs at least 2 ranks")
    positive_number(timeout, "timeout (seconds)")
    clock, start = Stopwatch().start(), time.monotonic()  # the seconds it took; the deadline
    try:
        store = _master_store(timeout)
    except (RuntimeError, OSError) as exc:
        return Rendezvous(False, f"could not open a port on {HOST}: {str(exc).strip().splitlines()[0]}",
                          clock.elapsed())
    env = {**os.environ, "OMP_NUM_THREADS": "1", **current_plan().env}
    logs = [tempfile.TemporaryFile() for _ in range(world_size)]
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(world_size):
            procs.append(subprocess.Popen(_rank_command(store.port, rank, world_size, timeout), env=env,
                                          stdin=subprocess.DEVNULL, stdout=logs[rank], stderr=subprocess.STDOUT))
        while time.monotonic() - start < timeout:
            codes = [p.poll() for p in procs]
            failed = [r for r, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                rank = failed[0]
                said = last_line(logs[rank]) or "no output"
                return Rendezvous(False, f"rank {rank} failed (exit status {codes[rank]}): {said}",
                                  clock.elapsed(), [p.pid for p in procs])
            if all(code == 0 for code in codes):
                return Rendezvous(True, f"{world_size} gloo ranks met on {HOST} and all-reduced correctly",
                                  clock.elapsed(), [p.pid for p in procs])
            time.sleep(POLL_S)
        waiting = [r for r, p in enumerate(procs) if p.poll() is None]
        return Rendezvous(False, f"rank(s) {', '.join(map(str, waiting))} did not finish within {timeout:g} s",
                          clock.elapsed(), [p.pid for p in procs])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
        for log in logs:
            log.close()
        del store


def _rank_main(argv: list[str] | None = None) -> int:
    """One rank: join the group through the store, all-reduce ``rank + 1``, check the sum."""
    parser = argparse.ArgumentParser(prog="python -m gpulab.distributed.launch.rendezvous_check")
    parser.add_argument("--port", type=argtypes.port, required=True)
    parser.add_argument("--rank", type=argtypes.non_negative_int, required=True)
    parser.add_argument("--world-size", type=argtypes.positive_int, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist

    limit = datetime.timedelta(seconds=args.timeout)
    store = dist.TCPStore(HOST, args.port, args.world_size, False, timeout=limit, use_libuv=_use_libuv())
    dist.init_process_group("gloo", store=store, rank=args.rank, world_size=args.world_size, timeout=limit)
    try:
        total = torch.tensor([float(args.rank + 1)])
        dist.all_reduce(total)
        want = args.world_size * (args.world_size + 1) / 2
        print(f"rank {args.rank}: all_reduce gave {total.item():g}, expected {want:g}")
        code = 0 if total.item() == want else 3
    finally:
        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    exit_worker(_rank_main())  # the group is destroyed; skip teardown, where gloo's threads can abort
