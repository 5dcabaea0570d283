"""What compute devices this machine has, and picking one by name.

On a machine with no accelerator, ``list_devices()`` returns exactly one entry, the CPU::

    [DeviceInfo(name='cpu', kind='cpu', description=..., memory_bytes=None, capability=None, backend=None)]

``pick_device("auto")`` prefers CUDA (ROCm builds show up as CUDA), then Apple MPS, then
Intel XPU, then the CPU. Everything here is evaluated when called, never at import time.
"""

from __future__ import annotations

import platform as _platform
import re
import subprocess
import sys
from dataclasses import asdict, dataclass

import torch

CHOICES = ("auto", "cpu", "cuda", "cuda:N", "mps", "xpu")
_NAME = re.compile(r"^(cpu|mps|cuda|xpu)(?::(\d+))?$")


@dataclass(frozen=True)
class DeviceInfo:
    """One device: its torch name (``cuda:0``), kind, a human description and, for GPUs, memory."""

    name: str
    kind: str
    description: str
    memory_bytes: int | None = None
    capability: str | None = None
    backend: str | None = None  # "CUDA 12.8", "HIP 6.3", ...

    def to_dict(self) -> dict:
        """A JSON-friendly dict."""
        return asdict(self)


def cuda_backend() -> str | None:
    """``"CUDA x.y"`` or ``"HIP x.y"`` for the installed torch build, ``None`` for a CPU-only build."""
    hip = getattr(torch.version, "hip", None)
    if hip:
        return f"HIP {hip}"
    if torch.version.cuda:
        return f"CUDA {torch.version.cuda}"
    return None


def mps_available() -> bool:
    """True on Apple silicon with a torch built for Metal (MPS)."""
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def xpu_available() -> bool:
    """True where an Intel GPU (XPU) is usable."""
    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu.is_available())


CPUINFO = "/proc/cpuinfo"


def _cpuinfo_field(keys: tuple[str, ...], path: str = CPUINFO) -> str | None:
    """The value of the first ``key : value`` line of Linux's cpuinfo file whose key is in ``keys``."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in keys:
                    return value.strip() or None
    except OSError:
        pass
    return None


def _linux_cpu_name(path: str = CPUINFO) -> str | None:
    """The ``model name`` line of Linux's cpuinfo file, if the file exists and has one."""
    return _cpuinfo_field(("model name",), path)


def cpu_flags(path: str = CPUINFO) -> frozenset[str] | None:
    """The CPU's instruction-set flags (``avx2``, ``fma``, ``avx512f``; ARM: ``asimd``...) from Linux's cpuinfo.

    ``None`` where there is no such file (macOS, Windows): the flags are then unknown, not absent.
    """
    value = _cpuinfo_field(("flags", "Features"), path)
    return frozenset(value.lower().split()) if value else None


def cpu_clock_mhz(path: str = CPUINFO) -> tuple[float | None, str]:
    """The CPU clock in MHz and where it came from; ``(None, "unknown ...")`` when no source answers.

    First ``psutil.cpu_freq()`` (its ``max``, else ``current``; works on Linux, Windows, Intel macs),
    then the ``cpu MHz`` line of Linux's cpuinfo (the current clock, which changes with load).
    """
    import psutil

    try:
        freq = psutil.cpu_freq()
    except (AttributeError, NotImplementedError, OSError, RuntimeError):
        freq = None
    if freq is not None:
        if freq.max and freq.max > 0:
            return float(freq.max), "psutil.cpu_freq().max"
        if freq.current and freq.current > 0:
            return float(freq.current), "psutil.cpu_freq().current"
    value = _cpuinfo_field(("cpu MHz",), path)
    try:
        mhz = float(value) if value else 0.0
    except ValueError:
        mhz = 0.0
    if mhz > 0:
        return mhz, "'cpu MHz' in /proc/cpuinfo (the current clock)"
    return None, "unknown (neither psutil.cpu_freq() nor /proc/cpuinfo gives a clock on this OS)"


