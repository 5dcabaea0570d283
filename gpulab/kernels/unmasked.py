"""What a store without a mask does, shown in a child process (never in the notebook's own kernel).

    python -m gpulab.kernels.unmasked DEVICE N BLOCK     # DEVICE: cpu (the interpreter) or cuda

The child runs a vector add whose loads and store have no mask, on N elements with BLOCK-element program
instances, so the last instance reaches past the end. It prints one JSON line:

1. with the output placed in front of a guard (more elements of the same allocation, filled with a marker):
   how many guard elements the kernel overwrote. Nothing stops it, on a GPU or in the interpreter;
2. then, in the interpreter only, with the output placed at the very end of the memory the process may
   write (the next page of memory is made unwritable): the store past the end ends the process with a
   segmentation fault (signal SIGSEGV), as it can end a Jupyter kernel. The parent reports the signal.

:func:`run_in_child` is the parent's side: it starts the child with ``TRITON_INTERPRET`` set as the notebook's
:class:`~gpulab.kernels.runtime.Backend` says, and returns what happened. Linux only, like Triton.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

MARK = -7.0  # what the guard holds before the kernel runs
TIMEOUT = 120


def _child(device_name: str, n: int, block: int) -> None:
    import ctypes
    import mmap

    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_unmasked(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))  # no mask anywhere

    device = torch.device(device_name)
    grid = (triton.cdiv(n, block),)
    guard = grid[0] * block  # at least as far as the last instance reaches
    torch.manual_seed(0)
    buf = torch.full((3, n + guard), MARK, device=device)  # x, y and out, each followed by its guard
    x, y, out = buf[0, :n], buf[1, :n], buf[2, :n]
    x.copy_(torch.randn(n, device=device))
    y.copy_(torch.randn(n, device=device))
    add_unmasked[grid](x, y, out, BLOCK=block)
    report = {"device": device_name, "n": n, "block": block, "instances": grid[0],
              "reached_past_end": grid[0] * block - n, "in_range_correct": bool(torch.equal(out, x + y)),
              "guard_overwritten": int((buf[2, n:] != MARK).sum())}
    print(json.dumps(report), flush=True)
    if device.type != "cpu":
        return
    page = mmap.PAGESIZE
    if n * 4 > page:
        raise SystemExit(f"n={n} float32 elements do not fit in one {page}-byte page")
    region = mmap.mmap(-1, 2 * page)
    start = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mprotect(ctypes.c_void_p(start + page), ctypes.c_size_t(page), 0) != 0:  # PROT_NONE: no access at all
        raise SystemExit(f"mprotect failed: errno {ctypes.get_errno()}")
    last = torch.frombuffer(region, dtype=torch.float32, count=n, offset=page - n * 4)  # ends where the page ends
    add_unmasked[grid](x, y, last, BLOCK=block)
    print(json.dumps({"crashed": False}), flush=True)  # not reached: the store above writes into the locked page


@dataclass(frozen=True)
class ChildResult:
    """What the child reported (``report``), how it ended (``returncode``; negative: killed by that signal)."""

    report: dict
    returncode: int
    stderr_tail: str

    @property
    def signal(self) -> str | None:
        """``'SIGSEGV'`` when a signal ended the child, else None."""
        return signal.Signals(-self.returncode).name if self.returncode < 0 else None


def run_in_child(backend, n: int = 1000, block: int = 1024, timeout: float = TIMEOUT) -> ChildResult:
    """Run the unmasked add in a child process the way ``backend`` (a runtime.Backend) runs kernels."""
    if not backend.ok:
        raise ValueError(f"kernels cannot run here: {backend.reason}")
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "0" if backend.compiled else "1"
    done = subprocess.run([sys.executable, "-m", "gpulab.kernels.unmasked", backend.device.type, str(n), str(block)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"the child printed no report (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    report = {k: v for line in lines for k, v in line.items()}
    return ChildResult(report, done.returncode, done.stderr.strip()[-500:])


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
