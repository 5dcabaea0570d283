"""gpulab.profiling (the four phases of a step under torch.profiler) and gpulab.compiling (can compile work here)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import matplotlib
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gpulab import compiling, doctor, profiling  # noqa: E402
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


def test_the_table_and_the_trace_file(profiled):
    table = profiled.table(15)
    assert "aten::addmm" in table and "phase/backward" in table
    data = json.loads(profiled.trace_path.read_text())
    names = {e.get("name") for e in data["traceEvents"]}
    assert {f"phase/{p}" for p in profiling.PHASES} <= names


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
    with pytest.raises(ValueError, match="steps=0 must be an integer >= 1"):
        profiling.profile_steps(model, opt, [(torch.ones(1, 2), torch.ones(1, 1))], steps=0)
    with pytest.raises(ValueError, match="the loader gave no batch"):
        profiling.profile_steps(model, opt, [], steps=1)


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
    t = compiling.CompileTiming(first_step_s=20.0, eager_step_s=0.002, compiled_step_s=0.001)
    assert t.speedup == 2.0 and t.to_dict()["speedup"] == 2.0


def test_training_step_updates_the_weights_and_clears_gradients():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    compiling.training_step(model, opt, torch.randn(8, 3), torch.randn(8, 1))
    assert not torch.equal(before, model.weight) and model.weight.grad is None
