"""Run notebook 12's tensor-parallel rank program through torchrun and read what every rank wrote.

    from gpulab.distributed.tensor_parallel.driver import run_tensor_parallel
    result = run_tensor_parallel(2)           # one launch, 2 gloo ranks, every part
    result.megatron[1]["up_weight"]           # the rows of the first layer that rank 1 holds
    equality_rows(result)                     # each plan against one process: largest differences
    count_rows(result)                        # collectives counted by CommDebugMode next to the expected ones
    traffic_rows(result)                      # bytes and seconds per step, predicted and measured
    saved_rows(result)                        # bytes saved for backward, by module: one process, tp, sp
    saved_formula_rows(result)                # those bytes, each rank, next to each implementation's formula

The predictions are built from the rules of ``gpulab.tp_model.expected_collectives`` and the alpha + beta fit
of ``gpulab.comm_cost``, never from the trace they are compared with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from gpulab.distributed.tensor_parallel.worker import PARTS
from gpulab.tp_model import expected_collectives, saved_bytes_per_token
from gpulab.validate import positive_int


@dataclass
class TPResult:
    """One launch: every rank's report, the output lines, the seconds it took."""

    ranks: int
    per_rank: list[dict]
    lines: list[str]
    seconds: float

    def _part(self, name: str) -> list:
        if name not in self.per_rank[0]:
            raise ValueError(f"this launch ran no {name!r} part: launch with parts including {name!r}")
        return [r[name] for r in self.per_rank]

    @property
    def megatron(self) -> list[dict]:
        """Each rank's hand-split MLP: its shards, hidden units, partial and summed outputs."""
        return self._part("megatron")

    @property
    def block(self) -> list[dict]:
        """Rank 0's runs of the tiny block (differences are the largest over every rank)."""
        return self._part("block")[0]

    @property
    def traffic(self) -> dict:
        """Rank 0's sweep and profiled plans."""
        return self._part("traffic")[0]

    @property
    def vocab(self) -> list[list[dict]]:
        """Each rank's output-layer runs, one per vocabulary size."""
        return self._part("vocab")


def run_tensor_parallel(nproc: int = 2, parts: Sequence[str] = PARTS, *, steps: int = 3, vocab: int = 11,
                        repeats: int = 50, timeout: float = 180.0,
                        on_line: Callable[[str], None] | None = None) -> TPResult:
    """Launch ``gpulab.distributed.tensor_parallel.worker`` on ``nproc`` gloo ranks (one torchrun) and read it."""
    from gpulab.distributed.launch.collect import run_ranks

    nproc = positive_int(nproc, "nproc")
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise ValueError(f"parts={list(parts)!r}: use one or more of {', '.join(PARTS)}")
    args = ["--parts", ",".join(parts), "--steps", str(positive_int(steps, "steps")),
            "--vocab", str(positive_int(vocab, "vocab")), "--repeats", str(positive_int(repeats, "repeats"))]
    with run_ranks("gpulab.distributed.tensor_parallel.worker", args, nproc=nproc, timeout=timeout,
                   on_line=on_line) as ranks:
        per_rank = ranks.per_rank()
    return TPResult(nproc, per_rank, ranks.result.lines, ranks.result.seconds)


def equality_rows(result: TPResult) -> list[dict]:
    """Each run of the block against one process: plan, dtype, largest weight and loss differences.

    The run with ``control`` set forgets to weight each rank's loss by its share of the sequence (it must differ).
    """
    return [{"plan": r["plan"], "dtype": r["dtype"], "control": "" if r["weighted"] else "loss not weighted",
             "max_weight_difference": r["max_weight_difference"], "max_loss_difference": r["max_loss_difference"]}
            for r in result.block]


