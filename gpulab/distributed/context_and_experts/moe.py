"""A mixture-of-experts layer, in one process and with its experts spread over ranks (expert parallelism).

A **router** (a linear layer) scores each token against every expert; each token goes to its ``top_k`` best
experts, and the layer's output is the experts' outputs weighted by the router's probabilities, renormalised over
the chosen ones (as Mixtral does, https://arxiv.org/abs/2401.04088). Pure parts (any process):

    logits = x @ router.T
    experts, weights, probs = route(logits, top_k=2)     # (tokens, k) expert ids, their weights, all probabilities
    y = moe_reference(x, router, up, down, top_k=2)       # every expert here: the reference
    tokens_per_expert(experts, 8); capacity(tokens, 8, 2, factor=1.25); dropped(counts, cap)
    load_balancing_loss(probs, experts)                   # Switch Transformer's auxiliary loss (1 when even)
    send_counts(experts, experts_per_rank, ranks)         # all_to_all's split sizes for this routing

In a process group, :func:`expert_parallel` sends each token to the rank that holds its expert with
``all_to_all_single`` (uneven splits), runs the experts there and sends the results back the same way.
:class:`AllToAll` is that collective as an autograd function: its backward is the all-to-all the other way.
"""

from __future__ import annotations

import datetime
import math

import torch
import torch.nn.functional as F


def route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each token's ``top_k`` experts, their weights (softmax over the chosen) and every expert's probability."""
    probs = torch.softmax(logits, dim=-1)
    top, experts = logits.topk(top_k, dim=-1)
    return experts, torch.softmax(top, dim=-1), probs


def expert_mlp(x: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """One expert: ``gelu(x @ up) @ down`` (``up``: hidden x ffn, ``down``: ffn x hidden)."""
    return F.gelu(x @ up) @ down


def moe_reference(x: torch.Tensor, router: torch.Tensor, up: torch.Tensor, down: torch.Tensor,
                  top_k: int) -> torch.Tensor:
    """The layer in one process: ``up`` and ``down`` hold every expert (experts x ...), ``router`` experts x hidden."""
    experts, weights, _ = route(x @ router.T, top_k)
    y = torch.zeros_like(x)
    for e in range(up.shape[0]):
        token, slot = (experts == e).nonzero(as_tuple=True)
        if len(token):
            y = y.index_add(0, token, weights[token, slot].unsqueeze(-1) * expert_mlp(x[token], up[e], down[e]))
    return y


def tokens_per_expert(experts: torch.Tensor, count: int) -> list[int]:
    """How many (token, choice) pairs each of ``count`` experts receives."""
    return torch.bincount(experts.reshape(-1), minlength=count).tolist()


def capacity(tokens: int, experts: int, top_k: int, factor: float) -> int:
    """An expert's capacity: ``ceil(factor x tokens x top_k / experts)`` pairs (GShard, Switch Transformer)."""
    if tokens < 1 or experts < 1 or top_k < 1 or not factor > 0:
        raise ValueError(f"tokens={tokens}, experts={experts}, top_k={top_k}, factor={factor}: all must be positive")
    return math.ceil(factor * tokens * top_k / experts)


def dropped(counts: list[int], cap: int) -> int:
    """Pairs over capacity: each expert keeps its first ``cap`` and drops the rest."""
    return sum(max(0, c - cap) for c in counts)