def _macos_cpu_name(timeout: float = 2.0) -> str | None:
    """``sysctl -n machdep.cpu.brand_string`` (e.g. "Apple M2"), if it answers within ``timeout`` s."""
    try:
        out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                             timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def cpu_description(platform: str | None = None) -> str:
    """The processor's name as the OS tells it, else the architecture, else ``"CPU"``.

    Linux: ``/proc/cpuinfo``; macOS: ``sysctl``; Windows and others: ``platform.processor()``.
    ``platform`` (a ``sys.platform`` value) defaults to this machine's.
    """
    platform = sys.platform if platform is None else platform
    name = None
    if platform.startswith("linux"):
        name = _linux_cpu_name()
    elif platform == "darwin":
        name = _macos_cpu_name()
    return name or _platform.processor() or _platform.machine() or "CPU"


def list_devices() -> list[DeviceInfo]:
    """Every usable device: CUDA/ROCm GPUs first, then MPS, then XPU, and always the CPU last."""
    found: list[DeviceInfo] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            found.append(
                DeviceInfo(
                    name=f"cuda:{i}",
                    kind="cuda",
                    description=props.name,
                    memory_bytes=int(props.total_memory),
                    capability=f"{props.major}.{props.minor}",
                    backend=cuda_backend(),
                )
            )
    if mps_available():
        found.append(DeviceInfo(name="mps", kind="mps", description="Apple GPU (Metal Performance Shaders)"))
    if xpu_available():
        for i in range(torch.xpu.device_count()):
            found.append(
                DeviceInfo(name=f"xpu:{i}", kind="xpu", description=torch.xpu.get_device_name(i), backend="XPU")
            )
    found.append(DeviceInfo(name="cpu", kind="cpu", description=cpu_description()))
    return found


def available_names() -> list[str]:
    """Names ``pick_device`` accepts on this machine, e.g. ``['auto', 'cpu']``."""
    names = ["auto"]
    for d in list_devices():
        names.append(d.name)
        if d.kind in ("cuda", "xpu") and d.kind not in names:
            names.insert(names.index(d.name), d.kind)
    return names


def pick_device(name: str | torch.device = "auto") -> torch.device:
    """Turn ``"auto" | "cpu" | "cuda" | "cuda:N" | "mps" | "xpu"`` into a usable ``torch.device``.

    Raises a one-line ``ValueError`` naming the bad value and what is available here.
    """
    if isinstance(name, torch.device):
        name = str(name)
    if not isinstance(name, str):
        raise ValueError(f"device {name!r} is not a string; choose from {', '.join(available_names())}")
    text = name.strip().lower()
    if text == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", 0)
        if mps_available():
            return torch.device("mps")
        if xpu_available():
            return torch.device("xpu", 0)
        return torch.device("cpu")
    match = _NAME.match(text)
    if not match:
        raise ValueError(
            f"unknown device {name!r}: use one of {', '.join(CHOICES)}; available here: {', '.join(available_names())}"
        )
    kind, index = match.group(1), match.group(2)
    if kind == "cpu":
        if index not in (None, "0"):
            raise ValueError(f"device {name!r} does not exist: the CPU is just 'cpu'")
        return torch.device("cpu")
    count = {"cuda": torch.cuda.device_count() if torch.cuda.is_available() else 0,
             "xpu": torch.xpu.device_count() if xpu_available() else 0,
             "mps": 1 if mps_available() else 0}[kind]
    i = int(index) if index is not None else 0
    if i >= count or (kind == "mps" and index not in (None, "0")):
        have = f"{count} {kind} device(s)" if count else f"no {kind} device"
        raise ValueError(f"device {name!r} is not available: this machine has {have}; available: {', '.join(available_names())}")
    return torch.device(kind) if kind == "mps" else torch.device(kind, i)


def synchronize(device: str | torch.device) -> None:
    """Wait until queued work on ``device`` is done (needed before reading a clock); no-op on CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    elif device.type == "xpu":
        torch.xpu.synchronize(device)


def describe(device: str | torch.device = "auto") -> DeviceInfo:
    """The ``DeviceInfo`` of one usable device (``"cuda"`` means ``cuda:0``); ValueError if absent."""
    picked = pick_device(device)
    name = str(picked) if picked.type != "mps" else "mps"
    for info in list_devices():
        if info.name == name:
            return info
    raise ValueError(f"device {str(device)!r} is not listed here; available: {', '.join(available_names())}")


def is_accelerator(device: str | torch.device) -> bool:
    """True for a GPU-like device (CUDA/ROCm, MPS, XPU), False for the CPU."""
    return torch.device(device).type != "cpu"
