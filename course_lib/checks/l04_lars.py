"""Exercise 04: the LARS trust ratio and step."""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Callable

import torch

from ..optim import LARS, lars_trust_ratio, param_groups
from .harness import (
    CheckResult,
    finish_result,
    Mismatch,
    call_learner,
    learner_label,
    run_cases,
    as_float_value,
    is_close,
    small_net,
    fixed_grads,
    trajectory,
    compare_trajectories,
    learner_stepper,
)


# --------------------------------------------------------------------------- 04: LARS


def check_lars_trust_ratio(fn: Callable) -> CheckResult:
    """``fn(w_norm, g_norm, trust_coefficient, weight_decay, eps) -> float`` against ``lars_trust_ratio``
    (lesson 04)."""
    def case(w_norm, g_norm, tc, wd, eps):
        def run():
            expected = lars_trust_ratio(w_norm, g_norm, trust_coefficient=tc, weight_decay=wd, eps=eps)
            got = as_float_value(call_learner(fn, w_norm, g_norm, tc, wd, eps), learner_label(fn))
            if not is_close(got, expected, rtol=1e-6):
                hint = ""
                if w_norm == 0 or g_norm == 0:
                    hint = ("\nhint: the zero-norm guard: when ||w|| == 0 or ||g|| == 0 the ratio is 1 (a "
                            "zero-initialized weight would otherwise get 0 and never move).")
                elif is_close(got, tc * w_norm / (g_norm + eps)):
                    hint = "\nhint: weight decay enters the denominator: ||g|| + weight_decay * ||w|| + eps."
                raise Mismatch(f"expected {expected:.6g}, got {got:.6g}{hint}")
        return run

    params = [  # (w_norm, g_norm, trust_coefficient, weight_decay, eps)
        (3.0, 0.5, 0.001, 5e-4, 1e-8),
        (12.0, 400.0, 0.02, 1e-4, 1e-8),
        (0.7, 1e-4, 0.001, 0.0, 1e-8),
        (0.0, 2.0, 0.001, 5e-4, 1e-8),
        (3.0, 0.0, 0.001, 5e-4, 1e-8),
        (0.0, 0.0, 0.001, 5e-4, 1e-8),
        (2.0, 1.0, 0.01, 1e-3, 0.5),  # an eps large enough to matter: it is added to the denominator
    ]
    cases = [(f"||w||={w:g}, ||g||={g:g}, trust_coefficient={tc:g}, weight_decay={wd:g}"
              + (" (zero norm)" if w == 0 or g == 0 else ""), case(w, g, tc, wd, eps))
             for w, g, tc, wd, eps in params]
    return finish_result(run_cases("check_lars_trust_ratio", fn, cases))


def _lars_mistakes(reference: Callable, lr: float, no_decay_lr: float | None) -> dict:
    """Trajectories of the usual LARS mistakes this case can tell apart, keyed by what each gets wrong."""
    variants = {"that applies the trust ratio to the weight_decay=0 group too (biases and norm "
                "parameters must get plain SGD with momentum)": reference(always_adapt=True)}
    if lr != 1.0 or no_decay_lr is not None:
        variants["that ignores the group's lr (as if lr were 1): multiply the update by group['lr']"] = (
            reference(lrs=(1.0, 1.0)))
    if no_decay_lr is not None:
        variants["that uses the first group's lr for every group: read group['lr'] in each group"] = (
            reference(lrs=(lr, lr)))
    return variants


def _raise_zero_norm_hint(diff: Mismatch, net, got, zero_weight: bool, zero_grad: str | None) -> None:
    """Re-raise ``diff`` with the zero-norm guard's hint when this case has a zero norm; else return."""
    zero_weight_index = [n for n, _ in net.named_parameters()].index("3.weight")
    if zero_weight and torch.count_nonzero(got[0][zero_weight_index]) == 0:
        raise Mismatch(f"{diff}\nhint: your zero-initialized weight did not move: its trust ratio "
                       "must be 1 when ||w|| == 0 (the zero-norm guard).") from None
    if zero_grad is not None:
        raise Mismatch(
            f"{diff}\nhint: in this case layer '{zero_grad}' has ||g|| == 0; its trust "
            "ratio must be 1 (the zero-norm guard), not trust_coefficient / weight_decay."
        ) from None


def check_lars_step(fn: Callable) -> CheckResult:
    """``fn(groups, state)``: one LARS step in place, against ``course_lib.optim.LARS`` (lesson 04).

    ``groups`` are optimizer-style dicts (``params``, ``lr``, ``momentum``, ``weight_decay``,
    ``trust_coefficient``, ``eps``) built by ``param_groups`` (biases and LayerNorm in a
    ``weight_decay=0`` group); ``state`` is a ``defaultdict(dict)`` keyed by parameter,
    kept across steps (for ``state[p]["momentum_buffer"]``). Called under ``torch.no_grad()``.
    """
    def case(zero_weight=False, zero_grad=None, momentum=0.9, steps=3, grad_scale=1.0, lr=1.0,
             trust_coefficient=0.02, weight_decay=5e-4, eps=1e-8, no_decay_lr=None):
        hyper = dict(lr=lr, momentum=momentum, trust_coefficient=trust_coefficient, eps=eps)

        def make_groups(net, lrs=(lr, no_decay_lr)):
            groups = [dict(g, **hyper) for g in param_groups(net, weight_decay=weight_decay)]
            if lrs[1] is not None:
                groups[1]["lr"] = lrs[1]
            groups[0]["lr"] = lrs[0]
            return groups

        def run():
            base = small_net(zero_weight)
            grads = fixed_grads(base, steps, grad_scale, seed=2, zero=zero_grad)

            def reference(lrs=(lr, no_decay_lr), **overrides):
                ref_net = copy.deepcopy(base)
                return trajectory(ref_net, LARS(make_groups(ref_net, lrs), **{**hyper, **overrides}).step, grads)

            expected = reference()
            variants = _lars_mistakes(reference, lr, no_decay_lr)
            net = copy.deepcopy(base)
            groups = make_groups(net)
            got = trajectory(net, learner_stepper(fn, groups, defaultdict(dict)), grads)
            try:
                compare_trajectories(net, groups, expected, got, variants)
            except Mismatch as diff:
                _raise_zero_norm_hint(diff, net, got, zero_weight, zero_grad)
                raise
        return run

    cases = [
        ("3 steps, weights adapted, biases and LayerNorm in the weight_decay=0 group", case()),
        ("a zero-initialized weight (||w|| = 0)", case(zero_weight=True)),
        ("a layer whose gradient is all zeros (||g|| = 0)", case(zero_grad="0.weight")),
        ("large gradients (x1000)", case(grad_scale=1000.0)),
        ("momentum=0", case(momentum=0.0, steps=2)),
        # every hyperparameter away from the values above: each must be read from the group
        ("lr=0.3, momentum=0.5, trust_coefficient=0.001, weight_decay=0.05, eps=0.01",
         case(lr=0.3, momentum=0.5, trust_coefficient=0.001, weight_decay=0.05, eps=0.01)),
        ("a different lr in each group (0.5 for the weights, 0.05 for biases and LayerNorm)",
         case(lr=0.5, no_decay_lr=0.05, steps=2)),
    ]
    return finish_result(run_cases("check_lars_step", fn, cases))
