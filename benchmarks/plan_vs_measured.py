"""`gpulab plan` against real runs: notebook 13's model on 4 ranks, calibrated on some layouts, tested on the others.

    python benchmarks/plan_vs_measured.py            # 4 CPU ranks (gloo)
    python benchmarks/plan_vs_measured.py --device cuda --steps 10   # 4 GPUs (nccl), one a rank

One torchrun launch (``gpulab.distributed.pipelines.driver.run_lesson``, parts ``calibrate`` and ``layouts``): the
``calibrate`` part measures this machine as a cluster with every rank busy (each kind of call over groups of 4 and
2, a block's compute at every shape, a rank alone), the ``layouts`` part times every layout of
``pipelines.layouts.LAYOUTS`` in turns. Prints the calls' fits, the exposed share each calibration layout measured,
then for the validation layouts the predicted and measured steps, their spread, Spearman's rank correlation and the
criteria, and the bytes each layout holds. Prints figures; passes or fails nothing.
"""

from __future__ import annotations

import argparse
import warnings

from gpulab.distributed.pipelines import plan as pipelines_plan
from gpulab.distributed.pipelines.driver import run_lesson
from gpulab.tables import format_rows


def main() -> None:
    """Launch once, print the calibration, the ranking's verdict and the bytes held."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--steps", type=int, default=7, help="rounds in which every layout steps once")
    args = p.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "4 ranks on N CPU cores"
        lesson = run_lesson(timeout=600, parts=("calibrate", "layouts"), steps=args.steps, device=args.device)
    machine = pipelines_plan.cluster(lesson)
    print(f"launch {lesson.seconds:.1f} s; a rank alone computes in {machine.calibration.alone:.2f} of its busy time")
    print(format_rows([{"call": k, "ranks": n, "latency ms": f.alpha * 1e3, "GB/s": f.bandwidth / 1e9}
                       for (k, n), f in sorted(machine.calibration.collectives.items())]))
    print(format_rows(pipelines_plan.exposed_rows(lesson)))
    verdict = pipelines_plan.ranking(lesson)
    print(format_rows(verdict["rows"]))
    print(f"Spearman {verdict['spearman']:.3f}, worst factor {verdict['worst factor']:.2f}, criteria {verdict['met']}")
    print(format_rows(pipelines_plan.memory_rows(lesson)))


if __name__ == "__main__":
    main()
