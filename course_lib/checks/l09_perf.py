"""Exercise 09: how much of DDP's bucketed all-reduce backward hides."""

from __future__ import annotations

from typing import Callable

from ..perf.model import bucket_overlap
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

# (ready times of the buckets, their all-reduce times), seconds
_OVERLAP_CASES = [
    ([1.0, 3.0], [1.5, 1.5]),  # the first hidden, the second sticks out
    ([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]),  # communication slower than backward: a queue forms
    ([5.0], [2.0]),  # one bucket, ready at the end: nothing hidden
    ([1.0, 2.0, 3.0], [0.5, 0.5, 0.5]),  # fast links: only the last bucket's time shows
    ([0.5, 1.0, 4.0], [3.0, 0.1, 0.1]),  # a slow first bucket finishes before the last is ready
    ([2.0, 2.0], [1.0, 1.0]),  # two buckets ready together
    ([1.0, 2.0], [0.0, 0.0]),  # free communication
]


def check_bucket_overlap(fn: Callable) -> CheckResult:
    """``fn(ready_s, comm_s) -> exposed seconds``: the all-reduce time backward does not hide (lesson 09)."""

    def case(ready, comm):
        def run():
            expected = bucket_overlap(ready, comm)[1]
            got = as_float_value(call_learner(fn, list(ready), list(comm)), learner_label(fn))
            if not is_close(got, expected, rtol=1e-9, atol=1e-12):
                hint = ""
                if is_close(got, sum(comm)):
                    hint = "\nhint: that is all of the communication, as if nothing overlapped with backward."
                elif is_close(got, comm[-1]):
                    hint = ("\nhint: that is the last bucket's all-reduce alone; when the links are slower than "
                            "backward, earlier all-reduces are still running when the last bucket is ready.")
                elif got < 0:
                    hint = "\nhint: exposed time is never negative: a fully hidden all-reduce costs 0."
                raise Mismatch(f"expected {expected:.6g} s, got {got:.6g} s{hint}")
        return run

    cases = [(f"ready_s={r}, comm_s={c}", case(r, c)) for r, c in _OVERLAP_CASES]
    return finish_result(run_cases("check_bucket_overlap", fn, cases))
