"""Number formats for deep learning, measured: bytes per value, range, overflow, autocast speed.

Everything here asks torch rather than a table: ``bytes_per_element`` creates a tensor and
reads ``element_size()``; ``autocast_output_dtype`` runs a real matmul under ``torch.autocast``.
Works on the CPU; takes the CUDA (or MPS) path when given such a device.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass

import torch
from torch import nn

from gpulab.devices import pick_device
from gpulab.validate import positive_int, positive_number

#: The three formats the notebooks compare, by the names learners type.
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def dtype_from_name(name: str | torch.dtype) -> torch.dtype:
    """``"float16"`` (or ``"torch.float16"``, or the dtype itself) -> ``torch.float16``; ValueError otherwise."""
    if isinstance(name, torch.dtype):
        if name not in DTYPES.values():
            raise ValueError(f"dtype {name} is not compared here: use one of {', '.join(DTYPES)}")
        return name
    text = str(name).strip().lower().removeprefix("torch.")
    if text not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}: use one of {', '.join(DTYPES)}")
    return DTYPES[text]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def bytes_per_element(dtype: str | torch.dtype) -> int:
    """Bytes one value takes, measured with ``element_size()`` of a real tensor."""
    return torch.empty((), dtype=dtype_from_name(dtype)).element_size()


@dataclass(frozen=True)
class DtypeFacts:
    """What one format can hold: bytes per value, largest finite value, smallest normal and subnormal values, step at 1.0."""

    name: str
    bytes: int
    max: float
    smallest_normal: float
    eps: float
    smallest_subnormal: float

    def to_dict(self) -> dict:
        """A JSON-friendly dict."""
        return asdict(self)


def smallest_subnormal(dtype: str | torch.dtype) -> float:
    """The smallest positive value the format holds: the next value after 0 (``torch.nextafter``). Below the
    smallest *normal* value the exponent stays at its minimum and the leading digit becomes 0 (subnormal
    numbers), down to this one; anything below half of it rounds to 0."""
    cast = dtype_from_name(dtype)
    return float(torch.nextafter(torch.zeros((), dtype=cast), torch.ones((), dtype=cast)))


def dtype_table(dtypes: tuple[str, ...] = tuple(DTYPES)) -> list[DtypeFacts]:
    """One ``DtypeFacts`` row per format, from ``element_size()``, ``torch.finfo`` and ``torch.nextafter``."""
    rows = []
    for name in dtypes:
        dtype = dtype_from_name(name)
        info = torch.finfo(dtype)
        rows.append(DtypeFacts(dtype_name(dtype), bytes_per_element(dtype), max=float(info.max),
                               smallest_normal=float(info.smallest_normal), eps=float(info.eps),
                               smallest_subnormal=smallest_subnormal(dtype)))
    return rows


def parameter_bytes(model: nn.Module) -> int:
    """Bytes the model's parameters take, summed over every parameter tensor (shared ones once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def parameter_count(model: nn.Module) -> int:
    """How many numbers the model learns."""
    return sum(p.numel() for p in model.parameters())


def parameter_bytes_by_dtype(model: nn.Module, dtypes: tuple[str, ...] = tuple(DTYPES)) -> dict[str, int]:
    """Bytes of the model's parameters after casting a copy to each format (the model is untouched)."""
    casts = [dtype_from_name(name) for name in dtypes]
    return {dtype_name(dtype): parameter_bytes(copy.deepcopy(model).to(dtype)) for dtype in casts}


def round_trip(values: list[float], dtype: str | torch.dtype) -> list[float]:
    """Each value stored in ``dtype`` and read back as a Python float (``inf`` on overflow, ``0.0`` on underflow)."""
    return torch.tensor(values, dtype=torch.float64).to(dtype_from_name(dtype)).double().tolist()


#: Values that show where float16 breaks and bfloat16 does not: a large activation, a tiny gradient.
OVERFLOW_VALUES: tuple[float, ...] = (1.0, 1000.0, 65504.0, 70000.0, 1e-4, 1e-8)


