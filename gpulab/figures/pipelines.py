"""Notebook 13: pipeline stages on ranks, GPipe and 1F1B timelines, the bubble, a 2-D mesh of data and tensor parallelism.

Schematics (:data:`STATIC`): the model cut into stages, the ideal GPipe and 1F1B timelines
(:func:`ideal_timeline`: forward 1 unit, backward 2, no communication), the 2-D mesh. From a run's data
(``gpulab.distributed.pipelines.driver``): :func:`timelines` (each rank's real forwards and backwards),
:func:`bubble_plot`, :func:`in_flight_plot`, :func:`ranking_plot`.
"""

from __future__ import annotations

from typing import Sequence

from matplotlib.ticker import FuncFormatter

from gpulab.figures import COLORS, arrow, box, canvas, label, rank_color

KIND_COLOR = {"F": COLORS["cpu"], "B": COLORS["grad"]}


def ideal_timeline(schedule: str, stages: int, micro_batches: int, forward: float = 1.0,
                   backward: float = 2.0) -> list[list[dict]]:
    """Per stage, its forwards and backwards with start and end times, when nothing but compute takes time.

    GPipe runs every forward, then every backward. 1F1B (as torch's ``Schedule1F1B``) first runs
    ``min(m, p - stage)`` forwards, then alternates a backward and a forward, then the remaining backwards.
    A forward waits for the previous stage's forward of its micro-batch, a backward for the next stage's backward.
    """
    if schedule not in ("GPipe", "1F1B"):
        raise ValueError(f"schedule {schedule!r} is not GPipe or 1F1B")
    p, m = stages, micro_batches
    orders = []
    for s in range(p):
        if schedule == "GPipe":
            ops = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
        else:
            warm = min(m, p - s)
            ops = [("F", i) for i in range(warm)]
            for i in range(m):
                ops.append(("B", i))
                if warm + i < m:
                    ops.append(("F", warm + i))
        orders.append(ops)
    done: dict[tuple[str, int, int], float] = {}
    clock, at, out = [0.0] * p, [0] * p, [[] for _ in range(p)]
    while any(at[s] < len(orders[s]) for s in range(p)):
        for s in range(p):
            while at[s] < len(orders[s]):
                kind, i = orders[s][at[s]]
                need = ("F", s - 1, i) if kind == "F" and s > 0 else ("B", s + 1, i) if kind == "B" and s < p - 1 else None
                if need is not None and need not in done:
                    break
                start = max(clock[s], done.get(need, 0.0))
                clock[s] = start + (forward if kind == "F" else backward)
                done[(kind, s, i)] = clock[s]
                out[s].append({"stage": s, "kind": kind, "micro_batch": i, "start_ms": start, "end_ms": clock[s]})
                at[s] += 1
    return out


def _draw_rows(ax, per_rank: Sequence[Sequence[dict]], several: bool = False) -> float:
    """Each rank's boxes on its own row (rank 0 on top); returns the end of the last box.

    ``several``: a rank runs two stages; the boxes of its later stage are lighter. Narrow boxes carry no number.
    """
    end = max(b["end_ms"] for rank in per_rank for b in rank)
    for r, boxes in enumerate(per_rank):
        y = len(per_rank) - 1 - r
        first = min(b["stage"] for b in boxes)
        box(ax, 0, y + 0.1, end, 0.8, color=COLORS["idle"], edge="none", rounded=False, alpha=0.5)
        for b in boxes:
            wide = b["end_ms"] - b["start_ms"] > end / 45
            box(ax, b["start_ms"], y + 0.1, b["end_ms"] - b["start_ms"], 0.8, str(b["micro_batch"]) if wide else "",
                color=KIND_COLOR[b["kind"]], rounded=False, fontsize=8, edge="white",
                alpha=0.55 if several and b["stage"] != first else 1.0, text_color="white")
    ax.set_yticks([len(per_rank) - 1 - r + 0.5 for r in range(len(per_rank))])
    ax.set_yticklabels([f"rank {r}" for r in range(len(per_rank))])
    ax.set_xlim(0, end * 1.01)
    ax.set_ylim(0, len(per_rank))
    return end


def _legend(ax) -> None:
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=KIND_COLOR["F"], label="forward of micro-batch n"),
                       Patch(color=KIND_COLOR["B"], label="backward of micro-batch n"),
                       Patch(color=COLORS["idle"], alpha=0.5, label="waiting")],
              loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, fontsize=8, frameon=False)


