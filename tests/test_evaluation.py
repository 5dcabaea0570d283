"""Repeated evaluation: same splits for every model, the improved MLP's mechanics, the table."""

import math

import pytest
import torch

from gpulab.boston import load_boston, split
from gpulab.evaluation import (
    MODELS, ImprovedConfig, Score, fit_and_predict, fit_improved, format_table, ratio,
    repeated_evaluation,
)
from gpulab.timing import using_threads
from gpulab.models import EnsembleMLP

TINY = ImprovedConfig(members=2, hidden=8, epochs=6, patience=2)


def test_ensemble_members_are_independent():
    torch.manual_seed(0)
    model = EnsembleMLP(5, 1, hidden=4, members=3, dropout=0.0)
    x = torch.randn(7, 5)
    out = model(x)
    assert out.shape == (3, 7, 1)
    out[1].sum().backward()
    grads = [w.grad for w in model.weights]
    assert all(g[1].abs().sum() > 0 for g in grads)
    assert all(torch.all(g[0] == 0) and torch.all(g[2] == 0) for g in grads)


def test_ensemble_members_start_different():
    model = EnsembleMLP(5, members=2)
    assert not torch.equal(model.weights[0][0], model.weights[0][1])


@pytest.mark.parametrize("kwargs", [{"members": 0}, {"hidden": -1}, {"layers": 1.5}, {"dropout": 1.0}])
def test_ensemble_rejects_bad_sizes(kwargs):
    with pytest.raises(ValueError):
        EnsembleMLP(5, **kwargs)


@pytest.mark.parametrize("kwargs", [{"members": 0}, {"epochs": -3}, {"lr": 0}, {"weight_decay": -1}, {"batch_size": True}])
def test_improved_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        ImprovedConfig(**kwargs)


def test_fit_improved_stops_early_and_keeps_best_weights():
    data = split(load_boston(), seed=0)
    config = ImprovedConfig(members=2, hidden=8, epochs=60, patience=1, lr=0.05)  # no patience: stops soon
    with using_threads(1):
        result = fit_improved(data, config, seed=0)
    assert len(result.val_rmse) < 60  # stopped early
    assert len(result.val_rmse) == result.best_epoch + 1 + config.patience
    best = min(result.val_rmse)
    assert result.val_rmse[result.best_epoch] == best
    # the weights kept are those of the best epoch: recompute its validation RMSE
    from gpulab.boston import carve_validation
    from gpulab.train import regression_metrics

    _, _, X_val, y_val = carve_validation(data.X_train, data.y_train, config.val_fraction, 0)
    assert regression_metrics(result.predict(X_val), y_val)["rmse"] == pytest.approx(best, rel=1e-5)


def test_fit_improved_is_reproducible_and_predicts_dollars():
    data = split(load_boston(), seed=1)
    with using_threads(1):
        a, b = fit_improved(data, TINY, seed=3), fit_improved(data, TINY, seed=3)
    pa, pb = a.predict(data.X_test), b.predict(data.X_test)
    assert pa.shape == (len(data.X_test), 1)
    assert torch.equal(pa, pb)
    assert 5 < pa.mean().item() < 50  # unscaled back to $1000s


def test_every_model_fits_and_predicts():
    data = split(load_boston(drop_b=True), seed=0)
    for name in MODELS:
        with using_threads(1):
            pred, seconds, device = fit_and_predict(name, data, 0, torch.device("cpu"), TINY, article_epochs=2)
        assert pred.reshape(-1).shape == (len(data.X_test),)
        assert seconds >= 0 and device == "cpu"


def test_unknown_model_rejected():
    data = split(load_boston())
    with pytest.raises(ValueError, match="not one of"):
        fit_and_predict("SVR", data, 0, torch.device("cpu"))


def test_repeated_evaluation_uses_the_same_splits_for_every_model():
    seen = []
    scores = repeated_evaluation(
        2, models=["LinearRegression", "article MLP"], article_epochs=2,
        on_result=lambda model, seed, rmse: seen.append((model, seed)),
    )
    assert seen == [("LinearRegression", 0), ("article MLP", 0), ("LinearRegression", 1), ("article MLP", 1)]
    linear = scores[0]
    assert linear.model == "LinearRegression" and linear.features == "with B" and len(linear.rmse) == 2
    # LinearRegression is deterministic: its RMSE on split seed s is reproducible by hand
    from sklearn.linear_model import LinearRegression

    for seed, rmse in enumerate(linear.rmse):
        part = split(load_boston(), seed=seed)
        fitted = LinearRegression().fit(part.X_train.numpy(), part.y_train.numpy().ravel())
        pred = torch.from_numpy(fitted.predict(part.X_test.numpy()))
        assert rmse == pytest.approx(((pred - part.y_test.reshape(-1).double()) ** 2).mean().sqrt().item(), rel=1e-6)
    assert linear.rmse_mean == pytest.approx(sum(linear.rmse) / 2)
    assert linear.seeds == scores[1].seeds == (0, 1)  # what gpulab.paired_comparison.compare checks before pairing
    part = split(load_boston(), seed=0)
    assert linear.test_train_ratio == pytest.approx(len(part.X_test) / len(part.X_train))
    assert linear.rmse_std > 0 and 0 < linear.r2_mean < 1


def test_repeated_evaluation_without_b_differs():
    with_b = repeated_evaluation(1, models=["LinearRegression"])[0]
    without = repeated_evaluation(1, drop_b=True, models=["LinearRegression"])[0]
    assert without.features == "without B" and without.rmse_std == 0.0
    assert with_b.rmse_mean != without.rmse_mean


@pytest.mark.parametrize("repeats", [0, -1, 1.5, True])
def test_repeated_evaluation_rejects_bad_repeats(repeats):
    with pytest.raises(ValueError, match="repeats"):
        repeated_evaluation(repeats, models=["LinearRegression"])


@pytest.mark.parametrize("models", [[], ["SVR"]])
def test_repeated_evaluation_rejects_bad_models(models):
    with pytest.raises(ValueError, match="models"):
        repeated_evaluation(1, models=models)


def test_using_threads_restores():
    before = torch.get_num_threads()
    with using_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def _score(model, mean):
    return Score(model, "with B", mean, 0.5, 0.8, 1.25, "cpu", (mean,))


def test_ratio_and_table():
    scores = [_score("improved MLP", 3.0), _score("GradientBoosting", 4.0)]
    assert ratio(scores) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="article MLP"):
        ratio(scores, model="article MLP")
    table = format_table(scores).splitlines()
    assert len(table) == 3 and "test RMSE" in table[0]
    assert "3.00 ± 0.50" in table[1] and "1.25" in table[1] and table[1].endswith("cpu")
    assert "cpu" not in format_table(scores, timing=False)
    assert math.isclose(scores[0].to_dict()["rmse_mean"], 3.0)
