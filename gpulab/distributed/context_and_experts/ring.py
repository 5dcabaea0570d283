"""Ring attention by hand: the sequence split over ranks, key/value blocks passed around a ring, partial results
merged with the log-sum-exp rule (Liu et al. 2023, https://arxiv.org/abs/2310.01889).

Pure parts (any process, no group): :func:`spans` (which positions each rank holds, ``plain`` or ``zigzag``),
:func:`pair_kind` (what the causal mask leaves of a query chunk against a key chunk), :func:`block_forward` and
:func:`block_backward` (one block of attention with its log-sum-exp, and its gradients), :func:`merge` (two partial
results into one), :func:`attention` (one process's causal attention, the reference) and :func:`work_formula`.

Inside a process group: :class:`Ring` sends one tensor to the next rank while it receives one from the previous,
and :func:`ring_attention` is an autograd function whose forward and backward both go round the ring:

    ring = Ring(group, ranks=[0, 1, 2, 3], me=rank_index, timeout_s=60)
    setup = RingSetup(spans("zigzag", seq=64, ranks=4), me, ring, causal=True)
    out = ring_attention(q_local, k_local, v_local, setup)   # this rank's rows of the whole attention
    out.backward(grad)                                         # gradients of q, k and v's local rows
    setup.work, setup.sent                                     # score entries computed and messages per step

Each step a rank computes its queries against the key/value block it holds, then hands that block on. Forward:
``n - 1`` messages a rank, each its key and value block. Backward: the block and its gradients travel together
(``n - 1`` messages), then one more message takes the gradients home.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field
from typing import Callable

import torch

LAYOUTS = ("plain", "zigzag")
KINDS = ("skip", "full", "diagonal")


def spans(layout: str, seq: int, ranks: int) -> list[list[tuple[int, int]]]:
    """The ``(start, stop)`` positions of each rank's chunks of a sequence of ``seq`` tokens.

    ``plain``: rank ``r`` holds the ``r``-th of ``ranks`` equal pieces. ``zigzag`` (head-tail): the sequence is cut
    into ``2 x ranks`` pieces and rank ``r`` holds piece ``r`` and piece ``2 x ranks - 1 - r``, one early and one
    late, as Llama 3 and torch's context parallelism split it.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}: use one of {', '.join(LAYOUTS)}")
    if isinstance(seq, bool) or isinstance(ranks, bool) or not (isinstance(seq, int) and isinstance(ranks, int)):
        raise ValueError(f"seq={seq!r} and ranks={ranks!r} must be whole numbers")
    pieces = ranks if layout == "plain" else 2 * ranks
    if ranks < 1 or seq < 1 or seq % pieces:
        raise ValueError(f"seq={seq} tokens do not cut into {pieces} equal pieces for {ranks} rank(s) ({layout})")
    size = seq // pieces
    if layout == "plain":
        return [[(r * size, (r + 1) * size)] for r in range(ranks)]
    return [[(r * size, (r + 1) * size), ((pieces - 1 - r) * size, (pieces - r) * size)] for r in range(ranks)]


def positions(chunks: list[tuple[int, int]]) -> list[int]:
    """Every position of a rank's chunks, in the order the rank holds them."""
    return [p for start, stop in chunks for p in range(start, stop)]


def pair_kind(query: tuple[int, int], key: tuple[int, int], causal: bool = True) -> str:
    """What a query chunk computes against a key chunk: ``full``, ``diagonal`` (the causal mask inside) or ``skip``.

    Under the causal mask a query sees only keys at its position or before. A key chunk wholly after the query
    chunk is skipped; one wholly before is computed in full; the same chunk keeps its lower triangle.
    """
    if not causal:
        return "full"
    if key[0] >= query[1]:
        return "skip"
    if key[1] <= query[0]:
        return "full"
    if key == query:
        return "diagonal"
    raise ValueError(f"chunks {query} and {key} overlap without being equal: cut the sequence into equal chunks")


def _scores(q: torch.Tensor, k: torch.Tensor, diagonal: bool, scale: float) -> torch.Tensor:
    s = (q @ k.transpose(-2, -1)) * scale
    if diagonal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return s


