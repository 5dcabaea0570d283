"""The FSDP2 worker: the program `torchrun` starts once per rank to train with ``fully_shard`` on CPU.

    torchrun --standalone --nproc-per-node 3 -m gpulab.distributed.fsdp.worker --epochs 5 --out DIR

Every rank builds the recipe's model, shards each parameter along dim 0 over a CPU device mesh
(``init_device_mesh("cpu", (world,))``, gloo) with ``fully_shard`` and runs the ordinary
``gpulab.train.fit`` loop. Each rank writes ``DIR/rank<N>.json``: its local shard shape of every
parameter and the bytes of parameters, gradients and optimizer state it holds (measured from the local
shards). Rank 0 gathers the full weights (``full_tensor()``) into ``DIR/model.pt``.

``--per-layer`` shards each layer as its own unit before the root (FSDP's usual wrapping: one layer's
weights gathered at a time). ``--profile`` runs training under ``torch.profiler`` and adds to the rank's
report the names of FSDP's events in the first step, in order, and how many collectives of each kind ran.
``--probe`` then measures one step of a separate probe model per setting (fp32, the bf16 policy, fp32 kept
gathered after forward: ``gpulab.distributed.fsdp.probe``) and adds it to the report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Sequence

import torch

from gpulab import argtypes
from gpulab.atomic import torch_save, write_json
from gpulab.distributed.launch.rank_io import exit_worker, run_rank
from gpulab.experiment import add_recipe_options, optimizer_for, recipe_from, setup


def local(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` this rank holds: a DTensor's local shard, or ``t`` itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def shard_report(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Local shard shapes and the bytes of parameters, gradients and optimizer state on this rank.

    ``bytes`` counts the shards' own numbers (``to_local().nbytes``); ``stored bytes`` the storage behind them,
    which FSDP2 pads to the first chunk's size (``untyped_storage().nbytes()``; a unit's gradient shards share
    one storage, counted once).
    """
    from gpulab.memory import storage_bytes

    params = dict(model.named_parameters())
    state = [local(v) for p in params.values() for v in optimizer.state.get(p, {}).values() if isinstance(v, torch.Tensor)]
    grads = [local(p.grad) for p in params.values() if p.grad is not None]
    return {"shapes": {name: list(local(p).shape) for name, p in params.items()},
            "full shapes": {name: list(p.shape) for name, p in params.items()},
            "bytes": {"parameters": sum(local(p).nbytes for p in params.values()),
                      "gradients": sum(g.nbytes for g in grads), "optimizer state": sum(v.nbytes for v in state)},
            "stored bytes": {"parameters": storage_bytes(local(p) for p in params.values()),
                             "gradients": storage_bytes(grads), "optimizer state": storage_bytes(state)}}


def save_dcp(folder: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, epochs: int, rank: int) -> None:
    """Each rank writes its shards with ``torch.distributed.checkpoint``; rank 0 records the epochs done."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=folder)
    if rank == 0:
        write_json(Path(folder) / "epochs.json", {"epochs": epochs})


def load_dcp(folder: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load a DCP checkpoint saved at any rank count into this sharding; the epoch to resume at."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=folder)  # reads the pieces of each tensor this rank's shards need
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return int(json.loads((Path(folder) / "epochs.json").read_text(encoding="utf-8"))["epochs"])


def profiler_report(prof) -> dict:
    """FSDP's events of the first training step, in order, and the count of each collective over the run."""
    events = sorted((e for e in prof.events() if e.name.startswith("FSDP::")), key=lambda e: e.time_range.start)
    names = [e.name for e in events]
    starts = [i for i, name in enumerate(names) if name == "FSDP::root_pre_forward"] + [len(names)]
    counts = {}
    for e in prof.events():
        if e.name.startswith("c10d::"):
            counts[e.name] = counts.get(e.name, 0) + 1
    return {"first step": names[starts[0]:starts[1]], "steps": len(starts) - 1, "collectives": counts}


def train(args: argparse.Namespace, rank: int, world: int) -> None:
    """One rank's job once the process group is up."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    recipe = recipe_from(args)
    run = setup(recipe)
    model = run.model
    mesh = init_device_mesh("cpu", (world,))
    if args.per_layer:  # each layer its own unit: its full weights exist only while it computes
        for layer in model.children():
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)  # parameters become DTensors, sharded on dim 0
    run.optimizer = optimizer = optimizer_for(model, recipe)  # built after sharding: its state is sharded too
    start_epoch = load_dcp(args.resume, model, optimizer) if args.resume else 0
    profiling = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if args.profile else None
    with profiling or contextlib.nullcontext():
        run.fit(start_epoch=start_epoch, device="cpu", progress=False, rank=rank, world_size=world)
    out = Path(args.out)
    if args.dcp:
        save_dcp(args.dcp, model, optimizer, recipe.epochs, rank)
    report = {"rank": rank, "world_size": world, **shard_report(model, optimizer)}
    if profiling is not None:
        report["profile"] = profiler_report(profiling)
    if args.probe:  # a model of its own: the trained weights stay as they are
        from gpulab.distributed.fsdp.probe import PROBE_SETTINGS, measure

        report["probe"] = [measure(mesh, name) for name in PROBE_SETTINGS]
    write_json(out / f"rank{rank}.json", report)
    full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    if rank == 0:  # full_tensor() is a collective: every rank gathers, rank 0 saves
        torch_save(out / "model.pt", {k: v.detach().clone() for k, v in full.items()})
        print(f"done: {recipe.epochs} epochs on {world} rank(s)", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point under torchrun: set up gloo, train, always tear down."""
    p = argparse.ArgumentParser(prog="gpulab.distributed.fsdp.worker", description=__doc__.splitlines()[0])
    add_recipe_options(p)
    p.add_argument("--out", required=True, help="folder for rank<N>.json and rank 0's model.pt")
    p.add_argument("--dcp", help="save a distributed checkpoint (DCP) in this folder at the end")
    p.add_argument("--resume", help="resume from a DCP folder saved by --dcp, at any rank count")
    p.add_argument("--per-layer", action="store_true", help="shard each layer as its own unit, then the root")
    p.add_argument("--profile", action="store_true", help="record FSDP's events and collectives (torch.profiler)")
    p.add_argument("--probe", action="store_true", help="measure one step of a probe model per setting "
                   "(gpulab.distributed.fsdp.probe): padded shards, peak bytes, all-gathers")
    p.add_argument("--pg-timeout", type=argtypes.positive_float, default=120.0, help="seconds any collective may wait")
    args = p.parse_args(argv)
    return run_rank("gloo", args.pg_timeout, lambda env: train(args, env.rank, env.world))


if __name__ == "__main__":
    exit_worker(main())
