"""Notebook 08: FSDP2's all-gathers and reduce-scatters in one step, read from a run's own schedule.

:func:`fsdp_states` turns :func:`gpulab.distributed.fsdp.driver.schedule` (the collectives of one profiled step, in
order) into what every unit holds after each collective; :func:`fsdp_step` draws one of those moments (a
slider steps through them: :func:`fsdp_slider`) and :func:`fsdp_grid` all of them in one picture.
"""

from __future__ import annotations

from typing import Sequence

from gpulab.figures import COLORS, FONT, box, canvas, label, rank_color

#: What a unit did at a step, in words (long: one step's picture; short: the grid of all steps).
ACTIONS = {"free-forward": ("whole weights freed after its forward", "free"),
           "gather-forward": ("all-gathered: runs its forward", "gather"),
           "gather-backward": ("all-gathered again: runs its backward", "gather"),
           "start-backward": ("runs its backward", "run"),
           "prefetch": ("all-gathered early for backward (prefetch)", "prefetch"),
           "free-rs": ("done: whole weights freed, gradients reduce-scattered", "free + RS")}
WEIGHT_STATES = ("shard", "gathered", "prefetched")


def fsdp_states(steps: Sequence[dict]) -> list[dict]:
    """After each collective of ``steps`` (``op``, ``unit``, ``phase``), what each unit holds and did.

    Each entry is the step plus ``weights`` (unit -> ``shard``, ``gathered`` or ``prefetched``), ``grads``
    (unit -> ``none`` or ``shard``: its slice of the reduce-scattered average), ``actions`` (unit -> codes
    of :data:`ACTIONS`) and ``running`` (the unit computing after the step, or None). Read from the order alone: a unit that backward gathers again was freed after its
    forward; a backward all-gather issued while another unit's backward is still waiting for its
    reduce-scatter is a prefetch; a unit's reduce-scatter ends its backward, and its whole weights are freed.
    """
    units = list(dict.fromkeys(s["unit"] for s in steps))
    gathered_again = {s["unit"] for s in steps if s["phase"] == "backward" and s["op"] == "all-gather"}
    weights, grads = dict.fromkeys(units, "shard"), dict.fromkeys(units, "none")
    in_forward = running = waiting = None
    out = []
    for s in steps:
        op, unit, phase = s["op"], s["unit"], s["phase"]
        if (op, phase) not in {("all-gather", "forward"), ("all-gather", "backward"), ("reduce-scatter", "backward")}:
            raise ValueError(f"unexpected step {s!r}: forward only all-gathers, backward all-gathers and reduce-scatters")
        actions: dict[str, list[str]] = {}
        if in_forward is not None and in_forward in gathered_again:  # its forward is over: FSDP2 resharded it
            weights[in_forward] = "shard"
            actions.setdefault(in_forward, []).append("free-forward")
        in_forward = None
        if phase == "forward":
            weights[unit], in_forward = "gathered", unit
            actions.setdefault(unit, []).append("gather-forward")
        else:
            if running is None and waiting is not None:  # the prefetched unit's backward has begun
                running, waiting = waiting, None
                weights[running] = "gathered"
                actions.setdefault(running, []).append("start-backward")
            if op == "all-gather" and running is None:
                weights[unit], running = "gathered", unit
                actions.setdefault(unit, []).append("gather-backward")
            elif op == "all-gather":
                weights[unit], waiting = "prefetched", unit
                actions.setdefault(unit, []).append("prefetch")
            else:
                weights[unit], grads[unit] = "shard", "shard"
                actions.setdefault(unit, []).append("free-rs")
                running = None if running == unit else running
        out.append({**s, "weights": dict(weights), "grads": dict(grads), "actions": actions,
                    "running": in_forward if phase == "forward" else running})
    return out


def _segments(ax, x: float, y: float, w: float, h: float, ranks: int, filled: Sequence[bool], colors: Sequence[str],
              hatch: str | None = None) -> None:
    """A bar of ``ranks`` slices, one per rank's rows: slice j filled in ``colors[j]`` when ``filled[j]``."""
    from matplotlib.patches import Rectangle

    for j in range(ranks):
        sx = x + j * w / ranks
        if filled[j]:
            ax.add_patch(Rectangle((sx, y), w / ranks, h, facecolor=colors[j], edgecolor="white", hatch=hatch))
        ax.add_patch(Rectangle((sx, y), w / ranks, h, facecolor="none", edgecolor=COLORS["text"], linewidth=0.8,
                               linestyle="-" if filled[j] else ":"))


