"""GPU figures measured elsewhere, by others, each with its source, hardware and software: never by this course.

The course measures the machine in front of you and, once a GPU run is recorded, a real GPU
(:mod:`gpulab.gpu_reference`). Between the two stand spec sheets (peaks no program reaches) and
these: figures that named people measured on named hardware, with the tool and versions they give.
Each :class:`Published` says what was measured, on what, with what, and where it was published;
:func:`table` prints them labelled "measured elsewhere". Only primary or well-documented sources
are kept (the vendor, a tool's author measuring on a named machine, an HPC centre's published run).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.tables import format_rows
from gpulab.validate import one_of

_MLE = "https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7"
_GPUI = "https://github.com/pc2/GPUInspector.jl/blob/83ce4ac3476e1afe96aa89a6a4e8adb723559087/docs/src/devices/a100_sxm2.md"


@dataclass(frozen=True)
class Published:
    """One published measurement: ``value`` ``unit`` of ``what``, on ``hardware`` with ``software``."""

    topic: str  # matmul, collective, copy, memory
    what: str
    value: float
    unit: str
    hardware: str
    software: str
    source: str  # a stable link
    spec: float | None = None  # the peak it compares with (spec sheet or link rate), same unit

    @property
    def share_of_spec(self) -> float | None:
        """The measured value as a fraction of the spec sheet's figure (None where there is none)."""
        return None if self.spec is None else self.value / self.spec


FIGURES: tuple[Published, ...] = (
    Published("matmul", "bf16 matmul, best shape of a sweep (MAMF finder)", 794.5, "TFLOP/s", "NVIDIA H100 SXM",
              "torch 2.7.0+cu126", f"{_MLE}/compute/accelerator/README.md", spec=989),
    Published("matmul", "bf16 matmul, best shape of a sweep (MAMF finder)", 271.2, "TFLOP/s", "NVIDIA A100 SXM",
              "torch 2.6.0+cu126", f"{_MLE}/compute/accelerator/README.md", spec=312),
    Published("matmul", "fp8 matmul, best shape of a sweep (MAMF finder)", 1453.4, "TFLOP/s", "NVIDIA H200 SXM",
              "torch 2.7.1+cu128", f"{_MLE}/compute/accelerator/README.md", spec=1979),
    Published("matmul", "fp32 fused multiply-adds on the CUDA cores (an instruction loop, not a matmul)", 19.1,
              "TFLOP/s", "NVIDIA A100-SXM4-40GB (DGX A100)", "CUDA 11.5, GPUInspector.jl", _GPUI, spec=19.5),
    Published("collective", "all_reduce bus bandwidth, 16 GiB, 8 GPUs in one node, NVLink SHARP (NVLS)", 482.26,
              "GB/s", "8x NVIDIA H200, NVLink 4 + NVSwitch", "torch 2.9.1+cu130, NCCL 2.27.7",
              f"{_MLE}/network/README.md"),
    Published("collective", "all_reduce bus bandwidth, 16 GiB, 8 GPUs in one node, ring (NVLS off)", 367.61,
              "GB/s", "8x NVIDIA H200, NVLink 4 + NVSwitch", "torch 2.9.1+cu130, NCCL 2.27.7",
              f"{_MLE}/network/README.md"),
    Published("collective", "all_reduce bus bandwidth, 16 GiB, 8 GPUs in one node", 234.89, "GB/s",
              "8x NVIDIA A100, NVLink 3", "nccl-tests all_reduce_perf", f"{_MLE}/network/README.md"),
    Published("collective", "all_reduce bus bandwidth, 4 GiB, 32 GPUs on 4 nodes (ring)", 364.87, "GB/s",
              "4 x 8 NVIDIA H200 (AWS p5en.48xlarge, EFA network)", "NCCL 2.27.7", f"{_MLE}/network/README.md"),
    Published("copy", "host-to-device copy (nvbandwidth, copy engine)", 55.43, "GB/s",
              "NVIDIA H200, PCIe Gen5 x16", "nvbandwidth", f"{_MLE}/network/README.md", spec=63),
    Published("copy", "host <-> device copies from pinned memory, 0.5 GiB (both directions, best)", 24.33, "GiB/s",
              "NVIDIA A100-SXM4-40GB, PCIe Gen4", "CUDA 11.5, GPUInspector.jl", _GPUI),
    Published("copy", "host <-> device copies from pageable memory, 0.5 GiB (both directions, best)", 11.84, "GiB/s",
              "NVIDIA A100-SXM4-40GB, PCIe Gen4", "CUDA 11.5, GPUInspector.jl", _GPUI),
    Published("memory", "device memory copy, 0.5 GiB (read + write counted)", 1220.7, "GiB/s",
              "NVIDIA A100-SXM4-40GB", "CUDA 11.5, GPUInspector.jl", _GPUI),
)
TOPICS = tuple(dict.fromkeys(f.topic for f in FIGURES))


def figures(topic: str) -> list[Published]:
    """The published figures of one topic (``matmul``, ``collective``, ``copy``, ``memory``)."""
    one_of(topic, TOPICS, "topic")
    return [f for f in FIGURES if f.topic == topic]


def table(topic: str) -> str:
    """The figures of ``topic`` as a text table, headed as measured elsewhere, each with its source."""
    rows = [{"measured elsewhere": f.what, "value": f"{f.value:g} {f.unit}",
             "of peak": "-" if f.share_of_spec is None else f"{f.share_of_spec:.0%}",
             "hardware": f.hardware, "software": f.software} for f in figures(topic)]
    sources = sorted({f.source for f in figures(topic)})
    return (f"Measured elsewhere, not by this course ({topic}):\n" + format_rows(rows)
            + "\nsources:\n" + "\n".join(f"  {s}" for s in sources))
