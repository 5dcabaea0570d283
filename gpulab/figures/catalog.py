"""Every schematic of the course by name: ``notebooks/figures/NAME.svg`` is drawn by ``STATIC[NAME]()``.

Each topic module lists its own schematics in a ``STATIC`` dict (name -> a function that returns a
matplotlib figure); the names start with the number of the notebook that first shows them.
"""

from __future__ import annotations

from typing import Callable

from gpulab.figures import (collectives, context_and_experts, data_parallel, ddp, failures, hardware, kernels,
                            memory, pipelines, profiling, tensor_parallel, transfers)

MODULES = (hardware, transfers, data_parallel, ddp, memory, collectives, failures, profiling, tensor_parallel, pipelines,
           kernels, context_and_experts)


def _collect() -> dict[str, Callable]:
    found: dict[str, Callable] = {}
    for module in MODULES:
        for name, draw in getattr(module, "STATIC", {}).items():
            if name in found:
                raise ValueError(f"figure name {name!r} is used twice ({module.__name__})")
            found[name] = draw
    return dict(sorted(found.items()))


STATIC: dict[str, Callable] = _collect()
