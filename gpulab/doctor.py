"""The environment report behind ``gpulab doctor``: what Python, torch and hardware this machine has.

It also says what the launcher adds to a torchrun run on this OS, and why (``gpulab.distributed.rendezvous``).

``report()`` returns plain data (a dict, JSON-ready); ``format_report()`` turns it into text lines.
A missing ``nvidia-smi`` is normal on a machine without an NVIDIA GPU and is reported as such.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess

import torch

from gpulab import compiling, devices
from gpulab.distributed.rendezvous import current_plan

NVIDIA_SMI_TIMEOUT_S = 10


def distributed_backends() -> dict[str, bool]:
    """Which ``torch.distributed`` backends this torch build has: gloo (CPU), nccl (NVIDIA), mpi."""
    dist = torch.distributed
    if not dist.is_available():
        return {"gloo": False, "nccl": False, "mpi": False}
    return {"gloo": bool(dist.is_gloo_available()), "nccl": bool(dist.is_nccl_available()),
            "mpi": bool(dist.is_mpi_available())}


def current_accelerator() -> str:
    """``torch.accelerator.current_accelerator()`` as text: ``'cuda'``, ``'none'``, or why it is not asked."""
    acc = getattr(torch, "accelerator", None)
    if acc is None or not hasattr(acc, "current_accelerator"):
        return "n/a (this torch has no torch.accelerator)"
    found = acc.current_accelerator() if acc.is_available() else None
    return found.type if found is not None else "none"


def nvidia_smi(timeout: float = NVIDIA_SMI_TIMEOUT_S) -> dict:
    """Whether ``nvidia-smi`` is on PATH and, if so, the GPUs it lists (``nvidia-smi -L``)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"found": False, "gpus": [],
                "note": "not on PATH: normal on a machine without an NVIDIA GPU (CPU, Apple, AMD)"}
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"found": True, "gpus": [], "note": f"nvidia-smi did not answer within {timeout:g} s"}
    gpus = [line.strip() for line in out.stdout.splitlines() if line.strip().startswith("GPU")]
    note = "ok" if out.returncode == 0 else f"nvidia-smi exited with status {out.returncode} (driver problem?)"
    return {"found": True, "gpus": gpus, "note": note}


def torchrun_settings() -> dict:
    """``gpulab.distributed.rendezvous``'s plan for this machine, plus ``kept``: variables already set here win."""
    plan = current_plan(single_machine=True).to_dict()
    plan["kept"] = {name: os.environ[name] for name in plan["env"] if name in os.environ}
    return plan


def report() -> dict:
    """Everything ``gpulab doctor`` prints, as JSON-ready data."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "torch": torch.__version__,
        "build": devices.cuda_backend() or "CPU-only",
        "devices": [d.to_dict() for d in devices.list_devices()],
        "auto_device": str(devices.pick_device("auto")),
        "accelerator": current_accelerator(),
        "distributed": distributed_backends(),
        "nvidia_smi": nvidia_smi(),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "torchrun": torchrun_settings(),
        "compile": compiling.compile_support("auto"),
    }


def _memory(nbytes: int | None) -> str:
    return f", {nbytes / 2**30:.1f} GiB" if nbytes else ""


def format_report(data: dict) -> str:
    """The report as aligned text lines (no machine paths)."""
    lines = [
        f"python       {data['python']} ({data['platform']})",
        f"torch        {data['torch']} ({data['build']} build)",
        "devices:",
    ]
    for d in data["devices"]:
        extra = _memory(d.get("memory_bytes"))
        if d.get("capability"):
            extra += f", compute capability {d['capability']}"
        if d.get("backend"):
            extra += f", {d['backend']}"
        lines.append(f"  {d['name']:<10} {d['description']}{extra}")
    dist = data["distributed"]
    lines += [
        f"auto picks   {data['auto_device']}",
        f"accelerator  {data['accelerator']}  (torch.accelerator.current_accelerator())",
        "distributed  " + ", ".join(f"{k}: {'yes' if v else 'no'}" for k, v in dist.items()),
        f"threads      {data['threads']}  (torch.get_num_threads(); {data['cpu_count']} logical CPUs)",
    ]
    comp = data["compile"]
    lines.append(f"compile      torch.compile on {comp['device']}: {'yes' if comp['ok'] else 'no'} ({comp['note']})")
    plan = data["torchrun"]
    lines.append(f"torchrun     what gpulab adds to a run on this machine ({plan['platform']}):")
    for name, value in zip(plan["flags"][::2], plan["flags"][1::2]):
        lines.append(f"  {name} {value}: {plan['reasons'][name]}")
    for name, value in plan["env"].items():
        kept = plan["kept"].get(name)
        said = f"{name}={kept} (set here, kept; gpulab would set {value})" if kept is not None else f"{name}={value}"
        lines.append(f"  {said}: {plan['reasons'][name]}")
    smi = data["nvidia_smi"]
    if smi["found"]:
        lines.append(f"nvidia-smi   found: {smi['note']}")
        lines += [f"  {g}" for g in smi["gpus"]]
    else:
        lines.append(f"nvidia-smi   {smi['note']}")
    return "\n".join(lines)
