"""The roofline model: how fast an operation can run, from its arithmetic intensity and two machine figures.

An operation does ``flops`` floating-point operations and moves ``bytes`` between memory and the
processor. Its **arithmetic intensity** is ``flops / bytes`` (FLOP per byte). A machine does at most
``peak`` FLOP/s and moves at most ``bandwidth`` bytes/s, so the operation runs at most at
``min(peak, intensity * bandwidth)``: the "roofline". The **ridge point** ``peak / bandwidth`` is
where the two limits meet: below it an operation is **memory-bound** (waiting for data), above it
**compute-bound** (waiting for arithmetic units).

Examples::

    from gpulab.profiling import cpu_peak, op_count, roofline
    line, _ = roofline.measure_roofline("cpu")         # peak and bandwidth from gpulab.bench's probes
    cost = op_count.matmul_cost(512, 512, 512)         # FLOPs from FlopCounterMode, bytes counted
    line.classify(cost.intensity)                      # 'compute-bound'
    print(cpu_peak.this_cpu_peak().explain())          # cores x clock x FLOP per cycle, derived

Op counts live in :mod:`gpulab.profiling.op_count`; the theoretical CPU peak in :mod:`gpulab.profiling.cpu_peak`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from gpulab import bench, devices
from gpulab.profiling.op_count import OpCost
from gpulab.validate import non_negative_number, positive_number

BOUNDS = ("memory-bound", "compute-bound")
H200_URL = "https://www.nvidia.com/en-us/data-center/h200/"


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """FLOP per byte moved: ``flops / nbytes``; ``flops`` may be 0, ``nbytes`` must be positive."""
    return non_negative_number(flops, "flops") / positive_number(nbytes, "nbytes")


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """The arithmetic intensity (FLOP/byte) where the two roofs meet: ``peak FLOP/s / bandwidth bytes/s``."""
    return positive_number(peak_flops, "peak_flops") / positive_number(bandwidth, "bandwidth")


def classify(intensity: float, ridge: float) -> str:
    """``'memory-bound'`` below the ridge point, ``'compute-bound'`` at or above it."""
    if isinstance(intensity, bool) or not isinstance(intensity, (int, float)) or not intensity >= 0:  # inf allowed
        raise ValueError(f"intensity={intensity!r} must be a non-negative number of FLOP per byte")
    return BOUNDS[intensity >= positive_number(ridge, "ridge")]


def attainable(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """The roofline: the most FLOP/s an operation of this intensity can reach, ``min(peak, intensity x bandwidth)``."""
    classify(intensity, 1.0)  # validates intensity
    return min(positive_number(peak_flops, "peak_flops"), intensity * positive_number(bandwidth, "bandwidth"))


@dataclass(frozen=True)
class Roofline:
    """One machine's two roofs: ``peak_flops`` (FLOP/s) and ``bandwidth`` (bytes/s), and where they came from."""

    name: str
    peak_flops: float
    bandwidth: float
    source: str = ""

    def __post_init__(self) -> None:
        ridge_point(self.peak_flops, self.bandwidth)  # validates both

    @property
    def ridge(self) -> float:
        """The ridge point in FLOP/byte."""
        return ridge_point(self.peak_flops, self.bandwidth)

    def attainable(self, intensity: float) -> float:
        """The most FLOP/s an operation of this intensity reaches here."""
        return attainable(intensity, self.peak_flops, self.bandwidth)

    def classify(self, intensity: float) -> str:
        """``'memory-bound'`` or ``'compute-bound'`` on this machine."""
        return classify(intensity, self.ridge)

    def describe(self) -> str:
        """One line: peak GFLOP/s, bandwidth GB/s, ridge point."""
        return (f"{self.name}: peak {self.peak_flops / 1e9:,.1f} GFLOP/s, bandwidth {self.bandwidth / 1e9:,.1f} GB/s, "
                f"ridge point {self.ridge:.3g} FLOP/byte")


