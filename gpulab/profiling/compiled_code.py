"""What ``torch.compile`` made of a model: the kernels inductor wrote, the graphs TorchDynamo captured, its breaks.

- :func:`output_code` runs a function and keeps the Python modules inductor wrote for it;
  :func:`kernels_in` lists, in order, the calls one of them makes: **library calls** (inductor's
  "extern kernels", e.g. ``addmm`` from PyTorch's CPU library or cuBLAS) and **generated kernels**
  (``cpp_fused_relu_0``: C++ that inductor wrote, fusing one or more operations).
- :class:`GraphRecorder` is a ``torch.compile`` backend that only records the graphs it is given;
  :func:`recompiles` uses it to show when a new batch size makes TorchDynamo compile again.
- :func:`graph_breaks` says where TorchDynamo split a function into several graphs, and why.

Each private torch API is used in one small helper that says clearly when this torch lacks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn

from gpulab.torch_private import dynamo_explain, run_and_get_code
from gpulab.validate import positive_int


def output_code(fn: Callable[[], object]) -> tuple[object, list[str]]:
    """``(fn(), the Python modules inductor wrote while fn ran)``, through ``torch._inductor.utils.run_and_get_code``.

    That private helper resets TorchDynamo first (``torch._dynamo.reset``), so ``fn`` compiles afresh.
    RuntimeError, naming what is missing, where this torch has no such helper.
    """
    return run_and_get_code(fn)


@dataclass(frozen=True)
class GraphKernels:
    """The calls of one compiled graph, in order: ``(name, generated)``; generated False means a library call.

    ``graph`` is the graph's name from the code's ``# AOT ID`` line (``forward``, ``backward``), else ``graph``.
    """

    graph: str
    calls: tuple[tuple[str, bool], ...]

    @property
    def library(self) -> list[str]:
        """Extern kernels: operations inductor leaves to a library (``mm``, ``addmm``: PyTorch's or cuBLAS's)."""
        return [name for name, generated in self.calls if not generated]

    @property
    def generated(self) -> list[str]:
        """Kernels inductor wrote itself (``cpp_fused_relu_0``, ``triton_poi_fused_...``)."""
        return [name for name, generated in self.calls if generated]


def kernels_in(code: str) -> GraphKernels:
    """The kernels one module of inductor's output code calls, in order (its ``call`` function)."""
    if not isinstance(code, str) or "def call(" not in code:
        raise ValueError("code must be one module of inductor's output code (it has a `def call(` function)")
    defined = set(re.findall(r"^(\w+) = async_compile\.\w+\(", code, flags=re.M))
    aot_id = re.search(r"^# AOT ID: \['\d*_?(\w+)'\]", code, flags=re.M)
    body = code[code.index("def call("):]
    body = body.split("\ndef benchmark_compiled_module", 1)[0]
    calls = []
    for m in re.finditer(r"\b(extern_kernels\.)?(\w+)(?:\.run)?\(", body):
        if m.group(1):
            calls.append((m.group(2), False))
        elif m.group(2) in defined:
            calls.append((m.group(2), True))
    return GraphKernels(aot_id.group(1) if aot_id else "graph", tuple(calls))


@dataclass(frozen=True)
class CompiledGraph:
    """One graph TorchDynamo handed to the backend: the batch that caused it, and whether its sizes are symbolic."""

    batch: int
    symbolic: bool


class GraphRecorder:
    """A ``torch.compile`` backend that records each graph it is given and runs it as it is (no code generated).

    Recompiling is TorchDynamo's decision, whatever the backend, so this shows it without inductor's cost.
    """

    def __init__(self) -> None:
        self.graphs: list[bool] = []  # one entry per graph: are some of its sizes symbolic?

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        self.graphs.append(any(isinstance(a, torch.SymInt) for a in example_inputs))
        return gm.forward


def recompiles(model: nn.Module, loader: Iterable, *, epochs: int = 2, dynamic: bool | None = None) -> list[CompiledGraph]:
    """Run ``model`` compiled (``dynamic`` as ``torch.compile`` takes it) on every ``(x, y)`` batch of ``loader``.

    Returns one :class:`CompiledGraph` per graph TorchDynamo compiled, with the batch size that caused
    it. TorchDynamo's caches are reset first (``torch.compiler.reset``).
    """
    positive_int(epochs, "epochs")
    torch.compiler.reset()
    recorder = GraphRecorder()
    compiled = torch.compile(model, backend=recorder, dynamic=dynamic)
    found = []
    with torch.no_grad():
        for _ in range(epochs):
            for x, _y in loader:
                before = len(recorder.graphs)
                compiled(x)
                found += [CompiledGraph(len(x), s) for s in recorder.graphs[before:]]
    torch.compiler.reset()
    return found


@dataclass(frozen=True)
class GraphBreaks:
    """What ``torch._dynamo.explain`` found: graphs, breaks, and per break ``(reason, the line of code)``."""

    graph_count: int
    graph_break_count: int
    reasons: tuple[tuple[str, str], ...]


def graph_breaks(fn: Callable, *args) -> GraphBreaks:
    """Run ``fn(*args)`` under ``torch._dynamo.explain``: how many graphs, how many breaks, and why.

    RuntimeError, naming what is missing, where this torch has no ``torch._dynamo.explain``.
    """
    out = dynamo_explain(fn)(*args)
    reasons = tuple((_short_reason(str(b.reason)), (b.user_stack[-1].line or "").strip() if b.user_stack else "")
                    for b in out.break_reasons)
    return GraphBreaks(out.graph_count, out.graph_break_count, reasons)


def _short_reason(reason: str) -> str:
    """The first line of a break reason, with its ``Explanation:`` line where it has one."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    explanation = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Explanation:")), "")
    return f"{lines[0]}: {explanation}" if lines and explanation else (lines[0] if lines else "")
