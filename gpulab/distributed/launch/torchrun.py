"""Run `torchrun` from a notebook or the command line: live output, a timeout, no orphans, any OS.

``launch("gpulab.distributed.ddp.worker", ["--epochs", "5"], nproc=2, timeout=120)`` starts
``python -m torch.distributed.run`` (the venv's torchrun), hands every output line to ``on_line``
as it arrives (default: print it) and returns a ``LaunchResult``. Workers prefix their lines with
``[rank N] `` (``gpulab.distributed.launch.rank_io.prefix_output``). A failing rank raises ``LaunchError`` naming
it with its last lines; a timeout, a KeyboardInterrupt or the end of the Python process stops
torchrun *and* its workers (``gpulab.distributed.launch.processes``). The flags and environment each OS needs come
from ``gpulab.distributed.launch.rendezvous``.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import time
from typing import Callable, Sequence

from gpulab.distributed.launch.result import LaunchResult, LaunchTimeout, failure, report
from gpulab.distributed.launch.processes import LineReader, ProcessTree, kill, new_group_options, stop_processes
from gpulab.distributed.launch.rendezvous import current_plan
from gpulab.distributed.launch.command import check_nproc, check_timeout, single_machine, torchrun_command
from gpulab.timing import Stopwatch

LEFTOVER_S = 2.0  # after torchrun exits, how long its workers may still write
_LIVE: "set[Torchrun]" = set()  # started and not yet stopped: stopped at interpreter exit


def print_line(line: str) -> None:
    """Print one output line at once (the default ``on_line``)."""
    print(line, flush=True)


class Torchrun:
    """One running torchrun. Use as a context manager: leaving it always stops every process.

    ``start()`` it, then ``wait(timeout)`` streams its output and returns a ``LaunchResult``
    (or raises ``LaunchError`` / ``LaunchTimeout``); ``rank_pid(r)`` / ``kill_rank(r)`` find or
    kill one rank (the crash demonstrations).
    """

    def __init__(self, command: Sequence[str], *, env: dict[str, str] | None = None,
                 on_line: Callable[[str], None] | None = print_line,
                 single_machine: bool = True) -> None:
        self.command, self.on_line = list(command), on_line
        plan = current_plan(single_machine)
        self.env = {**plan.env, **os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
                    "PYTHONUNBUFFERED": "1", **(env or {})}  # the plan's defaults never override the caller's
        self.lines: list[str] = []
        self.proc: subprocess.Popen | None = None
        self.tree: ProcessTree | None = None
        self.reader: LineReader | None = None

    # -- life cycle
    def start(self) -> "Torchrun":
        """Start torchrun (its own session / process group), stdout and stderr merged into one pipe."""
        self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=self.env, bufsize=0, **new_group_options())
        self.started = time.monotonic()  # deadlines count from here
        self.clock = Stopwatch().start()  # the launch's wall time
        _LIVE.add(self)
        self.tree = ProcessTree(self.proc.pid)
        self.reader = LineReader(self.proc.stdout)
        return self

    def __enter__(self) -> "Torchrun":
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        """torchrun's pid."""
        if self.proc is None:
            raise RuntimeError("not started")
        return self.proc.pid

    def worker_pids(self) -> list[int]:
        """The pids of the processes below torchrun (the ranks) running at this moment."""
        return [p.pid for p in self._tree().refresh()]

    def rank_pid(self, rank: int) -> int | None:
        """The pid of the worker that has ``RANK=rank`` in its environment, if it runs now."""
        proc = self._tree().with_env("RANK", str(rank))
        return proc.pid if proc is not None else None

    def kill_rank(self, rank: int) -> int | None:
        """Kill rank ``rank`` at once, as a crash would (SIGKILL on POSIX); its pid, or None if not running."""
        proc = self._tree().with_env("RANK", str(rank))
        return proc.pid if proc is not None and kill(proc) else None

    def _tree(self) -> ProcessTree:
        if self.tree is None:
            raise RuntimeError("not started")
        return self.tree

    def stop(self, grace: float = 3.0) -> None:
        """Stop torchrun and every worker: terminate, wait up to ``grace`` s, then kill."""
        if self.proc is None:
            return
        self._tree().refresh()  # before torchrun goes: its children are found through it
        if self.proc.poll() is None:
            try:
                self.proc.terminate()  # POSIX: torchrun forwards SIGTERM to its workers
            except OSError:
                pass
        stop_processes(self._tree().alive(), grace)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        stop_processes(self._tree().refresh(), grace)  # anything started while torchrun went down
        if self.reader is not None:
            self.reader.join(grace)  # every writer is gone: the reader sees the end and closes the pipe
        _LIVE.discard(self)

    # -- output
    def _emit(self, line: str) -> None:
        self.lines.append(line)
        if self.on_line is not None:
            self.on_line(line)

    def pump(self, timeout: float) -> bool:
        """Hand the lines that arrive within ``timeout`` s to ``on_line``; False once the output ended."""
        if self.reader is None:
            raise RuntimeError("start() the launch first")
        deadline = time.monotonic() + timeout
        while not self.reader.done:
            line = self.reader.get(deadline - time.monotonic())
            if line is None:
                break
            self._emit(line)
        return not self.reader.done

    def wait(self, timeout: float) -> LaunchResult:
        """Stream the output until torchrun ends; stop everything on timeout or KeyboardInterrupt.

        ``timeout`` counts from ``start()``; reading never blocks past it (stopping then takes up
        to a few seconds of grace).
        """
        if self.proc is None or self.reader is None:
            raise RuntimeError("start() the launch first")
        check_timeout(timeout)
        deadline = self.started + timeout
        exited_at = None
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    self.stop()
                    self.pump(0)
                    raise LaunchTimeout(report(f"timed out after {timeout:g} s; stopped torchrun and its workers",
                                               self.lines, None), None, None, self.lines)
                open_pipe = self.pump(min(0.2, deadline - now))
                self._tree().refresh()
                if self.proc.poll() is not None:  # torchrun is gone; leftover writers get LEFTOVER_S
                    exited_at = exited_at or time.monotonic()
                    if not open_pipe or time.monotonic() - exited_at > LEFTOVER_S:
                        break
        except BaseException:
            self.stop()
            raise
        self.stop()  # torchrun has exited; stop anything it left behind
        self.pump(0)
        code = self.proc.returncode
        seconds = self.clock.elapsed()
        if code != 0:
            raise failure(self.lines, code, shown=self.on_line is print_line)
        return LaunchResult(code, list(self.lines), seconds, self.command)


