"""Checks for notebook 15 (long sequences and many experts) and its self-check questions ``QUESTIONS_15``.

``check_lse_merge(merge)`` calls the learner's ``merge(out_a, lse_a, out_b, lse_b)`` on pairs of partial attentions
the notebook never shows: other shapes, uneven blocks of keys, one block that saw no key, and scores so large that
``exp`` overflows. The expected values come from one attention over both blocks of keys at once (``softmax`` and
``logsumexp`` over all the scores), never from the course's own merge.
"""

from __future__ import annotations

import inspect
import math

import torch

from gpulab.exercises import Feedback, Option, Question, as_number, correct, wrong

TOLERANCE = 1e-9  # relative to the largest value: float64 throughout
#: (batch shape, queries, keys in block a, keys in block b, features, score scale, what the case is)
CASES = (((), 5, 4, 4, 3, 1.0, "5 queries, two blocks of 4 keys"),
         ((2, 3), 6, 3, 9, 8, 1.0, "a batch of 2 x 3 heads, blocks of 3 and 9 keys"),
         ((), 4, 2, 6, 4, 1.0, "as many queries as features (4): a row weight applied to a column shows here"),
         ((3,), 7, 5, 2, 6, 300.0, "scores near 1000: exp overflows unless the larger log-sum-exp comes out first"),
         ((2,), 5, 4, 0, 3, 1.0, "block b saw no key: its log-sum-exp is -inf and its output zeros"))


def _partial(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One block's attention output and log-sum-exp; a block of no key gives zeros and -inf."""
    if k.shape[-2] == 0:
        return torch.zeros_like(q[..., :v.shape[-1]]), torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    s = q @ k.transpose(-2, -1)
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def _case(number: int):
    batch, queries, keys_a, keys_b, features, scale, what = CASES[number]
    g = torch.Generator().manual_seed(700 + number)
    q = torch.randn(*batch, queries, features, generator=g, dtype=torch.float64) * scale
    k = torch.randn(*batch, keys_a + keys_b, features, generator=g, dtype=torch.float64)
    v = torch.randn(*batch, keys_a + keys_b, features, generator=g, dtype=torch.float64)
    a = _partial(q, k[..., :keys_a, :], v[..., :keys_a, :])
    b = _partial(q, k[..., keys_a:, :], v[..., keys_a:, :])
    return a, b, _partial(q, k, v), what


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    scale = max(1.0, want.abs().max().item())
    return got.shape == want.shape and bool(((got - want).abs() <= TOLERANCE * scale).all())


def _diagnose(out: torch.Tensor, a, b) -> str:
    """What a wrong merged output seems to be, in words, without the right numbers."""
    (out_a, lse_a), (out_b, lse_b) = a, b
    guesses = ((lambda: (out_a + out_b) / 2, "you averaged the two outputs: weight each by its share of the "
                "exponentials, exp(lse_a - lse) and exp(lse_b - lse)"),
               (lambda: out_a + out_b, "you added the two outputs: their weights must add up to 1 for each query"),
               (lambda: torch.exp(lse_a).unsqueeze(-1) * out_a + torch.exp(lse_b).unsqueeze(-1) * out_b,
                "you weighted by exp(lse_a) and exp(lse_b): divide by their sum, exp(lse), too"))
    for guess, why in guesses:
        try:
            if _close(out, guess()):
                return why
        except RuntimeError:
            continue
    return ("the merged output is not the attention over both blocks: each block's output counts with weight "
            "exp(its lse - lse), one weight per query (a last dimension of size 1 on the weights)")


def _arguments(fn: object) -> str | None:
    """``fn``'s parameters as text when four positional arguments cannot be passed to it, else None."""
    try:
        signature = inspect.signature(fn)  # type: ignore[arg-type]
        signature.bind(*range(4))
    except ValueError:
        return None
    except TypeError:
        return ", ".join(signature.parameters)
    return None


def check_lse_merge(merge: object) -> Feedback:
    """Does ``merge(out_a, lse_a, out_b, lse_b)`` give ``(out, lse)`` of the attention over both blocks of keys?

    ``out_*``: ``(..., queries, features)``; ``lse_*``: ``(..., queries)``. Within 1e-9 of the largest value, on
    every case of :data:`CASES`. The feedback never shows a right result.
    """
    if not callable(merge):
        return wrong(f"define merge(out_a, lse_a, out_b, lse_b) as a function, got {merge!r}")
    takes = _arguments(merge)
    if takes is not None:
        return wrong(f"merge must take four arguments (out_a, lse_a, out_b, lse_b); yours takes ({takes})")
    for number in range(len(CASES)):
        a, b, (want_out, want_lse), what = _case(number)
        try:
            got = merge(a[0].clone(), a[1].clone(), b[0].clone(), b[1].clone())
        except Exception as error:  # the learner's code: report, never raise
            hint = (" (lse has one number per query: give it a last dimension, lse.unsqueeze(-1), before it "
                    "multiplies an output)" if "size of tensor" in str(error) else "")
            return wrong(f"on {what}, merge raised {type(error).__name__}: {error}{hint}")
        if not (isinstance(got, tuple) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)):
            return wrong(f"merge must return two tensors, (out, lse); got {type(got).__name__}")
        out, lse = got
        if tuple(out.shape) != tuple(want_out.shape) or tuple(lse.shape) != tuple(want_lse.shape):
            return wrong(f"on {what}: out has shape {tuple(out.shape)} and lse {tuple(lse.shape)}; they must keep "
                         f"the shapes of out_a, {tuple(want_out.shape)}, and lse_a, {tuple(want_lse.shape)}")
        if not (torch.isfinite(out).all() and torch.isfinite(lse).all()):
            return wrong(f"on {what}: the result holds inf or nan. exp(1000) overflows: use torch.logaddexp for "
                         "lse, and exp(lse_a - lse) for a weight, never exp(lse_a) alone")
        if not _close(out.double(), want_out):
            return wrong(f"on {what}: {_diagnose(out.double(), a, b)}")
        if not _close(lse.double(), want_lse):
            return wrong(f"on {what}: the output is right but lse is not: the merged lse is "
                         "log(exp(lse_a) + exp(lse_b)), the log of the sum of every exponential")
    return correct(f"right on all {len(CASES)} cases: other shapes, uneven blocks, scores that overflow exp, and a "
                   "block with no key. Merging block after block this way gives the attention over every key, "
                   "which is how each ring step adds its block")