def block_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, diagonal: bool,
                  scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of queries ``q`` over one block of keys and values: its output and the log-sum-exp of its scores.

    ``diagonal``: the block is the query chunk's own, so the causal mask hides the keys after each query. Shapes:
    ``(..., tokens, features)``; the log-sum-exp has one number per query, ``(..., tokens)``.
    """
    s = _scores(q, k, diagonal, scale)
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse.unsqueeze(-1)) @ v, lse


def merge(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor,
          lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two partial attentions of the same queries over different keys, as one: the log-sum-exp rule.

    Each partial output is a softmax-weighted mean over its own keys. Over both sets of keys, each must count in
    proportion to its share of the exponentials: ``exp(lse_a - lse)`` and ``exp(lse_b - lse)``, where
    ``lse = log(exp(lse_a) + exp(lse_b))`` (``torch.logaddexp``, which never overflows).
    """
    lse = torch.logaddexp(lse_a, lse_b)
    return (torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b), lse


def average_merge(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor,
                  lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The control: the mean of the two partial outputs, as if every block had the same share. It is wrong."""
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)


def block_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, lse: torch.Tensor,
                   delta: torch.Tensor, diagonal: bool, scale: float) -> tuple[torch.Tensor, ...]:
    """One block's share of the gradients of ``q``, ``k`` and ``v``, from the whole attention's ``lse``.

    The block's probabilities are recomputed from the scores and the final log-sum-exp (nothing was kept).
    ``delta`` is ``(dout * out).sum(-1)``: the softmax's backward subtracts it from each row.
    """
    p = torch.exp(_scores(q, k, diagonal, scale) - lse.unsqueeze(-1))
    dv = p.transpose(-2, -1) @ dout
    ds = p * (dout @ v.transpose(-2, -1) - delta.unsqueeze(-1))
    return (ds @ k) * scale, (ds.transpose(-2, -1) @ q) * scale, dv


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """One process's attention over the whole sequence: ``softmax(q k^T / sqrt(d) + mask) v``, scores kept."""
    s = _scores(q, k, causal, 1.0 / math.sqrt(q.shape[-1]))
    return torch.softmax(s, dim=-1) @ v


def work_formula(layout: str, seq: int, ranks: int, causal: bool = True) -> list[int]:
    """Score entries each rank computes in one forward (a computed block counts whole, mask or not)."""
    layout_spans = spans(layout, seq, ranks)
    return [sum((q1 - q0) * (k1 - k0) for q0, q1 in mine for owner in layout_spans for k0, k1 in owner
                if pair_kind((q0, q1), (k0, k1), causal) != "skip") for mine in layout_spans]


# ---- the ring: one message to the next rank, one from the previous ------------------------------------------


class Ring:
    """Point-to-point messages round a group: ``ranks`` (global ranks, in ring order), this process at ``me``."""

    def __init__(self, group, ranks: list[int], me: int, timeout_s: float) -> None:
        self.group, self.ranks, self.me, self.timeout = group, list(ranks), me, datetime.timedelta(seconds=timeout_s)

    @property
    def size(self) -> int:
        return len(self.ranks)

    def start_shift(self, t: torch.Tensor) -> Callable[[], torch.Tensor]:
        """Send ``t`` to the next rank and receive the previous rank's tensor of the same shape; returns a function
        that waits (within the time limit) and gives the received tensor."""
        import torch.distributed as dist

        t = t.contiguous()
        got = torch.empty_like(t)
        nxt, prev = self.ranks[(self.me + 1) % self.size], self.ranks[(self.me - 1) % self.size]
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, nxt, self.group),
                                        dist.P2POp(dist.irecv, got, prev, self.group)])

        def wait() -> torch.Tensor:
            for work in works:
                work.wait(self.timeout)
            return got

        return wait


@dataclass
class RingSetup:
    """What one rank's ring attention needs: every rank's chunks, its place, the ring, the mask and the merge rule.

    ``send_home=False`` is the backward's control: the key and value gradients stay where their last step left
    them. ``work`` and ``sent`` fill in as the ring runs: score entries computed and messages sent, per step.
    """

    layout_spans: list[list[tuple[int, int]]]
    me: int
    ring: Ring
    causal: bool = True
    combine: Callable = merge
    send_home: bool = True
    work: dict[str, list[int]] = field(default_factory=lambda: {"forward": [], "backward": []})
    sent: dict[str, list[int]] = field(default_factory=lambda: {"forward": [], "backward": []})


def _split(t: torch.Tensor, chunks: list[tuple[int, int]]) -> list[torch.Tensor]:
    return list(t.split([stop - start for start, stop in chunks], dim=-2))


