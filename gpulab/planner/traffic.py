"""What one layout of ``gpulab.planner.plan`` sends in a step, over which link, and how long it takes.

Conventions (one for every link use): a link's bandwidth is per direction, the bus bandwidth of nccl-tests
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md), as in :mod:`gpulab.comm_cost`. A
ring collective of ``n`` bytes (all_gather: its output, reduce_scatter: its input) over ``r`` ranks takes
``steps x latency + bus_factor x n / bandwidth``; a pipeline's point-to-point send takes ``latency + n /
bandwidth`` (nccl-tests' sendrecv: busbw = algbw). A cluster measured by ``gpulab.planner.calibration`` times each
call with its own measured ``alpha + beta x bytes`` for that kind and group size instead.

**Where ranks sit** (the mesh order): tensor parallelism innermost, then the pipeline, data parallelism
outermost, as Llama 3 orders its groups ([TP, CP, PP, DP], Dubey et al. 2024, https://arxiv.org/abs/2407.21783,
section 3.3.2). So a tensor-parallel group of at most a node's GPUs stays on the node's NVLink, and the groups
that cross nodes are the data-parallel ones (and the pipeline's, once ``tp x pp`` passes a node). A group that
spans nodes runs at the slower link between them.

How each layout runs, as costed here (``traffic`` lists the calls of the busiest pipeline rank):

- **DDP** all-reduces the gradients once per step in its buckets (``cost.ddp_buckets`` over whole layers:
  ``no_sync`` while accumulating, torch.distributed.pipelining's last backward under a pipeline); **ZeRO-1**
  (Megatron's distributed optimizer) reduce-scatters the same buckets and all-gathers the updated parameters.
- **FSDP without a pipeline**: FSDP2's defaults for every micro-batch: each layer's parameters all-gathered for
  forward and again for backward (``reshard_after_forward=True``), its gradients reduce-scattered. **HSDP** does
  that inside a shard group and all-reduces the gradient shards over the replicas.
- **FSDP with a pipeline**: torchtitan's way (``reshard_after_forward=False`` "to avoid per-microbatch
  all-gathers") with torch.distributed.pipelining, which reduce-scatters once after the last micro-batch: one
  all-gather and one reduce-scatter per layer per step.
- **Tensor parallelism** (Megatron): the block's all-reduces of each micro-batch's activations (the first layer's
  backward one is not needed where the model's input is data; a vocabulary-parallel embedding all-reduces its
  output once more); with sequence parallelism each
  becomes a reduce-scatter and an all-gather, and Megatron's backward gathers the inputs of the column-split
  matrices again (Korthikanti et al. 2022, section 4.2), which torch's keeps instead.
- **Pipeline**: the rank that sends most (a middle one) sends each micro-batch's activations forward and its
  gradients back, once per stage it holds (sequence parallelism sends each rank's ``1 / tp``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.comm_cost import bus_factor, ddp_buckets, ring_allreduce_seconds
from gpulab.sharding.estimate import PRECISIONS
from gpulab.planner.blocks import BLOCKS
from gpulab.planner.costs import rank_parameters
from gpulab.planner.layouts import Layout, rank_layers

#: Traffic classes: the data-parallel traffic of replicas (DDP, ZeRO-1) and of shards (FSDP, HSDP), tensor
#: parallelism's and the pipeline's. ``Calibration.exposed`` gives each its measured share, per group size.
CLASSES = ("ddp", "fsdp", "tp", "pp")


@dataclass(frozen=True)
class Call:
    """``count`` calls of ``kind`` (all_reduce, all_gather, reduce_scatter, send) of ``nbytes`` over ``ranks``.

    ``cls``: the traffic class (:data:`CLASSES`); ``across_nodes``: the group spans machines (the slower link).
    """

    cls: str
    kind: str
    ranks: int
    nbytes: float
    count: int
    across_nodes: bool = False


def link(cluster, across_nodes: bool) -> tuple[float, float]:
    """(latency s, bandwidth bytes/s) of the link a group uses: NVLink inside a node, the network between them."""
    if across_nodes:
        return cluster.inter_latency, cluster.inter_bandwidth
    return cluster.latency, cluster.bandwidth


def call_seconds(call: Call, cluster) -> float:
    """One call: the cluster's measured fit for its kind and group size, else the ring (or a send) on its link."""
    if call.ranks == 1 or call.nbytes == 0:
        return 0.0
    measured = cluster.calibration.fit(call.kind, call.ranks) if cluster.calibration is not None else None
    if measured is not None:
        return max(measured.seconds(call.nbytes), 0.0)
    latency, bandwidth = link(cluster, call.across_nodes)
    if call.kind == "send":
        return latency + call.nbytes / bandwidth
    if call.kind == "all_reduce":
        return ring_allreduce_seconds(call.nbytes, call.ranks, latency, 1 / bandwidth)
    return (call.ranks - 1) * latency + bus_factor(call.kind, call.ranks) * call.nbytes / bandwidth


