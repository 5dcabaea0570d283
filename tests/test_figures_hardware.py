"""Notebook 01's bandwidth figure: each copy lands at its memory level, in the order the course promises."""

from __future__ import annotations

import dataclasses

import matplotlib
import pytest

matplotlib.use("Agg")

from gpulab import measured_elsewhere as published  # noqa: E402
from gpulab.profiling import roofline
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


def test_a_recorded_sweep_gives_one_bar_per_setting_and_every_label_is_unique():
    sweep = [_copy("cuda:0", "h2d", rate, size=size, pinned=pinned)
             for pinned in (False, True) for size, rate in ((1, 9.8), (64, 16.2), (1024, 8.5))]
    sweep += [dataclasses.replace(r, non_blocking=True, rate=r.rate + 1) for r in sweep]
    sweep += [_copy("cuda:0", "device", rate, size=size) for size, rate in ((64, 3865.4), (1024, 4262.3))]
    recorded = [b for b in hardware.bandwidths([], sweep) if b.source == hardware.SOURCES[1]]
    assert len(recorded) == 5  # h2d: pageable/pinned x blocking/non_blocking; one copy within GPU memory
    assert all("1024 MiB" in b.what for b in recorded)
    assert len({b.what for b in recorded}) == len(recorded)
    assert sum("non_blocking" in b.what for b in recorded) == 2


def test_this_machine_keeps_every_copy_and_names_its_threads():
    mine = [_copy("cpu", "device", 50.0, size=1), _copy("cpu", "device", 20.0, size=64),
            dataclasses.replace(_copy("cpu", "device", 30.0, size=64), threads=16)]
    here = [b for b in hardware.bandwidths(mine) if b.source == hardware.SOURCES[0]]
    assert [b.gb_per_s for b in here] == [50.0, 20.0, 30.0]
    assert here[1].what.startswith("this CPU, 2 threads") and here[2].what.startswith("this CPU, 16 threads")
    assert len({b.what for b in here}) == 3
