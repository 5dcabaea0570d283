"""Run `torchrun` from a notebook or the command line: live output, a timeout, no orphans.

``launch("gpulab.ddp_worker", ["--epochs", "5"], nproc=2, timeout=120)`` starts
``python -m torch.distributed.run`` (the venv's torchrun) in its own session, streams every
line to ``on_line`` as it arrives (default: print it), and returns a ``LaunchResult``.
Workers prefix their own lines with ``[rank N] `` (``prefix_output``), one write per line,
so lines from different ranks never mix mid-line. A failing rank raises ``LaunchError``
showing that rank's last lines; a timeout, a KeyboardInterrupt or the end of the Python
process stops torchrun *and* its workers (they live in sessions of their own, so they
are found by walking ``/proc`` and stopped one by one: SIGTERM, then SIGKILL).

``train_ddp(2, Recipe(epochs=20), timeout=120)`` runs ``gpulab.ddp_worker`` this way and
returns the trained weights, the test metrics and the history (``DDPResult``).
"""

from __future__ import annotations

import atexit
import collections
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NoReturn, Sequence

if TYPE_CHECKING:
    from gpulab.experiment import Recipe
    from gpulab.train import History

RANK_LINE = re.compile(r"^\[rank (\d+)\] ")
ROOT_CAUSE_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
ROOT_CAUSE_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
TAIL = 20
_LIVE: "set[Torchrun]" = set()  # started and not yet stopped: stopped at interpreter exit


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


# ---------------------------------------------------------------- worker side

class _RankLines:
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
    sys.stdout, sys.stderr = _RankLines(rank, 1), _RankLines(rank, 2)


def exit_worker(code: int) -> NoReturn:
    """End a worker process after its process group is destroyed, skipping C++ static destructors.

    With gloo, a background thread torn down at interpreter exit sometimes aborts the process
    ("terminate called without an active exception", signal 6) after a perfectly good run:
    measured here in 3 of 16 three-rank runs, and 0 of 10 when leaving this way.
    """
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


# ---------------------------------------------------------------- validation

def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def gpu_count() -> int:
    """CUDA devices visible here (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_nproc(nproc: int, backend: str = "auto") -> str:
    """Validate ``nproc`` ranks per node for ``backend`` and return the backend to use.

    ``auto`` means nccl when every rank can have its own GPU, else gloo. More ranks than
    GPUs on nccl is an error; more ranks than CPU cores on gloo only warns (it works, slowly).
    """
    if not _is_int(nproc) or nproc < 1:
        raise ValueError(f"nproc={nproc!r} must be a positive integer (ranks per node)")
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend={backend!r}: use auto, gloo or nccl")
    gpus = gpu_count()
    if backend == "auto":
        backend = "nccl" if 0 < nproc <= gpus else "gloo"
    if backend == "nccl" and nproc > gpus:
        raise ValueError(f"nproc={nproc} ranks on nccl need {nproc} GPUs, this machine has {gpus}")
    cores = os.cpu_count() or 1
    if backend == "gloo" and nproc > cores:
        warnings.warn(f"{nproc} ranks on {cores} CPU cores: they will share cores and run slower", stacklevel=2)
    return backend


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (for a rendezvous between two launches)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def torchrun_command(
    target: str,
    args: Sequence[str] = (),
    *,
    nproc: int,
    module: bool = True,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    max_restarts: int = 0,
) -> list[str]:
    """The torchrun command line: ``--standalone`` on one node, a static rendezvous on several."""
    for name, value, low in (("nproc", nproc, 1), ("nnodes", nnodes, 1), ("node_rank", node_rank, 0),
                             ("max_restarts", max_restarts, 0)):
        if not _is_int(value) or value < low:
            raise ValueError(f"{name}={value!r} must be an integer >= {low}")
    if node_rank >= nnodes:
        raise ValueError(f"node_rank={node_rank} must be below nnodes={nnodes} (0..{nnodes - 1})")
    if master_port is not None and (not _is_int(master_port) or not 1 <= master_port <= 65535):
        raise ValueError(f"master_port={master_port!r} must be an integer in 1..65535")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--max-restarts", str(max_restarts)]
    if nnodes == 1 and master_addr is None and master_port is None:
        cmd.append("--standalone")  # its own store on a free loopback port: parallel runs never clash
    else:
        if master_port is None:
            raise ValueError("a rendezvous on master_addr needs master_port, the same on every node (see free_port())")
        cmd += ["--nnodes", str(nnodes), "--node-rank", str(node_rank),
                "--master-addr", master_addr or "127.0.0.1", "--master-port", str(master_port)]
    if module:
        cmd.append("-m")
    return cmd + [target, *map(str, args)]


# ---------------------------------------------------------------- processes

def _proc_stat(pid: int) -> tuple[int, int] | None:
    """``(parent pid, start time)`` of a live process, from ``/proc/PID/stat``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, grandchildren ...), found through ``/proc``."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _proc_stat(int(entry))) is not None:
            children[stat[0]].append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _print_line(line: str) -> None:
    print(line, flush=True)


