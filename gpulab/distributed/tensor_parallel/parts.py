"""The parts of notebook 12's rank program, each run inside a CPU process group (gloo) and returning JSON-ready dicts.

- :func:`megatron_part`: an MLP split by hand with plain tensors (column split, then row split, one
  all-reduce), every rank's shards and partial outputs, next to one process and a split that is wrong;
- :func:`block_part`: a :class:`gpulab.tp_model.TinyBlock` under each plan of ``tp_model.PLANS``, trained a few
  steps beside one process, with the collectives of each phase counted by ``CommDebugMode`` and the bytes one
  forward pass saves for backward (:func:`saved_bytes`), split and in one process;
- :func:`vocab_part`: an output layer whose vocabulary does not divide by the ranks, with ``loss_parallel``.

``gpulab.distributed.tensor_parallel.traffic`` times the collectives of a larger block; the worker
(``gpulab.distributed.tensor_parallel.worker``) runs the parts a launch asks for.
"""

from __future__ import annotations

import contextlib
import copy
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F

from gpulab.step import train_step
from gpulab.tp_model import MLP, TinyBlock, padded_head, padded_vocab, shard_sizes, tp_plan

PHASES = ("forward", "backward", "optimizer")
LR = 0.05
MLP_SIZES = (4, 8)  # hidden, ffn of the hand-split MLP: small enough to draw every number
BLOCK = {"hidden": 16, "heads": 4, "ffn": 64}
BATCH, SEQ = 2, 8
# CommDebugMode's module tracker hooks backward; when a block's input needs no gradient torch warns once per rank
warnings.filterwarnings("ignore", message="Full backward hook is firing")


def _numbers(t: torch.Tensor) -> list:
    return t.detach().double().tolist()


def _max_over_ranks(value: float) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _count(counter) -> dict[str, int]:
    """``CommDebugMode`` counts by collective name (``all_reduce``, ``all_gather``, ``reduce_scatter``)."""
    names = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
             "allreduce_": "all_reduce", "allgather_into_tensor_coalesced_": "all_gather"}
    out: dict[str, int] = {}
    for op, n in counter.items():
        name = getattr(op, "__name__", str(op)).split(".")[-1]
        out[names.get(name, name)] = out.get(names.get(name, name), 0) + int(n)
    return out


