"""The torchrun command line and the checks before a launch: rank count, backend, timeout.

``torchrun_command("gpulab.distributed.ddp.worker", ["--epochs", "5"], nproc=2)`` is the command
``gpulab.distributed.launch.torchrun.launch`` runs: ``python -m torch.distributed.run`` (this interpreter's torchrun),
``--standalone`` on one node or a static rendezvous on several, plus the flags
``gpulab.distributed.launch.rendezvous`` asks for when every rank runs on this machine.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Sequence

from gpulab.distributed.launch.rendezvous import current_plan, is_loopback
from gpulab.validate import non_negative_int, positive_int, positive_number


def check_timeout(timeout: float) -> None:
    """ValueError unless ``timeout`` is a finite, positive number of seconds."""
    positive_number(timeout, "timeout")


def gpu_count() -> int:
    """CUDA devices visible here (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_nproc(nproc: int, backend: str = "auto") -> str:
    """Validate ``nproc`` ranks per node for ``backend`` and return the backend to use.

    ``auto`` means nccl when every rank can have its own GPU, else gloo. More ranks than
    GPUs on nccl is an error; more ranks than CPU cores on gloo only warns (it works, slowly).
    """
    positive_int(nproc, "nproc")
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend={backend!r}: use auto, gloo or nccl")
    gpus = gpu_count()
    if backend == "auto":
        backend = "nccl" if 0 < nproc <= gpus else "gloo"
    if backend == "nccl" and nproc > gpus:
        raise ValueError(f"nproc={nproc} ranks on nccl need {nproc} GPUs, this machine has {gpus}")
    cores = os.cpu_count() or 1
    if backend == "gloo" and nproc > cores:
        warnings.warn(f"{nproc} ranks on {cores} CPU cores: they will share cores and run slower", stacklevel=2)
    return backend


def backend_note(nproc: int, requested: str, chosen: str) -> str | None:
    """A sentence when ``auto`` left the GPUs idle: more ranks than GPUs, so gloo on the CPU."""
    gpus = gpu_count()
    if requested == "auto" and chosen == "gloo" and gpus:
        return (f"note: {nproc} ranks but {gpus} CUDA GPU(s): nccl needs one GPU per rank, so the ranks train "
                f"on the CPU with gloo and the GPU stays idle (use --nproc {gpus} to train on the GPU)")
    return None


def torchrun_command(
    target: str,
    args: Sequence[str] = (),
    *,
    nproc: int,
    module: bool = True,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    max_restarts: int = 0,
) -> list[str]:
    """The torchrun command line: ``--standalone`` on one node, a static rendezvous on several.

    A run on this machine alone (one node, or every node at a loopback address) also gets the
    flags of ``gpulab.distributed.launch.rendezvous`` (``--local-addr 127.0.0.1``).
    """
    for name, value in (("nproc", nproc), ("nnodes", nnodes)):
        positive_int(value, name)
    for name, value in (("node_rank", node_rank), ("max_restarts", max_restarts)):
        non_negative_int(value, name)
    if node_rank >= nnodes:
        raise ValueError(f"node_rank={node_rank} must be below nnodes={nnodes} (0..{nnodes - 1})")
    if master_port is not None and (isinstance(master_port, bool) or not isinstance(master_port, int)
                                    or not 1 <= master_port <= 65535):
        raise ValueError(f"master_port={master_port!r} must be an integer in 1..65535")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--max-restarts", str(max_restarts)]
    if nnodes == 1 and master_addr is None and master_port is None:
        cmd.append("--standalone")  # its own store on a free port: parallel runs never clash
    else:
        if master_port is None:
            raise ValueError("a rendezvous on master_addr needs master_port, the same on every node (see free_port())")
        cmd += ["--nnodes", str(nnodes), "--node-rank", str(node_rank),
                "--master-addr", master_addr or "127.0.0.1", "--master-port", str(master_port)]
    cmd += current_plan(single_machine(master_addr)).flags
    if module:
        cmd.append("-m")
    return cmd + [target, *map(str, args)]


def single_machine(master_addr: str | None) -> bool:
    """True when every rank runs on this machine: no ``master_addr`` (it defaults to 127.0.0.1) or a loopback one."""
    return is_loopback(master_addr or "127.0.0.1")
