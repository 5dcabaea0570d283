"""What one layout of ``gpulab.planner.plan`` computes and holds on each pipeline rank: parameters, FLOPs, bytes.

- **Where the parameters sit**: each layer's share of the model (the embedding and output layer taken out) on
  its stage (:func:`gpulab.planner.layouts.rank_layers`), the embedding with the first stage and the output layer
  with the last, both split over tensor parallelism (Megatron's vocabulary-parallel layers).
- **FLOPs**: 6 per parameter per token (2 forward, 4 backward; a mixture of experts counts its activated
  parameters) plus attention's ``12 s h`` per token per layer (PaLM's count; a causal mask halves it). What
  backward recomputes adds its forward again: the attention scores' ``4 s h`` (``selective``) or the whole
  layer's ``2`` per parameter and ``4 s h`` (``full``).
- **Bytes held**: parameters, gradients and optimizer state from ``gpulab.sharding.estimate`` (``zero3`` over the shard
  ranks with FSDP, ``zero1`` with ZeRO-1), and the activations of the micro-batches in flight on that rank: per
  token and layer ``Block.bytes_per_token`` (:mod:`gpulab.planner.layouts`), plus the attention scores where kept
  (Korthikanti et al. 2022: ``5 a s`` bytes in 16 bits, split over tensor parallelism); with ``full``
  recomputation only each layer's input, and one layer's activations while its backward runs. The last stage
  also keeps what the loss needs: the logits in float32 (4 bytes x vocabulary / tp a token, our count), or in a
  model without a vocabulary its output's error (hidden values a token: notebook 13's mean squared error).
- **Peak**: held plus DDP's gradient buckets (a second copy of the gradients), FSDP's gathered units
  (:mod:`gpulab.sharding.fsdp_memory`), or under a pipeline the stage's unsharded parameters and gradients.
"""

from __future__ import annotations

from functools import lru_cache

from gpulab.sharding.estimate import PRECISIONS, estimate
from gpulab.planner.blocks import BLOCKS
from gpulab.planner.layouts import Layout, rank_layers
from gpulab.profiling.roofline import attainable

#: Attention's FLOPs per token per layer, forward and backward, in units of sequence x hidden: ``Q K^T`` and
#: ``softmax x V`` are 2 s h each forward, backward twice that (PaLM, Chowdhery et al. 2022, appendix B: model
#: FLOPs ``6 N + 12 L H Q T``; the ``s / 6h`` term of Narayanan et al. 2021, eq. 3). A causal mask halves the work of a
#: kernel that skips the masked half (flash attention does); PaLM's count does not halve it.
ATTENTION_FLOPS = 12
ATTENTION_FORWARD_FLOPS = 4  # the forward share, what recomputing the scores costs again
LOGIT_BYTES = 4  # float32 logits a token keeps for the loss, per vocabulary entry


def compute_rate(model, cluster, rows: int, tp: int) -> float:
    """FLOP/s of the blocks' matrix products at ``rows`` tokens: measured for the shape, else the roofline."""
    columns = BLOCKS[model.block].widen * model.hidden // tp
    measured = cluster.calibration.rate(rows, columns) if cluster.calibration is not None else None
    if measured is not None:
        return measured
    if cluster.memory_bandwidth is None:
        return cluster.peak_flops
    k, size = model.hidden, model.activation_itemsize
    intensity = 2 * rows * k * columns / (size * (rows * k + k * columns + rows * columns))
    return attainable(intensity, cluster.peak_flops, cluster.memory_bandwidth)


def rank_parameters(model, layout: Layout) -> list[int]:
    """Parameters each pipeline rank holds (before data-parallel sharding), tensor parallelism's share."""
    layers = rank_layers(model.layers, layout)
    edge = model.vocab * model.hidden / layout.tp
    counts = [n * model.layer_parameters / layout.tp for n in layers]
    counts[0] += edge
    counts[-1] += edge
    return [max(1, round(c)) for c in counts]


