"""GPU figures measured elsewhere, by others, each with its source, hardware and software: never by this course.

The course measures the machine in front of you and, once a GPU run is recorded, a real GPU
(:mod:`gpulab.gpu_reference`). Between the two stand spec sheets (peaks no program reaches) and
these: figures that named people measured on named hardware, with the tool and versions they give.
Each :class:`Published` says what was measured, on what, with what, and where it was published;
:func:`table` prints them labelled "measured elsewhere". Only primary or well-documented sources
are kept (the vendor, a tool's author measuring on a named machine, an HPC centre's published run).

:data:`RUNS` are large training runs as their papers describe them (:class:`Run`): the model, the machines,
how the GPUs were split and what share of the peak the steps reached; :func:`runs_table` prints them.
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


@dataclass(frozen=True)
class Run:
    """A published training run: the model, the cluster and its layout as the paper gives them.

    Degrees: ``tp`` tensor, ``pp`` pipeline, ``dp`` data, ``cp`` context, ``ep`` expert parallelism (``ep`` ranks
    share the experts of a layer; they are also data-parallel ranks for everything else). ``links``: the
    links' line rates per direction in GB/s inside a node and per GPU between nodes, as the paper or the
    vendor gives them (line rates: no program reaches them). ``mfu``: model-FLOPs utilisation, as published
    (``None`` where the paper gives none).
    """

    name: str
    parameters: float
    active_parameters: float | None
    layers: int
    hidden: int
    heads: int
    vocab: int
    sequence: int
    batch: int  # sequences per step
    gpus: int
    gpu: str
    memory_gb: float
    peak_tflops: float  # dense 16-bit, the spec sheet's
    memory_bandwidth_gbs: float
    gpus_per_node: int
    links: tuple[float, float]
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    data_parallel: str
    schedule: str
    mfu: str | None
    source: str
    note: str = ""


_LLAMA3 = "https://arxiv.org/abs/2407.21783"
_DEEPSEEK3 = "https://arxiv.org/abs/2412.19437"
_MEGATRON = "https://arxiv.org/abs/2104.04473"
RUNS: tuple[Run, ...] = (
    Run("Llama 3 405B", 405e9, None, 126, 16384, 128, 128256, 8192, 2048, 16384, "NVIDIA H100 80GB", 80, 989,
        3350, 8, (450, 50), tp=8, pp=16, dp=128, cp=1, ep=1, data_parallel="FSDP", schedule="interleaved 1F1B",
        mfu="41% (38-43% over its three configurations)", source=_LLAMA3,
        note="section 3.3.2, Table 4: 8,192 GPUs with DP 64 reached 43%, 16,384 with DP 128 41%, and CP 16 for "
             "128K-token sequences 38%; groups ordered [TP, CP, PP, DP]; one layer fewer on the first and last stage"),
    Run("DeepSeek-V3", 671e9, 37e9, 61, 7168, 128, 129280, 4096, 15360, 2048, "NVIDIA H800 80GB", 80, 989, 3350,
        8, (160, 50), tp=1, pp=16, dp=128, cp=1, ep=64, data_parallel="ZeRO-1", schedule="DualPipe", mfu=None,
        source=_DEEPSEEK3,
        note="section 3.2: PP 16 with DualPipe, EP 64 over 8 nodes, ZeRO-1 data parallelism, no tensor "
             "parallelism; NVLink 160 GB/s against InfiniBand 50 GB/s, the paper's figures; FP8 mixed precision"),
    Run("Megatron-LM 1T", 1008e9, None, 128, 25600, 160, 51200, 2048, 3072, 3072, "NVIDIA A100 80GB", 80, 312,
        2039, 8, (300, 25), tp=8, pp=64, dp=6, cp=1, ep=1, data_parallel="DDP", schedule="PTD-P",
        mfu="52% (with recomputed FLOPs)", source=_MEGATRON,
        note="abstract and Table 1: 502 PFLOP/s on 3,072 GPUs, 163 TFLOP/s a GPU, 52% of the peak counting "
             "activation recomputation; TP inside a DGX A100 node, PP across nodes"),
)


def runs_table() -> str:
    """:data:`RUNS` as a text table, headed as published elsewhere, each with its source."""
    rows = [{"run": r.name, "GPUs": f"{r.gpus:,} {r.gpu}", "TP": r.tp, "PP": r.pp, "DP": f"{r.dp} ({r.data_parallel})",
             "CP": r.cp, "EP": r.ep, "schedule": r.schedule, "MFU": r.mfu or "not given"} for r in RUNS]
    return ("Published elsewhere, not measured by this course:\n" + format_rows(rows) + "\nsources:\n"
            + "\n".join(f"  {r.name}: {r.source} ({r.note})" for r in RUNS))


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
