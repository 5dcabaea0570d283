"""Epochs per second: the article's loop (DataLoader, per-batch copy) vs gpulab's loop (data on the device once).

Same model (Net1(13, 16, 32, 1)), optimizer (Adam lr 0.01), batch size and data; only the data
path differs. Prints the figures and their ratio, measured in this one run::

    python benchmarks/loop_vs_article.py --epochs 20 --repeats 3 --device cpu
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _epochs_per_s(train, epochs: int, device: torch.device) -> float:
    from gpulab.devices import synchronize

    synchronize(device)
    start = time.perf_counter()
    train(epochs)
    synchronize(device)
    return epochs / (time.perf_counter() - start)


def measure(device: str, epochs: int, repeats: int, batch_size: int = 128) -> dict:
    """Median epochs/s of each loop over ``repeats`` runs (after one warm-up epoch each), and their ratio."""
    from gpulab.article import article_loader, train_article
    from gpulab.devices import pick_device
    from gpulab.experiment import Recipe, article_model, boston_data, optimizer_for
    from gpulab.train import fit

    dev = pick_device(device)
    recipe = Recipe(epochs=epochs, batch_size=batch_size)
    data = boston_data(recipe, device="cpu")
    loader = article_loader(data.X_train, data.y_train, batch_size=batch_size)

    def article(n: int) -> None:
        model = article_model(recipe, device=dev)
        train_article(model, loader, epochs=n, device=dev, optimizer=optimizer_for(model, recipe))

    def gpulab_loop(n: int) -> None:
        model = article_model(recipe, device=dev)
        fit(model, (data.X_train, data.y_train), epochs=n, optimizer=optimizer_for(model, recipe),
            batch_size=batch_size, device=dev, seed=recipe.seed, progress=False)

    article(1), gpulab_loop(1)  # warm-up: first calls allocate and load kernels
    runs = {"article": [], "gpulab": []}
    for _ in range(repeats):  # interleaved, so a busy machine slows both alike
        runs["article"].append(_epochs_per_s(article, epochs, dev))
        runs["gpulab"].append(_epochs_per_s(gpulab_loop, epochs, dev))
    a, g = statistics.median(runs["article"]), statistics.median(runs["gpulab"])
    return {"device": str(dev), "epochs": epochs, "repeats": repeats, "article_epochs_per_s": a,
            "gpulab_epochs_per_s": g, "ratio": g / a}


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, measure on each device, print one line per device."""
    from gpulab.cli import positive_int

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=positive_int, default=20, help="epochs per timed run (default 20)")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed runs per loop (default 3)")
    parser.add_argument("--device", action="append",
                        help="device(s) to measure (repeatable); default: cpu, and cuda:0 where present")
    parser.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = args.device or (["cpu", "cuda:0"] if torch.cuda.is_available() else ["cpu"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU thread(s), Boston train set 404 rows, batch 128")
    for device in devices:
        try:
            r = measure(device, args.epochs, args.repeats)
        except ValueError as exc:
            parser.error(str(exc))
        print(f"{r['device']:>7}: article loop {r['article_epochs_per_s']:8.1f} epochs/s | "
              f"gpulab loop {r['gpulab_epochs_per_s']:8.1f} epochs/s | gpulab/article = {r['ratio']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
