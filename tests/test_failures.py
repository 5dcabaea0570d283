"""Notebook 10's failures: each reproduced for real, asserted by its message, within its timeout, no orphans.

All the launched cases share ONE torchrun launch (module-scoped fixture); the others run in this process.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time

import psutil
import pytest

from gpulab.course import environment as doctor
from gpulab.distributed.failures import driver as failures
from gpulab.distributed.failures import worker as failures_worker
from gpulab.distributed.launch.result import LaunchError, LaunchResult
from gpulab.distributed.launch.processes import leftover_processes, stop_processes
from gpulab.distributed.launch.rendezvous import port_free
from gpulab.exercises.quiz import check

TIMEOUT = 90.0  # generous for a loaded 2-core machine; a launch here takes a few seconds


@pytest.fixture(scope="module")
def runs():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = failures.reproduce(failures.LAUNCHED, timeout=TIMEOUT)
    after = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()]
    return result, after


@pytest.mark.slow
def test_every_launched_case_ran_in_one_launch_within_its_timeout_and_left_no_process(runs):
    result, orphans = runs
    assert set(result) == {*failures.LAUNCHED, "launch"}
    assert 0 < result["launch"].startup < result["launch"].seconds < TIMEOUT
    assert orphans == []


@pytest.mark.parametrize("name", failures.LAUNCHED)
@pytest.mark.slow
def test_each_case_shows_its_real_error_and_its_fix(runs, name):
    got = runs[0][name]
    assert got.found, f"{name}: {failures.case(name).tell!r} not in {got.error!r}"
    assert got.fixed, f"{name}: the fixed version printed nothing"


@pytest.mark.slow
def test_the_messages_name_what_differs(runs):
    result = runs[0]
    assert "OpType=ALLREDUCE" in result["mismatch"].error and "Op type: ALLREDUCEvs BROADCAST" in result["mismatch"].detail
    assert "shapes: 3vs 4" in result["shapes"].detail
    assert "Timed out waiting 2000ms" in result["timeout"].error
    assert "spare_head.weight" in result["unused"].detail and "spare_head.bias" in result["unused"].detail
    assert re.search(r"Ranks? 1 failed to pass monitoredBarrier in 2000 ms", result["missing"].error)
    assert result["missing"].failed_rank == 0  # the rank that waited at the barrier reports it


@pytest.mark.slow
def test_uneven_inputs_one_rank_goes_on_the_other_times_out_and_join_fixes_it(runs):
    got = runs[0]["uneven"]
    assert list(got.said("no error")) == [0] and "2 batches are done" in got.said("no error")[0]
    assert list(got.said("error")) == [1] and "Timed out waiting 2000ms" in got.said("error")[1]
    fixed = got.said("fixed")
    assert sorted(fixed) == [0, 1]
    counts = {rank: re.search(r"(\d+) batches, (\d+) gradient all-reduces: (\d+) with its own gradients, (\d+) of zeros",
                              said).groups() for rank, said in fixed.items()}
    assert counts == {0: ("2", "3", "2", "1"), 1: ("3", "3", "3", "0")}  # rank 0 shadows rank 1's extra batch
    assert all(said.endswith("same model on every rank: True") for said in fixed.values())


def test_default_timeouts_come_from_torch():
    import torch.distributed as dist
    from torch.distributed import constants

    said = failures.default_timeouts()
    assert said["gloo"] == constants.default_pg_timeout and said["gloo"].total_seconds() > 0
    assert said["nccl"] == constants.default_pg_nccl_timeout
    if not dist.is_nccl_available():
        assert said["nccl"] is None  # torch built without NCCL: the nccl default lives only in its C++ code
    assert said["documented"].startswith("Default value is") and "NCCL" in said["documented"]


def test_the_worker_runs_every_launched_case():
    assert set(failures_worker.CASES) == set(failures.LAUNCHED)


@pytest.mark.slow
def test_the_fixes_give_the_right_numbers(runs):
    result = runs[0]
    assert "each element is now 2" in result["mismatch"].fixed
    assert "sums [2.0, 2.0, 2.0, 1.0]" in result["shapes"].fixed
    reduced, whole = re.findall(r"\d+\.\d+", result["loss"].fixed)
    assert reduced == whole
    rank0 = re.findall(r"\d+\.\d+", result["loss"].error)[0]
    assert rank0 != whole  # rank 0's shard alone is not the batch


def test_port_in_use_is_the_real_error():
    said = failures.port_in_use()
    assert "address already in use" in said and "EADDRINUSE" in said


def test_sampler_without_set_epoch_repeats_its_order():
    same = failures.sampler_orders(12, 3, set_epoch=False)
    moving = failures.sampler_orders(12, 3, set_epoch=True)
    assert same[0] == same[1] == same[2] and len(same[0]) == 6
    assert moving[0] == same[0] and moving[1] != moving[0]
    other = failures.sampler_orders(12, 3, set_epoch=True, rank=1)
    assert all(sorted(a + b) == list(range(12)) for a, b in zip(moving, other))  # the ranks still split the data


def test_unknown_case_is_one_line_naming_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown failure case 'nope': use one of port, mismatch") as info:
        failures.case("nope")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="unknown failure case"):
        failures.reproduce(["nope"])


@pytest.mark.parametrize("names, match", [(["port"], "runs in this process"), ([], "at least one"),
                                          (["loss", "loss"], "each case once")])
def test_bad_case_lists(names, match):
    with pytest.raises(ValueError, match=match):
        failures.reproduce(names)


def test_the_case_that_ends_the_launch_goes_last():
    assert failures.plan(["missing", "loss"]) == ["loss", "missing"]
    with pytest.raises(SystemExit):
        failures_worker.parse_args(["--case", "missing", "--case", "loss"])


def test_parsing_a_fake_launch():
    lines = ["[rank 1] case loss fixed: b", "[rank 0] case loss rank 0 only: 1.5", "[rank 0] case loss fixed: a",
             "[rank 0] case loss seconds: 0.25", "torchrun says something"]

    def fake_launch(*args, **kwargs):
        return LaunchResult(0, lines, 1.0)

    got = failures.reproduce(["loss"], launch=fake_launch)["loss"]
    assert (got.error, got.fixed, got.seconds, len(got.lines)) == ("rank 0 only: 1.5", "a", 0.25, 4)
    assert got.said("fixed") == {0: "a", 1: "b"} and got.said("seconds") == {0: "0.25"} and got.said("nope") == {}

    def no_error(*args, **kwargs):
        return LaunchResult(0, [], 1.0)

    with pytest.raises(RuntimeError, match="ended without the error"):
        failures.reproduce(["missing"], launch=no_error)

    def fails(*args, **kwargs):
        raise LaunchError("rank 1 failed", 1, 1, ["[rank 1] boom"])

    with pytest.raises(LaunchError):  # a case that should not end the launch did
        failures.reproduce(["loss"], launch=fails)


def test_quiz_questions():
    assert check("10", 1, "a").ok and not check("10", 1, "c").ok
    assert check("10", 2, "b").ok and not check("10", 2, "a").ok and not check("10", 2, "c").ok
    assert check("10", 3, 1.0).ok and check("10", 3, "1").ok
    assert "rank 0's own mean" in check("10", 3, 0.5).message
    assert not check("10", 3, 64).ok and not check("10", 3, "lots").ok


def test_doctor_sees_a_taken_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not port_free(port)
        assert doctor.launch_checks(port)["port_free"] is False
        assert "IN USE" in "\n".join(doctor.format_checks(doctor.launch_checks(port)))
    assert port_free(port)
    with pytest.raises(ValueError, match="port=0"):
        port_free(0)


def test_doctor_sees_a_leftover_rank_process():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "gpulab.distributed.fake_worker"])
    try:
        deadline = time.monotonic() + 10  # until the child has exec'd, its command line is still ours
        while not (found := [p for p in leftover_processes() if p["pid"] == sleeper.pid]):
            assert time.monotonic() < deadline, "the sleeping process was never seen"
            time.sleep(0.05)
        assert found == [{"pid": sleeper.pid, "what": "gpulab.distributed.fake_worker"}]
    finally:
        stop_processes([psutil.Process(sleeper.pid)], grace=2)
        sleeper.wait(5)
    assert all(p["pid"] != sleeper.pid for p in leftover_processes())


def test_doctor_report_has_the_launch_checks(monkeypatch):
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
    data = doctor.report()
    assert data["checks"]["debug"] == "DETAIL" and isinstance(data["checks"]["leftovers"], list)
    text = doctor.format_report(data)
    assert "checks       what would break a launch here" in text
    assert "TORCH_DISTRIBUTED_DEBUG: DETAIL" in text and f"port {doctor.DEFAULT_PORT} on 127.0.0.1" in text
    if sys.platform.startswith("linux"):
        assert "loopback interface lo: found" in text
