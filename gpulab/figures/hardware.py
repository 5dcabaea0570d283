"""Notebooks 01-02: CPU cores and GPU cores, the memory hierarchy with its bandwidths, finding a device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from gpulab.figures import COLORS, FONT, arrow, box, canvas, label


def cpu_vs_gpu_cores():
    """A CPU: a few large cores, each with its own control and cache. A GPU: many small cores in groups (SMs)."""
    fig, ax = canvas(10, 4.4, "A CPU has a few large cores; a GPU has many small ones (drawing, not to scale)")
    # CPU: 8 large cores, each with control logic and a cache beside its arithmetic
    box(ax, 0.2, 0.3, 4.4, 3.4, "", color=COLORS["light"])
    label(ax, 2.4, 3.45, "CPU: a few large cores", weight="bold")
    for i in range(8):
        x, y = 0.45 + (i % 4) * 1.03, 0.55 + (i // 4) * 1.35
        box(ax, x, y, 0.93, 1.2, "", color="white")
        box(ax, x + 0.06, y + 0.8, 0.81, 0.34, "control", color=COLORS["idle"], fontsize=7)
        box(ax, x + 0.06, y + 0.43, 0.81, 0.34, "cache", color=COLORS["memory"], fontsize=7)
        box(ax, x + 0.06, y + 0.06, 0.81, 0.34, "arithmetic", color=COLORS["cpu"], fontsize=7)
    # GPU: groups of small cores sharing control (NVIDIA: streaming multiprocessors, SMs)
    box(ax, 5.0, 0.3, 4.8, 3.4, "", color=COLORS["light"])
    label(ax, 7.4, 3.45, "GPU: many small cores in groups (SMs)", weight="bold")
    for g in range(8):
        gx, gy = 5.2 + (g % 4) * 1.15, 0.5 + (g // 4) * 1.4
        box(ax, gx, gy, 1.05, 1.25, "", color="white")
        box(ax, gx + 0.05, gy + 1.0, 0.95, 0.2, "control", color=COLORS["idle"], fontsize=6)
        for c in range(24):
            box(ax, gx + 0.07 + (c % 6) * 0.155, gy + 0.08 + (c // 6) * 0.22, 0.13, 0.17, color=COLORS["gpu"],
                rounded=False)
    label(ax, 2.4, 0.1, "each core runs its own program fast", fontsize=9)
    label(ax, 7.4, 0.1, "the cores of a group share control: same step, different numbers", fontsize=9)
    return fig


def memory_hierarchy():
    """The levels of memory on the host and on the GPU, small and fast near the cores, and the PCIe link between."""
    fig, ax = canvas(10, 4.9, "The memory hierarchy: small and fast near the cores, large and slow far away")
    sides = (("host: the CPU and its memory", 2.75, COLORS["cpu"],
              ["registers\n(in each core)", "caches:\nL1, L2, often L3", "RAM\n(main memory)"]),
             ("GPU: the device and its own memory", 7.25, COLORS["gpu"],
              ["registers\n(in each SM)", "L1 cache and shared\nmemory (in each SM)", "L2 cache\n(shared by all SMs)",
               "GPU memory:\nHBM or GDDR (VRAM)"]))
    h, gap, bottom = 0.72, 0.22, 0.75
    for title, centre, color, levels in sides:
        label(ax, centre, 4.65, title, weight="bold")
        n = len(levels)
        for i, text in enumerate(levels):
            below = n - 1 - i  # levels under this one
            w = 3.2 - 1.5 * below / 3  # wider further down: larger memories
            y = bottom + below * (h + gap)
            box(ax, centre - w / 2, y, w, h, text, color=COLORS["memory"] if below == 0 else "white", edge=color,
                fontsize=FONT - 1)
            if below:
                arrow(ax, (centre, y), (centre, y - gap), both=True, color=COLORS["idle"])
    arrow(ax, (0.3, bottom), (0.3, 4.35), color=COLORS["text"])
    ax.text(0.12, 2.55, "smaller, faster, closer to the cores", rotation=90, ha="center", va="center",
            fontsize=FONT - 1)
    arrow(ax, (4.35, bottom + h / 2), (5.65, bottom + h / 2), "PCIe link", both=True, color=COLORS["grad"],
          offset=(0, 0.08))
    label(ax, 5.0, 0.35, "moving data between host RAM and GPU memory crosses the PCIe link: usually the narrowest step",
          fontsize=FONT - 1, color=COLORS["grad"])
    return fig


# ---- bandwidths by level, from this run's probes and from published figures ------------------------

SOURCES = ("measured here", "recorded GPU reference", "measured elsewhere", "peak on paper (spec sheet, link rate)")
SOURCE_COLORS = dict(zip(SOURCES, (COLORS["cpu"], COLORS["gpu"], COLORS["memory"], COLORS["idle"])))
LEVELS = ("CPU: caches and RAM", "GPU memory", "PCIe link, host to GPU")
#: each level's label beside the bars, on two lines
LEVEL_LABELS = dict(zip(LEVELS, ("CPU:\ncaches and RAM", "GPU memory", "PCIe link,\nhost to GPU")))
_COPY = {"device": "copy within its memory", "h2d": "host-to-device copy"}


@dataclass(frozen=True)
class Bandwidth:
    """One bar of the bandwidth figure: ``gb_per_s`` at a memory ``level``, and where the figure came from."""

    level: str
    what: str
    gb_per_s: float
    source: str


def _level(result) -> str | None:
    """The memory level a copy result measures (``None`` for other probes and kinds)."""
    if result.probe != "copy" or result.kind not in _COPY:
        return None
    if result.kind == "h2d":
        return LEVELS[2]
    return LEVELS[0] if result.device == "cpu" else LEVELS[1]


def _describe(result) -> str:
    """Two short lines: the device, then what was copied (``'NVIDIA H200\\nhost-to-device copy, pinned, 64 MiB'``).

    Every setting that changes the figure is named: a CPU's thread count, pageable or pinned, non_blocking.
    """
    threads = f"this CPU, {result.threads} threads" if result.threads != 1 else "this CPU, 1 thread"
    who = threads if result.device == "cpu" else result.description
    pinned = "pinned" if result.pinned else ("pageable" if result.kind == "h2d" else "")
    blocking = "non_blocking" if result.non_blocking else ""
    how = [_COPY[result.kind], pinned, blocking, f"{result.size} MiB"]
    return f"{who}\n{', '.join(part for part in how if part)}"


def largest_of_each(results: Sequence) -> list:
    """The largest copy of each device, kind and setting (pinned, non_blocking), in the order first seen.

    A recorded run sweeps many sizes; one bar per setting keeps the figure readable.
    """
    best: dict = {}
    for r in results:
        key = (r.description or r.device, r.kind, r.pinned, r.non_blocking, r.threads if r.device == "cpu" else None)
        if key not in best or r.size > best[key].size:
            best[key] = r
    return list(best.values())


def bandwidths(mine: Sequence, references: Sequence = ()) -> list[Bandwidth]:
    """Every bar: this run's copies, then recorded GPU references (the largest copy of each setting),
    published measurements and spec sheets."""
    from gpulab import measured_elsewhere as published
    from gpulab.profiling import roofline

    bars = []
    for source, results in ((SOURCES[0], mine), (SOURCES[1], largest_of_each(references))):
        bars += [Bandwidth(_level(r), _describe(r), r.rate, source) for r in results if _level(r)]
    for f in published.figures("memory") + published.figures("copy"):
        gb = f.value * (2**30 / 1e9 if f.unit == "GiB/s" else 1.0)  # GiB/s -> GB/s
        level = LEVELS[1] if f.topic == "memory" else LEVELS[2]
        what = f.what.replace(" (read + write counted)", "").replace(" (nvbandwidth, copy engine)", "")
        bars.append(Bandwidth(level, f"{f.hardware}\n{what}", gb, SOURCES[2]))
        if f.spec is not None:
            bars.append(Bandwidth(level, f"{f.hardware}\nthe link's rate", f.spec, SOURCES[3]))
    spec = roofline.H200_SPEC
    bars.append(Bandwidth(LEVELS[1], f"{spec.name.split(' (')[0]}\nGPU memory (HBM3e)", spec.bandwidth / 1e9,
                          SOURCES[3]))
    return sorted(bars, key=lambda b: (LEVELS.index(b.level), SOURCES.index(b.source)))


def plot_bandwidths(bars: Sequence[Bandwidth], ax=None):
    """Horizontal bars (log scale), grouped by memory level and coloured by source; returns the Axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if not bars:
        raise ValueError("no bandwidths to plot: give at least one Bandwidth")
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.5 * len(bars) + 1.4))
    ys = list(range(len(bars)))[::-1]
    ax.barh(ys, [b.gb_per_s for b in bars], color=[SOURCE_COLORS[b.source] for b in bars], edgecolor="black")
    ax.set_yticks(ys, [b.what for b in bars], fontsize=FONT - 2)
    for y, b in zip(ys, bars):
        ax.text(b.gb_per_s * 1.08, y, f"{b.gb_per_s:,.0f}" if b.gb_per_s >= 10 else f"{b.gb_per_s:.1f}",
                va="center", fontsize=FONT - 2)
    for level in LEVELS:
        rows = [y for y, b in zip(ys, bars) if b.level == level]
        if rows:
            ax.axhline(min(rows) - 0.5, color=COLORS["idle"], lw=0.8)
            ax.text(1.01, (min(rows) + max(rows)) / 2, LEVEL_LABELS[level],
                    transform=ax.get_yaxis_transform(), va="center", fontsize=FONT - 1, weight="bold")
    ax.set_xscale("log")
    ax.set_xlim(min(b.gb_per_s for b in bars) / 2, max(b.gb_per_s for b in bars) * 4)
    ax.set_xlabel("bandwidth, GB/s (log scale)")
    ax.set_title("Bandwidth at each level of the memory hierarchy")
    used = [s for s in SOURCES if any(b.source == s for b in bars)]
    ax.legend(handles=[Patch(color=SOURCE_COLORS[s], label=s) for s in used], fontsize="small", loc="lower right")
    return ax


