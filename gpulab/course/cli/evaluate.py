"""`gpulab evaluate`: every model on the same K seeded Boston splits, with and without B, mean ± std.

The article's MLP, the improved MLP and three scikit-learn baselines (see ``gpulab.evaluation``).
Then the paired comparisons on those same splits (``gpulab.paired_comparison``): each model against
GradientBoosting, and each model without B against itself with B.
The tables go to stdout; one progress line per split goes to stderr (``--quiet`` silences it).
"""

from __future__ import annotations

import argparse
import sys

from gpulab.argtypes import positive_int


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `gpulab evaluate`."""
    p = subparsers.add_parser(
        "evaluate",
        help="compare the article's MLP, an improved MLP and scikit-learn baselines over repeated splits",
        description="Repeated evaluation on the Boston data: every model on the same K seeded 80/20 splits "
        "(seeds 0..K-1); prints mean ± std test RMSE, mean R², training time and device per model, then "
        "paired per-split differences (each model vs GradientBoosting, without B vs with B).",
    )
    p.add_argument("--repeats", type=positive_int, default=5, help="number of seeded splits K (default 5)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--include-b", dest="b", action="store_const", const="with",
                       help="only the data with the B column (default: with and without, side by side)")
    which.add_argument("--no-b", dest="b", action="store_const", const="without",
                       help="only the data without the B column")
    p.add_argument("--device", default="auto",
                   help="device for the two MLPs: auto (default), cpu, cuda, cuda:N, mps or xpu "
                   "(scikit-learn always runs on the CPU)")
    p.add_argument("--improved-epochs", type=positive_int, default=None,
                   help="most epochs for the improved MLP (default 200; early stopping usually ends sooner)")
    p.add_argument("--members", type=positive_int, default=None,
                   help="number of MLPs in the improved ensemble (default 12)")
    p.add_argument("--json", metavar="PATH", help="also write every score (and the per-split RMSEs) here as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run, b=None)
    return p


def run(args: argparse.Namespace) -> int:
    """Evaluate, print the table and the improved/GradientBoosting ratio, optionally write JSON."""
    from dataclasses import asdict, replace

    from gpulab.atomic import write_json
    from gpulab.devices import pick_device
    from gpulab.evaluation import ImprovedConfig, format_table, ratio, repeated_evaluation
    from gpulab.paired_comparison import compare_features, compare_models, format_paired
    from gpulab.timing import Stopwatch

    device = pick_device(args.device)
    config = ImprovedConfig()
    if args.improved_epochs is not None:
        config = replace(config, epochs=args.improved_epochs)
    if args.members is not None:
        config = replace(config, members=args.members)
    variants = {"with": [False], "without": [True], None: [False, True]}[args.b]

    def report(model: str, seed: int, rmse: float) -> None:
        if not args.quiet:
            sys.stderr.write(f"split seed {seed}: {model:<17} test RMSE {rmse:.3f}\n")
            sys.stderr.flush()

    with Stopwatch(device) as clock:
        scores, ratios, parts, pairs = [], {}, {}, {}
        for drop_b in variants:
            part = repeated_evaluation(args.repeats, drop_b=drop_b, device=device, improved=config, on_result=report)
            scores += part
            parts[part[0].features] = part
            ratios[part[0].features] = ratio(part)
            pairs[f"models, {part[0].features}"] = compare_models(part)
        if len(parts) == 2:
            pairs["without B vs with B"] = compare_features(parts["with B"], parts["without B"])
    seconds = clock.seconds
    print(f"{args.repeats} split(s) (seeds 0..{args.repeats - 1}), 80/20, standardised on the training part; "
          f"MLPs on {device}")
    print(format_table(scores))
    for features, value in ratios.items():
        print(f"improved MLP / GradientBoosting mean test RMSE ({features}): {value:.3f}")
    print("\nPaired on the same splits: A - B per split (negative: A has the lower test RMSE)")
    for title, results in pairs.items():
        print(f"\n{title}:\n{format_paired(results)}")
    print(f"\ntotal {seconds:.1f} s")
    if args.json:
        write_json(args.json, {
            "repeats": args.repeats,
            "seeds": list(range(args.repeats)),
            "device": str(device),
            "improved_config": asdict(config),
            "models": [s.to_dict() for s in scores],
            "ratio_improved_to_gradient_boosting": ratios,
            "paired": {title: [r.to_dict() for r in results] for title, results in pairs.items()},
            "seconds": seconds,
        })
    return 0
