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


def test_persistent_workers_need_workers():
    with pytest.raises(ValueError, match="persistent_workers=True needs num_workers >= 1"):
        pinning.slice_loader(torch.zeros(4, 1), torch.zeros(4, 1), 2, persistent_workers=True)
    loader = pinning.slice_loader(torch.zeros(4, 1), torch.zeros(4, 1), 2, num_workers=1, persistent_workers=True)
    assert loader.persistent_workers and loader.num_workers == 1


def _loader_result(seconds, pinned=False, non_blocking=False, workers=0, description="Fake GPU", size=256):
    from gpulab.bench_results import BenchResult

    return BenchResult(probe="copy", device="cuda:0", description=description, torch_version="9.9", backend="CUDA",
                       threads=1, dtype="float32", size=size, seconds=seconds, rate=1.0, unit="GB/s", date="2026",
                       kind="loader", pinned=pinned, non_blocking=non_blocking, workers=workers)


def test_pass_speeds_compare_each_pass_with_the_pageable_one_of_its_device_and_size():
    passes = [_loader_result(0.040), _loader_result(0.008, True, True), _loader_result(0.400, True, True, 2),
              _loader_result(0.010, True, True, description="Other GPU")]  # no pageable pass of its own
    rows = pinning.pass_speeds(passes)
    assert [r["x_pageable"] for r in rows[:3]] == [pytest.approx(1.0), pytest.approx(5.0), pytest.approx(0.1)]
    assert rows[3]["x_pageable"] is None
    assert [r["workers"] for r in rows] == [0, 0, 2, 0] and rows[1]["ms"] == pytest.approx(8.0)
    assert pinning.pass_speeds([]) == []


def test_pass_speeds_of_the_recorded_h200_passes_show_pinning_won_and_workers_lost():
    from gpulab import gpu_reference

    recorded = [r for r in gpu_reference.reference_results("copy", kind="loader") if r.description == "NVIDIA H200"]
    if not recorded:
        pytest.skip("no H200 loader passes in gpulab/reference/")
    rows = {(r["pinned"], r["non_blocking"], r["workers"]): r["x_pageable"] for r in pinning.pass_speeds(recorded)}
    assert rows[(True, True, 0)] > 1 and rows[(False, False, 2)] < 1 and rows[(True, True, 2)] < 1


def test_worker_costs_times_the_four_ways_on_the_cpu():
    rows = pinning.worker_costs("cpu", 1, 1, batch_rows=64, features=15, repeats=1, min_run_time=0.01)
    assert [(r["workers"], r["persistent_workers"], r["pass"]) for r in rows] == [
        (0, False, "every pass"), (1, False, "every pass"), (1, True, "first pass"), (1, True, "later passes")]
    assert all(r["ms"] > 0 for r in rows)
    # Starting a worker process costs more than handing out views in the main process.
    assert rows[1]["ms"] > rows[0]["ms"] and rows[2]["ms"] > rows[0]["ms"]


@pytest.mark.parametrize("call, match", [
    (lambda: pinning.worker_costs("cpu", 0), "size_mb=0"),
    (lambda: pinning.worker_costs("cpu", 1, 0), "num_workers=0"),
    (lambda: pinning.worker_costs("cpu", 1, repeats=0), "repeats=0"),
    (lambda: pinning.worker_costs("tpu", 1), "device"),
])
def test_worker_costs_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_pinning_verdict_follows_what_was_measured(monkeypatch):
    recorded = [_loader_result(0.040, description="H200"), _loader_result(0.008, True, True, description="H200")]
    won = [_loader_result(0.050), _loader_result(0.010, True, True), _loader_result(0.5, True, True, 2)]
    lost = [_loader_result(0.048), _loader_result(0.057, True, True)]
    assert pinning.pinning_verdict([], recorded) == [
        "recorded on H200: the pinned pass was 5.00x as fast as the pageable pass",
        "this machine: no CUDA GPU, nothing to pin for (pin_memory=torch.cuda.is_available() is False)"]
    assert pinning.pinning_verdict(won, recorded)[1].endswith("5.00x as fast as the pageable pass: pinning paid")
    monkeypatch.setattr(pinning.os, "getloadavg", lambda: (40.0, 30.0, 20.0), raising=False)
    monkeypatch.setattr(pinning.os, "cpu_count", lambda: 16)
    verdict = pinning.pinning_verdict(lost)  # nothing recorded: only this machine's lines
    assert verdict[0] == "this machine: the pinned pass was only 0.84x as fast as the pageable pass: pinning did not pay."
    assert "inside next()" in verdict[1] and "(load average 40.0 on 16 cores)" in verdict[1]
    monkeypatch.delattr(pinning.os, "getloadavg", raising=False)  # Windows has no load average
    assert "load average" not in pinning.pinning_verdict(lost)[1]


def test_worker_lines_say_what_workers_added_here_and_where_recorded():
    costs = [{"workers": 0, "persistent_workers": False, "pass": "every pass", "ms": 1.0},
             {"workers": 2, "persistent_workers": False, "pass": "every pass", "ms": 501.0},
             {"workers": 2, "persistent_workers": True, "pass": "first pass", "ms": 700.0},
             {"workers": 2, "persistent_workers": True, "pass": "later passes", "ms": 11.0}]
    recorded = [_loader_result(0.036), _loader_result(0.007, True, True), _loader_result(0.418, workers=2)]
    assert pinning.worker_lines(costs, recorded) == [
        "this machine: 2 new workers added 500 ms to a pass; 2 kept workers added 10 ms to a later pass",
        "recorded on Fake GPU: 2 new workers added 382 ms to a pageable pass"]
    assert len(pinning.worker_lines(costs)) == 1 and len(pinning.worker_lines(costs, recorded[:2])) == 1
    real = pinning.worker_costs("cpu", 1, 1, batch_rows=64, features=15, repeats=1, min_run_time=0.01)
    assert pinning.worker_lines(real)[0].startswith("this machine: 1 new worker added")
