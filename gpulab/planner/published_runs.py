"""What ``gpulab.planner.plan`` would pick for the large runs of ``gpulab.measured_elsewhere.RUNS``, beside what their papers chose.

    for run in published.RUNS:
        print(verdict(run))

:func:`model_of` and :func:`cluster_of` turn a run's published figures into the planner's inputs (bf16-mixed,
Adam; the links at their line rates, which no program reaches: an optimistic cluster). :func:`published_layout` is
the closest layout the planner can express (no context or expert parallelism: a mixture of experts keeps all its
experts on every data-parallel rank, sharded like dense weights). :func:`verdict` plans the run and says where
the published layout ranks, whether it fits, and the model-FLOPs utilisation its predicted step implies (an upper
bound: compute at 100% of the roofline and links at their line rates).
"""

from __future__ import annotations

from gpulab.planner.plan import GB, Cluster, Model, plan, predict
from gpulab.planner.layouts import Layout
from gpulab.measured_elsewhere import Run


def model_of(run: Run) -> Model:
    """The run's model as the planner sees it: a transformer in bf16-mixed with Adam."""
    active = None if run.active_parameters is None else int(run.active_parameters)
    return Model(int(run.parameters), run.layers, run.hidden, run.sequence, vocab=run.vocab, heads=run.heads,
                 active_parameters=active)


def cluster_of(run: Run) -> Cluster:
    """The run's GPUs: memory, dense 16-bit peak, memory bandwidth, NVLink inside a node, the network between."""
    nvlink, network = run.links
    return Cluster(run.gpus, run.memory_gb * GB, 5e-6, nvlink * GB, run.peak_tflops * 1e12,
                   run.memory_bandwidth_gbs * GB, gpus_per_node=run.gpus_per_node, inter_latency=10e-6,
                   inter_bandwidth=network * GB)


def published_layout(run: Run, recompute: str = "selective") -> Layout:
    """The paper's split as a planner layout: its TP (with sequence parallelism) and PP, context parallelism folded
    into data parallelism, its data parallelism (FSDP, ZeRO-1 or DDP), and the most micro-batches up to 4 x pp that
    divide each data-parallel rank's sequences, interleaved 1F1B with 2 stages a rank where the paper interleaves
    (and the micro-batches allow it), else 1F1B."""
    dp = run.gpus // (run.tp * run.pp)
    samples = run.batch // dp
    m = max(d for d in range(1, min(samples, 4 * run.pp) + 1) if samples % d == 0)
    interleave = run.schedule.startswith("interleaved") and m % run.pp == 0 and run.layers >= 2 * run.pp
    schedule = "Interleaved1F1B" if interleave else "1F1B" if m >= run.pp else "GPipe"
    return Layout(dp, run.tp, run.pp, fsdp=run.data_parallel == "FSDP", zero1=run.data_parallel == "ZeRO-1",
                  micro_batches=m, schedule=schedule, sequence_parallel=run.tp > 1,
                  stages_per_rank=2 if interleave else 1, recompute=recompute)


def verdict(run: Run) -> dict:
    """The planner's first pick, and the published layout with the least recomputation that fits: both predicted
    steps (seconds), whether the published one fits, and how many layouts that fit the planner ranks before it."""
    model, cluster = model_of(run), cluster_of(run)
    ranked = plan(model, cluster, run.batch)
    tried = [predict(model, cluster, run.batch, published_layout(run, r)) for r in ("none", "selective", "full")]
    theirs = next((p for p in tried if p.fits), tried[-1])
    return {"run": run.name, "planner pick": ranked[0].layout.name, "pick s": ranked[0].step,
            "pick tp": ranked[0].layout.tp, "published": theirs.layout.name, "published s": theirs.step,
            "published fits": theirs.fits, "ranked before": sum(p.fits and p.step < theirs.step for p in ranked),
            "fit": sum(p.fits for p in ranked), "published recompute": theirs.layout.recompute,
            "published MFU": model_flops(model, run.batch) / (theirs.step * run.gpus * cluster.peak_flops)}


def model_flops(model: Model, batch: int) -> float:
    """Model FLOPs of one step (nothing recomputed): 6 per activated parameter per token plus causal attention's
    ``6 s h`` per token per layer (PaLM's ``12 s h`` halved), the count model-FLOPs utilisation divides."""
    active = model.parameters if model.active_parameters is None else model.active_parameters
    tokens = batch * model.sequence
    return (6.0 * active + 6.0 * model.sequence * model.hidden * model.layers) * tokens
