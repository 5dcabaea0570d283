"""`gpulab preflight`: passes on this machine; each bad state, simulated, is a PROBLEM line with its fix."""

from __future__ import annotations

import json
import sys
import time
from importlib import metadata

import psutil
import pytest
import torch

from gpulab import cli, doctor, preflight

from gpulab.distributed import loopback
from gpulab.preflight import NOTE, OK, PROBLEM, Check


@pytest.fixture
def quick(monkeypatch):
    """Replace the two slow checks (processes, a kernel) by passing ones."""
    monkeypatch.setattr(preflight, "check_rendezvous", lambda timeout=60.0: Check("rendezvous", OK, "simulated"))
    monkeypatch.setattr(preflight, "check_kernel", lambda timeout=60.0: Check("kernel", OK, "simulated"))


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


@pytest.mark.slow
def test_preflight_passes_on_this_machine(capsys):
    assert cli.main(["preflight"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("Ready:")
    status = {line[9:23].strip(): line[:9].strip() for line in lines[1:-1] if not line.startswith(" ")}
    for name in ("python", "torch", "jupyterlab", "ipykernel", "disk", "torch build", "rendezvous", "kernel"):
        assert status.get(name) in (OK, NOTE), (name, lines)
    assert not any(line.startswith(PROBLEM) for line in lines)


def test_json_report_to_a_file(quick, tmp_path, capsys):
    path = tmp_path / "reports" / "student-07.json"
    assert cli.main(["preflight", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert data["ready"] is True and data["gpulab"] and data["python"]
    names = [c["name"] for c in data["checks"]]
    assert names[0] == "python" and {"torch", "jupyterlab", "disk", "torch build", "rendezvous", "kernel"} <= set(names)
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in data["checks"])
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # written atomically: no temporary left
    assert f"report written to {path}" in capsys.readouterr().out


def test_json_report_on_stdout_is_only_json(quick, capsys):
    assert cli.main(["preflight", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ready"] is True


def test_missing_package_is_a_problem_and_the_exit_status_says_so(quick, monkeypatch, capsys):
    real = metadata.version

    def version(name):
        if name == "ipywidgets":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    assert cli.main(["preflight"]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM  ipywidgets    not installed (needs >=8.1)" in out
    assert "fix:" in out and "make install" in out
    assert out.splitlines()[-1].startswith("Not ready: 1 problem(s)")


def test_too_old_package_names_the_range_and_the_upgrade(monkeypatch):
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "1.0" if name == "numpy" else real(name))
    numpy = _by_name(preflight.check_packages())["numpy"]
    assert numpy.status == PROBLEM and "1.0, the course needs >=1.26" in numpy.detail
    assert numpy.fix.startswith("pip install --upgrade 'numpy>=1.26'")


def test_old_python_is_a_problem(monkeypatch):
    monkeypatch.setattr(preflight.platform, "python_version", lambda: "3.8.10")
    check = preflight.check_python()
    assert check.status == PROBLEM and "3.8.10, the course needs >=3.10" in check.detail and check.fix


def test_full_disk_is_a_problem(tmp_path):
    check = preflight.check_disk(tmp_path, min_free_gib=1e9)
    assert check.status == PROBLEM and "less than 1e+09 GiB" in check.detail and "pip cache purge" in check.fix
    assert preflight.check_disk(tmp_path, min_free_gib=1e-9).status == OK


def test_cuda_build_without_a_gpu_is_a_note_with_the_cpu_index(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.6")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(doctor, "nvidia_smi", lambda: {"found": False, "gpus": [], "note": "not on PATH"})
    check = preflight.check_torch_build()
    assert check.status == NOTE and "no NVIDIA GPU here" in check.detail
    assert "--index-url https://download.pytorch.org/whl/cpu" in check.fix
    assert preflight.passed([check])  # a note is advice: the course still runs


def test_cpu_build_on_a_machine_with_an_nvidia_gpu_is_a_note(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(doctor, "nvidia_smi", lambda: {"found": True, "gpus": ["GPU 0: X"], "note": "ok"})
    check = preflight.check_torch_build()
    assert check.status == NOTE and "NVIDIA GPU torch cannot use" in check.detail


def test_no_free_port_is_a_problem(monkeypatch):
    def refuse(timeout):
        raise RuntimeError("The server socket has failed to listen on any local network address. "
                           "port: 0, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use")

    monkeypatch.setattr(loopback, "_master_store", refuse)
    check = preflight.check_rendezvous(timeout=5)
    assert check.status == PROBLEM and check.detail.startswith("could not open a port on 127.0.0.1")
    assert "address already in use" in check.detail and "firewall" in check.fix


def _gone(pids: list[int]) -> bool:
    return not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)


@pytest.mark.slow
def test_broken_rendezvous_times_out_and_leaves_no_process(monkeypatch):
    real = loopback._rank_command
    # each rank waits for a third rank that never comes
    monkeypatch.setattr(loopback, "_rank_command",
                        lambda port, rank, world, timeout: real(port, rank, world + 1, timeout))
    start = time.monotonic()
    result = loopback.rendezvous(2, timeout=4)
    assert time.monotonic() - start < 15
    assert not result.ok and "did not finish within 4 s" in result.detail
    assert len(result.pids) == 2 and _gone(result.pids)
    monkeypatch.setattr(loopback, "rendezvous", lambda world, timeout: result)
    check = preflight.check_rendezvous(timeout=4)
    assert check.status == PROBLEM and "firewall" in check.fix


def test_a_failing_rank_is_reported_with_its_last_line(monkeypatch):
    crash = [sys.executable, "-c", "import sys; print('gloo: connect failed'); sys.exit(3)"]
    monkeypatch.setattr(loopback, "_rank_command", lambda *args: crash)
    result = loopback.rendezvous(2, timeout=30)
    assert not result.ok
    assert result.detail.startswith("rank ") and "(exit status 3): gloo: connect failed" in result.detail
    assert _gone(result.pids)


def test_rendezvous_rejects_bad_arguments():
    with pytest.raises(ValueError, match="at least 2 ranks"):
        loopback.rendezvous(1)
    with pytest.raises(ValueError, match="positive number of seconds"):
        loopback.rendezvous(2, timeout=0)


def test_kernel_that_does_not_start_is_a_problem(monkeypatch):
    def fail(**kwargs):
        raise RuntimeError("Kernel died before replying to kernel_info")

    monkeypatch.setattr(preflight, "start_new_kernel", fail)
    check = preflight.check_kernel(timeout=5)
    assert check.status == PROBLEM and "did not start" in check.detail and "ipykernel install" in check.fix


class _FakeKernel:
    def __init__(self, content: dict, result: str | None = None) -> None:
        self.content, self.result, self.stopped = content, result, []

    def execute_interactive(self, code, timeout, output_hook):
        if self.result is not None:
            output_hook({"msg_type": "execute_result", "content": {"data": {"text/plain": self.result}}})
        return {"content": self.content}

    def stop_channels(self):
        self.stopped.append("channels")

    def shutdown_kernel(self, now=False):
        self.stopped.append("kernel")


def test_kernel_without_gpulab_is_a_problem_and_is_shut_down(monkeypatch):
    fake = _FakeKernel({"status": "error", "ename": "ModuleNotFoundError", "evalue": "No module named 'gpulab'"})
    monkeypatch.setattr(preflight, "start_new_kernel", lambda **kwargs: (fake, fake))
    check = preflight.check_kernel(timeout=5)
    assert check.status == PROBLEM and "No module named 'gpulab'" in check.detail
    assert "make lab" in check.fix and "ipykernel install" in check.fix
    assert fake.stopped == ["channels", "kernel"]


def test_kernel_with_a_wrong_answer_is_a_problem(monkeypatch):
    fake = _FakeKernel({"status": "ok"}, result="3")
    monkeypatch.setattr(preflight, "start_new_kernel", lambda **kwargs: (fake, fake))
    assert preflight.check_kernel(timeout=5).status == PROBLEM


def test_a_check_that_crashes_becomes_a_problem_line(quick, monkeypatch):
    def broken(path=".", min_free_gib=2.0):
        raise OSError("disk went away")

    monkeypatch.setattr(preflight, "check_disk", broken)
    checks = list(preflight.run_checks(timeout=5))
    crashed = [c for c in checks if "disk went away" in c.detail]
    assert len(crashed) == 1 and crashed[0].status == PROBLEM
    assert not preflight.passed(checks)


def test_bad_timeout_is_one_error_line(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["preflight", "--timeout", "0"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "'0'" in err and len(err.splitlines()) == 1
