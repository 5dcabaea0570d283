"""gpulab.devices: the documented result on a CPU-only machine, and the CUDA/MPS/XPU logic with fakes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gpulab import cpu_info, devices

NO_GPU = not torch.cuda.is_available() and not devices.mps_available() and not devices.xpu_available()
cpu_only = pytest.mark.skipif(not NO_GPU, reason="documents the CPU-only result")


@cpu_only
def test_cpu_only_machine_lists_exactly_the_cpu():
    found = devices.list_devices()
    assert [d.name for d in found] == ["cpu"]
    assert found[0].kind == "cpu" and found[0].description
    assert found[0].memory_bytes is None and found[0].backend is None
    assert devices.available_names() == ["auto", "cpu"]


@cpu_only
def test_auto_picks_cpu_here():
    assert devices.pick_device("auto") == torch.device("cpu")
    assert devices.pick_device() == torch.device("cpu")


@cpu_only
@pytest.mark.parametrize("name", ["cuda", "cuda:1", "mps", "xpu"])
def test_absent_devices_raise_naming_what_is_available(name):
    with pytest.raises(ValueError) as info:
        devices.pick_device(name)
    message = str(info.value)
    assert "\n" not in message and repr(name) in message and "available" in message and "cpu" in message


@pytest.mark.parametrize("name", ["tpu", "", "gpu", "cuda:", "cuda:-1", "cpu:1", 3, None, 2.5])
def test_unknown_devices_raise_one_line(name):
    with pytest.raises(ValueError) as info:
        devices.pick_device(name)
    assert "\n" not in str(info.value) and "cpu" in str(info.value)


@pytest.mark.parametrize("name", ["cpu", " CPU ", "cpu:0", torch.device("cpu")])
def test_cpu_spellings(name):
    assert devices.pick_device(name) == torch.device("cpu")


def test_describe_and_is_accelerator():
    info = devices.describe("cpu")
    assert info.name == "cpu" and info.to_dict()["kind"] == "cpu"
    assert devices.is_accelerator("cuda:0") and devices.is_accelerator("mps")
    assert not devices.is_accelerator("cpu")


def test_synchronize_is_a_no_op_on_cpu():
    assert devices.synchronize("cpu") is None


def test_cuda_backend_reads_torch_version(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert devices.cuda_backend() is None
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    assert devices.cuda_backend() == "CUDA 12.8"
    monkeypatch.setattr(torch.version, "hip", "6.3.1", raising=False)
    assert devices.cuda_backend() == "HIP 6.3.1"


# ----------------------------------------------------------------------------- fakes for GPU machines


def fake_cuda(monkeypatch, count: int) -> None:
    props = [SimpleNamespace(name=f"Fake GPU {i}", total_memory=(i + 1) * 2**30, major=9, minor=0)
             for i in range(count)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props[i])
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.version, "hip", None, raising=False)


def fake_flags(monkeypatch, mps: bool = False, xpu: int = 0) -> None:
    monkeypatch.setattr(devices, "mps_available", lambda: mps)
    monkeypatch.setattr(devices, "xpu_available", lambda: xpu > 0)
    monkeypatch.setattr(torch, "xpu", SimpleNamespace(device_count=lambda: xpu, get_device_name=lambda i: "Fake XPU",
                                                      is_available=lambda: xpu > 0), raising=False)


def test_two_fake_cuda_devices_are_listed_then_cpu(monkeypatch):
    fake_cuda(monkeypatch, 2)
    fake_flags(monkeypatch)
    found = devices.list_devices()
    assert [d.name for d in found] == ["cuda:0", "cuda:1", "cpu"]
    assert found[1].description == "Fake GPU 1" and found[1].memory_bytes == 2 * 2**30
    assert found[0].capability == "9.0" and found[0].backend == "CUDA 12.8"
    assert devices.available_names() == ["auto", "cuda", "cuda:0", "cuda:1", "cpu"]
    assert devices.pick_device("cuda") == torch.device("cuda", 0)
    assert devices.pick_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="2 cuda device"):
        devices.pick_device("cuda:2")


@pytest.mark.parametrize(
    "cuda, mps, xpu, expected",
    [(1, True, 1, "cuda:0"), (0, True, 1, "mps"), (0, False, 1, "xpu:0"), (0, False, 0, "cpu"), (2, False, 0, "cuda:0")],
)
def test_auto_order_cuda_then_mps_then_xpu_then_cpu(monkeypatch, cuda, mps, xpu, expected):
    fake_cuda(monkeypatch, cuda)
    fake_flags(monkeypatch, mps=mps, xpu=xpu)
    assert devices.pick_device("auto") == torch.device(expected)
    assert devices.list_devices()[-1].name == "cpu"


def test_fake_mps_is_listed_and_picked(monkeypatch):
    fake_cuda(monkeypatch, 0)
    fake_flags(monkeypatch, mps=True)
    assert [d.name for d in devices.list_devices()] == ["mps", "cpu"]
    assert devices.pick_device("mps") == torch.device("mps")
    with pytest.raises(ValueError):
        devices.pick_device("mps:1")
    with pytest.raises(ValueError, match="no cuda device"):
        devices.pick_device("cuda")


# ----------------------------------------------------------------------------- the CPU's name on each OS


def test_cpu_name_on_linux_comes_from_cpuinfo(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Fake EPYC 9999\n")
    assert cpu_info._linux_cpu_name(str(info)) == "Fake EPYC 9999"
    monkeypatch.setattr(cpu_info.subprocess, "run", lambda *a, **k: pytest.fail("no sysctl on Linux"))
    monkeypatch.setattr(cpu_info, "_linux_cpu_name", lambda: "Fake EPYC 9999")
    assert cpu_info.cpu_description("linux") == "Fake EPYC 9999"


def test_linux_without_cpuinfo_falls_back_to_the_architecture(monkeypatch, tmp_path):
    assert cpu_info._linux_cpu_name(str(tmp_path / "missing")) is None
    monkeypatch.setattr(cpu_info, "_linux_cpu_name", lambda: None)
    monkeypatch.setattr(cpu_info._platform, "processor", lambda: "")
    monkeypatch.setattr(cpu_info._platform, "machine", lambda: "aarch64")
    assert cpu_info.cpu_description("linux") == "aarch64"


def test_macos_asks_sysctl_with_a_timeout(monkeypatch):
    import subprocess

    calls = []

    def fake_run(cmd, **kwargs):
        calls.append((cmd, kwargs.get("timeout")))
        return subprocess.CompletedProcess(cmd, 0, "Apple M3 Pro\n", "")

    monkeypatch.setattr(cpu_info.subprocess, "run", fake_run)
    monkeypatch.setattr(cpu_info, "_linux_cpu_name", lambda: pytest.fail("macOS has no cpuinfo file"))
    assert cpu_info.cpu_description("darwin") == "Apple M3 Pro"
    assert calls[0][0] == ["sysctl", "-n", "machdep.cpu.brand_string"] and 0 < calls[0][1] <= 5


@pytest.mark.parametrize("failure", ["timeout", "missing", "status"])
def test_macos_falls_back_when_sysctl_fails(monkeypatch, failure):
    import subprocess

    def fake_run(cmd, **kwargs):
        if failure == "timeout":
            raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])
        if failure == "missing":
            raise FileNotFoundError(cmd[0])
        return subprocess.CompletedProcess(cmd, 1, "", "unknown oid")

    monkeypatch.setattr(cpu_info.subprocess, "run", fake_run)
    monkeypatch.setattr(cpu_info._platform, "processor", lambda: "arm")
    assert cpu_info.cpu_description("darwin") == "arm"


def test_windows_uses_platform_processor(monkeypatch):
    monkeypatch.setattr(cpu_info.subprocess, "run", lambda *a, **k: pytest.fail("no sysctl on Windows"))
    monkeypatch.setattr(cpu_info, "_linux_cpu_name", lambda: pytest.fail("no cpuinfo on Windows"))
    monkeypatch.setattr(cpu_info._platform, "processor", lambda: "Intel64 Family 6 Model 154, GenuineIntel")
    assert cpu_info.cpu_description("win32") == "Intel64 Family 6 Model 154, GenuineIntel"
    monkeypatch.setattr(cpu_info._platform, "processor", lambda: "")
    monkeypatch.setattr(cpu_info._platform, "machine", lambda: "")
    assert cpu_info.cpu_description("win32") == "CPU"
