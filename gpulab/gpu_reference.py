"""Reference results recorded on real GPUs, and a plot of "this machine" next to them.

``scripts/gpu_measure.py`` (run first by ``scripts/gpu_check.sh``) writes, for one device with slug ``SLUG``
(e.g. ``nvidia-h200``), files committed unchanged under ``gpulab/reference/``: bench files
(``SLUG-matmul-float32.json``, ``SLUG-copy-h2d.json``... exactly as :func:`gpulab.bench_results.save_results`
writes them) and ``SLUG-measure.json``, every other figure as tables of rows (format :data:`MEASURE_FORMAT`).
Any other JSON in the folder is skipped. None may be recorded yet: then every helper says so plainly.
``GPULAB_REFERENCE_DIR`` (read at each call) points the helpers at another folder (``gpu_check.sh`` runs the
notebooks with the files it has just measured). The API, used by the notebooks::

    gpu_reference.load_references()                      # -> list[Reference], one per bench file
    gpu_reference.reference_results("matmul", "float32") # -> list[BenchResult] from every file
    print(gpu_reference.summary())  # "10 bench files and 1 measurement file:", one line each, or "none yet"
    gpu_reference.plot_against_references(mine, "matmul", dtype="float32")   # -> matplotlib Axes
    print(gpu_reference.recorded("boston_loop"))         # a recorded table, or "no GPU reference recorded yet"

``mine`` is a list of :class:`gpulab.bench.BenchResult` measured in the notebook.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from gpulab.bench import PROBES
from gpulab.bench_results import BenchResult
from gpulab.precision import dtype_from_name, dtype_name
from gpulab.bench_results import is_bench_file, read_json, results_from_json
from gpulab.tables import format_rows

REFERENCE_DIR = Path(__file__).with_name("reference")
REFERENCE_ENV = "GPULAB_REFERENCE_DIR"  # another folder instead of REFERENCE_DIR (gpu_check.sh sets it)
MEASURE_FORMAT = "gpulab-measure/1"
NONE_RECORDED = ("No GPU reference recorded yet: gpulab/reference/ holds no bench file. "
                 "Run `bash scripts/gpu_check.sh OUTDIR` on a GPU and commit OUTDIR/reference/* there to add one.")


def device_slug(description: str) -> str:
    """A file-name-safe name for a device: ``'NVIDIA H200'`` -> ``'nvidia-h200'``."""
    return re.sub(r"[^a-z0-9]+", "-", str(description).lower()).strip("-") or "device"


def bench_file_name(slug: str, what: str) -> str:
    """The name of one bench file: ``bench_file_name('nvidia-h200', 'matmul-float32')`` -> ``'nvidia-h200-matmul-float32.json'``."""
    return f"{slug}-{what}.json"


def measure_file_name(slug: str) -> str:
    """The name of the measurement file: ``'nvidia-h200-measure.json'``."""
    return f"{slug}-measure.json"


@dataclass(frozen=True)
class Reference:
    """One recorded bench file: its name, the versions it was made with, and its results."""

    name: str
    environment: dict
    results: tuple[BenchResult, ...]

    @property
    def devices(self) -> list[str]:
        """The device descriptions measured in this file, in order of first appearance."""
        return list(dict.fromkeys(r.description for r in self.results))


def reference_dir() -> Path:
    """The folder the helpers read by default: ``$GPULAB_REFERENCE_DIR`` if set, else the package's own."""
    return Path(os.environ.get(REFERENCE_ENV) or REFERENCE_DIR)


def _json_files(directory: str | Path | None) -> list[tuple[Path, object]]:
    folder = Path(directory) if directory is not None else reference_dir()
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            found.append((path, read_json(path)))
        except ValueError as exc:
            raise ValueError(f"reference file {exc}") from None
    return found


