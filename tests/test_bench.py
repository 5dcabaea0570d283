"""gpulab.bench: probes on the CPU with tiny sizes, input validation, thread handling and JSON round trips."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest
import torch

from gpulab import bench, bench_results, timing
from gpulab.precision import dtype_from_name, dtype_name

FAST = 0.01  # seconds of timing per measurement: enough to exercise the code, not to measure


def test_matmul_probe_reports_consistent_fields():
    r = bench.matmul_probe("cpu", size=32, dtype="float32", min_run_time=FAST)
    assert (r.probe, r.device, r.dtype, r.size, r.unit) == ("matmul", "cpu", "float32", 32, "GFLOP/s")
    assert r.seconds > 0 and r.repeats > 0
    assert r.rate == pytest.approx(2 * 32**3 / r.seconds / 1e9)
    assert r.torch_version == torch.__version__ and r.threads == torch.get_num_threads()
    assert dt.datetime.fromisoformat(r.date).utcoffset() == dt.timedelta(0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", torch.bfloat16])
def test_matmul_probe_half_precision_on_cpu_works_or_says_why(dtype):
    try:
        r = bench.matmul_probe("cpu", size=16, dtype=dtype, min_run_time=FAST)
    except ValueError as exc:  # a torch build without CPU half matmul must say so in one line
        assert "not supported" in str(exc) and "\n" not in str(exc)
    else:
        assert r.dtype == dtype_name(dtype_from_name(dtype)) and r.rate > 0


def test_unsupported_matmul_becomes_one_line_value_error(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\'\nmore detail')

    monkeypatch.setattr(bench, "time_call", broken)
    with pytest.raises(ValueError, match="float16 matmul is not supported on cpu") as info:
        bench.matmul_probe("cpu", 8, "float16")
    assert "\n" not in str(info.value)


def test_threads_are_set_for_the_measurement_and_restored():
    before = torch.get_num_threads()
    r = bench.matmul_probe("cpu", size=16, threads=1, min_run_time=FAST)
    assert r.threads == 1
    assert torch.get_num_threads() == before


def test_threads_are_restored_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with timing.using_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def test_copy_probe_within_cpu_counts_read_and_write():
    r = bench.copy_probe("cpu", size_mb=1, min_run_time=FAST)
    assert (r.probe, r.kind, r.unit, r.pinned, r.non_blocking) == ("copy", "device", "GB/s", False, False)
    assert r.bytes_moved == 2 * 2**20
    assert r.rate == pytest.approx(r.bytes_moved / r.seconds / 1e9)


@pytest.mark.parametrize("dtype, size_mb", [("float16", 1), ("bfloat16", 2)])
def test_copy_probe_moves_the_same_bytes_whatever_the_dtype(dtype, size_mb):
    r = bench.copy_probe("cpu", size_mb=size_mb, dtype=dtype, min_run_time=FAST)
    assert r.bytes_moved == 2 * size_mb * 2**20 and r.dtype == dtype


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: bench.matmul_probe("cpu", 0), "size=0"),
        (lambda: bench.matmul_probe("cpu", -4), "size=-4"),
        (lambda: bench.matmul_probe("cpu", 2.5), "size=2.5"),
        (lambda: bench.matmul_probe("cpu", True), "size=True"),
        (lambda: bench.matmul_probe("cpu", 8, "float64"), "unknown dtype 'float64'"),
        (lambda: bench.matmul_probe("cpu", 8, "int8"), "float32, float16, bfloat16"),
        (lambda: bench.matmul_probe("tpu", 8), "unknown device"),
        (lambda: bench.matmul_probe("cpu", 8, threads=0), "threads=0"),
        (lambda: bench.copy_probe("cpu", 0), "size_mb=0"),
        (lambda: bench.copy_probe("cpu", 1, "sideways"), "unknown copy kind"),
        (lambda: bench.copy_probe("cpu", 1, "h2d"), "needs an accelerator"),
        (lambda: bench.copy_probe("cpu", 1, "d2h"), "needs an accelerator"),
        (lambda: bench.copy_probe("cpu", 1, pinned=True), "pinned=True"),
        (lambda: timing.time_call("x", {"x": 1}, min_run_time=0), "min_run_time"),
        (lambda: bench.matmul_sweep("cpu", [8, 0]), "size=0"),
        (lambda: bench.copy_sweep("cpu", [1, -1]), "size_mb=-1"),
        (lambda: bench.default_sizes("fft"), "unknown probe"),
    ],
)
def test_bad_inputs_raise_one_line_value_errors(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_absent_cuda_is_refused_before_measuring():
    with pytest.raises(ValueError, match="not available"):
        bench.copy_probe("cuda", 1, "h2d", pinned=True)


@pytest.mark.parametrize("text, expected", [("256", [256]), ("64, 128,256", [64, 128, 256])])
def test_parse_sizes(text, expected):
    assert bench.parse_sizes(text) == expected


@pytest.mark.parametrize("text", ["", "256,", "a", "1,x", "0", "-5", "1.5"])
def test_parse_sizes_rejects(text):
    with pytest.raises(ValueError):
        bench.parse_sizes(text)


def test_sweeps_return_one_result_per_size_in_order():
    rs = bench.matmul_sweep("cpu", [8, 16], min_run_time=FAST)
    assert [r.size for r in rs] == [8, 16]
    cs = bench.copy_sweep("cpu", [1, 2], min_run_time=FAST)
    assert [r.size for r in cs] == [1, 2]


def test_default_sizes_on_cpu_are_small():
    assert max(bench.default_sizes("matmul", "cpu")) <= 1024
    assert max(bench.default_sizes("copy", "cpu")) <= 64


def test_json_round_trip(tmp_path):
    rs = [bench.matmul_probe("cpu", 8, min_run_time=FAST), bench.copy_probe("cpu", 1, min_run_time=FAST)]
    path = bench_results.save_results(tmp_path / "sub" / "run.json", rs)
    data = json.loads(path.read_text())
    assert data["format"] == bench_results.FORMAT and data["environment"]["torch"] == torch.__version__
    assert bench_results.load_results(path) == rs
    assert [p.name for p in path.parent.iterdir()] == ["run.json"]  # no temporary left behind
    assert bench_results.BenchResult.from_dict(rs[0].to_dict()) == rs[0]


def test_save_refuses_nothing_and_directories(tmp_path):
    with pytest.raises(ValueError, match="no results"):
        bench_results.save_results(tmp_path / "x.json", [])
    r = bench.matmul_probe("cpu", 8, min_run_time=FAST)
    with pytest.raises(ValueError, match="directory"):
        bench_results.save_results(tmp_path, [r])


def test_load_rejects_files_that_are_not_bench_files(tmp_path):
    (tmp_path / "a.json").write_text("{not json")
    with pytest.raises(ValueError, match="a.json is not valid JSON"):
        bench_results.load_results(tmp_path / "a.json")
    (tmp_path / "b.json").write_text(json.dumps({"results": []}))
    with pytest.raises(ValueError, match="not a gpulab bench file"):
        bench_results.load_results(tmp_path / "b.json")
    good = bench.matmul_probe("cpu", 8, min_run_time=FAST).to_dict()
    for broken in ({**good, "colour": "red"}, {k: v for k, v in good.items() if k != "rate"}):
        (tmp_path / "c.json").write_text(json.dumps({"format": bench_results.FORMAT, "results": [broken]}))
        with pytest.raises(ValueError, match="c.json"):
            bench_results.load_results(tmp_path / "c.json")


def test_every_result_records_the_float32_matmul_precision():
    before = torch.get_float32_matmul_precision()
    plain = bench.matmul_probe("cpu", 8, min_run_time=FAST)
    tf32 = bench.matmul_probe("cpu", 8, matmul_precision="high", min_run_time=FAST)
    copy = bench.copy_probe("cpu", 1, min_run_time=FAST)
    assert plain.matmul_precision == copy.matmul_precision == before
    assert tf32.matmul_precision == "high"
    assert torch.get_float32_matmul_precision() == before  # restored


def test_matmul_precision_is_restored_after_an_error_and_checked():
    before = torch.get_float32_matmul_precision()
    with pytest.raises(RuntimeError):
        with timing.float32_matmul_precision("medium") as used:
            assert used == "medium" == torch.get_float32_matmul_precision()
            raise RuntimeError("boom")
    assert torch.get_float32_matmul_precision() == before
    with pytest.raises(ValueError, match="unknown matmul precision 'tf32'.*highest, high, medium"):
        bench.matmul_probe("cpu", 8, matmul_precision="tf32")
    with pytest.raises(ValueError, match="unknown matmul precision"):
        bench.matmul_sweep("cpu", [8], matmul_precision="fast")


def test_files_written_before_the_precision_field_still_load(tmp_path):
    old = bench.matmul_probe("cpu", 8, min_run_time=FAST).to_dict()
    del old["matmul_precision"]
    (tmp_path / "old.json").write_text(json.dumps({"format": bench_results.FORMAT, "results": [old]}))
    [r] = bench_results.load_results(tmp_path / "old.json")
    assert r.matmul_precision is None and r.label == "cpu float32, " + f"{r.threads} thread" + "s" * (r.threads != 1)


def _on_gpu(r, **changes):
    return dataclasses.replace(r, device="cuda:0", description="NVIDIA H200", threads=1, **changes)


def test_labels_tell_apart_every_setting_that_changes_the_figure():
    m = bench.matmul_probe("cpu", 8, min_run_time=FAST)
    assert _on_gpu(m, matmul_precision="highest").label == "NVIDIA H200 float32"
    assert _on_gpu(m, matmul_precision="high").label == "NVIDIA H200 float32 (TF32 allowed)"
    assert _on_gpu(m, matmul_precision="high", dtype="bfloat16").label == "NVIDIA H200 bfloat16"
    assert dataclasses.replace(m, matmul_precision="high", threads=1).label == "cpu float32 (matmul precision high), 1 thread"
    c = bench.copy_probe("cpu", 1, min_run_time=FAST)
    labels = {_on_gpu(c, kind="h2d", pinned=p, non_blocking=nb).label for p in (False, True) for nb in (False, True)}
    assert labels == {"NVIDIA H200 h2d", "NVIDIA H200 h2d non_blocking", "NVIDIA H200 h2d pinned",
                      "NVIDIA H200 h2d pinned non_blocking"}
    table = bench_results.format_table([_on_gpu(m, matmul_precision="high"), _on_gpu(c, kind="h2d", pinned=True, non_blocking=True)])
    assert " tf32 " in table and "h2d+pin+nb" in table


def test_add_moves_three_times_the_size():
    r = bench.copy_probe("cpu", 2, "add", min_run_time=FAST)
    assert (r.kind, r.bytes_moved, r.unit) == ("add", 3 * 2 * 2**20, "GB/s")
    assert r.rate == pytest.approx(r.bytes_moved / r.seconds / 1e9)
    with pytest.raises(ValueError, match="pinned=True"):
        bench.copy_probe("cpu", 1, "add", pinned=True)


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB"),
                                   RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9")])
def test_running_out_of_memory_says_so(monkeypatch, error):
    def oom(*args, **kwargs):
        raise error

    monkeypatch.setattr(bench, "time_call", oom)
    with pytest.raises(ValueError, match="ran out of memory on cpu") as info:
        bench.matmul_probe("cpu", 64, "float32")
    assert "not supported" not in str(info.value) and "use a smaller size" in str(info.value)
    with pytest.raises(ValueError, match="a 1 MiB device copy ran out of memory on cpu"):
        bench.copy_probe("cpu", 1)


def test_other_runtime_errors_in_a_copy_are_not_called_out_of_memory(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("something else")

    monkeypatch.setattr(bench, "time_call", broken)
    with pytest.raises(RuntimeError, match="something else"):
        bench.copy_probe("cpu", 1)


def test_default_matmul_sizes_on_a_gpu_are_past_the_launch_bound_region(monkeypatch):
    monkeypatch.setattr(bench.devices, "pick_device", lambda name: torch.device("cuda", 0))
    assert min(bench.default_sizes("matmul", "cuda")) >= 1024
    assert min(bench.default_sizes("copy", "cuda")) >= 64


def test_table_has_a_line_per_result_and_labels_name_threads():
    rs = bench.matmul_sweep("cpu", [8, 16], threads=1, min_run_time=FAST)
    table = bench_results.format_table(rs)
    assert len(table.splitlines()) == 2 + len(rs) and "GFLOP/s" in table
    assert rs[0].label == "cpu float32, 1 thread"
    assert bench_results.format_table([]) == "(no results)"


# ----------------------------------------------------------------------------- the notebook explorer's logic


def test_explorer_lists_only_devices_that_exist():
    from gpulab import devices, explorer

    assert explorer.device_options() == [d.name for d in devices.list_devices()]
    assert explorer.device_options()[-1] == "cpu"
    with pytest.raises(ValueError, match="unknown probe"):
        explorer.size_options("fft")


def test_explorer_run_point_replaces_a_repeated_setting():
    from gpulab import explorer

    history: list = []
    explorer.run_point(history, "matmul", "cpu", 8, "float32", min_run_time=FAST)
    explorer.run_point(history, "matmul", "cpu", 16, "float32", min_run_time=FAST)
    latest = explorer.run_point(history, "matmul", "cpu", 8, "float32", min_run_time=FAST)
    explorer.run_point(history, "copy", "cpu", 1, "float32", min_run_time=FAST)
    assert [(r.probe, r.size) for r in history] == [("matmul", 16), ("matmul", 8), ("copy", 1)]
    assert history[1] is latest
    with pytest.raises(ValueError):
        explorer.run_point(history, "fft", "cpu", 8, "float32")
    assert len(history) == 3


def test_explorer_plot_draws_one_line_per_setting():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpulab import explorer

    history: list = []
    for size in (8, 16):
        explorer.run_point(history, "matmul", "cpu", size, "float32", min_run_time=FAST)
    explorer.run_point(history, "copy", "cpu", 1, "float32", min_run_time=FAST)
    ax = explorer.plot_history(history, "matmul")
    assert len(ax.get_lines()) == 1 and list(ax.get_lines()[0].get_xdata()) == [8, 16]
    assert "2 point(s)" in ax.get_title()
    plt.close("all")


def test_explorer_widget_builds_without_a_kernel():
    from gpulab import explorer

    box = explorer.bench_explorer()
    assert type(box).__name__ == "VBox"


# ----------------------------------------------------------------------------- what results say (notebook 01)


def _result(probe="matmul", device="cpu", size=256, rate=100.0, threads=1, **changes):
    unit = "GFLOP/s" if probe == "matmul" else "GB/s"
    kind = None if probe == "matmul" else "device"
    values = dict(probe=probe, device=device, description="cpu" if device == "cpu" else "NVIDIA H200",
                  torch_version="2.11.0", backend=None, threads=threads, dtype="float32", size=size, seconds=0.001,
                  rate=rate, unit=unit, date="2026-12-04T00:00:00+00:00", kind=kind, pinned=False,
                  non_blocking=False, matmul_precision="highest" if probe == "matmul" else None)
    return bench_results.BenchResult(**{**values, **changes})


def test_accelerator_rows_show_no_thread_count():
    table = bench_results.format_table([_result(threads=2), _result(device="cuda:0", threads=16)]).splitlines()
    assert table[2].split()[5] == "2" and table[3].split()[5] == "-"  # torch's CPU threads say nothing of a GPU


def test_load_note_speaks_only_when_the_cpu_is_busy(monkeypatch):
    assert bench_results.load_note(load=1.5, cores=2) == ""
    note = bench_results.load_note(load=45.3, cores=16)
    assert "busy" in note and "45.3 on 16 cores" in note
    monkeypatch.delattr("os.getloadavg", raising=False)  # Windows: no load average, so nothing to say
    assert bench_results.load_note(cores=1) == ""


def test_thread_speedups_print_two_decimals_and_say_why_all_threads_can_lose():
    one = [_result(size=256, rate=146.7), _result(size=1024, rate=147.8)]
    many = [_result(size=256, rate=3.8, threads=16), _result(size=1024, rate=268.6, threads=16)]
    text = bench_results.thread_speedups(one, many, load=45.0)
    assert "n =  256: 16 threads are 0.03x as fast as 1 thread (at most 16x)" in text
    assert "n = 1024: 16 threads are 1.82x" in text
    assert "slower at n = 256:" in text and "n = 1024:" not in text.splitlines()[2] and "busy" in text
    quiet = bench_results.thread_speedups(one[1:], many[1:], load=0.5)
    assert "slower" not in quiet and "busy" not in quiet
    with pytest.raises(ValueError, match="same probe and size"):
        bench_results.thread_speedups(one, many[::-1])
    with pytest.raises(ValueError):
        bench_results.thread_speedups(one, many[:1])


def test_copy_notes_say_what_fits_when_a_fixed_cost_hides_the_bandwidth_and_what_threads_add():
    quiet = [_result("copy", size=1, rate=120.0), _result("copy", size=64, rate=35.0),
             _result("copy", size=64, rate=60.0, threads=2)]
    text = bench_results.copy_notes(quiet, last_cache_mib=32, load=0.0)
    assert "1 MiB copy: reads and writes 2 MiB, which fits in the 32 MiB last cache" in text
    assert "64 MiB copy: reads and writes 128 MiB, which is larger than the 32 MiB last cache" in text
    assert "2 threads copied 64 MiB at 60.0 GB/s, 1.71x one thread" in text and "fixed cost" not in text
    busy = [_result("copy", size=1, rate=0.3), _result("copy", size=64, rate=16.8),
            _result("copy", size=64, rate=8.0, threads=16)]
    text = bench_results.copy_notes(busy, load=50.0)
    assert "the 1 MiB copy ran slower than the 64 MiB one: a fixed cost" in text and "last cache" not in text
    assert "0.48x one thread (slower" in text and "busy" in text.splitlines()[-1]
    assert bench_results.copy_notes([_result()], load=0.0) == ""  # a matmul is not a copy


def test_against_reference_compares_like_with_like():
    recorded = [_result(device="cuda:0", size=n, rate=r) for n, r in ((1024, 38075.7), (16384, 53301.3))]
    recorded.append(_result(device="cuda:0", size=8192, rate=355287.0, matmul_precision="high"))  # TF32: not strict
    cpu = [_result(size=1024, rate=309.8, threads=2)]
    text = bench_results.against_reference(cpu, recorded)
    assert text == ("best here: 309.8 GFLOP/s (this CPU, 2 threads, float32 n = 1024); best recorded: 53,301.3 GFLOP/s "
                    "(NVIDIA H200, float32 n = 16384), 172x the best here")
    gpu = [_result(device="cuda:0", size=1024, rate=30460.5, threads=16)]
    lines = bench_results.against_reference(gpu, recorded).splitlines()
    assert lines[0] == ("float32 n = 1024: 30,460.5 GFLOP/s here, 38,075.7 recorded on NVIDIA H200 "
                        "(0.80x the recorded rate)")
    assert lines[1].endswith("1.75x the best here")
    copies = [_result("copy", device="cuda:0", size=64, rate=5.0, kind="h2d", pinned=False)]
    pinned = [_result("copy", device="cuda:0", size=64, rate=54.6, kind="h2d", pinned=True)]
    assert bench_results.against_reference(copies, pinned) == ""  # pageable is not compared with pinned
    assert "host-to-device copy pinned 64 MiB" in bench_results.against_reference(pinned, pinned)
    assert bench_results.against_reference([], recorded) == "" and bench_results.against_reference(cpu, []) == ""


def test_thread_speedups_explain_a_ratio_above_the_most_possible():
    one, many = [_result(size=1024, rate=77.2)], [_result(size=1024, rate=205.5, threads=2)]
    text = bench_results.thread_speedups(one, many, load=0.0)
    assert "2.66x as fast as 1 thread (at most 2x)" in text and "more than the most at n = 1024" in text
    assert "more than the most" not in bench_results.thread_speedups(one, [_result(size=1024, rate=150.0, threads=2)],
                                                                     load=0.0)
