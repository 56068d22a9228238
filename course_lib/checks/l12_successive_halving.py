"""Exercise 12: synchronous successive halving on recorded learning curves (lesson 12).

The learner's ``successive_halving(curves, min_resource, reduction_factor) -> (best, spent)`` is
compared with :func:`course_lib.optuna_search.successive_halving` on curves where the order at the first
rung differs from the order at the end (a late bloomer that a cut loses), numbers of
configurations that do not divide by the reduction factor, ties, and a ``min_resource`` of 2.
"""

from __future__ import annotations

import random
from typing import Callable

from ..optuna_search import successive_halving as reference
from .harness import CheckResult, call_learner, finish_result, Mismatch, run_cases


def _curves(n: int, R: int, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        start, slope = rng.random() * 0.5, rng.random() * 0.1
        out.append([round(start + slope * r + rng.random() * 0.02, 4) for r in range(1, R + 1)])
    return out


CASES = [
    ("9 configurations, 9 units, eta 3", _curves(9, 9, 1), 1, 3),
    ("10 configurations (not a power of eta), 9 units, eta 3", _curves(10, 9, 2), 1, 3),
    ("27 configurations, 27 units, eta 3", _curves(27, 27, 3), 1, 3),
    ("8 configurations, 8 units, eta 2", _curves(8, 8, 4), 1, 2),
    (
        "a late bloomer: best at the end, worst at the first rung",
        [[0.1, 0.2, 0.9], [0.5, 0.5, 0.5], [0.4, 0.4, 0.4]],
        1,
        3,
    ),
    ("ties at the rung: the lower index goes on", [[0.5, 0.5, 0.5], [0.5, 0.6, 0.7], [0.2, 0.2, 0.2]], 1, 3),
    ("min_resource 2: the first rung is at 2 units", _curves(6, 8, 5), 2, 2),
    ("one configuration: nothing to cut", _curves(1, 4, 6), 1, 2),
]


def check_successive_halving(fn: Callable) -> CheckResult:
    """``fn(curves, min_resource, reduction_factor) -> (best index, resource spent)`` against the course's."""
    name = "check_successive_halving"

    def case(curves, r, eta):
        def run():
            got = call_learner(fn, [list(c) for c in curves], r, eta)
            want = reference(curves, r, eta)
            try:
                best, spent = got
            except (TypeError, ValueError):
                raise Mismatch(f"returned {got!r}; expected a pair (best index, resource spent), e.g. {want}") from None
            if (int(best), int(spent)) == want:
                return
            hint = ""
            if int(best) == want[0]:
                full = len(curves) * len(curves[0])
                hint = (" hint: a cut configuration spent the resource up to the rung where it was cut, not all "
                        "of it" if int(spent) == full else " hint: count what each configuration trained: the "
                        "ones cut at a rung up to that rung, the last survivors to the end")
            elif int(best) == max(range(len(curves)), key=lambda i: (curves[i][0], -i)):
                hint = " hint: the winner is the best survivor at the END, after training to the last unit"
            else:
                hint = (" hint: at each rung keep max(1, n_alive // reduction_factor) configurations with the "
                        "HIGHEST value at that rung's resource (curves[i][rung - 1]), ties to the lower index; "
                        "the next rung is the current one times reduction_factor, while it is below the curve length")
            raise Mismatch(f"expected (best, spent) = {want}, got ({best!r}, {spent!r}).{hint}")
        return run

    return finish_result(run_cases(name, fn, [(label, case(c, r, eta)) for label, c, r, eta in CASES]))
