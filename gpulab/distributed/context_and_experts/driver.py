"""Notebook 15's one launch and what it measured: ring attention, torch's context parallelism, experts on ranks.

    lesson = run_lesson()                 # one torchrun launch of 4 CPU ranks (the rank program: worker)
    ring_rows(lesson)                     # each ring against one process: largest differences, forward and backward
    work_rows(lesson)                     # score entries each rank computed, per step, plain and zigzag splits
    message_rows(lesson)                  # messages and bytes a rank sent, counted by the profiler and predicted
    memory_rows(lesson)                   # bytes saved for backward as the sequence grows
    cp_rows(lesson)                       # torch's context_parallel: what ran, what it refused and why
    moe_rows(lesson)                      # expert parallelism against one process, with the controls
    routing(lesson), all_to_all_rows(lesson)   # who sent how many tokens to whom; the all-to-alls and their sizes

Predictions (:func:`ring_traffic`) come from the algorithm's rules, never from the trace they are compared with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from gpulab.distributed.context_and_experts.worker import PARTS, RANKS

FLOAT64 = 8  # bytes a number: the ring's equality runs and the experts compute in float64


@dataclass
class Lesson:
    """Every rank's report, the launch's output lines, its seconds and the launcher's notes (4 ranks, 2 cores)."""

    per_rank: list[dict]
    lines: list[str]
    seconds: float
    notes: list[str]

    def part(self, name: str, rank: int = 0) -> dict:
        """Rank ``rank``'s report of part ``name``; a one-line error when the launch did not run it."""
        if name not in self.per_rank[rank]:
            raise ValueError(f"this launch ran no {name!r} part: run_lesson(parts=(..., {name!r}, ...))")
        return self.per_rank[rank][name]


def run_lesson(parts: Sequence[str] = PARTS, timeout: float = 180.0,
               on_line: Callable[[str], None] | None = None) -> Lesson:
    """Launch the rank program on 4 gloo ranks once for ``parts``; stopped after ``timeout`` s."""
    from gpulab.distributed.launch.collect import run_ranks

    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise ValueError(f"parts={list(parts)!r}: use one or more of {', '.join(PARTS)}")
    args = ["--parts", ",".join(parts)]
    with run_ranks("gpulab.distributed.context_and_experts.worker", args, nproc=RANKS, timeout=timeout,
                   keep_warnings=True, on_line=on_line) as ranks:  # keeps "4 ranks on 2 CPU cores" as a note
        per_rank = ranks.per_rank()
    return Lesson(per_rank, ranks.result.lines, ranks.result.seconds, sorted(ranks.notes))


# ---- ring attention -----------------------------------------------------------------------------------------


def ring_rows(lesson: Lesson) -> list[dict]:
    """Each ring (2 ranks: both pairs; 4 ranks), then the controls: the largest differences from one process."""
    first, second = lesson.part("ring", 0), lesson.part("ring", 2)
    rows = []
    for a, b in zip(first["runs"], second["runs"]):
        rows.append({"ranks": a["ranks"], "split": a["layout"], "control": "",
                     "forward": max(a["forward_difference"], b["forward_difference"]),
                     "backward": max(a["backward_difference"], b["backward_difference"])})
    for name, run in first["controls"].items():
        rows.append({"ranks": run["ranks"], "split": run["layout"], "control": name,
                     "forward": run["forward_difference"], "backward": run["backward_difference"]})
    return rows


def work_rows(lesson: Lesson, ranks: int = RANKS) -> list[dict]:
    """Score entries each rank computed in each forward step of the ``ranks``-rank rings, and in all."""
    from gpulab.distributed.context_and_experts.ring import work_formula

    rows = []
    for rank in range(ranks if ranks == RANKS else 2):
        for run in lesson.part("ring", rank)["runs"]:
            if run["ranks"] == ranks:
                steps = run["work"]["forward"]
                rows.append({"split": run["layout"], "rank": rank, "per step": steps, "total": sum(steps),
                             "formula": work_formula(run["layout"], lesson.part("ring")["profiled"]["shape"]["seq"],
                                                     ranks)[rank]})
    return sorted(rows, key=lambda r: (r["split"], r["rank"]))


def owners(ranks: int = RANKS) -> list[list[int]]:
    """Whose key/value block each rank holds at each step of a ring: rank ``r`` at step ``s`` holds ``r - s``."""
    return [[(r - s) % ranks for s in range(ranks)] for r in range(ranks)]


def ring_traffic(ranks: int, block_bytes: int) -> dict[str, tuple[int, int]]:
    """Messages and bytes one rank sends in the ring's forward and backward, from the algorithm alone.

    ``block_bytes``: one of this rank's key or value blocks. Forward: ``n - 1`` messages, each a key and a value
    block. Backward: ``n - 1`` messages, each the blocks and their gradients, then one with the gradients alone.
    """
    return {"forward": (ranks - 1, (ranks - 1) * 2 * block_bytes),
            "backward": (ranks, (ranks - 1) * 4 * block_bytes + 2 * block_bytes)}


