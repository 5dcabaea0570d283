"""gpulab.profiling.roofline, opcount and cpupeak: FLOPs and bytes of known ops, ridge point, CPU peak, the exercise check."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import matplotlib
import pytest
import torch
from torch import nn

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gpulab import bench, bench_results, cpu_info, devices, memory
from gpulab.profiling import cpu_peak as cpupeak
from gpulab.profiling import op_count as opcount
from gpulab.profiling import roofline
from gpulab.exercises.quiz import check  # noqa: E402
from gpulab.exercises.roofline import cases, check_bound  # noqa: E402
from gpulab.models import Net1  # noqa: E402

# ----------------------------------------------------------------------------- counting FLOPs and bytes


@pytest.mark.parametrize("m,k,n", [(3, 5, 7), (64, 64, 64), (1, 1000, 2)])
def test_matmul_is_2mkn_flops_and_reads_both_writes_one(m, k, n):
    cost = opcount.matmul_cost(m, k, n)
    assert cost.flops == 2 * m * k * n
    assert cost.bytes == 4 * (m * k + k * n + m * n)
    assert cost.intensity == pytest.approx(cost.flops / cost.bytes)


def test_gelu_reads_and_writes_each_element_once():
    cost = opcount.gelu_cost(1000)
    assert cost.bytes == 1000 * 4 * 2
    assert cost.flops == 1000 * opcount.ELEMENTWISE_FLOPS["gelu"]
    assert opcount.gelu_cost(1000, torch.bfloat16).bytes == 1000 * 2 * 2


def test_flop_counter_counts_real_tensors_and_the_relu_formula():
    x = torch.randn(10, 4)
    layer = nn.Linear(4, 3)
    assert opcount.count_flops(layer, x) == 2 * 10 * 4 * 3
    assert opcount.count_flops(torch.relu, x) == 40
    assert opcount.count_flops(torch.add, x, x) == 0  # FlopCounterMode has no formula for add


def test_net1_layers_count_input_weights_bias_and_output():
    costs = opcount.linear_costs(Net1(13, 16, 32, 1), batch=128)
    assert [c.name for c in costs] == ["layer1 13->16", "layer2 16->32", "layer3 32->1"]
    for c, (fan_in, fan_out) in zip(costs, [(13, 16), (16, 32), (32, 1)]):
        assert c.flops == 2 * 128 * fan_in * fan_out
        assert c.bytes == 4 * (128 * fan_in + fan_in * fan_out + fan_out + 128 * fan_out)


def test_op_cost_and_counts_reject_bad_inputs():
    with pytest.raises(ValueError, match="must be callable"):
        opcount.op_cost("x", "not a function", torch.ones(2))
    with pytest.raises(ValueError, match="expected tensors, got list"):
        memory.tensor_bytes([[1, 2]])
    with pytest.raises(ValueError, match="matrix size=0 must be a whole number >= 1"):
        opcount.matmul_cost(0, 2, 2)
    with pytest.raises(ValueError, match="batch"):
        opcount.linear_costs(Net1(13, 16, 32, 1), batch=-1)
    with pytest.raises(ValueError, match="has no nn.Linear"):
        opcount.linear_costs(nn.ReLU(), batch=4)


# ----------------------------------------------------------------------------- the roofline itself


def test_ridge_point_and_classification():
    assert roofline.ridge_point(100e9, 10e9) == pytest.approx(10.0)
    assert roofline.arithmetic_intensity(20, 10) == 2.0
    assert roofline.classify(2.0, 10.0) == "memory-bound"
    assert roofline.classify(50.0, 10.0) == "compute-bound"
    assert roofline.classify(10.0, 10.0) == "compute-bound"  # at the ridge both roofs hold: compute
    assert roofline.attainable(2.0, 100e9, 10e9) == 20e9
    assert roofline.attainable(50.0, 100e9, 10e9) == 100e9
    line = roofline.Roofline("test", 100e9, 10e9)
    assert line.ridge == pytest.approx(10.0) and line.classify(opcount.matmul_cost(512, 512, 512).intensity) == "compute-bound"
    assert line.classify(opcount.gelu_cost(10**6).intensity) == "memory-bound"
    assert "ridge point 10 FLOP/byte" in line.describe()
    assert roofline.H200_SPEC.ridge == pytest.approx(67e12 / 4.8e12) and roofline.H200_SPEC.source.startswith("https://")


def test_the_tensor_core_roof_is_dense_bf16_and_its_ridge_far_above_fp32():
    tc = roofline.H200_BF16_SPEC
    assert tc.peak_flops == pytest.approx(1979e12 / 2)  # the spec sheet's figure is with 2:4 sparsity
    assert tc.bandwidth == roofline.H200_SPEC.bandwidth and tc.source == roofline.H200_SPEC.source
    assert tc.ridge == pytest.approx(989.5e12 / 4.8e12) and tc.ridge > 10 * roofline.H200_SPEC.ridge
    assert "dense" in tc.name and "BF16" in tc.name


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, "10", True, None])
def test_bad_machine_figures_raise_one_line_errors(bad):
    for call in (lambda: roofline.ridge_point(bad, 1e9), lambda: roofline.ridge_point(1e9, bad),
                 lambda: roofline.Roofline("x", bad, 1e9), lambda: roofline.classify(1.0, bad)):
        with pytest.raises(ValueError) as info:
            call()
        assert "\n" not in str(info.value) and repr(bad) in str(info.value)


def test_bad_intensities_and_counts_raise():
    with pytest.raises(ValueError, match="intensity=-1"):
        roofline.classify(-1, 10)
    with pytest.raises(ValueError, match="nbytes=0"):
        roofline.arithmetic_intensity(5, 0)
    with pytest.raises(ValueError, match="flops=-5"):
        roofline.arithmetic_intensity(-5, 10)


def test_measured_roofline_takes_the_best_probe_results():
    line, results = roofline.measure_roofline("cpu", sizes=(32, 64), copy_mb=(1,), min_run_time=0.01)
    matmuls = [r for r in results if r.probe == "matmul"]
    copies = [r for r in results if r.probe == "copy"]
    assert [r.size for r in matmuls] == [32, 64] and {r.kind for r in copies} == {"device", "add"}
    assert line.peak_flops == max(r.rate for r in matmuls) * 1e9
    assert line.bandwidth == max(r.rate for r in copies) * 1e9


def test_gpu_roofline_is_none_without_a_recording_and_read_from_one(tmp_path):
    assert roofline.recorded_gpu_roofline(tmp_path) is None
    mm = bench.matmul_sweep("cpu", [16], min_run_time=0.01)[0]
    fake = [dataclasses.replace(mm, description="Fake GPU", rate=5000.0),
            dataclasses.replace(mm, description="Fake GPU", rate=9000.0, matmul_precision="high"),  # TF32: not FP32
            dataclasses.replace(bench.copy_probe("cpu", 1, min_run_time=0.01), description="Fake GPU", rate=2000.0)]
    bench_results.save_results(tmp_path / "fake-gpu.json", fake)
    line = roofline.recorded_gpu_roofline(tmp_path)
    assert line.peak_flops == 5000e9 and line.bandwidth == 2000e9 and "Fake GPU" in line.name


def test_plot_roofline_draws_a_roof_per_machine_and_the_ops():
    ops = [opcount.matmul_cost(256, 256, 256), opcount.gelu_cost(4096)]
    ax = roofline.plot_roofline([roofline.Roofline("a", 100e9, 10e9), roofline.H200_SPEC], ops)
    assert ax.get_xscale() == "log" and len(ax.get_lines()) == 2 * 2 + len(ops)  # roof + ridge each, one per op
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == f"GELU 4,096 ({ops[1].intensity:.3g} FLOP/byte)"
    plt.close("all")
    with pytest.raises(ValueError, match="at least one Roofline"):
        roofline.plot_roofline([])


# ----------------------------------------------------------------------------- theoretical CPU peak


@pytest.mark.parametrize("flags,per_cycle", [
    ({"avx512f", "avx2", "fma"}, 64),
    ({"avx2", "fma", "avx"}, 32),
    ({"avx2"}, 16),        # no fma: a multiply and an add per cycle
    ({"avx", "sse2"}, 16),
    ({"sse2"}, 8),
    ({"asimd", "fp"}, 16),  # ARM NEON: 4 lanes with fused multiply-add
])
def test_flop_per_cycle_from_flags(flags, per_cycle):
    got, steps = cpupeak.flop_per_cycle(flags)
    assert got == per_cycle and steps[-1].endswith(f"= {per_cycle} FLOP per cycle per core")


def test_flop_per_cycle_unknown_and_bad():
    assert cpupeak.flop_per_cycle(None)[0] is None and "unknown" in cpupeak.flop_per_cycle(None)[1][0]
    assert cpupeak.flop_per_cycle({"vfp"})[0] is None
    with pytest.raises(ValueError, match="collection of flag names"):
        cpupeak.flop_per_cycle("avx2 fma")


def test_cpu_peak_is_cores_times_clock_times_flop_per_cycle():
    peak = cpupeak.cpu_peak(4, 2500, {"avx2", "fma"})
    assert peak.flops == 4 * 2.5e9 * 32
    assert peak.explain().splitlines()[-1] == "theoretical peak = 4 cores x 2.50 GHz x 32 FLOP/cycle = 320.0 GFLOP/s"
    unknown = cpupeak.cpu_peak(4, None, {"avx2", "fma"}, clock_source="unknown")
    assert unknown.flops is None and unknown.explain().endswith("unknown (a piece above is missing)")
    with pytest.raises(ValueError, match="cores=0"):
        cpupeak.cpu_peak(0, 2500, {"avx2"})


def test_this_cpu_peak_names_its_sources():
    peak = cpupeak.this_cpu_peak()
    assert peak.steps[0].startswith("cores: ") and peak.steps[1].startswith("clock: ")
    assert peak.flops is None or peak.flops > 0


def test_cpu_flags_and_clock_from_cpuinfo(tmp_path, monkeypatch):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: Fake\ncpu MHz\t\t: 2445.4\nflags\t\t: fpu AVX2 fma\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm\n")
    assert cpu_info.cpu_flags(str(x86)) == {"fpu", "avx2", "fma"}
    assert cpu_info.cpu_flags(str(arm)) == {"fp", "asimd", "evtstrm"}
    assert cpu_info.cpu_flags(str(tmp_path / "missing")) is None
    import psutil

    monkeypatch.setattr(psutil, "cpu_freq", lambda: SimpleNamespace(current=3000.0, min=0.0, max=0.0))
    assert cpu_info.cpu_clock_mhz(str(x86)) == (3000.0, "psutil.cpu_freq().current")
    monkeypatch.setattr(psutil, "cpu_freq", lambda: None)
    mhz, source = cpu_info.cpu_clock_mhz(str(x86))
    assert mhz == 2445.4 and "cpuinfo" in source
    mhz, source = cpu_info.cpu_clock_mhz(str(tmp_path / "missing"))
    assert mhz is None and source.startswith("unknown")


# ----------------------------------------------------------------------------- the exercise and the questions


def right(flops, nbytes, ridge):
    return roofline.classify(roofline.arithmetic_intensity(flops, nbytes), ridge)


@pytest.mark.parametrize("ridge", [0.5, 7.0, 30.0])
def test_check_bound_accepts_the_right_rule_and_spellings(ridge):
    assert check_bound(right, ridge).ok
    assert check_bound(lambda f, b, r: right(f, b, r).split("-")[0].upper(), ridge).ok  # "MEMORY" / "COMPUTE"


@pytest.mark.parametrize("fn,hint", [
    (lambda f, b, r: "compute-bound" if f >= r else "memory-bound", "compare a count (FLOPs"),
    (lambda f, b, r: "compute-bound" if b / f >= r else "memory-bound", "nbytes / flops"),
    (lambda f, b, r: "memory-bound" if f / b >= r else "compute-bound", "every answer is the opposite"),
    (lambda f, b, r: "compute-bound" if b >= r else "memory-bound", "FLOP per byte"),
    (lambda f, b, r: None, "returned None"),
    (lambda f, b, r: f / b > r, "returned True"),
    (lambda f, b, r: 1 / 0, "raised ZeroDivisionError"),
    (lambda f, b, r: "compute-bound" if f / b >= 3 else "memory-bound", "wrong"),
    ("bound", "pass your function itself"),
])
def test_check_bound_says_what_is_wrong(fn, hint):
    verdict = check_bound(fn, 7.0)
    assert not verdict.ok and hint in str(verdict), str(verdict)


def test_check_bound_cases_straddle_the_ridge_points_and_bad_ridge_raises():
    intensities = [f / b for _, f, b in cases()]
    for ridge in (7.0, roofline.H200_SPEC.ridge):
        assert min(intensities) < ridge < max(intensities)
    with pytest.raises(ValueError, match="ridge=-1"):
        check_bound(right, -1)


def test_questions_of_notebook_11():
    assert check("11", 1, "a").ok and not check("11", 1, "b").ok
    assert check("11", 2, "12,000,000").ok
    for answer, hint in ((8_000_000, "written"), (3_000_000, "4 bytes"), (24_000_000, "float64"), ("lots", "number")):
        verdict = check("11", 2, answer)
        assert not verdict.ok and hint in str(verdict)
    assert check("11", 3, "c").ok and "C++ compiler" in str(check("11", 3, "a"))
