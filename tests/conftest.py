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
