"""gpulab.gpu_reference: loading recorded bench files, the summary, and the comparison plot."""

from __future__ import annotations

import json

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gpulab import bench, bench_results, gpu_reference

FAST = 0.01


@pytest.fixture()
def recorded(tmp_path):
    """A folder with one bench file holding matmul (two dtypes) and copy results, as `gpulab bench` writes."""
    rs = bench.matmul_sweep("cpu", [8, 16], "float32", min_run_time=FAST)
    rs += bench.matmul_sweep("cpu", [8], "bfloat16", min_run_time=FAST)
    rs += [bench.copy_probe("cpu", 1, min_run_time=FAST)]
    bench_results.save_results(tmp_path / "somegpu.json", rs)
    (tmp_path / "README.md").write_text("not a result")
    return tmp_path, rs


def test_the_package_folder_loads_and_says_what_it_holds():
    refs = gpu_reference.load_references()
    text = gpu_reference.summary()
    if refs:
        assert text.startswith(f"{len(refs)} bench file")
        assert f"{len(gpu_reference.load_measurements())} measurement file" in text.splitlines()[0]
    else:
        assert text == gpu_reference.NONE_RECORDED and "No GPU reference recorded yet" in text
    assert (gpu_reference.REFERENCE_DIR / "README.md").is_file()


def test_an_empty_or_missing_folder_means_none_recorded(tmp_path):
    assert gpu_reference.load_references(tmp_path) == []
    assert gpu_reference.load_references(tmp_path / "nope") == []
    assert gpu_reference.summary(tmp_path) == gpu_reference.NONE_RECORDED
    assert gpu_reference.reference_results("matmul", directory=tmp_path) == []


def test_load_and_filter(recorded):
    folder, rs = recorded
    [ref] = gpu_reference.load_references(folder)
    assert ref.name == "somegpu.json" and list(ref.results) == rs
    assert ref.environment["torch"] == rs[0].torch_version and ref.devices == [rs[0].description]
    assert len(gpu_reference.reference_results("matmul", directory=folder)) == 3
    assert [r.size for r in gpu_reference.reference_results("matmul", "float32", directory=folder)] == [8, 16]
    assert len(gpu_reference.reference_results("copy", kind="device", directory=folder)) == 1
    assert gpu_reference.reference_results("copy", kind="h2d", directory=folder) == []


def test_summary_names_each_file(recorded):
    folder, _ = recorded
    text = gpu_reference.summary(folder)
    assert text.startswith("1 bench file and 0 measurement files:") and "somegpu.json" in text
    assert "best matmul" in text and "best copy" in text


def test_broken_reference_file_is_named(tmp_path):
    good = bench.matmul_probe("cpu", 8, min_run_time=FAST).to_dict()
    (tmp_path / "bad.json").write_text(json.dumps({"format": bench_results.FORMAT, "results": [{**good, "colour": 1}]}))
    with pytest.raises(ValueError, match="bad.json"):
        gpu_reference.load_references(tmp_path)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        gpu_reference.summary(tmp_path)


def test_json_files_of_another_kind_are_skipped(recorded):
    folder, rs = recorded
    (folder / "doctor.json").write_text(json.dumps({"python": "3.11", "devices": []}))
    (folder / "list.json").write_text("[1, 2]")
    _measurement(folder)
    assert [r.name for r in gpu_reference.load_references(folder)] == ["somegpu.json"]
    assert len(gpu_reference.reference_results("matmul", directory=folder)) == 3
    text = gpu_reference.summary(folder)
    assert "somegpu.json" in text and "doctor.json" not in text
    assert "fake-gpu-measure.json: Fake GPU (cuda:0), torch 9.9" in text
    assert text.startswith("1 bench file and 1 measurement file:")
    _measurement(folder, name="other-gpu")
    assert gpu_reference.summary(folder).startswith("1 bench file and 2 measurement files:")


def _measurement(folder, steps=None, name="fake-gpu"):
    data = {"format": gpu_reference.MEASURE_FORMAT, "created": "2026-01-02T03:04:05+00:00", "device": "cuda:0",
            "description": "Fake GPU", "slug": name, "dry_run": False, "environment": {"torch": "9.9", "build": "CUDA 99"},
            "steps": steps if steps is not None else {
                "boston_loop": {"status": "ok", "rows": [{"device": "cuda:0", "fit_epochs_per_s": 123.5}]},
                "ddp": {"status": "error", "error": "RuntimeError: nccl"},
                "memory": {"status": "running"}}}
    (folder / gpu_reference.measure_file_name(name)).write_text(json.dumps(data))
    return data


def test_recorded_shows_a_measured_table_with_where_and_when(tmp_path):
    _measurement(tmp_path)
    [m] = gpu_reference.load_measurements(tmp_path)
    assert m.name == "fake-gpu-measure.json" and m.step("ddp")["status"] == "error"
    text = gpu_reference.recorded("boston_loop", tmp_path)
    assert text.startswith("recorded on Fake GPU (cuda:0), torch 9.9, CUDA 99, 2026-01-02:")
    assert "fit_epochs_per_s" in text and "123.5" in text
    [(_, rows)] = gpu_reference.recorded_rows("boston_loop", tmp_path)
    assert rows == [{"device": "cuda:0", "fit_epochs_per_s": 123.5}]