#: The published FP32 figures of an H200 SXM (no Tensor Cores), for when no GPU run is recorded.
H200_SPEC = Roofline("NVIDIA H200 SXM (spec sheet, FP32)", 67e12, 4.8e12, source=H200_URL)
#: The spec sheet's BF16 Tensor Core figure, 1,979 TFLOPS, is "with sparsity" (2:4 structured sparsity,
#: half the multiplies skipped); dense matrix products, what training runs, reach at most half of it.
H200_BF16_SPARSE_FLOPS = 1979e12
H200_BF16_SPEC = Roofline("NVIDIA H200 SXM (spec sheet, BF16 Tensor Cores, dense)", H200_BF16_SPARSE_FLOPS / 2,
                          4.8e12, source=H200_URL)


def measure_roofline(device: str | torch.device = "cpu", sizes: Sequence[int] | None = None,
                     copy_mb: Sequence[int] | None = None, threads: int | None = None,
                     min_run_time: float = 0.1) -> tuple[Roofline, list]:
    """A device's roofline from notebook 01's probes: the best float32 matmul rate and the best copy rate.

    Sizes default to ``gpulab.bench.default_sizes`` for the device. The bandwidth is the best of
    ``copy_probe`` kinds ``device`` (read + write) and ``add`` (read 2, write 1). Returns the
    ``Roofline`` and the ``BenchResult``s it was made from.
    """
    dev = devices.pick_device(device)
    sizes = bench.default_sizes("matmul", dev) if sizes is None else sizes
    copy_mb = bench.default_sizes("copy", dev)[-1:] if copy_mb is None else copy_mb
    matmuls = bench.matmul_sweep(dev, sizes, "float32", threads=threads, min_run_time=min_run_time)
    copies = [r for kind in ("device", "add")
              for r in bench.copy_sweep(dev, copy_mb, kind, threads=threads, min_run_time=min_run_time)]
    best_mm = max(matmuls, key=lambda r: r.rate)
    best_copy = max(copies, key=lambda r: r.rate)
    what = "this CPU" if dev.type == "cpu" else f"this {dev.type.upper()} device"
    line = Roofline(f"{what} (measured)", best_mm.rate * 1e9, best_copy.rate * 1e9,
                    source=f"matmul n={best_mm.size}, {best_mm.threads} threads; copy {best_copy.kind} {best_copy.size} MiB")
    return line, matmuls + copies


def recorded_gpu_roofline(directory: str | Path | None = None) -> Roofline | None:
    """The GPU roofline from ``gpulab/reference/`` (strict float32 matmul, copy within the GPU), or None."""
    from gpulab import gpu_reference

    mm = [r for r in gpu_reference.reference_results("matmul", "float32", directory=directory)
          if r.matmul_precision in (None, "highest")]
    copies = gpu_reference.reference_results("copy", kind="device", directory=directory)
    if not mm or not copies:
        return None
    best_mm, best_copy = max(mm, key=lambda r: r.rate), max(copies, key=lambda r: r.rate)
    return Roofline(f"{best_mm.description} (recorded)", best_mm.rate * 1e9, best_copy.rate * 1e9,
                    source=f"gpulab/reference, {best_mm.date[:10]}")


def plot_roofline(lines: Sequence[Roofline], ops: Sequence[OpCost] = (), ax=None):
    """Log-log roofline of each machine in ``lines``, with ``ops`` placed on the first one. Returns the Axes."""
    import matplotlib.pyplot as plt

    if not lines:
        raise ValueError("plot_roofline needs at least one Roofline")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    xs = [c.intensity for c in ops if c.intensity > 0] + [line.ridge for line in lines]
    lo, hi = min(xs + [0.1]) / 4, max(xs + [100.0]) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for line in lines:
        ax.plot(grid, [line.attainable(x) / 1e9 for x in grid], "-", label=f"{line.name}")
        ax.axvline(line.ridge, ls=":", color=ax.get_lines()[-1].get_color(), alpha=0.6)
    first = lines[0]
    markers = "osD^vP*Xh<>"
    for i, c in enumerate(op for op in ops if op.intensity > 0):
        ax.plot(c.intensity, first.attainable(c.intensity) / 1e9, markers[i % len(markers)], ls="none",
                markersize=7, alpha=0.8, label=f"{c.name} ({c.intensity:.3g} FLOP/byte)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte)")
    ax.set_ylabel("attainable GFLOP/s")
    ax.set_title("roofline: dotted lines mark the ridge points; operations on the first roof")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, which="both", alpha=0.3)
    return ax
