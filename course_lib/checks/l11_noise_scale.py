"""Exercise 11: the two-batch estimator of the gradient noise scale (McCandlish et al. 2018, appendix A).

The learner writes ``fn(sq_small, sq_big, b_small, b_big) -> (b_simple, grad_sq_norm, trace_cov)``
from the squared gradient norms measured at two batch sizes, one pair per repeat. The check
compares with :func:`course_lib.batch_science.two_batch_estimates` on exact expectations
(one repeat), on a batch of one, on repeats whose ratio of means differs from the mean of
ratios (the two are averaged *before* dividing), and on norms measured on linear least
squares, whose noise scale is known in closed form.
"""

from __future__ import annotations

from typing import Callable

from .. import batch_science as bs
from .harness import (
    CheckResult,
    as_float_value,
    call_learner,
    is_close,
    finish_result,
    learner_label,
    Mismatch,
    run_cases,
)


def reference(sq_small, sq_big, b_small: int, b_big: int) -> tuple[float, float, float]:
    """The course's answer: estimates per repeat, averaged, then the ratio."""
    pairs = [bs.two_batch_estimates(s, b, b_small, b_big) for s, b in zip(sq_small, sq_big)]
    g2 = sum(p[0] for p in pairs) / len(pairs)
    trace = sum(p[1] for p in pairs) / len(pairs)
    return trace / g2, g2, trace


def _raw(sq_small: float, sq_big: float, b_small: float, b_big: float) -> tuple[float, float, float]:
    """The formulas without their argument checks (to recognize a swapped pair in a wrong answer)."""
    g2 = (b_big * sq_big - b_small * sq_small) / (b_big - b_small)
    trace = (sq_small - sq_big) / (1.0 / b_small - 1.0 / b_big)
    return trace / g2, g2, trace


def _least_squares_norms(repeats: int, b_small: int, b_big: int, seed: int = 0):
    """Measured ``|G_B|^2`` on least squares (d=6, noise 0.5, |delta| = 1), and the closed-form B_simple."""
    model, loss_fn, sample, exact = bs.least_squares_problem(dim=6, noise=0.5, delta_norm=1.0, seed=seed)
    small = [bs.grad_sq_norm(model, loss_fn, sample(b_small)) for _ in range(repeats)]
    big = [bs.grad_sq_norm(model, loss_fn, sample(b_big)) for _ in range(repeats)]
    return small, big, exact["b_simple"]


def check_noise_scale(fn: Callable) -> CheckResult:
    """``fn(sq_small, sq_big, b_small, b_big) -> (b_simple, grad_sq_norm, trace_cov)``: lists of
    squared gradient norms (one per repeat) at two batch sizes in, the simple noise scale out."""

    def answer(sq_small, sq_big, b_small, b_big):
        got = call_learner(fn, list(sq_small), list(sq_big), b_small, b_big)
        if not (isinstance(got, (tuple, list)) and len(got) == 3):
            raise Mismatch(f"{learner_label(fn)} returned {got!r}; "
                           "expected three numbers (b_simple, grad_sq_norm, trace_cov)")
        return tuple(as_float_value(v, f"{learner_label(fn)}") for v in got)

    def compare(sq_small, sq_big, b_small, b_big, rtol=1e-6):
        want = reference(sq_small, sq_big, b_small, b_big)
        got = answer(sq_small, sq_big, b_small, b_big)
        names = ("b_simple", "grad_sq_norm", "trace_cov")
        for i in (1, 2, 0):  # the two estimates first: a wrong ratio follows from a wrong part
            name, w, g = names[i], want[i], got[i]
            if not is_close(g, w, rtol=rtol):
                hint = ""
                swapped = _raw(sq_small[0], sq_big[0], b_big, b_small) if len(sq_small) == 1 else None
                means = [bs.two_batch_estimates(s, b, b_small, b_big) for s, b in zip(sq_small, sq_big)]
                mean_of_ratios = sum(t / g2 for g2, t in means) / len(means)
                if name == "b_simple" and is_close(g, mean_of_ratios, rtol=1e-6) and len(means) > 1:
                    hint = (
                        "\nhint: you averaged the ratio over the repeats. Average |G|^2 and tr(Sigma) over the "
                        "repeats first, then divide: the ratio of two noisy numbers is biased, their means are not."
                    )
                elif name == "trace_cov" and is_close(g, sum(s - b for s, b in zip(sq_small, sq_big)) / len(means)):
                    hint = "\nhint: the difference of the squared norms must be divided by (1/b_small - 1/b_big)."
                elif swapped is not None and is_close(g, swapped[names.index(name)]):
                    hint = "\nhint: b_small goes with sq_small and b_big with sq_big (you swapped the batch sizes)."
                elif name == "grad_sq_norm":
                    hint = ("\nhint: |G|^2 = (b_big |G_big|^2 - b_small |G_small|^2) / (b_big - b_small), from "
                            "E|G_B|^2 = |G|^2 + tr(Sigma) / B at both batch sizes.")
                raise Mismatch(f"{name}: expected {w:.6g}, got {g:.6g} (b_small={b_small}, b_big={b_big}, "
                                f"{len(sq_small)} repeat(s)){hint}")

    def least_squares():
        small, big, exact = _least_squares_norms(400, 2, 64)
        compare(small, big, 2, 64, rtol=1e-6)
        got = answer(small, big, 2, 64)[0]
        if abs(got / exact - 1) > 0.2:
            raise Mismatch(f"on least squares your B_simple is {got:.4g}, the closed form {exact:.4g}")

    g2, trace = 2.0, 300.0
    cases = [
        ("one repeat at the exact expectations: |G|^2 = 2, tr(Sigma) = 300, batches 8 and 128",
         lambda: compare([g2 + trace / 8], [g2 + trace / 128], 8, 128)),
        ("a batch of one against 64", lambda: compare([g2 + trace], [g2 + trace / 64], 1, 64)),
        ("three noisy repeats (averaged before the ratio)",
         lambda: compare([40.0, 30.0, 55.0], [4.0, 2.5, 3.9], 8, 128)),
        ("400 repeats measured on linear least squares (closed form known)", least_squares),
    ]
    return finish_result(run_cases("check_noise_scale", fn, cases))
