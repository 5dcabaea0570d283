"""Checks for notebook 06 (the Boston case study)."""

from __future__ import annotations

import numpy as np
import torch

from gpulab.exercises import Feedback, Question, correct, wrong
from gpulab.exercises import Option as O


def _array(value, name: str) -> np.ndarray | Feedback:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().double().numpy()
    if isinstance(value, np.ndarray):
        return value.astype(np.float64)
    return wrong(f"{name} should be a tensor or a NumPy array, got {type(value).__name__}")


def check_test_scaling(X_train_raw, X_test_raw, X_test_scaled) -> Feedback:
    """Check that the test part was standardised with the TRAINING part's mean and std.

    Using the test part's own statistics is the classic leak: it is recognised and named.
    Both the population std and the sample std (``torch.std``'s default) are accepted.
    """
    arrays = [_array(v, n) for v, n in ((X_train_raw, "X_train_raw"), (X_test_raw, "X_test_raw"),
                                        (X_test_scaled, "X_test_scaled"))]
    for a in arrays:
        if isinstance(a, Feedback):
            return a
    train, test, scaled = arrays
    if scaled.shape != test.shape:
        return wrong(f"X_test_scaled has shape {scaled.shape}, expected {test.shape} (same as X_test_raw)")
    if not np.isfinite(scaled).all():
        return wrong("X_test_scaled contains NaN or infinity: did a std come out as 0?")

    def close(expected: np.ndarray) -> bool:
        return bool(np.allclose(scaled, expected, rtol=1e-4, atol=1e-4))

    if close(test):
        return wrong("X_test_scaled is still the raw data: subtract the mean and divide by the std")
    for ddof in (0, 1):
        if close((test - test.mean(0)) / test.std(0, ddof=ddof)):
            return wrong("you used the TEST part's own mean and std: that lets test information leak "
                         "into the model; use the training part's statistics")
        if close((test - train.mean(0)) / train.std(0, ddof=ddof)):
            return correct("the test part is scaled with the training part's mean and std, exactly as "
                           "gpulab.boston.split does; its mean is not exactly 0, and that is fine")
    if close(test - train.mean(0)):
        return wrong("you subtracted the training mean but did not divide by the training std")
    return wrong("not the expected values: compute mean and std over the rows of X_train_raw (dim 0), "
                 "then (X_test_raw - mean) / std")



QUESTIONS_06: tuple[Question, ...] = (
    Question("Which mean and std should scale the TEST features?", (
        O("The training rows' mean and std.", "the test rows stand for future data, which the model cannot see"),
        O("The test rows' own mean and std.", "no: that lets information from the test rows leak into the inputs"),
        O("The mean and std of all the rows.", "no: the test rows would still shape the scaling, a smaller leak"),
    ), answer="a"),
    Question("Two models' test RMSE on one 80/20 split of the 506 rows differ a little. What should come before "
             "calling one better?", (
        O("Nothing: the lower RMSE wins.", "no: on so few rows one split is noisy; the same model's RMSE moves "
                                           "from split to split"),
        O("Repeat over several splits, all models on the same rows, and compare them split by split (paired).",
          "then a difference can be told apart from the noise of one split, or shown not to be"),
        O("Train for more epochs.", "no: more training does not remove the noise of one split"),
    ), answer="b"),
    Question("Why did scikit-learn remove `load_boston`?", (
        O("Its `B` column encodes a racist assumption, and the study behind the data was weak.",
          "which is why the case study measures the models with and without B"),
        O("The file became too large to ship.", "no: it has 506 rows; this project ships it inside the package"),
        O("Neural networks cannot learn from it.", "no: several models learn from it here; the problem is what it "
                                                   "encodes"),
    ), answer="a"),
)
