"""One bench measurement (:class:`BenchResult`), the JSON file that holds several, and a text table.

:mod:`gpulab.bench` makes the results; :mod:`gpulab.gpu_reference`
reads the files recorded on real GPUs. A file is ``{"format": FORMAT, "created", "environment",
"results": [...]}``; every result also carries its own device, torch version and date.
"""

from __future__ import annotations

import datetime as _dt
import json
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
    (``f32-high``/``f32-medium`` elsewhere: the matmul precision setting).
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
        lines.append(f"{r.probe:<7} {r.device:<8} {kind:<11} {dtype:<9} {size:>6} {r.threads:>7} "
                     f"{r.seconds * 1e3:>9.3f} ms {r.rate:>9.1f} {r.unit}")
    return "\n".join(lines)
