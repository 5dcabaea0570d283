"""`gpulab preflight`: passes on this machine; each bad state, simulated, is a PROBLEM line with its fix."""

from __future__ import annotations

import json
import sys
import time
from importlib import metadata

import psutil
import pytest
import torch

from gpulab import nvidia_smi
from gpulab.course import cli
from gpulab.course import environment as preflight
from gpulab.course import environment_report as preflight_report

from gpulab.distributed.launch import rendezvous_check
from gpulab.course.environment import NOTE, OK, PROBLEM, Check


@pytest.fixture
def quick(monkeypatch):
    """Replace the two slow checks (processes, a kernel) by passing ones."""
    monkeypatch.setattr(preflight, "check_rendezvous", lambda timeout=60.0: Check("rendezvous", OK, "simulated"))
    monkeypatch.setattr(preflight, "check_kernel", lambda timeout=60.0: Check("kernel", OK, "simulated"))


def _install_problems() -> list[str]:
    """What keeps this Python from being a full install of the course (empty in the course's own .venv)."""
    return [f"{c.name}: {c.detail}" for c in preflight.check_packages() if c.status == PROBLEM]


# These read gpulab's own metadata and need every package it asks for: they check a full install (make
# install, a student's pip install). A GPU box running the suite from a checkout on PYTHONPATH, without
# Jupyter, is not one: there they are skipped, saying why, instead of failing.
full_install = pytest.mark.skipif(bool(_install_problems()),
                                  reason="not a full install of the course: " + "; ".join(_install_problems()[:3]))


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


