"""The torchrun launcher: validation, whole lines per rank, failures by rank, and no orphans."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from gpulab.distributed.launch import torchrun
from gpulab.distributed.launch import command as command_module
from gpulab.distributed.launch.result import LaunchError, LaunchTimeout, failure, line_rank, rank_failures
from gpulab.distributed.launch.processes import alive
from gpulab.distributed.launch.rank_io import FAILED
from gpulab.distributed.launch.torchrun import Torchrun
from gpulab.distributed.launch.command import check_nproc, torchrun_command

# A worker script: prefixed whole lines; behaviour chosen by its first argument.
SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from gpulab.distributed.launch.rank_io import prefix_output
    rank = int(os.environ["RANK"])
    prefix_output(rank)
    mode = sys.argv[1]
    if mode == "chatty":
        for i in range(300):
            print(f"line {i:03d} of rank {rank} " + "x" * 200)
    elif mode == "fail":
        print("starting")
        if rank == 1:
            raise RuntimeError("rank one broke on purpose")
        time.sleep(30)
    elif mode == "sleep":  # silent after 'ready': writing to a closed pipe would end it anyway
        print("ready", flush=True)
        time.sleep(120)
    elif mode == "env":
        for name in ("MASTER_ADDR", "GLOO_SOCKET_IFNAME", "USE_LIBUV", "OMP_NUM_THREADS"):
            print(f"{name}={os.environ.get(name)}")
    elif mode == "race":  # rank 1 raises; rank 0 then loses its peer inside an all-reduce
        import torch, torch.distributed as dist
        from gpulab.distributed.launch.rank_io import run_in_group
        def body():
            if rank == 1:
                raise RuntimeError("rank one broke on purpose")
            dist.all_reduce(torch.ones(1))
        sys.exit(run_in_group("gloo", 20, body))
    elif mode == "tick":
        print("ready", flush=True)
        for _ in range(600):
            time.sleep(0.2)
            print("tick", flush=True)
    """
)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "worker.py"
    path.write_text(SCRIPT)
    return str(path)


def command(script: str, mode: str, nproc: int = 2) -> list[str]:
    return torchrun_command(script, [mode], nproc=nproc, module=False)


def wait_for_ranks(run: Torchrun, n: int, limit: float = 30.0) -> list[int]:
    """Read output until ``n`` ranks said 'ready'; return the workers' pids."""
    ready: set[int] = set()
    deadline = time.monotonic() + limit
    run.on_line = lambda line: ready.add(line_rank(line)) if line.endswith("ready") else None
    while len(ready) < n and time.monotonic() < deadline:
        run.pump(0.2)
    assert len(ready) == n, run.lines
    pids = run.worker_pids()
    assert len(pids) >= n
    return pids


def assert_all_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if alive(p)] == []


@pytest.mark.parametrize("bad", [0, -1, "2", 1.5, True, None])
def test_check_nproc_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="nproc="):
        check_nproc(bad)


def test_check_nproc_backends(monkeypatch):
    monkeypatch.setattr(command_module, "gpu_count", lambda: 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert check_nproc(1) == "gloo"
    with pytest.raises(ValueError, match="need 2 GPUs, this machine has 0"):
        check_nproc(2, "nccl")
    with pytest.raises(ValueError, match="backend='mpi'"):
        check_nproc(1, "mpi")
    monkeypatch.setattr(command_module, "gpu_count", lambda: 2)
    assert check_nproc(2) == "nccl"
    assert check_nproc(3) == "gloo"  # more ranks than GPUs: auto falls back to gloo
    with pytest.raises(ValueError, match="need 3 GPUs"):
        check_nproc(3, "nccl")


def test_more_ranks_than_cores_warns(monkeypatch):
    monkeypatch.setattr(command_module, "gpu_count", lambda: 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    with pytest.warns(UserWarning, match="3 ranks on 2 CPU cores"):
        assert check_nproc(3) == "gloo"


def test_torchrun_command_shapes():
    one = torchrun_command("gpulab.distributed.ddp.worker", ["--epochs", 3], nproc=2)
    assert one[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--standalone" in one and one[-4:] == ["-m", "gpulab.distributed.ddp.worker", "--epochs", "3"]
    assert one[one.index("--local-addr") + 1] == "127.0.0.1"  # one machine: the ranks meet on loopback
    two = torchrun_command("train.py", [], nproc=1, module=False, nnodes=2, node_rank=1, master_port=29600)
    assert "--standalone" not in two and "-m" not in two[3:]
    assert two[two.index("--node-rank") + 1] == "1" and two[two.index("--master-addr") + 1] == "127.0.0.1"
    assert "--local-addr" in two and two[-1] == "train.py"  # two "nodes" on this machine
    far = torchrun_command("train.py", [], nproc=1, module=False, nnodes=2, master_addr="10.0.0.1", master_port=29600)
    assert "--local-addr" not in far  # real nodes: each finds its own address


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"nproc": 0}, "nproc=0"),
        ({"nproc": 1, "nnodes": 2, "node_rank": 2, "master_port": 1234}, "node_rank=2 must be below nnodes=2"),
        ({"nproc": 1, "nnodes": 2}, "needs master_port"),
        ({"nproc": 1, "master_port": 70000}, "master_port=70000"),
        ({"nproc": 1, "max_restarts": -1}, "max_restarts=-1"),
    ],
)
def test_torchrun_command_rejects(kwargs, match):
    with pytest.raises(ValueError, match=match):
        torchrun_command("x", **kwargs)