@atexit.register
def _stop_all() -> None:
    for run in list(_LIVE):
        run.stop(grace=1.0)


def launch(
    target: str,
    args: Sequence[str] = (),
    *,
    nproc: int,
    timeout: float,
    module: bool = True,
    backend: str = "auto",
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    max_restarts: int = 0,
    env: dict[str, str] | None = None,
    on_line: Callable[[str], None] | None = print_line,
    on_start: Callable[["Torchrun"], None] | None = None,
) -> LaunchResult:
    """Run ``torchrun`` on a module (``module=True``) or a script path and wait for it.

    Streams every output line to ``on_line`` (``None``: keep quiet); raises ``LaunchError``
    (with the failing rank's last lines) or ``LaunchTimeout`` after ``timeout`` seconds.
    ``on_start(run)`` is called once torchrun runs (to find or kill a rank while it trains).
    """
    check_timeout(timeout)
    check_nproc(nproc, backend)
    command = torchrun_command(target, args, nproc=nproc, module=module, nnodes=nnodes, node_rank=node_rank,
                               master_addr=master_addr, master_port=master_port, max_restarts=max_restarts)
    with Torchrun(command, env=env, on_line=on_line, single_machine=single_machine(master_addr)) as run:
        if on_start is not None:
            on_start(run)
        return run.wait(timeout)
