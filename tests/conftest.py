"""Shared pytest hooks. Markers are declared in pyproject.toml; this file only adds behaviour."""
from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``gpu`` when no CUDA device is visible, saying why."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch  # imported only when a gpu test was collected

    if torch.cuda.is_available():
        return
    reason = "needs a CUDA device: torch.cuda.is_available() is False on this machine"
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def cuda_reported(monkeypatch):
    """torch says one CUDA device is available, whether or not there is one.

    On a CPU-only build any real use of CUDA still fails ("Torch not compiled with CUDA enabled"), so code
    that picks "auto" behind the caller's back, or moves data to a GPU the model is not on, fails here
    as it would on a GPU machine. This is how CI, which has no GPU, catches that class of bug.
    """
    import torch

    if torch.backends.cuda.is_built() and not torch.cuda.is_available():
        pytest.skip("a CUDA build of torch with no usable GPU: once CUDA is reported, torch's own code (Adam's "
                    "graph-capture check) calls the driver and fails, so the fake cannot run here")
    count = max(1, torch.cuda.device_count())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
