"""Exercise 02: the linear and square-root scaling rules."""

from __future__ import annotations

import math
from typing import Callable

from ..optim import linear_scaled_lr
from ..optim import sqrt_scaled_lr
from .harness import (
    CheckResult,
    finish_result,
    Mismatch,
    call_learner,
    learner_label,
    run_cases,
    as_float_value,
    is_close,
)


# --------------------------------------------------------------------------- 02: scaling rules

_SCALING_CASES = [  # (base_lr, batch_size, base_batch_size)
    (0.1, 256, 256),
    (0.1, 512, 256),
    (0.1, 8192, 256),
    (0.001, 65536, 1024),
    (0.1, 768, 256),
    (0.1, 128, 256),
    (0.0, 1024, 256),
    (0.02, 3072, 512),  # a base batch other than 256 and 1024, an lr other than 0.1 and 0.001
]


def _check_scaling_rule(name: str, fn, reference, other_rule: str) -> CheckResult:
    def case(base_lr, batch, base_batch):
        def run():
            expected = reference(base_lr, batch, base_batch)
            got = as_float_value(call_learner(fn, base_lr, batch, base_batch), learner_label(fn))
            if not is_close(got, expected, rtol=1e-9):
                k = batch / base_batch
                hint = ""
                if other_rule == "sqrt" and is_close(got, base_lr * math.sqrt(k)):
                    hint = ("\nhint: that is the square-root rule; the linear rule multiplies the lr by "
                            "k = batch / base.")
                elif other_rule == "linear" and is_close(got, base_lr * k):
                    hint = "\nhint: that is the linear rule (lr x k); the square-root rule multiplies by sqrt(k)."
                elif is_close(got, base_lr / k) or is_close(got, base_lr / math.sqrt(k)):
                    hint = "\nhint: k is batch_size / base_batch_size: a bigger batch gets a bigger lr."
                raise Mismatch(f"expected {expected:.6g}, got {got:.6g}{hint}")
        return run

    cases = [(f"base_lr={lr:g}, batch_size={b}, base_batch_size={bb} (k={b / bb:g})", case(lr, b, bb))
             for lr, b, bb in _SCALING_CASES]
    return finish_result(run_cases(name, fn, cases))


def check_linear_scaled_lr(fn: Callable) -> CheckResult:
    """``fn(base_lr, batch_size, base_batch_size) -> lr``: the linear scaling rule (lesson 02)."""
    return _check_scaling_rule("check_linear_scaled_lr", fn, linear_scaled_lr, "sqrt")


def check_sqrt_scaled_lr(fn: Callable) -> CheckResult:
    """``fn(base_lr, batch_size, base_batch_size) -> lr``: the square-root scaling rule (lesson 02)."""
    return _check_scaling_rule("check_sqrt_scaled_lr", fn, sqrt_scaled_lr, "linear")
