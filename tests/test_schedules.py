"""Scaling rules and lr schedules (course_lib.optim.schedules): endpoints, shape, LambdaLR."""

import math
import pickle

import pytest
import torch

from course_lib.optim import (
    DECAY_KINDS,
    WARMUP_KINDS,
    linear_scaled_lr,
    lr_at,
    lr_factor,
    make_lambda,
    sqrt_scaled_lr,
    warmup_lr,
)

PEAK = 0.4
WARMUP = 10
TOTAL = 50


def schedule(**kw):
    return dict(dict(peak_lr=PEAK, warmup_steps=WARMUP, total_steps=TOTAL), **kw)


# --- scaling rules -----------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 4, 32])
def test_linear_rule_k_times_batch_gives_k_times_lr(k):
    assert linear_scaled_lr(0.1, 256 * k, 256) == pytest.approx(0.1 * k)


@pytest.mark.parametrize("k", [1, 2, 4, 32])
def test_sqrt_rule_k_times_batch_gives_sqrt_k_times_lr(k):
    assert sqrt_scaled_lr(0.1, 256 * k, 256) == pytest.approx(0.1 * math.sqrt(k))


@pytest.mark.parametrize("rule", [linear_scaled_lr, sqrt_scaled_lr])
@pytest.mark.parametrize("args", [(-0.1, 512, 256), (0.1, 0, 256), (0.1, 512, -1), (0.1, 512.0, 256)])
def test_scaling_rules_reject_bad_inputs(rule, args):
    with pytest.raises(ValueError):
        rule(*args)


# --- warmup --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", WARMUP_KINDS)
def test_warmup_endpoints(kind):
    start = 0.1
    assert warmup_lr(0, WARMUP, PEAK, kind=kind, start_factor=start) == pytest.approx(start * PEAK)
    assert warmup_lr(WARMUP, WARMUP, PEAK, kind=kind, start_factor=start) == pytest.approx(PEAK)
    assert warmup_lr(WARMUP + 5, WARMUP, PEAK, kind=kind, start_factor=start) == pytest.approx(PEAK)


def test_warmup_default_start_factors():
    assert warmup_lr(0, WARMUP, PEAK) == 0.0  # linear from 0, as in BERT
    assert warmup_lr(0, WARMUP, PEAK, kind="exponential") == pytest.approx(0.01 * PEAK)


def test_linear_warmup_midpoint_and_exponential_is_geometric():
    assert warmup_lr(5, 10, 1.0, start_factor=0.0) == pytest.approx(0.5)
    lrs = [warmup_lr(s, 10, 1.0, kind="exponential", start_factor=0.01) for s in range(11)]
    ratios = [b / a for a, b in zip(lrs, lrs[1:])]
    assert ratios == pytest.approx([0.01 ** (-1 / 10)] * 10)  # same factor every step


def test_warmup_of_zero_steps_is_the_peak():
    assert warmup_lr(0, 0, PEAK) == PEAK


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(step=-1),
        dict(warmup_steps=-5),
        dict(peak_lr=-0.1),
        dict(kind="cubic"),
        dict(start_factor=1.5),
        dict(start_factor=-0.1),
        dict(kind="exponential", start_factor=0.0),
    ],
)
def test_warmup_rejects_bad_inputs(kwargs):
    args = dict(step=3, warmup_steps=WARMUP, peak_lr=PEAK)
    args.update(kwargs)
    with pytest.raises(ValueError):
        warmup_lr(**args)


# --- composed schedule ---------------------------------------------------------------