def overflow_demo(values: tuple[float, ...] = OVERFLOW_VALUES) -> list[dict[str, float]]:
    """For each value: what float32, float16 and bfloat16 keep of it."""
    columns = {name: round_trip(list(values), name) for name in DTYPES}
    return [{"value": v, **{name: columns[name][i] for name in DTYPES}} for i, v in enumerate(values)]


def scaled_gradient_demo(gradient: float = 1e-8, scale: float = 2.0**16) -> dict[str, float]:
    """What a loss scaler (``GradScaler``) does for a tiny gradient in float16: the gradient stored in float16
    directly (underflows to 0), the scaled gradient in float16, and that value unscaled in float32."""
    if not scale > 0:
        raise ValueError(f"scale={scale!r} must be a positive number")
    plain = torch.tensor(gradient, dtype=torch.float16)
    scaled = torch.tensor(gradient * scale, dtype=torch.float16)
    return {"gradient": gradient, "scale": scale, "float16": float(plain), "scaled_float16": float(scaled),
            "unscaled_float32": float(scaled.float() / scale)}


def autocast_output_dtype(device: str | torch.device, dtype: str | torch.dtype) -> torch.dtype | None:
    """The dtype a small matmul produces under ``torch.autocast(device, dtype)``; ``None`` if unsupported there."""
    device = pick_device(device)
    cast = dtype_from_name(dtype)
    try:
        a = torch.ones(8, 8, device=device)
        with torch.autocast(device.type, dtype=cast):
            return (a @ a).dtype
    except (RuntimeError, AssertionError, TypeError):
        return None


def bf16_supported(device: str | torch.device, native: bool = True) -> bool:
    """True where bfloat16 math is supported on ``device``. On CUDA, ``native=True`` asks for hardware support
    (compute capability >= 8.0); ``torch.cuda.is_bf16_supported()`` alone also says True on older GPUs, where
    bfloat16 is only emulated (slowly): ``native=False`` accepts that. ROCm supports it; elsewhere (CPU, MPS)
    a real autocast matmul decides."""
    device = pick_device(device)
    if device.type == "cuda":
        if torch.version.hip:
            return True
        if native:
            return torch.cuda.get_device_capability(device)[0] >= 8
        return bool(torch.cuda.is_bf16_supported(including_emulation=True))
    return autocast_output_dtype(device, torch.bfloat16) == torch.bfloat16


def cuda_capability(device: str | torch.device) -> tuple[int, int] | None:
    """``(major, minor)`` compute capability of an NVIDIA GPU; None for the CPU, MPS, XPU and ROCm."""
    device = pick_device(device)
    if device.type != "cuda" or torch.version.hip:
        return None
    return tuple(torch.cuda.get_device_capability(device))


def tf32_supported(device: str | torch.device) -> bool:
    """True on NVIDIA GPUs with TF32 tensor cores (compute capability >= 8.0); elsewhere "tf32" is float32."""
    capability = cuda_capability(device)
    return capability is not None and capability[0] >= 8


def hardware_note(device: str | torch.device, mode: str) -> str:
    """Why TF32 or bfloat16 (a mode or dtype name) is not what it says on this NVIDIA GPU; "" where it is.
    A GPU below compute capability 8.0 (T4 is 7.5, V100 7.0) has neither TF32 nor bfloat16 tensor cores."""
    capability = cuda_capability(device)
    if capability is None or capability[0] >= 8:
        return ""
    cc = "compute capability {}.{}".format(*capability)
    if mode == "tf32":
        return f"{cc}: no TF32 tensor cores, so this is strict float32"
    if "bfloat16" in str(mode):
        return f"{cc}: no native bfloat16 (only emulated, slowly); use float16 with GradScaler"
    return ""


def training_autocast_dtype(device: str | torch.device) -> torch.dtype:
    """The autocast format to train with on ``device``: bfloat16 where it is native (or CPU/MPS autocast runs
    it), else float16 (``gpulab.train.fit`` then adds a ``GradScaler`` on CUDA)."""
    return torch.bfloat16 if bf16_supported(device) else torch.float16


