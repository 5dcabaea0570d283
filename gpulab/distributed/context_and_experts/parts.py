"""The parts of notebook 15's rank program, each run inside a group of 4 CPU ranks (gloo), each returning JSON-ready
dicts (the worker, ``gpulab.distributed.context_and_experts.worker``, runs the parts a launch asks for):

- :func:`ring_part`: causal ring attention (``ring``) at 2 ranks (two pairs at once) and at 4, ``plain`` and
  ``zigzag`` splits, forward and backward against one process, with two controls; the work and the messages of
  every step; messages and bytes counted by the profiler; bytes saved for backward as the sequence grows;
- :func:`torch_cp_part`: torch's ``context_parallel`` on the 4 ranks, where it runs and where it refuses;
- :func:`moe_part`: a mixture-of-experts layer with its experts on ranks (``moe``): expert parallelism at 2 ranks
  (two pairs), at 4, and with data parallelism on a 2 x 2 grid, each against one process, with a control.

Every rank builds the same data from the same seeds, so each can compute one process's result itself.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from gpulab import memory
from gpulab.distributed.context_and_experts import moe, ring

SHAPE = {"batch": 2, "heads": 2, "seq": 32, "features": 8}  # the ring's equality runs (float64)
MEMORY_SEQS = (256, 512, 1024, 2048)  # sequence lengths of the saved-bytes runs (float32)
MEMORY_SHAPE = {"batch": 1, "heads": 4, "features": 16}
MOE = {"hidden": 8, "ffn": 16, "tokens": 24, "top_k": 2}  # tokens: per rank
SEND, ALL_TO_ALL = "gloo:send", "gloo:all_to_all"


def _max_over(value: float, group=None) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def _qkv(seed: int, seq: int, dtype=torch.float64, shape: dict = SHAPE) -> tuple[torch.Tensor, ...]:
    """Queries, keys, values and an output gradient for a whole sequence, the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape["batch"], shape["heads"], seq, shape["features"], generator=g, dtype=dtype)
                 for _ in range(4))


def _rows(t: torch.Tensor, chunks: list[tuple[int, int]]) -> torch.Tensor:
    return t[..., ring.positions(chunks), :]


def ring_run(group, ranks: list[int], me: int, layout: str, seed: int, timeout_s: float, *,
             combine=ring.merge, send_home: bool = True) -> dict:
    """One causal ring attention forward and backward over ``ranks``; differences from one process, work, messages."""
    seq = SHAPE["seq"]
    q, k, v, grad = _qkv(seed, seq)
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    reference = ring.attention(*full)
    (reference * grad).sum().backward()
    layout_spans = ring.spans(layout, seq, len(ranks))
    mine = layout_spans[me]
    local = [_rows(t, mine).clone().requires_grad_() for t in (q, k, v)]
    setup = ring.RingSetup(layout_spans, me, ring.Ring(group, ranks, me, timeout_s), True, combine, send_home)
    out = ring.ring_attention(*local, setup)
    (out * _rows(grad, mine)).sum().backward()
    forward = (out - _rows(reference.detach(), mine)).abs().max().item()
    backward = max((mine_t.grad - _rows(whole.grad, mine)).abs().max().item() for mine_t, whole in zip(local, full))
    return {"ranks": len(ranks), "layout": layout, "chunks": [list(c) for c in mine],
            "forward_difference": _max_over(forward, group), "backward_difference": _max_over(backward, group),
            "work": setup.work, "sent": setup.sent}


def _sends(prof, element_size: int) -> dict:
    """Messages this rank sent in a profiled block, and their bytes (from each send's tensor shape)."""
    shapes = [e.input_shapes[0] for e in prof.events() if e.name == SEND]
    return {"messages": len(shapes), "bytes": sum(math.prod(s) for s in shapes) * element_size}


