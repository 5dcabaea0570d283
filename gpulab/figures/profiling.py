"""Notebook 11: the profiler's schedule over the steps of a run, and what torch.compile's inductor fuses.

- ``profiler_schedule()`` (a schematic): what ``torch.profiler.schedule`` does at every step, asked of torch
  itself, for the two schedules the notebook uses;
- ``inductor_kernels(graphs)`` (from a run): the calls of each compiled graph in order, library calls and
  generated kernels, each generated kernel with the ATen operations its name says it fused.
"""

from __future__ import annotations

import re
from typing import Sequence

from gpulab.figures import COLORS, box, canvas, label

#: What each ``torch.profiler.ProfilerAction`` means for a step, and its colour.
ACTIONS = {"NONE": ("off", COLORS["idle"]), "WARMUP": ("warmup: on, thrown away", COLORS["memory"]),
           "RECORD": ("recorded", COLORS["gpu"]), "RECORD_AND_SAVE": ("recorded, then saved", COLORS["gpu"])}
SCHEDULES = ({"wait": 1, "warmup": 1, "active": 5, "repeat": 1, "steps": 7},
             {"wait": 2, "warmup": 1, "active": 2, "repeat": 2, "steps": 12})


def schedule_actions(wait: int, warmup: int, active: int, repeat: int, steps: int) -> list[str]:
    """The name of torch's ``ProfilerAction`` for each step 0..steps-1 of ``torch.profiler.schedule(...)``."""
    from torch.profiler import schedule

    plan = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)
    return [plan(step).name for step in range(steps)]


def profiler_schedule(schedules: Sequence[dict] = SCHEDULES):
    """One row of steps per schedule, each step coloured by what the profiler does in it (torch's own answer)."""
    most = max(s["steps"] for s in schedules)
    fig, ax = canvas(1.6 + most * 0.75 + 0.3, 1.1 + 1.9 * len(schedules),
                     "torch.profiler.schedule: what the profiler does at each step")
    for k, s in enumerate(schedules):
        y = 0.9 + 1.9 * (len(schedules) - 1 - k)
        args = ", ".join(f"{name}={s[name]}" for name in ("wait", "warmup", "active", "repeat"))
        label(ax, 0.2, y + 1.2, f"schedule({args})", ha="left", weight="bold")
        label(ax, 0.2, y + 0.3, "step", ha="left", fontsize=9)
        for step, action in enumerate(schedule_actions(**s)):
            x = 1.6 + step * 0.75
            box(ax, x, y, 0.65, 0.6, str(step), color=ACTIONS[action][1], fontsize=9)
            if action == "RECORD_AND_SAVE":
                label(ax, x + 0.33, y - 0.25, "trace", fontsize=8, color=COLORS["text"])
                ax.annotate("", xy=(x + 0.33, y - 0.12), xytext=(x + 0.33, y),
                            arrowprops={"arrowstyle": "-|>", "color": COLORS["text"], "lw": 1.0})
    for x, (meaning, color) in zip((0.2, 1.5, 4.3), list(ACTIONS.values())[:3]):
        box(ax, x, 0.05, 0.3, 0.3, color=color, rounded=False)
        label(ax, x + 0.4, 0.2, meaning, ha="left", fontsize=9)
    label(ax, 5.9, 0.2, "trace: on_trace_ready runs (writes the file)", ha="left", fontsize=9)
    return fig


def fused_ops(kernel: str) -> list[str]:
    """The ATen operations a generated kernel's name lists: ``cpp_fused_sum_threshold_backward_2`` ->
    ``['sum', 'threshold_backward']`` (the longest names torch.ops.aten knows, left to right)."""
    import torch

    m = re.match(r"^(?:cpp|triton_\w+?)_fused_(.+?)(?:_\d+)?$", kernel)
    if not m:
        return [kernel]
    words, ops = m.group(1).split("_"), []
    while words:
        for n in range(len(words), 0, -1):
            name = "_".join(words[:n])
            if n == 1 or hasattr(torch.ops.aten, name):
                ops.append(name)
                words = words[n:]
                break
    return ops


def inductor_kernels(graphs: Sequence):
    """Each compiled graph's calls in order (``gpulab.profiling.compiled_code.kernels_in`` results): library calls in blue,
    generated kernels in green with the operations fused into each."""
    if not graphs:
        raise ValueError("no compiled graphs to draw: pass the kernels_in(...) of each module inductor wrote")
    most = max(len(g.calls) for g in graphs)
    w = 1.55
    fig, ax = canvas(1.7 + most * w + 0.2, 0.9 + 1.6 * len(graphs),
                     "What inductor built for Net1's training step (this run's code, in call order)")
    for k, g in enumerate(graphs):
        y = 0.95 + 1.6 * (len(graphs) - 1 - k)
        label(ax, 0.15, y + 0.45, g.graph, ha="left", weight="bold")
        for i, (name, generated) in enumerate(g.calls):
            x = 1.7 + i * w
            if generated:
                ops = [op.replace("_", "_\n", 1) if len(op) > 12 else op for op in fused_ops(name)]
                box(ax, x, y, w - 0.12, 0.9, " +\n".join(ops), color=COLORS["gpu"], fontsize=8)
                label(ax, x + (w - 0.12) / 2, y - 0.18, "one fused loop", fontsize=7)
            else:
                box(ax, x, y, w - 0.12, 0.9, name, color=COLORS["cpu"], fontsize=9)
                label(ax, x + (w - 0.12) / 2, y - 0.18, "library call", fontsize=7)
    box(ax, 1.7, 0.05, 0.3, 0.3, color=COLORS["cpu"], rounded=False)
    label(ax, 2.1, 0.2, "library call (matrix product: ATen's own on a CPU, cuBLAS on a GPU)", ha="left", fontsize=9)
    box(ax, 1.7 + 0.55 * most * w, 0.05, 0.3, 0.3, color=COLORS["gpu"], rounded=False)
    label(ax, 2.1 + 0.55 * most * w, 0.2, "kernel inductor generated (the operations fused in it)", ha="left",
          fontsize=9)
    return fig


STATIC = {"11-profiler-schedule": profiler_schedule}
