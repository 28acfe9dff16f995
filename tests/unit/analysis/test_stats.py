"""Statistics against textbook values and scipy (icrl.analysis.stats)."""

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from icrl.analysis import stats
from icrl.errors import UsageError
from icrl.records.schema import TestLine, TrainLine


def test_mcnemar_exact_textbook():
    # 1 vs 9 discordant pairs: p = 2 * P(X <= 1), X ~ Bin(10, 1/2) = 2 * 11 / 1024
    a = [1] * 1 + [0] * 9 + [1] * 20 + [0] * 5
    b = [0] * 1 + [1] * 9 + [1] * 20 + [0] * 5
    result = stats.mcnemar_exact(a, b)
    assert (result.only_a, result.only_b) == (1, 9)
    assert result.pvalue == pytest.approx(22 / 1024)
    # symmetric, and concordant items do not matter
    assert stats.mcnemar_exact(b, a).pvalue == pytest.approx(22 / 1024)
    assert stats.mcnemar_exact(a[:10], b[:10]).pvalue == pytest.approx(22 / 1024)


def test_mcnemar_exact_no_discordance_and_balanced():
    assert stats.mcnemar_exact([1, 0, 1], [1, 0, 1]).pvalue == 1.0
    assert stats.mcnemar_exact([1, 0] * 5, [0, 1] * 5).pvalue == pytest.approx(1.0)


def test_mcnemar_rejects_mismatched_items():
    with pytest.raises(ValueError, match="same items"):
        stats.mcnemar_exact([1, 0], [1])
    with pytest.raises(ValueError, match="0/1"):
        stats.mcnemar_exact([2, 0], [1, 0])


def test_paired_bootstrap_matches_scipy_and_is_seeded():
    rng = np.random.default_rng(1)
    a = (rng.random(300) < 0.45).astype(int)
    b = np.where(rng.random(300) < 0.7, a, 1 - a)
    interval = stats.paired_bootstrap(a, b, seed=3)
    direct = sps.bootstrap((a - b,), np.mean, confidence_level=0.95, n_resamples=9999, method="percentile",
                           rng=np.random.default_rng(3))
    # resampling items of (a, b) together is the one-sample bootstrap of the differences
    assert interval.estimate == pytest.approx(a.mean() - b.mean())
    assert interval.low == pytest.approx(direct.confidence_interval.low, abs=0.01)
    assert interval.high == pytest.approx(direct.confidence_interval.high, abs=0.01)
    assert stats.paired_bootstrap(a, b, seed=3) == interval
    # close to the normal-theory paired interval for 300 items
    d = a - b
    half = 1.96 * d.std(ddof=1) / math.sqrt(d.size)
    assert interval.low == pytest.approx(d.mean() - half, abs=0.015)
    assert interval.high == pytest.approx(d.mean() + half, abs=0.015)


def test_paired_bootstrap_degenerate():
    assert stats.paired_bootstrap([1, 1, 0], [1, 1, 0]) == stats.Interval(0.0, 0.0, 0.0)


def test_compare_paired_outcome_and_line():
    a = [1] * 30 + [0] * 70
    b = [0] * 30 + [0] * 70
    result = stats.compare_paired(a, b)
    assert result.outcome == "above"
    assert result.mcnemar.pvalue == pytest.approx(2 * 0.5 ** 30)
    assert "McNemar exact p<0.0001" in result.line() and "100 shared items" in result.line()
    assert stats.compare_paired([1, 0, 1, 0], [0, 1, 1, 0]).outcome == "same"


def test_seed_summary_student_t():
    values = [0.30, 0.35, 0.32, 0.28, 0.40]
    summary = stats.seed_summary(values)
    x = np.array(values)
    # textbook: mean +- t(0.975, 4) * s / sqrt(5), t = 2.776445
    half = 2.7764451051977987 * x.std(ddof=1) / math.sqrt(5)
    assert (summary.mean, summary.n) == (pytest.approx(0.33), 5)
    assert summary.low == pytest.approx(0.33 - half) and summary.high == pytest.approx(0.33 + half)
    one = stats.seed_summary([0.4, float("nan")])
    assert one.n == 1 and math.isnan(one.low) and one.text() == "0.400 (n=1)"
    assert stats.seed_summary([]).n == 0