def count_rows(result: TPResult) -> list[dict]:
    """For each float32 plan and phase of the first step: the collectives counted and those expected."""
    rows = []
    for run in result.block:
        if run["dtype"] != "float32" or not run["weighted"]:
            continue
        expected = expected_collectives(run["plan"])
        for phase in ("forward", "backward", "optimizer"):
            counted = run["counts"].get(phase, {})
            rows.append({"plan": run["plan"], "phase": phase, "counted": _text(counted),
                         "expected": _text(expected[phase]), "same": counted == expected[phase]})
    return rows


def _text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {op}" for op, n in sorted(counts.items())) or "none"


def predicted_calls(plan: str, activation_bytes: int, norm_bytes: int) -> list[tuple[str, int]]:
    """Every collective of one step of the block under ``plan``, with its nccl-tests size, from the rules alone.

    Activations (``activation_bytes``: the whole batch's) move in every forward and backward collective; under
    ``sp`` the optimizer all-reduces each norm parameter's gradient (``norm_bytes`` each).
    """
    calls = []
    for phase, ops in expected_collectives(plan).items():
        size = norm_bytes if phase == "optimizer" else activation_bytes
        calls += [(op, size) for op, n in sorted(ops.items()) for _ in range(n)]
    return calls


def sweep_spread(result: TPResult) -> list[dict]:
    """Each size of the all-reduce sweep: the fastest, median and slowest call (slowest rank per repeat)."""
    import statistics

    per_rank = [r["traffic"]["sweep"] for r in result.per_rank]
    rows = []
    for at, first in enumerate(per_rank[0]):
        times = [max(rank[at]["seconds"][i] for rank in per_rank) for i in range(len(first["seconds"]))]
        rows.append({"bytes": first["bytes"], "fastest_s": min(times), "median_s": statistics.median(times),
                     "slowest_s": max(times)})
    return rows


def traffic_rows(result: TPResult) -> list[dict]:
    """Per plan: calls per step and the sum of their nccl-tests sizes, counted in the trace and predicted; bytes
    each rank would send with ring collectives (``ring_bytes_sent`` of each call); and for ``tp`` the all-reduce
    time per step predicted by the sweep's alpha + beta fits (through each size's median call, as notebook 09
    does, and through each size's fastest call) next to the same calls alone and inside the steps."""
    from gpulab.distributed.collectives.driver import after_last_arrival, fit_sweep, sweep_rows
    from gpulab.comm_cost import fit_alpha_beta, ring_bytes_sent

    n, per_rank = result.ranks, [r["traffic"] for r in result.per_rank]
    t = per_rank[0]
    swept = sweep_rows([r["sweep"] for r in per_rank], n)
    fit = fit_sweep(swept, "all_reduce")
    alone = {r["bytes"]: r["seconds"] for r in swept}
    spread = sweep_spread(result)
    fastest = {r["bytes"]: r["fastest_s"] for r in spread}
    fit_fastest = fit_alpha_beta(list(fastest), list(fastest.values()))
    rows = []
    for i, run in enumerate(t["plans"]):
        steps = run["steps"]
        counted = [tuple(call) for call in run["calls"]]
        predicted = predicted_calls(run["plan"], t["activation_bytes"], t["block"]["hidden"] * 4)
        row = {"plan": run["plan"], "calls_per_step": len(counted) / steps, "calls_predicted": len(predicted),
               "bytes_per_step": sum(b for _, b in counted) / steps, "bytes_predicted": sum(b for _, b in predicted),
               "sent_per_rank": sum(ring_bytes_sent(op, b, n) for op, b in counted) / steps,
               "sent_predicted": sum(ring_bytes_sent(op, b, n) for op, b in predicted),
               "step_ms": run["step_s"] * 1e3, "rank_sees_ms": run["rank_sees_s_per_step"] * 1e3}
        if run["plan"] == "tp":
            calls = [r["traffic"]["plans"][i]["calls_us"] for r in result.per_rank]
            row["predicted_ms"] = sum(fit.seconds(b) for _, b in predicted) * 1e3
            swept_all = all(b in alone for _, b in predicted)
            row["alone_ms"] = sum(alone[b] for _, b in predicted) * 1e3 if swept_all else None
            row["fastest_predicted_ms"] = sum(fit_fastest.seconds(b) for _, b in predicted) * 1e3
            row["fastest_alone_ms"] = sum(fastest[b] for _, b in predicted) * 1e3 if swept_all else None
            row["after_arrival_ms"] = (sum(after_last_arrival(calls)) / steps * 1e3) if None not in calls else None
        rows.append(row)
    return rows


