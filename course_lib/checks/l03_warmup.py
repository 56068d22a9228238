"""Exercise 03: a warmup schedule."""

from __future__ import annotations

import functools
from typing import Callable

import torch
from torch import nn

from ..optim import lr_at
from .harness import (
    CheckResult,
    finish_result,
    Mismatch,
    NotImplementedYet,
    LearnerError,
    call_learner,
    learner_label,
    run_cases,
    as_float_value,
    is_close,
)


# --------------------------------------------------------------------------- 03: warmup


def _reference_factor(step, warmup_steps, total_steps, decay):
    """The course's own factor: ``lr_at`` with a peak of 1."""
    return lr_at(step, peak_lr=1.0, warmup_steps=warmup_steps, total_steps=total_steps, decay=decay)


def _warmup_hint(got, expected, s, warmup_steps, decay, n_steps) -> str:
    """A hint for the usual mistakes: a ramp one step ahead, or a wrong cosine progress."""
    if all(is_close(got[t], expected[t + 1]) for t in range(min(warmup_steps, n_steps - 1))):
        return ("\nhint: your ramp is one step ahead: the factor is 0 at step 0 and reaches 1 exactly "
                "at step == warmup_steps.")
    if s > warmup_steps and decay == "cosine":
        return ("\nhint: after warmup, progress = (step - warmup_steps) / (total_steps - warmup_steps), "
                "capped at 1, and the factor is (1 + cos(pi * progress)) / 2.")
    return ""


def _schedule_case(fn: Callable, warmup_steps, total_steps, decay):
    """A case: ``fn``'s factor at every step (and a few past the end) against the reference."""
    def run():
        steps = range(total_steps + 4)  # a few steps past the end: the factor stays at its end value
        expected = [_reference_factor(s, warmup_steps, total_steps, decay) for s in steps]
        got = [as_float_value(call_learner(fn, s, warmup_steps, total_steps, decay),
                              f"{learner_label(fn)} at step {s}")
               for s in steps]
        bad = [s for s in steps if not is_close(got[s], expected[s], atol=1e-12)]
        if bad:
            s = bad[0]
            hint = _warmup_hint(got, expected, s, warmup_steps, decay, len(steps))
            raise Mismatch(f"at step {s} expected {expected[s]:.6g}, got {got[s]:.6g}{hint}")
    return run


def _lambdalr_lrs(fn: Callable, peak_lr, warmup_steps, total_steps) -> list:
    """The optimizer's lr at each step with ``fn`` as ``LambdaLR``'s ``lr_lambda`` (cosine decay)."""
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=peak_lr)
    factor = functools.partial(fn, warmup_steps=warmup_steps, total_steps=total_steps, decay="cosine")
    try:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        got = []
        for _ in range(total_steps + 2):
            got.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
    except NotImplementedError as exc:
        raise NotImplementedYet() from exc
    except TypeError as exc:
        raise Mismatch(f"LambdaLR could not call it as lr_lambda(step) with warmup_steps, total_steps and decay "
                       f"given by keyword: {exc}") from exc
    except Exception as exc:  # noqa: BLE001
        raise LearnerError(exc) from exc
    return got


def _lambdalr_case(fn: Callable):
    """A case: ``fn`` used as ``LambdaLR``'s ``lr_lambda`` gives the reference lr at every step."""
    def run():
        peak_lr, warmup_steps, total_steps = 0.4, 5, 20
        for s, lr in enumerate(_lambdalr_lrs(fn, peak_lr, warmup_steps, total_steps)):
            expected = peak_lr * _reference_factor(s, warmup_steps, total_steps, "cosine")
            if not is_close(float(lr), expected):
                raise Mismatch(f"optimizer lr at step {s}: expected {expected:.6g}, got {float(lr):.6g}")
    return run


def check_warmup_factor(fn: Callable) -> CheckResult:
    """``fn(step, warmup_steps, total_steps, decay) -> factor``: linear warmup from 0, then constant or cosine
    (lesson 03).

    Reference: ``course_lib.optim.lr_at(step, peak_lr=1, ..., warmup="linear", end_lr=0)``.
    The last case uses ``fn`` as ``LambdaLR``'s ``lr_lambda`` (through ``functools.partial``).
    """
    def schedule_case(warmup_steps, total_steps, decay):
        return _schedule_case(fn, warmup_steps, total_steps, decay)

    cases = [
        ("linear warmup over 5 steps, then constant (total 20)", schedule_case(5, 20, "constant")),
        ("linear warmup over 5 steps, then cosine to 0 at step 20", schedule_case(5, 20, "cosine")),
        ("no warmup (warmup_steps=0), cosine over 10 steps", schedule_case(0, 10, "cosine")),
        ("a one-step warmup, then cosine to step 8", schedule_case(1, 8, "cosine")),
        ("warmup over the whole run (warmup_steps == total_steps == 6)", schedule_case(6, 6, "cosine")),
        ("used as LambdaLR's lr_lambda: SGD(lr=0.4), warmup 5, cosine to step 20", _lambdalr_case(fn)),
    ]
    return finish_result(run_cases("check_warmup_factor", fn, cases))
