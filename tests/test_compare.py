"""course_lib.compare: the outcome follows from the interval, the intervals equal their closed forms, and the
decision rule is calibrated on simulated measurements."""

import math
import random

import pytest
from scipy import stats

from course_lib import compare
from course_lib.compare import HIGHER, LOWER, SAME, UNRESOLVED, Comparison


def _lognormal(rng, center, spread, n):
    return [center * math.exp(rng.gauss(0, spread)) for _ in range(n)]


@pytest.mark.parametrize("n", [2, 3, 5])
def test_equal_arms_are_rarely_decided(n):
    rng = random.Random(n)
    decided = sum(compare.ratio("t", _lognormal(rng, 10, 0.15, n), _lognormal(rng, 10, 0.15, n),
                                needed=compare.TIME_EFFECT).decided for _ in range(1000))
    assert decided <= 70, decided  # at most 7% false verdicts (the interval is 95%, needed > 0 makes it fewer)


def test_a_twofold_effect_is_decided_at_three_seeds():
    rng = random.Random(7)
    outcomes = [compare.ratio("t", _lognormal(rng, 10, 0.10, 3), _lognormal(rng, 20, 0.10, 3),
                              needed=compare.TIME_EFFECT).outcome for _ in range(1000)]
    assert outcomes.count(HIGHER) >= 900 and LOWER not in outcomes


def test_paired_ratio_is_calibrated_too():
    rng = random.Random(3)
    same = 0
    for _ in range(1000):
        load = _lognormal(rng, 1, 0.3, 3)  # a busy moment slows both runs of a round
        a = [x * math.exp(rng.gauss(0, 0.1)) for x in load]
        b = [x * math.exp(rng.gauss(0, 0.1)) for x in load]
        same += compare.paired_ratio("t", a, b, needed=0.0).decided
    assert same <= 70, same


def test_ratio_is_the_geometric_mean_ratio_with_welchs_interval():
    a, b = [1.0, 2.0, 4.0], [2.0, 3.0, 5.0, 7.0]
    c = compare.ratio("b/a", a, b, needed=0.05)
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    welch = stats.ttest_ind(lb, la, equal_var=False).confidence_interval(0.95)
    assert c.estimate == pytest.approx(stats.gmean(b) / stats.gmean(a))
    assert (c.low, c.high) == pytest.approx((math.exp(welch.low), math.exp(welch.high)))
    assert c.low <= c.estimate <= c.high and c.n == "3/4"


def test_ratio_and_its_inverse_get_mirrored_verdicts():
    a, b = [10.0, 11.0, 10.5], [15.0, 16.0, 15.2]
    up, down = compare.ratio("q", a, b, needed=0.05), compare.ratio("q", b, a, needed=0.05)
    assert (up.outcome, down.outcome) == (HIGHER, LOWER)
    assert up.low * down.high == pytest.approx(1) and up.high * down.low == pytest.approx(1)


def test_one_measurement_per_arm_needs_a_resolution():
    with pytest.raises(ValueError, match="measured once"):
        compare.ratio("q", [10.0], [12.0], needed=0.05)
    c = compare.ratio("q", [10.0], [12.0], needed=0.05, resolution=0.09)
    assert (c.low, c.high) == pytest.approx((1.2 / 1.09, 1.2 * 1.09)) and c.outcome == HIGHER
    assert compare.ratio("q", [10.0], [10.5], needed=0.05, resolution=0.09).outcome == UNRESOLVED


def test_identical_repeats_give_the_resolution_alone():
    c = compare.ratio("steps", [285, 285], [1020, 1020], needed=0.05, resolution=0.05)
    assert (c.low, c.high) == pytest.approx((1020 / 285 / 1.05, 1020 / 285 * 1.05))


def test_a_resolved_small_difference_is_same():
    c = compare.ratio("q", [10.0, 10.01, 9.99, 10.0], [10.1, 10.11, 10.09, 10.1], needed=0.05)
    assert c.outcome == SAME and not c.decided


