"""Notebook 01's bandwidth figure: each copy lands at its memory level, in the order the course promises."""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

from gpulab import published, roofline  # noqa: E402
from gpulab.bench_results import BenchResult  # noqa: E402
from gpulab.figures import hardware  # noqa: E402


def _copy(device: str, kind: str, rate: float, size: int = 64, pinned: bool = False, probe: str = "copy"):
    return BenchResult(probe=probe, device=device, description="cpu" if device == "cpu" else "NVIDIA X",
                       torch_version="2.13.0", backend=None, threads=2, dtype="float32", size=size, seconds=0.01,
                       rate=rate, unit="GB/s", date="2026-01-01T00:00:00+00:00", kind=kind, pinned=pinned)


def test_each_copy_lands_at_its_level_and_other_probes_are_left_out():
    mine = [_copy("cpu", "device", 40.0), _copy("cuda:0", "device", 3000.0), _copy("cuda:0", "h2d", 50.0, pinned=True),
            _copy("cuda:0", "d2h", 45.0), _copy("cpu", "add", 30.0), _copy("cpu", "device", 99.0, probe="matmul")]
    here = [b for b in hardware.bandwidths(mine) if b.source == "measured here"]
    assert [(b.level, b.gb_per_s) for b in here] == [(hardware.LEVELS[0], 40.0), (hardware.LEVELS[1], 3000.0),
                                                    (hardware.LEVELS[2], 50.0)]
    assert here[0].what.startswith("this CPU") and "pinned" in here[2].what and "64 MiB" in here[2].what


def test_order_is_level_then_this_machine_reference_published_spec():
    bars = hardware.bandwidths([_copy("cuda:0", "h2d", 20.0)], references=[_copy("cuda:0", "h2d", 30.0)])
    levels = [hardware.LEVELS.index(b.level) for b in bars]
    assert levels == sorted(levels)
    link = [b.source for b in bars if b.level == hardware.LEVELS[2]]
    assert link[:2] == ["measured here", "recorded GPU reference"] and link[-1] == hardware.SOURCES[3]


def test_published_figures_are_converted_to_gb_per_s_and_specs_come_along():
    bars = hardware.bandwidths([])
    for f in published.figures("memory") + published.figures("copy"):
        expected = f.value * (2**30 / 1e9 if f.unit == "GiB/s" else 1)
        assert any(b.gb_per_s == pytest.approx(expected) and b.source == "measured elsewhere" for b in bars), f
    assert any(b.gb_per_s == roofline.H200_SPEC.bandwidth / 1e9 and b.source == hardware.SOURCES[3] for b in bars)
    assert all(b.gb_per_s != 1220.7 for b in bars)  # the GiB/s figure is not plotted as if it were GB/s


def test_the_plot_has_a_title_labels_and_one_bar_each():
    bars = hardware.bandwidths([_copy("cpu", "device", 40.0)])
    ax = hardware.plot_bandwidths(bars)
    assert ax.get_title() and "GB/s" in ax.get_xlabel() and len(ax.patches) == len(bars)
    with pytest.raises(ValueError, match="no bandwidths"):
        hardware.plot_bandwidths([])