def profiled_ring(group, ranks: list[int], me: int, seed: int, timeout_s: float) -> dict:
    """A zigzag ring's forward and backward, each under the profiler: messages and bytes this rank sent."""
    from torch.profiler import ProfilerActivity, profile

    q, k, v, grad = _qkv(seed, SHAPE["seq"])
    layout_spans = ring.spans("zigzag", SHAPE["seq"], len(ranks))
    local = [_rows(t, layout_spans[me]).clone().requires_grad_() for t in (q, k, v)]
    setup = ring.RingSetup(layout_spans, me, ring.Ring(group, ranks, me, timeout_s))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, acc_events=True) as forward:
        out = ring.ring_attention(*local, setup)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, acc_events=True) as backward:
        (out * _rows(grad, layout_spans[me])).sum().backward()
    size = local[1].element_size()
    return {"forward": _sends(forward, size), "backward": _sends(backward, size), "block_bytes": local[1].numel() * size,
            "shape": dict(SHAPE)}


def saved_bytes(rank: int, ranks: list[int], group, timeout_s: float) -> list[dict]:
    """Bytes one attention forward saves for backward, as the sequence grows: each rank of a zigzag ring, and
    (rank 0 only) one process keeping its scores and one process with torch's fused attention."""
    import torch.nn.functional as F

    rows, me, nobody = [], ranks.index(rank), torch.nn.Module()
    for seq in MEMORY_SEQS:
        q, k, v, _ = _qkv(seq, seq, torch.float32, MEMORY_SHAPE)
        layout_spans = ring.spans("zigzag", seq, len(ranks))
        local = [_rows(t, layout_spans[me]).clone().requires_grad_() for t in (q, k, v)]
        setup = ring.RingSetup(layout_spans, me, ring.Ring(group, ranks, me, timeout_s))
        with memory.saved_tensors(nobody, *local) as kept:
            ring.ring_attention(*local, setup)
        row = {"seq": seq, "ring_rank": kept["saved_activations"] + kept["saved_input"]}
        if rank == ranks[0]:
            whole = [t.clone().requires_grad_() for t in (q, k, v)]
            with memory.saved_tensors(nobody, *whole) as scores:
                ring.attention(*whole)
            with memory.saved_tensors(nobody, *whole) as fused:
                F.scaled_dot_product_attention(*whole, is_causal=True)
            row["scores_kept"] = scores["saved_activations"] + scores["saved_input"]
            row["fused"] = fused["saved_activations"] + fused["saved_input"]
        rows.append(row)
    return rows


