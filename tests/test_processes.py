"""gpulab.distributed.launch.processes: the process tree, stopping, and the line reader; fakes for what one OS cannot show."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from gpulab.distributed.launch import processes
from gpulab.distributed.launch.processes import LineReader, ProcessTree, alive, new_group_options, running, stop_processes


class FakeProcess:
    """A psutil.Process stand-in: records signals; ``dies_on`` says which signal ends it."""

    def __init__(self, pid: int, dies_on: str | None = "terminate", env: dict | None = None,
                 reused: bool = False, zombie: bool = False) -> None:
        self.pid, self.dies_on, self.env = pid, dies_on, env or {}
        self.alive, self.reused, self.zombie, self.calls = True, reused, zombie, []

    def is_running(self) -> bool:
        return self.alive and not self.reused  # psutil: False once the pid belongs to another process

    def status(self) -> str:
        return psutil.STATUS_ZOMBIE if self.zombie else psutil.STATUS_RUNNING

    def terminate(self) -> None:
        self._signal("terminate")

    def kill(self) -> None:
        self._signal("kill")

    def _signal(self, name: str) -> None:
        if self.reused:
            raise psutil.NoSuchProcess(self.pid)  # psutil refuses to signal a reused pid
        self.calls.append(name)
        if name == self.dies_on or name == "kill":
            self.alive = False

    def environ(self) -> dict:
        return self.env


@pytest.fixture
def fake_wait(monkeypatch):
    """psutil.wait_procs for fakes: split into (gone, alive) at once."""
    def wait_procs(procs, timeout=None, callback=None):
        return [p for p in procs if not p.is_running()], [p for p in procs if p.is_running()]

    monkeypatch.setattr(processes.psutil, "wait_procs", wait_procs)


def test_stop_terminates_first_and_kills_only_what_is_left(fake_wait):
    polite, stubborn = FakeProcess(1), FakeProcess(2, dies_on=None)
    assert stop_processes([polite, stubborn], grace=0.2) == []
    assert polite.calls == ["terminate"] and stubborn.calls == ["terminate", "kill"]


def test_stop_leaves_a_reused_pid_alone(fake_wait):
    stranger = FakeProcess(3, reused=True)  # our worker ended; its pid now belongs to someone else
    assert stop_processes([stranger], grace=0.1) == []
    assert stranger.calls == []


def test_kill_says_whether_it_killed():
    victim, stranger = FakeProcess(5, dies_on=None), FakeProcess(6, reused=True)
    assert processes.kill(victim) is True and victim.calls == ["kill"] and not running(victim)
    assert processes.kill(stranger) is False and stranger.calls == []


def test_zombies_count_as_ended(fake_wait):
    zombie = FakeProcess(4, zombie=True)
    assert not running(zombie)
    assert stop_processes([zombie], grace=0.1) == [] and zombie.calls == []


def test_tree_remembers_children_and_finds_a_rank_by_environment(monkeypatch):
    kids = [FakeProcess(10, env={"RANK": "0"}), FakeProcess(11, env={"RANK": "1"})]
    root = FakeProcess(9)
    root.children = lambda recursive=False: list(kids) if root.alive else []
    monkeypatch.setattr(processes.psutil, "Process", lambda pid: root)
    tree = ProcessTree(9)
    assert [p.pid for p in tree.refresh()] == [10, 11]
    assert tree.with_env("RANK", "1").pid == 11 and tree.with_env("RANK", "7") is None
    root.alive = False  # the parent died: its children are still remembered
    assert [p.pid for p in tree.refresh()] == [10, 11]
    kids[0].reused = True  # pid 10 ended and was reused: no longer ours
    assert [p.pid for p in tree.alive()] == [11]


def test_real_tree_below_a_process_and_stop():
    code = textwrap.dedent("""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(parent.stdout.readline())
        tree = ProcessTree(parent.pid)
        assert child_pid in [p.pid for p in tree.refresh()]
        assert stop_processes(tree.alive() + [psutil.Process(parent.pid)], grace=3) == []
        parent.wait(timeout=5)
        deadline = time.monotonic() + 5
        while alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child_pid) and not alive(parent.pid)
    finally:
        parent.kill()
        parent.wait(timeout=5)
        parent.stdout.close()


@pytest.mark.parametrize("platform, expected", [
    ("linux", {"start_new_session": True}),
    ("darwin", {"start_new_session": True}),
    ("win32", {"creationflags": 0x200}),  # CREATE_NEW_PROCESS_GROUP
])
def test_new_group_options_per_os(platform, expected, monkeypatch):
    monkeypatch.delattr(subprocess, "CREATE_NEW_PROCESS_GROUP", raising=False)
    assert new_group_options(platform) == expected
    monkeypatch.setattr(sys, "platform", platform)
    assert new_group_options() == expected


# ------------------------------------------------------------------------------------- line reader


def test_reader_gives_whole_lines_from_pieces():
    r, w = os.pipe()
    reader = LineReader(os.fdopen(r, "rb", buffering=0))
    with os.fdopen(w, "wb", buffering=0) as out:
        out.write(b"[rank 0] hel")
        assert reader.get(0.2) is None  # half a line is not a line
        out.write(b"lo\r\nsecond\n\xff bad byte\nno newline at the end")
    got = [reader.get(2), reader.get(2), reader.get(2), reader.get(2)]
    assert got == ["[rank 0] hello", "second", "\ufffd bad byte", "no newline at the end"]
    assert reader.get(1) is None and reader.done and reader.join(2)


def test_reader_never_blocks_past_its_timeout():
    r, w = os.pipe()
    reader = LineReader(os.fdopen(r, "rb", buffering=0))
    try:
        start = time.perf_counter()
        assert reader.get(0.3) is None and not reader.done
        assert 0.25 <= time.perf_counter() - start < 2.0
    finally:
        os.close(w)
        assert reader.join(2)
