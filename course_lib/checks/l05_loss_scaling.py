"""Exercise 05: a dynamic loss scaler."""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
from torch import nn

from .harness import (
    CheckResult,
    finish_result,
    Mismatch,
    NotImplementedYet,
    LearnerError,
    run_cases,
    fmt_value,
    is_close,
)


# --------------------------------------------------------------------------- 05: dynamic loss scaling


_KINDS = {"c": "clean", "i": "inf", "n": "nan"}


def _drive(scaler, net, plan: str, xs: torch.Tensor):
    """Train ``net`` with ``scaler`` one step per letter of ``plan``, yielding what each step did.

    ``plan``'s letters: "c" a clean step, "i" an inf gradient, "n" a nan gradient (as if fp16
    gradients had overflowed)."""
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for t, kind in enumerate(plan):
        opt.zero_grad()
        loss = net(xs[t]).pow(2).mean()
        scale_before = float(scaler.get_scale())
        scaled = scaler.scale(loss)
        scaled.backward()
        if kind == "i":
            net.weight.grad[0, 0] = float("inf")  # as if fp16 gradients had overflowed
        elif kind == "n":
            net.bias.grad[1] = float("nan")
        before = [p.detach().clone() for p in net.parameters()]
        scaler.step(opt)
        stepped = any(not torch.equal(b, p) for b, p in zip(before, net.parameters()))
        scaler.update()
        scaled_value = float(scaled.detach() if torch.is_tensor(scaled) else scaled)
        yield dict(t=t, kind=_KINDS[kind], scaled=scaled_value,
                   loss=float(loss.detach()), scale_before=scale_before,
                   stepped=stepped, scale=float(scaler.get_scale()),
                   params=[p.detach().clone() for p in net.parameters()])


def _learner_scaler(scaler_class: Callable, settings: dict):
    """The learner's scaler built with ``settings``; a stub or a crash becomes the harness's outcome."""
    try:
        return scaler_class(**settings)
    except NotImplementedError as exc:
        raise NotImplementedYet() from exc
    except Exception as exc:  # noqa: BLE001
        raise LearnerError(exc) from exc


def _next_step(steps):
    """The learner's next step record; a stub or a crash inside it becomes the harness's outcome."""
    try:
        return next(steps)
    except (NotImplementedError, StopIteration) as exc:
        raise NotImplementedYet() from exc
    except Exception as exc:  # noqa: BLE001
        raise LearnerError(exc) from exc


def _check_scaled_and_skip(where: str, got: dict, exp: dict) -> None:
    """scale(loss) multiplies by the current scale; step() runs exactly when every gradient is finite."""
    if not is_close(got["scaled"], exp["scaled"], rtol=1e-6):
        raise Mismatch(f"{where}: scale(loss) gave {got['scaled']:.6g}, expected loss x scale = "
                       f"{exp['loss']:.6g} x {exp['scale_before']:g} = {exp['scaled']:.6g}")
    if got["stepped"] != exp["stepped"]:
        if exp["stepped"]:
            raise Mismatch(f"{where}: the gradients are finite, so step() must call optimizer.step(); "
                           "yours left the parameters unchanged")
        raise Mismatch(f"{where}: the reference SKIPPED optimizer.step() (a gradient is {exp['kind']}) "
                       "and left the parameters unchanged; yours changed them. Skip the step when "
                       "any gradient is not finite.")


def _check_params(where: str, got: dict, exp: dict, prev: list) -> None:
    """The parameters after the step match the reference; an update ``scale`` times too big gets a hint."""
    for name, e, g, before in zip(("weight", "bias"), exp["params"], got["params"], prev):
        if not torch.allclose(g, e, rtol=1e-5, atol=1e-7, equal_nan=True):
            hint = ""
            moved = (e - before).abs().sum().item()
            ratio = (g - before).abs().sum().item() / moved if moved > 0 else math.nan
            if is_close(ratio, exp["scale_before"], rtol=1e-3):
                hint = ("\nhint: your update is `scale` times too big: unscale the gradients (divide "
                        "them by the scale) before optimizer.step().")
            raise Mismatch(f"{where}: parameter '{name}' after the step:\n  expected {fmt_value(e)}\n"
                           f"  got      {fmt_value(g)}{hint}")


def _check_scale(where: str, got: dict, exp: dict, settings: dict) -> None:
    """The scale after update() follows the backoff/growth rule."""
    if got["scale"] != exp["scale"]:
        raise Mismatch(
            f"{where}: scale after update() is {got['scale']:g}, expected {exp['scale']:g} "
            f"(was {exp['scale_before']:g}; multiply it by backoff_factor={settings['backoff_factor']:g} after a "
            f"skipped step, by growth_factor={settings['growth_factor']:g} after "
            f"growth_interval={settings['growth_interval']} "
            "clean steps in a row, and restart that count after a skipped step or a growth)")


def _scaler_case(scaler_class: Callable, plan: str, init_scale: float, growth_interval: int,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5):
    """A case: the learner's scaler and ``torch.amp.GradScaler`` driven through ``plan`` step by step."""
    def run():
        torch.manual_seed(0)
        base = nn.Linear(4, 3)
        xs = torch.randn(len(plan), 8, 4, generator=torch.Generator().manual_seed(3))
        settings = dict(init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                        growth_interval=growth_interval)
        reference = list(_drive(torch.amp.GradScaler("cpu", **settings), copy.deepcopy(base), plan, xs))
        steps = _drive(_learner_scaler(scaler_class, settings), copy.deepcopy(base), plan, xs)
        for exp in reference:
            got = _next_step(steps)
            where = f"step {exp['t'] + 1} ({exp['kind']} gradients)"
            _check_scaled_and_skip(where, got, exp)
            prev = reference[exp["t"] - 1]["params"] if exp["t"] else [p.detach() for p in base.parameters()]
            _check_params(where, got, exp, prev)
            _check_scale(where, got, exp, settings)
    return run


def check_loss_scaler(scaler_class: Callable) -> CheckResult:
    """A dynamic loss scaler class against ``torch.amp.GradScaler`` (lesson 05).

    ``scaler_class(init_scale, growth_factor, growth_interval, backoff_factor)`` (by keyword)
    must have ``scale(loss)``, ``step(optimizer)`` (unscale the gradients; skip the step
    when any is inf/nan), ``update()`` and ``get_scale()``, used as
    ``scaler.scale(loss).backward(); scaler.step(opt); scaler.update()``.
    """
    def case(*args, **kw):
        return _scaler_case(scaler_class, *args, **kw)

    cases = [
        ("init_scale=1024, growth_interval=3: clean, clean, inf, 4 clean, nan, inf, 3 clean",
         case("cciccccnic" + "cc", 1024.0, 3)),
        ("init_scale=4, growth_interval=1: growth every clean step, inf in between", case("ccicnc", 4.0, 1)),
        ("init_scale=65536, growth_interval=2000: an overflow on the very first step", case("icc", 65536.0, 2000)),
        ("growth_factor=4, backoff_factor=0.25, init_scale=32, growth_interval=2: nan gradients only",
         case("ccnccnc", 32.0, 2, growth_factor=4.0, backoff_factor=0.25)),
    ]
    return finish_result(run_cases("check_loss_scaler", scaler_class, cases))
