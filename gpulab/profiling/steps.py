"""Where a training step's time goes: ``torch.profiler`` over a few steps, split into four phases.

Each step runs as four labelled blocks (``torch.profiler.record_function``), so the profiler's
event list says how long each one took:

- ``data``: the next batch from the ``DataLoader`` (and its copy to the device);
- ``forward``: the model's output and the loss;
- ``backward``: ``loss.backward()``, the gradients;
- ``optimizer``: ``optimizer.step()``.

The step is the course's one training step (:func:`gpulab.step.train_step`, which clears the gradients
first), its phases labelled through its ``phases`` hook.

On a GPU work is queued asynchronously, so each block ends with ``gpulab.devices.synchronize``:
the labels then cover the device's work, not only its launch. The steps follow a
``torch.profiler.schedule``, the way long runs are profiled: ``wait`` steps with the profiler off,
``warmup`` steps with it on but discarded (its own start-up costs), then ``steps`` recorded ones.
Example::

    from gpulab.profiling import steps as profiling
    prof = profiling.profile_steps(model, optimizer, loader, steps=5, trace_path="runs/trace.json")
    prof.per_phase_ms()          # {'data': ..., 'forward': ..., 'backward': ..., 'optimizer': ...}
    print(prof.table(10))        # the top operators, from prof.profiler.key_averages()
    prof.calls("aten::select")   # how often one operator ran
    profiling.plot_timeline(prof)
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from gpulab import devices
from gpulab.step import train_step
from gpulab.validate import non_negative_int, positive_int

PHASES = ("data", "forward", "backward", "optimizer")
LABEL = "phase/"  # record_function names: phase/data, phase/forward, ...


@dataclass(frozen=True)
class PhaseEvent:
    """One phase of one step: when it started (ms from the first event) and how long it took (ms)."""

    step: int
    phase: str
    start_ms: float
    ms: float


def phase_events(events: Iterable) -> list[PhaseEvent]:
    """The labelled phases among profiler events (``prof.events()``), numbered by step, in time order.

    Any object with ``name`` and ``time_range.start`` / ``.end`` (microseconds) works; a step
    starts with each ``data`` phase.
    """
    found = []
    for e in events:
        name = getattr(e, "name", "")
        device_type = getattr(e, "device_type", None)
        if name.startswith(LABEL) and name[len(LABEL):] in PHASES and (device_type is None or "CPU" in str(device_type)):
            found.append((e.time_range.start, e.time_range.end, name[len(LABEL):]))
    found.sort()
    if not found:
        return []
    origin, step, out = found[0][0], -1, []
    for start, end, phase in found:
        step += phase == "data"
        out.append(PhaseEvent(max(step, 0), phase, (start - origin) / 1000, (end - start) / 1000))
    return out


def per_phase_ms(events: Sequence[PhaseEvent]) -> dict[str, float]:
    """Mean milliseconds per step of each phase (every phase listed, 0.0 when absent)."""
    steps = len({e.step for e in events}) or 1
    return {p: sum(e.ms for e in events if e.phase == p) / steps for p in PHASES}


@dataclass
class StepProfile:
    """What ``profile_steps`` measured: the profiler, the phase events, the trace file (or None), the batch sizes."""

    profiler: profile
    events: list[PhaseEvent]
    trace_path: Path | None
    steps: int
    batch_sizes: list[int] = field(default_factory=list)  # rows of each recorded step's batch

    def per_phase_ms(self) -> dict[str, float]:
        """Mean milliseconds per step of each phase."""
        return per_phase_ms(self.events)

    def span_ms(self) -> float:
        """Milliseconds from the first phase's start to the last one's end."""
        return max((e.start_ms + e.ms for e in self.events), default=0.0)

    def table(self, row_limit: int = 10) -> str:
        """The operators that took the most CPU time in total (``key_averages().table``)."""
        return self.profiler.key_averages().table(sort_by="cpu_time_total", row_limit=row_limit)

    def device_ms_per_step(self) -> float:
        """Mean milliseconds per recorded step that the GPU itself computed (its kernels); 0.0 where none ran.

        The sum of every event's self device time: the "Self CUDA time total" under the profiler's table.
        """
        total_us = sum(getattr(e, "self_device_time_total", 0) or 0 for e in self.profiler.events())
        return total_us / 1e3 / self.steps

    def calls(self, name: str) -> int:
        """How many times the operator (or label) ``name`` ran in the recorded steps; 0 if never."""
        return sum(e.count for e in self.profiler.key_averages() if e.key == name)


def trace_steps(path: str | Path) -> list[int]:
    """The step numbers a Chrome trace holds (its ``ProfilerStep#N`` events, written under a schedule), sorted."""
    events = json.loads(Path(path).read_text()).get("traceEvents", [])
    return sorted({int(e["name"].split("#", 1)[1]) for e in events
                   if str(e.get("name", "")).startswith("ProfilerStep#")})


def _batches(loader: Iterable):
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise ValueError("the loader gave no batch: it must yield (x, y) pairs")


def profile_steps(model: nn.Module, optimizer: torch.optim.Optimizer, loader: Iterable, *, steps: int = 5,
                  wait: int = 1, warmup: int = 1, loss_fn: Callable | None = None, device: str | torch.device | None = None,
                  trace_path: str | Path | None = None) -> StepProfile:
    """Train under ``torch.profiler.schedule(wait=wait, warmup=warmup, active=steps)``, phases labelled.

    ``wait`` steps run with the profiler off (the first call of anything pays one-off costs),
    ``warmup`` steps with it on but discarded (torch warns that 0 skews the results), then ``steps``
    are recorded. ``loader`` yields ``(x, y)`` batches and is restarted when it runs out; they are moved to
    where ``model`` is (``device``, when given, must agree).
    ``trace_path`` (optional) receives the recorded steps as a Chrome/Perfetto trace, written by the
    profiler's ``on_trace_ready`` callback (open it at https://ui.perfetto.dev or chrome://tracing).
    """
    steps, wait, warmup = positive_int(steps, "steps"), non_negative_int(wait, "wait"), positive_int(warmup, "warmup")
    device = devices.model_device(model, device, who="profile_steps")
    loss_fn = loss_fn or nn.MSELoss()
    batches = _batches(loader)
    sync = devices.synchronize
    sizes: list[int] = []  # rows of every step's batch, recorded or not

    @contextlib.contextmanager
    def phase(name: str):
        """One labelled phase; it ends once the device has done its work (GPU work is asynchronous)."""
        with record_function(LABEL + name):
            yield
            sync(device)

    def step() -> None:  # the course's one training step, its phases labelled
        with phase("data"):
            x, y = next(batches)
            sizes.append(len(x))
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        train_step(model, optimizer, x, y, loss_fn=loss_fn, phases=phase)

    path = None if trace_path is None else Path(trace_path)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)

    def write_trace(p: profile) -> None:
        if path is not None:
            p.export_chrome_trace(str(path))

    model.train()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    plan = schedule(wait=wait, warmup=warmup, active=steps, repeat=1)
    with profile(activities=activities, schedule=plan, on_trace_ready=write_trace) as prof:
        for _ in range(wait + warmup + steps):
            step()
            prof.step()
    return StepProfile(prof, phase_events(prof.events()), path, steps, sizes[wait + warmup:])


def plot_timeline(result: StepProfile | Sequence[PhaseEvent], ax=None):
    """One row per step, one coloured bar per phase, time in ms on the x axis. Returns the Axes."""
    import matplotlib.pyplot as plt

    events = result.events if isinstance(result, StepProfile) else list(result)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * max(1, len({e.step for e in events}))))
    colors = dict(zip(PHASES, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for phase in PHASES:
        mine = [e for e in events if e.phase == phase]
        for i, e in enumerate(mine):
            ax.barh(e.step, e.ms, left=e.start_ms, height=0.6, color=colors[phase], label=phase if i == 0 else None)
    steps = sorted({e.step for e in events})
    ax.set_yticks(steps, [f"step {s + 1}" for s in steps])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the first profiled step began")
    ax.set_title("one training step after another, split into phases")
    ax.legend(ncol=len(PHASES), fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.3))
    return ax
