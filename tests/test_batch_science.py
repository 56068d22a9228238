"""The batch-size estimators against closed forms: the critical-batch fit on exact steps, the noise scale on least
squares, the sharpness and the Hessian trace on a quadratic, the loss slices at their endpoints."""

import json
import math

import pytest
import torch
from scipy import stats

from course_lib import batch_science as bs
from course_lib import compare


def _least_squares(dim=10, noise=0.5, delta_norm=1.0, seed=0):
    """A linear model at w = w* + delta, a sampler of Gaussian (x, y) batches, the closed form."""
    return bs.least_squares_problem(dim, noise, delta_norm, seed)


def test_two_batch_estimates_invert_the_expectation():
    g2, trace = 2.0, 300.0
    sq = {b: g2 + trace / b for b in (8, 128)}
    assert bs.two_batch_estimates(sq[8], sq[128], 8, 128) == pytest.approx((g2, trace))
    with pytest.raises(ValueError, match="b_small < b_big"):
        bs.two_batch_estimates(1.0, 1.0, 64, 64)


def test_noise_scale_matches_least_squares_closed_form():
    model, loss_fn, sample, exact = _least_squares()
    est = bs.noise_scale(model, loss_fn, sample, b_small=4, b_big=256, repeats=3000)
    assert est.grad_sq_norm == pytest.approx(exact["grad_sq_norm"], rel=0.05)
    assert est.trace_cov == pytest.approx(exact["trace_cov"], rel=0.05)
    assert est.b_simple == pytest.approx(exact["b_simple"], rel=0.05)
    assert 0 < est.stderr < 0.04 * exact["b_simple"]  # the stated error is small, and it is stated
    assert "B_simple" in str(est) and est.to_dict()["repeats"] == 3000


def test_noise_scale_grows_as_the_loss_falls():
    """Nearer the optimum |G| shrinks and the noise does not: B_simple rises (why it grows in training)."""
    far = bs.noise_scale(*_least_squares(delta_norm=2.0)[:3], b_small=4, b_big=128, repeats=300)
    near = bs.noise_scale(*_least_squares(delta_norm=0.3)[:3], b_small=4, b_big=128, repeats=300)
    assert near.b_simple > 3 * far.b_simple


def test_noise_scale_takes_the_repeats_a_stated_error_needs():
    """The repeats are chosen for a stated standard error: doubled from ``repeats`` until the jackknife
    error is at most ``rel_error`` of B_simple, never past ``max_repeats``; without it, exactly ``repeats``."""
    model, loss_fn, sample, exact = _least_squares()
    fixed = bs.noise_scale(model, loss_fn, sample, b_small=4, b_big=64, repeats=8)
    assert fixed.repeats == 8
    est = bs.noise_scale(model, loss_fn, sample, b_small=4, b_big=64, repeats=8, rel_error=0.1, max_repeats=1024)
    assert est.stderr <= 0.1 * est.b_simple and est.repeats in (8, 16, 32, 64, 128, 256, 512, 1024)
    assert est.repeats > 8  # 8 pairs do not give 10 % here: it took more
    capped = bs.noise_scale(model, loss_fn, sample, b_small=4, b_big=64, repeats=8, rel_error=1e-4, max_repeats=20)
    assert capped.repeats == 20 and capped.stderr > 1e-4 * capped.b_simple  # the cap holds; the error says so
    with pytest.raises(ValueError, match="rel_error"):
        bs.noise_scale(model, loss_fn, sample, 4, 64, repeats=8, rel_error=0.0)
    with pytest.raises(ValueError, match="max_repeats"):
        bs.noise_scale(model, loss_fn, sample, 4, 64, repeats=8, rel_error=0.1, max_repeats=4)


def test_noise_scale_rejects_a_loss_that_is_not_a_mean():
    model, _, sample, _ = _least_squares()
    with pytest.raises(ValueError, match="0-d tensor"):
        bs.noise_scale(model, lambda m, b: (m(b[0]).squeeze(1) - b[1]) ** 2, sample, 2, 8, repeats=1)


def _quadratic(eigenvalues, seed=0):
    """loss = p^T A p / 2 with A = Q diag(eigenvalues) Q^T: the Hessian is A."""
    gen = torch.Generator().manual_seed(seed)
    n = len(eigenvalues)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    a = q @ torch.diag(torch.tensor(eigenvalues, dtype=torch.float64)) @ q.T
    model = torch.nn.Module()
    model.p = torch.nn.Parameter(torch.randn(n, generator=gen, dtype=torch.float64))
    return model, (lambda m, batch: 0.5 * m.p @ batch @ m.p), a


def test_top_eigenvalue_of_a_quadratic_within_one_percent():
    eigs = [10.0, 6.0, 3.0, 1.0, 0.5] + [0.1] * 15
    model, loss_fn, a = _quadratic(eigs)
    top = bs.top_hessian_eigenvalue(model, loss_fn, a, iters=200, tol=1e-6)
    assert top == pytest.approx(10.0, rel=0.01)


def test_hutchinson_trace_of_a_quadratic():
    eigs = [4.0, 3.0, 2.0, 1.0] * 5
    model, loss_fn, a = _quadratic(eigs, seed=1)
    assert bs.hutchinson_trace(model, loss_fn, a, samples=400) == pytest.approx(sum(eigs), rel=0.05)