def load_balancing_loss(probs: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """Switch Transformer's auxiliary loss, ``E x sum_e f_e P_e`` (Fedus et al. 2021, eq. 4, for top-k pairs).

    ``f_e``: the share of (token, choice) pairs routed to expert ``e``; ``P_e``: the mean router probability of
    ``e``. It is 1 when both are even, and larger when the router favours some experts. Only ``P_e`` has a
    gradient, so minimising it lowers the probability of the busiest experts.
    """
    count = probs.shape[-1]
    share = torch.bincount(experts.reshape(-1), minlength=count).to(probs.dtype) / experts.numel()
    return count * (share * probs.mean(dim=0)).sum()


def send_counts(experts: torch.Tensor, experts_per_rank: int, ranks: int) -> list[int]:
    """all_to_all's input split sizes: how many (token, choice) pairs this rank sends to each rank.

    Expert ``e`` lives on rank ``e // experts_per_rank``; pairs are sent sorted by expert.
    """
    return torch.bincount(experts.reshape(-1) // experts_per_rank, minlength=ranks).tolist()


def all_to_all(x: torch.Tensor, send: list[int], receive: list[int], group, timeout_s: float) -> torch.Tensor:
    """``all_to_all_single`` with uneven splits: ``send[r]`` rows of ``x`` go to rank ``r`` of ``group``, in order,
    and ``receive[r]`` rows come from it; waits at most ``timeout_s``."""
    import torch.distributed as dist

    out = x.new_empty((sum(receive), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), receive, send, group=group, async_op=True).wait(
        datetime.timedelta(seconds=timeout_s))
    return out


class AllToAll(torch.autograd.Function):
    """:func:`all_to_all`, differentiable: backward sends the gradients back the other way."""

    @staticmethod
    def forward(ctx, x, send, receive, group, timeout_s):
        ctx.args = (send, receive, group, timeout_s)
        return all_to_all(x, send, receive, group, timeout_s)

    @staticmethod
    def backward(ctx, grad):
        send, receive, group, timeout_s = ctx.args
        return AllToAll.apply(grad, receive, send, group, timeout_s), None, None, None, None


def exchange_counts(counts: list[int], group, timeout_s: float) -> list[int]:
    """What every rank will send to this one: an all-to-all of one number per rank."""
    ones = [1] * len(counts)
    return all_to_all(torch.tensor(counts, dtype=torch.int64), ones, ones, group, timeout_s).tolist()


def expert_parallel(x: torch.Tensor, router: torch.Tensor, up: torch.Tensor, down: torch.Tensor, top_k: int,
                    first: int, group, ranks: int, timeout_s: float, unsort: bool = True) -> tuple[torch.Tensor, dict]:
    """This rank's tokens through the layer when each rank of ``group`` holds ``up.shape[0]`` experts.

    This rank holds experts ``first`` .. ``first + len(up) - 1``; ``router`` is every expert's row. Four
    all-to-alls: the pair counts, the expert ids, the tokens, and the results back. ``unsort=False`` is the
    control: the results come back in the order they were sent (sorted by expert), not in token order.
    Returns the output and what was routed: pairs sent to each rank, received from each, and per expert.
    """
    per_rank = up.shape[0]
    experts, weights, _ = route(x @ router.T, top_k)
    flat = experts.reshape(-1)
    order = torch.argsort(flat, stable=True)  # pairs sorted by expert, so by destination rank
    token = torch.arange(x.shape[0]).repeat_interleave(top_k)[order]
    send = send_counts(experts, per_rank, ranks)
    receive = exchange_counts(send, group, timeout_s)
    got_ids = all_to_all(flat[order], send, receive, group, timeout_s)  # which expert each row is for
    got = AllToAll.apply(x[token], send, receive, group, timeout_s)
    done = torch.zeros_like(got)
    for local in range(per_rank):
        rows = (got_ids == first + local).nonzero(as_tuple=True)[0]
        if len(rows):
            done = done.index_copy(0, rows, expert_mlp(got[rows], up[local], down[local]))
    back = AllToAll.apply(done, receive, send, group, timeout_s)
    where = token if unsort else torch.arange(x.shape[0]).repeat_interleave(top_k)
    y = torch.zeros_like(x).index_add(0, where, weights.reshape(-1)[order].unsqueeze(-1) * back)
    return y, {"send": send, "receive": receive, "per_expert": tokens_per_expert(experts, router.shape[0])}
