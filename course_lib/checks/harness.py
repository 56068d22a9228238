"""The checks' shared harness: results, strict mode, running cases, comparing optimizer trajectories."""

from __future__ import annotations

import html
import math
import os
import traceback
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

STRICT_ENV = "COURSE_CHECKS_STRICT"


# --------------------------------------------------------------------------- results


class CheckFailed(AssertionError):
    """Raised by a check that does not pass when ``COURSE_CHECKS_STRICT=1``."""


@dataclass(frozen=True)
class CheckResult:
    """What a check found: ``passed``, a human ``message``, and the cases it ran."""

    name: str
    passed: bool
    message: str
    cases: tuple[str, ...] = ()
    not_implemented: bool = False

    def __bool__(self) -> bool:
        return self.passed

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "NOT IMPLEMENTED YET" if self.not_implemented else "FAIL"

    def __repr__(self) -> str:
        return f"{self.name}: {self.status}\n{self.message}"

    def _repr_html_(self) -> str:
        color = {"PASS": "#1a7f37", "FAIL": "#cf222e"}.get(self.status, "#9a6700")
        return (
            f'<div style="border-left: 4px solid {color}; padding: 4px 10px;">'
            f'<b style="color: {color}">{html.escape(self.status)}</b> <code>{html.escape(self.name)}</code>'
            f'<pre style="white-space: pre-wrap; margin: 4px 0 0 0;">{html.escape(self.message)}</pre></div>'
        )


def strict() -> bool:
    """True when ``$COURSE_CHECKS_STRICT`` asks failing checks to raise (CI, for solutions)."""
    return os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes")


def finish_result(result: CheckResult) -> CheckResult:
    if strict() and not result.passed:
        raise CheckFailed(repr(result))
    return result


class Mismatch(Exception):
    """A case where the learner's answer differs from the reference (message says how)."""


class NotImplementedYet(Exception):
    pass


class LearnerError(Exception):
    def __init__(self, exc: BaseException):
        self.exc = exc
        super().__init__(str(exc))


def call_learner(fn: Callable, *args, **kwargs):
    """Call the learner's code; sort its exceptions into 'not implemented' and 'raised'."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        raise NotImplementedYet() from exc
    except Exception as exc:  # noqa: BLE001 - any error in learner code is reported, not raised
        raise LearnerError(exc) from exc


def _where(exc: BaseException) -> str:
    """' (at file.py, line N)' for the innermost frame outside this module."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {os.path.basename(f.filename)}, line {f.lineno}: {f.line})"


def learner_label(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def not_implemented_result(name: str, fn, cases=()) -> CheckResult:
    return CheckResult(
        name, False,
        f"not implemented yet: {learner_label(fn)} still raises NotImplementedError. Replace "
        "`raise NotImplementedError()` with your code, run that cell, then run this check again.",
        tuple(cases), not_implemented=True)


def run_cases(name: str, fn, cases: list[tuple[str, Callable[[], None]]]) -> CheckResult:
    """Run each case (a thunk that raises Mismatch on a difference); stop at the first that fails."""
    names = tuple(c for c, _ in cases)
    for case, run in cases:
        try:
            run()
        except NotImplementedYet:
            return not_implemented_result(name, fn, names)
        except LearnerError as err:
            return CheckResult(name, False, f"case '{case}': your code raised "
                               f"{type(err.exc).__name__}: {err.exc}{_where(err.exc)}", names)
        except Mismatch as diff:
            return CheckResult(name, False, f"case '{case}': {diff}", names)
    listing = "\n".join(f"  - {c}" for c in names)
    return CheckResult(name, True, f"all {len(names)} cases match the course's reference:\n{listing}", names)


def fmt_value(x) -> str:
    if torch.is_tensor(x):
        flat = x.detach().flatten().tolist()
        shown = ", ".join(f"{v:.6g}" for v in flat[:4])
        return f"[{shown}{', ...' if len(flat) > 4 else ''}] (shape {tuple(x.shape)})"
    if isinstance(x, float):
        return f"{x:.6g}"
    return repr(x)


def as_float_value(value, what: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        raise Mismatch(f"{what} returned {value!r}; expected a single number") from None


def is_close(a: float, b: float, rtol: float = 1e-6, atol: float = 1e-9) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):  # rtol * inf would make any number close to inf
        return a == b
    return abs(a - b) <= atol + rtol * abs(b)


# --------------------------------------------------------------------------- optimizer trajectories (lessons 04, 07)


def small_net(zero_weight: bool = False) -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.ReLU(), nn.Linear(5, 3))
    nn.init.zeros_(net[0].bias)  # zero-initialized biases, as in most models
    if zero_weight:
        nn.init.zeros_(net[3].weight)  # a zero-initialized weight in a decayed group: ||w|| = 0
    return net


def fixed_grads(net: nn.Module, steps: int, scale, seed: int, zero: str | None = None):
    """Gradients for each step (``scale``: one number, or one per step), the same for every run."""
    g = torch.Generator().manual_seed(seed)
    names = [n for n, _ in net.named_parameters()]
    scales = list(scale) if isinstance(scale, (list, tuple)) else [scale] * steps
    out = []
    for step_scale in scales[:steps]:
        grads = [step_scale * torch.randn(p.shape, generator=g) for p in net.parameters()]
        if zero is not None:
            grads[names.index(zero)].zero_()
        out.append(grads)
    return out


def trajectory(net: nn.Module, step: Callable[[], None], grads) -> list[list[torch.Tensor]]:
    """Set the given gradients, take a step, record every parameter; once per step."""
    params = list(net.parameters())
    out = []
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        step()
        out.append([p.detach().clone() for p in params])
    return out


def compare_trajectories(net, groups, expected, got, variants: dict[str, list] | None = None) -> None:
    names = [n for n, _ in net.named_parameters()]
    params = list(net.parameters())
    group_of = {id(p): i for i, grp in enumerate(groups) for p in grp["params"]}
    for t, (exp_step, got_step) in enumerate(zip(expected, got)):
        for i, (e, g) in enumerate(zip(exp_step, got_step)):
            if torch.allclose(g, e, rtol=1e-5, atol=1e-7):
                continue
            grp = groups[group_of[id(params[i])]]
            diff = (g - e).abs().max().item()
            hint = ""
            for label, traj in (variants or {}).items():
                if all(torch.allclose(a, b, rtol=1e-5, atol=1e-7)
                       for s_a, s_b in zip(traj[: t + 1], got[: t + 1]) for a, b in zip(s_a, s_b)):
                    hint = f"\nhint: your parameters match a version {label}."
                    break
            raise Mismatch(
                f"after step {t + 1}, parameter '{names[i]}' (group {group_of[id(params[i])]}, "
                f"weight_decay={grp['weight_decay']:g}) differs by up to {diff:.3g}:\n"
                f"  expected {fmt_value(e)}\n  got      {fmt_value(g)}{hint}")


def learner_stepper(fn, groups, state, *extra):
    def step():
        with torch.no_grad():
            call_learner(fn, groups, state, *extra)
    return step
