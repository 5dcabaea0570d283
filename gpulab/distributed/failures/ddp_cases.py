"""The DDP cases of ``gpulab.distributed.failures.worker``: unused parameters and uneven inputs.

Each case, like the worker's others, returns ``(broken, fixed)``: the mistake (whose real error the
worker catches and prints) and its fix, both run on every rank of the worker's process group.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn


def short_group(args: argparse.Namespace, seconds: float | None = None) -> dist.ProcessGroup:
    """A new group of every rank with the short timeout, or ``seconds`` (a timed-out gloo group is broken for good)."""
    return dist.new_group(timeout=datetime.timedelta(seconds=args.short_timeout if seconds is None else seconds))


class TwoHeads(nn.Module):
    """A body with two heads; ``forward`` uses only the first head, so the second gets no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head, self.spare_head = nn.Linear(4, 8), nn.Linear(8, 1), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


def unused(rank: int, world: int, args: argparse.Namespace) -> tuple[Callable, Callable]:
    """DDP over a model with a parameter its forward never uses; fixed: ``find_unused_parameters=True``."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def steps(model: nn.Module, n: int = 2) -> None:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(n):
            optimizer.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            optimizer.step()

    def broken() -> None:
        torch.manual_seed(0)
        steps(DDP(TwoHeads()))

    def fixed() -> str:
        torch.manual_seed(0)
        steps(DDP(TwoHeads(), find_unused_parameters=True))
        return "find_unused_parameters=True: 2 steps done (the cleaner fix: delete spare_head)"
    return broken, fixed


def uneven(rank: int, world: int, args: argparse.Namespace) -> tuple[Callable, Callable]:
    """Rank r has 2 + r batches under DDP: the rank with fewer finishes and goes on; fixed: the loop in ``Join``."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP

    batches = [torch.randn(8, 4) for _ in range(2 + rank)]  # rank 0: 2 batches, rank 1: 3

    def train(model: nn.Module) -> None:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for x in batches:
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()  # DDP all-reduces the gradients during backward
            optimizer.step()

    def ddp() -> DDP:
        torch.manual_seed(0)
        return DDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)), process_group=short_group(args))

    def broken() -> str:
        train(ddp())  # returns only on the rank with the fewest batches: it goes on (here: to the barrier before the fix)
        return f"this rank's {len(batches)} batches are done, it goes on"

    def fixed() -> str:
        model, calls = ddp(), {"own": 0, "zeros": 0}

        def count(group, bucket):  # no annotations: DDP checks them, and here they would be strings
            calls["zeros" if not bucket.buffer().any() else "own"] += 1  # zeros: Join's shadow of a batch
            return allreduce_hook(group, bucket)  # the all-reduce DDP does anyway

        model.register_comm_hook(model.process_group, count)
        with Join([model]):
            train(model)
        mine = torch.cat([p.detach().flatten() for p in model.parameters()])
        every = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(every, mine, group=model.process_group)
        same = all(torch.equal(every[0], other) for other in every)
        return (f"{len(batches)} batches, {calls['own'] + calls['zeros']} gradient all-reduces: {calls['own']} with "
                f"its own gradients, {calls['zeros']} of zeros; same model on every rank: {same}")
    return broken, fixed