def shard_rows(result: TPResult, plan: str = "tp") -> list[dict]:
    """What each rank holds of every parameter under ``plan``: full shape and this rank's local shape."""
    run = next((r for r in result.block if r["plan"] == plan and r["dtype"] == "float32"), None)
    if run is None:
        trained = sorted({r["plan"] for r in result.block})
        raise ValueError(f"plan={plan!r}: this launch trained the plans {', '.join(trained)}")
    def text(shape: list[int]) -> str:
        return "x".join(map(str, shape))

    return [{"parameter": name, "full": text(shape), "each rank": text(run["local_shapes"][name]),
             "split": "no" if shape == run["local_shapes"][name] else "yes"}
            for name, shape in run["full_shapes"].items()]


def _saved_runs(result: TPResult, rank: int = 0) -> dict[str, dict]:
    """Rank ``rank``'s float32 runs of the block, by plan (the weighted ones: no control)."""
    return {r["plan"]: r for r in result.per_rank[rank]["block"] if r["dtype"] == "float32" and r["weighted"]}


def saved_rows(result: TPResult) -> list[dict]:
    """Bytes one forward pass of the block saved for backward on rank 0, by the module that saved them: in one
    process and under the ``tp`` and ``sp`` plans (``gpulab.distributed.tensor_parallel.parts.saved_bytes``)."""
    runs = _saved_runs(result)
    columns = {"one process": runs["tp"]["saved_bytes_one_process"], "tp": runs["tp"]["saved_bytes"],
               "sp": runs["sp"]["saved_bytes"]}
    modules = list(dict.fromkeys(m for saved in columns.values() for m in saved))
    rows = [{"module": m, **{name: saved.get(m, 0) for name, saved in columns.items()}} for m in modules]
    return rows + [{"module": "total", **{name: sum(saved.values()) for name, saved in columns.items()}}]


#: Each implementation the formula knows: (label, what the launch ran for it, its ``sequence_parallel``).
IMPLEMENTATIONS = (("one process", "one process", "none"), ("TP (plan tp)", "tp", "none"),
                   ("torch's SP (plan sp)", "sp", "torch"), ("Megatron-LM's SP (not run)", None, "megatron"))


def _counted(result: TPResult, ran: str | None) -> list[int]:
    """Bytes saved per block on each rank that ran ``ran`` (a plan, or rank 0's unsplit copy); none if not run."""
    if ran is None:
        return []
    if ran == "one process":
        return [sum(_saved_runs(result)["tp"]["saved_bytes_one_process"].values())]
    return [sum(_saved_runs(result, rank)[ran]["saved_bytes"].values()) for rank in range(result.ranks)]


def saved_formula_rows(result: TPResult) -> list[dict]:
    """Bytes saved for backward per block: ``tp_model.saved_bytes_per_token`` x the batch's tokens, next to the
    bytes each rank measured (``measured``: one number per rank; Megatron-LM's form is not run here)."""
    run = _saved_runs(result)["tp"]
    rows = []
    for label, ran, kind in IMPLEMENTATIONS:
        ranks = 1 if ran == "one process" else result.ranks
        formula = saved_bytes_per_token(**run["block"], tp=ranks, sequence_parallel=kind) * run["tokens"]
        rows.append({"implementation": label, "ranks": ranks, "formula": formula, "measured": _counted(result, ran)})
    return rows
