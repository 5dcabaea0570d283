"""Checks for notebook 12 (tensor parallelism) and its self-check questions ``QUESTIONS_12``.

``check_megatron_mlp(partial_output)`` calls the learner's ``partial_output(x, up, down, rank, world)`` for every
rank of MLPs, rank counts and token counts the notebook never shows (hidden sizes that do not divide among
them) and compares the sum over ranks with one process. Expected values come from torch itself
(``torch.chunk``, the split DTensor's ``Shard`` follows) and from ``gpulab.comm_cost``.
"""

from __future__ import annotations

import copy
import inspect

import torch
import torch.nn.functional as F

from gpulab import comm_cost as cost
from gpulab.exercises import Feedback, Option, Question, as_number, correct, wrong
from gpulab.tp_model import MLP, shard_sizes

#: (hidden, ffn, world, tokens): the first ones split evenly, the later ones do not; in the last one torch.chunk
#: returns fewer pieces than ranks (5 units over 4 ranks: 2, 2, 1), so rank 3 holds none, as under DTensor's Shard
CASES = ((6, 12, 3, 5), (4, 8, 4, 2), (8, 7, 2, 3), (5, 10, 4, 2), (3, 9, 5, 4), (6, 5, 4, 3))
TOLERANCE = 1e-5


def _pieces(x: torch.Tensor, mlp: MLP, world: int) -> list[torch.Tensor]:
    """Each rank's partial output under Megatron's split, pieces as ``torch.chunk`` cuts them."""
    sizes, out, start = shard_sizes(mlp.up.out_features, world), [], 0
    for n in sizes:
        h = F.gelu(x @ mlp.up.weight[start:start + n].T + mlp.up.bias[start:start + n])
        out.append(h @ mlp.down.weight[:, start:start + n].T)
        start += n
    return out


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool((a - b).abs().max() <= TOLERANCE)


def _diagnose(total: torch.Tensor, x: torch.Tensor, mlp: MLP, world: int) -> str:
    """What a wrong sum over ranks seems to get wrong, in words, without the right numbers."""
    full, b = mlp(x), mlp.down.bias
    guesses = (
        (full + (world - 1) * b, "down.bias is in the sum once per rank: add it on one rank only (or after the sum)"),
        (full - b, "the sum lacks down.bias: add it on one rank (for example rank 0)"),
        (world * full, "every rank computed the whole MLP: each rank must use only its own piece of the weights"),
        (mlp.down(mlp.up(x)), "GELU is missing: apply it to this rank's hidden units, before down"),
    )
    for guess, why in guesses:
        if _close(total, guess):
            return why
    return ("the sum over ranks is not the MLP's output: rank r must use rows r of up.weight and up.bias and "
            "the same columns r of down.weight (torch.chunk's pieces), GELU between them")


def _few_pieces(error: Exception, ffn: int, world: int) -> str:
    """A hint when an IndexError comes from ``torch.chunk`` returning fewer than ``world`` pieces, else ''."""
    pieces = len(torch.arange(ffn).chunk(world))
    if not isinstance(error, IndexError) or pieces == world:
        return ""
    return (f" (torch.chunk cuts {ffn} units into only {pieces} pieces for {world} ranks: the last ranks must "
            "get an empty piece, as DTensor gives them; compute piece r's first and last unit yourself)")


def _parameters(fn: object) -> str | None:
    """``fn``'s parameters as text when five positional arguments cannot be passed to it, else None."""
    try:
        signature = inspect.signature(fn)  # type: ignore[arg-type]
        signature.bind(*range(5))
    except ValueError:  # no signature to read (some built-ins): let the call itself decide
        return None
    except TypeError:
        return ", ".join(signature.parameters)
    return None


def check_megatron_mlp(partial_output: object) -> Feedback:
    """Does the learner's ``partial_output(x, up, down, rank, world)`` give Megatron's partial outputs?

    ``up`` and ``down`` are ``nn.Linear`` layers; the sum of every rank's result must equal ``down(gelu(up(x)))``
    within 1e-5, and rank ``r``'s part must come from ``torch.chunk``'s piece ``r``, or from no unit where
    ``torch.chunk`` returns fewer pieces than ranks (``down.bias`` on one rank, or shared out evenly). The feedback
    never shows a right result.
    """
    if not callable(partial_output):
        return wrong(f"define partial_output(x, up, down, rank, world) as a function, got {partial_output!r}")
    takes = _parameters(partial_output)
    if takes is not None:
        return wrong(f"partial_output must take five arguments (x, up, down, rank, world); yours takes ({takes})")
    divides_seen = False
    for number, (hidden, ffn, world, tokens) in enumerate(CASES):
        with torch.random.fork_rng():  # the learner's random numbers stay as they were
            torch.manual_seed(100 + number)
            mlp, x = MLP(hidden, ffn), torch.randn(tokens, hidden)
        parts = []
        with torch.no_grad():
            for rank in range(world):
                given = copy.deepcopy(mlp)  # a function that changes the layers changes only its copies
                try:
                    out = partial_output(x.clone(), given.up, given.down, rank, world)
                except Exception as error:  # the learner's code: report, never raise
                    return wrong(f"partial_output(x, up, down, rank={rank}, world={world}) raised "
                                 f"{type(error).__name__}: {error}{_few_pieces(error, ffn, world)}")
                if not isinstance(out, torch.Tensor):
                    return wrong(f"partial_output must return a tensor (tokens x hidden), got {type(out).__name__}")
                if tuple(out.shape) != (tokens, hidden):
                    return wrong(f"rank {rank} returned shape {tuple(out.shape)}; each rank's partial output has "
                                 f"the output's shape (tokens x hidden) = {(tokens, hidden)}")
                parts.append(out.detach().float())
            total = sum(parts)
            even = ffn % world == 0
            if not _close(total, mlp(x)):
                if not even and divides_seen:
                    return wrong(f"right when {ffn} hidden units would divide by the ranks, wrong for {ffn} units over "
                                 f"{world} ranks: split like torch.chunk (the first ranks get ceil({ffn}/{world}) "
                                 "units, the last ones the rest); no unit may be left out")
                return wrong(f"with {ffn} hidden units over {world} ranks: {_diagnose(total, x, mlp, world)}")
            divides_seen = divides_seen or even
            bias = [p - ref for p, ref in zip(parts, _pieces(x, mlp, world))]
            if not all(_close(d, torch.zeros_like(d)) or _close(d, mlp.down.bias.expand_as(d))
                       or _close(d, (mlp.down.bias / world).expand_as(d)) for d in bias):
                return wrong(f"the sum is right for {ffn} hidden units over {world} ranks, but not every rank's part "
                             "comes from its own piece: rank r uses piece r of torch.chunk(ffn units, world)")
    return correct(f"the partial outputs add up to the MLP on {len(CASES)} MLPs and 2 to 5 ranks, hidden sizes that "
                   "do not divide included (in one, the last rank holds no unit): each rank used only its rows of "
                   "up and its columns of down, and one all-reduce of the partial outputs gives the whole result")