@pytest.mark.parametrize("warmup", WARMUP_KINDS)
@pytest.mark.parametrize("decay", DECAY_KINDS)
def test_schedule_endpoints(warmup, decay):
    end = 0.0 if decay == "constant" else 0.01
    kw = schedule(warmup=warmup, decay=decay, end_lr=end, power=2.0, start_factor=0.05)
    assert lr_at(0, **kw) == pytest.approx(0.05 * PEAK)
    assert lr_at(WARMUP, **kw) == pytest.approx(PEAK)
    expected_end = PEAK if decay == "constant" else end
    assert lr_at(TOTAL, **kw) == pytest.approx(expected_end)
    assert lr_at(TOTAL + 100, **kw) == pytest.approx(expected_end)  # holds after the plan


@pytest.mark.parametrize("warmup", WARMUP_KINDS)
@pytest.mark.parametrize("decay", DECAY_KINDS)
def test_schedule_rises_then_falls(warmup, decay):
    kw = schedule(warmup=warmup, decay=decay, end_lr=0.001, power=0.5)
    lrs = [lr_at(s, **kw) for s in range(TOTAL + 5)]
    rise, fall = lrs[: WARMUP + 1], lrs[WARMUP:]
    assert all(a <= b for a, b in zip(rise, rise[1:])), "warmup must be non-decreasing"
    assert all(a >= b for a, b in zip(fall, fall[1:])), "decay must be non-increasing"
    assert max(lrs) == pytest.approx(PEAK)


def test_polynomial_and_cosine_midpoints():
    mid = WARMUP + (TOTAL - WARMUP) // 2
    assert lr_at(mid, **schedule(decay="polynomial", power=1.0)) == pytest.approx(PEAK / 2)
    assert lr_at(mid, **schedule(decay="polynomial", power=2.0)) == pytest.approx(PEAK / 4)
    assert lr_at(mid, **schedule(decay="cosine", end_lr=0.2)) == pytest.approx(0.3)


def test_warmup_as_long_as_the_run():
    kw = dict(peak_lr=PEAK, warmup_steps=10, total_steps=10, decay="cosine", end_lr=0.1)
    assert lr_at(10, **kw) == pytest.approx(PEAK)
    assert lr_at(11, **kw) == pytest.approx(0.1)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(step=-1),
        dict(warmup_steps=60),  # longer than total_steps
        dict(total_steps=-1, warmup_steps=0),
        dict(peak_lr=-1.0),
        dict(decay="step"),
        dict(warmup="cosine"),
        dict(decay="polynomial", power=0.0),
        dict(decay="cosine", end_lr=1.0),  # above the peak
        dict(end_lr=-0.1),
        dict(step=float("nan")),
    ],
)
def test_schedule_rejects_bad_inputs(kwargs):
    kw = schedule()
    step = kwargs.pop("step", 3)
    kw.update(kwargs)
    with pytest.raises(ValueError):
        lr_at(step, **kw)


# --- LambdaLR ------------------------------------------------------------------------


@pytest.mark.parametrize("warmup,decay", [("linear", "polynomial"), ("exponential", "cosine")])
def test_lambdalr_gives_the_same_lrs_as_by_hand(warmup, decay):
    kw = schedule(warmup=warmup, decay=decay, end_lr=0.004, power=2.0)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(**kw))
    seen = []
    for _ in range(TOTAL + 3):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([lr_at(s, **kw) for s in range(TOTAL + 3)])


def test_lr_factor_is_lr_over_peak_and_pickles():
    kw = schedule(decay="cosine")
    factor = lr_factor(**kw)
    assert make_lambda is lr_factor
    assert factor(WARMUP) == pytest.approx(1.0)
    assert factor(WARMUP // 2) == pytest.approx(lr_at(WARMUP // 2, **kw) / PEAK)
    # spawned workers receive their schedule by pickling
    assert pickle.loads(pickle.dumps(factor))(TOTAL) == pytest.approx(0.0)


def test_lr_factor_checks_hyperparameters_when_made():
    with pytest.raises(ValueError, match="warmup_steps"):
        lr_factor(**schedule(warmup_steps=TOTAL + 1))
    with pytest.raises(ValueError, match="peak_lr"):
        lr_factor(**schedule(peak_lr=0.0))