def shard(t: torch.Tensor, dim: int, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s piece of ``t`` along ``dim``, split like ``torch.chunk`` (DTensor's ``Shard(dim)``)."""
    sizes = shard_sizes(t.shape[dim], world)
    return t.narrow(dim, sum(sizes[:rank]), sizes[rank])


def megatron_part(rank: int, world: int, seed: int = 0) -> dict:
    """The MLP ``down(gelu(up(x)))`` on plain tensors: rank ``r`` keeps rows ``r`` of ``up`` and columns ``r`` of
    ``down`` (``torch.chunk``), computes a partial output, and one all-reduce sums them."""
    from torch.distributed.tensor.debug import CommDebugMode

    hidden, ffn = MLP_SIZES
    torch.manual_seed(seed)
    mlp, x = MLP(hidden, ffn), torch.randn(3, hidden)
    first = sum(shard_sizes(ffn, world)[:rank])  # this rank's first hidden unit
    up_w, up_b = shard(mlp.up.weight.detach(), 0, rank, world), shard(mlp.up.bias.detach(), 0, rank, world)
    down_w = shard(mlp.down.weight.detach(), 1, rank, world)
    with CommDebugMode() as counter:
        h = F.gelu(x @ up_w.T + up_b)  # whole hidden units: GELU needs nothing from the other ranks
        partial = h @ down_w.T  # a partial sum of every output
        out = partial.clone()
        dist.all_reduce(out)
        out = out + mlp.down.bias.detach()  # the bias once, after the sum
    # a control: split up by its input features instead, so GELU sees partial sums
    wrong = F.gelu(shard(x, 1, rank, world) @ shard(mlp.up.weight.detach(), 1, rank, world).T
                   + (mlp.up.bias.detach() if rank == 0 else 0.0)) @ mlp.down.weight.detach().T
    dist.all_reduce(wrong)
    wrong = wrong + mlp.down.bias.detach()
    with torch.no_grad():
        one = mlp(x)
    return {"x": _numbers(x), "up_weight": _numbers(up_w), "up_bias": _numbers(up_b), "down_weight": _numbers(down_w),
            "hidden": _numbers(h), "partial": _numbers(partial), "output": _numbers(out), "one_process": _numbers(one),
            "full_up_shape": list(mlp.up.weight.shape), "full_down_shape": list(mlp.down.weight.shape),
            "units": [first, first + len(up_w)],  # hidden units [start, stop): rows of up, columns of down
            "collectives": _count(counter.get_comm_counts()),
            "max_difference": _max_over_ranks((out - one).abs().max().item()),
            "control_max_difference": _max_over_ranks((wrong - one).abs().max().item())}


class PhaseCounter:
    """A ``phases`` hook for :func:`gpulab.step.train_step`: counts each phase's collectives with ``CommDebugMode``."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        from torch.distributed.tensor.debug import CommDebugMode

        with CommDebugMode() as counter:
            yield
        found = _count(counter.get_comm_counts())
        for op, n in found.items():
            self.counts.setdefault(name, {})[op] = self.counts.get(name, {}).get(op, 0) + n


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def saved_bytes(model: torch.nn.Module, x: torch.Tensor) -> dict[str, int]:
    """Bytes one forward pass of ``model`` on ``x`` saves for backward on this rank, by the module that saved them.

    Counted with ``saved_tensors_hooks`` once per storage, parameters left out, as ``gpulab.memory.saved_tensors``
    counts; a DTensor counts its local part. What a module's own code saves (attention, GELU) counts under it
    (``attn``, ``mlp``); what its layers save, under the layer (``attn.q``).
    """
    def storage(t: torch.Tensor):
        with torch.no_grad():
            return _local(t).untyped_storage()

    seen, stack, by_module = {storage(p).data_ptr() for p in model.parameters()}, ["(block)"], {}
    names = {m: name for name, m in model.named_modules() if name}

    def enter(module, args) -> None:
        stack.append(names[module])

    def leave(module, args, output) -> None:
        stack.pop()

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = storage(t)
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            by_module[stack[-1]] = by_module.get(stack[-1], 0) + s.nbytes()
        return t

    hooks = [h for m in names for h in (m.register_forward_pre_hook(enter), m.register_forward_hook(leave))]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return by_module


def weight_difference(model: torch.nn.Module, reference: torch.nn.Module) -> float:
    """The largest difference between ``model``'s full parameters (gathered) and ``reference``'s, on any rank."""
    ref = dict(reference.named_parameters())
    diff = max((_full(p.detach()) - ref[name].detach()).abs().max().item() for name, p in model.named_parameters())
    return _max_over_ranks(diff)


def _global_loss(loss: torch.Tensor, share: float | None) -> float:
    """The batch's mean loss; ``share``: this rank's part of the sequence (None: every rank saw all of it)."""
    loss = _full(loss).detach().double().reshape(1)
    if share is not None:  # each rank's loss is the mean over its part of the sequence
        loss = loss * share
        dist.all_reduce(loss)
    return float(loss.item())


def train_block(plan: str, rank: int, world: int, steps: int, dtype: torch.dtype = torch.float32,
                weighted: bool = True) -> dict:
    """``steps`` SGD steps of a TinyBlock under ``plan`` beside one process on the whole batch.

    Under ``sp`` each rank holds its part of the sequence and weights its mean loss by its share of it;
    ``weighted=False`` (a control) forgets that, so the gradients come out about ``world`` times too large.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    g = torch.Generator().manual_seed(1)
    x, y = (torch.randn(BATCH, SEQ, BLOCK["hidden"], generator=g, dtype=dtype) for _ in range(2))
    one = TinyBlock(**BLOCK).to(dtype)
    tp = copy.deepcopy(one)
    parallelize_module(tp, init_device_mesh("cpu", (world,)), tp_plan(plan))
    sharded = plan == "sp"
    xs, ys = (shard(x, 1, rank, world), shard(y, 1, rank, world)) if sharded else (x, y)
    share = xs.shape[1] / x.shape[1] if sharded else None
    saved = {"saved_bytes": saved_bytes(tp, xs.clone()), "saved_bytes_one_process": saved_bytes(one, x),
             "tokens": BATCH * SEQ, "block": dict(BLOCK)}  # xs.clone(): the rank's tokens alone, as a block gets them
    opt_one, opt_tp = torch.optim.SGD(one.parameters(), lr=LR), torch.optim.SGD(tp.parameters(), lr=LR)
    first, losses_tp, losses_one = PhaseCounter(), [], []
    for step in range(steps):
        loss = train_step(tp, opt_tp, xs, ys, weight=share if sharded and weighted else 1.0,
                          phases=first if step == 0 else None)
        losses_tp.append(_global_loss(loss, share))
        losses_one.append(float(train_step(one, opt_one, x, y).item()))
    return {"plan": plan, "dtype": str(dtype).replace("torch.", ""), "weighted": weighted, "steps": steps,
            "counts": first.counts, "losses": losses_tp, **saved, "losses_one_process": losses_one,
            "max_weight_difference": weight_difference(tp, one),
            "max_loss_difference": max(abs(a - b) for a, b in zip(losses_tp, losses_one)),
            "local_shapes": {name: list(_local(p).shape) for name, p in tp.named_parameters()},
            "full_shapes": {name: list(p.shape) for name, p in tp.named_parameters()}}


def block_part(rank: int, world: int, steps: int) -> list[dict]:
    """Every plan in float32, Megatron's plan in float64 too, and the unweighted sequence-parallel control in
    float32 and float64 (a bug's difference does not shrink with the precision, rounding's does)."""
    runs = [train_block(plan, rank, world, steps) for plan in ("naive", "tp", "sp")]
    runs.append(train_block("tp", rank, world, steps, dtype=torch.float64))
    runs += [train_block("sp", rank, world, steps, dtype=dtype, weighted=False)
             for dtype in (torch.float32, torch.float64)]
    return runs


def _train_head(vocab: int, method: str, rank: int, world: int, steps: int, base) -> dict:
    """An output layer of ``vocab`` rows (``base``'s rows first) split by rows over the ranks, beside one process.

    ``method``: ``gather`` all-gathers the logits (``ColwiseParallel(output_layouts=Replicate())``) before an
    ordinary cross-entropy; ``loss_parallel`` keeps them split and computes the loss where they are.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, loss_parallel, parallelize_module

    one = padded_head(base, vocab)
    tp = copy.deepcopy(one)
    if method == "gather":
        style = ColwiseParallel(output_layouts=Replicate())
    else:
        style = ColwiseParallel(use_local_output=False)
    parallelize_module(tp, init_device_mesh("cpu", (world,)), style)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(6, base.in_features, generator=g), torch.randint(0, base.out_features, (6,), generator=g)
    opt_one, opt_tp = torch.optim.SGD(one.parameters(), lr=LR), torch.optim.SGD(tp.parameters(), lr=LR)
    counter, losses, losses_one = PhaseCounter(), [], []
    for step in range(steps):
        with loss_parallel() if method == "loss_parallel" else contextlib.nullcontext():  # forward and backward
            loss = train_step(tp, opt_tp, x, y, loss_fn=F.cross_entropy, phases=counter if step == 0 else None)
        losses.append(float(_full(loss).item()))
        losses_one.append(float(train_step(one, opt_one, x, y, loss_fn=F.cross_entropy).item()))
    return {"vocab": vocab, "method": method, "rows_here": int(tp.weight.to_local().shape[0]),
            "counts": counter.counts, "losses": losses, "losses_one_process": losses_one,
            "max_weight_difference": weight_difference(tp, one),
            "max_loss_difference": max(abs(a - b) for a, b in zip(losses, losses_one))}


def vocab_part(rank: int, world: int, steps: int, vocab: int, hidden: int = 8) -> list[dict]:
    """``vocab`` rows as they are (uneven shards: gathered logits, then ``loss_parallel``) and, with
    ``loss_parallel``, padded to a multiple of ``world`` (Megatron-LM's rule)."""
    torch.manual_seed(3)
    base = torch.nn.Linear(hidden, vocab)
    runs = [(vocab, "gather"), (vocab, "loss_parallel")]
    if padded_vocab(vocab, world) != vocab:
        runs.append((padded_vocab(vocab, world), "loss_parallel"))
    return [_train_head(v, method, rank, world, steps, base) for v, method in runs]
