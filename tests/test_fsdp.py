"""FSDP2 (fully_shard over a CPU mesh, gloo) through torchrun equals single-process training; shards follow torch.chunk."""

from __future__ import annotations

import pytest
import torch

import math

from gpulab.distributed.fsdp import schedule, train_fsdp
from gpulab.estimate import estimate
from gpulab.experiment import Recipe, article_model, boston_data, optimizer_for
from gpulab.train import fit, max_abs_difference

RECIPE = Recipe(epochs=5)


@pytest.fixture(scope="module")
def reference() -> dict[str, torch.Tensor]:
    data = boston_data(RECIPE)
    model = article_model(RECIPE)
    fit(model, (data.X_train, data.y_train), epochs=RECIPE.epochs, optimizer=optimizer_for(model, RECIPE),
        batch_size=RECIPE.batch_size, seed=RECIPE.seed, progress=False)
    return model.state_dict()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:3 ranks on:UserWarning")
@pytest.mark.parametrize("nproc", [2, 3])
def test_fully_shard_equals_single_process_and_shards_follow_chunk(nproc, reference):
    layered = nproc == 3  # 2 ranks: the whole model one unit; 3 ranks: each layer its own unit, profiled
    result = train_fsdp(nproc, RECIPE, timeout=120, per_layer=layered, profile=layered)
    assert max_abs_difference(result.state_dict, reference) <= 1e-5
    assert max_abs_difference(result.state_dict, article_model(RECIPE).state_dict()) > 1e-3  # it trained
    full = {k: tuple(v.shape) for k, v in reference.items()}
    for r, report in enumerate(result.ranks):
        for name, shape in report["shapes"].items():
            pieces = torch.chunk(torch.empty(full[name]), nproc, dim=0)
            want = tuple(pieces[r].shape) if r < len(pieces) else (0, *full[name][1:])
            assert tuple(shape) == want, (r, name, shape, want)
    model = article_model(RECIPE)
    est = estimate(model, "fp32", "adam", "zero3", ranks=nproc).components
    rank0 = result.ranks[0]["bytes"]
    assert rank0 == {k: est[k] for k in ("parameters", "gradients", "optimizer state")}
    whole = sum(p.numel() for p in model.parameters()) * 4
    assert sum(r["bytes"]["parameters"] for r in result.ranks) == whole
    if layered:
        assert_collectives_per_step(result.ranks)


def assert_collectives_per_step(ranks):
    """Per step: each of Net1's 3 layers gathered for forward and again for backward, its gradients reduce-scattered."""
    steps = RECIPE.epochs * math.ceil(len(boston_data(RECIPE).X_train) / RECIPE.batch_size)
    for report in ranks:
        profile = report["profile"]
        assert profile["steps"] == steps
        assert profile["collectives"] == {"c10d::_allgather_base_": 6 * steps, "c10d::_reduce_scatter_base_": 3 * steps,
                                          "c10d::allreduce_": RECIPE.epochs}  # fit's loss, once per epoch
        first = schedule(profile["first step"])
        forward = [s["unit"] for s in first if s["phase"] == "forward"]
        assert forward == ["layer1", "layer2", "layer3"] and all(s["op"] == "all-gather" for s in first[:3])
        backward = [(s["op"], s["unit"]) for s in first if s["phase"] == "backward"]
        assert sorted(backward) == sorted([("all-gather", u) for u in forward] + [("reduce-scatter", u) for u in forward])
        # a layer's gradients are reduce-scattered only after its weights were gathered for backward
        assert all(backward.index(("all-gather", u)) < backward.index(("reduce-scatter", u)) for u in forward)


def test_schedule_reads_fsdp_event_names():
    names = ["FSDP::root_pre_forward", "FSDP::pre_forward (a)", "FSDP::all_gather (a)", "FSDP::all_gather",
             "FSDP::post_forward (a)", "FSDP::pre_backward (a)", "FSDP::all_gather (a)",
             "FSDP::post_backward_reduce (a)", "FSDP::post_backward_reduce"]
    assert schedule(names) == [
        {"op": "all-gather", "unit": "a", "phase": "forward"}, {"op": "all-gather", "unit": "(root)", "phase": "forward"},
        {"op": "all-gather", "unit": "a", "phase": "backward"}, {"op": "reduce-scatter", "unit": "a", "phase": "backward"},
        {"op": "reduce-scatter", "unit": "(root)", "phase": "backward"}]
    assert schedule([]) == []


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:3 ranks on:UserWarning")
def test_dcp_checkpoint_saved_at_2_ranks_resumes_at_3_and_1(tmp_path, reference):
    train_fsdp(2, Recipe(epochs=2), timeout=120, save_dcp=tmp_path / "dcp")
    for nproc in (3, 1):
        resumed = train_fsdp(nproc, RECIPE, timeout=120, resume=tmp_path / "dcp")
        assert max_abs_difference(resumed.state_dict, reference) <= 1e-5, nproc
