"""Notebooks 07-08's figures: the moments of a step's memory, FSDP2's states read from a schedule, bad input."""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

from gpulab.distributed.fsdp.driver import schedule  # noqa: E402
from gpulab.figures import has_title  # noqa: E402
from gpulab.figures.memory import number_ranges, step_memory, step_moments, zero_stages  # noqa: E402
from gpulab.figures.sharding import fsdp_grid, fsdp_slider, fsdp_states, fsdp_step  # noqa: E402
from gpulab.precision import dtype_table  # noqa: E402

# FSDP's event names of one step of Net1 over 2 ranks, each layer its own unit (as notebook 08's launch records them)
NET1_STEP = [
    "FSDP::root_pre_forward", "FSDP::pre_forward (layer1)", "FSDP::all_gather (layer1)", "FSDP::post_forward (layer1)",
    "FSDP::pre_forward (layer2)", "FSDP::all_gather (layer2)", "FSDP::post_forward (layer2)",
    "FSDP::pre_forward (layer3)", "FSDP::all_gather (layer3)", "FSDP::post_forward (layer3)",
    "FSDP::pre_backward (layer3)", "FSDP::all_gather (layer3)", "FSDP::backward_prefetch for layer2",
    "FSDP::all_gather (layer2)", "FSDP::post_backward_reduce (layer3)", "FSDP::pre_backward (layer2)",
    "FSDP::backward_prefetch for layer1", "FSDP::all_gather (layer1)", "FSDP::post_backward_reduce (layer2)",
    "FSDP::pre_backward (layer1)", "FSDP::post_backward_reduce (layer1)"]


def test_states_follow_gather_free_prefetch_and_reduce_scatter():
    states = fsdp_states(schedule(NET1_STEP))
    assert [s["weights"]["layer1"] for s in states] == [
        "gathered", "shard", "shard", "shard", "shard", "shard", "prefetched", "prefetched", "shard"]
    assert [s["weights"]["layer2"] for s in states] == [
        "shard", "gathered", "shard", "shard", "prefetched", "prefetched", "gathered", "shard", "shard"]
    assert states[3]["actions"] == {"layer3": ["free-forward", "gather-backward"]}
    assert [u for s in states for u, a in s["actions"].items() if "prefetch" in a] == ["layer2", "layer1"]
    assert [s["running"] for s in states] == ["layer1", "layer2", "layer3", "layer3", "layer3", None, "layer2",
                                              None, None]
    assert [sorted(u for u, g in s["grads"].items() if g == "shard") for s in states][-4:] == [
        ["layer3"], ["layer3"], ["layer2", "layer3"], ["layer1", "layer2", "layer3"]]


def test_units_kept_after_forward_are_not_freed_until_their_reduce_scatter():
    kept = [{"op": "all-gather", "unit": u, "phase": "forward"} for u in ("a", "b")] + [
        {"op": "reduce-scatter", "unit": u, "phase": "backward"} for u in ("b", "a")]
    states = fsdp_states(kept)
    assert states[1]["weights"] == {"a": "gathered", "b": "gathered"}  # not gathered again: never freed
    assert states[2]["weights"] == {"a": "gathered", "b": "shard"}
    assert not any("free-forward" in a or "prefetch" in a for s in states for a in s["actions"].values())


def test_states_refuse_a_reduce_scatter_in_forward():
    with pytest.raises(ValueError, match="unexpected step"):
        fsdp_states([{"op": "reduce-scatter", "unit": "a", "phase": "forward"}])


def test_step_pictures_check_their_input():
    states = fsdp_states(schedule(NET1_STEP))
    assert has_title(fsdp_step(states, 4, 2)) and has_title(fsdp_grid(states))
    with pytest.raises(ValueError, match="index=9"):
        fsdp_step(states, 9, 2)
    with pytest.raises(ValueError, match="empty"):
        fsdp_grid([])
    slider = fsdp_slider(states, 2)
    assert slider.children[0].max == len(states)


def test_moments_are_found_in_the_data():
    series = {"parameters": [4, 4, 4, 4, 4, 4], "saved activations": [0, 2, 3, 1, 0, 0],
              "gradients": [0, 0, 1, 4, 4, 4], "optimizer state": [0, 0, 0, 0, 8, 8], "temporaries": [0, 0, 0, 0, 5, 0]}
    assert step_moments(series) == {"start": 0, "most activations saved": 2, "every gradient made": 3,
                                    "peak of the step": 4, "end": 5}
    assert has_title(step_memory(series, "a step"))
    with pytest.raises(ValueError, match="gradients"):
        step_moments({"saved activations": [1]})
    with pytest.raises(ValueError, match="one value per memory event"):
        step_moments({"saved activations": [1, 2], "gradients": [1]})


def test_number_ranges_and_zero_stages_check_their_input():
    assert has_title(number_ranges(dtype_table(), [(1e-8, "a gradient")], scaled=(1e-8, 6.5e-4, 65536.0)))
    with pytest.raises(ValueError, match="lo="):
        number_ranges(dtype_table(), lo=1.0, hi=0.5)
    with pytest.raises(ValueError, match="ranks=1"):
        zero_stages(1)
