"""`gpulab plan` against real runs: five layouts of notebook 13's model on 4 CPU ranks, predicted and measured.

    python benchmarks/plan_vs_measured.py

One torchrun launch (``gpulab.distributed.pipelines.run_lesson``): the ``calibrate`` part measures this machine
as a cluster (matmul rate, copy bandwidth, all-reduce times with every rank busy), the ``layouts`` part trains
DDP, FSDP, TP, a 1F1B pipeline and FSDP x TP for a few Adam steps. Prints the cluster, then per layout the
predicted and measured step (ms) and bytes held (parameters, gradients, optimizer state and live activations).
Prints figures; passes or fails nothing.
"""

from __future__ import annotations

import warnings

from gpulab.distributed.pipelines import cluster, run_lesson, validation_rows
from gpulab.tables import format_rows

COLUMNS = ["layout", "predicted ms", "compute ms", "comm ms", "bubble ms", "measured ms", "measured / predicted",
           "predicted MiB", "measured MiB", "memory measured / predicted"]


def main() -> None:
    """Launch once, print the cluster and the table."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "4 ranks on N CPU cores"
        lesson = run_lesson(timeout=300, parts=("calibrate", "layouts"), steps=5)
    machine = cluster(lesson)
    print(f"cluster: {machine.gpus} ranks, {machine.peak_flops / 1e9:.1f} GFLOP/s, "
          f"{machine.memory_bandwidth / 1e9:.1f} GB/s memory, link latency {machine.latency * 1e6:.0f} us, "
          f"link bandwidth {machine.bandwidth / 1e9:.2f} GB/s (launch {lesson.seconds:.1f} s)")
    print(format_rows(validation_rows(lesson), COLUMNS))


if __name__ == "__main__":
    main()