# ---- notebook 02: which device PyTorch gets ---------------------------------------------------------


def auto_fallback():
    """``pick_device("auto")``: CUDA (or ROCm), then Apple MPS, then Intel XPU, then the CPU."""
    fig, ax = canvas(10, 3.3, 'pick_device("auto") asks in this order and takes the first "yes"')
    steps = (("a CUDA GPU?\n(NVIDIA, or AMD\nwith ROCm)", "cuda:0"), ("an Apple GPU?\n(MPS)", "mps"),
             ("an Intel GPU?\n(XPU)", "xpu:0"))
    for i, (question, answer) in enumerate(steps):
        x = 0.1 + i * 2.5
        box(ax, x, 1.75, 1.9, 1.05, question, color=COLORS["light"], fontsize=FONT - 1)
        box(ax, x + 0.3, 0.2, 1.3, 0.6, answer, color=COLORS["gpu"])
        arrow(ax, (x + 0.95, 1.75), (x + 0.95, 0.8), "yes", offset=(0.25, -0.05))
        arrow(ax, (x + 1.9, 2.27), (x + 2.5, 2.27), "no", offset=(0, 0.05))
    box(ax, 7.6, 1.75, 2.2, 1.05, "none of them:\nthe CPU", color=COLORS["cpu"])
    label(ax, 8.7, 1.1, "the CPU is always there:\nno GPU is not an error", fontsize=FONT - 1)
    return fig


