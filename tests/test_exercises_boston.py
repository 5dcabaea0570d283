"""The notebook 06 exercise check: right answers pass, each typical mistake is named."""

import numpy as np
import pytest
import torch

from gpulab.boston import load_boston, split
from gpulab.exercises.boston import check_test_scaling


@pytest.fixture(scope="module")
def raw():
    part = split(load_boston(), seed=0, scale=False)
    return part.X_train, part.X_test


def test_training_statistics_pass(raw):
    train, test = raw
    for std in (train.std(0), train.std(0, unbiased=False)):
        feedback = check_test_scaling(train, test, (test - train.mean(0)) / std)
        assert feedback.ok and str(feedback).startswith("Correct:")


def test_numpy_answer_passes_and_matches_split(raw):
    train, test = raw
    scaled = split(load_boston(), seed=0).X_test
    assert check_test_scaling(train.numpy(), test.numpy(), scaled.numpy()).ok


def test_test_statistics_are_a_leak(raw):
    train, test = raw
    feedback = check_test_scaling(train, test, (test - test.mean(0)) / test.std(0))
    assert not feedback.ok and "TEST" in feedback.message and str(feedback).startswith("Not yet:")


def test_unscaled_answer_named(raw):
    train, test = raw
    feedback = check_test_scaling(train, test, test.clone())
    assert not feedback.ok and "raw" in feedback.message


def test_mean_only_named(raw):
    train, test = raw
    assert "divide" in check_test_scaling(train, test, test - train.mean(0)).message


@pytest.mark.parametrize("bad", [None, [1, 2], "x"])
def test_wrong_type_is_feedback_not_crash(raw, bad):
    train, test = raw
    feedback = check_test_scaling(train, test, bad)
    assert not feedback.ok and "tensor" in feedback.message


def test_wrong_shape_and_nan(raw):
    train, test = raw
    assert "shape" in check_test_scaling(train, test, test[:, :5]).message
    nan = torch.full_like(test, float("nan"))
    assert "NaN" in check_test_scaling(train, test, nan).message


def test_other_wrong_values(raw):
    train, test = raw
    feedback = check_test_scaling(train, test, (test - train.mean(1, keepdim=True)[: len(test)]) / 2)
    assert not feedback.ok and "dim 0" in feedback.message
    assert not check_test_scaling(train, test, np.zeros(tuple(test.shape))).ok