def _pairs(setup: RingSetup, owner: int):
    """``(i, j, kind)`` for this rank's query chunk ``i`` and the owner's key chunk ``j`` that are not skipped."""
    mine, theirs = setup.layout_spans[setup.me], setup.layout_spans[owner]
    for i, qs in enumerate(mine):
        for j, ks in enumerate(theirs):
            kind = pair_kind(qs, ks, setup.causal)
            if kind != "skip":
                yield i, j, kind


def forward_steps(q, k, v, setup: RingSetup, scale: float):
    """The ring's forward on this rank: ``n`` steps, each its queries against the block it holds, merged."""
    n, me = setup.ring.size, setup.me
    qs, parts = _split(q, setup.layout_spans[me]), [None] * len(setup.layout_spans[me])
    kv = torch.stack([k, v])  # one message: this block's keys and values
    for step in range(n):
        owner = (me - step) % n
        receive = setup.ring.start_shift(kv) if step < n - 1 else None  # the next block travels meanwhile
        ks, vs = _split(kv[0], setup.layout_spans[owner]), _split(kv[1], setup.layout_spans[owner])
        work = 0
        for i, j, kind in _pairs(setup, owner):
            part = block_forward(qs[i], ks[j], vs[j], kind == "diagonal", scale)
            parts[i] = part if parts[i] is None else setup.combine(*parts[i], *part)
            work += qs[i].shape[-2] * ks[j].shape[-2]
        setup.work["forward"].append(work)
        setup.sent["forward"].append(0 if receive is None else 1)
        if receive is not None:
            kv = receive()
    return torch.cat([p[0] for p in parts], dim=-2), torch.cat([p[1] for p in parts], dim=-1)


def backward_steps(dout, q, k, v, out, lse, setup: RingSetup, scale: float):
    """The ring's backward on this rank: the blocks go round again, each with its gradients so far."""
    n, me = setup.ring.size, setup.me
    qs, dos, lses = _split(q, setup.layout_spans[me]), _split(dout, setup.layout_spans[me]), _split(
        lse.unsqueeze(-1), setup.layout_spans[me])
    deltas = _split((dout * out).sum(-1, keepdim=True), setup.layout_spans[me])
    dq = [torch.zeros_like(x) for x in qs]
    kv, dkv = torch.stack([k, v]), torch.zeros(2, *k.shape, dtype=k.dtype, device=k.device)
    for step in range(n):
        owner = (me - step) % n
        ks, vs = _split(kv[0], setup.layout_spans[owner]), _split(kv[1], setup.layout_spans[owner])
        dks, dvs = _split(dkv[0], setup.layout_spans[owner]), _split(dkv[1], setup.layout_spans[owner])
        work = 0
        for i, j, kind in _pairs(setup, owner):
            a, b, c = block_backward(qs[i], ks[j], vs[j], dos[i], lses[i].squeeze(-1), deltas[i].squeeze(-1),
                                     kind == "diagonal", scale)
            dq[i] += a
            dks[j] += b  # views of dkv: the block's gradients accumulate where the block is
            dvs[j] += c
            work += qs[i].shape[-2] * ks[j].shape[-2]
        setup.work["backward"].append(work)
        if step < n - 1:  # the block and its gradients so far travel together
            both = setup.ring.start_shift(torch.cat([kv, dkv]))()
            kv, dkv = both[:2], both[2:].clone()
            setup.sent["backward"].append(1)
        elif n > 1 and setup.send_home:  # the block this rank holds last belongs to the next rank
            dkv = setup.ring.start_shift(dkv)()
            setup.sent["backward"].append(1)
        else:
            setup.sent["backward"].append(0)
    return torch.cat(dq, dim=-2), dkv[0], dkv[1]


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, setup):
        scale = 1.0 / math.sqrt(q.shape[-1])
        out, lse = forward_steps(q, k, v, setup, scale)
        ctx.save_for_backward(q, k, v, out, lse)  # this rank's rows only: no scores, no other rank's blocks
        ctx.setup, ctx.scale = setup, scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = backward_steps(dout.contiguous(), q, k, v, out, lse, ctx.setup, ctx.scale)
        return dq, dk, dv, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, setup: RingSetup) -> torch.Tensor:
    """This rank's rows of the attention over the whole sequence, its keys and values passed round the ring.

    ``q``, ``k``, ``v``: this rank's rows ``(..., tokens, features)``, its chunks in order. Autograd runs the
    backward round the ring too.
    """
    return _RingAttention.apply(q, k, v, setup)
