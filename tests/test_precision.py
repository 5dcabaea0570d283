"""gpulab.precision: sizes, ranges, overflow and autocast helpers (CPU; CUDA paths are in test_gpu.py)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gpulab import precision
from gpulab.models import Net1


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "torch.bfloat16", " Float16 "])
def test_dtype_from_name_accepts_names(name):
    dtype = precision.dtype_from_name(name)
    assert precision.dtype_name(dtype) == name.strip().lower().removeprefix("torch.")


@pytest.mark.parametrize("bad", ["float8", "", "half-ish", torch.int64, 3])
def test_dtype_from_name_rejects_others(bad):
    with pytest.raises(ValueError, match="float32, float16, bfloat16"):
        precision.dtype_from_name(bad)


def test_bytes_per_element_matches_itemsize():
    for name, dtype in precision.DTYPES.items():
        assert precision.bytes_per_element(name) == dtype.itemsize
    assert precision.bytes_per_element("float16") * 2 == precision.bytes_per_element("float32")
    assert precision.bytes_per_element("bfloat16") == precision.bytes_per_element("float16")


def test_dtype_table_rows_agree_with_finfo():
    rows = precision.dtype_table()
    assert [r.name for r in rows] == list(precision.DTYPES)
    by = {r.name: r for r in rows}
    assert by["float16"].max == float(torch.finfo(torch.float16).max)
    # bfloat16 keeps float32's range but not its precision; float16 the reverse trade.
    assert by["bfloat16"].max > 1e38 > by["float16"].max
    assert by["bfloat16"].eps > by["float16"].eps > by["float32"].eps
    assert by["float32"].to_dict()["bytes"] == 4


@pytest.mark.parametrize("name, exponent", [("float32", -149), ("float16", -24), ("bfloat16", -133)])
def test_smallest_subnormal_is_the_last_value_before_zero(name, exponent):
    value = precision.smallest_subnormal(name)
    assert value == 2.0**exponent  # IEEE 754: 2^(min exponent - mantissa bits)
    row = {r.name: r for r in precision.dtype_table()}[name]
    assert row.smallest_subnormal == value < row.smallest_normal
    # it is stored exactly; a value below half of it rounds to 0 (underflow), just above half rounds up to it
    assert precision.round_trip([value, value * 0.49, value * 0.51], name) == [value, 0.0, value]


def test_smallest_subnormal_rejects_other_dtypes():
    with pytest.raises(ValueError, match="float32, float16, bfloat16"):
        precision.smallest_subnormal(torch.int8)


def test_parameter_bytes_by_dtype_scales_with_element_size_and_leaves_model_alone():
    model = Net1(13, 16, 32, 1)
    count = precision.parameter_count(model)
    assert count == 13 * 16 + 16 + 16 * 32 + 32 + 32 + 1
    sizes = precision.parameter_bytes_by_dtype(model)
    for name, size in sizes.items():
        assert size == count * precision.bytes_per_element(name)
    assert next(model.parameters()).dtype == torch.float32
    assert precision.parameter_bytes(model) == sizes["float32"]


def test_overflow_demo_shows_float16_limits():
    rows = {r["value"]: r for r in precision.overflow_demo()}
    assert math.isinf(rows[70000.0]["float16"])
    assert math.isfinite(rows[70000.0]["bfloat16"])
    assert rows[65504.0]["float16"] == 65504.0
    assert rows[1e-8]["float16"] == 0.0
    assert rows[1e-8]["bfloat16"] > 0
    assert rows[1.0] == {"value": 1.0, "float32": 1.0, "float16": 1.0, "bfloat16": 1.0}


def test_round_trip_rejects_unknown_dtype():
    with pytest.raises(ValueError, match="unknown dtype"):
        precision.round_trip([1.0], "int8")


def test_scaled_gradient_demo_recovers_a_gradient_float16_loses():
    demo = precision.scaled_gradient_demo(1e-8, 2.0**16)
    assert demo["float16"] == 0.0
    assert demo["scaled_float16"] > 0
    assert demo["unscaled_float32"] == pytest.approx(1e-8, rel=0.01)
    with pytest.raises(ValueError, match="scale"):
        precision.scaled_gradient_demo(1e-8, 0)


def test_autocast_output_dtype_on_cpu():
    assert precision.autocast_output_dtype("cpu", "bfloat16") == torch.bfloat16
    assert precision.bf16_supported("cpu") is True


def test_autocast_output_dtype_bad_device():
    with pytest.raises(ValueError, match="device"):
        precision.autocast_output_dtype("tpu", "bfloat16")


def test_autocast_matmul_seconds_runs_and_checks_input():
    seconds = precision.autocast_matmul_seconds("cpu", "bfloat16", n=32, min_run_time=0.01)
    assert 0 < seconds < 10
    assert precision.autocast_matmul_seconds("cpu", None, n=32, min_run_time=0.01) > 0
    with pytest.raises(ValueError, match="n=0"):
        precision.autocast_matmul_seconds("cpu", None, n=0)
    with pytest.raises(ValueError, match="min_run_time"):
        precision.autocast_matmul_seconds("cpu", None, n=8, min_run_time=0)


def test_matmul_modes_time_every_mode_against_strict_float32():
    before = torch.get_float32_matmul_precision()
    rows = precision.matmul_modes("cpu", n=16, min_run_time=0.01)
    assert [r["mode"] for r in rows] == list(precision.MATMUL_MODES)
    assert rows[0]["x_float32"] == 1.0
    for r in rows:
        assert r["n"] == 16 and (r["ms"] is None) == bool(r["note"])
        if r["ms"] is not None:
            assert r["ms"] > 0 and r["x_float32"] == pytest.approx(rows[0]["ms"] / r["ms"])
    assert torch.get_float32_matmul_precision() == before  # the TF32 mode restores the setting


def test_tf32_mode_runs_under_high_precision(monkeypatch):
    from gpulab import timing

    seen = []
    real = timing.time_call

    def spy(stmt, env, device, **kwargs):
        seen.append((stmt, torch.get_float32_matmul_precision(), {k: getattr(v, "dtype", None) for k, v in env.items()}))
        return real(stmt, env, device, **kwargs)

    monkeypatch.setattr(timing, "time_call", spy)
    for mode in ("float32", "tf32", "bfloat16", "autocast bfloat16"):
        precision.matmul_mode_seconds("cpu", mode, n=8, min_run_time=0.01)
    (s32, p32, _), (_, ptf, _), (_, _, pre), (auto, _, envauto) = seen
    assert (p32, ptf) == ("highest", "high")
    assert pre["a"] == pre["b"] == torch.bfloat16 and s32 == "a @ b"  # cast once, before timing
    assert "autocast" in auto and envauto["a"] == torch.float32  # cast inside every call


def test_matmul_modes_bad_input():
    with pytest.raises(ValueError, match="unknown mode 'int8'"):
        precision.matmul_mode_seconds("cpu", "int8")
    with pytest.raises(ValueError, match="unknown mode"):
        precision.matmul_modes("cpu", 8, modes=("float32", "fp8"))
    with pytest.raises(ValueError, match="n=0"):
        precision.matmul_mode_seconds("cpu", "tf32", n=0)


def test_a_mode_the_device_cannot_run_becomes_a_note(monkeypatch):
    real = precision.matmul_mode_seconds

    def no_half(device, mode, n, min_run_time):
        if mode == "float16":
            raise ValueError("matmul mode 'float16' failed on cpu (not implemented for 'Half')")
        return real(device, mode, n, min_run_time)

    monkeypatch.setattr(precision, "matmul_mode_seconds", no_half)
    row = {r["mode"]: r for r in precision.matmul_modes("cpu", 8, ("float32", "float16"), 0.01)}["float16"]
    assert row["ms"] is None and "not implemented" in row["note"]



@pytest.fixture
def capability(cuda_reported, monkeypatch):
    """CUDA reported with one GPU of the compute capability the test sets (a T4 is 7.5), on any machine."""
    chosen = {"cc": (7, 5)}
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: chosen["cc"])
    return chosen


def test_a_t4_has_neither_native_bfloat16_nor_tf32(capability):
    assert precision.cuda_capability("cuda") == (7, 5)
    assert precision.bf16_supported("cuda") is False
    assert precision.tf32_supported("cuda") is False
    assert precision.training_autocast_dtype("cuda") == torch.float16  # fit adds a GradScaler for float16 on CUDA
    expected = "compute capability 7.5: no TF32 tensor cores, so this is strict float32"
    assert precision.hardware_note("cuda", "tf32") == expected
    assert "compute capability 7.5: no native bfloat16" in precision.hardware_note("cuda:0", "autocast bfloat16")
    assert "float16 with GradScaler" in precision.hardware_note("cuda", torch.bfloat16)
    assert precision.hardware_note("cuda", "float16") == precision.hardware_note("cuda", "float32") == ""


def test_an_ampere_or_newer_gpu_has_both(capability):
    capability["cc"] = (9, 0)
    assert precision.cuda_capability("cuda") == (9, 0)
    assert precision.bf16_supported("cuda") and precision.tf32_supported("cuda")
    assert precision.training_autocast_dtype("cuda") == torch.bfloat16
    assert precision.hardware_note("cuda", "tf32") == precision.hardware_note("cuda", "autocast bfloat16") == ""


def test_the_cpu_has_no_capability_and_no_hardware_note():
    assert precision.cuda_capability("cpu") is None and not precision.tf32_supported("cpu")
    assert precision.hardware_note("cpu", "tf32") == precision.hardware_note("cpu", "bfloat16") == ""
    assert precision.training_autocast_dtype("cpu") == torch.bfloat16  # CPU autocast runs bfloat16


def test_rocm_is_not_given_an_nvidia_capability(capability, monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.0")
    assert precision.cuda_capability("cuda") is None and precision.hardware_note("cuda", "tf32") == ""
    assert precision.bf16_supported("cuda") and precision.training_autocast_dtype("cuda") == torch.bfloat16


def test_matmul_modes_on_a_t4_skip_bfloat16_and_say_tf32_is_float32(capability, monkeypatch):
    timed = []

    def fake_seconds(device, mode, n, min_run_time):
        timed.append(mode)
        return 0.004 if mode in ("float32", "tf32") else 0.001

    monkeypatch.setattr(precision, "matmul_mode_seconds", fake_seconds)
    rows = {r["mode"]: r for r in precision.matmul_modes("cuda", 64, min_run_time=0.01)}
    assert "autocast bfloat16" not in timed and "bfloat16" not in timed  # never run emulated
    for mode in ("autocast bfloat16", "bfloat16"):
        assert rows[mode]["ms"] is None and rows[mode]["note"].startswith("skipped: compute capability 7.5")
    assert rows["tf32"]["ms"] == pytest.approx(4.0) and "no TF32 tensor cores" in rows["tf32"]["note"]
    assert rows["float16"]["x_float32"] == pytest.approx(4.0) and rows["float16"]["note"] == ""
    capability["cc"] = (8, 0)
    timed.clear()
    rows = {r["mode"]: r for r in precision.matmul_modes("cuda", 64, min_run_time=0.01)}
    assert "bfloat16" in timed and all(r["note"] == "" for r in rows.values())