@pytest.mark.slow
@full_install
def test_preflight_passes_on_this_machine(capsys):
    assert cli.main(["preflight"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("Ready:")
    status = {line[9:23].strip(): line[:9].strip() for line in lines[1:-1] if not line.startswith(" ")}
    for name in ("python", "torch", "jupyterlab", "ipykernel", "disk", "torch build", "rendezvous", "kernel"):
        assert status.get(name) in (OK, NOTE), (name, lines)
    assert not any(line.startswith(PROBLEM) for line in lines)


@full_install
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


@full_install
def test_json_report_on_stdout_is_only_json(quick, capsys):
    assert cli.main(["preflight", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ready"] is True


@full_install
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
    assert "fix:" in out and "python course.py install" in out
    assert "help:         TROUBLESHOOTING.md#a-package-is-missing-or-too-old" in out
    assert out.splitlines()[-1].startswith("Not ready: 1 problem(s)")


@full_install
def test_too_old_package_names_the_range_and_the_upgrade(monkeypatch):
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "1.0" if name == "numpy" else real(name))
    numpy = _by_name(preflight.check_packages())["numpy"]
    assert numpy.status == PROBLEM and "1.0, the course needs >=1.26" in numpy.detail
    assert numpy.fix.startswith("pip install --upgrade 'numpy>=1.26'")


@full_install
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
    monkeypatch.setattr(nvidia_smi, "listed_gpus",
                        lambda timeout=10.0: {"found": False, "gpus": [], "note": "not on PATH"})
    check = preflight.check_torch_build()
    assert check.status == NOTE and "no NVIDIA GPU here" in check.detail
    assert "--index-url https://download.pytorch.org/whl/cpu" in check.fix
    assert preflight_report.passed([check])  # a note is advice: the course still runs


def test_cpu_build_on_a_machine_with_an_nvidia_gpu_is_a_note(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(nvidia_smi, "listed_gpus",
                        lambda timeout=10.0: {"found": True, "gpus": ["GPU 0: X"], "note": "ok"})
    check = preflight.check_torch_build()
    assert check.status == NOTE and "NVIDIA GPU torch cannot use" in check.detail


def test_no_free_port_is_a_problem(monkeypatch):
    def refuse(timeout):
        raise RuntimeError("The server socket has failed to listen on any local network address. "
                           "port: 0, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use")

    monkeypatch.setattr(rendezvous_check, "_master_store", refuse)
    check = preflight.check_rendezvous(timeout=5)
    assert check.status == PROBLEM and check.detail.startswith("could not open a port on 127.0.0.1")
    assert "address already in use" in check.detail and "firewall" in check.fix


def _gone(pids: list[int]) -> bool:
    return not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)


@pytest.mark.slow
def test_broken_rendezvous_times_out_and_leaves_no_process(monkeypatch):
    real = rendezvous_check._rank_command
    # each rank waits for a third rank that never comes
    monkeypatch.setattr(rendezvous_check, "_rank_command",
                        lambda port, rank, world, timeout: real(port, rank, world + 1, timeout))
    start = time.monotonic()
    result = rendezvous_check.rendezvous(2, timeout=4)
    assert time.monotonic() - start < 15
    assert not result.ok and "did not finish within 4 s" in result.detail
    assert len(result.pids) == 2 and _gone(result.pids)
    monkeypatch.setattr(rendezvous_check, "rendezvous", lambda world, timeout: result)
    check = preflight.check_rendezvous(timeout=4)
    assert check.status == PROBLEM and "firewall" in check.fix


@pytest.mark.slow
def test_a_failing_rank_is_reported_with_its_last_line(monkeypatch):
    crash = [sys.executable, "-c", "import sys; print('gloo: connect failed'); sys.exit(3)"]
    monkeypatch.setattr(rendezvous_check, "_rank_command", lambda *args: crash)
    result = rendezvous_check.rendezvous(2, timeout=30)
    assert not result.ok
    assert result.detail.startswith("rank ") and "(exit status 3): gloo: connect failed" in result.detail
    assert _gone(result.pids)


def test_rendezvous_rejects_bad_arguments():
    with pytest.raises(ValueError, match="at least 2 ranks"):
        rendezvous_check.rendezvous(1)
    with pytest.raises(ValueError, match=r"timeout \(seconds\)=0 must be a finite positive number"):
        rendezvous_check.rendezvous(2, timeout=0)


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
    assert "python course.py lab" in check.fix and "ipykernel install" in check.fix
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
    assert not preflight_report.passed(checks)


def test_bad_timeout_is_one_error_line(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["preflight", "--timeout", "0"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "'0'" in err and len(err.splitlines()) == 1


# ---- where to read more, and a whole room summed up -------------------------------------------------

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def test_every_problem_line_names_a_section_of_the_troubleshooting_page():
    from doc_links import anchors

    sections = anchors(ROOT / "TROUBLESHOOTING.md")
    made = [Check("python", PROBLEM, "3.8.10, the course needs >=3.10", "install Python 3.10"),
            Check("numpy", PROBLEM, "1.0, the course needs >=1.26", "pip install --upgrade 'numpy>=1.26'"),
            Check("disk", PROBLEM, "0.1 GiB free here", "free some disk space"),
            Check("rendezvous", PROBLEM, "did not finish within 4 s", "allow Python through the firewall"),
            Check("rendezvous", PROBLEM, "could not start", preflight.INSTALL_FIX),
            Check("kernel", PROBLEM, "did not start", "python -m ipykernel install --user")]
    links = [preflight_report.help_link(c) for c in made]
    assert all(link.startswith("TROUBLESHOOTING.md#") for link in links), links
    assert {link.split("#", 1)[1] for link in links} <= sections
    assert links[4].endswith("#a-package-is-missing-or-too-old")  # torch missing: an install problem
    assert set(preflight_report.HELP.values()) <= sections
    lines = preflight_report.format_check(made[3]).splitlines()
    assert [ln.split()[0] for ln in lines] == ["PROBLEM", "fix:", "help:"]
    assert preflight_report.help_link(Check("rendezvous", OK, "fine")) == ""
    assert "help:" not in preflight_report.format_check(Check("torch build", NOTE, "CUDA build", "pip ..."))


def _report(tmp_path, name: str, *checks: Check, platform_name: str = "Linux-6.1") -> str:
    path = tmp_path / f"preflight-{name}.json"
    data = preflight_report.report(list(checks))
    data["platform"] = platform_name
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


@pytest.fixture
def room_files(tmp_path):
    firewall = "allow Python through the firewall for local (127.0.0.1) connections"
    ok = Check("python", OK, "3.12.3 (needs >=3.10)")
    files = [
        _report(tmp_path, "amira", ok, Check("torch build", NOTE, "CUDA 12.6, no NVIDIA GPU here", "pip install ..."),
                platform_name="macOS-14.5-arm64"),
        _report(tmp_path, "ben", ok, Check("rendezvous", PROBLEM, "rank 1 did not finish within 60 s", firewall),
                platform_name="Windows-11"),
        _report(tmp_path, "chen", Check("rendezvous", PROBLEM, "rank 0 did not finish within 60 s", firewall),
                Check("ipywidgets", PROBLEM, "not installed (needs >=8.1)", preflight.INSTALL_FIX)),
        _report(tmp_path, "dana", ok),
    ]
    (tmp_path / "truncated.json").write_text('{"checks": [', encoding="utf-8")
    (tmp_path / "photo.json").write_bytes(bytes([0xFF, 0xD8, 0xFF, 0x00]))
    (tmp_path / "other.json").write_text('{"name": "something else"}', encoding="utf-8")
    bad_status = {"checks": [{"name": "disk", "status": "FINE", "detail": "x"}]}
    (tmp_path / "badstatus.json").write_text(json.dumps(bad_status))
    return files + [str(tmp_path / n) for n in ("truncated.json", "photo.json", "other.json", "badstatus.json",
                                                 "missing.json")]


def test_room_summary_groups_problems_and_keeps_going_past_bad_files(room_files):
    text, errors, all_ready = preflight_report.room(room_files)
    lines = text.splitlines()
    assert lines[0] == "Room: 4 report(s), 2 ready, 2 not ready, 5 file(s) unreadable (below)."
    assert lines[1] == "Ready (2): amira, dana"
    assert lines[2] == "Not ready (2): ben (1 problem(s)), chen (2 problem(s))"
    assert lines[3] == "Systems: Linux 2, macOS 1, Windows 1"
    problems = text.split("Problems, most common first:\n", 1)[1].split("\n\n")[0].splitlines()
    assert problems[0].startswith("  2 x rendezvous: ") and problems[0].endswith("(ben, chen)")
    assert problems[1].startswith("      fix:  allow Python through the firewall")
    assert problems[2] == "      help: TROUBLESHOOTING.md#two-processes-cannot-meet"
    assert problems[3] == "  1 x ipywidgets: not installed (needs >=8.1)  (chen)"
    assert "Notes (the course runs; advice):\n  1 x torch build: CUDA 12.6, no NVIDIA GPU here  (amira)" in text
    assert not all_ready
    assert len(errors) == 5 and all(e.startswith("error: ") and "\n" not in e for e in errors)
    truncated, photo, other, status, missing = errors
    assert truncated.endswith("truncated.json: not JSON (line 1, column 13: Expecting value)"), truncated
    assert "photo.json: not a text file" in photo
    assert "other.json: no list of \"checks\"" in other
    assert "badstatus.json: check 0 (disk) has status 'FINE', not one of OK, NOTE, PROBLEM" in status
    assert "missing.json: cannot read it" in missing


def test_room_of_ready_learners_exits_zero_and_patterns_are_expanded(room_files, tmp_path, capsys):
    ready = [f for f in room_files if f.endswith(("amira.json", "dana.json"))]
    assert cli.main(["preflight", "--summary", *ready]) == 0
    assert capsys.readouterr().out.startswith("Room: 2 report(s), 2 ready, 0 not ready.")
    assert cli.main(["preflight", "--summary", str(tmp_path / "preflight-*.json")]) == 1  # ben and chen
    out, err = capsys.readouterr()
    assert out.startswith("Room: 4 report(s), 2 ready, 2 not ready.") and err == ""


def test_summary_cli_prints_one_error_line_per_bad_file(room_files, capsys):
    assert cli.main(["preflight", "--summary", *room_files]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("Room: 4 report(s)") and "Problems, most common first:" in out
    assert len(err.strip().splitlines()) == 5 and "Traceback" not in err


def test_summary_of_no_readable_file_is_not_a_ready_room(tmp_path, capsys):
    assert cli.main(["preflight", "--summary", str(tmp_path / "nothing-here.json")]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("Room: 0 report(s), 0 ready, 0 not ready, 1 file(s) unreadable")
    assert err.strip().endswith("nothing-here.json: cannot read it (No such file or directory)")


def test_summary_and_json_together_is_one_error_line(tmp_path, capsys):
    assert cli.main(["preflight", "--summary", "a.json", "--json", "b.json"]) == 2
    assert capsys.readouterr().err.strip() == "error: --summary reads reports; it cannot be combined with --json"


def test_learner_name_comes_from_the_file_name():
    assert preflight_report.learner_name("reports/preflight-amira.json") == "amira"
    assert preflight_report.learner_name("Preflight_Ben.json") == "Ben"
    assert preflight_report.learner_name("chen.json") == "chen"
    assert preflight_report.learner_name("preflight-.json") == "preflight-"
