"""Notebook 14's kernels against torch on a GPU, and the figures GPU runs recorded.

- :func:`gpu_rows` times, on a CUDA device, the vector add (GB/s next to ``x + y``), the fused softmax (next to
  ``torch.softmax`` and the same softmax as separate torch operations) and the tiled matrix multiply
  (TFLOP/s next to ``torch.matmul``, float16 and float32 with ``tl.dot``'s TF32 default and with true float32).
  Every time is :func:`gpulab.timing.time_call`'s. The notebook calls it on a GPU; ``scripts/gpu_measure.py``'s
  ``triton`` step records the same rows, read back by :func:`recorded`.
- :func:`inductor_kernel`: the Triton kernel ``torch.compile`` writes for the separate-operations softmax, on a GPU.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import torch

from gpulab import gpu_reference, timing
from gpulab.kernels import traffic

GPU_SIZES = {"add": 2**28, "softmax": (65536, 1024), "matmul": 8192, "error": (200, 300, 100)}
SMALL_SIZES = {"add": 2**20, "softmax": (1024, 1024), "matmul": 1024, "error": (200, 300, 100)}
STEP = "triton"  # the step of scripts/gpu_measure.py that records gpu_rows


def _ms(stmt: str, env: dict, device: torch.device) -> float:
    seconds, _ = timing.time_call(stmt, env, device, warmup=3, min_run_time=0.2)
    return seconds * 1e3


def _row(kernel: str, implementation: str, size: str, ms: float, rate: float, unit: str, note: str = "") -> dict:
    return {"kernel": kernel, "implementation": implementation, "size": size, "ms": ms, "rate": rate, "unit": unit,
            "note": note}


def add_rows(n: int, device: torch.device) -> list[dict]:
    """The Triton vector add and ``x + y``: GB/s counting two reads and one write of float32."""
    from gpulab.kernels import programs

    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    if not torch.equal(programs.add(x, y), x + y):
        raise RuntimeError("the Triton vector add differs from x + y")
    moved = traffic.elementwise_bytes(n, inputs=2)
    size = f"{n:,} float32"
    return [_row("vector add", name, size, ms, moved / ms / 1e6, "GB/s")
            for name, ms in (("Triton add_kernel", _ms("add(x, y)", {"add": programs.add, "x": x, "y": y}, device)),
                             ("torch x + y", _ms("x + y", {"x": x, "y": y}, device)))]


def softmax_rows(rows: int, cols: int, device: torch.device) -> list[dict]:
    """The fused softmax, ``torch.softmax`` and :func:`traffic.softmax_separate`: ms, and GB/s of bytes counted."""
    from gpulab.kernels import programs

    x = torch.randn(rows, cols, device=device)
    if not torch.allclose(programs.softmax(x), torch.softmax(x, dim=1), atol=1e-6):
        raise RuntimeError("the Triton softmax differs from torch.softmax")
    fused = traffic.fused_row_bytes(rows, cols)
    _, ops = traffic.count_torch_traffic(traffic.softmax_separate, x)
    separate = sum(op.total for op in ops)
    env = {"x": x, "fused": programs.softmax, "torch": torch, "separate": traffic.softmax_separate}
    size = f"{rows:,} x {cols:,} float32"
    out = []
    for name, stmt, moved in (("Triton softmax_kernel (fused)", "fused(x)", fused),
                              ("torch.softmax", "torch.softmax(x, dim=1)", fused),
                              (f"separate torch operations ({len(ops)})", "separate(x)", separate)):
        ms = _ms(stmt, env, device)
        out.append(_row("softmax over rows", name, size, ms, moved / ms / 1e6, "GB/s",
                        f"{moved:,} bytes counted"))
    return out


def matmul_rows(n: int, device: torch.device) -> list[dict]:
    """The tiled matmul and ``torch.matmul`` in TFLOP/s: float16, and float32 with tl.dot's TF32 and true float32."""
    from gpulab.kernels import programs

    out = []
    for dtype, precision, label in ((torch.float16, "tf32", "float16"), (torch.float32, "tf32", "float32, tl.dot's default (TF32)"),
                                    (torch.float32, "ieee", "float32, input_precision=\"ieee\"")):
        a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
        env = {"mm": programs.matmul, "a": a, "b": b, "p": precision, "torch": torch}
        flop = 2 * n**3
        ms = _ms("mm(a, b, precision=p)", env, device)
        out.append(_row("matmul", f"Triton matmul_kernel, {label}", f"{n} x {n} x {n}", ms, flop / ms / 1e9, "TFLOP/s"))
        if precision == "tf32":
            with timing.float32_matmul_precision("highest"):
                ms = _ms("torch.matmul(a, b)", env, device)
            out.append(_row("matmul", f"torch.matmul, {label.split(',')[0]}", f"{n} x {n} x {n}", ms, flop / ms / 1e9,
                            "TFLOP/s", "cuBLAS; float32 stays float32 (matmul precision 'highest')"))
    return out


