"""Exercise 07: a LAMB step."""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Callable

from ..optim import LAMB, param_groups
from .harness import (
    CheckResult,
    finish_result,
    run_cases,
    small_net,
    fixed_grads,
    trajectory,
    compare_trajectories,
    learner_stepper,
)


# --------------------------------------------------------------------------- 07: LAMB


def check_lamb_step(fn: Callable) -> CheckResult:
    """``fn(groups, state, max_grad_norm)``: one LAMB step in place, against ``course_lib.optim.LAMB`` (lesson 07).

    ``groups`` are optimizer-style dicts (``params``, ``lr``, ``betas``, ``eps``,
    ``weight_decay``) from ``param_groups``; ``state`` is a ``defaultdict(dict)`` keyed by
    parameter, kept across steps (``step``, ``exp_avg``, ``exp_avg_sq``). The reference is
    NVIDIA's LAMB: global gradient pre-normalization by ``max(1, ||g|| / max_grad_norm)``,
    Adam moments with bias correction, decoupled weight decay, trust ratio
    ``||w|| / ||update||`` (1 when a norm is 0) only in groups with ``weight_decay != 0``.
    Called under ``torch.no_grad()``.
    """
    def case(zero_weight=False, grad_scale=0.01, steps=3, lr=0.01, betas=(0.9, 0.999), eps=1e-6,
             weight_decay=0.01, max_grad_norm=1.0):
        hyper = dict(lr=lr, betas=betas, eps=eps)

        def make_groups(net):
            return [dict(g, **hyper) for g in param_groups(net, weight_decay=weight_decay)]

        def run():
            base = small_net(zero_weight)
            grads = fixed_grads(base, steps, grad_scale, seed=5)

            def reference(**overrides):
                net = copy.deepcopy(base)
                opt = LAMB(make_groups(net), **{**hyper, "max_grad_norm": max_grad_norm, **overrides})
                return trajectory(net, opt.step, grads)

            expected = reference()
            variants = {
                "without bias correction (divide m by 1 - beta1**t and v by 1 - beta2**t, t counted from 1)":
                    reference(bias_correction=False),
                "without the global gradient pre-normalization (divide every gradient by "
                "max(1, ||g||_global / max_grad_norm) first, the norm over all parameters together)":
                    reference(max_grad_norm=None),
                "that applies the trust ratio to the weight_decay=0 group too": reference(always_adapt=True),
            }
            if max_grad_norm != 1.0:
                variants["that uses max_grad_norm=1 instead of the max_grad_norm it is given"] = (
                    reference(max_grad_norm=1.0))
            net = copy.deepcopy(base)
            groups = make_groups(net)
            got = trajectory(net, learner_stepper(fn, groups, defaultdict(dict), max_grad_norm), grads)
            compare_trajectories(net, groups, expected, got, variants)
        return run

    cases = [
        ("3 steps, small gradients (global norm < max_grad_norm: no pre-normalization)", case()),
        ("3 steps, large gradients of changing size (global norm > max_grad_norm: pre-normalized)",
         case(grad_scale=[3.0, 40.0, 0.5])),
        ("a zero-initialized weight (||w|| = 0: trust ratio 1)", case(zero_weight=True, grad_scale=0.5)),
        # every hyperparameter away from the values above: each must be read from the group (or argument)
        ("lr=0.05, betas=(0.8, 0.99), eps=0.01, weight_decay=0.1, max_grad_norm=5 (global norm between 1 and 5 "
         "on some steps)", case(grad_scale=[0.5, 3.0, 0.05], lr=0.05, betas=(0.8, 0.99), eps=0.01,
                                weight_decay=0.1, max_grad_norm=5.0)),
    ]
    return finish_result(run_cases("check_lamb_step", fn, cases))
