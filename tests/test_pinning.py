"""gpulab.pinning: slice batches, the loader probe on the CPU, and matching exactly the no-accelerator warning."""

from __future__ import annotations

import warnings

import pytest
import torch

from gpulab import pinning

ACCELERATOR = bool(getattr(torch, "accelerator", None) and torch.accelerator.is_available())


def test_slice_sampler_covers_every_row_once_in_order():
    sampler = pinning.SliceSampler(10, 4)
    assert list(sampler) == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert len(sampler) == 3 and len(pinning.SliceSampler(8, 4)) == 2


def test_slice_loader_batches_are_views_not_collated_copies():
    X, y = torch.arange(20.0).reshape(10, 2), torch.arange(10.0).reshape(10, 1)
    batches = list(pinning.slice_loader(X, y, 4))
    assert [len(xb) for xb, _ in batches] == [4, 4, 2]
    assert torch.equal(torch.cat([xb for xb, _ in batches]), X) and torch.equal(torch.cat([yb for _, yb in batches]), y)
    assert all(xb.untyped_storage().data_ptr() == X.untyped_storage().data_ptr() for xb, _ in batches)


@pytest.mark.parametrize("call, match", [
    (lambda: pinning.SliceSampler(0, 4), "rows=0"),
    (lambda: pinning.SliceSampler(4, 0), "batch_size=0"),
    (lambda: pinning.slice_loader(torch.zeros(3, 1), torch.zeros(2, 1), 2), "3 rows but y has 2"),
    (lambda: pinning.loader_probe("cpu", 0), "size_mb=0"),
    (lambda: pinning.loader_probe("cpu", 1, batch_rows=0), "batch_rows=0"),
    (lambda: pinning.loader_probe("cpu", 1, pin_memory=True), "needs a CUDA device"),
])
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_loader_probe_on_cpu_times_the_loader_and_labels_it():
    r = pinning.loader_probe("cpu", 1, batch_rows=64, features=15, min_run_time=0.01)
    rows = 2**20 // (4 * 16)
    assert (r.probe, r.kind, r.pinned, r.non_blocking, r.bytes_moved) == ("copy", "loader", False, False, rows * 16 * 4)
    assert r.rate == pytest.approx(r.bytes_moved / r.seconds / 1e9)
    assert r.label.startswith("cpu loader")


DEPRECATION = "The argument 'device' of Tensor.pin_memory() is deprecated. Please do not pass this argument."


def test_the_warning_match_is_the_no_accelerator_one_only():
    assert not pinning.is_no_accelerator_pin_warning(DEPRECATION)
    assert not pinning.is_no_accelerator_pin_warning(DeprecationWarning(DEPRECATION))
    assert not pinning.is_no_accelerator_pin_warning("pin_memory_device is deprecated, the current accelerator ...")
    assert pinning.is_no_accelerator_pin_warning(
        UserWarning("'pin_memory' argument is set as true but CUDA is not available, then device pinned memory won't be used."))


@pytest.mark.skipif(ACCELERATOR, reason="the warning only comes without an accelerator")
def test_the_warning_torch_gives_here_is_matched():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        next(iter(pinning.slice_loader(torch.zeros(4, 2), torch.zeros(4, 1), 2, pin_memory=True)))
    assert [w for w in caught if pinning.is_no_accelerator_pin_warning(w)], [str(w.message) for w in caught]


def test_who_pins_reads_the_two_places_torch_pins_a_batch():
    rows = pinning.who_pins()
    assert [r["num_workers"] for r in rows] == ["0", ">= 1"]
    single, multi = rows
    assert single["iterator"] == "_SingleProcessDataLoaderIter" and "pin_memory(" in single["line"]
    assert multi["iterator"] == "_MultiProcessingDataLoaderIter" and "_pin_memory_loop" in multi["line"]


def test_who_pins_fails_loudly_when_torch_moves_the_code(monkeypatch):
    monkeypatch.setattr(pinning, "_PINNING_SITES", ((0, "_SingleProcessDataLoaderIter", "_next_data", "no such line"),))
    with pytest.raises(ValueError, match="the pinning code has moved"):
        pinning.who_pins()


@pytest.mark.parametrize("workers", [-1, 1.5, True])
def test_num_workers_must_be_a_whole_number(workers):
    with pytest.raises(ValueError, match="num_workers=.* must be a whole number >= 0"):
        pinning.slice_loader(torch.zeros(4, 1), torch.zeros(4, 1), 2, num_workers=workers)


def test_loader_probe_with_worker_processes_records_them():
    r = pinning.loader_probe("cpu", 1, batch_rows=256, features=15, num_workers=2, min_run_time=0.01)
    assert r.workers == 2 and "2 workers" in r.label
    assert pinning.loader_probe("cpu", 1, batch_rows=256, features=15, min_run_time=0.01).workers == 0
