"""What one layout of ``gpulab.plan`` costs a rank: model FLOPs, exposed communication and bytes held.

Conventions (one for every link use): ``cluster.bandwidth`` is one link's bandwidth per direction, the bus
bandwidth of nccl-tests (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md), as in
:mod:`gpulab.distributed.cost`. A ring collective of ``n`` bytes (all_gather: its output, reduce_scatter: its
input) over ``r`` ranks takes ``steps x latency + bus_factor x n / bandwidth``; a pipeline's point-to-point
send takes ``latency + n / bandwidth`` (nccl-tests' sendrecv: busbw = algbw).

How each layout runs, as costed here:

- **DDP** all-reduces the gradients once per step (``no_sync`` while accumulating, torch.distributed.pipelining's
  last backward under a pipeline) and keeps its gradient buckets, a second copy of the gradients:
  ``DistributedDataParallel(gradient_as_bucket_view=False)``, torch's default. ``True`` saves that copy.
- **FSDP without a pipeline**: FSDP2's defaults for every micro-batch: the layer's parameters all-gathered for
  forward, again for backward (``reshard_after_forward=True``), the gradients reduce-scattered; memory stays
  sharded (the peak of :mod:`gpulab.fsdp_memory`).
- **FSDP with a pipeline**: torchtitan's way (``apply_fsdp`` sets ``reshard_after_forward=False`` when the
  pipeline is on, "to avoid per-microbatch all-gathers") together with torch.distributed.pipelining, whose
  ``PipelineStage`` runs each micro-batch's backward with ``set_reshard_after_backward(False)`` and
  ``set_requires_gradient_sync(False)``, then once after the last one (``perform_reduce_grad``) reshards and
  reduce-scatters. So each stage all-gathers its parameters once and reduce-scatters once per step, and
  meanwhile holds the stage's unsharded parameters (compute dtype) and unsharded accumulated gradients (reduce
  dtype) on top of its shards.
- **Tensor parallelism** (Megatron): the block's all-reduces of each micro-batch's activations; with sequence
  parallelism each becomes a reduce-scatter and an all-gather, and backward gathers the inputs of the
  column-split matrices again, which sequence parallelism does not keep (Korthikanti et al. 2022, section 4.2).
"""

from __future__ import annotations

from gpulab.distributed.cost import bus_factor, ring_allreduce_seconds
from gpulab.estimate import PRECISIONS, estimate
from gpulab.plan_layouts import BLOCKS, Layout

#: Attention's FLOPs per token per layer, forward and backward, in units of sequence x hidden: ``Q K^T`` and
#: ``softmax x V`` are 2 s h each forward, backward twice that (PaLM, Chowdhery et al. 2022, appendix B: model
#: FLOPs ``6 N + 12 L H Q T``; the ``s / 6h`` term of Narayanan et al. 2021, eq. 3). A causal mask halves the work of a
#: kernel that skips the masked half (flash attention does); PaLM's count does not halve it.
ATTENTION_FLOPS = 12


