"""Notebooks 03 and 07: the host-to-device copy (pageable and pinned), the GPU's queue and why timing must synchronize."""

from __future__ import annotations

from typing import Sequence

from gpulab.figures import COLORS, FONT, arrow, box, canvas, label
from gpulab.figures.hardware import largest_of_each

#: 1 GiB/s in GB/s (published copy figures come in both units; the course's probes report GB/s).
GIB_IN_GB = 2**30 / 1e9


def pageable_vs_pinned():
    """Pageable memory: the CPU first copies into a pinned staging buffer, then DMA. Pinned memory: DMA only."""
    fig, ax = canvas(10, 4.9, "A host-to-device copy: pageable memory takes a detour, pinned memory goes straight")
    ax.plot([6.55, 6.55], [0.25, 4.25], ls="--", color=COLORS["idle"], lw=1.2)
    label(ax, 3.3, 4.45, "host: the CPU and its RAM", weight="bold")
    label(ax, 8.3, 4.45, "device: the GPU and its memory", weight="bold")
    # pageable: two copies
    label(ax, 0.1, 3.85, "from pageable (ordinary) memory: two copies", ha="left", fontsize=FONT)
    box(ax, 0.1, 2.45, 2.2, 1.1, "your tensor\nin pageable RAM", color=COLORS["data"])
    box(ax, 3.7, 2.45, 2.4, 1.1, "pinned staging buffer\n(the CUDA driver's)", color=COLORS["memory"])
    box(ax, 7.6, 2.45, 2.2, 1.1, "the copy\nin GPU memory", color=COLORS["gpu"])
    arrow(ax, (2.3, 3.0), (3.7, 3.0), "1. the CPU\ncopies it", offset=(0, 0.1))
    arrow(ax, (6.1, 3.0), (7.6, 3.0), "2. DMA over\nPCIe", offset=(0, 0.1))
    label(ax, 3.3, 2.2, "even with non_blocking=True, the call waits for copy 1", fontsize=FONT - 1, color=COLORS["grad"])
    # pinned: one copy
    label(ax, 0.1, 1.75, "from pinned (page-locked) memory: one copy", ha="left", fontsize=FONT)
    box(ax, 0.1, 0.35, 2.2, 1.1, "your tensor\nin pinned RAM", color=COLORS["memory"])
    box(ax, 7.6, 0.35, 2.2, 1.1, "the copy\nin GPU memory", color=COLORS["gpu"])
    arrow(ax, (2.3, 0.9), (7.6, 0.9), "DMA over PCIe: the GPU's copy engine reads the RAM itself", offset=(0, 0.1))
    label(ax, 3.3, 0.12, "with non_blocking=True the call returns at once", fontsize=FONT - 1, color=COLORS["gpu"])
    return fig


def dataloader_pinning():
    """Who pins a batch in a DataLoader with pin_memory=True: the main process itself, or a pin thread."""
    fig, ax = canvas(10, 4.7, "Where DataLoader(pin_memory=True) pins each batch")
    # num_workers=0: everything happens inside next(), one step after the other
    label(ax, 0.1, 4.25, "num_workers=0 (the default): the main process does it all, inside next(loader)",
          ha="left", weight="bold")
    steps = [("read rows", COLORS["data"]), ("collate\ninto a batch", COLORS["data"]),
             ("pin: copy into\npinned memory", COLORS["memory"]), ("your loop:\n.to(device), step", COLORS["cpu"])]
    for i, (text, color) in enumerate(steps):
        box(ax, 0.1 + i * 2.5, 2.85, 2.0, 1.0, text, color=color)
        if i:
            arrow(ax, (i * 2.5 - 0.4, 3.35), (i * 2.5 + 0.1, 3.35))
    label(ax, 5.0, 2.55, "one after the other: your loop waits for the pinning copy", fontsize=FONT - 1,
          color=COLORS["grad"])
    # num_workers >= 1: workers build batches, a pin thread pins them, the loop takes pinned batches
    label(ax, 0.1, 2.05, "num_workers >= 1: worker processes build batches, a pin thread of the main process pins them",
          ha="left", weight="bold")
    for w in range(2):
        box(ax, 0.1, 0.95 - w * 0.7, 2.3, 0.6, f"worker process {w + 1}:\nread + collate", color=COLORS["data"],
            fontsize=FONT - 1)
        arrow(ax, (2.4, 1.25 - w * 0.7), (3.5, 0.95))
    label(ax, 2.95, 1.45, "queue", fontsize=FONT - 1)
    box(ax, 3.5, 0.55, 2.6, 0.9, "pin thread (main process):\ncopy into pinned memory", color=COLORS["memory"],
        fontsize=FONT - 1)
    arrow(ax, (6.1, 1.0), (7.2, 1.0), "queue", offset=(0, 0.05))
    box(ax, 7.2, 0.55, 2.6, 0.9, "your loop (main process):\n.to(device), step", color=COLORS["cpu"], fontsize=FONT - 1)
    label(ax, 5.0, 0.05, "at the same time: the next batches are pinned while your loop computes", fontsize=FONT - 1,
          color=COLORS["gpu"])
    return fig


