"""Paired comparison of two models evaluated on the same splits: per-split differences, not two means.

Two models trained and tested on the same K splits share each split's luck: an easy test part
lowers both RMSEs. Comparing "3.31 ± 0.74 vs 3.12 ± 0.69" mixes that shared luck into both
spreads and hides the question. Pairing asks it directly: on each split, how much lower is A's
RMSE than B's? ``paired`` returns

- the per-split differences ``A - B`` (negative: A is better, RMSE is lower-is-better), their
  mean and standard deviation;
- how many splits each model wins (ties count for neither);
- a two-sided exact **sign test** p-value (how surprising that many wins would be if neither model
  were better; with 5 splits it can never go below 2/32 = 0.0625);
- a confidence interval for the mean difference from Student's t. Repeated random splits share
  training rows, so their differences are correlated and the plain t interval is too narrow;
  with ``test_train_ratio`` (test rows / training rows) the variance is corrected as Nadeau and
  Bengio propose for repeated random subsampling (Machine Learning 52, 2003): ``(1/K + ratio) s²``.
"""

from __future__ import annotations

import math
import statistics

from gpulab.validate import non_negative_int
from dataclasses import asdict, dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class Paired:
    """A - B on each of the same splits, summarised (see the module docstring)."""

    a: str
    b: str
    differences: tuple[float, ...]
    mean: float
    std: float
    low: float
    high: float
    confidence: float
    a_wins: int
    b_wins: int
    ties: int
    sign_p: float
    corrected: bool

    @property
    def splits(self) -> int:
        """How many splits were compared."""
        return len(self.differences)

    def verdict(self) -> str:
        """What the interval supports, in one sentence."""
        level = f"{self.confidence:.0%}"
        if self.splits < 2:
            return "one split: no interval, no conclusion"
        if self.high < 0:
            return f"{self.a} has the lower RMSE ({level} interval below 0)"
        if self.low > 0:
            return f"{self.b} has the lower RMSE ({level} interval above 0)"
        return f"no difference shown: the {level} interval includes 0"

    def __str__(self) -> str:
        return (f"{self.a} - {self.b}: {self.mean:+.2f} ± {self.std:.2f} over {self.splits} splits, "
                f"{self.confidence:.0%} interval [{self.low:+.2f}, {self.high:+.2f}], wins {self.a_wins}-{self.b_wins}"
                f"{f' ({self.ties} tied)' if self.ties else ''}, sign test p = {self.sign_p:.2f}: {self.verdict()}")

    def to_dict(self) -> dict:
        """A JSON-friendly dict (non-finite numbers become None)."""
        d = asdict(self)
        d["differences"] = list(self.differences)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this lopsided if wins and losses were equally likely."""
    for name, value in (("wins", wins), ("losses", losses)):
        non_negative_int(value, name)
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def _t_quantile(p: float, df: int) -> float:
    from scipy.stats import t  # scipy comes with scikit-learn

    return float(t.ppf(p, df))


def paired(
    a_values: Sequence[float],
    b_values: Sequence[float],
    a: str = "A",
    b: str = "B",
    *,
    confidence: float = 0.95,
    test_train_ratio: float | None = None,
) -> Paired:
    """Compare ``a_values[i]`` with ``b_values[i]`` (the same split ``i``); lower values are better.

    ``test_train_ratio`` (e.g. 102 / 404 for an 80/20 split of 506 rows) widens the interval for
    splits that overlap (Nadeau and Bengio); ``None`` gives the plain paired t interval.
    """
    a_list, b_list = [float(v) for v in a_values], [float(v) for v in b_values]
    if len(a_list) != len(b_list) or not a_list:
        raise ValueError(f"need the same, non-zero number of splits for both, got {len(a_list)} and {len(b_list)}")
    if not all(math.isfinite(v) for v in a_list + b_list):
        raise ValueError("every value must be a finite number")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence!r} must be between 0 and 1, e.g. 0.95")
    if test_train_ratio is not None and not 0 <= test_train_ratio < math.inf:
        raise ValueError(f"test_train_ratio={test_train_ratio!r} must be a non-negative number (test rows / train rows)")
    diffs = tuple(x - y for x, y in zip(a_list, b_list))
    k = len(diffs)
    mean = statistics.fmean(diffs)
    std = statistics.stdev(diffs) if k > 1 else math.nan
    if k > 1:
        factor = 1 / k + (test_train_ratio or 0.0)
        half = _t_quantile((1 + confidence) / 2, k - 1) * math.sqrt(factor) * std
        low, high = mean - half, mean + half
    else:
        low = high = math.nan
    a_wins, b_wins = sum(d < 0 for d in diffs), sum(d > 0 for d in diffs)
    return Paired(a, b, diffs, mean, std, low, high, confidence, a_wins, b_wins, k - a_wins - b_wins,
                  sign_test(a_wins, b_wins), test_train_ratio is not None)


class Scored(Protocol):
    """What ``compare`` needs of a score (``gpulab.evaluation.Score`` has it)."""

    model: str
    features: str
    rmse: tuple[float, ...]
    seeds: tuple[int, ...]
    test_train_ratio: float | None


def compare(a: Scored, b: Scored, *, confidence: float = 0.95, corrected: bool = True) -> Paired:
    """Paired comparison of two scores' per-split RMSEs; they must come from the same split seeds.

    With ``corrected`` the interval allows for overlapping splits, using the scores' test/train
    row ratio. Names carry the features when they differ (the same model with and without B).
    """
    if not a.seeds or tuple(a.seeds) != tuple(b.seeds):
        raise ValueError(f"not the same splits: seeds {list(a.seeds)} vs {list(b.seeds)}; pair only identical splits")
    names = (a.model, b.model) if a.features == b.features else (f"{a.model} {a.features}", f"{b.model} {b.features}")
    ratio = a.test_train_ratio if corrected else None
    if corrected and ratio is None:
        raise ValueError("the score does not record its test/train row ratio: pass corrected=False for a plain t interval")
    return paired(a.rmse, b.rmse, *names, confidence=confidence, test_train_ratio=ratio)


def _by_model(scores: Sequence[Scored], name: str) -> Scored:
    for s in scores:
        if s.model == name:
            return s
    raise ValueError(f"no score for {name!r}; have {', '.join(s.model for s in scores) or 'none'}")


def compare_models(scores: Sequence[Scored], reference: str = "GradientBoosting", **kwargs) -> list[Paired]:
    """Every other model minus ``reference``, on the same splits (one features variant)."""
    ref = _by_model(scores, reference)
    return [compare(s, ref, **kwargs) for s in scores if s.model != reference]


def compare_features(with_b: Sequence[Scored], without_b: Sequence[Scored], **kwargs) -> list[Paired]:
    """Each model without B minus the same model with B, on the same splits."""
    return [compare(w, _by_model(with_b, w.model), **kwargs) for w in without_b]


def format_paired(results: Sequence[Paired]) -> str:
    """A plain-text table: A - B mean ± std, the interval, wins, sign test p, verdict."""
    if not results:
        return "nothing compared"
    width = max(len(f"{r.a} - {r.b}") for r in results) + 2
    level = f"{results[0].confidence:.0%} interval"
    lines = [f"{'A - B (test RMSE)':<{width}}{'mean ± std':>13}{level:>20}{'wins A-B':>10}{'sign p':>8}  verdict"]
    for r in results:
        lines.append(f"{r.a + ' - ' + r.b:<{width}}{r.mean:>+7.2f} ± {r.std:<4.2f}"
                     f"{f'[{r.low:+.2f}, {r.high:+.2f}]':>20}{f'{r.a_wins}-{r.b_wins}':>10}{r.sign_p:>8.2f}  {r.verdict()}")
    return "\n".join(lines)
