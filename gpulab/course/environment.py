"""The environment report behind ``gpulab doctor`` and ``gpulab preflight``: what this machine has, and whether
the course runs on it.

``report()`` returns what Python, torch and hardware this machine has, and what the launcher adds to a
torchrun run on this OS and why (``gpulab.distributed.launch.rendezvous``), as plain data (a dict,
JSON-ready); ``format_report()`` turns it into text lines. A missing ``nvidia-smi`` is normal on a machine
without an NVIDIA GPU and is reported as such.

The pre-class checks (``run_checks``) each return a ``Check``: ``OK``, ``NOTE`` (works, with advice: e.g. a
multi-GB CUDA build of torch on a machine without an NVIDIA GPU) or ``PROBLEM`` (the course will not run as it
is), with the fix in one line. The machine is ready when no check says ``PROBLEM``. Checks never raise: a check
that cannot run is itself a ``PROBLEM``. ``gpulab.course.environment_report`` prints the checks (one machine's,
or a whole room's from their JSON files).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterator

import torch

from gpulab import devices, nvidia_smi, torch_versions
from gpulab.profiling import compile_timing as compiling
from gpulab.distributed.launch.processes import leftover_processes
from gpulab.distributed.launch.rendezvous import current_plan, port_free

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
    """``gpulab.distributed.launch.rendezvous``'s plan for this machine, plus ``kept``: variables already set here win."""
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


# ----------------------------------------------------------------------------- the pre-class checks

OK, NOTE, PROBLEM = "OK", "NOTE", "PROBLEM"
MIN_FREE_GIB = 2.0
DIST = "gpulab"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
INSTALL_FIX = "run `python course.py install` in the course folder (or: pip install -c constraints.txt -e .)"


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str
    status: str
    detail: str
    fix: str = ""


def _requirements() -> tuple[str, list[str]]:
    """``(Requires-Python, [runtime requirements])`` of the installed gpulab (extras left out)."""
    meta = metadata.metadata(DIST)
    reqs = [r for r in (metadata.requires(DIST) or []) if "extra ==" not in r]
    return meta.get("Requires-Python") or "", reqs


def tested_versions(path: Path | None = None) -> dict[str, str]:
    """``name -> version`` pinned in constraints.txt, when the course folder has one (else empty)."""
    path = path or Path(__file__).resolve().parent.parent / "constraints.txt"
    if not path.is_file():
        return {}
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(encoding="utf-8"), flags=re.M)
    return {_normal(name): version for name, version in pins}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_python() -> Check:
    """The running Python against gpulab's ``Requires-Python``."""
    from packaging.specifiers import SpecifierSet

    here = platform.python_version()
    try:
        needed, _ = _requirements()
    except metadata.PackageNotFoundError:
        return Check("python", PROBLEM, f"{here}, but gpulab is not installed in this Python", INSTALL_FIX)
    if needed and here not in SpecifierSet(needed):
        return Check("python", PROBLEM, f"{here}, the course needs {needed}",
                     f"install Python {needed.lstrip('>=~')} or newer and create the environment again")
    return Check("python", OK, f"{here} (needs {needed or 'any'})")


def check_packages() -> list[Check]:
    """Every runtime dependency: installed, and in the range gpulab asks for."""
    from packaging.requirements import Requirement

    try:
        _, reqs = _requirements()
    except metadata.PackageNotFoundError:
        return [Check("packages", PROBLEM, "gpulab is not installed in this Python", INSTALL_FIX)]
    tested = tested_versions()
    checks = []
    for req in map(Requirement, reqs):
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            checks.append(Check(req.name, PROBLEM, f"not installed (needs {req.specifier})", INSTALL_FIX))
            continue
        pin = tested.get(_normal(req.name))
        note = f"; tested with {pin}" if pin and pin != version.split("+")[0] else ""
        if req.specifier.contains(version, prereleases=True):
            checks.append(Check(req.name, OK, f"{version} (needs {req.specifier}{note})"))
        else:
            checks.append(Check(req.name, PROBLEM, f"{version}, the course needs {req.specifier}",
                                f"pip install --upgrade '{req}'" + (f" (tested: {req.name}=={pin})" if pin else "")))
    return checks