def async_queue():
    """A timeline: Python queues kernels and returns; the GPU runs them later; only synchronize waits for them."""
    fig, ax = canvas(10, 4.4, "GPU work is queued: a clock read without synchronize measures only the launches")
    cpu_y, gpu_y, h = 2.7, 1.45, 0.7
    label(ax, 0.55, cpu_y + h / 2, "Python\n(CPU)", weight="bold")
    label(ax, 0.55, gpu_y + h / 2, "GPU", weight="bold")
    for k in range(3):  # three short launches, then the GPU's long kernels
        box(ax, 1.2 + k * 0.62, cpu_y, 0.58, h, f"queue\nk{k + 1}", color=COLORS["cpu"], fontsize=FONT - 2)
        box(ax, 1.7 + k * 2.2, gpu_y, 2.15, h, f"kernel k{k + 1} runs", color=COLORS["gpu"])
        arrow(ax, (1.49 + k * 0.62, cpu_y), (1.85 + k * 2.2, gpu_y + h), color=COLORS["idle"])
    box(ax, 3.15, cpu_y, 5.1, h, "synchronize(): Python waits until the queue is empty", color=COLORS["idle"],
        fontsize=FONT - 1)
    for x, text, color in ((1.15, "start", COLORS["text"]), (3.1, "clock read\nwithout sync", COLORS["grad"]),
                           (8.3, "clock read\nafter sync", COLORS["gpu"])):
        ax.plot([x, x], [0.45, cpu_y + h + 0.1], color=color, lw=1.6, zorder=0)  # behind the boxes
        label(ax, x, cpu_y + h + 0.4, text, fontsize=FONT - 1, color=color)
    arrow(ax, (1.15, 1.05), (3.1, 1.05), both=True, color=COLORS["grad"])
    label(ax, 3.2, 1.05, "measured without synchronize: only the launches", fontsize=FONT - 1, color=COLORS["grad"],
          ha="left")
    arrow(ax, (1.15, 0.45), (8.3, 0.45), both=True, color=COLORS["gpu"])
    label(ax, 4.7, 0.22, "measured with synchronize: the real work", fontsize=FONT - 1, color=COLORS["gpu"])
    arrow(ax, (8.6, 0.3), (9.9, 0.3), "time", offset=(0, 0.05))
    return fig


def copy_rates(published: Sequence, mine: Sequence = (), reference: Sequence = ()):
    """Bars of host-to-device copy bandwidth in GB/s: the recorded ``reference`` first, then ``published``
    (measured elsewhere), then ``mine`` (this machine).

    ``published``: :class:`gpulab.measured_elsewhere.Published` figures (GiB/s converted to GB/s, the spec sheet as a
    red tick); ``mine`` and ``reference``: host-to-device :class:`gpulab.bench_results.BenchResult` copies
    (the largest copy of each setting is drawn).
    """
    import matplotlib.pyplot as plt

    rows = []
    for who, results, color in (("recorded reference", reference, COLORS["cpu"]), ("this machine", mine, COLORS["gpu"])):
        for r in largest_of_each(results):
            how = f"{r.size} MiB, {'pinned' if r.pinned else 'pageable'}, non_blocking={r.non_blocking}"
            rows.append((f"{who}: {r.description or r.device}\n{how}", r.rate, None, color))
        if who == "recorded reference":  # published figures come after the recorded reference
            for f in published:
                if f.unit not in ("GB/s", "GiB/s"):
                    raise ValueError(f"copy figures come in GB/s or GiB/s, not {f.unit!r}")
                scale = GIB_IN_GB if f.unit == "GiB/s" else 1.0
                rows.append((f"measured elsewhere: {f.hardware}\n{f.what}", f.value * scale,
                             None if f.spec is None else f.spec * scale, COLORS["idle"]))
    if not rows:
        raise ValueError("nothing to plot: give published figures or copy results")
    fig, ax = plt.subplots(figsize=(9, 0.75 * len(rows) + 1.5))
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [r[1] for r in rows], color=[r[3] for r in rows], edgecolor=COLORS["text"])
    for yi, (_, value, spec, _) in zip(y, rows):
        ax.text(value, yi, f" {value:.1f}", va="center", fontsize=FONT - 1)
        if spec is not None:
            ax.plot([spec, spec], [yi - 0.4, yi + 0.4], color=COLORS["grad"], lw=2,
                    label="the link's spec sheet" if not ax.get_legend_handles_labels()[0] else None)
    ax.set_yticks(y, [r[0] for r in rows], fontsize=FONT - 2)
    ax.set_xlabel("GB/s (1 GB = 10^9 bytes; GiB/s figures converted)")
    ax.set_xlim(0, max([r[1] for r in rows] + [r[2] or 0 for r in rows]) * 1.2)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=FONT - 1)
    note = [] if mine else ["no copy of this machine: that needs CUDA"]
    note += [] if reference else ["no GPU reference recorded yet"]
    ax.set_title("Host-to-device copy bandwidth" + (f"\n({'; '.join(note)})" if note else ""), fontsize=FONT + 1)
    fig.tight_layout()
    return fig


#: Schematics of this topic: name -> function returning a matplotlib figure (see gpulab.figures.catalog).
STATIC: dict = {"03-pageable-vs-pinned": pageable_vs_pinned, "03-dataloader-pinning": dataloader_pinning,
                "03-async-queue": async_queue}
