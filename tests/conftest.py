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


# ----------------------------------------------------------------------------- launches are marked slow

_LAUNCHES = [0]


def pytest_configure(config: pytest.Config) -> None:
    """Count every torchrun launch and every rendezvous check, so a test that starts ranks must say so.

    Without a CUDA GPU, notebook 14's Triton kernels run in Triton's interpreter, which must be switched on
    before anything imports triton (torch.compile on a CPU does): so it is switched on here, for every test and
    every notebook kernel started from this process (gpulab.kernels.runtime says why).
    """
    import os

    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from gpulab.distributed.launch import rendezvous_check
    from gpulab.distributed.launch import torchrun

    start, rank_command = torchrun.Torchrun.start, rendezvous_check._rank_command

    def counted_start(self, *args, **kwargs):
        _LAUNCHES[0] += 1
        return start(self, *args, **kwargs)

    def counted_rank_command(*args, **kwargs):  # built just before each rank's process starts
        _LAUNCHES[0] += 1
        return rank_command(*args, **kwargs)

    torchrun.Torchrun.start = counted_start
    rendezvous_check._rank_command = counted_rank_command


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    before = _LAUNCHES[0]
    result = yield
    _must_be_slow_if_it_launched(item, before)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    before = _LAUNCHES[0]
    result = yield
    _must_be_slow_if_it_launched(item, before)
    return result


def _must_be_slow_if_it_launched(item: pytest.Item, before: int) -> None:
    if _LAUNCHES[0] > before and item.get_closest_marker("slow") is None:
        pytest.fail(f"{item.nodeid} starts processes (torchrun or the rendezvous check) but is not marked "
                    "@pytest.mark.slow", pytrace=False)
