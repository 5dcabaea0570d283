"""Who chooses the device: a library function runs where the model it is given lives.

The first GPU run crashed notebooks 05 and 08: ``fit`` picked "auto" (a GPU) for a model built on the CPU
and moved only the data. Every test here runs with CUDA *reported* available (the ``cuda_reported``
fixture), so on this CPU-only machine a function that picks "auto" behind the caller's back fails as it
did on the GPU. A ``device`` given as well is a check: one that disagrees is a one-line error.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch import nn

from gpulab import devices
from gpulab.profiling import compile_timing as compiling
from gpulab.profiling import steps as profiling
from gpulab.article import article_loader, train_article
from gpulab.experiment import Recipe, optimizer_for, setup
from gpulab.train import fit

ROOT = Path(__file__).resolve().parents[1]
SMALL = Recipe(epochs=2)


def _cpu_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(13, 8), nn.ReLU(), nn.Linear(8, 1))


def _data(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 13, generator=g), torch.randn(n, 1, generator=g)


def _on_cpu(model: nn.Module) -> bool:
    return all(p.device.type == "cpu" for p in model.parameters())


def test_the_fixture_really_reports_cuda(cuda_reported):
    assert torch.cuda.is_available() and devices.pick_device("auto").type == "cuda"


def test_fit_trains_where_the_model_is(cuda_reported):
    model = _cpu_model()
    history = fit(model, _data(), epochs=2, batch_size=16, progress=False)
    assert history.device == "cpu" and _on_cpu(model) and len(history.loss) == 2


def test_setup_fit_and_train_article_train_where_the_model_is(cuda_reported):
    run = setup(SMALL)
    assert run.fit(progress=False).device == "cpu" and _on_cpu(run.model)
    model = _cpu_model()
    loader = article_loader(*_data(), batch_size=16)
    assert train_article(model, loader, epochs=1).device == "cpu" and _on_cpu(model)


def test_profile_and_adam_timing_run_where_the_model_is(cuda_reported):
    model = _cpu_model()
    loader = article_loader(*_data(), batch_size=16)
    result = profiling.profile_steps(model, optimizer_for(model, SMALL), loader, steps=1)
    assert result.steps == 1 and _on_cpu(model)
    times = compiling.time_adam(_cpu_model(), *_data(16), {"default": {}}, min_run_time=0.01)
    assert set(times) == {"default"}


@pytest.mark.parametrize("call", [
    lambda m: fit(m, _data(), epochs=1, device="cuda", progress=False),
    lambda m: fit(m, _data(), epochs=1, device="auto", progress=False),
    lambda m: train_article(m, article_loader(*_data()), epochs=1, device="cuda:0"),
    lambda m: profiling.profile_steps(m, optimizer_for(m, SMALL), article_loader(*_data()), device="cuda"),
    lambda m: compiling.measure_compile(m, *_data(8), device="cuda"),
    lambda m: compiling.time_adam(m, *_data(8), {"default": {}}, device="cuda"),
], ids=["fit", "fit-auto", "train_article", "profile_steps", "measure_compile", "time_adam"])
def test_a_device_that_disagrees_with_the_model_is_a_one_line_error(cuda_reported, call):
    model = _cpu_model()
    with pytest.raises(ValueError) as info:
        call(model)
    message = str(info.value)
    assert "\n" not in message and "cuda:0" in message and "on cpu" in message and "model.to(" in message
    assert _on_cpu(model)  # nothing was moved


def test_a_device_that_agrees_is_accepted():
    assert devices.model_device(_cpu_model(), "cpu") == torch.device("cpu")
    assert devices.model_device(_cpu_model()) == torch.device("cpu")
    assert devices.model_device(nn.ReLU()) == torch.device("cpu")  # no weights: the CPU
    assert devices.model_device(_cpu_model().to("meta"), "meta") == torch.device("meta")


def test_a_half_moved_model_is_refused_naming_both_devices():
    model = _cpu_model()
    model[2].to("meta")
    with pytest.raises(ValueError, match=r"several devices \(cpu, meta\)"):
        fit(model, _data(), epochs=1, progress=False)


def test_the_data_follows_a_model_on_another_device():
    model = _cpu_model().to("meta")
    with pytest.raises(ValueError, match="'cpu' is cpu but the model's weights are on meta"):
        fit(model, _data(), epochs=1, device="cpu", progress=False)


@pytest.mark.parametrize("a, b, same", [("mps", "mps:0", True), ("cuda", "cuda:0", True), ("cuda:0", "cuda:1", False),
                                        ("cpu", "meta", False)])
def test_same_device_treats_no_index_as_zero(a, b, same):
    assert devices.same_device(a, b) is same


# Only the course's entry points choose a device: notebooks, and the course's tooling (the command line and the
# environment report, in gpulab/course/).
CHOOSERS = {"devices.py"}


def _library_files() -> list[Path]:
    pkg = ROOT / "gpulab"
    return [p for p in sorted(pkg.rglob("*.py")) if "course" not in p.relative_to(pkg).parts and p.name not in CHOOSERS]


def test_no_library_function_chooses_auto_for_its_caller():
    found = []
    for path in _library_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                defaults = [None] * (len(node.args.posonlyargs + node.args.args) - len(node.args.defaults))
                defaults += node.args.defaults + node.args.kw_defaults
                for arg, default in zip(args, defaults):
                    if "device" in arg.arg and isinstance(default, ast.Constant) and default.value == "auto":
                        found.append(f"{path.name}:{node.lineno} {node.name}({arg.arg}='auto')")
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "pick_device"
                    and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "auto"):
                found.append(f"{path.name}:{node.lineno} pick_device('auto')")
    assert not found, "library code chooses the device; take it from the model or the caller: " + "; ".join(found)
