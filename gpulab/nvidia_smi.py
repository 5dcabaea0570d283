"""THE reader of ``nvidia-smi``, NVIDIA's driver tool: which GPUs it lists, and the settings of one GPU.

A missing ``nvidia-smi`` is normal on a machine without an NVIDIA GPU (a CPU laptop, a Mac, an AMD GPU):
both functions say so instead of failing. Every call has a time limit (a hung driver must not hang us).
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
from typing import Sequence

TIMEOUT_S = 10.0
NOT_FOUND = "not on PATH: normal on a machine without an NVIDIA GPU (CPU, Apple, AMD)"


def _run(args: Sequence[str], timeout: float) -> subprocess.CompletedProcess | str:
    """``nvidia-smi ARGS`` finished, or why it did not run: NOT_FOUND or a no-answer note."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return NOT_FOUND
    try:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"nvidia-smi did not answer within {timeout:g} s"


def listed_gpus(timeout: float = TIMEOUT_S) -> dict:
    """``{"found", "gpus", "note"}``: whether ``nvidia-smi`` is on PATH and the GPUs ``nvidia-smi -L`` lists."""
    done = _run(["-L"], timeout)
    if isinstance(done, str):
        return {"found": done != NOT_FOUND, "gpus": [], "note": done}
    gpus = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("GPU")]
    note = "ok" if done.returncode == 0 else f"nvidia-smi exited with status {done.returncode} (driver problem?)"
    return {"found": True, "gpus": gpus, "note": note}


def query(fields: Sequence[str], gpu: int = 0, timeout: float = TIMEOUT_S) -> dict:
    """``nvidia-smi --query-gpu=FIELDS`` for one GPU: field -> value (unit in brackets where it has one).

    A field this driver does not know is asked alone and reported as not supported; without
    ``nvidia-smi`` the answer is ``{"nvidia-smi": "not found"}``.
    """
    def ask(names: Sequence[str]) -> dict | None:
        done = _run([f"--query-gpu={','.join(names)}", "--format=csv", "-i", str(gpu)], timeout)
        if isinstance(done, str):
            return {n: done for n in names}
        if done.returncode != 0:
            return None
        header, values = list(csv.reader(io.StringIO(done.stdout.strip())))[:2]
        return {n: f"{v.strip()} ({h.strip()})" if "[" in h else v.strip() for n, h, v in zip(names, header, values)}

    if shutil.which("nvidia-smi") is None:
        return {"nvidia-smi": "not found"}
    found = ask(fields)
    if found is None:
        found = {}
        for name in fields:
            found.update(ask([name]) or {name: "not supported by this driver"})
    return found