def fsdp_step(states: Sequence[dict], index: int, ranks: int):
    """Step ``index`` (from 0) of :func:`fsdp_states`: each rank's weights and gradient slices, per unit."""
    if not 0 <= index < len(states) or ranks < 1:
        raise ValueError(f"index={index} must be in 0..{len(states) - 1} and ranks={ranks} at least 1")
    s = states[index]
    units = list(s["weights"])
    rank_w = 3.4
    width = 1.6 + ranks * rank_w + 4.4
    height = 2.2 + 0.75 * len(units)
    fig, ax = canvas(width, height, f"Step {index + 1} of {len(states)} ({s['phase']}): {s['op']} of {s['unit']}")
    top = height - 0.5
    for r in range(ranks):
        x = 1.6 + r * rank_w
        label(ax, x + 1.0, top, f"rank {r}: weights", weight="bold", fontsize=FONT - 1)
        label(ax, x + 2.55, top, "gradients", weight="bold", fontsize=FONT - 1)
    label(ax, 1.6 + ranks * rank_w + 0.1, top, "what happened at this step", ha="left", weight="bold",
          fontsize=FONT - 1)
    owners = [rank_color(j) for j in range(ranks)]
    for i, unit in enumerate(units):
        y = top - 0.75 * (i + 1)
        box(ax, 0.1, y - 0.05, 1.35, 0.5, unit, color=COLORS["light"],
            edge=COLORS["grad"] if unit == s["unit"] else COLORS["text"])
        whole = s["weights"][unit] != "shard"
        for r in range(ranks):
            x = 1.6 + r * rank_w
            _segments(ax, x, y, 2.0, 0.4, ranks, [whole or j == r for j in range(ranks)], owners,
                      hatch="//" if s["weights"][unit] == "prefetched" else None)
            _segments(ax, x + 2.15, y, 0.8, 0.4, ranks, [s["grads"][unit] == "shard" and j == r for j in range(ranks)],
                      [COLORS["grad"]] * ranks)
        said = "; ".join(ACTIONS[a][0] for a in s["actions"].get(unit, []))
        if not said and unit == s["running"]:
            said = f"still runs its {s['phase']}"
        label(ax, 1.6 + ranks * rank_w + 0.1, y + 0.2, said or "-", ha="left", fontsize=FONT - 1)
    step_w = min(0.9, (width - 1.8) / len(states))
    for k, other in enumerate(states):  # the whole step as a strip: where this moment is
        short = "AG" if other["op"] == "all-gather" else "RS"
        box(ax, 1.6 + k * step_w, 0.45, step_w - 0.1, 0.45, f"{k + 1} {short}\n{other['unit']}", fontsize=FONT - 4,
            color=COLORS["grad"] if k == index else COLORS["light"], edge=COLORS["idle"])
    for phase in ("forward", "backward"):
        at = [k for k, other in enumerate(states) if other["phase"] == phase]
        if at:
            label(ax, 1.6 + (at[0] + at[-1] + 1) * step_w / 2, 1.05, phase, fontsize=FONT - 2)
    label(ax, 0.1, 0.67, "the step:", ha="left", fontsize=FONT - 1)
    label(ax, 0.1, 0.15, "each bar: the unit's rows, one slice per rank (dotted: not held here; hatched: gathered "
          "early; slices drawn equal). AG all-gather, RS reduce-scatter", ha="left", fontsize=FONT - 2)
    return fig


def fsdp_grid(states: Sequence[dict]):
    """Every step of :func:`fsdp_states` in one picture: units down, collectives across, each unit's state."""
    units = list(states[0]["weights"]) if states else []
    if not units:
        raise ValueError("no steps to draw: the schedule is empty")
    width, height = 1.7 + 1.15 * len(states), 2.0 + 0.6 * len(units)
    fig, ax = canvas(width, height, "FSDP2 in one training step of this run: each unit after each collective")
    fill = {"shard": "white", "gathered": COLORS["gpu"], "prefetched": "#a6d8a6"}
    for k, s in enumerate(states):
        x = 1.6 + 1.15 * k
        short = "all-gather" if s["op"] == "all-gather" else "reduce-\nscatter"
        label(ax, x + 0.5, height - 0.55, f"{k + 1}. {short}\n{s['phase']}", fontsize=FONT - 3)
        for i, unit in enumerate(units):
            y = height - 1.35 - 0.6 * i
            words = ", ".join(ACTIONS[a][1] for a in s["actions"].get(unit, []) if a != "start-backward")
            cell = box(ax, x, y, 1.05, 0.5, words, color=fill[s["weights"][unit]], rounded=False, fontsize=FONT - 3,
                       edge=COLORS["grad"] if unit == s["unit"] else COLORS["idle"])
            if s["weights"][unit] == "prefetched":
                cell.set_hatch("//")
            if s["grads"][unit] == "shard":
                box(ax, x + 0.88, y + 0.33, 0.14, 0.14, color=COLORS["grad"], edge=COLORS["grad"], rounded=False)
    for i, unit in enumerate(units):
        label(ax, 0.1, height - 1.1 - 0.6 * i, unit, ha="left", weight="bold")
    for n, (color, what) in enumerate(((fill["gathered"], "whole weights"), (fill["prefetched"], "whole, gathered early"),
                                       ("white", "its shard only"), (COLORS["grad"], "gradient shard kept"))):
        key = box(ax, 1.6 + 2.6 * n, 0.45, 0.3, 0.25, color=color, edge=COLORS["text"], rounded=False)
        key.set_hatch("//" if n == 1 else None)
        label(ax, 2.0 + 2.6 * n, 0.57, what, ha="left", fontsize=FONT - 2)
    label(ax, 1.6, 0.15, "red frame: the unit that collective serves. RS: reduce-scatter", ha="left",
          fontsize=FONT - 2)
    return fig


def fsdp_slider(states: Sequence[dict], ranks: int):
    """A slider over the steps of :func:`fsdp_states`, drawing :func:`fsdp_step` (needs ipywidgets)."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    slider = widgets.IntSlider(value=1, min=1, max=len(states), description="step")

    def draw(step: int) -> None:
        fsdp_step(states, step - 1, ranks)
        plt.show()

    return widgets.VBox([slider, widgets.interactive_output(draw, {"step": slider})])
