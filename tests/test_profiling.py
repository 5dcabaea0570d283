"""gpulab.profiling.steps (the four phases of a step under torch.profiler) and gpulab.profiling.compile_timing (can compile work here, Adam)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import matplotlib
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gpulab.profiling import compile_timing as compiling  # noqa: E402
from gpulab.course import environment as doctor
from gpulab.profiling import steps as profiling
from gpulab.experiment import Recipe, article_model, boston_data, optimizer_for  # noqa: E402

# ----------------------------------------------------------------------------- profiling


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    recipe = Recipe()
    split = boston_data(recipe)
    model = article_model(recipe)
    loader = DataLoader(TensorDataset(split.X_train, split.y_train), batch_size=recipe.batch_size, shuffle=True)
    trace = tmp_path_factory.mktemp("prof") / "runs" / "trace.json"
    return profiling.profile_steps(model, optimizer_for(model, recipe), loader, steps=3, trace_path=trace)


def test_every_step_has_the_four_phases_in_order(profiled):
    assert profiled.steps == 3 and len(profiled.events) == 3 * len(profiling.PHASES)
    for step in range(3):
        assert [e.phase for e in profiled.events if e.step == step] == list(profiling.PHASES)
    starts = [e.start_ms for e in profiled.events]
    assert starts == sorted(starts) and starts[0] == 0.0


def test_phase_times_are_positive_and_fit_in_the_span(profiled):
    per = profiled.per_phase_ms()
    assert list(per) == list(profiling.PHASES) and all(v > 0 for v in per.values())
    assert sum(per.values()) * profiled.steps <= profiled.span_ms() + 1e-6
    # phases follow each other: no two overlap
    for a, b in zip(profiled.events, profiled.events[1:]):
        assert a.start_ms + a.ms <= b.start_ms + 1e-3


def test_device_time_is_the_sum_of_the_kernels_self_time(profiled, monkeypatch):
    on_gpu = any(getattr(e, "self_device_time_total", 0) for e in profiled.profiler.events())
    assert (profiled.device_ms_per_step() > 0) == on_gpu  # a CPU profile has no device time
    kernels = [SimpleNamespace(self_device_time_total=300.0), SimpleNamespace(self_device_time_total=0),
               SimpleNamespace(name="cpu op without the field")]
    monkeypatch.setattr(profiled.profiler, "events", lambda: kernels)
    assert profiled.device_ms_per_step() == pytest.approx(0.3 / profiled.steps)


def test_the_table_and_the_trace_file(profiled):
    table = profiled.table(25)
    assert "aten::addmm" in table and "phase/backward" in table
    data = json.loads(profiled.trace_path.read_text())
    names = {e.get("name") for e in data["traceEvents"]}
    assert {f"phase/{p}" for p in profiling.PHASES} <= names


def test_the_schedule_records_only_the_active_steps(profiled):
    # wait=1 and warmup=1 by default: the trace holds ProfilerStep#2..#4, the first two steps are not in it
    assert profiling.trace_steps(profiled.trace_path) == [2, 3, 4]
    assert profiled.calls("ProfilerStep*") == 3 and profiled.calls("phase/forward") == 3
    assert profiled.calls("no such operator") == 0


def test_batch_sizes_and_the_select_per_row_of_a_tensor_dataset(profiled):
    # 404 training rows in batches of 128: steps 3, 4, 5 of an epoch get 128, 20 (the short last batch), 128
    assert profiled.batch_sizes == [128, 20, 128]
    # TensorDataset.__getitem__ indexes each of its two tensors: two aten::select per row fetched
    assert profiled.calls("aten::select") == 2 * sum(profiled.batch_sizes)


def test_wait_and_warmup_move_the_recorded_steps(tmp_path):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.ones(n, 2), torch.ones(n, 1)) for n in (1, 2, 3, 4, 5)]
    prof = profiling.profile_steps(model, opt, batches, steps=2, wait=2, warmup=1, trace_path=tmp_path / "t.json")
    assert prof.batch_sizes == [4, 5] and profiling.trace_steps(prof.trace_path) == [3, 4]
    assert len(prof.events) == 2 * len(profiling.PHASES)


def test_timeline_plot(profiled):
    ax = profiling.plot_timeline(profiled)
    assert len(ax.patches) == len(profiled.events)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["step 1", "step 2", "step 3"]
    plt.close("all")


def _event(name, start, end, device_type="DeviceType.CPU"):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), device_type=device_type)


def test_phase_events_from_plain_events():
    events = [_event("phase/forward", 3000, 5000), _event("aten::mm", 3100, 3200), _event("phase/data", 1000, 3000),
              _event("phase/backward", 5000, 9000), _event("phase/optimizer", 9000, 9500),
              _event("phase/data", 9500, 9600), _event("phase/forward", 3000, 5000, "DeviceType.CUDA"),
              _event("phase/other", 1, 2)]
    got = profiling.phase_events(events)
    assert [(e.step, e.phase) for e in got] == [(0, "data"), (0, "forward"), (0, "backward"), (0, "optimizer"), (1, "data")]
    assert got[1].start_ms == 2.0 and got[1].ms == 2.0
    per = profiling.per_phase_ms(got)
    assert per == pytest.approx({"data": (2.0 + 0.1) / 2, "forward": 1.0, "backward": 2.0, "optimizer": 0.25})
    assert profiling.per_phase_ms([]) == dict.fromkeys(profiling.PHASES, 0.0)


def test_profile_steps_rejects_bad_input():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="steps=0 must be a whole number >= 1"):
        profiling.profile_steps(model, opt, [(torch.ones(1, 2), torch.ones(1, 1))], steps=0)
    with pytest.raises(ValueError, match="the loader gave no batch"):
        profiling.profile_steps(model, opt, [], steps=1)
    with pytest.raises(ValueError, match="warmup=0 must be a whole number >= 1"):
        profiling.profile_steps(model, opt, [(torch.ones(1, 2), torch.ones(1, 1))], warmup=0)
    with pytest.raises(ValueError, match="wait=-1 must be a whole number >= 0"):
        profiling.profile_steps(model, opt, [(torch.ones(1, 2), torch.ones(1, 1))], wait=-1)


# ----------------------------------------------------------------------------- compiling


def test_cxx_candidates_follow_inductor():
    assert compiling.cxx_candidates("linux", {}) == ["g++"]
    assert compiling.cxx_candidates("darwin", {}) == ["clang++"]
    assert compiling.cxx_candidates("win32", {}) == ["cl"]
    assert compiling.cxx_candidates("linux", {"CXX": "/usr/bin/clang++-18"}) == ["/usr/bin/clang++-18"]
    assert compiling.find_cxx("linux", {"CXX": "/opt/x/clang++"}, which=lambda n: n) == "clang++"  # a name, never a path
    assert compiling.find_cxx("linux", {}, which=lambda n: None) is None


def test_no_compiler_means_a_skip_with_its_reason(monkeypatch):
    monkeypatch.setattr(compiling.shutil, "which", lambda name: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the doctor reports the CPU's compiler, even on a GPU machine
    support = compiling.compile_support("cpu")
    assert support["ok"] is False and "no C++ compiler" in support["note"]
    message = compiling.skip_message(support)
    assert message.startswith("Skipping torch.compile on cpu: no C++ compiler (") and message.endswith(".")
    with pytest.raises(ValueError, match="Skipping torch.compile on cpu"):
        compiling.measure_compile(torch.nn.Linear(2, 1), torch.ones(4, 2), torch.ones(4, 1))
    assert "compile      torch.compile on cpu: no (no C++ compiler" in doctor.format_report(doctor.report())


def test_a_compiler_on_path_means_yes(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(compiling.shutil, "which", lambda name: f"/usr/bin/{name}" if name in compiling.cxx_candidates() else None)
    support = compiling.compile_support("cpu")
    assert support["ok"] and support["note"].startswith("C++ compiler ") and "/usr/bin" not in support["note"]
    data = doctor.report()
    assert data["compile"]["ok"] is True or data["compile"]["device"] != "cpu"
    assert "compile      torch.compile on " in doctor.format_report(data)


def test_compile_timing_speedup():
    t = compiling.CompileTiming(first_step_s=20.0, eager_step_s=0.002, compiled_step_s=0.001, code=("# code",))
    assert t.speedup == 2.0 and t.to_dict()["speedup"] == 2.0
    assert "code" not in t.to_dict() and t.code == ("# code",)


def test_adam_default_is_the_for_loop_on_cpu_and_unknown_without_the_private_function(monkeypatch):
    params = list(torch.nn.Linear(2, 1).parameters())
    assert compiling.adam_default_impl(params) == "for-loop"  # no foreach kernels for CPU tensors
    import torch.optim.optimizer as optimizer_module

    monkeypatch.setattr(optimizer_module, "_default_to_fused_or_foreach", lambda *a, **k: (False, True))
    assert compiling.adam_default_impl(params) == "foreach"
    monkeypatch.delattr(optimizer_module, "_default_to_fused_or_foreach")
    assert compiling.adam_default_impl(params) == "unknown"


def test_check_cpu_instructions_asks_inductor_once_and_says_none_without_it(monkeypatch):
    import torch._inductor.cpu_vec_isa as isa

    asked = []
    monkeypatch.setattr(isa, "pick_vec_isa", lambda: asked.append(1) or "avx2")
    assert compiling.check_cpu_instructions() == "avx2" and asked == [1]
    monkeypatch.delattr(isa, "pick_vec_isa")
    assert compiling.check_cpu_instructions() is None


def test_time_adam_times_each_variant_on_its_own_copy():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    before = model.weight.detach().clone()
    times = compiling.time_adam(model, torch.randn(8, 3), torch.randn(8, 1), {"default": {}, "fused": {"fused": True}},
                                min_run_time=0.01)
    assert list(times) == ["default", "fused"]
    assert all(step > 0 and opt > 0 for step, opt in times.values())
    assert torch.equal(model.weight, before)  # the caller's model is not trained
    with pytest.raises(ValueError, match="variants is empty"):
        compiling.time_adam(model, torch.randn(8, 3), torch.randn(8, 1), {})


def test_profiled_phases_wrap_the_one_training_step(monkeypatch):
    """profile_steps trains through gpulab.step.train_step, handing it the phase labels."""
    from gpulab import step

    seen = []
    real = step.train_step

    def spy(*args, **kwargs):
        seen.append(kwargs.get("phases") is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(profiling, "train_step", spy)
    model = torch.nn.Linear(3, 1)
    data = [(torch.randn(4, 3), torch.randn(4, 1))]
    profiling.profile_steps(model, torch.optim.SGD(model.parameters(), lr=0.1), data, steps=2)
    assert seen and all(seen)