def visible_devices():
    """``CUDA_VISIBLE_DEVICES`` hides GPUs and renumbers the rest, in the order it lists them."""
    fig, ax = canvas(10, 4.6, "CUDA_VISIBLE_DEVICES chooses the GPUs a new process sees, and renumbers them")
    label(ax, 0.1, 4.0, "the machine's GPUs\n(CUDA's numbering)", ha="left", weight="bold", va="center")
    for g in range(4):
        box(ax, 3.3 + g * 1.65, 3.7, 1.3, 0.6, f"GPU {g}", color=COLORS["gpu"])
    rows = (("variable not set", {g: f"cuda:{g}" for g in range(4)}),
            ("CUDA_VISIBLE_DEVICES=2,0", {2: "cuda:0", 0: "cuda:1"}),
            ("CUDA_VISIBLE_DEVICES=1", {1: "cuda:0"}), ('CUDA_VISIBLE_DEVICES=""\n(torch gets no GPU)', {}))
    for r, (setting, seen) in enumerate(rows):
        y = 2.75 - r * 0.85
        label(ax, 0.1, y + 0.3, setting, ha="left", fontsize=FONT - 1)
        for g in range(4):
            name = seen.get(g)
            box(ax, 3.3 + g * 1.65, y, 1.3, 0.6, name or "hidden", color=COLORS["gpu"] if name else COLORS["idle"],
                fontsize=FONT - 1)
    label(ax, 5.0, 0.0, "what the process sees in each setting: its own numbers, cuda:0 first", fontsize=FONT - 1)
    return fig


STATIC = {"01-cpu-vs-gpu-cores": cpu_vs_gpu_cores, "01-memory-hierarchy": memory_hierarchy,
          "02-auto-fallback": auto_fallback, "02-visible-devices": visible_devices}
