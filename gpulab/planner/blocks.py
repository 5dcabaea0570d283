"""What one layer of a model keeps for backward and sends under tensor parallelism, as ``gpulab.planner.plan`` counts it.

:data:`BLOCKS` holds the layers the planner knows (a transformer layer, notebook 13's MLP block); :data:`RECOMPUTE`
what backward may recompute; :data:`SP_STYLES` whose sequence parallelism saves what.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.validate import one_of

#: What backward recomputes (Korthikanti et al. 2022, https://arxiv.org/abs/2205.05198): ``none`` keeps every
#: activation, the attention scores too; ``selective`` recomputes the attention scores (as flash attention does
#: inside its kernel) and keeps the rest; ``full`` keeps only each layer's input and runs the layer's forward
#: again in backward.
RECOMPUTE = ("none", "selective", "full")
#: Sequence parallelism's activations: ``megatron`` saves each column-split matrix's input as its sequence shard
#: and gathers it again in backward; ``torch`` (DTensor's ``SequenceParallel`` before ``ColwiseParallel``) keeps
#: the all-gathered whole input for backward and gathers nothing more.
SP_STYLES = ("megatron", "torch")


@dataclass(frozen=True)
class Block:
    """One layer, as the planner sees it.

    ``replicated`` and ``split``: values saved for backward per token, in units of the hidden size, that tensor
    parallelism without sequence parallelism keeps whole on every rank or splits over them (Megatron's
    sequence parallelism splits both); ``gathered``: the part of ``replicated`` that is the input of a
    column-split matrix, which torch's sequence parallelism keeps whole; ``tp_allreduces``: all-reduces of one
    micro-batch's activations per layer under tensor parallelism (forward and backward); ``widen``: the
    up-projection's factor (``hidden -> widen x hidden``), whose matrix product sets the compute rate;
    ``attention``: the layer has self-attention (its FLOPs grow with the sequence; its scores are what
    ``recompute="selective"`` drops); ``sequence_parallel``: the planner knows the layer's sequence-parallel form.
    """

    replicated: float
    split: float
    tp_allreduces: int
    widen: int = 4
    attention: bool = False
    sequence_parallel: bool = False
    gathered: float = 0.0

    def bytes_per_token(self, hidden: int, tp: int, itemsize: int, sequence_parallel: bool = False,
                        sp_style: str = "megatron") -> float:
        """Activation bytes one token leaves in one layer on one rank (attention scores not included).

        Megatron's sequence parallelism splits everything over ``tp``; torch's keeps the ``gathered`` inputs whole.
        """
        one_of(sp_style, SP_STYLES, "sp_style")
        if not sequence_parallel:
            whole = self.replicated
        elif sp_style == "megatron":
            whole = self.replicated / tp
        else:
            # Our own count until tp_model gives per-token bytes for both styles: swap its function in here.
            whole = self.gathered + (self.replicated - self.gathered) / tp
        return itemsize * hidden * (whole + self.split / tp)


#: ``transformer``: Korthikanti et al. 2022 (https://arxiv.org/abs/2205.05198, section 4), per layer and token
#: with 16-bit activations: ``h (10 + 24 / t)`` bytes under tensor parallelism of ``t`` without sequence
#: parallelism (the two layer norms' inputs, the inputs of the QKV and first MLP matrices and two 1-byte dropout
#: masks stay whole: 10 h bytes, 5 values here; the QKV and first MLP inputs are the 2 ``gathered`` values),
#: ``34 h / t`` with Megatron's sequence parallelism, ``h (4 + 30 / t)`` with torch's; without the attention
#: scores (``5 a s / t`` more, ``a`` heads). Megatron's 2 all-reduces forward and 2 backward. Other itemsizes
#: scale all of it (the 1-byte masks included: a small overcount in fp32).
#: ``mlp``: ``Linear(h, 4h) -> ReLU -> Linear(4h, h)`` (notebook 13's blocks): its input (h, whole on every rank)
#: and the ReLU's output (4h, split); one all-reduce forward (after the row-split Linear), one backward.
BLOCKS = {"transformer": Block(5.0, 12.0, 4, attention=True, sequence_parallel=True, gathered=2.0),
          "mlp": Block(1.0, 4.0, 2)}