def ideal_schedules(stages: int = 4, micro_batches: int = 4):
    """GPipe above 1F1B, ideal timelines of ``stages`` stages and ``micro_batches`` micro-batches."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(9, 2.2 + 0.5 * stages), sharex=True)
    for ax, name in zip(axes, ("GPipe", "1F1B")):
        _draw_rows(ax, ideal_timeline(name, stages, micro_batches))
        ax.set_title(f"{name}: {stages} stages, {micro_batches} micro-batches", fontsize=10)
    axes[-1].set_xlabel("time (units: a forward takes 1, a backward 2; sending takes 0)")
    fig.suptitle("Ideal pipeline schedules: the same bubble, different work in flight", fontsize=12)
    _legend(axes[-1])
    return fig


def timelines(traces: dict[str, Sequence[Sequence[dict]]]):
    """Each traced schedule's real step, one panel each: every rank's forwards and backwards from the profiler."""
    import matplotlib.pyplot as plt

    if not traces:
        raise ValueError("no traces to draw: give {schedule: per-rank boxes}")
    fig, axes = plt.subplots(len(traces), 1, figsize=(9, 0.6 + 1.6 * len(traces)), squeeze=False)
    for ax, (name, per_rank) in zip(axes[:, 0], traces.items()):
        several = len({b["stage"] for b in per_rank[0]}) > 1
        _draw_rows(ax, per_rank, several)
        stages = 1 + max(b["stage"] for rank in per_rank for b in rank)
        ax.set_title(f"{name}, {stages} stages" + (" (lighter: each rank's second stage)" if several else ""),
                     fontsize=10)
    axes[-1, 0].set_xlabel("milliseconds since the first forward (this run, torch.profiler on every rank)")
    fig.suptitle("One training step on 2 CPU ranks, as each rank's profiler recorded it", fontsize=12)
    _legend(axes[-1, 0])
    fig.tight_layout()
    return fig


def bubble_plot(rows: Sequence[dict]):
    """Measured bubble (median of the steps, the middle half as a bar) and the replayed one, per schedule, against
    (p - 1) / (m + p - 1), over micro-batches."""
    fig, ax = canvas(7, 4, "The bubble: measured, replayed without messages, and the formula", axis=True)
    for i, name in enumerate(sorted({r["schedule"] for r in rows})):
        mine = [r for r in rows if r["schedule"] == name]
        ms = [r["micro-batches"] * (1.06 if i else 0.94) for r in mine]  # side by side
        med = [r["measured (median)"] for r in mine]
        ax.errorbar(ms, med, yerr=[[m - r["q25"] for m, r in zip(med, mine)], [r["q75"] - m for m, r in zip(med, mine)]],
                    fmt="o-", color=rank_color(i), capsize=3, label=f"{name}, measured (middle half of the steps)")
        ax.plot(ms, [r["replayed (median)"] for r in mine], ":", marker="s", color=rank_color(i), alpha=0.7,
                label=f"{name}, replayed without messages")
    formula = sorted({(r["micro-batches"], r["formula"]) for r in rows})
    ax.plot([m for m, _ in formula], [f for _, f in formula], "k--", label="(p - 1) / (m + p - 1)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batches m (p = 2 stages)")
    ax.set_ylabel("share of the step spent waiting")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    return fig


def in_flight_plot(rows: Sequence[dict]):
    """Peak live activations, in micro-batches, per rank: GPipe against 1F1B at each micro-batch count."""
    fig, ax = canvas(7, 3.6, "Activations alive at once, in micro-batches (2 stages)", axis=True)
    counts = sorted({r["micro-batches"] for r in rows if r["schedule"] == "1F1B"})
    width = 0.2
    for k, (name, rank) in enumerate([("GPipe", 0), ("GPipe", 1), ("1F1B", 0), ("1F1B", 1)]):
        values = [next(r["micro-batches in flight"] for r in rows if r["schedule"] == name and r["rank"] == rank
                       and r["micro-batches"] == m) for m in counts]
        ax.bar([i + (k - 1.5) * width for i in range(len(counts))], values, width, color=rank_color(rank),
               alpha=1.0 if name == "1F1B" else 0.45, label=f"{name}, rank {rank}")
    ax.set_xticks(range(len(counts)))
    ax.set_xticklabels([f"m = {m}" for m in counts])
    ax.set_ylabel("peak activations (micro-batches)")
    ax.legend(fontsize=8, ncol=2)
    return fig


def ranking_plot(calibration: Sequence[dict], validation: Sequence[dict]):
    """Measured against predicted step per layout (log-log): the calibration layouts, the validation layouts with
    their fastest and slowest steps, the line where they agree and the band within 1.5x."""
    fig, ax = canvas(7, 5, "gpulab plan against the measured steps on this machine", axis=True)
    values = [v for r in (*calibration, *validation) for v in (r["predicted ms"], r["measured ms"])]
    low, high = min(values) / 1.7, max(values) * 1.7
    ax.plot([low, high], [low, high], "k-", lw=1, label="measured = predicted")
    ax.fill_between([low, high], [low / 1.5, high / 1.5], [low * 1.5, high * 1.5], color=COLORS["idle"], alpha=0.3,
                    label="within 1.5x")
    ax.plot([r["predicted ms"] for r in calibration], [r["measured ms"] for r in calibration], "s",
            color=COLORS["memory"], label="calibration layouts (their shares fitted)")
    ax.errorbar([r["predicted ms"] for r in validation], [r["measured ms"] for r in validation],
                yerr=[[r["measured ms"] - r["fastest ms"] for r in validation],
                      [r["slowest ms"] - r["measured ms"] for r in validation]],
                fmt="o", color=COLORS["cpu"], capsize=3, label="validation layouts (fastest to slowest step)")
    for r in validation:
        ax.annotate(r["layout"], (r["predicted ms"], r["measured ms"]), fontsize=6, xytext=(4, -3),
                    textcoords="offset points")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("predicted ms per step")
    ax.set_ylabel("measured ms per step (median)")
    ax.legend(fontsize=7, loc="upper left")
    return fig


def pipeline_stages():
    """The model cut into two stages on two ranks; micro-batches' activations go forward, gradients come back."""
    fig, ax = canvas(9, 3.6, "Pipeline parallelism: each rank holds some layers (a stage)")
    label(ax, 1.0, 3.0, "batch, cut into\nmicro-batches", fontsize=9)
    for i in range(4):
        box(ax, 0.4 + i * 0.32, 1.5, 0.26, 0.9, str(i), color=COLORS["data"], fontsize=8)
    for r, x in enumerate((2.6, 5.9)):
        box(ax, x - 0.15, 0.55, 2.7, 2.6, "", color=COLORS["light"])
        label(ax, x + 1.2, 2.95, f"rank {r}: stage {r}", color=rank_color(r), weight="bold")
        for k in range(2):
            box(ax, x + 0.1 + k * 1.2, 1.3, 1.0, 1.2, f"block {2 * r + k}", color=rank_color(r), fontsize=9)
    arrow(ax, (1.75, 1.95), (2.45, 1.95), "")
    arrow(ax, (5.2, 2.2), (5.75, 2.2), "activations", offset=(0, 0.25))
    arrow(ax, (5.75, 1.55), (5.2, 1.55), "gradients", offset=(0, -0.45))
    label(ax, 4.5, 0.25, "each arrow carries one micro-batch at a time (a send and a receive)", fontsize=9)
    label(ax, 8.75, 1.95, "loss", fontsize=9)
    return fig


