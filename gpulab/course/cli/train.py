"""`gpulab train`: the article's Boston experiment on one device (optionally nn.DataParallel).

Built on ``gpulab.experiment`` and ``gpulab.train.fit`` exactly as ``gpulab ddp`` is, so the
same ``--seed``, ``--batch-size``, ``--epochs`` and ``--lr`` give the same final weights.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from gpulab.experiment import add_recipe_options, recipe_from


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `gpulab train`."""
    p = subparsers.add_parser(
        "train",
        help="train the article's Net1 on the Boston data and report test RMSE and R²",
        description="Train the article's Net1(13, 16, 32, 1) on the Boston housing data (Adam, MSE) "
        "and report test RMSE, R² and training time.",
    )
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N, mps or xpu")
    add_recipe_options(p)
    p.add_argument("--data-parallel", action="store_true",
                   help="wrap the model in nn.DataParallel over every CUDA GPU (CUDA devices only)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--save", metavar="PATH", help="write the trained state_dict here (no 'module.' prefix)")
    p.add_argument("--json", metavar="PATH", help="write recipe, device, history and metrics here as JSON")
    p.set_defaults(func=run)
    return p


def _wrap_data_parallel(model: nn.Module, device: torch.device) -> tuple[nn.Module, list[int], str]:
    """``nn.DataParallel`` over all CUDA GPUs with ``device`` first; other devices stay unwrapped."""
    if device.type != "cuda":
        return model, [], (f"note: nn.DataParallel splits batches over CUDA GPUs only; on {device.type} "
                           "the model runs unwrapped (with no GPU, DataParallel would just call the module)")
    first = device.index or 0
    ids = [first] + [i for i in range(torch.cuda.device_count()) if i != first]
    note = f"nn.DataParallel over {len(ids)} GPU(s): {ids}"
    if len(ids) == 1:
        note += " (one GPU: every batch goes to it unchanged, no speed-up)"
    return nn.DataParallel(model, device_ids=ids), ids, note


def run(args: argparse.Namespace) -> int:
    """Train, evaluate, report; optional --save and --json. Returns the exit status."""
    from gpulab.atomic import torch_save, write_json
    from gpulab.devices import pick_device
    from gpulab.experiment import setup
    from gpulab.timing import Stopwatch
    from gpulab.train import evaluate

    device = pick_device(args.device)
    recipe = recipe_from(args)
    run_setup = setup(recipe, device)
    data, model = run_setup.data, run_setup.model
    net, device_ids = model, []
    if args.data_parallel:
        net, device_ids, note = _wrap_data_parallel(model, device)
        print(note)
    with Stopwatch(device) as clock:
        history = run_setup.fit(net, device=device, progress=not args.no_progress)
    train_seconds = clock.seconds
    metrics = evaluate(model, data.X_test, data.y_test)
    print(f"device {device}  epochs {recipe.epochs}  batch {recipe.batch_size}  lr {recipe.lr:g}  seed {recipe.seed}"
          f"{'  without B' if recipe.drop_b else ''}")
    print(f"test RMSE {metrics['rmse']:.3f}  R² {metrics['r2']:.3f}  train {train_seconds:.2f} s")
    if args.save:
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        torch_save(args.save, state)
        print(f"saved state_dict to {args.save}")
    if args.json:
        write_json(args.json, {
            "recipe": recipe.to_dict(),
            "device": str(device),
            "data_parallel": {"requested": bool(args.data_parallel), "device_ids": device_ids},
            "history": history.to_dict(),
            "metrics": metrics,
            "train_seconds": train_seconds,
            "feature_names": list(data.feature_names),
        })
        print(f"wrote {args.json}")
    return 0
