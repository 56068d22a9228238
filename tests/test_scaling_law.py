"""Lesson 11's power law of the data size (Hestness et al. 2017): the fit recovers a known law, its inverse
gives the size for a target, the subsample keeps the held-out set, and the verdict follows the numbers."""

import numpy as np
import pytest
import torch

from course_lib.lessons import l11_batch_size_science as study

SIZES = [1e3, 3e3, 1e4, 3e4, 1e5, 3e5]


@pytest.mark.parametrize("a,b,c", [(2.0, 0.35, 0.05), (50.0, 0.7, 0.2), (1.0, 0.2, 0.0)])
def test_the_fit_recovers_a_known_power_law(a, b, c):
    exact = [a * n ** -b + c for n in SIZES]
    fit = study.fit_power_law(SIZES, exact)
    assert fit["b"] == pytest.approx(b, rel=1e-3) and fit["c"] == pytest.approx(c, abs=1e-3)
    rng = np.random.default_rng(0)  # 0.5 % noise on each point: the exponent within 5 %
    noisy = [v * (1 + 0.005 * rng.standard_normal()) for v in exact]
    fit = study.fit_power_law(SIZES, noisy)
    assert fit["b"] == pytest.approx(b, rel=0.05)
    assert study.size_for_error(fit, study.power_law_error(fit, 2e5)) == pytest.approx(2e5, rel=1e-6)


def test_no_size_reaches_the_floor_and_bad_inputs_are_refused():
    fit = {"a": 2.0, "b": 0.35, "c": 0.05}
    with pytest.raises(ValueError, match="irreducible"):
        study.size_for_error(fit, 0.05)
    with pytest.raises(ValueError, match="does not fall"):
        study.size_for_error({**fit, "b": -0.1}, 0.2)
    with pytest.raises(ValueError, match="at least 3"):
        study.fit_power_law([1, 2], [0.5, 0.4])
    with pytest.raises(ValueError, match="positive"):
        study.fit_power_law([1, 2, 3], [0.5, 0.0, 0.4])


def test_the_subsample_keeps_the_held_out_set():
    from course_lib.data.movielens import ImplicitData

    d = ImplicitData(name="x", num_users=3, num_items=5, train_users=torch.arange(100) % 3,
                     train_items=torch.arange(100) % 5, test_items=torch.tensor([0, 1, 2]),
                     eval_negatives=torch.zeros(3, 2, dtype=torch.long), source="test", synthetic=True)
    half = study.subsample_train(d, 0.5)
    assert 50 <= half.num_train <= 53 and torch.equal(half.test_items, d.test_items)
    tiny = study.subsample_train(d, 0.01)  # one interaction drawn, and one kept for every user
    assert set(tiny.train_users.tolist()) == {0, 1, 2} and tiny.num_train <= 4
    assert study.subsample_train(d, 1.0) is d
    with pytest.raises(ValueError, match="fraction"):
        study.subsample_train(d, 0.0)


def _rows(b):
    return [{"fraction": n / 1e5, "size": int(n), "metric": 1 - (2 * n ** -b + 0.05), "error": 2 * n ** -b + 0.05}
            for n in SIZES[:5]]


def test_the_verdict_follows_the_numbers():
    exact = study.scaling_prediction(_rows(0.35), {"size": 300_000, "error": 2 * 3e5 ** -0.35 + 0.05})
    text = study.scaling_verdict(exact)
    assert "predictable here" in text and "1.00x those used" in text
    off = study.scaling_prediction(_rows(0.35), {"size": 300_000, "error": 0.2})
    assert "worse than predicted" in study.scaling_verdict(off)
    below = study.scaling_prediction(_rows(0.35), {"size": 300_000, "error": 0.0782})  # > 5 % off, below 1e5's
    assert "small-data region" in study.scaling_verdict(below) and "did not help" not in study.scaling_verdict(below)
    # #37 (fourth full run, read r4c): the whole set ended worse than the largest fitted size at the same steps
    # (0.3588 against 0.3551): not "the fit does not extrapolate" but runs limited by their steps
    last = _rows(0.35)[-1]["error"]
    worse = study.scaling_prediction(_rows(0.35), {"size": 300_000, "error": last + 0.004})
    said = study.scaling_verdict(worse)
    assert "no lower than that of" in said and "more data did not help at all" in said and "small-data" not in said
    floor = study.scaling_prediction(_rows(0.35), {"size": 300_000, "error": 0.01})
    assert "better than predicted" in study.scaling_verdict(floor) and "no size reaches" in study.scaling_verdict(floor)
    assert "barely falls" not in text
    # #37 (fifth full run, read r5c): BERT's sizes 232/465/930 sequences at 5.5973/5.4132/4.7451, the whole set
    # (1,860) at 4.6051 against 4.4421 predicted (+3.7 %): within 5 %, but so was "no change" (4.7451, -3.0 %)
    bert = [{"fraction": f, "size": n, "metric": e, "error": e}
            for f, n, e in ((0.125, 232, 5.5973), (0.25, 465, 5.4132), (0.5, 930, 4.7451))]
    run5 = study.scaling_prediction(bert, {"size": 1860, "error": 4.6051})
    said = study.scaling_verdict(run5, unit="sequences")
    assert "+3.7%" in said and "4.7451, -3.0% from the measured, nearer than the law" in said, said
    assert "cannot tell the law from no change" in said and "the scaling was predictable here" not in said
    # the opposite: the law within 5 % where no change is not (the exact law above: the largest fitted size is
    # 10 % above the held-out one's error)
    assert "cannot tell" not in text and study.no_change_error(exact) < -0.05
    # #37 (sixth full run, read r6c): NeuMF's sizes 36,803 .. 498,056 at 0.6258 .. 0.3409, the whole set (990,027) at
    # 0.3361 against 0.3005 predicted (+11.9%): "with this few points, or ... the small-data region", where the error
    # had all but stopped falling at the top (-1.4% for x2 the data, nearer than the law)
    neumf = [{"fraction": f, "size": n, "metric": 1 - e, "error": e}
             for f, n, e in ((1 / 32, 36_803, 0.6258), (1 / 16, 67_566, 0.6182), (1 / 8, 129_075, 0.5719),
                             (1 / 4, 252_086, 0.4083), (1 / 2, 498_056, 0.3409))]
    run6 = study.scaling_prediction(neumf, {"size": 990_027, "error": 0.3361})
    said = study.scaling_verdict(run6)
    assert "worse than predicted" in said and "error is -1.4% from that of 498,056 interactions (0.3409)" in said, said
    assert "more data barely helped" in said and "small-data region" not in said
    # the opposite: worse than predicted and more than 5 % below the largest fitted size (the law's reasons stay)
    assert "small-data region" in study.scaling_verdict(study.scaling_prediction(neumf, {"size": 990_027,
                                                                                        "error": 0.3200}))
    nearly_flat = study.scaling_prediction(_rows(0.005), {"size": 300_000, "error": 2 * 3e5 ** -0.005 + 0.05})
    assert "barely falls" in study.scaling_verdict(nearly_flat)
    flat = {**exact, "fit": {**exact["fit"], "b": -0.01}}
    assert "did not fall" in study.scaling_verdict(flat)
    assert "held out" in str(study.scaling_table(_rows(0.35), exact))
    bert = str(study.scaling_table(_rows(0.35), exact, {"fraction": 1.0, "metric": 3.2}, size="training sequences",
                                   metric="held-out MLM loss", error="error (the loss)"))
    assert "training sequences" in bert and "3.2000" in bert
    assert "sequences it predicted" in study.scaling_verdict(exact, unit="sequences")
