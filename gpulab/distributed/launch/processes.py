"""Child processes on every OS (psutil): find a process tree, stop it, read its output line by line.

``ProcessTree(pid)`` remembers every process ever seen below ``pid`` as a ``psutil.Process``:
a remembered process that ended and whose pid was reused by another program is never touched
(psutil compares creation times). ``stop_processes`` terminates, waits (``psutil.wait_procs``)
and kills what is left. ``LineReader`` reads a pipe in a background thread (Windows cannot
``select`` on pipes) and hands out whole lines. Nothing here is tied to one OS (no process
filesystem, no POSIX-only signal), so it behaves the same on Linux, macOS and Windows.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from typing import IO, Iterable

import psutil

_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess)


def running(proc: psutil.Process) -> bool:
    """True while ``proc`` (the very process, not a newer one with its pid) runs and is not a zombie."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (*_GONE, psutil.AccessDenied):
        return False


def alive(pid: int) -> bool:
    """True while a process with this pid exists and is not a zombie."""
    try:
        return running(psutil.Process(pid))
    except _GONE:
        return False


def new_group_options(platform: str | None = None) -> dict:
    """``Popen`` options that keep a terminal's Ctrl+C away from the child (we stop it ourselves).

    POSIX: a new session. Windows: a new process group (``CREATE_NEW_PROCESS_GROUP``).
    """
    platform = sys.platform if platform is None else platform
    if platform == "win32":
        return {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200)}
    return {"start_new_session": True}


class ProcessTree:
    """The processes below ``pid``, remembered so that they can be stopped even after their parent died."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.known: dict[int, psutil.Process] = {}
        try:
            self.root: psutil.Process | None = psutil.Process(pid)
        except _GONE:
            self.root = None

    def refresh(self) -> list[psutil.Process]:
        """Look below the root again; remember new processes; return the ones running now."""
        if self.root is not None and running(self.root):
            try:
                for child in self.root.children(recursive=True):
                    known = self.known.get(child.pid)
                    if known is None or not running(known):  # new, or a reused pid
                        self.known[child.pid] = child
            except _GONE:
                pass
        return self.alive()

    def alive(self) -> list[psutil.Process]:
        """Every remembered process that still runs (the same process: reused pids are left out)."""
        return [p for p in self.known.values() if running(p)]

    def with_env(self, key: str, value: str) -> psutil.Process | None:
        """The running process whose environment has ``key=value`` (e.g. ``RANK=1``), if any."""
        for proc in self.refresh():
            try:
                if proc.environ().get(key) == value:
                    return proc
            except (*_GONE, psutil.AccessDenied):
                continue
        return None


LAUNCH_MARKERS = ("torch.distributed.run", "torchrun", "gpulab.distributed.")  # torchrun and the rank programs


def leftover_processes(markers: Iterable[str] = LAUNCH_MARKERS) -> list[dict]:
    """This user's running processes whose command line names torchrun or a gpulab rank program.

    Each is ``{"pid": ..., "what": <the first word of the command naming a marker>}`` (no paths).
    Leftovers of a run that never ended hold ports and memory; this process and its parents are skipped.
    """
    me = psutil.Process()
    skip = {me.pid, *(p.pid for p in me.parents())}
    try:
        user = me.username()
    except (psutil.AccessDenied, KeyError):
        user = None
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "username"]):
        info = proc.info
        if info["pid"] in skip or (user is not None and info.get("username") != user) or not running(proc):
            continue
        words = [w.replace("\\", "/").rsplit("/", 1)[-1] for w in info.get("cmdline") or []]
        what = next((w for w in words if any(m in w for m in markers)), None)
        if what is not None:
            found.append({"pid": info["pid"], "what": what})
    return found


def kill(proc: psutil.Process) -> bool:
    """Kill ``proc`` at once (SIGKILL on POSIX, TerminateProcess on Windows); False if it was already gone."""
    try:
        proc.kill()
        return True
    except (*_GONE, psutil.AccessDenied):
        return False


def _wait(procs: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Wait up to ``seconds`` for ``procs`` to end (zombies count as ended); return those left."""
    deadline = time.monotonic() + seconds
    procs = [p for p in procs if running(p)]
    while procs and (left := deadline - time.monotonic()) > 0:
        _, procs = psutil.wait_procs(procs, timeout=min(0.1, left))
        procs = [p for p in procs if running(p)]
    return procs


def stop_processes(procs: Iterable[psutil.Process], grace: float = 3.0) -> list[psutil.Process]:
    """Terminate ``procs``, wait up to ``grace`` s, kill the rest; return any that still run (normally none)."""
    procs = [p for p in procs if running(p)]
    for signal_it in ("terminate", "kill"):
        for proc in procs:
            try:
                getattr(proc, signal_it)()
            except (*_GONE, psutil.AccessDenied):
                pass
        procs = _wait(procs, grace)
        if not procs:
            break
    return procs


def last_line(log) -> str:
    """The last non-blank line written to a binary log file (a rank's or a kernel's output), or ``''``."""
    log.seek(0)
    lines = [line.strip() for line in log.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""


class LineReader:
    """Read a binary pipe in a daemon thread; ``get(timeout)`` returns one whole line, or ``None``.

    ``None`` means no line arrived within ``timeout`` (check ``done``: the writer closed the pipe).
    Lines are decoded as UTF-8 (bad bytes replaced) without their line ending; a last line without
    a newline is delivered when the pipe closes. The thread closes the pipe when it ends.
    """

    def __init__(self, stream: IO[bytes], chunk: int = 65536) -> None:
        self.stream, self.chunk = stream, chunk
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.done = False
        self.thread = threading.Thread(target=self._run, name="gpulab-line-reader", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        pending = b""
        try:
            while True:
                data = self.stream.read1(self.chunk) if hasattr(self.stream, "read1") else self.stream.read(self.chunk)
                if not data:
                    break
                pending += data
                *whole, pending = pending.split(b"\n")
                for raw in whole:
                    self.lines.put(raw.decode("utf-8", "replace").rstrip("\r"))
        except (OSError, ValueError):  # the pipe was closed under us
            pass
        finally:
            if pending:
                self.lines.put(pending.decode("utf-8", "replace").rstrip("\r"))
            self.lines.put(None)
            try:
                self.stream.close()
            except OSError:
                pass

    def get(self, timeout: float) -> str | None:
        """The next line, waiting at most ``timeout`` seconds; ``None`` if none came (or the pipe closed)."""
        if self.done:
            return None
        try:
            line = self.lines.get(timeout=max(0.0, timeout)) if timeout > 0 else self.lines.get_nowait()
        except queue.Empty:
            return None
        if line is None:
            self.done = True
        return line

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the thread to end; True if it did."""
        self.thread.join(timeout)
        return not self.thread.is_alive()
