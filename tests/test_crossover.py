"""The crossover measurement: its pieces without torchrun, and one real launch for two rank counts."""

import pytest
import torch

from gpulab.distributed.crossover import driver as crossover
from gpulab.distributed.crossover import worker as crossover_worker


def test_synthetic_data_is_seeded_and_shaped():
    X1, y1 = crossover_worker.synthetic_data(0)
    X2, y2 = crossover_worker.synthetic_data(0)
    assert X1.shape == (crossover_worker.SYNTHETIC["rows"], crossover_worker.SYNTHETIC["features"])
    assert y1.shape == (crossover_worker.SYNTHETIC["rows"], 1)
    assert torch.equal(X1, X2) and torch.equal(y1, y2)
    assert not torch.equal(X1, crossover_worker.synthetic_data(1)[0])


def test_train_problem_rejects_unknown_problem():
    with pytest.raises(ValueError, match="unknown problem 'mnist'"):
        crossover_worker.train_problem("mnist", epochs=2)


def test_train_problem_boston_gives_epoch_times_and_weights():
    seconds, state = crossover_worker.train_problem("boston", epochs=2)
    assert len(seconds) == 2 and all(s > 0 for s in seconds)
    assert set(state) == {"layer1.0.weight", "layer1.0.bias", "layer2.0.weight", "layer2.0.bias",
                          "layer3.0.weight", "layer3.0.bias"}


@pytest.mark.parametrize("argv", [["--ranks", "0,1"], ["--ranks", "a,b"], ["--boston-epochs", "1"]])
def test_the_benchmark_rejects_bad_options_before_launching(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        crossover.main(argv)
    assert stop.value.code == 2 and "error:" in capsys.readouterr().err


def test_the_worker_refuses_to_run_outside_torchrun(monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    assert crossover_worker.main(["--out", "x.json", "--worlds", "2", "--boston-epochs", "2",
                                  "--synthetic-epochs", "0"]) == 2
    assert "run me under torchrun" in capsys.readouterr().err


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
    ({"ranks": [0, 2], "boston_epochs": 2, "synthetic_epochs": 2}, "ranks=0"),
    ({"ranks": [2], "boston_epochs": 0, "synthetic_epochs": 2}, "boston_epochs=0"),
    ({"ranks": [2], "boston_epochs": 2, "synthetic_epochs": -1}, "synthetic_epochs=-1"),
])
def test_measure_rejects_bad_arguments_before_launching(kwargs, match):
    with pytest.raises(ValueError, match=match):
        crossover.measure(**kwargs)


@pytest.mark.slow
def test_one_launch_measures_every_rank_count(monkeypatch):
    from gpulab.distributed.launch import torchrun

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