# ---- self-check questions ------------------------------------------------------------------------------------


def _ring_mb(answer: object) -> Feedback:
    """Question 1: 8 ranks, 65,536 tokens, 8 key/value heads of 128 features, bfloat16, one forward."""
    ranks, tokens, heads, features, element = 8, 65_536, 8, 128, 2
    block = tokens // ranks * heads * features * element  # one rank's keys (or values)
    right = (ranks - 1) * 2 * block / 1e6
    value = as_number(answer)
    if value is None or not math.isfinite(value):
        return wrong(f"answer with a number of MB (10^6 bytes), got {answer!r}")

    def near(x: float) -> bool:
        return abs(value - x) <= 0.01 * x

    if near(right):
        return correct(f"one block is 65,536 / 8 tokens x 8 heads x 128 features x 2 bytes = {block / 1e6:.1f} MB; "
                       f"each of the 7 messages carries keys and values: 7 x 2 x {block / 1e6:.1f} = {right:.1f} MB")
    if near(right / 2):
        return wrong("that counts the keys only: each message carries the rank's keys and its values")
    if near(ranks * 2 * block / 1e6):
        return wrong("that is 8 messages: after 7 the rank has seen every block, so the last step sends nothing")
    if near(2 * block / 1e6):
        return wrong("that is one message; the block goes round the ring, one message per step but the last")
    if near(right * ranks):
        return wrong("that uses the whole sequence's keys and values: each rank holds 1/8 of the tokens")
    return wrong("one block is (tokens / ranks) x heads x features x 2 bytes; a rank sends its keys and values "
                 "once per step, in all steps but the last")


QUESTIONS_15 = (
    Question("Causal ring attention over 8 ranks: one sequence of 65,536 tokens, 8 key/value heads of 128 features, "
             "bfloat16 (2 bytes). How many MB (10^6 bytes) does each rank send in the forward pass of one attention "
             "layer?", grade=_ring_mb, example="123.4"),
    Question("A causal attention is split over 4 ranks in the plain way: rank 0 has the first quarter of the tokens, "
             "rank 3 the last. Which rank computes the most scores, and what evens the work?", (
                 Option("Rank 0, because its tokens come first; more ranks even it out.",
                        "no: rank 0's queries see only their own block of keys, so it computes the least"),
                 Option("Rank 3, whose queries see every earlier key; giving each rank one early and one late "
                        "chunk (zigzag) evens it.",
                        "the last queries see the most keys; with one chunk from each end, every rank gets the same "
                        "share of the triangle"),
                 Option("Every rank computes the same: the mask only hides scores after they are computed.",
                        "no: a block wholly after a rank's queries is skipped, never computed; rank 0 skips three"),
                 Option("Rank 3; skipping its diagonal block evens it.",
                        "no: the diagonal block holds each query's own and nearby keys, which it must see"),
             ), answer="b"),
    Question("A top-2 mixture-of-experts layer has 8 experts and gets 1,024 tokens, with a capacity factor of 1.0. "
             "The router sends 300 (token, expert) pairs to expert 3. What happens, as GShard and the Switch "
             "Transformer define capacity?", (
                 Option("All 300 pairs are computed: the capacity is only a hint.",
                        "no: each expert gets a buffer of capacity rows, and the pairs beyond it are not computed"),
                 Option("Expert 3 computes 256 pairs and drops 44: those tokens get nothing from expert 3 and go on "
                        "with their other expert's output and the residual connection.",
                        "capacity = 1.0 x 1,024 x 2 / 8 = 256; the rest are dropped for this layer"),
                 Option("The step fails with an error, and the batch must be made smaller.",
                        "no: dropping is the designed behaviour; nothing fails"),
                 Option("The 44 extra pairs go to the least busy expert instead.",
                        "no: in GShard and Switch the overflow is dropped; sending it elsewhere is another design"),
             ), answer="b"),
)
