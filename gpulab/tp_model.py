"""The tiny transformer block that notebook 12 splits over ranks, its tensor-parallel plans, and vocabulary sizes.

    block = TinyBlock(hidden=16, heads=4, ffn=64)   # pre-norm: x + attn(norm1(x)), then x + mlp(norm2(x))
    plan = tp_plan("tp")                             # {"attn.q": ColwiseParallel(), ...} for parallelize_module
    expected_collectives("tp")                       # what each phase of one training step must run
    shard_sizes(11, 2)                               # [6, 5]: torch.chunk's split, which DTensor's Shard follows
    padded_vocab(50257, 2)                           # 50258: the next multiple of divisible_by x the TP degree
    saved_bytes_per_token(16, 4, 64, tp=2, sequence_parallel="torch")   # 592.0: what backward keeps, per token

Nothing here needs a process group: the plans are only built here and applied by the rank program
(``gpulab.distributed.tensor_parallel.worker``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gpulab.validate import non_negative_int, one_of, positive_int

#: The tensor-parallel plans of the block: ``naive`` (each linear layer on its own), ``tp`` (Megatron's split:
#: each sub-block's input made a DTensor once) and ``sp`` (``tp`` plus sequence parallelism for the norms).
PLANS = ("naive", "tp", "sp")
COLUMN_LAYERS = ("attn.q", "attn.k", "attn.v", "mlp.up")  # split by output features (ColwiseParallel)
ROW_LAYERS = ("attn.o", "mlp.down")  # split by input features (RowwiseParallel): their outputs are partial sums
NORM_PARAMETERS = 4  # norm1 and norm2, a weight and a bias each
#: How sequence parallelism keeps the inputs of the column-split layers for backward: ``none`` (no sequence
#: parallelism), ``torch`` (DTensor's ``SequenceParallel``: the all-gathered whole sequence) or ``megatron``
#: (Megatron-LM: this rank's tokens only, all-gathered again in backward).
SEQUENCE_PARALLEL = ("none", "torch", "megatron")


class Attention(nn.Module):
    """Causal multi-head self-attention with separate q, k, v and output projections."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden={hidden} must be a multiple of heads={heads}")
        self.head_dim = hidden // heads
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape  # -1 below: a rank that holds a share of q, k, v holds that share of the heads
        q, k, v = (layer(x).view(b, t, -1, self.head_dim).transpose(1, 2) for layer in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    """Linear up to ``ffn`` features, GELU, linear back down."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class TinyBlock(nn.Module):
    """One pre-norm transformer block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, hidden: int = 16, heads: int = 4, ffn: int = 64, seed: int = 0) -> None:
        super().__init__()
        self.heads = positive_int(heads, "heads")
        with torch.random.fork_rng(devices=[]):  # the same weights for every seed, the caller's generator untouched
            torch.manual_seed(seed)
            self.norm1, self.attn = nn.LayerNorm(hidden), Attention(positive_int(hidden, "hidden"), heads)
            self.norm2, self.mlp = nn.LayerNorm(hidden), MLP(hidden, positive_int(ffn, "ffn"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def tp_plan(name: str) -> dict:
    """The ``parallelize_module`` plan called ``name`` (one of :data:`PLANS`) for a :class:`TinyBlock`."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)

    one_of(name, PLANS, "plan")
    sp = name == "sp"
    plan: dict = {}
    if sp:  # the norms work on sequence shards; each sub-block gathers the whole sequence first
        plan["norm1"], plan["norm2"] = SequenceParallel(), SequenceParallel()
    if name != "naive":  # the sub-block's input becomes one DTensor, shared by the layers that read it
        for module in ("attn", "mlp"):
            plan[module] = PrepareModuleInput(input_layouts=(Shard(1) if sp else Replicate(),),
                                              desired_input_layouts=(Replicate(),))
    for layer in COLUMN_LAYERS:
        plan[layer] = ColwiseParallel()
    for layer in ROW_LAYERS:  # partial sums: summed (all-reduce) or summed and split by sequence (reduce-scatter)
        plan[layer] = RowwiseParallel(output_layouts=Shard(1) if sp else Replicate())
    return plan


def expected_collectives(name: str) -> dict[str, dict[str, int]]:
    """The collectives one training step of a :class:`TinyBlock` needs under plan ``name``, by phase.

    Forward: each row-split layer sums its partial outputs (all-reduce; under ``sp`` a reduce-scatter, after an
    all-gather of the sequence). Backward: the gradient of each input read by column-split layers is a partial
    sum too: one all-reduce per layer under ``naive``, one per sub-block once it is one DTensor; ``sp`` swaps
    every all-gather for a reduce-scatter and back. Optimizer: under ``sp`` each norm parameter's gradient is
    partial (each rank saw only its part of the sequence) and is all-reduced when the optimizer reads it.
    """
    one_of(name, PLANS, "plan")
    rows = len(ROW_LAYERS)
    if name == "sp":
        return {"forward": {"all_gather": rows, "reduce_scatter": rows},
                "backward": {"all_gather": rows, "reduce_scatter": rows},
                "optimizer": {"all_reduce": NORM_PARAMETERS}}
    backward = len(COLUMN_LAYERS) if name == "naive" else rows
    return {"forward": {"all_reduce": rows}, "backward": {"all_reduce": backward}, "optimizer": {}}


def saved_bytes_per_token(hidden: int, heads: int, ffn: int, tp: int = 1, sequence_parallel: str = "none",
                          itemsize: int = 4) -> float:
    """Bytes one :class:`TinyBlock` saves for backward on one of ``tp`` ranks, per token of the whole batch.

    What its forward pass keeps (counted with ``saved_tensors_hooks`` in notebook 12, torch 2.13 on CPU), per token:

    - each norm's input (``hidden``) and its mean and 1 / standard deviation (2 numbers): whole on every rank
      under tensor parallelism, split over the ranks by sequence parallelism;
    - the input of ``q``, ``k`` and ``v`` (one tensor) and that of ``up`` (``hidden`` each): whole under tensor
      parallelism and under torch's sequence parallelism (the all-gathered sequence); split under Megatron-LM's;
    - split by heads or features on every plan: ``q``, ``k``, ``v`` and attention's output (``4 hidden``,
      the output is also ``o``'s input), ``up``'s output and GELU's (``2 ffn``), and attention's log-sum-exp
      (``heads`` numbers, always float32).

    ``itemsize``: bytes per number of the activations (the norms' statistics too, as on CPU; CUDA keeps those in
    float32). ``sequence_parallel`` is one of :data:`SEQUENCE_PARALLEL`. Megatron-LM's form gives one process's
    bytes divided by ``tp``, as Korthikanti et al. (2022, section 4.2.2) count.
    """
    one_of(sequence_parallel, SEQUENCE_PARALLEL, "sequence_parallel")
    positive_int(hidden, "hidden")
    positive_int(itemsize, "itemsize")
    if positive_int(heads, "heads") % positive_int(tp, "tp") or positive_int(ffn, "ffn") % tp:
        raise ValueError(f"heads={heads} and ffn={ffn} must divide by tp={tp}: each rank holds equal parts")
    norms = 2 * (hidden + 2)  # two norms: the input and two statistics per token
    gathered = 2 * hidden  # the inputs of q/k/v and of up
    split = 4 * hidden + 2 * ffn
    whole = {"none": norms + gathered, "torch": gathered, "megatron": 0}[sequence_parallel]
    return itemsize * (whole + (norms + gathered + split - whole) / tp) + 4 * heads / tp


def shard_sizes(size: int, world: int) -> list[int]:
    """Rows each of ``world`` ranks holds when ``size`` rows are split like ``torch.chunk`` (DTensor's ``Shard``).

    The first ranks get ``ceil(size / world)`` rows; the last get what is left, possibly none.
    """
    positive_int(world, "world")
    non_negative_int(size, "size")
    sizes = [len(piece) for piece in torch.arange(size).chunk(world)]
    return sizes + [0] * (world - len(sizes))


def padded_vocab(vocab: int, world: int, divisible_by: int = 1) -> int:
    """``vocab`` rounded up to a multiple of ``divisible_by`` x ``world`` (how Megatron-LM pads its vocabulary)."""
    multiple = positive_int(divisible_by, "divisible_by") * positive_int(world, "world")
    return -(-positive_int(vocab, "vocab") // multiple) * multiple


def padded_head(head: nn.Linear, vocab: int, seed: int = 1) -> nn.Linear:
    """A copy of the output layer ``head`` with ``vocab`` rows: its own rows first, new rows initialised as usual."""
    extra = positive_int(vocab, "vocab") - head.out_features
    if extra < 0:
        raise ValueError(f"vocab={vocab} is smaller than the head's {head.out_features} rows")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        bigger = nn.Linear(head.in_features, vocab, bias=head.bias is not None)
    with torch.no_grad():
        bigger.weight[: head.out_features] = head.weight
        if head.bias is not None:
            bigger.bias[: head.out_features] = head.bias
    return bigger