def model_flops(model, layout: Layout, tokens: int) -> float:
    """One rank's FLOPs per step: 6 per parameter per token (2 forward, 4 backward) plus attention's."""
    params = model.parameters // (layout.tp * layout.pp)
    flops = 6.0 * params * tokens
    if BLOCKS[model.block].attention:
        per_token = ATTENTION_FLOPS * model.sequence * model.hidden / layout.tp * (0.5 if model.causal else 1.0)
        flops += per_token * (model.layers // layout.pp) * tokens
    return flops


def ring_seconds(collective: str, nbytes: float, ranks: int, cluster) -> float:
    """One ring collective over ``ranks``: ``(n - 1)`` latencies (``2 (n - 1)`` for all-reduce) + bytes on a link."""
    if ranks == 1 or nbytes == 0:
        return 0.0
    if collective == "all_reduce":
        return ring_allreduce_seconds(nbytes, ranks, cluster.latency, 1 / cluster.bandwidth)
    return (ranks - 1) * cluster.latency + bus_factor(collective, ranks) * nbytes / cluster.bandwidth


def send_seconds(nbytes: float, cluster) -> float:
    """One point-to-point send of ``nbytes`` between neighbouring pipeline stages."""
    return cluster.latency + nbytes / cluster.bandwidth


def activation_bytes(model, layout: Layout, per_micro: int) -> int:
    """Bytes the first stage saves for backward: the micro-batches in flight x the stage's layers."""
    block = BLOCKS[model.block]
    per_token = block.bytes_per_token(model.hidden, layout.tp, model.activation_itemsize, layout.sequence_parallel)
    return round(layout.in_flight * per_micro * (model.layers // layout.pp) * per_token)


def communication_seconds(model, cluster, layout: Layout, per_micro: int) -> float:
    """Every collective and send of one step on one rank, none hidden behind compute (see the module docstring)."""
    dp, tp, pp, m = layout.dp, layout.tp, layout.pp, layout.micro_batches
    kind, block = PRECISIONS[model.precision], BLOCKS[model.block]
    params, layers = model.parameters // (tp * pp), model.layers // pp
    grad_bytes, weight_bytes = params * kind.grads.itemsize / layers, params * kind.gather.itemsize / layers
    comm = 0.0
    if dp > 1 and layout.fsdp:
        gathers, rounds = (1, 1) if pp > 1 else (2, m)
        comm += rounds * layers * (gathers * ring_seconds("all_gather", weight_bytes, dp, cluster)
                                   + ring_seconds("reduce_scatter", grad_bytes, dp, cluster))
    elif dp > 1:
        comm += layers * ring_seconds("all_reduce", grad_bytes, dp, cluster)
    boundary = per_micro * model.hidden * model.activation_itemsize  # one micro-batch's activations at a block's edge
    if layout.sequence_parallel:
        gather = ring_seconds("all_gather", boundary, tp, cluster)
        per_layer = (block.tp_allreduces * (gather + ring_seconds("reduce_scatter", boundary, tp, cluster))
                     + block.tp_allreduces // 2 * gather)  # the inputs of the column-split matrices, again
    else:
        per_layer = block.tp_allreduces * ring_seconds("all_reduce", boundary, tp, cluster)
    comm += m * layers * per_layer
    if pp > 1:  # activations forward, gradients back; sequence parallelism sends each rank's 1 / tp
        comm += 2 * m * send_seconds(boundary / tp if layout.sequence_parallel else boundary, cluster)
    return comm


def memory_bytes(model, layout: Layout, per_micro: int) -> tuple[int, int, int]:
    """(state bytes without activations, bytes held: state + activations, the peak during a step) on one rank.

    Held: parameters, gradients and optimizer state from :func:`gpulab.estimate.estimate` (``zero3`` over ``dp``
    with FSDP) and the activations in flight. Peak: held plus DDP's gradient buckets, FSDP's gathered units
    (:mod:`gpulab.fsdp_memory`), or under a pipeline the stage's unsharded parameters and gradients.
    """
    kind = PRECISIONS[model.precision]
    params, layers = model.parameters // (layout.tp * layout.pp), model.layers // layout.pp
    est = estimate(params, model.precision, model.optimizer, "zero3" if layout.fsdp else "none", layout.dp,
                   activations=activation_bytes(model, layout, per_micro), units=layers if layout.fsdp else None)
    state = est.total - est.components["activations"]
    if layout.fsdp and layout.pp > 1:
        peak = est.total + params * (kind.gather.itemsize + kind.grads.itemsize)
    elif layout.fsdp:
        peak = max(est.total, est.peak.total)
    elif layout.dp > 1:
        peak = est.total + params * kind.grads.itemsize  # DDP's buckets
    else:
        peak = est.total
    return state, est.total, peak
