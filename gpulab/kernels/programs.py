"""Notebook 14's Triton kernels and the functions that launch them.

- :func:`add`: ``x + y``, one program instance per block of ``block`` elements, the last block masked;
- :func:`softmax`: a softmax over each row, one program instance per row: one read and one write of the data;
- :func:`matmul`: ``a @ b``, one program instance per tile of the result, a loop over K with ``tl.dot``.

Whether ``@triton.jit`` makes compiled or interpreted kernels was fixed when this process imported Triton
(:mod:`gpulab.kernels.runtime`): call ``runtime.prepare(device)`` before importing this module. A launch then
wants its tensors where the kernels run (CUDA tensors compiled, CPU tensors interpreted) and says so in one
line otherwise. This module imports Triton: import it only where ``runtime.decide`` says kernels can run.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab.kernels.runtime import imported_mode
from gpulab.validate import positive_int

MODE = imported_mode()  # "interpreter" or "compiled": how this process imported Triton


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)                       # which program instance am I? 0, 1, 2, ...
    offsets = pid * BLOCK + tl.arange(0, BLOCK)  # the BLOCK element numbers this instance handles
    mask = offsets < n                           # False past the end of the data
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)                       # one program instance per row
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)                    # subtract the row's largest value: exp cannot overflow
    e = tl.exp(x)                                # exp(-inf) = 0: the masked lanes add nothing below
    tl.store(out_ptr + row * row_stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)    # this instance's tile of C: BM rows...
    cols = tl.program_id(1) * BN + tl.arange(0, BN)    # ...times BN columns
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):                 # walk along K, BK at a time
        ks = k * BK + tl.arange(0, BK)
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)   # a BM x BK piece of A's strip
        b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)   # a BK x BN piece of B's strip
        acc += tl.dot(a, b, input_precision=PRECISION)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


KERNELS = {k.fn.__name__: k for k in (add_kernel, softmax_kernel, matmul_kernel)}


def check_tensors(*tensors: torch.Tensor) -> None:
    """One-line ValueError unless the tensors are where this process's kernels run (CPU: interpreter, CUDA: compiled)."""
    want = "cpu" if MODE == "interpreter" else "cuda"
    kinds = sorted({t.device.type for t in tensors})
    if kinds != [want]:
        raise ValueError(f"this process runs Triton kernels {'in the interpreter' if want == 'cpu' else 'compiled'}: "
                         f"they want {want} tensors, got {', '.join(kinds)}")


def launch(kernel, grid: tuple[int, ...], *args, **kwargs) -> None:
    """Launch ``kernel`` over ``grid`` program instances, after checking where its tensor arguments are."""
    check_tensors(*[a for a in args if isinstance(a, torch.Tensor)])
    kernel[grid](*args, **kwargs)


def grid_1d(n: int, block: int) -> tuple[int]:
    """The number of program instances for ``n`` elements, ``block`` at a time: ``ceil(n / block)``."""
    return (triton.cdiv(n, positive_int(block, "block")),)


def add(x: torch.Tensor, y: torch.Tensor, *, block: int = 1024) -> torch.Tensor:
    """``x + y`` by :func:`add_kernel`, for 1-D tensors of one shape and dtype (a power-of-2 ``block``)."""
    if x.shape != y.shape or x.dim() != 1 or x.dtype != y.dtype:
        raise ValueError(f"add wants two 1-D tensors of one shape and dtype, got {tuple(x.shape)} {x.dtype} and "
                         f"{tuple(y.shape)} {y.dtype}")
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    launch(add_kernel, grid_1d(x.numel(), block), x, y, out, x.numel(), BLOCK=block)
    return out


def softmax(x: torch.Tensor, *, num_warps: int | None = None) -> torch.Tensor:
    """``torch.softmax(x, dim=1)`` by :func:`softmax_kernel` for a 2-D float tensor: one program per row."""
    if x.dim() != 2:
        raise ValueError(f"softmax wants a 2-D tensor (rows x columns), got shape {tuple(x.shape)}")
    x = x.contiguous()
    out = torch.empty_like(x)
    block = triton.next_power_of_2(x.shape[1])
    extra = {} if num_warps is None else {"num_warps": num_warps}
    launch(softmax_kernel, (x.shape[0],), x, out, x.shape[1], x.stride(0), BLOCK=block, **extra)
    return out


#: (BM, BN, BK) by element size, compiled: three stages of pieces fit in 64 KB of shared memory (even a T4's).
GPU_TILES = {2: (128, 128, 32), 4: (64, 64, 32)}
CPU_TILE = (32, 32, 32)  # the interpreter is quick with small tiles


def default_tile(a: torch.Tensor) -> tuple[int, int, int]:
    """The tile :func:`matmul` uses for ``a``'s device and dtype when none is given."""
    return CPU_TILE if a.device.type == "cpu" else GPU_TILES.get(a.element_size(), GPU_TILES[4])


def matmul(a: torch.Tensor, b: torch.Tensor, *, tile: tuple[int, int, int] | None = None,
           precision: str = "tf32", num_warps: int | None = None, num_stages: int | None = None) -> torch.Tensor:
    """``a @ b`` by :func:`matmul_kernel`: one program instance per ``BM x BN`` tile of the result (``tile`` is
    ``(BM, BN, BK)``, powers of 2, at least 16). ``precision`` is ``tl.dot``'s ``input_precision``: ``"tf32"``
    (Triton's default on NVIDIA GPUs, for float32 inputs) or ``"ieee"`` (true float32)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0] or a.dtype != b.dtype:
        raise ValueError(f"matmul wants (M, K) and (K, N) matrices of one dtype, got {tuple(a.shape)} {a.dtype} "
                         f"and {tuple(b.shape)} {b.dtype}")
    if precision not in ("tf32", "ieee"):
        raise ValueError(f"precision must be 'tf32' or 'ieee', got {precision!r}")
    bm, bn, bk = tile or default_tile(a)
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty(m, n, dtype=a.dtype, device=a.device)
    extra = {name: v for name, v in (("num_warps", num_warps), ("num_stages", num_stages)) if v is not None}
    launch(matmul_kernel, (triton.cdiv(m, bm), triton.cdiv(n, bn)), a, b, c, m, n, k, *a.stride(), *b.stride(),
           *c.stride(), BM=bm, BN=bn, BK=bk, PRECISION=precision, **extra)
    return c
