"""The packaged Boston data: checksum, columns, the no-B option, seeded and leak-free splits."""

import numpy as np
import pytest
import torch

from gpulab import boston
from gpulab.boston import FEATURES, SHA256, carve_validation, csv_path, describe, head, load_boston, split


def test_loader_returns_506_rows_13_features_and_medv():
    data = load_boston()
    assert data.X.shape == (506, 13)
    assert data.y.shape == (506,)
    assert data.feature_names == FEATURES
    assert not np.isnan(data.X).any() and not np.isnan(data.y).any()
    assert 5.0 <= data.y.min() and data.y.max() <= 50.0  # MEDV in $1000s, capped at 50


def test_packaged_csv_header_matches_names():
    lines = csv_path().read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("506,13")
    assert [c.strip('"') for c in lines[1].split(",")] == list(FEATURES) + ["MEDV"]


def test_modified_copy_fails_checksum_with_one_line_naming_file_and_hash(tmp_path):
    copy = tmp_path / "boston_copy.csv"
    raw = csv_path().read_bytes()
    copy.write_bytes(raw.replace(b"24,", b"25,", 1))
    with pytest.raises(ValueError) as info:
        load_boston(path=copy)
    message = str(info.value)
    assert "\n" not in message
    assert str(copy) in message and SHA256 in message


def test_unmodified_copy_loads(tmp_path):
    copy = tmp_path / "same.csv"
    copy.write_bytes(csv_path().read_bytes())
    assert load_boston(path=copy).X.shape == (506, 13)


def test_drop_b_removes_exactly_b():
    full, no_b = load_boston(), load_boston(drop_b=True)
    assert no_b.X.shape == (506, 12)
    assert no_b.feature_names == tuple(n for n in FEATURES if n != "B")
    b = FEATURES.index("B")
    np.testing.assert_array_equal(no_b.X, np.delete(full.X, b, axis=1))
    np.testing.assert_array_equal(no_b.y, full.y)


def test_split_is_seeded():
    data = load_boston()
    a, b, c = split(data, seed=1), split(data, seed=1), split(data, seed=2)
    assert torch.equal(a.X_test, b.X_test) and torch.equal(a.y_train, b.y_train)
    assert not torch.equal(a.y_test, c.y_test)
    assert len(a.X_train) == 404 and len(a.X_test) == 102
    assert a.y_train.shape == (404, 1)


def test_scaling_fitted_on_training_part_only():
    data = load_boston()
    s = split(data, seed=3)
    assert s.X_train.dtype == torch.float32 and s.y_test.dtype == torch.float32
    assert torch.allclose(s.X_train.mean(0), torch.zeros(13), atol=1e-5)
    assert torch.allclose(s.X_train.std(0, unbiased=False), torch.ones(13), atol=1e-4)
    assert s.X_test.mean(0).abs().max() > 1e-3  # the test part is not forced to mean 0
    raw = split(data, seed=3, scale=False)
    np.testing.assert_allclose(s.mean, raw.X_train.double().mean(0).numpy(), rtol=1e-6)
    np.testing.assert_allclose(s.X_test.numpy(), ((raw.X_test.double().numpy() - s.mean) / s.std), atol=1e-4)


def test_unscaled_split_keeps_raw_values():
    data = load_boston()
    raw = split(data, seed=0, scale=False)
    rows = {tuple(np.float32(r)) for r in data.X}
    assert tuple(raw.X_train[0].numpy()) in rows


def test_tensors_are_float32_before_moving_to_device(monkeypatch):
    """MPS has no float64: the cast must happen before ``.to(device)``."""
    seen = []
    original = torch.Tensor.to

    def spy(self, *args, **kwargs):
        seen.append(self.dtype)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", spy)
    s = split(load_boston(), device="cpu")
    assert seen and all(d == torch.float32 for d in seen)
    assert s.X_train.device.type == "cpu"


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5])
def test_bad_test_size_rejected(bad):
    with pytest.raises(ValueError, match="test_size"):
        split(load_boston(), test_size=bad)


def test_carve_validation_is_seeded_and_disjoint():
    s = split(load_boston(), seed=0)
    X_fit, y_fit, X_val, y_val = carve_validation(s.X_train, s.y_train, 0.25, seed=5)
    assert len(X_val) == 101 and len(X_fit) == 303 and len(y_fit) == 303 and len(y_val) == 101
    rows = {tuple(r.tolist()) for r in X_fit}
    assert not any(tuple(r.tolist()) in rows for r in X_val)
    again = carve_validation(s.X_train, s.y_train, 0.25, seed=5)
    other = carve_validation(s.X_train, s.y_train, 0.25, seed=6)
    assert torch.equal(again[2], X_val) and not torch.equal(other[2], X_val)


@pytest.mark.parametrize("bad", [0, 1, -1, 2.0])
def test_carve_validation_rejects_bad_fraction(bad):
    s = split(load_boston())
    with pytest.raises(ValueError, match="fraction"):
        carve_validation(s.X_train, s.y_train, bad)


def test_carve_validation_rejects_mismatched_rows():
    with pytest.raises(ValueError, match="rows"):
        carve_validation(torch.zeros(10, 2), torch.zeros(9, 1))


def test_head_and_describe_tables():
    data = load_boston(drop_b=True)
    table = head(data, 3).splitlines()
    assert len(table) == 4 and "B" not in table[0].split() and table[0].split()[-1] == "MEDV"
    stats = describe(data).splitlines()
    assert len(stats) == 1 + 13
    medv = stats[-1].split()
    assert medv[0] == "MEDV" and medv[1] == "506"
    assert float(medv[2]) == pytest.approx(data.y.mean(), abs=0.01)
    assert boston.TARGET == "MEDV"