def error_rows(m: int, k: int, n: int, device: torch.device) -> list[dict]:
    """The largest difference from a float64 product, float32 inputs: tl.dot's TF32 default, true float32, torch."""
    from gpulab.kernels import programs

    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=gen).to(device), torch.randn(k, n, generator=gen).to(device)
    exact = a.double() @ b.double()
    size = f"{m} x {k} x {n}"
    found = [("Triton, tl.dot's default (TF32)", programs.matmul(a, b, precision="tf32")),
             ("Triton, input_precision=\"ieee\"", programs.matmul(a, b, precision="ieee"))]
    with timing.float32_matmul_precision("highest"):
        found.append(("torch.matmul (float32)", a @ b))
    return [_row("matmul error", name, size, 0.0, (c.double() - exact).abs().max().item(), "max |error|")
            for name, c in found]


def gpu_rows(device: torch.device, *, small: bool = False) -> list[dict]:
    """Every row :data:`STEP` records: add, softmax, matmul rates and errors, on ``device`` (CUDA)."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"compiled Triton kernels are timed on a CUDA device, not {device}")
    sizes = SMALL_SIZES if small else GPU_SIZES
    return (add_rows(sizes["add"], device) + softmax_rows(*sizes["softmax"], device)
            + matmul_rows(sizes["matmul"], device) + error_rows(*sizes["error"], device))


TRITON_SOURCE = re.compile(r"@triton\.jit\s*\ndef (triton_\w+)\(.*?(?=\n\s*(?:'''|\"\"\"))", re.S)


def triton_kernels_in(code: str) -> dict[str, str]:
    """``{name: source}`` of every ``@triton.jit`` kernel in one module of inductor's output code."""
    return {m.group(1): m.group(0) for m in TRITON_SOURCE.finditer(code)}


def inductor_kernel(fn: Callable, *inputs: torch.Tensor) -> tuple[str, str]:
    """``(name, source)`` of the first Triton kernel ``torch.compile`` writes for ``fn`` (on a GPU)."""
    from gpulab.profiling.compiled_code import output_code

    _, code = output_code(lambda: torch.compile(fn)(*inputs))
    found = {name: src for module in code for name, src in triton_kernels_in(module).items()}
    if not found:
        raise RuntimeError("inductor wrote no Triton kernel (is this a CUDA device?)")
    name = next(iter(found))
    return name, found[name]


def recorded(directory: str | Path | None = None) -> tuple[str, list[dict], str] | None:
    """``(where and when, rows, inductor's kernel source or "")`` of the newest :data:`STEP` a GPU run recorded in
    ``gpulab/reference`` (``scripts/gpu_measure.py``), or None."""
    found = gpu_reference.recorded_rows(STEP, directory)
    if not found:
        return None
    measurement, rows = found[-1]
    return measurement.description, rows, str((measurement.step(STEP) or {}).get("source", ""))


def table(rows: list[dict]) -> str:
    """Rows as aligned text: kernel, implementation, size, time and rate (a time or a rate of 0 is not given)."""
    from gpulab.tables import format_rows

    def shown(row: dict) -> dict:
        rate = "-" if not row["rate"] else (f"{row['rate']:.2g}" if row["unit"] == "max |error|" else f"{row['rate']:,.1f}")
        return {"kernel": row["kernel"], "implementation": row["implementation"], "size": row["size"],
                "ms": f"{row['ms']:.3f}" if row["ms"] else "-", "rate": rate, "unit": row["unit"]}

    return format_rows([shown(r) for r in rows])