class Torchrun:
    """One running torchrun. Use as a context manager: leaving it always stops every process.

    ``start()`` it, then ``wait(timeout)`` streams its output and returns a ``LaunchResult``
    (or raises ``LaunchError`` / ``LaunchTimeout``); ``worker_pids()`` lists the ranks' pids.
    """

    def __init__(self, command: Sequence[str], *, env: dict[str, str] | None = None,
                 on_line: Callable[[str], None] | None = _print_line, tail: int = TAIL) -> None:
        self.command, self.on_line = list(command), on_line
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
                    "PYTHONUNBUFFERED": "1", **(env or {})}
        self.lines: list[str] = []
        self.tails: dict[int | None, collections.deque[str]] = collections.defaultdict(lambda: collections.deque(maxlen=tail))
        self.proc: subprocess.Popen | None = None
        self._known: dict[int, int] = {}  # pid -> start time, of every process seen below torchrun
        self._pending = b""

    # -- life cycle
    def start(self) -> "Torchrun":
        """Start torchrun in a new session, its stdout and stderr merged into one pipe."""
        self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.started = time.perf_counter()
        _LIVE.add(self)
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
        """The pids of the processes torchrun started (the ranks), at this moment."""
        self._remember()
        return descendants(self.pid)

    def rank_pid(self, rank: int) -> int | None:
        """The pid of the worker that has ``RANK=rank`` in its environment, if it runs now."""
        for pid in self.worker_pids():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if f"RANK={rank}".encode() in f.read().split(b"\0"):
                        return pid
            except OSError:
                continue
        return None

    def _remember(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            for pid in descendants(self.proc.pid):
                if (stat := _proc_stat(pid)) is not None:
                    self._known[pid] = stat[1]

    def _still_ours(self) -> list[int]:
        return [pid for pid, t in self._known.items() if (s := _proc_stat(pid)) is not None and s[1] == t and alive(pid)]

    def stop(self, grace: float = 3.0) -> None:
        """Stop torchrun and every worker: SIGTERM, wait up to ``grace`` s, then SIGKILL."""
        if self.proc is None:
            return
        self._remember()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # torchrun forwards it to its workers
            except ProcessLookupError:
                pass
        for pid in self._still_ours():
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (self.proc.poll() is None or self._still_ours()):
            self._remember()
            time.sleep(0.05)
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in self._still_ours():
            _signal(pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        _LIVE.discard(self)

    # -- output
    def _emit(self, line: str) -> None:
        self.lines.append(line)
        self.tails[line_rank(line)].append(line)
        if self.on_line is not None:
            self.on_line(line)

    def _feed(self, data: bytes) -> None:
        self._pending += data
        *done, self._pending = self._pending.split(b"\n")
        for raw in done:
            self._emit(raw.decode("utf-8", "replace").rstrip("\r"))

    def wait(self, timeout: float) -> LaunchResult:
        """Stream the output until torchrun ends; stop everything on timeout or KeyboardInterrupt."""
        if self.proc is None or self.proc.stdout is None:
            raise RuntimeError("start() the launch first")
        _check_timeout(timeout)
        deadline = self.started + timeout
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        open_pipe, exited_at = True, None
        try:
            while True:
                now = time.perf_counter()
                if now >= deadline:
                    self.stop()
                    self._flush()
                    raise LaunchTimeout(self._message(f"timed out after {timeout:g} s; stopped torchrun and its workers", None),
                                        None, None, self.lines)
                if open_pipe and sel.select(timeout=min(0.2, deadline - now)):
                    data = os.read(self.proc.stdout.fileno(), 65536)
                    if data:
                        self._feed(data)
                    else:
                        open_pipe = False  # every writer closed the pipe
                elif not open_pipe:
                    time.sleep(min(0.05, max(0.0, deadline - now)))
                self._remember()
                if self.proc.poll() is not None:  # torchrun is gone; leftover writers get 2 s
                    exited_at = exited_at or time.perf_counter()
                    if not open_pipe or time.perf_counter() - exited_at > 2.0:
                        break
        except BaseException:
            self.stop()
            raise
        finally:
            sel.close()
        self._flush()
        self.stop()  # torchrun has exited; stop anything it left behind
        code = self.proc.returncode
        seconds = time.perf_counter() - self.started
        if code != 0:
            rank, exitcode = self._root_cause()
            what = f"rank {rank} failed" if rank is not None else "torchrun failed"
            if exitcode is not None:
                what += f" with exit code {exitcode}"
            raise LaunchError(self._message(what, rank), rank, code, self.lines)
        return LaunchResult(code, list(self.lines), seconds, self.command)

    def _flush(self) -> None:
        if self._pending:
            self._feed(b"\n")

    def _root_cause(self) -> tuple[int | None, int | None]:
        """The first failed rank and its exit code from torchrun's report, else the rank with a traceback."""
        rank = exitcode = None
        for line in self.lines[::-1]:
            if exitcode is None and (m := ROOT_CAUSE_EXIT.match(line)):
                exitcode = int(m.group(1))
            if (m := ROOT_CAUSE_RANK.match(line)):
                rank = int(m.group(1))
                break
        if rank is None:
            for line in self.lines:
                if line_rank(line) is not None and "Traceback" in line:
                    return line_rank(line), exitcode
        return rank, exitcode

    def _message(self, what: str, rank: int | None) -> str:
        """``what``, then the last lines of ``rank`` (or of the whole output when it printed none)."""
        tail, who = list(self.tails.get(rank, [])) if rank is not None else [], f"rank {rank}"
        if not tail:
            tail, who = self.lines[-TAIL:], "the output"
        shown = "\n".join(f"  {line}" for line in tail) or "  (no output)"
        return f"{what}; last lines of {who}:\n{shown}"


def _check_timeout(timeout: float) -> None:
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise ValueError(f"timeout={timeout!r} must be a positive number of seconds")


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


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
    on_line: Callable[[str], None] | None = _print_line,
) -> LaunchResult:
    """Run ``torchrun`` on a module (``module=True``) or a script path and wait for it.

    Streams every output line to ``on_line`` (``None``: keep quiet); raises ``LaunchError``
    (with the failing rank's last lines) or ``LaunchTimeout`` after ``timeout`` seconds.
    """
    _check_timeout(timeout)
    check_nproc(nproc, backend)
    command = torchrun_command(target, args, nproc=nproc, module=module, nnodes=nnodes, node_rank=node_rank,
                               master_addr=master_addr, master_port=master_port, max_restarts=max_restarts)
    with Torchrun(command, env=env, on_line=on_line) as run:
        return run.wait(timeout)


# ---------------------------------------------------------------- DDP training

@dataclass
class DDPResult:
    """A finished DDP run: final weights (rank 0's), test metrics, history and output.

    On a node that did not hold rank 0 (several nodes), ``state_dict``, ``metrics`` and
    ``summary`` are empty: rank 0 saved them on its own node.
    """

    state_dict: dict
    metrics: dict[str, float]
    history: History
    seconds: float
    lines: list[str]
    world_size: int
    backend: str
    summary: dict


def worker_args(recipe: Recipe, *, backend: str = "auto", save: str | Path | None = None,
                json_path: str | Path | None = None, checkpoint_dir: str | Path | None = None,
                log_every: int = 1, epoch_delay: float = 0.0) -> list[str]:
    """The ``gpulab.ddp_worker`` arguments for a ``gpulab.experiment.Recipe``."""
    args = ["--epochs", recipe.epochs, "--batch-size", recipe.batch_size, "--lr", repr(float(recipe.lr)),
            "--seed", recipe.seed, "--split-seed", recipe.split_seed, "--backend", backend,
            "--log-every", log_every]
    if recipe.drop_b:
        args.append("--no-b")
    for flag, value in (("--save", save), ("--json", json_path), ("--checkpoint-dir", checkpoint_dir)):
        if value is not None:
            args += [flag, os.fspath(value)]
    if epoch_delay:
        args += ["--epoch-delay", epoch_delay]
    return [str(a) for a in args]


def train_ddp(
    nproc: int,
    recipe: Recipe | None = None,
    *,
    timeout: float = 300.0,
    checkpoint_dir: str | Path | None = None,
    max_restarts: int = 0,
    echo: bool = True,
    on_line: Callable[[str], None] | None = None,
    log_every: int | None = None,
    backend: str = "auto",
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    on_start: Callable[[Torchrun], None] | None = None,
    epoch_delay: float = 0.0,
) -> DDPResult:
    """Train ``recipe`` (default: the article's) with ``nproc`` DDP ranks through torchrun.

    Output lines go to ``on_line`` (default: printed when ``echo``). ``log_every`` defaults to
    a tenth of the epochs. ``on_start(run)`` is called once torchrun runs (e.g. to find a rank's
    pid with ``run.rank_pid``). ``epoch_delay`` (seconds slept after each epoch) only exists so
    that crash tests can land in the middle of training.
    """
    import torch

    from gpulab.experiment import Recipe
    from gpulab.train import History

    recipe = Recipe() if recipe is None else recipe
    if not isinstance(recipe, Recipe):
        raise ValueError(f"recipe={recipe!r} must be a gpulab.experiment.Recipe")
    _check_timeout(timeout)
    backend = check_nproc(nproc, backend)
    log_every = log_every or max(1, recipe.epochs // 10)
    sink = on_line if on_line is not None else (_print_line if echo else None)
    with tempfile.TemporaryDirectory(prefix="gpulab-ddp-") as tmp:
        save, json_path = Path(tmp) / "model.pt", Path(tmp) / "summary.json"
        args = worker_args(recipe, backend=backend, save=save, json_path=json_path, checkpoint_dir=checkpoint_dir,
                           log_every=log_every, epoch_delay=epoch_delay)
        command = torchrun_command("gpulab.ddp_worker", args, nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                                   master_addr=master_addr, master_port=master_port, max_restarts=max_restarts)
        with Torchrun(command, on_line=sink) as run:
            if on_start is not None:
                on_start(run)
            result = run.wait(timeout)
        if not save.exists():  # another node's launch held rank 0 and saved there
            return DDPResult({}, {}, History(), result.seconds, result.lines, nproc * nnodes, backend, {})
        import json

        summary = json.loads(json_path.read_text(encoding="utf-8"))
        state = torch.load(save, map_location="cpu", weights_only=True)
    return DDPResult(state, summary["metrics"], History(**summary["history"]), result.seconds, result.lines,
                     summary["world_size"], summary["backend"], summary)