def mesh_2d():
    """Four ranks in a (dp=2, tp=2) mesh: TP's all-reduces along each row, FSDP's collectives down each column."""
    fig, ax = canvas(9, 4.4, "A 2-D mesh: tensor parallelism inside a row, FSDP down a column")
    mesh = [[0, 1], [2, 3]]
    for d, row in enumerate(mesh):
        for t, r in enumerate(row):
            x, y = 1.2 + t * 4.0, 2.5 - d * 2.0
            box(ax, x, y, 2.6, 1.2, f"rank {r}\ndata: half {d} of the batch\nweights: TP half {t}, FSDP-sharded",
                color=rank_color(r), fontsize=8)
        arrow(ax, (3.85, 3.1 - d * 2.0), (5.15, 3.1 - d * 2.0), "tp group:\nall-reduce\nactivations", both=True,
              offset=(0, 0.12))
    for t in range(2):
        arrow(ax, (2.5 + t * 4.0, 2.45), (2.5 + t * 4.0, 1.75), "", both=True)
        label(ax, 2.6 + t * 4.0 + (1.4 if t else -1.45), 2.1,
              "dp group: all-gather weights,\nreduce-scatter gradients", fontsize=8)
    label(ax, 4.5, 0.15, 'init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")): '
          "a row is a tp group, a column a dp group", fontsize=8)
    return fig


#: Schematics of this topic: name -> function returning a matplotlib figure (see gpulab.figures.catalog).
STATIC: dict = {"13-pipeline-stages": pipeline_stages, "13-ideal-schedules": ideal_schedules, "13-mesh-2d": mesh_2d}