def load_references(directory: str | Path | None = None) -> list[Reference]:
    """Every bench file among ``directory``'s ``*.json`` (default: the package's reference folder), by name.
    JSON files of another kind (a measurement file, ``doctor.json``) are skipped; a file that is not valid JSON,
    or claims to be a bench file but is broken, raises a ValueError naming it."""
    found = []
    for path, data in _json_files(directory):
        if is_bench_file(data):
            results = results_from_json(data, f"reference file {path.name}")
            found.append(Reference(path.name, dict(data.get("environment", {})), tuple(results)))
    return found


@dataclass(frozen=True)
class Measurement:
    """One measurement file written by ``scripts/gpu_measure.py``."""

    name: str
    data: dict

    @property
    def description(self) -> str:
        """What was measured, e.g. ``'NVIDIA H200 (cuda:0), torch 2.9.0, CUDA 12.8, 2026-01-05'``."""
        env = self.data.get("environment", {})
        dry = " [dry run]" if self.data.get("dry_run") else ""
        return (f"{self.data.get('description', '?')} ({self.data.get('device', '?')}), torch {env.get('torch', '?')}, "
                f"{env.get('build', '?')}, {str(self.data.get('created', '?'))[:10]}{dry}")

    def step(self, topic: str) -> dict | None:
        """The recorded step ``topic`` (``{"status", "seconds", "rows", ...}``), or None."""
        return self.data.get("steps", {}).get(topic)


def load_measurements(directory: str | Path | None = None) -> list[Measurement]:
    """Every measurement file (format :data:`MEASURE_FORMAT`) in ``directory``, by name."""
    return [Measurement(path.name, data) for path, data in _json_files(directory)
            if isinstance(data, dict) and data.get("format") == MEASURE_FORMAT]


def _with_workers(rows: list[dict], files: list, folder: Path) -> list[dict]:
    """Rows of a bench step with a ``workers`` column (after ``non_blocking``) read from the bench files the step
    wrote, result by result, where those results carry a DataLoader's ``num_workers``; else the rows unchanged."""
    if not files or any("workers" in row for row in rows):
        return rows
    results = [r for ref in load_references(folder) if ref.name in files for r in ref.results]
    if (len(results) != len(rows) or all(r.workers is None for r in results)
            or any((row.get("size"), row.get("pinned")) != (r.size, r.pinned) for row, r in zip(rows, results))):
        return rows
    out = []
    for row, r in zip(rows, results):
        new = {}
        for key, value in row.items():
            new[key] = value
            if key == "non_blocking":
                new["workers"] = r.workers
        out.append({**new, "workers": r.workers})  # keeps its place when set above
    return out


def recorded_rows(topic: str, directory: str | Path | None = None) -> list[tuple[Measurement, list[dict]]]:
    """``(measurement, rows)`` for each measurement file that recorded ``topic`` successfully; rows of a step that
    wrote bench files (``"loader"``) gain each result's DataLoader ``workers`` from those files."""
    folder = Path(directory) if directory is not None else reference_dir()
    out = []
    for m in load_measurements(directory):
        step = m.step(topic)
        if step and step.get("status") == "ok" and step.get("rows"):
            out.append((m, _with_workers(list(step["rows"]), list(step.get("files") or []), folder)))
    return out


def recorded(topic: str, directory: str | Path | None = None, *, leave_out: Sequence[str] = ()) -> str:
    """The recorded table(s) of ``topic`` with where and when they were measured, or a plain "none yet".
    ``leave_out`` names columns not to print (e.g. one that would mislead beside the lesson)."""
    found = recorded_rows(topic, directory)
    if not found:
        return f"No GPU reference recorded yet for {topic!r} (gpulab/reference/ has no measurement of it)."
    blocks = [f"recorded on {m.description}:\n"
              f"{format_rows([{k: v for k, v in row.items() if k not in leave_out} for row in rows])}"
              for m, rows in found]
    return "\n\n".join(blocks)


def _check_probe(probe: str) -> str:
    if probe not in PROBES:
        raise ValueError(f"unknown probe {probe!r}: use one of {', '.join(PROBES)}")
    return probe