def check_disk(path: str | Path = ".", min_free_gib: float = MIN_FREE_GIB) -> Check:
    """Free space where the course runs (outputs, checkpoints, pip's cache)."""
    free = shutil.disk_usage(path).free / 2**30
    if free < min_free_gib:
        return Check("disk", PROBLEM, f"{free:.1f} GiB free here, less than {min_free_gib:g} GiB",
                     "free some disk space (for example `pip cache purge`) or work on another drive")
    return Check("disk", OK, f"{free:.1f} GiB free here (needs {min_free_gib:g} GiB)")


def _nvidia_package_bytes() -> int:
    """Bytes of the ``nvidia-*`` pip packages a CUDA build of torch pulls in (0 with conda or a CPU build)."""
    total = 0
    for dist in metadata.distributions():
        if (dist.metadata.get("Name") or "").lower().startswith("nvidia-"):
            for f in dist.files or []:
                try:
                    total += f.locate().stat().st_size
                except OSError:
                    pass
    return total


def check_torch_build() -> Check:
    """The torch build against the hardware: a CUDA build needs an NVIDIA GPU to be worth its size."""
    try:
        import torch

        from gpulab import devices, nvidia_smi
    except Exception as exc:  # a broken torch can raise anything on import
        return Check("torch build", PROBLEM, f"torch does not import: {type(exc).__name__}: {exc}", INSTALL_FIX)
    build = devices.cuda_backend() or "CPU-only"
    smi = nvidia_smi.listed_gpus()
    if torch.version.cuda and torch.cuda.is_available():
        return Check("torch build", OK, f"{build}, {torch.cuda.device_count()} NVIDIA GPU(s) usable")
    if torch.version.cuda and not smi["found"]:
        gb = _nvidia_package_bytes() / 1e9
        size = f" plus {gb:.1f} GB of nvidia-* packages" if gb >= 0.1 else ""
        return Check("torch build", NOTE, f"{build}{size}, but no NVIDIA GPU here: the course runs, on the CPU",
                     f"to save the space: pip install --force-reinstall torch --index-url {CPU_INDEX} "
                     f"(README, 'Installing on a classroom network')")
    if torch.version.cuda:
        return Check("torch build", NOTE, f"{build}, nvidia-smi found but torch cannot use the GPU ({smi['note']})",
                     "update the NVIDIA driver, or install a torch build for an older CUDA (pytorch.org)")
    if smi["found"] and smi["gpus"]:
        return Check("torch build", NOTE, f"{build}, but this machine has an NVIDIA GPU torch cannot use",
                     "install the CUDA build of torch (pytorch.org, 'Get started') to use the GPU")
    if devices.mps_available():
        return Check("torch build", OK, f"{build} with Apple MPS: the GPU path runs on mps")
    return Check("torch build", OK, f"{build}: right for a machine without an NVIDIA GPU")


def check_torch_version() -> Check:
    """This torch against what each notebook needs (``gpulab.torch_versions``): a NOTE names any it cannot run."""
    try:
        import torch

        from gpulab import torch_versions
    except Exception as exc:  # a broken torch can raise anything on import
        return Check("torch version", PROBLEM, f"torch does not import: {type(exc).__name__}: {exc}", INSTALL_FIX)
    too_old = [nb for nb in sorted(torch_versions.NEEDS) if not torch_versions.runs_here(nb)]
    if not too_old:
        return Check("torch version", OK, f"{torch.__version__}: every notebook runs")
    need = max((torch_versions.needed(nb) for nb in too_old), key=torch_versions.release)
    return Check("torch version", NOTE, f"{torch.__version__}: notebook(s) {', '.join(too_old)} need a newer torch "
                                        f"and stop in their first cell; the others run",
                 f'pip install --upgrade "torch>={need}" (or python course.py install, which pins the tested one)')


