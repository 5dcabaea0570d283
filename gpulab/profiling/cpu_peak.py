"""A CPU's theoretical float32 peak: cores x clock x FLOP per cycle, with the derivation spelled out.

FLOP per cycle per core comes from the CPU's instruction-set flags (``gpulab.cpu_info.cpu_flags``):

- vector width: ``avx512f`` 512 bits = 16 float32 lanes; ``avx2`` / ``avx`` 256 bits = 8 lanes;
  ``sse2`` 128 bits = 4 lanes; ARM ``asimd`` (NEON) 128 bits = 4 lanes;
- ``fma`` (fused multiply-add, ``a * b + c`` in one instruction, counted as 2 FLOP) on x86; ARM's
  ``asimd`` always has it; AVX-512 implies it;
- :data:`FMA_UNITS` = 2 vector units per core, the usual count on desktop and server cores
  (Intel since Haswell, AMD since Zen 2). Some cores have one: then the real peak is half.
  Without FMA, one multiply and one add issue per cycle (also 2 FLOP per lane).

The result is an upper bound nobody reaches in practice (turbo clocks vary, memory stalls), which is
why the roofline uses the *measured* matmul rate as its peak and shows this one next to it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

from gpulab import cpu_info
from gpulab.validate import positive_number

FMA_UNITS = 2
#: (flag, bits, float32 lanes), widest first.
VECTOR_ISAS = (("avx512f", 512, 16), ("avx2", 256, 8), ("avx", 256, 8), ("sse2", 128, 4), ("asimd", 128, 4))


def flop_per_cycle(flags: Iterable[str] | None) -> tuple[int | None, list[str]]:
    """Float32 FLOP per cycle per core from CPU flags, and the steps of the derivation (``None`` if unknown)."""
    if flags is None:
        return None, ["CPU flags unknown (this OS has no /proc/cpuinfo): FLOP per cycle cannot be derived"]
    if isinstance(flags, str):
        raise ValueError(f"flags={flags!r} must be a collection of flag names such as {{'avx2', 'fma'}}, not one string")
    have = {str(f).lower() for f in flags}
    for flag, bits, lanes in VECTOR_ISAS:
        if flag in have:
            break
    else:
        return None, ["no known vector instruction set among the flags (avx512f, avx2, avx, sse2, asimd)"]
    fma = flag in ("avx512f", "asimd") or "fma" in have
    steps = [f"{flag}: {bits}-bit vectors = {lanes} float32 lanes per instruction"]
    if fma:
        steps.append("fused multiply-add (fma): 2 FLOP per lane per instruction")
        steps.append(f"{FMA_UNITS} FMA units per core (usual on desktop/server cores; an assumption)")
        per_cycle = lanes * 2 * FMA_UNITS
        steps.append(f"{lanes} x 2 x {FMA_UNITS} = {per_cycle} FLOP per cycle per core")
    else:
        steps.append("no fma: one vector multiply and one vector add per cycle")
        per_cycle = lanes * 2
        steps.append(f"{lanes} x 2 = {per_cycle} FLOP per cycle per core")
    return per_cycle, steps


@dataclass(frozen=True)
class CpuPeak:
    """The pieces of the theoretical peak and the peak itself (``None`` where a piece is unknown)."""

    cores: int | None
    clock_mhz: float | None
    flop_per_cycle: int | None
    steps: tuple[str, ...]

    @property
    def flops(self) -> float | None:
        """cores x clock (Hz) x FLOP per cycle, or None when any piece is unknown."""
        if None in (self.cores, self.clock_mhz, self.flop_per_cycle):
            return None
        return self.cores * self.clock_mhz * 1e6 * self.flop_per_cycle

    def explain(self) -> str:
        """The derivation, one step per line, ending with the peak or "unknown"."""
        lines = list(self.steps)
        if self.flops is None:
            lines.append("theoretical peak: unknown (a piece above is missing)")
        else:
            lines.append(f"theoretical peak = {self.cores} cores x {self.clock_mhz / 1000:.2f} GHz x "
                         f"{self.flop_per_cycle} FLOP/cycle = {self.flops / 1e9:,.1f} GFLOP/s")
        return "\n".join(lines)


def _optional_positive(value: object, what: str) -> None:
    if value is not None:
        positive_number(value, what)  # None means unknown


def cpu_peak(cores: int | None, clock_mhz: float | None, flags: Iterable[str] | None,
             clock_source: str = "given", cores_source: str = "given") -> CpuPeak:
    """The theoretical float32 peak of ``cores`` cores at ``clock_mhz`` with these flags (any piece may be None)."""
    _optional_positive(cores, "cores")
    _optional_positive(clock_mhz, "clock_mhz")
    per_cycle, steps = flop_per_cycle(flags)
    steps.insert(0, f"cores: {cores if cores is not None else 'unknown'} ({cores_source})")
    steps.insert(1, f"clock: {f'{clock_mhz:.0f} MHz' if clock_mhz else 'unknown'} ({clock_source})")
    return CpuPeak(cores, clock_mhz, per_cycle, tuple(steps))


def this_cpu_peak() -> CpuPeak:
    """:func:`cpu_peak` of this machine: physical cores (psutil), clock and flags from :mod:`gpulab.cpu_info`."""
    import psutil

    cores, source = psutil.cpu_count(logical=False), "physical cores, psutil.cpu_count(logical=False)"
    if not cores:
        cores, source = os.cpu_count(), "logical CPUs, os.cpu_count(): physical count unknown"
    mhz, clock_source = cpu_info.cpu_clock_mhz()
    return cpu_peak(cores, mhz, cpu_info.cpu_flags(), clock_source=clock_source, cores_source=source)