def _matches(r: BenchResult, probe: str, dtype: str | None, kind: str | None) -> bool:
    return (r.probe == probe and (dtype is None or r.dtype == dtype)
            and (kind is None or probe != "copy" or r.kind == kind))


def reference_results(probe: str = "matmul", dtype: str | None = None, kind: str | None = None,
                      directory: str | Path | None = None) -> list[BenchResult]:
    """Recorded results of one probe (optionally one dtype, or one copy kind) from every reference file."""
    _check_probe(probe)
    if dtype is not None:
        dtype = dtype_name(dtype_from_name(dtype))
    return [r for ref in load_references(directory) for r in ref.results if _matches(r, probe, dtype, kind)]


def summary(directory: str | Path | None = None) -> str:
    """One line per reference file (devices, torch, build, date, best rate per probe), or NONE_RECORDED."""
    refs, measured = load_references(directory), load_measurements(directory)
    if not refs:
        return NONE_RECORDED
    count = {what: f"{len(files)} {what} file" + "s" * (len(files) != 1)
             for what, files in (("bench", refs), ("measurement", measured))}
    lines = [f"{count['bench']} and {count['measurement']}:"]
    for ref in refs:
        env = ref.environment
        best = []
        for probe in PROBES:
            rs = [r for r in ref.results if r.probe == probe]
            if rs:
                top = max(rs, key=lambda r: r.rate)
                flags = [top.kind or "", "pinned" if top.pinned else "", "non_blocking" if top.non_blocking else ""]
                what = top.dtype if probe == "matmul" else " ".join(f for f in flags if f)
                best.append(f"best {probe} {top.rate:,.1f} {top.unit} ({what}, size {top.size})")
        date = min(r.date for r in ref.results)[:10]
        lines.append(f"  {ref.name}: {', '.join(ref.devices)}; torch {env.get('torch', '?')} "
                     f"({env.get('build', '?')}), {date}; " + "; ".join(best))
    lines += [f"  {m.name}: {m.description}" for m in measured]
    return "\n".join(lines)


def _series(results: Sequence[BenchResult]) -> dict[str, list[BenchResult]]:
    groups: dict[str, list[BenchResult]] = {}
    for r in results:
        groups.setdefault(r.label, []).append(r)
    return {k: sorted(v, key=lambda r: r.size) for k, v in groups.items()}


def size_axis(ax, sizes: Sequence[int]) -> None:
    """Log-2 x axis labelled with the measured sizes as plain numbers."""
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    if ticks:
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())


def plot_against_references(mine: Sequence[BenchResult], probe: str = "matmul", dtype: str | None = None,
                            kind: str | None = None, ax=None, directory: str | Path | None = None):
    """Plot rate vs size: solid lines for ``mine`` ("this machine"), dashed for each reference result.

    Without any reference file the plot says so in its title. Returns the matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    _check_probe(probe)
    if dtype is not None:
        dtype = dtype_name(dtype_from_name(dtype))
    refs = reference_results(probe, dtype, kind, directory)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for label, rs in _series([r for r in mine if _matches(r, probe, dtype, kind)]).items():
        ax.plot([r.size for r in rs], [r.rate for r in rs], "o-", label=f"this machine: {label}")
    for label, rs in _series(refs).items():
        ax.plot([r.size for r in rs], [r.rate for r in rs], "s--", label=f"reference: {label}")
    size_axis(ax, [r.size for r in mine] + [r.size for r in refs])
    ax.set_yscale("log")
    ax.set_xlabel("matrix side n" if probe == "matmul" else "MiB copied")
    ax.set_ylabel("GFLOP/s" if probe == "matmul" else "GB/s")
    what = f"{probe}" + (f" {dtype}" if dtype else "") + (f" {kind}" if kind and probe == "copy" else "")
    ax.set_title(f"{what}: speed at each size" + ("" if refs else "  (no reference result recorded yet)"))
    if ax.get_lines():
        ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)
    return ax
