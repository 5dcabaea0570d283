"""`gpulab doctor` and `gpulab bench`: output, JSON, and bad input ending in exit 2 + one `error:` line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from gpulab import bench_results, devices
from gpulab.course import cli

NO_CUDA = not torch.cuda.is_available()


def run_module(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "gpulab", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_doctor_text_report(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert f"torch        {torch.__version__}" in out
    for name in (d.name for d in devices.list_devices()):
        assert f"  {name} " in out
    assert "gloo: yes" in out or "gloo: no" in out
    assert f"threads      {torch.get_num_threads()}" in out
    assert "nvidia-smi" in out
    assert f"torchrun     what gpulab adds to a run on this machine ({sys.platform})" in out
    assert "  --local-addr 127.0.0.1: " in out
    assert "/work/" not in out and "/home/" not in out


def test_doctor_json_report(capsys):
    assert cli.main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["torch"] == torch.__version__
    assert data["build"] == (devices.cuda_backend() or "CPU-only")
    assert [d["name"] for d in data["devices"]] == [d.name for d in devices.list_devices()]
    assert set(data["distributed"]) == {"gloo", "nccl", "mpi"}
    assert data["distributed"]["gloo"] == torch.distributed.is_gloo_available()
    assert data["threads"] == torch.get_num_threads()
    assert isinstance(data["nvidia_smi"]["found"], bool)
    from gpulab.distributed.launch.rendezvous import current_plan

    plan = current_plan()
    assert data["torchrun"]["flags"] == plan.flags and data["torchrun"]["env"] == plan.env
    assert set(data["torchrun"]["reasons"]) == {"--local-addr", *plan.env}


def test_doctor_says_a_missing_nvidia_smi_is_normal(monkeypatch):
    from gpulab import nvidia_smi
    from gpulab.course import environment as doctor

    monkeypatch.setattr(nvidia_smi.shutil, "which", lambda name: None)
    smi = nvidia_smi.listed_gpus()
    assert smi == {"found": False, "gpus": [], "note": smi["note"]} and "normal" in smi["note"]
    assert "normal" in doctor.format_report(doctor.report())


def test_doctor_lists_gpus_from_a_fake_nvidia_smi(monkeypatch):
    from gpulab import nvidia_smi

    fake = subprocess.CompletedProcess(["nvidia-smi", "-L"], 0, "GPU 0: Fake H200 (UUID: GPU-1)\n", "")
    monkeypatch.setattr(nvidia_smi.shutil, "which", lambda name: "nvidia-smi")
    monkeypatch.setattr(nvidia_smi.subprocess, "run", lambda *a, **k: fake)
    assert nvidia_smi.listed_gpus()["gpus"] == ["GPU 0: Fake H200 (UUID: GPU-1)"]

    def hang(*a, **k):
        raise subprocess.TimeoutExpired("nvidia-smi", 10)

    monkeypatch.setattr(nvidia_smi.subprocess, "run", hang)
    assert "did not answer" in nvidia_smi.listed_gpus()["note"]


def test_doctor_as_a_subprocess():
    done = run_module("doctor")
    assert done.returncode == 0, done.stderr
    assert "devices:" in done.stdout and done.stderr == ""


def test_bench_matmul_prints_a_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "m.json"
    assert cli.main(["bench", "matmul", "--device", "cpu", "--sizes", "8,16", "--threads", "1",
                     "--min-run-time", "0.01", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "GFLOP/s" in out and "wrote 2 result(s) to m.json" in out
    results = bench_results.load_results(path)
    assert [(r.size, r.threads, r.dtype) for r in results] == [(8, 1, "float32"), (16, 1, "float32")]


def test_bench_copy_via_subprocess(tmp_path):
    done = run_module("bench", "copy", "--device", "cpu", "--sizes", "1", "--dtype", "bfloat16",
                      "--min-run-time", "0.01", "--json", str(tmp_path / "c.json"))
    assert done.returncode == 0, done.stderr
    assert "GB/s" in done.stdout
    [r] = bench_results.load_results(tmp_path / "c.json")
    assert (r.probe, r.kind, r.size, r.dtype) == ("copy", "device", 1, "bfloat16")


def test_bench_tf32_and_add_are_recorded_in_the_json(tmp_path, capsys):
    assert cli.main(["bench", "matmul", "--device", "cpu", "--sizes", "8", "--matmul-precision", "high",
                     "--min-run-time", "0.01", "--json", str(tmp_path / "t.json")]) == 0
    [r] = bench_results.load_results(tmp_path / "t.json")
    assert (r.dtype, r.matmul_precision) == ("float32", "high")
    assert torch.get_float32_matmul_precision() == "highest"
    assert cli.main(["bench", "copy", "--device", "cpu", "--kind", "add", "--sizes", "1",
                     "--min-run-time", "0.01", "--json", str(tmp_path / "a.json")]) == 0
    [r] = bench_results.load_results(tmp_path / "a.json")
    assert (r.kind, r.bytes_moved) == ("add", 3 * 2**20)
    assert "add" in capsys.readouterr().out


BAD = [
    (["bench", "matmul", "--device", "tpu"], "unknown device 'tpu'"),
    (["bench", "matmul", "--sizes", "0"], "size=0"),
    (["bench", "matmul", "--sizes", "-8"], "size=-8"),
    (["bench", "matmul", "--sizes", "abc"], "not an integer"),
    (["bench", "matmul", "--sizes", "256,"], "comma-separated"),
    (["bench", "matmul", "--dtype", "float64"], "float64"),
    (["bench", "fft"], "invalid choice"),
    (["bench", "copy", "--device", "cpu", "--kind", "h2d", "--sizes", "1"], "needs an accelerator"),
    (["bench", "matmul", "--device", "cpu", "--pinned", "--sizes", "8"], "copy probe only"),
    (["bench", "matmul", "--threads", "0"], "positive"),
    (["bench", "copy", "--device", "cpu", "--matmul-precision", "high"], "matmul probe only"),
    (["bench", "matmul", "--matmul-precision", "tf32"], "invalid choice"),
    (["doctor", "--colour"], "unrecognized"),
]
if NO_CUDA:
    BAD.append((["bench", "matmul", "--device", "cuda"], "not available"))
    BAD.append((["bench", "copy", "--device", "cuda:1"], "not available"))


@pytest.mark.parametrize("argv, message", BAD)
def test_bad_input_in_process_exits_2_with_one_error_line(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        status = cli.main(argv)
        raise SystemExit(status)
    assert stop.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]
    assert captured.out == ""


@pytest.mark.parametrize("argv, message", [BAD[0], BAD[3]])  # a ValueError in run(), an argparse error
def test_bad_input_as_subprocess_exits_2_without_traceback(argv, message):
    done = run_module(*argv)
    assert done.returncode == 2
    assert done.stderr.startswith("error:") and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