#: How an ``n x n`` float32 matmul can run, from strict to fast. ``autocast X`` casts both float32
#: inputs to X inside every call (two casts + the matmul, as in a training step); a plain ``X``
#: casts them once beforehand, so only the matmul is timed.
MATMUL_MODES = ("float32", "tf32", "autocast bfloat16", "autocast float16", "bfloat16", "float16")


def _matmul_setup(device: torch.device, mode: str, n: int) -> tuple[str, dict, str | None]:
    """The statement, its globals and the float32 matmul precision for one mode."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    if mode in ("float32", "tf32"):
        return "a @ b", {"a": a, "b": b}, "highest" if mode == "float32" else "high"
    if mode.startswith("autocast "):
        cast = dtype_from_name(mode.split()[1])
        stmt = "with torch.autocast(kind, dtype=cast):\n    a @ b"
        return stmt, {"a": a, "b": b, "torch": torch, "kind": device.type, "cast": cast}, None
    cast = dtype_from_name(mode)
    return "a @ b", {"a": a.to(cast), "b": b.to(cast)}, None


def matmul_mode_seconds(device: str | torch.device = "cpu", mode: str = "float32", n: int = 512,
                        min_run_time: float = 0.2) -> float:
    """Median seconds of one ``n x n`` matmul in one of :data:`MATMUL_MODES` (:func:`gpulab.timing.time_call`).
    ``"float32"`` is strict FP32 (matmul precision ``"highest"``); ``"tf32"`` allows TF32 tensor cores (``"high"``;
    CUDA since Ampere, elsewhere the same as float32). A mode the device cannot run raises a one-line ValueError."""
    from gpulab.timing import float32_matmul_precision, time_call

    if mode not in MATMUL_MODES:
        raise ValueError(f"unknown mode {mode!r}: use one of {', '.join(MATMUL_MODES)}")
    positive_int(n, "n")
    positive_number(min_run_time, "min_run_time")
    device = pick_device(device)
    try:
        stmt, env, matmul_precision = _matmul_setup(device, mode, n)
        with float32_matmul_precision(matmul_precision):
            return time_call(stmt, env, device, min_run_time=min_run_time)[0]
    except (RuntimeError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"matmul mode {mode!r} failed on {device} ({first})") from None


def matmul_modes(device: str | torch.device = "cpu", n: int = 512, modes: tuple[str, ...] = MATMUL_MODES,
                 min_run_time: float = 0.2) -> list[dict]:
    """One row per mode: ``{"mode", "n", "ms", "x_float32", "note"}`` (speed relative to strict float32, measured
    first). A mode the device cannot run gets ``ms`` None and the reason in ``"note"``; on an NVIDIA GPU
    below compute capability 8.0 the bfloat16 modes are skipped and the ``tf32`` row says it is float32."""
    bad = [m for m in modes if m not in MATMUL_MODES]
    if bad:
        raise ValueError(f"unknown mode(s) {', '.join(map(repr, bad))}: use one of {', '.join(MATMUL_MODES)}")
    base = matmul_mode_seconds(device, "float32", n, min_run_time)
    rows = []
    for mode in modes:
        note = hardware_note(device, mode)
        try:
            if note and "bfloat16" in mode:  # emulated on this GPU: slow, and not what the mode is about
                raise ValueError(f"skipped: {note}")
            seconds = base if mode == "float32" else matmul_mode_seconds(device, mode, n, min_run_time)
        except ValueError as exc:
            rows.append({"mode": mode, "n": n, "ms": None, "x_float32": None, "note": str(exc)})
            continue
        rows.append({"mode": mode, "n": n, "ms": seconds * 1e3, "x_float32": base / seconds, "note": note})
    return rows


def autocast_matmul_seconds(device: str | torch.device = "cpu", dtype: str | torch.dtype | None = None,
                            n: int = 512, min_run_time: float = 0.2) -> float:
    """Median seconds of one ``n x n`` float32 matmul under ``torch.autocast(dtype)`` (``None``: strict float32),
    casting both inputs on every call; :func:`matmul_modes` separates that from the matmul and adds TF32."""
    mode = "float32" if dtype is None else f"autocast {dtype_name(dtype_from_name(dtype))}"
    return matmul_mode_seconds(device, mode, n, min_run_time)
