"""The crossover measurement's pieces that need no torchrun (notebook 07 runs the real thing)."""

import argparse

import pytest
import torch

from gpulab import crossover


def test_synthetic_data_is_seeded_and_shaped():
    X1, y1 = crossover.synthetic_data(0)
    X2, y2 = crossover.synthetic_data(0)
    assert X1.shape == (crossover.SYNTHETIC["rows"], crossover.SYNTHETIC["features"])
    assert y1.shape == (crossover.SYNTHETIC["rows"], 1)
    assert torch.equal(X1, X2) and torch.equal(y1, y2)
    assert not torch.equal(X1, crossover.synthetic_data(1)[0])


def test_train_problem_rejects_unknown_problem():
    with pytest.raises(ValueError, match="unknown problem 'mnist'"):
        crossover.train_problem("mnist", epochs=2)


def test_train_problem_boston_gives_epoch_times_and_weights():
    seconds, state = crossover.train_problem("boston", epochs=2)
    assert len(seconds) == 2 and all(s > 0 for s in seconds)
    assert set(state) == {"layer1.0.weight", "layer1.0.bias", "layer2.0.weight", "layer2.0.bias",
                          "layer3.0.weight", "layer3.0.bias"}


@pytest.mark.parametrize("text", ["", "0,1", "a,b", "-2"])
def test_parse_ranks_rejects_bad_text(text):
    with pytest.raises(argparse.ArgumentTypeError):
        crossover.parse_ranks(text)


def test_parse_ranks_sorts_and_dedups():
    assert crossover.parse_ranks("3,1,3") == [1, 3]


def test_format_table_lists_every_row():
    report = {"rows": [
        {"problem": "boston", "ranks": 2, "how": "ddp", "median_epoch_s": 0.004, "baseline_epoch_s": 0.002, "speedup": 0.5},
        {"problem": "boston", "ranks": 1, "how": "plain", "median_epoch_s": 0.002, "baseline_epoch_s": 0.002, "speedup": 1.0},
    ]}
    lines = crossover.format_table(report).splitlines()
    assert len(lines) == 3
    assert lines[1].split()[:3] == ["boston", "1", "plain"] and lines[2].endswith("0.50x")


@pytest.mark.parametrize("kwargs, match", [
    ({"ranks": [], "boston_epochs": 2, "synthetic_epochs": 2}, "ranks="),
    ({"ranks": [0, 2], "boston_epochs": 2, "synthetic_epochs": 2}, "ranks="),
    ({"ranks": [2], "boston_epochs": 0, "synthetic_epochs": 2}, "boston_epochs=0"),
    ({"ranks": [2], "boston_epochs": 2, "synthetic_epochs": -1}, "synthetic_epochs=-1"),
])
def test_measure_rejects_bad_arguments_before_launching(kwargs, match):
    with pytest.raises(ValueError, match=match):
        crossover.measure(**kwargs)


@pytest.mark.slow
def test_one_launch_measures_every_rank_count(monkeypatch):
    from gpulab.distributed import torchrun

    launches = []
    real_launch = torchrun.launch

    def counting_launch(*args, **kwargs):
        launches.append(kwargs["nproc"])
        return real_launch(*args, **kwargs)

    monkeypatch.setattr(torchrun, "launch", counting_launch)
    report = crossover.measure(ranks=[1, 2], boston_epochs=3, synthetic_epochs=0, timeout=120, log=lambda s: None)
    assert launches == [2]  # one torchrun for both rank counts
    got = sorted((r["problem"], r["ranks"], r["how"]) for r in report["rows"])
    assert got == [("boston", 1, "ddp"), ("boston", 1, "plain"), ("boston", 2, "ddp")]  # synthetic_epochs=0: Boston only
    assert set(report["boston_weight_difference"]) == {"1", "2"}
    assert all(d <= 1e-5 for d in report["boston_weight_difference"].values())  # each group trained the same model
    assert all(r["median_epoch_s"] > 0 and r["speedup"] > 0 for r in report["rows"])