@pytest.mark.parametrize("topic", ["ddp", "memory", "autocast_step"])  # failed, interrupted, absent
def test_recorded_says_plainly_when_nothing_usable_is_recorded(tmp_path, topic):
    _measurement(tmp_path)
    assert gpu_reference.recorded(topic, tmp_path).startswith(f"No GPU reference recorded yet for {topic!r}")
    assert gpu_reference.recorded(topic, tmp_path / "missing").startswith("No GPU reference recorded yet")


def test_the_package_folder_answers_recorded_without_error():
    text = gpu_reference.recorded("boston_loop")
    assert text.startswith("recorded on") or text.startswith("No GPU reference recorded yet")


def test_file_names_match_what_the_measure_script_writes():
    assert gpu_reference.device_slug("NVIDIA H200") == "nvidia-h200"
    assert gpu_reference.device_slug("NVIDIA GeForce RTX 4090 (laptop)") == "nvidia-geforce-rtx-4090-laptop"
    assert gpu_reference.device_slug("***") == "device"
    assert gpu_reference.bench_file_name("nvidia-h200", "copy-h2d") == "nvidia-h200-copy-h2d.json"
    assert gpu_reference.measure_file_name("cpu") == "cpu-measure.json"


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown probe"):
        gpu_reference.reference_results("fft")
    with pytest.raises(ValueError, match="unknown dtype"):
        gpu_reference.reference_results("matmul", "float64")


def test_plot_draws_mine_and_each_reference(recorded):
    folder, rs = recorded
    mine = bench.matmul_sweep("cpu", [8, 16, 32], "float32", threads=1, min_run_time=FAST)
    ax = gpu_reference.plot_against_references(mine, "matmul", "float32", directory=folder)
    labels = [line.get_label() for line in ax.get_lines()]
    assert len(labels) == 2
    assert labels[0].startswith("this machine") and labels[1].startswith("reference")
    assert "no reference" not in ax.get_title()
    plt.close("all")


def test_plot_says_when_none_is_recorded(tmp_path):
    mine = [bench.copy_probe("cpu", 1, min_run_time=FAST)]
    ax = gpu_reference.plot_against_references(mine, "copy", kind="device", directory=tmp_path)
    assert "no reference result recorded yet" in ax.get_title()
    assert len(ax.get_lines()) == 1 and ax.get_ylabel() == "GB/s"
    plt.close("all")


def _loader_folder(tmp_path, rows_carry_workers=False):
    """A bench file of loader passes (0 and 2 workers), and a measurement whose loader rows name it (as gpu_measure)."""
    from gpulab import pinning

    rs = [pinning.loader_probe("cpu", 1, batch_rows=256, features=15, num_workers=w, min_run_time=FAST) for w in (0, 2)]
    bench_results.save_results(tmp_path / "fake-gpu-copy-loader.json", rs)
    rows = [{"size": r.size, "unit": "MiB", "pinned": r.pinned, "non_blocking": r.non_blocking, "ms": r.seconds * 1e3,
             **({"workers": r.workers} if rows_carry_workers else {}), "rate": r.rate, "rate_unit": r.unit} for r in rs]
    _measurement(tmp_path, {"loader": {"status": "ok", "files": ["fake-gpu-copy-loader.json"], "rows": rows},
                            "autocast_step": {"status": "ok", "rows": [{"variant": "float32", "ms_per_step": 2.0,
                                                                        "final_loss": 1.5}]}})
    return rs


def test_recorded_loader_rows_gain_the_workers_of_their_bench_file(tmp_path):
    rs = _loader_folder(tmp_path)
    [(_, rows)] = gpu_reference.recorded_rows("loader", tmp_path)
    assert [r["workers"] for r in rows] == [0, 2]
    assert list(rows[0])[:5] == ["size", "unit", "pinned", "non_blocking", "workers"]  # right after non_blocking
    header = gpu_reference.recorded("loader", tmp_path).splitlines()[1].split()
    assert header[:5] == ["size", "unit", "pinned", "non_blocking", "workers"]
    # Rows that already carry workers are left as they are; rows that do not match their file are too.
    _loader_folder(tmp_path, rows_carry_workers=True)
    [(_, rows)] = gpu_reference.recorded_rows("loader", tmp_path)
    assert [r["workers"] for r in rows] == [0, 2] and list(rows[0]).count("workers") == 1
    bench_results.save_results(tmp_path / "fake-gpu-copy-loader.json", rs[:1])
    data = json.loads((tmp_path / "fake-gpu-measure.json").read_text())
    for row in data["steps"]["loader"]["rows"]:
        row.pop("workers")
    (tmp_path / "fake-gpu-measure.json").write_text(json.dumps(data))
    [(_, rows)] = gpu_reference.recorded_rows("loader", tmp_path)
    assert all("workers" not in r for r in rows)  # 2 rows, 1 result: no guessing


def test_the_package_loader_table_shows_its_worker_passes():
    text = gpu_reference.recorded("loader")
    if text.startswith("No GPU reference"):
        pytest.skip("no loader step recorded in gpulab/reference/")
    assert "workers" in text.splitlines()[1]


def test_recorded_can_leave_out_a_column(tmp_path):
    _loader_folder(tmp_path)
    assert "final_loss" in gpu_reference.recorded("autocast_step", tmp_path)
    text = gpu_reference.recorded("autocast_step", tmp_path, leave_out=("final_loss",))
    assert "final_loss" not in text and "ms_per_step" in text and "1.5" not in text
