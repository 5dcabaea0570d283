"""``torch.compile`` on this machine: can it work here, what does it build, and what does it buy for one step?

On a CPU, torch.compile's default backend (**inductor**) writes C++ code for the model's graph and
builds it with a C++ compiler: the one named by the ``CXX`` environment variable, else ``g++``
(``clang++`` on macOS, ``cl`` on Windows), the same search as ``torch._inductor.cpp_builder``.
On a CUDA GPU it writes Triton kernels instead, so it needs the ``triton`` package.
:func:`compile_support` says which applies; :func:`measure_compile` times the first (compiling)
step and the steady state of eager and compiled steps, with ``gpulab.timing.time_call``, and can keep
the code inductor wrote (read it with :mod:`gpulab.profiling.compiled_code`). :func:`time_adam` times Adam's
implementations; :func:`adam_default_impl` names the default. Each private torch function is used in one
small guarded helper (:func:`check_cpu_instructions`, :func:`adam_default_impl`, and in :mod:`gpulab.profiling.compiled_code`).
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import sys
import warnings
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

import torch
from torch import nn

from gpulab import devices
from gpulab.profiling.compiled_code import output_code
from gpulab.step import train_step
from gpulab.timing import Stopwatch, time_call
from gpulab.torch_private import adam_default_foreach, compile_caches_off, cpu_vector_isa


def cxx_candidates(platform: str | None = None, env: dict | None = None) -> list[str]:
    """The C++ compilers inductor tries, in order: ``$CXX`` if set, else the platform's default."""
    platform = sys.platform if platform is None else platform
    env = os.environ if env is None else env
    if env.get("CXX"):
        return [env["CXX"]]
    if platform == "win32":
        return ["cl"]
    return ["clang++"] if platform == "darwin" else ["g++"]


def find_cxx(platform: str | None = None, env: dict | None = None, which: Callable | None = None) -> str | None:
    """The name (not the path) of the first C++ compiler on PATH that inductor would use, or None."""
    which = which or shutil.which
    for name in cxx_candidates(platform, env):
        if which(name):
            return os.path.basename(name)
    return None


def compile_support(device: str | torch.device = "cpu", which: Callable | None = None) -> dict:
    """``{"device", "ok", "needs", "note"}``: can ``torch.compile`` (inductor) build code for ``device`` here?"""
    dev = devices.pick_device(device)
    if not hasattr(torch, "compile"):
        return {"device": str(dev), "ok": False, "needs": "torch >= 2.0", "note": "this torch has no torch.compile"}
    if dev.type == "cuda":
        ok = importlib.util.find_spec("triton") is not None
        return {"device": str(dev), "ok": ok, "needs": "triton",
                "note": "triton found" if ok else "the triton package is missing: pip install triton"}
    wanted = " or ".join(cxx_candidates())
    found = find_cxx(which=which)
    if found:
        return {"device": str(dev), "ok": True, "needs": "a C++ compiler", "note": f"C++ compiler {found} found"}
    return {"device": str(dev), "ok": False, "needs": "a C++ compiler",
            "note": f"no C++ compiler ({wanted}) on PATH: install one, or set CXX, to use torch.compile here"}


def skip_message(support: dict) -> str:
    """What a notebook cell prints when it skips compiling: why, and what would fix it."""
    return f"Skipping torch.compile on {support['device']}: {support['note']}."


@dataclass(frozen=True)
class CompileTiming:
    """First compiled step (compiling included) and steady-state step times, in seconds.

    ``code`` holds the Python modules inductor wrote during the first step (one per compiled graph:
    the forward, then the backward), when :func:`measure_compile` was asked to keep them.
    """

    first_step_s: float
    eager_step_s: float
    compiled_step_s: float
    code: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def speedup(self) -> float:
        """How many times faster a compiled step is than an eager one (below 1: slower)."""
        return self.eager_step_s / self.compiled_step_s

    def to_dict(self) -> dict:
        """A JSON-friendly dict of the times, speed-up included (the code left out)."""
        times = {k: v for k, v in asdict(self).items() if k != "code"}
        return {**times, "speedup": self.speedup}


def check_cpu_instructions() -> str | None:
    """Run inductor's once-per-machine check of the CPU's vector instructions now; their name, or None.

    Inductor builds and loads a small test program per instruction set (``pick_vec_isa`` in the private
    ``torch._inductor.cpu_vec_isa``) the first time it compiles for a CPU, keeps the builds in its
    on-disk cache and the answer in memory for the rest of the process. None where this torch lacks it.
    """
    return cpu_vector_isa()