def check_rendezvous(timeout: float = 60.0) -> Check:
    """Two gloo ranks meet on 127.0.0.1 and all-reduce (notebooks 05-07 need this)."""
    try:
        from gpulab.distributed.launch import rendezvous_check

        result = rendezvous_check.rendezvous(2, timeout)
    except Exception as exc:  # torch missing or broken
        return Check("rendezvous", PROBLEM, f"could not start: {type(exc).__name__}: {exc}", INSTALL_FIX)
    if result.ok:
        return Check("rendezvous", OK, f"{result.detail} in {result.seconds:.1f} s")
    if result.detail.startswith("could not open a port"):
        fix = "a firewall or security tool blocks local ports: allow Python to listen on 127.0.0.1"
    else:
        fix = ("allow Python through the firewall for local (127.0.0.1) connections; on a VPN, disconnect and "
               "retry; on macOS, check that `ping $(hostname)` answers")
    return Check("rendezvous", PROBLEM, result.detail, fix)


def start_new_kernel(**kwargs):
    """``jupyter_client.manager.start_new_kernel`` (a module attribute so tests can replace it)."""
    from jupyter_client.manager import start_new_kernel as start

    return start(**kwargs)


def _tail(log) -> str:
    from gpulab.distributed.launch.processes import last_line

    line = last_line(log)
    return f" ({line})" if line else ""


def check_kernel(timeout: float = 60.0, kernel_name: str = "python3") -> Check:
    """A notebook kernel starts, imports gpulab and torch, and answers ``1 + 1``."""
    start = time.monotonic()
    results: list[str] = []

    def keep(msg: dict) -> None:
        if msg.get("msg_type") == "execute_result":
            results.append(msg["content"]["data"].get("text/plain", ""))

    with tempfile.TemporaryFile() as log:  # the kernel's own messages: shown only when it fails
        try:
            km, kc = start_new_kernel(kernel_name=kernel_name, startup_timeout=timeout,
                                      stdout=subprocess.DEVNULL, stderr=log)
        except Exception as exc:  # no such kernel, it died at start, it timed out
            return Check("kernel", PROBLEM, f"the {kernel_name!r} kernel did not start: {type(exc).__name__}: "
                         f"{exc}{_tail(log)}",
                         "python -m ipykernel install --user (run it with this environment's Python)")
        try:
            reply = kc.execute_interactive("import gpulab, torch\n1 + 1", timeout=timeout, output_hook=keep)
            content = reply["content"]
        except Exception as exc:  # timeout, dead kernel
            return Check("kernel", PROBLEM, f"the kernel started but did not answer: {type(exc).__name__}: "
                         f"{exc}{_tail(log)}", "restart the computer and run `gpulab preflight` again")
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    if content.get("status") != "ok":
        error = f"{content.get('ename')}: {content.get('evalue')}"
        return Check("kernel", PROBLEM, f"the kernel runs a Python where {error}",
                     "start JupyterLab from the course environment (`python course.py lab`), or register this one: "
                     "python -m ipykernel install --user --name gpulab")
    if results != ["2"]:
        return Check("kernel", PROBLEM, f"1 + 1 gave {results!r} instead of 2", "reinstall ipykernel: " + INSTALL_FIX)
    return Check("kernel", OK, f"{kernel_name} kernel started, imported gpulab and torch, 1 + 1 = 2, "
                               f"in {time.monotonic() - start:.1f} s")


def run_checks(timeout: float = 60.0, min_free_gib: float = MIN_FREE_GIB) -> Iterator[Check]:
    """Every check, in report order, each yielded as soon as it is done."""
    steps: list[tuple[str, Callable[[], Check | list[Check]]]] = [
        ("python", check_python), ("packages", check_packages), ("disk", lambda: check_disk(".", min_free_gib)),
        ("torch build", check_torch_build), ("torch version", check_torch_version), ("rendezvous", lambda: check_rendezvous(timeout)),
        ("kernel", lambda: check_kernel(timeout)),
    ]
    for name, step in steps:
        try:
            found = step()
        except Exception as exc:  # a check must never end the report
            found = Check(name, PROBLEM, f"the check itself failed: {type(exc).__name__}: {exc}", INSTALL_FIX)
        yield from (found if isinstance(found, list) else [found])
