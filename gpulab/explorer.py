"""An ipywidgets bench explorer for notebook 01: pick probe, size, dtype and device, press Run.

Each run measures one point with :mod:`gpulab.bench`, adds it to the history and redraws a plot of
every point so far (rate vs size, one line per device/dtype). The logic lives in plain functions
(:func:`run_point`, :func:`plot_history`) that are tested without a kernel; :func:`bench_explorer`
only wires widgets to them, and importing this module needs no running Jupyter.
"""

from __future__ import annotations

from typing import Sequence

from gpulab import bench, bench_results, devices
from gpulab.precision import DTYPES
from gpulab.gpu_reference import size_axis

MATMUL_SIZES = (64, 128, 256, 512, 1024, 2048)
COPY_SIZES_MB = (1, 4, 16, 64, 256)


def device_options() -> list[str]:
    """Device names for the dropdown: only what this machine has (``'cpu'`` always last)."""
    return [d.name for d in devices.list_devices()]


def size_options(probe: str) -> tuple[int, ...]:
    """The sizes offered for a probe: matrix sides for matmul, MiB for copy."""
    if probe not in bench.PROBES:
        raise ValueError(f"unknown probe {probe!r}: use one of {', '.join(bench.PROBES)}")
    return MATMUL_SIZES if probe == "matmul" else COPY_SIZES_MB


def run_point(history: list[bench_results.BenchResult], probe: str, device: str, size: int, dtype: str,
              min_run_time: float = 0.05) -> bench_results.BenchResult:
    """Measure one point, append it to ``history`` (replacing an older identical setting) and return it."""
    if probe == "matmul":
        result = bench.matmul_probe(device, size, dtype, min_run_time=min_run_time)
    elif probe == "copy":
        result = bench.copy_probe(device, size, "device", dtype=dtype, min_run_time=min_run_time)
    else:
        raise ValueError(f"unknown probe {probe!r}: use one of {', '.join(bench.PROBES)}")
    key = (result.probe, result.label, result.size)
    history[:] = [r for r in history if (r.probe, r.label, r.size) != key]
    history.append(result)
    return result


def plot_history(history: Sequence[bench_results.BenchResult], probe: str, ax=None):
    """Draw every measured point of ``probe`` (rate vs size, one line per device/dtype); returns the Axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    groups: dict[str, list[bench_results.BenchResult]] = {}
    for r in history:
        if r.probe == probe:
            groups.setdefault(r.label, []).append(r)
    for label, rs in groups.items():
        rs = sorted(rs, key=lambda r: r.size)
        ax.plot([r.size for r in rs], [r.rate for r in rs], "o-", label=label)
    size_axis(ax, [r.size for rs in groups.values() for r in rs])
    ax.set_xlabel("matrix side n" if probe == "matmul" else "MiB copied")
    ax.set_ylabel("GFLOP/s" if probe == "matmul" else "GB/s")
    ax.set_title(f"{probe}: {sum(len(v) for v in groups.values())} point(s) measured")
    if groups:
        ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)
    return ax


def bench_explorer(min_run_time: float = 0.05):
    """Build the widget: probe, size, dtype and device controls, a Run button, and an output with the plot."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    history: list[bench_results.BenchResult] = []
    probe = w.ToggleButtons(options=list(bench.PROBES), value="matmul", description="probe")
    size = w.Dropdown(options=list(size_options("matmul")), value=256, description="size")
    dtype = w.Dropdown(options=list(DTYPES), value="float32", description="dtype")
    device = w.Dropdown(options=device_options(), description="device")
    run = w.Button(description="Run", button_style="primary", icon="play")
    status = w.Label(value="Pick a setting and press Run.")
    out = w.Output()

    def on_probe(change) -> None:
        size.options = list(size_options(change["new"]))
        size.value = size.options[2]

    def on_run(_button) -> None:
        run.disabled = True
        status.value = "measuring..."
        try:
            r = run_point(history, probe.value, device.value, size.value, dtype.value, min_run_time)
            status.value = f"{r.label}, size {r.size}: {r.rate:,.1f} {r.unit} ({r.seconds * 1e3:.3f} ms)"
        except ValueError as exc:
            status.value = f"error: {exc}"
        finally:
            run.disabled = False
        with out:
            out.clear_output(wait=True)
            plot_history(history, probe.value)
            plt.show()

    probe.observe(on_probe, names="value")
    run.on_click(on_run)
    return w.VBox([probe, w.HBox([size, dtype, device, run]), status, out])
