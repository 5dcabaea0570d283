"""Seconds for the Boston recipe: the article's loop, the same with a per-batch loss.item(), gpulab's loop.

The article's loop keeps the data in a DataLoader and copies every batch; gpulab's puts the data
on the device once. Same model (Net1(13, 16, 32, 1)), optimizer (Adam lr 0.01), batch size and data. The article's
loop reads no loss inside its batch loop; the second variant adds ``loss.item()`` after every
step (on a GPU the host then waits for the device at every batch). Prints the median seconds of
each over the repeats, measured in this one run::

    python benchmarks/loop_vs_article.py --epochs 100 --repeats 5 --device cpu --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

LOOPS = ("article", "article + loss.item()", "gpulab fit")


def _seconds(train, epochs: int, device: torch.device) -> float:
    from gpulab.devices import synchronize

    synchronize(device)
    start = time.perf_counter()
    train(epochs)
    synchronize(device)
    return time.perf_counter() - start


def measure(device: str, epochs: int, repeats: int, batch_size: int = 128) -> dict:
    """Median seconds of ``epochs`` epochs for each loop over ``repeats`` interleaved runs (after a warm-up)."""
    from gpulab.article import article_loader, train_article
    from gpulab.devices import pick_device
    from gpulab.experiment import Recipe, article_model, boston_data, optimizer_for
    from gpulab.train import fit

    dev = pick_device(device)
    recipe = Recipe(epochs=epochs, batch_size=batch_size)
    data = boston_data(recipe, device="cpu")
    loader = article_loader(data.X_train, data.y_train, batch_size=batch_size)

    def article(n: int, per_batch: bool = False) -> None:
        model = article_model(recipe, device=dev)
        train_article(model, loader, epochs=n, device=dev, optimizer=optimizer_for(model, recipe),
                      loss_item_per_batch=per_batch)

    def gpulab_loop(n: int) -> None:
        model = article_model(recipe, device=dev)
        fit(model, (data.X_train, data.y_train), epochs=n, optimizer=optimizer_for(model, recipe),
            batch_size=batch_size, device=dev, seed=recipe.seed, progress=False)

    loops = dict(zip(LOOPS, (article, lambda n: article(n, per_batch=True), gpulab_loop)))
    for train in loops.values():
        train(1)  # warm-up: first calls allocate and load kernels
    runs: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(repeats):  # interleaved, so a busy machine slows every loop alike
        for name, train in loops.items():
            runs[name].append(_seconds(train, epochs, dev))
    return {"device": str(dev), "epochs": epochs, "repeats": repeats, "batches_per_epoch": len(loader),
            "seconds": {name: statistics.median(r) for name, r in runs.items()},
            "spread": {name: (min(r), max(r)) for name, r in runs.items()}}


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, measure on each device, print one line per loop and device."""
    from gpulab.cli import positive_int

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=positive_int, default=100, help="epochs per timed run (default 100, the recipe)")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed runs per loop (default 5)")
    parser.add_argument("--device", action="append",
                        help="device(s) to measure (repeatable); default: cpu, and cuda:0 where present")
    parser.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = args.device or (["cpu", "cuda:0"] if torch.cuda.is_available() else ["cpu"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU thread(s), Boston train set 404 rows, "
          f"batch 128, {args.epochs} epochs, median (min-max) of {args.repeats} runs")
    for device in devices:
        try:
            r = measure(device, args.epochs, args.repeats)
        except ValueError as exc:
            parser.error(str(exc))
        base = r["seconds"]["article"]
        for name in LOOPS:
            low, high = r["spread"][name]
            print(f"{r['device']:>7} {name:<22} {r['seconds'][name]:7.3f} s ({low:.3f}-{high:.3f})  "
                  f"{base / r['seconds'][name]:5.2f}x the article loop's speed")
        extra = (r["seconds"]["article + loss.item()"] - base) / (args.epochs * r["batches_per_epoch"])
        print(f"{r['device']:>7} per-batch loss.item() costs {extra * 1e6:+.1f} µs per batch here")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