def test_an_accuracy_interval_over_two_seeds_stays_in_0_1():
    """0.0 and 0.25 of 8 items: the Student-t interval is [-1.463, 1.713]; the accuracy's is a
    t interval of the empirical logits log((k + 1/2) / (8 - k + 1/2)), mapped back."""
    summary = stats.accuracy_summary([0.0, 0.25], 8)
    logits = np.log(np.array([0.5, 2.5]) / np.array([8.5, 6.5]))
    half = 12.706204736174704 * logits.std(ddof=1) / math.sqrt(2)
    expit = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    assert summary.low == pytest.approx(expit(logits.mean() - half))
    assert summary.high == pytest.approx(expit(logits.mean() + half))
    assert 0 < summary.low < 0.125 < summary.high < 1 and summary.text().startswith("0.125 [0.000, ")


@pytest.mark.parametrize("seeds", [2, 3, 5])
def test_accuracy_intervals_never_leave_0_1_and_hold_the_mean(seeds):
    rng = np.random.default_rng(seeds)
    for _ in range(300):
        items = int(rng.integers(1, 60))
        values = rng.integers(0, items + 1, size=seeds) / items
        s = stats.accuracy_summary(list(values), items)
        assert 0 <= s.low <= s.mean <= s.high <= 1, (values, items, s)


def test_an_accuracy_interval_needs_the_number_of_items():
    same = stats.accuracy_summary([0.5, 0.5, 0.5], 40)
    assert (same.low, same.high) == (0.5, 0.5)  # no spread between seeds
    unknown = stats.accuracy_summary([0.1, 0.3], None)  # records that do not say: no interval at all
    assert unknown.mean == pytest.approx(0.2) and math.isnan(unknown.low) and unknown.text() == "0.200 (n=2)"


def test_minimum_detectable_difference_textbook():
    # Fleiss (no continuity correction): 0.50 vs 0.60 at alpha 0.05, power 0.8 needs 388 per group
    assert stats.minimum_detectable_difference(388, 0.5) == pytest.approx(0.1, abs=0.001)
    assert stats.minimum_detectable_difference(387, 0.5) > stats.minimum_detectable_difference(388, 0.5)
    d = stats.minimum_detectable_difference(500, 0.3)
    assert stats.two_proportion_power(0.3, 0.3 + d, 500) == pytest.approx(0.8)
    # power by simulation with scipy's test statistic agrees
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(2000):
        x1, x2 = rng.binomial(500, 0.3), rng.binomial(500, 0.3 + d)
        pooled = (x1 + x2) / 1000
        z = (x2 - x1) / 500 / math.sqrt(2 * pooled * (1 - pooled) / 500)
        hits += 2 * sps.norm.sf(abs(z)) < 0.05
    assert hits / 2000 == pytest.approx(0.8, abs=0.03)
    assert math.isnan(stats.minimum_detectable_difference(3, 0.9))
    assert stats.minimum_detectable_difference(100, 0.3) > stats.minimum_detectable_difference(1000, 0.3)


def _run(path, ids, answers, predictions, step=5):
    path.mkdir(parents=True)
    from helpers import run_config

    config = run_config(6, labels=["p", "q"], test_answers=answers, test_every=step + 1)
    config["test_set"]["ids"] = ids
    (path / "config.json").write_text(json.dumps(config))
    (path / "test.jsonl").write_text(json.dumps(TestLine(step, 0.5, {}, predictions, 0).as_json()) + "\n")
    (path / "train.jsonl").write_text("".join(json.dumps(TrainLine(t, t, "Q", "p", 1, "p", 1, 0, [], {}).as_json())
                                              + "\n" for t in range(6)))
    return path


def test_paired_outcomes_match_items_by_id(tmp_path):
    a = _run(tmp_path / "a", [24, 25, 26], ["p", "q", "p"], ["p", "p", "p"])
    b = _run(tmp_path / "b", [26, 24, 23], ["p", "p", "q"], ["q", "p", "q"])
    out_a, out_b, ids = stats.paired_outcomes(a, b)
    assert ids == ["24", "26"]
    assert out_a.tolist() == [1, 1] and out_b.tolist() == [1, 0]
    with pytest.raises(UsageError, match="no test record at step 3"):
        stats.paired_outcomes(a, b, step=3)
    c = _run(tmp_path / "c", [22], ["p"], ["p"])
    with pytest.raises(UsageError, match="share no test items"):
        stats.paired_outcomes(a, c)