def exposed_seconds(calls: list[Call], cluster) -> dict[str, float]:
    """Per traffic class, the seconds its calls add to a step: their time x the exposed share of their class and group."""
    out = {cls: 0.0 for cls in CLASSES}
    for call in calls:
        share = cluster.calibration.share(call.cls, call.ranks) if cluster.calibration is not None else 1.0
        out[call.cls] += call.count * share * call_seconds(call, cluster)
    return out


def pipeline_sends(pp: int, stages_per_rank: int, rank: int) -> int:
    """Messages pipeline rank ``rank`` sends per micro-batch: each of its stages sends its activations forward
    unless it is the last stage and its input's gradient back unless it is the first."""
    total = pp * stages_per_rank
    return sum((s < total - 1) + (s > 0) for s in range(rank, total, pp))


def _spans(cluster, ranks_inside: int) -> bool:
    """Whether a group whose members lie within ``ranks_inside`` consecutive ranks crosses a node boundary."""
    return cluster.gpus_per_node is not None and ranks_inside > cluster.gpus_per_node


def traffic(model, cluster, layout: Layout, per_micro: int) -> list[Call]:
    """Every call of one step on the busiest pipeline rank (see the module docstring)."""
    dp, tp, pp, m, v = layout.dp, layout.tp, layout.pp, layout.micro_batches, layout.stages_per_rank
    kind, block = PRECISIONS[model.precision], BLOCKS[model.block]
    params = rank_parameters(model, layout)
    busiest = max(range(pp), key=lambda r: (params[r], r))  # a tie: the later stage, whose input needs a gradient
    mine = rank_layers(model.layers, layout)[busiest]
    units = mine + (model.vocab > 0) * ((busiest == 0) + (busiest == pp - 1))  # the embedding, the output layer
    grad, weight = params[busiest] / units * kind.grads.itemsize, params[busiest] / units * kind.gather.itemsize
    calls: list[Call] = []
    if dp > 1 and layout.fsdp:
        shard = layout.shard_ranks
        rounds, gathers = (1, 1) if pp > 1 else (m, 2)
        inside = _spans(cluster, tp * pp * shard)
        calls += [Call("fsdp", "all_gather", shard, weight, rounds * gathers * units, inside),
                  Call("fsdp", "reduce_scatter", shard, grad, rounds * units, inside)]
        if layout.replicas > 1:
            calls.append(Call("fsdp", "all_reduce", layout.replicas, grad / shard, rounds * units,
                              _spans(cluster, cluster.gpus)))
    elif dp > 1:
        across = _spans(cluster, cluster.gpus)
        for size in ddp_buckets([round(grad)] * units):
            if layout.zero1:
                calls += [Call("ddp", "reduce_scatter", dp, size, 1, across),
                          Call("ddp", "all_gather", dp, size * kind.params.itemsize / kind.grads.itemsize, 1, across)]
            else:
                calls.append(Call("ddp", "all_reduce", dp, size, 1, across))
    boundary = per_micro * model.hidden * model.activation_itemsize  # one micro-batch at a layer's edge
    if tp > 1:
        across = _spans(cluster, tp)
        no_input_grad = 1 if (model.vocab == 0 and busiest == 0) else 0  # the model's input needs no gradient
        per_micro_calls = block.tp_allreduces * mine - no_input_grad + (1 if model.vocab and busiest == 0 else 0)
        if layout.sequence_parallel:
            again = block.tp_allreduces // 2 * mine if layout.sp_style == "megatron" else 0
            calls += [Call("tp", "all_gather", tp, boundary, m * (per_micro_calls + again), across),
                      Call("tp", "reduce_scatter", tp, boundary, m * per_micro_calls, across)]
        else:
            calls.append(Call("tp", "all_reduce", tp, boundary, m * per_micro_calls, across))
    if pp > 1:
        sent = boundary / tp if layout.sequence_parallel else boundary
        calls.append(Call("pp", "send", 2, sent, m * max(pipeline_sends(pp, v, r) for r in range(pp)),
                          _spans(cluster, tp * pp)))
    return [c for c in calls if c.count > 0]