def test_outcome_vocabulary_is_fixed():
    for c in (Comparison("a", 2, 1.5, 3, 0.1), Comparison("b", -2, -3, -1.5, 0.1),
              Comparison("c", 0, -0.05, 0.05, 0.1), Comparison("d", 0.5, -1, 2, 0.1)):
        assert c.outcome in compare.OUTCOMES
    assert [c.outcome for c in (Comparison("a", 2, 1.5, 3, 0.1), Comparison("b", -2, -3, -1.5, 0.1),
                                Comparison("c", 0, -0.05, 0.05, 0.1), Comparison("d", 0.5, -1, 2, 0.1))] == \
        [HIGHER, LOWER, SAME, UNRESOLVED]


def test_an_interval_that_misses_its_estimate_is_refused():
    with pytest.raises(ValueError, match="does not contain"):
        Comparison("q", 5, 1, 2, 0.1)
    with pytest.raises(ValueError, match="NaN"):
        Comparison("q", math.nan, 1, 2, 0.1)


def test_difference_uses_the_combined_standard_error():
    c = compare.difference("hr", 0.60, 0.01, 0.65, 0.02, needed=0.01, df=10)
    half = stats.t.ppf(0.975, 10) * math.sqrt(0.01 ** 2 + 0.02 ** 2)
    assert (c.low, c.high) == pytest.approx((0.05 - half, 0.05 + half))
    with pytest.raises(ValueError, match="resolution"):
        compare.difference("hr", 0.6, 0, 0.7, 0, needed=0.01)
    assert compare.difference("hr", 0.6, 0, 0.7, 0, needed=0.01, resolution=0.02).outcome == HIGHER


def test_slope_equals_linregress():
    xs, ys = [1, 2, 3, 4, 5], [2.1, 3.9, 6.2, 7.8, 10.1]
    c = compare.slope("dy/dx", xs, ys, needed=0.1)
    r = stats.linregress(xs, ys)
    half = stats.t.ppf(0.975, 3) * r.stderr
    assert (c.estimate, c.low, c.high) == pytest.approx((r.slope, r.slope - half, r.slope + half))
    assert c.outcome == HIGHER


def test_weighted_line_fit_matches_numpy_polyfit():
    np = pytest.importorskip("numpy")
    xs, ys, sig = [1.0, 2.0, 4.0, 8.0], [3.0, 2.2, 1.7, 1.1], [0.1, 0.2, 0.1, 0.3]
    fit = compare.line_fit(xs, ys, weights=[1 / s ** 2 for s in sig])
    (slope, intercept), cov = np.polyfit(xs, ys, 1, w=[1 / s for s in sig], cov=True)
    assert (fit.slope, fit.intercept) == pytest.approx((slope, intercept))
    assert (fit.slope_se, fit.intercept_se) == pytest.approx((math.sqrt(cov[0, 0]), math.sqrt(cov[1, 1])))


def test_widen_adds_the_resolution_on_the_right_scale():
    c = compare.ratio("q", [10, 10.2, 9.9], [12, 12.1, 11.8], needed=0.05)
    w = compare.widen(c, 0.1, "pace moved 10%")
    assert (w.low, w.high) == pytest.approx((c.low / 1.1, c.high * 1.1)) and w.basis.endswith("pace moved 10%")
    d = compare.widen(compare.quantity("q", 1.0, 0.1, needed=0.5), 0.2, "spacing")
    assert d.high - d.low == pytest.approx(2 * (stats.norm.ppf(0.975) * 0.1 + 0.2))


def test_table_save_and_summary_roundtrip(tmp_path):
    comps = [compare.ratio("time to target, b / a", [10, 11], [20, 21], needed=compare.TIME_EFFECT),
             compare.quantity("slope", 1.0, 0.1, needed=0.5, unit="ms")]
    text = str(compare.table(comps, title="t"))
    assert "higher" in text and "question" in text and "±5%" in text
    compare.save("06", comps, directory=tmp_path)
    assert compare.load_all(tmp_path) == {"06": comps}
    summary = compare.summary_table(tmp_path).to_markdown()
    assert "time to target, b / a" in summary and "| 06 |" in summary


def test_estimate_rows():
    e = compare.mean_estimate("step time", [1.0, 1.2, 1.1], unit="ms")
    assert e.low < 1.1 < e.high and e.se == pytest.approx(0.1 / math.sqrt(3))
    assert "n/a" in compare.estimates_table([compare.mean_estimate("once", [3.0])]).to_markdown()
