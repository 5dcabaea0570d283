"""Checks for notebook 06 (the Boston case study)."""

from __future__ import annotations

import numpy as np
import torch

from gpulab.exercises import Feedback, correct, wrong


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
