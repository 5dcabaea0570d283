"""What compute devices this machine has, and picking one by name.

On a machine with no accelerator, ``list_devices()`` returns exactly one entry, the CPU::

    [DeviceInfo(name='cpu', kind='cpu', description=..., memory_bytes=None, capability=None, backend=None)]

``pick_device("auto")`` prefers CUDA (ROCm builds show up as CUDA), then Apple MPS, then
Intel XPU, then the CPU. Everything here is evaluated when called, never at import time.

Who chooses: only a notebook or the command line picks a device ("auto"), once. A library function
that is given a model runs where the model is (:func:`model_device`); a ``device`` passed to it as
well is a check, and one that disagrees is a one-line error, never a silent move.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import torch

from gpulab.cpu_info import cpu_description

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


def device_of(model: torch.nn.Module) -> torch.device | None:
    """The one device holding ``model``'s parameters and buffers; None for a model with neither.

    Raises a one-line ``ValueError`` when they are spread over several devices (a half-moved model).
    """
    found = {t.device for t in (*model.parameters(), *model.buffers())}
    if len(found) > 1:
        names = ", ".join(sorted(str(d) for d in found))
        raise ValueError(f"the model's weights are on several devices ({names}): move the whole model "
                         f"with model.to(device) first")
    return next(iter(found), None)


def same_device(a: str | torch.device, b: str | torch.device) -> bool:
    """True when ``a`` and ``b`` name one device: ``mps`` is ``mps:0``, ``cuda`` is ``cuda:0``."""
    a, b = torch.device(a), torch.device(b)
    return a.type == b.type and (a.index or 0) == (b.index or 0)


def model_device(model: torch.nn.Module, device: str | torch.device | None = None, *,
                 who: str = "this function") -> torch.device:
    """The device work on ``model`` runs on: where its weights are (the CPU for a model with none).

    ``device`` is a check, not a choice: when given, it must name that same device (``"cuda"`` is
    ``cuda:0``; ``"auto"`` is what :func:`pick_device` picks), else a one-line ``ValueError`` says
    where the model is and how to agree. Data is then moved to the model, never the model to the data.
    """
    where = device_of(model)
    if device is None:
        return where if where is not None else torch.device("cpu")
    asked = torch.device("meta") if str(device) == "meta" else pick_device(device)
    if where is not None and not same_device(where, asked):
        raise ValueError(f"{who}: device={str(device)!r} is {asked} but the model's weights are on {where}: "
                         f"move the model first (model.to({str(asked)!r})) or leave device out to run on {where}")
    return asked


def synchronize(device: str | torch.device) -> None:
    """Wait until queued work on ``device`` is done (needed before reading a clock); no-op on CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    elif device.type == "xpu":
        torch.xpu.synchronize(device)


def describe(device: str | torch.device) -> DeviceInfo:
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
