"""Per-OS torchrun settings: the pure decision, and that the launcher and doctor both apply it."""

from __future__ import annotations

import sys

import pytest

from gpulab.course import environment as doctor

from gpulab.distributed.launch import rendezvous
from gpulab.distributed.launch.rendezvous import is_loopback, platform_family, rendezvous_plan
from gpulab.distributed.launch.torchrun import Torchrun
from gpulab.distributed.launch.command import torchrun_command


@pytest.mark.parametrize("platform, env", [
    ("linux", {"GLOO_SOCKET_IFNAME": "lo"}),
    ("darwin", {"GLOO_SOCKET_IFNAME": "lo0"}),
    ("win32", {"USE_LIBUV": "0"}),
    ("freebsd14", {}),
])
def test_single_machine_plan_per_os(platform, env):
    plan = rendezvous_plan(platform)
    assert plan.flags == ["--local-addr", "127.0.0.1"]
    assert plan.env == env
    assert set(plan.reasons) == {"--local-addr", *env}  # every setting says why
    assert all(len(why) > 20 for why in plan.reasons.values())


def test_several_machines_keep_only_what_the_os_itself_needs():
    assert rendezvous_plan("linux", single_machine=False).flags == []
    assert rendezvous_plan("darwin", single_machine=False).env == {}
    assert rendezvous_plan("win32", single_machine=False).env == {"USE_LIBUV": "0"}
    assert "pytorch#139990" in rendezvous_plan("win32").reasons["USE_LIBUV"]


@pytest.mark.parametrize("bad", ["", None, 3])
def test_bad_platform_is_one_clear_error(bad):
    with pytest.raises(ValueError, match="platform=") as info:
        platform_family(bad)
    assert "linux" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("host, expected", [("localhost", True), ("127.0.0.1", True), ("127.0.1.1", True),
                                            ("::1", True), ("[::1]", True), ("10.0.0.1", False),
                                            ("node0.cluster", False), (None, False)])
def test_is_loopback(host, expected):
    assert is_loopback(host) is expected


@pytest.mark.parametrize("platform", ["linux", "darwin", "win32"])
def test_launcher_applies_the_plan_without_overriding_the_caller(platform, monkeypatch):
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.delenv("USE_LIBUV", raising=False)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")  # the user's own choice wins
    run = Torchrun(["true"], on_line=None)
    plan = rendezvous_plan(platform)
    assert run.env.get("USE_LIBUV") == plan.env.get("USE_LIBUV")
    assert run.env["GLOO_SOCKET_IFNAME"] == "eth7"
    assert Torchrun(["true"], env={"USE_LIBUV": "1"}, on_line=None).env["USE_LIBUV"] == "1"  # env= wins too
    command = torchrun_command("gpulab.distributed.ddp.worker", [], nproc=2)
    assert command[command.index("--local-addr") + 1] == "127.0.0.1"


def test_launcher_sets_the_loopback_interface_when_unset(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    assert Torchrun(["true"], on_line=None).env["GLOO_SOCKET_IFNAME"] == "lo0"
    far = Torchrun(["true"], on_line=None, single_machine=False)
    assert "GLOO_SOCKET_IFNAME" not in far.env


@pytest.mark.parametrize("platform", ["linux", "darwin", "win32"])
def test_doctor_reports_what_it_would_set_and_why(platform, monkeypatch):
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("USE_LIBUV", raising=False)
    data = doctor.torchrun_settings()
    plan = rendezvous.rendezvous_plan(platform)
    assert data["env"] == plan.env and data["kept"] == {}
    text = doctor.format_report({**_report_without_probes(), "torchrun": data})
    assert f"({platform})" in text and "--local-addr 127.0.0.1: the ranks meet at 127.0.0.1" in text
    for name, value in plan.env.items():
        assert f"  {name}={value}: {plan.reasons[name]}" in text
    monkeypatch.setenv("USE_LIBUV", "1")
    if platform == "win32":
        kept = doctor.format_report({**_report_without_probes(), "torchrun": doctor.torchrun_settings()})
        assert "USE_LIBUV=1 (set here, kept; gpulab would set 0)" in kept


def _report_without_probes() -> dict:
    return {"python": "3.x", "platform": "os", "torch": "t", "build": "CPU-only", "devices": [],
            "auto_device": "cpu", "accelerator": "none", "threads": 1, "cpu_count": 1,
            "distributed": {"gloo": True, "nccl": False, "mpi": False},
            "nvidia_smi": {"found": False, "gpus": [], "note": "not on PATH"},
            "compile": {"device": "cpu", "ok": True, "note": "C++ compiler g++ found"}}