def ring_part(rank: int, world: int, pair, timeout_s: float) -> dict:
    """Ring attention at 2 ranks (each pair its own ring, its own data) and at 4, both splits, the controls."""
    pair_ranks = [rank - rank % 2, rank - rank % 2 + 1]
    everyone = list(range(world))
    runs = []
    for layout in ring.LAYOUTS:
        runs.append(ring_run(pair, pair_ranks, rank % 2, layout, seed=10 + rank // 2, timeout_s=timeout_s))
        runs.append(ring_run(None, everyone, rank, layout, seed=20, timeout_s=timeout_s))
    controls = {"average merge": ring_run(None, everyone, rank, "zigzag", 20, timeout_s, combine=ring.average_merge),
                "gradients not sent home": ring_run(None, everyone, rank, "zigzag", 20, timeout_s, send_home=False)}
    return {"runs": runs, "controls": controls, "profiled": profiled_ring(None, everyone, rank, 30, timeout_s),
            "memory": saved_bytes(rank, everyone, None, timeout_s), "memory_shape": dict(MEMORY_SHAPE)}


# ---- torch's own context parallelism ------------------------------------------------------------------------

#: (name, causal, kernel): the MATH kernel (plain matrix products and a softmax) or ``None``, torch's choice, which
#: on CPU is its fused kernel ``_scaled_dot_product_flash_attention_for_cpu``. Left out: a non-causal attention with
#: torch's choice, whose sharding plan DTensor works out by tracing the fused kernel op by op, slowly on CPU.
CP_CASES = (("non-causal, MATH kernel", False, "MATH"),
            ("causal, MATH kernel", True, "MATH"),
            ("causal, torch's choice of kernel", True, None))


def _counts(comm) -> dict[str, int]:
    return {str(op).split(".")[-1]: int(n) for op, n in comm.get_comm_counts().items()}


def _cp_case(mesh, causal: bool, backend: str | None, seq: int) -> dict:
    """One forward and backward of attention inside ``context_parallel``: the collectives of each phase, the
    largest difference from one process, the positions this rank held; or torch's error, in its own words."""
    import contextlib

    import torch.nn.functional as F
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.experimental import context_parallel
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, grad = _qkv(40, seq, torch.float32)
    whole = [t.clone().requires_grad_() for t in (q, k, v)]
    reference = F.scaled_dot_product_attention(*whole, is_causal=causal)
    (reference * grad).sum().backward()
    buffers = [t.clone() for t in (q, k, v, grad)] + [torch.arange(seq, dtype=torch.float32)]
    found: dict = {"ok": False}
    chooser = sdpa_kernel([getattr(SDPBackend, backend)]) if backend else contextlib.nullcontext()
    with chooser, context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2, 2, 0]):
        held = buffers[-1].long().tolist()  # the positions this rank holds inside the context
        found["positions"] = held
        try:  # caught inside the context: in torch 2.11 an error that left it kept SDPA patched
            local = [t.detach().clone().requires_grad_() for t in buffers[:3]]
            with CommDebugMode() as comm:
                out = F.scaled_dot_product_attention(*local, is_causal=causal)
            found["forward"] = _counts(comm)
            with CommDebugMode() as comm:
                (out * buffers[3]).sum().backward()
            found["backward"] = _counts(comm)
            found["difference"] = max((out.detach() - reference.detach()[..., held, :]).abs().max().item(),
                                      *((mine.grad - full.grad[..., held, :]).abs().max().item()
                                        for mine, full in zip(local, whole)))
            found["ok"] = True
        except Exception as exc:  # torch refuses: keep its own words
            found["error"] = type(exc).__name__
            found["message"] = (str(exc).strip().splitlines() or [""])[0]
    return found


def torch_cp_part(rank: int, world: int) -> dict:
    """Each case of :data:`CP_CASES` on a 1-D mesh of every rank: what ran, what torch said."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh, seq = init_device_mesh("cpu", (world,)), 4 * world
    cases = []
    for name, causal, backend in CP_CASES:
        case = _cp_case(mesh, causal, backend, seq)
        held = [None] * world
        dist.all_gather_object(held, case.get("positions"))
        cases.append({"case": name, "causal": causal, "kernel": backend or "torch's choice", **case,
                      "positions_per_rank": held, "difference": _max_over(case.get("difference", 0.0))})
    return {"seq": seq, "cases": cases, "torch": torch.__version__}


# ---- experts on ranks ----------------------------------------------------------------------------------------


def _moe_weights(experts: int, seed: int = 50) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    h, f = MOE["hidden"], MOE["ffn"]
    router = torch.randn(experts, h, generator=g, dtype=torch.float64)
    up = torch.randn(experts, h, f, generator=g, dtype=torch.float64) / math.sqrt(h)
    down = torch.randn(experts, f, h, generator=g, dtype=torch.float64) / math.sqrt(f)
    return router, up, down


def _tokens(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return (torch.randn(MOE["tokens"], MOE["hidden"], generator=g, dtype=torch.float64),
            torch.randn(MOE["tokens"], MOE["hidden"], generator=g, dtype=torch.float64))


def moe_run(name: str, rank: int, experts: int, ep_group, ep_ranks: list[int], data_ranks: list[int],
            timeout_s: float, *, router_group=None, expert_group=None, unsort: bool = True) -> dict:
    """One forward and backward of the layer with ``experts`` experts spread over ``ep_ranks``; the same layer in
    one process on the tokens of every rank in ``data_ranks``. The router's gradient is summed over
    ``router_group``; with ``expert_group`` (data parallelism), each expert's gradient over its copies too."""
    router, up, down = _moe_weights(experts)
    per_rank, me = experts // len(ep_ranks), ep_ranks.index(rank)
    first = me * per_rank
    # one process: every expert, every token of data_ranks, the loss as their mean over all of them
    total = len(data_ranks) * MOE["tokens"]
    ref = [t.clone().requires_grad_() for t in (router, up, down)]
    data = [_tokens(r) for r in data_ranks]
    xs = torch.cat([x for x, _ in data]).requires_grad_()
    (moe.moe_reference(xs, *ref, MOE["top_k"]) * torch.cat([t for _, t in data])).sum().div(total).backward()
    # this rank: its experts, its tokens
    mine = [router.clone().requires_grad_(), up[first:first + per_rank].clone().requires_grad_(),
            down[first:first + per_rank].clone().requires_grad_()]
    x, target = _tokens(rank)
    x.requires_grad_()
    y, routed = moe.expert_parallel(x, mine[0], mine[1], mine[2], MOE["top_k"], first, ep_group, len(ep_ranks),
                                    timeout_s, unsort=unsort)
    (y * target).sum().div(total).backward()
    dist.all_reduce(mine[0].grad, group=router_group)  # the router is a copy on every rank: sum its gradient
    if expert_group is not None:
        dist.all_reduce(mine[1].grad, group=expert_group)
        dist.all_reduce(mine[2].grad, group=expert_group)
    at = data_ranks.index(rank) * MOE["tokens"]
    ref_y = moe.moe_reference(xs.detach(), router, up, down, MOE["top_k"])[at:at + MOE["tokens"]]
    differences = {
        "output": (y.detach() - ref_y).abs().max().item(),
        "input gradient": (x.grad - xs.grad[at:at + MOE["tokens"]]).abs().max().item(),
        "router gradient": (mine[0].grad - ref[0].grad).abs().max().item(),
        "expert gradients": max((mine[i].grad - ref[i].grad[first:first + per_rank]).abs().max().item()
                                for i in (1, 2))}
    return {"run": name, "experts": experts, "ep": len(ep_ranks), "experts_here": [first, first + per_rank],
            "differences": {k: _max_over(v) for k, v in differences.items()}, **routed}