def message_rows(lesson: Lesson) -> list[dict]:
    """Per rank and phase of the 4-rank zigzag ring: messages and bytes the profiler counted, and the prediction."""
    rows = []
    for rank in range(RANKS):
        profiled = lesson.part("ring", rank)["profiled"]
        predicted = ring_traffic(RANKS, profiled["block_bytes"])
        for phase in ("forward", "backward"):
            rows.append({"rank": rank, "phase": phase, "messages": profiled[phase]["messages"],
                         "predicted messages": predicted[phase][0], "bytes": profiled[phase]["bytes"],
                         "predicted bytes": predicted[phase][1]})
    return rows


def memory_rows(lesson: Lesson) -> list[dict]:
    """Bytes one attention forward saved for backward, by sequence length: one process keeping its scores, one
    process with torch's fused kernel, and the largest over the ranks of a 4-rank zigzag ring."""
    per_rank = [lesson.part("ring", r)["memory"] for r in range(RANKS)]
    return [{"tokens": row["seq"], "one process, scores kept": row["scores_kept"],
             "one process, fused kernel": row["fused"],
             "ring, each rank": max(rank[i]["ring_rank"] for rank in per_rank)}
            for i, row in enumerate(per_rank[0])]


# ---- torch's context parallelism ----------------------------------------------------------------------------


def cp_rows(lesson: Lesson) -> list[dict]:
    """Each case torch's ``context_parallel`` ran: whether it ran, its collectives or its error, in its own words."""
    rows = []
    for case in lesson.part("torch_cp")["cases"]:
        if case["ok"]:
            said = (f"forward: {_text(case['forward'])}; backward: {_text(case['backward'])}")
        else:
            said = f"{case['error']}: {case['message']}"
        rows.append({"case": case["case"], "ran": case["ok"], "what happened": said})
    return rows


def _text(counts: dict[str, int]) -> str:
    names = {"all_gather_into_tensor": "all-gather", "reduce_scatter_tensor": "reduce-scatter"}
    return ", ".join(f"{n} {names.get(op, op)}" for op, n in sorted(counts.items())) or "none"


# ---- experts on ranks ---------------------------------------------------------------------------------------


def moe_rows(lesson: Lesson) -> list[dict]:
    """Each expert-parallel run and control: the largest difference from one process, over every rank."""
    moe = lesson.part("moe")
    rows = []
    for run in moe["runs"] + moe["controls"]:
        rows.append({"run": run["run"], "experts": run["experts"], "ranks holding them": run["ep"],
                     **{k: v for k, v in run["differences"].items()}})
    return rows


def routing(lesson: Lesson, run: str = "EP 4") -> dict:
    """The run's routing: pairs each rank sent to each rank (``sent[i][j]``: from ``i`` to ``j``) and pairs per
    expert over every rank's tokens."""
    runs = [next(r for r in lesson.part("moe", rank)["runs"] if r["run"] == run) for rank in range(RANKS)]
    per_expert = [sum(r["per_expert"][e] for r in runs) for e in range(len(runs[0]["per_expert"]))]
    return {"sent": [r["send"] for r in runs], "received": [r["receive"] for r in runs], "per_expert": per_expert,
            "tokens": RANKS * lesson.part("moe")["shape"]["tokens"], "top_k": lesson.part("moe")["shape"]["top_k"]}


#: What each all-to-all of one expert-parallel forward carries, in the order ``moe.expert_parallel`` calls them.
FORWARD_CALLS = ("pair counts", "expert ids", "tokens", "results")
BACKWARD_CALLS = ("gradients of the results", "gradients of the tokens")


def all_to_all_rows(lesson: Lesson, rank: int = 0) -> list[dict]:
    """The all-to-alls of one forward and backward on ``rank`` (4 ranks, 8 experts), from the profiler: what each
    carries and its input's shape, next to the rows predicted from the routing."""
    p = lesson.part("moe", rank)["profiled"]
    send = p["send"]
    received = next(r for r in lesson.part("moe", rank)["runs"] if r["run"] == "EP 4")["receive"]
    predicted = {"pair counts": RANKS, "expert ids": sum(send), "tokens": sum(send), "results": sum(received),
                 "gradients of the results": sum(send), "gradients of the tokens": sum(received)}
    rows = []
    for phase, names in (("forward", FORWARD_CALLS), ("backward", BACKWARD_CALLS)):
        for name, shape in zip(names, p[phase]):
            rows.append({"phase": phase, "carries": name, "input shape": "x".join(map(str, shape)),
                         "rows": shape[0], "predicted rows": predicted[name]})
    return rows
