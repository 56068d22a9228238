"""Learning-rate scaling rules and schedules (lessons 02_linear_scaling and 03_warmup).

Everything here is a pure function of plain numbers, named after the papers' terms:

- scaling rules say what peak lr goes with a bigger batch:
  ``linear_scaled_lr`` (Goyal et al. 2017, "Accurate, Large Minibatch SGD") and
  ``sqrt_scaled_lr`` (Krizhevsky 2014, "One weird trick..."; Hoffer et al. 2017,
  "Train longer, generalize better");
- a schedule says how the lr gets to that peak and away from it: a warmup
  (``warmup_lr``: linear or exponential) followed by a decay (constant, polynomial or
  cosine), composed by ``lr_at``;
- ``lr_factor`` wraps the schedule as the multiplicative factor that
  ``torch.optim.lr_scheduler.LambdaLR`` expects (factor = lr / peak_lr).

Steps count optimizer updates from 0. The schedule is continuous: step 0 is the start
of warmup, ``step == warmup_steps`` is the peak, ``step == total_steps`` is the end of
the decay, and later steps stay at the end value (a run that goes on past its plan
keeps a sane lr instead of failing mid-training).
"""

from __future__ import annotations

import functools
import math
from numbers import Integral, Real
from typing import Callable

WARMUP_KINDS = ("linear", "exponential")
DECAY_KINDS = ("constant", "polynomial", "cosine")

# Where the warmup starts, as a fraction of the peak, when the caller does not say.
# A linear ramp may start at 0 (as BERT's schedule does); a geometric ramp cannot,
# so the exponential one starts two decades below the peak.
DEFAULT_START_FACTOR = {"linear": 0.0, "exponential": 0.01}


