"""scripts/gpu_measure.py and scripts/gpu_check.sh on the CPU: the dry run writes the layout a GPU run writes.

Every step of the measurement keeps its own result, so one failure or a timeout loses nothing else.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from gpulab import bench_results, gpu_reference
from scripts_loader import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def measure():
    return load_script("gpu_measure")


def _file(out: Path) -> dict:
    [path] = (out / "reference").glob("*-measure.json")
    return json.loads(path.read_text())


def test_a_failing_step_loses_nothing_else(measure, monkeypatch, tmp_path, capsys):
    seen_while_running = []

    def boom(rec):
        seen_while_running.append(_file(tmp_path)["steps"]["boom"]["status"])
        raise RuntimeError("the device fell over\nsecond line")

    monkeypatch.setitem(measure.STEPS, "boom", boom)
    assert measure.main([str(tmp_path), "--only", "environment,boom,copy-device"]) == 1
    data = _file(tmp_path)
    assert data["format"] == gpu_reference.MEASURE_FORMAT and data["dry_run"] is (not measure.torch.cuda.is_available())
    assert seen_while_running == ["running"]  # a killed run shows where it stopped
    steps = data["steps"]
    assert list(steps) == ["environment", "boom", "copy-device"]
    assert steps["boom"]["status"] == "error" and steps["boom"]["error"] == "RuntimeError: the device fell over"
    assert steps["environment"]["status"] == steps["copy-device"]["status"] == "ok"
    assert data["environment"]["torch"] == measure.torch.__version__ and "float32_matmul_precision" in data["environment"]
    [name] = steps["copy-device"]["files"]
    assert name == gpu_reference.bench_file_name(data["slug"], "copy-device")
    [ref] = gpu_reference.load_references(tmp_path / "reference")  # the measurement file is skipped, the bench file loads
    assert ref.name == name and all(r.kind == "device" for r in ref.results)
    assert "the device fell over" in capsys.readouterr().err


def test_a_rerun_updates_steps_in_place_and_the_budget_skips(measure, tmp_path):
    assert measure.main([str(tmp_path), "--only", "copy-device"]) == 0
    assert measure.main([str(tmp_path), "--only", "add,ddp", "--budget", "0"]) == 0
    steps = _file(tmp_path)["steps"]
    assert steps["copy-device"]["status"] == "ok"
    assert steps["add"] == steps["ddp"] == {"status": "skipped", "reason": "time budget of 0 s used up"}


def test_steps_that_need_cuda_are_skipped_with_a_reason(measure, tmp_path):
    if measure.torch.cuda.is_available():
        pytest.skip("checks the dry run without CUDA")
    assert measure.main([str(tmp_path), "--only", "copy-h2d,environment_after"]) == 0
    steps = _file(tmp_path)["steps"]
    assert steps["copy-h2d"] == {"status": "skipped", "reason": "a h2d copy needs a CUDA device", "seconds": 0.0}
    assert steps["environment_after"]["status"] == "skipped"


def test_unknown_steps_are_refused(measure, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        measure.main([str(tmp_path), "--only", "matmul"])
    assert stop.value.code == 2 and "unknown step(s) matmul" in capsys.readouterr().err
    assert not (tmp_path / "reference").exists()


def test_nvidia_smi_fields_a_driver_lacks_are_asked_alone(monkeypatch):
    from gpulab import nvidia_smi

    calls = []

    def fake_run(cmd, **kwargs):
        fields = cmd[1].split("=", 1)[1].split(",")
        calls.append(fields)
        if "mig.mode.current" in fields and len(fields) > 1:
            return subprocess.CompletedProcess(cmd, 2, "", 'Field "x" is not a valid field to query.')
        if fields == ["mig.mode.current"]:
            return subprocess.CompletedProcess(cmd, 2, "", "invalid")
        header = ", ".join(f"{f} [MHz]" if f.startswith("clocks") else f for f in fields)
        return subprocess.CompletedProcess(cmd, 0, header + "\n" + ", ".join("7" for _ in fields) + "\n", "")

    monkeypatch.setattr(nvidia_smi.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(nvidia_smi.subprocess, "run", fake_run)
    found = nvidia_smi.query(("name", "clocks.sm", "mig.mode.current"))
    assert found == {"name": "7", "clocks.sm": "7 (clocks.sm [MHz])", "mig.mode.current": "not supported by this driver"}
    assert calls[0] == ["name", "clocks.sm", "mig.mode.current"] and len(calls) == 4
    monkeypatch.setattr(nvidia_smi.shutil, "which", lambda name: None)
    assert nvidia_smi.query(["name"]) == {"nvidia-smi": "not found"}


def _notebook(path: Path, source: str) -> Path:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
    nb = {"cells": [cell], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


def _wheel(folder: Path, name: str = "gpulabfakedep") -> Path:
    """A tiny pure-Python wheel whose dependency (packaging) is NOT among the wheels, as on a machine that has it."""
    info = f"{name}-1.0.dist-info"
    files = {f"{name}/__init__.py": "VALUE = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nRequires-Dist: packaging\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    folder.mkdir()
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name_in_zip, text in files.items():
            z.writestr(name_in_zip, text)
    return path


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32" or not shutil.which("timeout"), reason="needs bash and coreutils timeout")
def test_gpu_check_dry_run_writes_the_layout(tmp_path):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    _wheel(tmp_path / "wheels")
    good = _notebook(tmp_path / "good.ipynb", "import gpulab, gpulabfakedep\nfrom gpulab import gpu_reference\n"
                     "print(sorted(p.name for p in gpu_reference.reference_dir().glob('*-measure.json')))\n"
                     "print('ran', gpulab.__version__, gpulabfakedep.VALUE)")
    bad = _notebook(tmp_path / "bad.ipynb", "raise SystemError('broken on purpose')")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "NOTEBOOKS": f"{good} {bad}", "BUDGET": "200",
           "MEASURE_STEPS": "environment,matmul-float32,copy-h2d,copy-device", "UNIT_TESTS": "none",
           "WHEELS": str(tmp_path / "wheels"), "WHEEL_PACKAGES": "gpulabfakedep"}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(out)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    summary = (out / "summary.txt").read_text()
    assert done.returncode == 1, done.stdout + done.stderr  # the broken notebook fails the check...
    lines = [line.split()[:2] for line in summary.splitlines() if line[:4] in ("PASS", "FAIL", "SKIP")]
    assert lines == [["PASS", "measure"], ["PASS", "doctor"], ["PASS", "install-wheels"], ["FAIL", "notebooks"],
                     ["PASS", "gpu-tests"], ["SKIP", "unit-tests"]], summary
    assert "RESULT: FAILED" in summary and len(summary.splitlines()) < 40  # one screen
    # One archive holds everything, the executed notebooks included; the summary lies beside it.
    archive = out / "gpu-check.tar.gz"
    assert "gpu-check.tar.gz (" in summary and archive.stat().st_size < 16 * 2**20, done.stdout[-3000:] + done.stderr[-3000:]
    with tarfile.open(archive) as tar:
        names = {n.removeprefix("./") for n in tar.getnames()}
    for name in ("summary.txt", "measure.log", "doctor.log", "doctor.json", "gpu-tests.log", "gpu-tests.xml",
                 "notebooks/notebooks.log" if (out / "notebooks" / "notebooks.log").exists() else "notebooks.log",
                 "install-wheels.log", "notebooks/good.ipynb", "notebooks/bad.ipynb", "notebooks/times.json"):
        assert name in names, (name, sorted(names))
    slug = "cpu" if "no CUDA device" in summary else _file(out)["slug"]
    names = sorted(p.name for p in (out / "reference").iterdir())
    expected = {gpu_reference.measure_file_name(slug), gpu_reference.bench_file_name(slug, "matmul-float32"),
                gpu_reference.bench_file_name(slug, "copy-device")}
    assert expected <= set(names) and all(n.endswith(".json") for n in names)
    assert [r.name for r in gpu_reference.load_references(out / "reference")] == sorted(expected - {gpu_reference.measure_file_name(slug)})
    assert bench_results.load_results(out / "reference" / gpu_reference.bench_file_name(slug, "matmul-float32"))
    times = {e["notebook"]: e for e in json.loads((out / "notebooks" / "times.json").read_text())}
    assert times["good.ipynb"]["status"] == "pass" and times["bad.ipynb"]["status"] == "fail"  # ...and says which
    assert "broken on purpose" in times["bad.ipynb"]["error"]
    executed = json.loads((out / "notebooks" / "good.ipynb").read_text())
    printed = "".join("".join(o["text"]) for o in executed["cells"][0]["outputs"] if o.get("name") == "stdout")
    assert gpu_reference.measure_file_name(slug) in printed  # the notebooks read this run's fresh files
    assert printed.endswith(" 42\n")  # the wheel reached the kernel
    assert "without its dependencies" in (out / "install-wheels.log").read_text()
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    assert not list(tmp.glob("gpu_check_site.*/gpulabfakedep")) and not list(tmp.glob("gpu_check_refs.*"))  # cleaned up


def test_the_boston_loop_step_reads_what_the_benchmark_returns(measure, tmp_path):
    """The step records what article.compare_loops returns: a dry run records one row per loop."""
    assert measure.main([str(tmp_path), "--dry-run", "--only", "boston_loop"]) == 0
    step = _file(tmp_path)["steps"]["boston_loop"]
    assert step["status"] == "ok", step
    places = ["cuda:0", "cpu"] if measure.torch.cuda.is_available() else ["cpu"]  # a GPU machine times both
    assert [(row["device"], row["loop"]) for row in step["rows"]] == [
        (place, loop) for place in places for loop in ("article", "article + loss.item()", "gpulab fit")]
    assert all(row["epochs_per_s"] > 0 for row in step["rows"])
    assert "article + loss.item()" in gpu_reference.recorded("boston_loop", directory=tmp_path / "reference")


def test_the_triton_step_records_notebook_14s_kernels_on_a_gpu_and_says_why_not_without_one(measure, tmp_path):
    """Without CUDA the step is skipped with its reason; with it, rows and inductor's kernel that notebook 14 reads."""
    assert measure.main([str(tmp_path), "--dry-run", "--only", "triton"]) == 0
    step = _file(tmp_path)["steps"]["triton"]
    if not measure.torch.cuda.is_available():
        assert step["status"] == "skipped" and "need a CUDA device" in step["reason"], step
        return
    assert step["status"] == "ok", step
    assert step["source"].startswith("@triton.jit") and "inductor wrote triton_" in step["note"]
    from gpulab.kernels import measure as kernels_measure

    where, rows, source = kernels_measure.recorded(tmp_path / "reference")
    assert source == step["source"] and "[dry run]" in where
    assert {r["kernel"] for r in rows} == {"vector add", "softmax over rows", "matmul", "matmul error"}
