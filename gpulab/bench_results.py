"""One bench measurement (:class:`BenchResult`), the JSON file that holds several, a text table, and what they say.

:mod:`gpulab.bench` makes the results; :mod:`gpulab.gpu_reference` reads the files recorded on real GPUs.
A file is ``{"format": FORMAT, "created", "environment", "results": [...]}``; every result also carries its
own device, torch version and date. :func:`thread_speedups`, :func:`copy_notes`, :func:`against_reference`
and :func:`load_note` write the lines a notebook prints beside its results, so that its prose holds on a
quiet laptop, a busy server and a GPU alike.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Sequence

import torch

from gpulab import devices
from gpulab.atomic import write_json

FORMAT = "gpulab-bench/1"


@dataclass(frozen=True)
class BenchResult:
    """One measurement.

    ``size`` is the matrix side ``n`` for ``matmul`` (``n x n @ n x n``) and MiB for ``copy``.
    ``rate`` is GFLOP/s (``2 n^3 / seconds / 1e9``) for matmul and GB/s (``bytes_moved / seconds / 1e9``)
    for copy. ``matmul_precision`` is ``torch.get_float32_matmul_precision()`` during the
    measurement: ``"highest"`` is strict FP32, ``"high"`` lets CUDA use TF32 tensor cores for float32.
    """

    probe: str
    device: str
    description: str
    torch_version: str
    backend: str | None
    threads: int
    dtype: str
    size: int
    seconds: float
    rate: float
    unit: str
    date: str
    kind: str | None = None
    pinned: bool | None = None
    non_blocking: bool | None = None
    bytes_moved: int | None = None
    repeats: int = 0
    matmul_precision: str | None = None
    workers: int | None = None  # a DataLoader's num_workers (loader passes only)

    def to_dict(self) -> dict:
        """A JSON-friendly dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "BenchResult":
        """Rebuild a result from :meth:`to_dict` output; ValueError if a field is missing or unknown."""
        if not isinstance(data, dict):
            raise ValueError(f"a bench result must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown bench result field(s) {', '.join(unknown)}; expected {', '.join(sorted(known))}")
        missing = [f.name for f in fields(cls) if f.name not in data and f.default is MISSING]
        if missing:
            raise ValueError(f"bench result is missing field(s) {', '.join(missing)}")
        return cls(**data)

    @property
    def label(self) -> str:
        """A short legend label naming every setting that changes the figure.

        e.g. ``'cpu float32, 1 thread'``, ``'NVIDIA H200 float32 (TF32 allowed)'``,
        ``'NVIDIA H200 h2d pinned non_blocking'``.
        """
        who = self.description if self.device != "cpu" else "cpu"
        if self.probe == "matmul":
            text = f"{who} {self.dtype}"
            if self.dtype == "float32" and self.matmul_precision not in (None, "highest"):
                tf32 = self.matmul_precision == "high" and self.device.startswith("cuda")
                text += " (TF32 allowed)" if tf32 else f" (matmul precision {self.matmul_precision})"
        else:
            text = f"{who} {self.kind}" + (" pinned" if self.pinned else "")
            text += " non_blocking" if self.non_blocking else ""
            text += f", {self.workers} workers" if self.workers else ""
        if self.device == "cpu":
            text += f", {self.threads} thread" + ("s" if self.threads != 1 else "")
        return text


def now() -> str:
    """The current UTC time as ISO text, to the second."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def environment() -> dict:
    """Versions recorded next to results in a JSON file."""
    env = {"python": platform.python_version(), "torch": torch.__version__,
           "build": devices.cuda_backend() or "CPU-only", "platform": platform.platform(terse=True),
           "float32_matmul_precision": torch.get_float32_matmul_precision()}
    if torch.cuda.is_available():
        env["cudnn"] = torch.backends.cudnn.version()
        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def save_results(path: str | Path, results: Sequence[BenchResult]) -> Path:
    """Write results (and this machine's versions) as JSON, atomically; returns the path."""
    if not results:
        raise ValueError("no results to save")
    payload = {"format": FORMAT, "created": now(), "environment": environment(),
               "results": [r.to_dict() for r in results]}
    return write_json(path, payload)


def is_bench_file(data: object) -> bool:
    """True when parsed JSON claims to be a bench file (its ``format`` is :data:`FORMAT`)."""
    return isinstance(data, dict) and data.get("format") == FORMAT


def results_from_json(data: object, source: str = "JSON") -> list[BenchResult]:
    """The results inside a parsed bench file; ValueError naming ``source`` if it is not one."""
    if not is_bench_file(data) or not isinstance(data.get("results"), list):
        raise ValueError(f"{source} is not a gpulab bench file (expected format {FORMAT!r} with a results list)")
    try:
        return [BenchResult.from_dict(r) for r in data["results"]]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source}: {exc}") from None


