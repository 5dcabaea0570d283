"""The processor itself: its name, instruction-set flags and clock, as the operating system tells them.

Linux reads ``/proc/cpuinfo``; macOS asks ``sysctl``; Windows and others fall back to ``platform``.
Used by the device list (the CPU's description) and by :mod:`gpulab.profiling.cpu_peak` (flags and clock).
"""

from __future__ import annotations

import platform as _platform
import subprocess
import sys

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
