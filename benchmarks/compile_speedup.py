"""torch.compile on one training step: cold compile time and steady-state speed-up over eager.

    python benchmarks/compile_speedup.py [--hidden 16 32] [--batch-size 128] [--device auto] [--threads N] [--cached]

The model is the article's ``Net1(13, 16, 32, 1)`` (``--hidden`` changes the two hidden layers),
trained with Adam on random data of the Boston shape; ``gpulab.profiling.compile_timing.measure_compile`` times
the first compiled step (compiling included) and the median eager and compiled steps. Only the model
(its forward and backward) is compiled: the loss and Adam's step run eagerly in both.
Inductor's on-disk caches are off, so the compile is cold even on a second run; ``--cached`` uses them
(what a second run of an ordinary program gets).
Prints figures; passes or fails nothing.
"""

from __future__ import annotations

import argparse
import json

import torch

from gpulab import argtypes, devices
from gpulab.profiling import compile_timing as compiling
from gpulab.models import Net1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=argtypes.positive_int, nargs=2, default=[16, 32], metavar=("H1", "H2"))
    parser.add_argument("--batch-size", type=argtypes.positive_int, default=128)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=argtypes.positive_int, default=None,
                        help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--min-run-time", type=argtypes.positive_float, default=1.0,
                        help="seconds per steady-state timing")
    parser.add_argument("--cached", action="store_true", help="let inductor use its on-disk caches (a warm compile)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    device = devices.pick_device(args.device)
    support = compiling.compile_support(device)
    if not support["ok"]:
        print(compiling.skip_message(support))
        return
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Net1(13, *args.hidden, 1)
    x, y = torch.randn(args.batch_size, 13), torch.randn(args.batch_size, 1)
    timing = compiling.measure_compile(model, x, y, min_run_time=args.min_run_time, device=device,
                                        fresh=not args.cached)
    figures = {"device": str(device), "description": devices.describe(device).description,
               "torch": torch.__version__, "threads": torch.get_num_threads(), "model": f"Net1(13, {args.hidden[0]}, "
               f"{args.hidden[1]}, 1)", "batch_size": args.batch_size, "cached": args.cached, **timing.to_dict()}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{figures['model']}, batch {args.batch_size}, on {device} ({figures['description']}), "
          f"torch {torch.__version__}, {figures['threads']} threads{', inductor caches on' if args.cached else ', inductor caches off (cold)'}")
    print(f"first compiled step (compiling included): {timing.first_step_s:.1f} s")
    print(f"steady-state step: eager {timing.eager_step_s * 1e3:.3f} ms, compiled {timing.compiled_step_s * 1e3:.3f} ms")
    print(f"speed-up: x{timing.speedup:.2f}")


if __name__ == "__main__":
    main()
