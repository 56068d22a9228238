"""Exercise 13: how much gradient accumulation hides a slow link between nodes (lesson 13).

The learner's ``accumulation_to_hide(compute_s_per_sample, grad_bytes, micro_batch, near, far, hidden_at, ks)``
is compared with :func:`reference` (lesson 09's view of a step: ``k * b`` samples of compute, then one ring
all-reduce of the gradients over 4 ranks, as lesson 13's model prices it), on links where the answer is k = 1,
a k in between, and none.
"""

from __future__ import annotations

from typing import Callable

from ..comm.cost import ring_allreduce_time
from .harness import CheckResult, Mismatch, call_learner, finish_result, run_cases

KS = (1, 2, 4, 8, 16, 32, 64)


def reference(compute_s_per_sample, grad_bytes, micro_batch, near, far, hidden_at, ks, world_size: int = 4):
    """The first k of ``ks`` where W nodes x 1 reach ``hidden_at`` of 1 node x W's throughput, else None."""
    for k in ks:
        compute = k * micro_batch * compute_s_per_sample
        near_step = compute + ring_allreduce_time(grad_bytes, world_size, *near)
        far_step = compute + ring_allreduce_time(grad_bytes, world_size, *far)
        if near_step / far_step >= hidden_at:  # the same samples per step: the throughput ratio
            return k
    return None
NEAR = (20e-6, 1e-9)  # within a node: 20 us per message, 1 GB/s
CASES = [
    ("a 100 Mbit/s link, NeuMF's gradients, 1.5 ms a sample", 1.5e-3, 617_604, 64, NEAR, (100e-6, 8 / 100e6), 0.8),
    ("a 1 Gbit/s link and 0.1 ms a sample", 1e-4, 617_604, 64, NEAR, (100e-6, 8 / 1e9), 0.8),
    ("the far link as fast as the near one: k = 1 already", 1e-3, 617_604, 64, NEAR, NEAR, 0.8),
    ("a 10 Mbit/s link and a cheap model: no k of ks hides it", 1e-6, 617_604, 64, NEAR, (1e-3, 8 / 10e6), 0.8),
    ("a stricter bar: 95 %", 1.5e-3, 617_604, 64, NEAR, (100e-6, 8 / 100e6), 0.95),
]


def check_accumulation_to_hide(fn: Callable) -> CheckResult:
    """``fn(compute_s_per_sample, grad_bytes, micro_batch, near, far, hidden_at, ks) -> k or None``."""
    name = "check_accumulation_to_hide"

    def case(c, s, b, near, far, hidden_at):
        def run():
            got = call_learner(fn, c, s, b, near, far, hidden_at, KS)
            want = reference(c, s, b, near, far, hidden_at, KS)
            if got == want:
                return
            hint = ""
            if want is None:
                hint = " hint: return None when no k of ks reaches hidden_at"
            elif got is not None and got > want:
                hint = (" hint: the step of 4 nodes x 1 and of 1 node x 4 both grow with k; compare their throughputs "
                        "(samples per second), and return the FIRST k whose ratio is at least hidden_at")
            else:
                hint = (" hint: a step is k * micro_batch * compute_s_per_sample plus one ring all-reduce of "
                        "grad_bytes over 4 ranks: 2 (p-1) alpha + 2 (p-1)/p n beta, with near's (alpha, beta) in "
                        "one node and far's between nodes")
            raise Mismatch(f"expected {want!r}, got {got!r}.{hint}")
        return run

    return finish_result(run_cases(name, fn, [(label, case(*args)) for label, *args in CASES]))