def _mb(nbytes: float) -> float:
    """Bytes in MB (10^6 bytes)."""
    return nbytes / 1e6


def _fwd_bytes(answer: object) -> Feedback:
    world, tokens, hidden, element = 4, 8 * 2048, 4096, 2
    size = tokens * hidden * element
    one = cost.ring_bytes_sent("all_reduce", size, world)
    value = as_number(answer)
    if value is None:
        return wrong(f"answer with a number of MB (10^6 bytes), got {answer!r}")
    if abs(value - _mb(2 * one)) <= 0.01 * _mb(2 * one):
        return correct(f"each all-reduce holds 8 x 2048 x 4096 x 2 bytes = {_mb(size):.1f} MB; a ring makes each GPU "
                       f"send 2(n-1)/n of it, {_mb(one):.1f} MB; forward runs two (after attention and after the "
                       f"MLP): {_mb(2 * one):.1f} MB")
    if abs(value - _mb(one)) <= 0.01 * _mb(one):
        return wrong("that is one all-reduce; the forward pass of a layer runs one per sub-block")
    if abs(value - _mb(2 * size)) <= 0.01 * _mb(2 * size):
        return wrong("that is the size of the two all-reduces; in a ring each GPU sends 2(n-1)/n of each")
    if abs(value - _mb(4 * one)) <= 0.01 * _mb(4 * one):
        return wrong("that counts backward too; the question asks for the forward pass only")
    if abs(value - _mb(size)) <= 0.01 * _mb(size):
        return wrong("that is one all-reduce's size; count the ring's factor 2(n-1)/n and both sub-blocks")
    return wrong("the size of one all-reduce is tokens x hidden x bytes per number; multiply by 2(n-1)/n for a ring "
                 "and by the number of all-reduces in forward")


QUESTIONS_12 = (
    Question("A transformer layer (attention with q, k and v in one fused linear layer, then an MLP) is split over "
             "8 GPUs with Megatron's tensor parallelism, without sequence parallelism. How many all-reduces does "
             "one training step make for this layer, forward and backward together?", (
                 Option("1", "forward alone makes one per sub-block: after attention's output layer and after the "
                        "MLP's second layer"),
                 Option("2", "that is the forward pass; backward makes as many again, for the gradient of each "
                        "sub-block's input"),
                 Option("4", "2 in forward (each row-parallel layer's partial sums) and 2 in backward (each "
                        "column-parallel layer's input gradient is a partial sum too), whatever the GPU count"),
                 Option("16", "the count does not grow with the GPUs: 8 GPUs make the same calls as 2, on more ranks"),
             ), answer="c"),
    Question("Tensor parallelism over 4 GPUs, one transformer layer, a batch of 8 sequences of 2048 tokens, hidden "
             "size 4096, activations in bfloat16 (2 bytes). With ring all-reduces, how many MB (10^6 bytes) does "
             "each GPU send in the forward pass of this layer?", grade=_fwd_bytes, example="123.4"),
    Question("Megatron-LM pads a vocabulary of 50,257 tokens to 50,258 for TP=2 (with "
             "`--make-vocab-size-divisible-by 1`). Its cross-entropy keeps the padded logit in every softmax. "
             "Which statement is true?", (
                 Option("The padded run computes the same losses as one GPU with 50,257 tokens, up to rounding.",
                        "no: the padded logit joins every softmax, so from the first step the loss and the gradients "
                        "are those of another model, not a reordered sum"),
                 Option("Padding is harmless to the model when the padded logits are left out of the softmax "
                        "(masked or cut off) before the loss.",
                        "without the padded logits, the loss and the real rows' gradients are those of the unpadded "
                        "layer, as this notebook's run showed; kept in, the padded logit changes them, though "
                        "training pushes it down"),
                 Option("Padding is needed because 50,257 rows cannot be split over 2 ranks at all.",
                        "no: DTensor splits them unevenly, like torch.chunk: 25,129 and 25,128 rows; Megatron-LM "
                        "pads because its own split needs equal parts"),
                 Option("The padded layer on 2 GPUs differs from the same padded layer on 1 GPU by far more than "
                        "rounding.",
                        "no: the split changes only the rounding; this notebook's padded layer on 2 ranks matched "
                        "the same padded layer in one process within 1e-5"),
             ), answer="b"),
)