def measure_compile(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, lr: float = 0.01,
                    min_run_time: float = 0.3, device: str | torch.device | None = None, fresh: bool = True,
                    keep_code: bool = False) -> CompileTiming:
    """Time :func:`gpulab.step.train_step` of ``model`` (Adam, MSE) eager and with ``torch.compile(copy of model)``.

    Only the model is compiled: its forward and, built with it by AOTAutograd, its backward. The MSE
    loss (forward and backward), ``optimizer.step()`` and ``zero_grad`` run eagerly in both steps.
    The first compiled step is timed alone (tracing, code generation and the C++ build happen
    there); then both kinds of step are timed in the steady state. ``fresh`` compiles with
    inductor's on-disk caches off (``torch.compiler.config.force_disable_caches``), so the first
    step is a cold compile of the model even when this ran before. On a CPU the machine's one-off
    check of its vector instructions (:func:`check_cpu_instructions`) runs before the clock starts,
    with the caches as they are: only a machine's first compile ever pays it. ``keep_code`` keeps
    inductor's code in ``.code`` (:func:`output_code`). It runs where ``model`` is (``device``, when given,
    must agree). Raises ValueError where :func:`compile_support` says no.
    """
    dev = devices.model_device(model, device, who="measure_compile")
    support = compile_support(dev)
    if not support["ok"]:
        raise ValueError(skip_message(support))
    eager = model
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model)
    opt_e = torch.optim.Adam(eager.parameters(), lr=lr)
    opt_c = torch.optim.Adam(compiled_model.parameters(), lr=lr)
    x, y = x.to(dev), y.to(dev)
    if dev.type == "cpu":
        check_cpu_instructions()
    devices.synchronize(dev)
    code: list[str] = []
    with compile_caches_off(fresh), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*force_disable_caches")  # says caches are off: we know
        # On a GPU, inductor suggests TF32 for float32 matmuls; strict float32 keeps eager and compiled equal.
        warnings.filterwarnings("ignore", message=".*TensorFloat32 tensor cores")
        with Stopwatch(dev) as clock:
            if keep_code:
                _, code = output_code(lambda: train_step(compiled, opt_c, x, y))
            else:
                train_step(compiled, opt_c, x, y)
        first = clock.seconds
    env = {"step": train_step, "x": x, "y": y}
    eager_s, _ = time_call("step(m, o, x, y)", {**env, "m": eager, "o": opt_e}, dev, min_run_time=min_run_time)
    comp_s, _ = time_call("step(m, o, x, y)", {**env, "m": compiled, "o": opt_c}, dev, min_run_time=min_run_time)
    return CompileTiming(first, eager_s, comp_s, tuple(code))


def adam_default_impl(params: Iterable[torch.Tensor]) -> str:
    """``"foreach"`` or ``"for-loop"``: the implementation ``torch.optim.Adam`` picks for ``params`` by default.

    Asks torch's own choice, as Adam does (:func:`gpulab.torch_private.adam_default_foreach`); ``"unknown"``
    where this torch cannot say.
    """
    foreach = adam_default_foreach(params)
    return "unknown" if foreach is None else "foreach" if foreach else "for-loop"


def time_adam(model: nn.Module, x: torch.Tensor, y: torch.Tensor, variants: dict[str, dict], *, lr: float = 0.01,
              min_run_time: float = 0.1, device: str | torch.device | None = None) -> dict[str, tuple[float, float]]:
    """Seconds of one :func:`gpulab.step.train_step` and of ``optimizer.step()`` alone, per Adam variant.

    ``variants`` maps a name to ``torch.optim.Adam`` keywords, e.g. ``{"default": {}, "fused": {"fused": True}}``;
    each variant trains its own copy of ``model``, where ``model`` is (``device``, when given, must agree).
    """
    if not variants:
        raise ValueError("variants is empty: give at least one, e.g. {'default': {}}")
    dev = devices.model_device(model, device, who="time_adam")
    x, y = x.to(dev), y.to(dev)
    out = {}
    for name, kwargs in variants.items():
        m = copy.deepcopy(model)
        opt = torch.optim.Adam(m.parameters(), lr=lr, **kwargs)
        env = {"step": train_step, "m": m, "o": opt, "x": x, "y": y}
        step_s, _ = time_call("step(m, o, x, y)", env, dev, min_run_time=min_run_time)
        nn.functional.mse_loss(m(x), y).backward()  # gradients for the optimizer alone
        opt_s, _ = time_call("o.step()", env, dev, min_run_time=min_run_time)
        out[name] = (step_s, opt_s)
    return out