def read_json(path: str | Path) -> object:
    """Parsed JSON of ``path``; ValueError naming the file if it is not valid JSON."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path.name} is not valid JSON ({exc.msg} at line {exc.lineno})") from None


def load_results(path: str | Path) -> list[BenchResult]:
    """Read a file written by :func:`save_results` (or ``gpulab bench --json``)."""
    return results_from_json(read_json(path), Path(path).name)


def format_table(results: Sequence[BenchResult]) -> str:
    """A plain-text table of results, one line each.

    ``+pin``: pinned host memory, ``+nb``: non_blocking, ``+w2``: 2 DataLoader workers; dtype ``tf32``: float32 with TF32 allowed on CUDA
    (``f32-high``/``f32-medium`` elsewhere: the matmul precision setting). An accelerator's ``threads`` is ``-``.
    """
    if not results:
        return "(no results)"
    head = f"{'probe':<7} {'device':<8} {'kind':<11} {'dtype':<9} {'size':>6} {'threads':>7} {'time':>12} {'rate':>16}"
    lines = [head, "-" * len(head)]
    for r in results:
        size = f"{r.size}" if r.probe == "matmul" else f"{r.size}MiB"
        kind = (r.kind or "-") + ("+pin" if r.pinned else "") + ("+nb" if r.non_blocking else "")
        kind += f"+w{r.workers}" if r.workers else ""  # a DataLoader's worker processes
        dtype = r.dtype
        if r.probe == "matmul" and r.dtype == "float32" and r.matmul_precision not in (None, "highest"):
            dtype = "tf32" if r.matmul_precision == "high" and r.device.startswith("cuda") else f"f32-{r.matmul_precision}"
        threads = r.threads if r.device == "cpu" else "-"
        lines.append(f"{r.probe:<7} {r.device:<8} {kind:<11} {dtype:<9} {size:>6} {threads:>7} "
                     f"{r.seconds * 1e3:>9.3f} ms {r.rate:>9.1f} {r.unit}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- what results say


def load_note(load: float | None = None, cores: int | None = None) -> str:
    """A line when other programs keep the CPU busy (1-minute load average above its cores), else ``""``."""
    if load is None:
        try:
            load = os.getloadavg()[0]  # threads running or waiting for a core; Windows has none
        except (AttributeError, OSError):
            return ""
    cores = cores or os.cpu_count() or 1
    busy = f"this machine is busy: load average {load:.1f} on {cores} cores, so CPU timings here run slow and vary"
    return busy if load > cores else ""


def _size(r: BenchResult, width: int = 0) -> str:  # "n = 256" (a matmul's side) or "64 MiB" (a copy)
    return f"n = {r.size:{width}d}" if r.probe == "matmul" else f"{r.size} MiB"


def thread_speedups(one: Sequence[BenchResult], many: Sequence[BenchResult], load: float | None = None) -> str:
    """Per size, how many times as fast ``many`` (all threads) ran as ``one`` (1 thread); why, when slower."""
    lines, slower, beyond = [], [], []
    for a, b in zip(one, many, strict=True):
        if (a.probe, a.device, a.size) != (b.probe, b.device, b.size):
            raise ValueError(f"compare the same probe and size: {a.label} {_size(a)} vs {b.label} {_size(b)}")
        lines.append(f"{_size(a, 4)}: {b.threads} threads are {b.rate / a.rate:.2f}x as fast as {a.threads} "
                     f"thread{'s' * (a.threads != 1)} (at most {b.threads / a.threads:g}x)")
        slower += [_size(a)] if b.rate < a.rate else []
        beyond += [_size(a)] if b.rate / a.rate > 1.1 * b.threads / a.threads else []
    if slower:
        lines.append(f"all threads were slower at {', '.join(slower)}: threads that wait for each other waste time "
                     "(too little work to split, or cores busy with other programs)")
    if beyond:
        lines.append(f"more than the most at {', '.join(beyond)}: other programs slowed the one-thread run, "
                     "or the split work fitted better in each core's own cache")
    return "\n".join(lines + [n for n in [load_note(load)] if n])


def copy_notes(results: Sequence[BenchResult], last_cache_mib: float | None = None, load: float | None = None) -> str:
    """What CPU copies say: which fit in the last cache, if a fixed cost hid the bandwidth, what more threads added."""
    cpu = [r for r in results if (r.probe, r.kind, r.device) == ("copy", "device", "cpu")]
    one = {r.size: r for r in sorted(cpu, key=lambda r: r.size) if r.threads == 1}
    fits = {True: "fits in", False: "is larger than"}
    lines = [f"{s} MiB copy: reads and writes {2 * s} MiB, which {fits[2 * s <= last_cache_mib]} the "
             f"{last_cache_mib:g} MiB last cache" for s in one if last_cache_mib]
    small, large = (one[min(one)], one[max(one)]) if one else (None, None)
    if small is not large and small.rate < large.rate / 2:
        lines.append(f"the {small.size} MiB copy ran slower than the {large.size} MiB one: a fixed cost per copy, "
                     "not the bandwidth, set its time (a busy machine)")
    for r in (r for r in cpu if r.threads > 1 and r.size in one):
        ratio = r.rate / one[r.size].rate
        lines.append(f"{r.threads} threads copied {r.size} MiB at {r.rate:,.1f} GB/s, {ratio:.2f}x one thread"
                     + (" (slower: busy cores, or one core already fills the memory's bandwidth)" if ratio < 1 else ""))
    return "\n".join(lines + [n for n in [load_note(load)] if n])


_KINDS = {"device": "copy", "h2d": "host-to-device copy", "d2h": "device-to-host copy", "add": "x + y"}


def _settings(r: BenchResult) -> tuple:  # everything but the device and the size that changes a figure
    return (r.probe, r.kind, r.dtype, r.matmul_precision or "highest", bool(r.pinned), bool(r.non_blocking), r.workers or 0)


def _what(r: BenchResult, who: bool = False) -> str:
    place = (f"this CPU, {r.threads} thread{'s' * (r.threads != 1)}, " if r.device == "cpu" else f"{r.description}, ") * who
    if r.probe == "matmul":
        return place + f"{r.dtype} n = {r.size}" + (" (TF32 allowed)" if r.matmul_precision == "high" else "")
    flags = ["pinned"] * bool(r.pinned) + ["non_blocking"] * bool(r.non_blocking)
    return place + " ".join([_KINDS.get(r.kind, r.kind or "copy"), *flags, f"{r.size} MiB"])


def against_reference(mine: Sequence[BenchResult], recorded: Sequence[BenchResult]) -> str:
    """Each accelerator result of ``mine`` beside the recorded one with the same settings and size, then the
    best of ``mine`` beside the best recorded with its settings (any size); empty when nothing compares."""
    by_key = {(_settings(r), r.size): r for r in recorded}
    lines = [f"{_what(r)}: {r.rate:,.1f} {r.unit} here, {ref.rate:,.1f} recorded on {ref.description} "
             f"({r.rate / ref.rate:.2f}x the recorded rate)"
             for r in mine if r.device != "cpu" and (ref := by_key.get((_settings(r), r.size)))]
    best = max(mine, key=lambda r: r.rate, default=None)
    top = max((r for r in recorded if best and _settings(r) == _settings(best)), key=lambda r: r.rate, default=None)
    if top:
        ratio = top.rate / best.rate
        times = f"{ratio:.2f}x" if ratio < 10 else f"{ratio:,.0f}x"
        lines.append(f"best here: {best.rate:,.1f} {best.unit} ({_what(best, who=True)}); best recorded: {top.rate:,.1f} "
                     f"{top.unit} ({_what(top, who=True)}), {times} the best here")
    return "\n".join(lines)