def profiled_moe(rank: int, world: int, timeout_s: float) -> dict:
    """Expert parallelism over every rank, forward and backward each under the profiler: all-to-alls and bytes."""
    from torch.profiler import ProfilerActivity, profile

    router, up, down = _moe_weights(2 * world)
    up, down = up[rank * 2:rank * 2 + 2].clone().requires_grad_(), down[rank * 2:rank * 2 + 2].clone()
    x, target = _tokens(rank)
    x.requires_grad_()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, acc_events=True) as forward:
        y, routed = moe.expert_parallel(x, router, up, down, MOE["top_k"], rank * 2, None, world, timeout_s)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, acc_events=True) as backward:
        (y * target).sum().backward()

    def calls(prof) -> list[list]:
        return [list(e.input_shapes[0]) for e in prof.events() if e.name == ALL_TO_ALL]

    return {"forward": calls(forward), "backward": calls(backward), "send": routed["send"], "hidden": MOE["hidden"]}


def moe_part(rank: int, world: int, pair, across, timeout_s: float) -> dict:
    """Expert parallelism at 2 ranks (two pairs), at 4, and 2 x 2 with data parallelism; a control each way."""
    pair_ranks, everyone = [rank - rank % 2, rank - rank % 2 + 1], list(range(world))
    runs = [moe_run("EP 2", rank, 4, pair, pair_ranks, pair_ranks, timeout_s, router_group=pair),
            moe_run("EP 4", rank, 8, None, everyone, everyone, timeout_s),
            moe_run("DP 2 x EP 2", rank, 4, pair, pair_ranks, everyone, timeout_s, expert_group=across)]
    controls = [moe_run("EP 4, results not put back in token order", rank, 8, None, everyone, everyone, timeout_s,
                        unsort=False),
                moe_run("DP 2 x EP 2, expert gradients not summed over DP", rank, 4, pair, pair_ranks, everyone,
                        timeout_s)]
    return {"runs": runs, "controls": controls, "profiled": profiled_moe(rank, world, timeout_s),
            "shape": dict(MOE)}
