"""Notebook 03's pictures: the copy-bandwidth bars show what they are given, in the order the course promises."""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

from gpulab import measured_elsewhere as published  # noqa: E402
from gpulab.bench_results import BenchResult  # noqa: E402
from gpulab.figures import has_title  # noqa: E402
from gpulab.figures.transfers import GIB_IN_GB, STATIC, copy_rates  # noqa: E402


def _copy(description: str, size: int, rate: float, pinned: bool, non_blocking: bool = False) -> BenchResult:
    return BenchResult(probe="copy", device="cuda", description=description, torch_version="x", backend="cuda",
                       threads=1, dtype="float32", size=size, seconds=1.0, rate=rate, unit="GB/s", date="d",
                       kind="h2d", pinned=pinned, non_blocking=non_blocking)


def _bars(fig):
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    widths = [p.get_width() for p in ax.patches]
    order = sorted(range(len(labels)), key=lambda i: -ax.get_yticks()[i])  # top of the plot first
    return [labels[i] for i in order], [widths[i] for i in order]


def test_published_only_says_there_is_no_copy_of_this_machine():
    figs = published.figures("copy")
    fig = copy_rates(figs)
    labels, widths = _bars(fig)
    assert len(labels) == len(figs) and all(lab.startswith("measured elsewhere") for lab in labels)
    expected = [f.value * (GIB_IN_GB if f.unit == "GiB/s" else 1) for f in figs]
    assert widths == pytest.approx(expected)
    assert "no copy of this machine" in fig.axes[0].get_title() and "no GPU reference" in fig.axes[0].get_title()


def test_reference_first_then_published_then_this_machine_largest_copy_of_each_setting():
    mine = [_copy("GPU A", 1, 3.0, True), _copy("GPU A", 64, 20.0, True), _copy("GPU A", 64, 9.0, False)]
    ref = [_copy("NVIDIA H200", 1024, 50.0, True)]
    labels, widths = _bars(copy_rates(published.figures("copy"), mine, ref))
    assert labels[0].startswith("recorded reference: NVIDIA H200") and widths[0] == 50.0
    assert labels[1].startswith("measured elsewhere")
    assert [w for lab, w in zip(labels, widths) if lab.startswith("this machine")] == [20.0, 9.0]


def test_bad_input():
    with pytest.raises(ValueError, match="nothing to plot"):
        copy_rates([])
    odd = published.Published("copy", "x", 1.0, "TFLOP/s", "h", "s", "https://example.org")
    with pytest.raises(ValueError, match="GB/s or GiB/s"):
        copy_rates([odd])


@pytest.mark.parametrize("name", sorted(STATIC))
def test_schematics_have_titles(name):
    assert has_title(STATIC[name]())