def rank_flops(model, layout: Layout, tokens: int) -> list[float]:
    """Each pipeline rank's FLOPs per step for ``tokens`` tokens (see the module docstring)."""
    block, tp = BLOCKS[model.block], layout.tp
    share = model.active_layer_parameters / tp
    attention = model.sequence * model.hidden / tp * (0.5 if model.causal else 1.0) if block.attention else 0.0
    again = {"none": 0.0, "selective": ATTENTION_FORWARD_FLOPS * attention,
             "full": 2.0 * share + ATTENTION_FORWARD_FLOPS * attention}[layout.recompute]
    per_layer = 6.0 * share + ATTENTION_FLOPS * attention + again
    flops = [n * per_layer * tokens for n in rank_layers(model.layers, layout)]
    flops[-1] += 6.0 * model.vocab * model.hidden / tp * tokens  # the output layer (an embedding is a look-up)
    return flops


def activation_bytes(model, layout: Layout, per_micro: int, rank: int) -> int:
    """Bytes pipeline rank ``rank`` saves for backward: its micro-batches in flight x its layers (and logits)."""
    block, tp, size = BLOCKS[model.block], layout.tp, model.activation_itemsize
    layers = rank_layers(model.layers, layout)[rank]
    kept = block.bytes_per_token(model.hidden, tp, size, layout.sequence_parallel, layout.sp_style)
    if layout.recompute == "none" and block.attention:
        kept += 5 * model.heads * model.sequence * size / 2 / tp  # Korthikanti's 5 a s bytes at 16 bits
    in_flight = layout.in_flight_on(rank)
    if layout.recompute == "full":
        inputs = size * model.hidden / (tp if layout.sequence_parallel else 1)
        held = in_flight * per_micro * layers * inputs + per_micro * kept  # one layer rebuilt during its backward
    else:
        held = in_flight * per_micro * layers * kept
    if rank == layout.pp - 1:  # the loss keeps the logits, or a model without them its output's error
        per_token = LOGIT_BYTES * model.vocab / tp if model.vocab else size * model.hidden
        held += min(in_flight, layout.micro_batches) * per_micro * per_token
    return round(held)


@lru_cache(maxsize=8192)
def _state(params: int, precision: str, optimizer: str, strategy: str, ranks: int, units: int | None) -> tuple[int, int]:
    """(parameters, gradients and optimizer state, FSDP2's peak without activations) of one rank (``gpulab.sharding.estimate``)."""
    est = estimate(params, precision, optimizer, strategy, ranks, activations=0, units=units)
    return est.total, est.peak.total if est.peak is not None else est.total


def memory_bytes(model, layout: Layout, per_micro: int) -> tuple[int, int, int]:
    """(state bytes without activations, bytes held, peak during a step) on the pipeline rank that must fit most."""
    kind = PRECISIONS[model.precision]
    strategy = "zero3" if layout.fsdp else "zero1" if layout.zero1 else "none"
    best = (0, 0, 0)
    params_of, layers_of = rank_parameters(model, layout), rank_layers(model.layers, layout)
    # the first rank holds the most in flight and the embedding, the last the output layer; among the middle ranks,
    # which hold at least as many layers as the first, the second holds the most in flight
    for rank in sorted({0, min(1, layout.pp - 1), layout.pp - 1}):
        params, layers = params_of[rank], layers_of[rank]
        units = layers + (model.vocab > 0) * ((rank == 0) + (rank == layout.pp - 1)) if layout.fsdp else None
        state, fsdp_peak = _state(params, model.precision, model.optimizer, strategy, layout.shard_ranks, units)
        held = state + activation_bytes(model, layout, per_micro, rank)
        if layout.fsdp and layout.pp > 1:
            peak = held + params * (kind.gather.itemsize + kind.grads.itemsize)
        elif layout.fsdp:
            peak = max(held, fsdp_peak + held - state)  # FSDP2's peak holds the activations at every moment
        elif layout.dp > 1:
            peak = held + params * kind.grads.itemsize  # DDP's buckets
        else:
            peak = held
        best = max(best, (peak, held, state))
    peak, held, state = best
    return state, held, peak
