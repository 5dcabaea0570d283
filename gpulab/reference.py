"""Reference results recorded on real GPUs, and a plot of "this machine" next to them.

A reference file is exactly what ``gpulab bench matmul|copy ... --json FILE`` wrote on some machine
(device name, torch version, build, date and every measurement), committed under
``gpulab/reference/``. None may be recorded yet: then every helper here says so plainly.

The API, used by notebooks 01, 03 and 07::

    from gpulab import reference
    reference.load_references()                      # -> list[Reference], one per JSON file
    reference.reference_results("matmul", "float32") # -> list[BenchResult] from every file
    print(reference.summary())                       # one line per file, or "none recorded yet"
    reference.plot_against_references(mine, "matmul", dtype="float32")   # -> matplotlib Axes
    reference.plot_against_references(mine, "copy", kind="h2d")

``mine`` is a list of :class:`gpulab.bench.BenchResult` measured in the notebook.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from gpulab.bench import PROBES, BenchResult, check_dtype, results_from_json

REFERENCE_DIR = Path(__file__).with_name("reference")
NONE_RECORDED = ("No reference results recorded yet: gpulab/reference/ holds no JSON file. "
                 "Run `gpulab bench matmul --json FILE` on a GPU and commit FILE there to add one.")


@dataclass(frozen=True)
class Reference:
    """One recorded file: its name, the versions it was made with, and its results."""

    name: str
    environment: dict
    results: tuple[BenchResult, ...]

    @property
    def devices(self) -> list[str]:
        """The device descriptions measured in this file, in order of first appearance."""
        seen: list[str] = []
        for r in self.results:
            if r.description not in seen:
                seen.append(r.description)
        return seen


def load_references(directory: str | Path | None = None) -> list[Reference]:
    """Every ``*.json`` under ``directory`` (default: the package's reference folder), sorted by name.

    A file that is not a gpulab bench file raises a ValueError naming it.
    """
    folder = Path(directory) if directory is not None else REFERENCE_DIR
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"reference file {path.name} is not valid JSON ({exc.msg})") from None
        results = results_from_json(data, f"reference file {path.name}")
        found.append(Reference(path.name, dict(data.get("environment", {})), tuple(results)))
    return found


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
        dtype = check_dtype(dtype)
    return [r for ref in load_references(directory) for r in ref.results if _matches(r, probe, dtype, kind)]


def summary(directory: str | Path | None = None) -> str:
    """One line per reference file (devices, torch, build, date, best rate per probe), or NONE_RECORDED."""
    refs = load_references(directory)
    if not refs:
        return NONE_RECORDED
    lines = [f"{len(refs)} reference file(s):"]
    for ref in refs:
        env = ref.environment
        best = []
        for probe in PROBES:
            rs = [r for r in ref.results if r.probe == probe]
            if rs:
                top = max(rs, key=lambda r: r.rate)
                best.append(f"best {probe} {top.rate:,.1f} {top.unit} ({top.dtype}, size {top.size})")
        date = min(r.date for r in ref.results)[:10]
        lines.append(f"  {ref.name}: {', '.join(ref.devices)}; torch {env.get('torch', '?')} "
                     f"({env.get('build', '?')}), {date}; " + "; ".join(best))
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
        dtype = check_dtype(dtype)
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
    ax.set_title(what + ("" if refs else "  (no reference result recorded yet)"))
    if ax.get_lines():
        ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)
    return ax