def _check_nonnegative(name: str, value) -> None:
    if not isinstance(value, Real) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _check_batch(name: str, value) -> None:
    if not isinstance(value, Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def linear_scaled_lr(base_lr: float, batch_size: int, base_batch_size: int) -> float:
    """Goyal et al. 2017 linear scaling rule: k times the batch, k times the lr (lesson 02_linear_scaling)."""
    _check_nonnegative("base_lr", base_lr)
    _check_batch("batch_size", batch_size)
    _check_batch("base_batch_size", base_batch_size)
    return base_lr * batch_size / base_batch_size


def sqrt_scaled_lr(base_lr: float, batch_size: int, base_batch_size: int) -> float:
    """Krizhevsky 2014 / Hoffer et al. 2017 square-root rule: k x the batch, sqrt(k) x the lr
    (lesson 02_linear_scaling)."""
    _check_nonnegative("base_lr", base_lr)
    _check_batch("batch_size", batch_size)
    _check_batch("base_batch_size", base_batch_size)
    # sqrt(k) keeps the variance of the update the same as at the base batch
    # (the gradient noise of a mean over k times more samples shrinks by 1/k).
    return base_lr * math.sqrt(batch_size / base_batch_size)


LR_RULES = {"linear": linear_scaled_lr, "sqrt": sqrt_scaled_lr}
LR_SCALINGS = ("none", *LR_RULES)  # "none": the base lr is used as it is, whatever the batch


def scaled_lr(rule: str, base_lr: float, batch_size: int, base_batch_size: int) -> float:
    """The peak lr at ``batch_size`` from ``base_lr`` at ``base_batch_size`` by ``rule``
    ("linear" | "sqrt" | "none"): the one place a run's lr rule is applied."""
    if rule not in LR_SCALINGS:
        raise ValueError(f"lr scaling rule {rule!r}; choose one of {LR_SCALINGS}")
    return base_lr if rule == "none" else LR_RULES[rule](base_lr, batch_size, base_batch_size)


def _resolve_start_factor(kind: str, start_factor: float | None) -> float:
    if kind not in WARMUP_KINDS:
        raise ValueError(f"unknown warmup kind {kind!r}; choose one of {WARMUP_KINDS}")
    if start_factor is None:
        return DEFAULT_START_FACTOR[kind]
    _check_nonnegative("start_factor", start_factor)
    if start_factor > 1:
        raise ValueError(f"start_factor is a fraction of the peak lr and must be <= 1, got {start_factor!r}")
    if kind == "exponential" and start_factor == 0:
        raise ValueError(
            "exponential warmup needs start_factor > 0 (a geometric ramp cannot start at 0), "
            "e.g. start_factor=0.01"
        )
    return start_factor


def warmup_lr(
    step: int,
    warmup_steps: int,
    peak_lr: float,
    kind: str = "linear",
    start_factor: float | None = None,
) -> float:
    """Gradual warmup from ``start_factor * peak_lr`` at step 0 to ``peak_lr`` at ``warmup_steps`` (lesson 03_warmup).

    ``kind="linear"`` adds the same amount each step (Goyal et al. 2017 ramp from the
    base lr, i.e. ``start_factor = 1/k``, to ``k`` times it); ``kind="exponential"``
    multiplies by the same factor each step, so it spends longer at small lrs.
    ``start_factor=None`` means 0 for linear and 0.01 for exponential. Steps at or
    past ``warmup_steps`` give ``peak_lr``.
    """
    _check_nonnegative("step", step)
    _check_nonnegative("warmup_steps", warmup_steps)
    _check_nonnegative("peak_lr", peak_lr)
    start_factor = _resolve_start_factor(kind, start_factor)
    if step >= warmup_steps:
        return float(peak_lr)
    progress = step / warmup_steps  # in [0, 1)
    if kind == "linear":
        factor = start_factor + (1.0 - start_factor) * progress
    else:
        factor = start_factor ** (1.0 - progress)
    return peak_lr * factor


def _decay_factor(progress: float, decay: str, power: float) -> float:
    """How much of the (peak - end) gap is left at ``progress`` in [0, 1] of the decay."""
    if decay == "constant":
        return 1.0
    if decay == "polynomial":
        # power=1 is the linear decay of BERT's recipe; power=2 is the LARS papers' choice.
        return (1.0 - progress) ** power
    # Half a cosine period (Loshchilov & Hutter 2017, SGDR, without restarts).
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def lr_at(
    step: int,
    *,
    peak_lr: float,
    warmup_steps: int,
    total_steps: int,
    warmup: str = "linear",
    decay: str = "constant",
    power: float = 1.0,
    end_lr: float = 0.0,
    start_factor: float | None = None,
) -> float:
    """The lr at ``step``: ``warmup_lr`` to ``warmup_steps``, then decay to ``end_lr`` at ``total_steps``
    (lesson 03_warmup).

    ``decay`` is ``"constant"`` (stay at the peak; ``power`` and ``end_lr`` unused),
    ``"polynomial"`` (``end_lr + (peak_lr - end_lr) * (1 - progress) ** power``) or
    ``"cosine"`` (``end_lr + (peak_lr - end_lr) * (1 + cos(pi * progress)) / 2``),
    where ``progress = (step - warmup_steps) / (total_steps - warmup_steps)``, clipped to 1.
    """
    _check_nonnegative("step", step)
    _check_nonnegative("warmup_steps", warmup_steps)
    _check_nonnegative("total_steps", total_steps)
    _check_nonnegative("peak_lr", peak_lr)
    _check_nonnegative("end_lr", end_lr)
    _resolve_start_factor(warmup, start_factor)
    if warmup_steps > total_steps:
        raise ValueError(
            f"warmup_steps={warmup_steps} is more than total_steps={total_steps}; "
            "the warmup is part of the run, so it cannot be longer than the run"
        )
    if decay not in DECAY_KINDS:
        raise ValueError(f"unknown decay {decay!r}; choose one of {DECAY_KINDS}")
    if decay != "constant":
        if end_lr > peak_lr:
            raise ValueError(f"end_lr={end_lr} is above peak_lr={peak_lr}; a decay must go down")
        if decay == "polynomial" and (not isinstance(power, Real) or not power > 0):
            raise ValueError(f"power must be > 0 for a polynomial decay, got {power!r}")

    if step <= warmup_steps:
        return warmup_lr(step, warmup_steps, peak_lr, kind=warmup, start_factor=start_factor)
    if decay == "constant":
        return float(peak_lr)
    decay_steps = total_steps - warmup_steps
    progress = 1.0 if decay_steps == 0 else min(1.0, (step - warmup_steps) / decay_steps)
    return end_lr + (peak_lr - end_lr) * _decay_factor(progress, decay, power)


def _factor(step: int, *, peak_lr: float, **schedule) -> float:
    return lr_at(step, peak_lr=peak_lr, **schedule) / peak_lr


def lr_factor(
    *,
    peak_lr: float,
    warmup_steps: int,
    total_steps: int,
    warmup: str = "linear",
    decay: str = "constant",
    power: float = 1.0,
    end_lr: float = 0.0,
    start_factor: float | None = None,
) -> Callable[[int], float]:
    """``step -> lr_at(step, ...) / peak_lr``: the factor for ``LambdaLR`` when the optimizer's lr is peak_lr
    (lesson 03_warmup).

    Use: ``LambdaLR(torch.optim.SGD(params, lr=peak_lr), lr_factor(peak_lr=peak_lr, ...))``.

    Returned as a ``functools.partial`` of a module-level function, so it pickles into
    spawned workers (a lambda or closure would not).
    """
    _check_nonnegative("peak_lr", peak_lr)
    if peak_lr == 0:
        raise ValueError("peak_lr must be > 0 for lr_factor (the factor is lr / peak_lr)")
    schedule = dict(
        warmup_steps=warmup_steps,
        total_steps=total_steps,
        warmup=warmup,
        decay=decay,
        power=power,
        end_lr=end_lr,
        start_factor=start_factor,
    )
    # Check the hyperparameters now, where the caller made them, not at the first
    # scheduler step deep inside a training loop.
    lr_at(0, peak_lr=peak_lr, **schedule)
    lr_at(total_steps, peak_lr=peak_lr, **schedule)
    return functools.partial(_factor, peak_lr=peak_lr, **schedule)


# The same thing under the name some lessons use for LambdaLR's argument.
make_lambda = lr_factor