def test_timeout_must_be_positive(script):
    with pytest.raises(ValueError, match="timeout=0"):
        torchrun.launch(script, ["chatty"], nproc=1, module=False, timeout=0)


@pytest.mark.slow
def test_lines_are_whole_and_prefixed(script):
    result = torchrun.launch(script, ["chatty"], nproc=2, module=False, timeout=60, on_line=None)
    for rank in (0, 1):
        mine = result.rank_lines(rank)
        assert mine == [f"line {i:03d} of rank {rank} " + "x" * 200 for i in range(300)]
    assert all(line_rank(line) is not None or "[rank" not in line for line in result.lines)


@pytest.mark.slow
def test_ranks_get_the_settings_of_this_os(script, monkeypatch):
    from gpulab.distributed.launch.rendezvous import current_plan

    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    result = torchrun.launch(script, ["env"], nproc=2, module=False, timeout=60, on_line=None)
    plan = current_plan()
    for rank in (0, 1):
        seen = dict(line.split("=", 1) for line in result.rank_lines(rank))
        assert seen["MASTER_ADDR"] == "127.0.0.1" and seen["OMP_NUM_THREADS"] == "1"
        for name in ("GLOO_SOCKET_IFNAME", "USE_LIBUV"):
            assert seen[name] == plan.env.get(name, "None")


@pytest.mark.slow
def test_failing_rank_is_named_with_its_last_lines(script):
    seen: list[str] = []
    with pytest.raises(LaunchError) as info:
        torchrun.launch(script, ["fail"], nproc=2, module=False, timeout=60, on_line=seen.append)
    err = info.value
    assert err.rank == 1
    assert "rank 1 failed" in str(err) and "rank one broke on purpose" in str(err)
    assert "[rank 1] starting" in str(err) and "[rank 0]" not in str(err)
    assert any(line.startswith("[rank 1] RuntimeError") for line in seen)  # streamed live


@pytest.mark.slow
def test_the_rank_that_raised_first_is_named_not_the_one_that_lost_its_peer(script):
    with pytest.raises(LaunchError) as info:
        torchrun.launch(script, ["race"], nproc=2, module=False, timeout=60, on_line=None)
    err = info.value
    assert err.rank == 1, str(err)
    assert str(err).startswith("rank 1 failed first: RuntimeError: rank one broke on purpose")
    assert "[rank 0]" not in str(err) and FAILED not in str(err)


def _failed(rank: int, when: float, error: str) -> str:
    return f"[rank {rank}] {FAILED} {when:.6f}: {error}"


TORCHRUN_REPORT = ["Root Cause (first observed failure):", "[0]:", "  rank      : 0 (local_rank: 0)",
                   "  exitcode  : 1 (pid: 885)"]