def test_slices_hit_their_endpoints_and_restore_the_weights():
    model, loss_fn, sample, _ = _least_squares()
    batch = sample(64)
    theta_b = bs.flat_parameters(model)
    with torch.no_grad():
        model.weight.mul_(0.5)
    theta_a = bs.flat_parameters(model)
    line = bs.interpolation_slice(model, loss_fn, batch, theta_a, theta_b, [0.0, 0.5, 1.0])
    with torch.no_grad():
        at_a = float(loss_fn(model, batch))
        model.weight.copy_(theta_b[0])
        at_b = float(loss_fn(model, batch))
        model.weight.copy_(theta_a[0])
    assert line[0] == pytest.approx(at_a) and line[2] == pytest.approx(at_b)
    assert torch.equal(model.weight, theta_a[0])  # restored
    around = bs.random_direction_slice(model, loss_fn, batch, [-1.0, 0.0, 1.0])
    assert around[1] == pytest.approx(at_a)
    assert not math.isclose(around[0], around[1])


def test_filter_normalized_direction_matches_each_filters_norm():
    theta = [torch.randn(5, 3) * torch.arange(1, 6)[:, None], torch.randn(5)]
    d = bs.filter_normalized_direction(theta, seed=3)
    assert torch.allclose(d[0].norm(dim=1), theta[0].norm(dim=1))
    assert torch.equal(d[1], torch.zeros(5))


# --------------------------------------------------------------------------- the critical batch, one fit


def _model_rows(s_min, b_crit, batches=(256, 1024, 4096, 16384), resolution=40):
    return [{"batch size": b, "steps to target": s_min * (1 + b_crit / b), "resolution (steps)": resolution}
            for b in batches]


def test_critical_batch_fit_recovers_the_model_and_its_closed_form_error_on_exact_data():
    rows = _model_rows(500, 2048)
    fit = bs.critical_batch_fit(rows, label="exact")
    assert fit.s_min == pytest.approx(500) and fit.b_crit == pytest.approx(2048)
    assert fit.df == 2 and fit.scale == 1.0  # no scatter: each point's error is its evaluation spacing's
    # equal weights: var(intercept) = sigma^2 (1/n + mean(x)^2 / Sxx), sigma = resolution / sqrt(12)
    xs = [1 / r["batch size"] for r in rows]
    mx = sum(xs) / len(xs)
    sxx = sum((x - mx) ** 2 for x in xs)
    sigma = 40 / math.sqrt(12)
    assert fit.s_min_se == pytest.approx(sigma * math.sqrt(1 / 4 + mx ** 2 / sxx))
    half = stats.t.ppf(0.975, 2) * fit.s_min_se
    assert fit.s_min_range == pytest.approx((500 - half, 500 + half))
    lo, hi = fit.b_crit_range
    assert lo < 2048 < hi
    s_row, b_row = fit.estimates()
    assert (s_row.value, b_row.value) == pytest.approx((500, 2048)) and "one seed" in b_row.basis


def test_critical_batch_fit_takes_the_fastest_run_at_each_batch_and_widens_with_scatter():
    rows = _model_rows(1000, 4096)
    slower = [{**r, "steps to target": 3 * r["steps to target"]} for r in rows]
    missed = [{"batch size": 65536, "steps to target": None}]
    assert bs.critical_batch_fit(slower + rows + missed).b_crit == pytest.approx(4096)
    noisy = [{**r, "steps to target": r["steps to target"] * f} for r, f in zip(rows, (1.1, 0.9, 1.1, 0.9))]
    wide = bs.critical_batch_fit(noisy)
    assert wide.scale > 1 and wide.s_min_se > bs.critical_batch_fit(rows).s_min_se


def test_critical_batch_fit_needs_three_batches_and_leaves_b_crit_unbounded_without_a_positive_s_min():
    rows = _model_rows(500, 2048)
    assert bs.critical_batch_fit(rows[:2]) is None and bs.critical_batch_fit(None) is None
    perfect = [{"batch size": b, "steps to target": 4_096_000 / b, "resolution (steps)": 10} for b in (256, 1024, 4096)]
    fit = bs.critical_batch_fit(perfect)
    assert not fit.bends and math.isinf(fit.b_crit) and math.isinf(fit.b_crit_range[1])
    back = compare.Estimate.from_dict(json.loads(json.dumps(fit.to_dict()))["estimates"][1])
    assert math.isinf(back.value) and math.isinf(back.high)


def test_fieller_range_is_bounded_only_when_the_denominator_is_resolved():
    assert bs.fieller(10.0, 1000.0, 0.0, 0.0, 0.0, 2.0) == pytest.approx((100.0, 100.0))
    lo, hi = bs.fieller(10.0, 1000.0, 4.0, 100.0, 0.0, 2.0)  # a = 10 +/- 2: resolved at 2 s.e.
    assert lo < 100 < hi < math.inf
    lo, hi = bs.fieller(10.0, 1000.0, 36.0, 100.0, 0.0, 2.0)  # a = 10 +/- 6: 0 lies within 2 s.e.
    assert math.isinf(hi) and 0 < lo < 100
