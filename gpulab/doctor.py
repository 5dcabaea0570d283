"""The environment report behind ``gpulab doctor``: what Python, torch and hardware this machine has.

It also says what the launcher adds to a torchrun run on this OS, and why (``gpulab.distributed.rendezvous``).

``report()`` returns plain data (a dict, JSON-ready); ``format_report()`` turns it into text lines.
A missing ``nvidia-smi`` is normal on a machine without an NVIDIA GPU and is reported as such.
"""

from __future__ import annotations

import os
import platform

import torch

from gpulab import compiling, devices, nvidia_smi, torch_versions
from gpulab.distributed.processes import leftover_processes
from gpulab.distributed.rendezvous import current_plan, port_free

DEFAULT_PORT = 29500  # torchrun's default --master-port (and the usual MASTER_PORT of hand-written scripts)


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


def torchrun_settings() -> dict:
    """``gpulab.distributed.rendezvous``'s plan for this machine, plus ``kept``: variables already set here win."""
    plan = current_plan(single_machine=True).to_dict()
    plan["kept"] = {name: os.environ[name] for name in plan["env"] if name in os.environ}
    return plan


def launch_checks(port: int = DEFAULT_PORT) -> dict:
    """What breaks a launch here before training starts (notebook 10): a taken port, a missing loopback
    interface, the debug level, torchrun or rank processes still running (a run that never ended)."""
    import psutil

    interface = os.environ.get("GLOO_SOCKET_IFNAME") or current_plan().env.get("GLOO_SOCKET_IFNAME")
    return {"port": port, "port_free": port_free(port), "interface": interface,
            "interface_found": interface is None or interface in psutil.net_if_addrs(),
            "debug": os.environ.get("TORCH_DISTRIBUTED_DEBUG", ""), "leftovers": leftover_processes()}


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
        "nvidia_smi": nvidia_smi.listed_gpus(),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "torchrun": torchrun_settings(),
        "checks": launch_checks(),
        "compile": compiling.compile_support("auto"),
        "notebooks": torch_versions.table(),
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
    if "notebooks" in data:
        lines.append("notebooks    which this torch can run (older ones stop in their first cell, saying why):")
        lines += [f"  {line}" for line in data["notebooks"]]
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
    lines += format_checks(data["checks"]) if "checks" in data else []
    smi = data["nvidia_smi"]
    if smi["found"]:
        lines.append(f"nvidia-smi   found: {smi['note']}")
        lines += [f"  {g}" for g in smi["gpus"]]
    else:
        lines.append(f"nvidia-smi   {smi['note']}")
    return "\n".join(lines)


def format_checks(c: dict) -> list[str]:
    """``launch_checks()`` as report lines."""
    leftovers = ", ".join(f"{p['what']} (pid {p['pid']})" for p in c["leftovers"]) or "none"
    lines = ["checks       what would break a launch here (notebook 10):",
             f"  port {c['port']} on 127.0.0.1: " + ("free" if c["port_free"] else
                                                   "IN USE (--standalone picks a free one; or stop the old run)")]
    if c["interface"] is not None:
        lines.append(f"  loopback interface {c['interface']}: " + ("found" if c["interface_found"] else
                     "NOT FOUND (set GLOO_SOCKET_IFNAME to this machine's loopback interface)"))
    lines += [f"  TORCH_DISTRIBUTED_DEBUG: {c['debug'] or 'not set'} (DETAIL names mismatched collectives)",
              f"  torchrun/rank processes running now: {leftovers}"]
    return lines