@pytest.mark.parametrize("rank0_when", [1.0, 3.0], ids=["rank-0-noticed-earlier", "rank-0-noticed-later"])
def test_an_error_of_its_own_beats_a_lost_peer_whatever_the_clock_says(rank0_when):
    lines = ["[rank 1] Traceback (most recent call last):", "[rank 1] RuntimeError: Pair is not connected",
             _failed(1, 2.0, "RuntimeError: [enforce fail at pair.cc:789] Pair is not connected"),
             "[rank 0] Traceback (most recent call last):", "[rank 0] RuntimeError: Connection closed by peer",
             _failed(0, rank0_when, "RuntimeError: [pair.cc:547] Connection closed by peer [127.0.0.1]:9648"),
             *TORCHRUN_REPORT]  # torchrun keeps whole seconds: on a tie it names rank 0
    err = failure(lines, 1)
    assert err.rank == 1 and str(err).startswith("rank 1 failed first: RuntimeError: [enforce fail")
    assert "Connection closed" not in str(err) and "[rank 1] RuntimeError: Pair is not connected" in str(err)


def test_of_two_errors_of_their_own_the_earlier_is_named():
    lines = [_failed(0, 5.25, "ValueError: late"), _failed(2, 5.125, "RuntimeError: early"), *TORCHRUN_REPORT]
    assert failure(lines, 1).rank == 2
    assert [f.rank for f in rank_failures(lines)] == [2, 0]


def test_a_rank_killed_without_a_traceback_is_named_when_the_others_only_lost_it():
    lines = [_failed(0, 1.0, "RuntimeError: Connection reset by peer"),
             "Root Cause (first observed failure):", "[2]:", "  rank      : 2 (local_rank: 2)", "  exitcode  : -9"]
    err = failure(lines, 1)
    assert err.rank == 2 and str(err).startswith("rank 2 failed first")


def test_lines_already_printed_are_not_printed_again():
    lines = ["[rank 1] Traceback (most recent call last):", "[rank 1] ValueError: bad", _failed(1, 1.0, "ValueError: bad")]
    shown = str(failure(lines, 1, shown=True))
    assert shown == "rank 1 failed first: ValueError: bad; its traceback is above, in the lines marked [rank 1]"
    quiet = str(failure(lines, 1))
    assert quiet.count("ValueError: bad") == 2 and "Traceback" in quiet and FAILED not in quiet  # header + tail


def test_without_failed_lines_torchruns_report_still_names_the_rank():
    err = failure(["[rank 1] boom", "  rank      : 1 (local_rank: 1)", "  exitcode  : 3"], 1)
    assert err.rank == 1 and "(exit code 3)" in str(err)


@pytest.mark.slow
def test_timeout_leaves_no_process(script):
    with Torchrun(command(script, "sleep"), on_line=None) as run:
        pids = wait_for_ranks(run, 2) + [run.pid]
        run.on_line = None
        start = time.monotonic()
        with pytest.raises(LaunchTimeout, match="timed out after"):
            run.wait(timeout=time.perf_counter() - run.started + 1.0)
        assert time.monotonic() - start < 10
    assert_all_gone(pids)


@pytest.mark.slow
def test_keyboard_interrupt_leaves_no_process(script):
    with Torchrun(command(script, "tick"), on_line=None) as run:
        pids = wait_for_ranks(run, 2) + [run.pid]

        def interrupt(line: str) -> None:  # what a notebook's stop button does mid-stream
            raise KeyboardInterrupt

        run.on_line = interrupt
        with pytest.raises(KeyboardInterrupt):
            run.wait(timeout=60)
        assert_all_gone(pids)  # wait() itself stopped everything, before the with-block ended


@pytest.mark.slow
def test_leaving_the_with_block_leaves_no_process(script):
    with Torchrun(command(script, "sleep"), on_line=None) as run:
        pids = wait_for_ranks(run, 2) + [run.pid]
        assert all(alive(p) for p in pids)
    assert_all_gone(pids)


@pytest.mark.slow
def test_interpreter_exit_stops_workers(script, tmp_path):
    child = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_launch import command, wait_for_ranks
        from gpulab.distributed.launch.torchrun import Torchrun
        run = Torchrun(command({script!r}, "sleep"), on_line=None).start()
        pids = wait_for_ranks(run, 2) + [run.pid]
        print(" ".join(map(str, pids)), flush=True)
        """
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) >= 3
    assert_all_gone(pids)
