"""Where notebook 14's Triton kernels run: compiled on a CUDA GPU, in Triton's interpreter on the CPU, or nowhere.

Triton compiles a kernel for the GPU the first time it is launched. Without a GPU, Triton's own
**interpreter** runs the same kernel source on CPU tensors: each program instance, one after another,
as NumPy operations (``GridExecutor.__call__`` in ``triton/runtime/interpreter.py``). It is switched on by the
environment variable ``TRITON_INTERPRET=1``. It must be set before ``import triton``: Triton's own library
functions (``tl.max``, ``tl.sum``, ``tl.cdiv``) are kernels too, wrapped when Triton is imported, and a kernel
wrapped without it is a compiled kernel: launching it without a GPU fails with "0 active drivers", and a
kernel that calls ``tl.max`` fails in the interpreter with "Cannot call @triton.jit'd outside of the scope of a
kernel". So the choice holds for a whole process (``torch.compile`` on a CPU imports Triton too).

:func:`prepare` is called once, at the top of the notebook, with the device the notebook picked. It returns a
:class:`Backend` that says where the kernels run and, if they cannot, why (Triton has wheels for Linux only;
the interpreter of triton 3.6 failed where 3.7's ran). :func:`require` stops a notebook there, with the
reason in a few plain lines instead of a traceback, so a "Run all" on macOS or Windows leaves the
notebook's saved outputs in place. Facts checked with triton 3.7.1 (what ``constraints.txt`` pins):

- the interpreter runs masked loads and stores, ``tl.dot`` (float32 and float16), atomics and ``print`` in a kernel;
- bfloat16 arithmetic in the interpreter silently gives garbage (NaN, huge numbers): cast to float32 first;
- a store past the end of a tensor, without a mask, writes into memory the tensor does not own: the
  process may crash (a segmentation fault) or go on with corrupted memory;
- the interpreter wants CPU tensors: with CUDA tensors it gave wrong results (triton#4755).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib import metadata

import torch

ENV = "TRITON_INTERPRET"
#: The oldest Triton whose interpreter the course ran the notebook with (3.6.0's failed: "only 0-dimensional
#: arrays can be converted to Python scalars" on a loop over K, with NumPy 2.5). constraints.txt pins 3.7.1.
INTERPRETER_SINCE = (3, 7)
MODES = ("compiled", "interpreter", "unavailable")
PIN = "triton==3.7.1"


@dataclass(frozen=True)
class Backend:
    """Where the kernels run: ``mode`` (one of :data:`MODES`), the ``device`` their tensors live on, the
    installed ``triton`` version (None: not installed) and ``reason``: why not, or a note."""

    mode: str
    device: torch.device
    triton: str | None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.mode != "unavailable"

    @property
    def compiled(self) -> bool:
        return self.mode == "compiled"

    def __str__(self) -> str:
        if not self.ok:
            return f"Triton kernels cannot run here: {self.reason}"
        how = ("compiled for the GPU" if self.compiled
               else f"in Triton's interpreter ({ENV}=1), one program instance after another, in NumPy")
        note = f" ({self.reason})" if self.reason else ""
        return f"triton {self.triton}: kernels run {how}; their tensors live on {self.device}{note}"


class TritonUnavailable(RuntimeError):
    """Raised by :func:`require`. In Jupyter it shows as its message alone, never a traceback."""

    def _render_traceback_(self) -> list[str]:  # IPython prints these lines instead of a traceback
        return [f"Stopped here: {self}",
                "The cells below keep the outputs of a run on Linux: read them, or run this notebook on Linux "
                "(WSL 2 on Windows, or a cloud notebook such as Colab)."]


def triton_version() -> str | None:
    """The installed Triton's version, read without importing it; None when it is not installed."""
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


def installed_megabytes(distribution: str = "triton") -> float:
    """The disk space the installed ``distribution``'s files take, in MB (10**6 bytes), from its file list."""
    files = metadata.distribution(distribution).files or []
    return sum(f.locate().stat().st_size for f in files if f.locate().is_file()) / 1e6


def _release(version: str) -> tuple[int, ...]:
    from packaging.version import Version

    return Version(version).release


def decide(device: str | torch.device, *, platform: str | None = None, version: str | None = "installed",
           environ: dict | None = None) -> Backend:
    """Where kernels would run for ``device`` (the notebook's choice), without changing anything.

    ``platform``, ``version`` and ``environ`` default to this machine's (``sys.platform``, the installed
    Triton, ``os.environ``); tests pass others.
    """
    device = torch.device(device)
    platform = sys.platform if platform is None else platform
    version = triton_version() if version == "installed" else version
    environ = os.environ if environ is None else environ
    interpret_asked = environ.get(ENV, "0") not in ("", "0")
    if version is None:
        where = ("Triton has wheels for Linux only, and this is " + {"darwin": "macOS", "win32": "Windows"}.get(
            platform, platform)) if not platform.startswith("linux") else (
            f"triton is not installed; install the course's pin: python -m pip install -c constraints.txt {PIN}")
        return Backend("unavailable", device, None, where)
    if device.type == "cuda" and not interpret_asked:
        return Backend("compiled", device, version)
    cpu = torch.device("cpu")
    if _release(version)[:2] < INTERPRETER_SINCE:
        return Backend("unavailable", cpu, version,
                       f"the interpreter of triton {version} failed where {INTERPRETER_SINCE[0]}.{INTERPRETER_SINCE[1]}'s "
                       f"ran; install the course's pin: python -m pip install -c constraints.txt {PIN}")
    if device.type == "cuda":
        return Backend("interpreter", cpu, version,
                       f"{ENV}=1 is set, so the interpreter runs even here, on CPU tensors (triton#4755)")
    note = "" if device.type == "cpu" else f"{device.type} has no Triton backend: CPU tensors"
    return Backend("interpreter", cpu, version, note)


def imported_mode() -> str | None:
    """How this process imported Triton: ``"interpreter"``, ``"compiled"``, or None when it has not yet."""
    language = sys.modules.get("triton.language")
    if language is None:
        return None
    return "interpreter" if type(language.max).__name__ == "InterpretedFunction" else "compiled"


def prepare(device: str | torch.device) -> Backend:
    """:func:`decide`, then switch the interpreter on (``TRITON_INTERPRET=1``) where it is the way. Call it before
    anything imports Triton: where Triton was already imported the other way, the kernels cannot run in this
    process, and the Backend says so (restart the notebook's kernel)."""
    backend = decide(device)
    if backend.mode == "interpreter":
        os.environ[ENV] = "1"
    found = imported_mode() if backend.ok else None
    if found is not None and found != backend.mode:
        return Backend("unavailable", backend.device, backend.triton,
                       f"this process imported triton for the {found} path before {ENV} was set as needed: "
                       "restart the kernel and run the notebook from the top")
    return backend


def require(backend: Backend) -> None:
    """Go on only where kernels can run; else raise :class:`TritonUnavailable` with the reason."""
    if not backend.ok:
        raise TritonUnavailable(backend.reason)
