"""Paired comparison on identical splits: cases whose answer is known by construction."""

import math
import random

import pytest

from gpulab.evaluation import Score
from gpulab.paired_comparison import compare, compare_features, compare_models, format_paired, paired, sign_test

# Student's t 97.5 % quantile with 2 degrees of freedom (printed in every t table): 4.303.
T_975_DF2 = 4.302652729911275


def test_shared_luck_hides_a_consistent_difference_that_pairing_finds():
    # B is worse than A by exactly 0.3 on every split, but the splits differ far more than that:
    # the two means ± std overlap completely, the paired differences do not move at all.
    a = [2.0, 3.0, 4.0, 5.0, 6.0]
    b = [x + 0.3 for x in a]
    r = paired(a, b, "A", "B")
    assert r.mean == pytest.approx(-0.3) and r.std == pytest.approx(0.0, abs=1e-12)
    assert (r.low, r.high) == (pytest.approx(-0.3), pytest.approx(-0.3))
    assert (r.a_wins, r.b_wins, r.ties) == (5, 0, 0)
    assert r.sign_p == pytest.approx(2 / 2**5)
    assert r.verdict().startswith("A has the lower RMSE")


def test_interval_is_the_paired_t_interval():
    r = paired([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    half = T_975_DF2 * 1.0 / math.sqrt(3)  # mean 2, std 1, 3 splits
    assert (r.mean, r.std) == (pytest.approx(2.0), pytest.approx(1.0))
    assert (r.low, r.high) == (pytest.approx(2 - half), pytest.approx(2 + half))
    assert r.verdict().startswith("no difference shown")  # 2 - 2.48 < 0
    assert not r.corrected


def test_overlapping_splits_widen_the_interval():
    plain = paired([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    corrected = paired([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], test_train_ratio=0.25)
    half = T_975_DF2 * math.sqrt(1 / 3 + 0.25) * 1.0
    assert corrected.high - corrected.mean == pytest.approx(half)
    assert corrected.high - corrected.low > plain.high - plain.low
    assert corrected.corrected and corrected.mean == plain.mean


def test_no_difference_when_wins_are_even():
    r = paired([1.0, 3.0, 1.0, 3.0], [2.0, 2.0, 2.0, 2.0])
    assert r.mean == pytest.approx(0.0) and r.low < 0 < r.high
    assert (r.a_wins, r.b_wins) == (2, 2) and r.sign_p == 1.0
    assert r.verdict().startswith("no difference shown")


def test_ties_count_for_neither():
    r = paired([1.0, 2.0, 3.0], [1.0, 2.0, 3.5])
    assert (r.a_wins, r.b_wins, r.ties) == (1, 0, 2)


def test_b_better_verdict_and_text():
    r = paired([3.1, 4.2, 5.3, 6.1, 7.4], [3.0, 4.0, 5.0, 6.0, 7.0], "article MLP", "GradientBoosting")
    assert r.low > 0 and r.verdict().startswith("GradientBoosting has the lower RMSE")
    text = str(r)
    assert "article MLP - GradientBoosting" in text and "wins 0-5" in text and "5 splits" in text


def test_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = random.Random(0)
    trials, hits = 2000, 0
    for _ in range(trials):
        diffs = [rng.gauss(0.3, 1.0) for _ in range(5)]
        r = paired(diffs, [0.0] * 5)
        hits += r.low <= 0.3 <= r.high
    assert 0.93 <= hits / trials <= 0.97  # a normal quantile (1.96) instead of t's would give ~0.88


def test_one_split_gives_no_interval():
    r = paired([1.0], [2.0])
    assert math.isnan(r.low) and math.isnan(r.std) and r.verdict().startswith("one split")
    assert r.to_dict()["low"] is None


@pytest.mark.parametrize("wins,losses,p", [
    (5, 0, 2 / 32), (0, 5, 2 / 32), (4, 1, 2 * 6 / 32), (3, 3, 1.0), (0, 0, 1.0), (10, 0, 2 / 1024),
])
def test_sign_test(wins, losses, p):
    assert sign_test(wins, losses) == pytest.approx(p)


@pytest.mark.parametrize("a,b,kwargs,word", [
    ([1.0, 2.0], [1.0], {}, "same, non-zero number"),
    ([], [], {}, "same, non-zero number"),
    ([1.0, math.nan], [1.0, 2.0], {}, "finite"),
    ([1.0, 2.0], [1.0, 2.0], {"confidence": 1.5}, "confidence"),
    ([1.0, 2.0], [1.0, 2.0], {"test_train_ratio": -1}, "test_train_ratio"),
])
def test_bad_inputs_are_named(a, b, kwargs, word):
    with pytest.raises(ValueError, match=word):
        paired(a, b, **kwargs)


def test_sign_test_rejects_negative_counts():
    with pytest.raises(ValueError, match="wins"):
        sign_test(-1, 2)


def _score(model, rmse, features="with B", seeds=None, ratio=0.25):
    mean = sum(rmse) / len(rmse)
    return Score(model, features, mean, 0.0, 0.8, 0.1, "cpu", tuple(rmse),
                 tuple(range(len(rmse))) if seeds is None else seeds, ratio)


def test_compare_pairs_scores_split_by_split():
    mlp = _score("article MLP", [3.5, 3.0, 2.6, 2.9, 3.5])
    gb = _score("GradientBoosting", [3.4, 2.8, 2.5, 2.7, 3.2])
    r = compare(mlp, gb)
    assert (r.a, r.b) == ("article MLP", "GradientBoosting") and r.corrected
    assert r.differences == pytest.approx((0.1, 0.2, 0.1, 0.2, 0.3))
    assert compare(mlp, gb, corrected=False).high - compare(mlp, gb, corrected=False).low < r.high - r.low


def test_compare_refuses_different_splits_and_missing_ratio():
    with pytest.raises(ValueError, match="same splits"):
        compare(_score("A", [1.0, 2.0]), _score("B", [1.0, 2.0], seeds=(5, 6)))
    with pytest.raises(ValueError, match="ratio"):
        compare(_score("A", [1.0, 2.0], ratio=None), _score("B", [1.0, 2.0], ratio=None))
    assert compare(_score("A", [1.0, 2.0], ratio=None), _score("B", [1.5, 2.0], ratio=None), corrected=False)


def test_compare_models_and_features():
    with_b = [_score("article MLP", [3.0, 3.2, 3.1]), _score("GradientBoosting", [2.9, 3.0, 3.0])]
    without_b = [_score(s.model, [v + 0.1 for v in s.rmse], "without B") for s in with_b]
    models = compare_models(with_b)
    assert [(r.a, r.b) for r in models] == [("article MLP", "GradientBoosting")]
    features = compare_features(with_b, without_b)
    assert [(r.a, r.b) for r in features] == [
        ("article MLP without B", "article MLP with B"), ("GradientBoosting without B", "GradientBoosting with B")
    ]
    assert all(r.mean == pytest.approx(0.1) and r.b_wins == 3 for r in features)
    with pytest.raises(ValueError, match="no score for 'RandomForest'"):
        compare_models(with_b, reference="RandomForest")
    table = format_paired(models + features).splitlines()
    assert len(table) == 4 and "95% interval" in table[0] and "article MLP - GradientBoosting" in table[1]
