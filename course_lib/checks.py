"""Exercise checks: the learner's code against course_lib's own implementation (exercises/, solutions/).

Every exercise notebook ends with a cell like ``checks.check_ndcg(ndcg_at_k)``. A check
runs the learner's function on several cases, edge cases included (zero norms,
overflowing gradients, tensor lengths that do not split evenly across ranks), compares
each answer with the course's reference (the code in ``course_lib`` the lessons use,
or PyTorch's own ``GradScaler`` and ``all_reduce``) and returns a ``CheckResult``:
``.passed``, ``.message`` (which case differs, expected vs got, and a hint when the
difference looks like a known mistake), shown as text or HTML in the notebook.

- A function that still raises ``NotImplementedError`` (the exercise stub) is reported
  as "not implemented yet", never as a crash of the check.
- With ``COURSE_CHECKS_STRICT=1`` in the environment, a check that does not pass raises
  ``CheckFailed`` (an ``AssertionError``): CI runs the solutions that way, so a solution
  that stops passing its own check fails the build.

The checks for lesson 06 run the learner's function on several processes with
``course_lib.dist.launch``. Spawned workers import it by module and name, so it must
live in a ``.py`` file (the exercise writes one with ``%%writefile``), not in the notebook.
"""

from __future__ import annotations

import copy
import html
import math
import os
import traceback
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

STRICT_ENV = "COURSE_CHECKS_STRICT"

__all__ = [
    "CheckResult",
    "CheckFailed",
    "STRICT_ENV",
    "check_hit_rate",
    "check_ndcg",
    "check_linear_scaled_lr",
    "check_sqrt_scaled_lr",
    "check_warmup_factor",
    "check_lars_trust_ratio",
    "check_lars_step",
    "check_loss_scaler",
    "check_average_gradients",
    "check_ring_all_reduce",
    "check_lamb_step",
]


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


def _finish(result: CheckResult) -> CheckResult:
    if strict() and not result.passed:
        raise CheckFailed(repr(result))
    return result


class _Mismatch(Exception):
    """A case where the learner's answer differs from the reference (message says how)."""


class _NotImplemented(Exception):
    pass


class _LearnerError(Exception):
    def __init__(self, exc: BaseException):
        self.exc = exc
        super().__init__(str(exc))


def _call(fn: Callable, *args, **kwargs):
    """Call the learner's code; sort its exceptions into 'not implemented' and 'raised'."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        raise _NotImplemented() from exc
    except Exception as exc:  # noqa: BLE001 - any error in learner code is reported, not raised
        raise _LearnerError(exc) from exc


def _where(exc: BaseException) -> str:
    """' (at file.py, line N)' for the innermost frame outside this module."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {os.path.basename(f.filename)}, line {f.lineno}: {f.line})"


def _label(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _not_implemented(name: str, fn, cases=()) -> CheckResult:
    return CheckResult(
        name, False,
        f"not implemented yet: {_label(fn)} still raises NotImplementedError. Replace "
        "`raise NotImplementedError()` with your code, run that cell, then run this check again.",
        tuple(cases), not_implemented=True)


def _run_cases(name: str, fn, cases: list[tuple[str, Callable[[], None]]]) -> CheckResult:
    """Run each case (a thunk that raises _Mismatch on a difference); stop at the first that fails."""
    names = tuple(c for c, _ in cases)
    for case, run in cases:
        try:
            run()
        except _NotImplemented:
            return _not_implemented(name, fn, names)
        except _LearnerError as err:
            return CheckResult(name, False, f"case '{case}': your code raised "
                               f"{type(err.exc).__name__}: {err.exc}{_where(err.exc)}", names)
        except _Mismatch as diff:
            return CheckResult(name, False, f"case '{case}': {diff}", names)
    listing = "\n".join(f"  - {c}" for c in names)
    return CheckResult(name, True, f"all {len(names)} cases match the course's reference:\n{listing}", names)


def _fmt(x) -> str:
    if torch.is_tensor(x):
        flat = x.detach().flatten().tolist()
        shown = ", ".join(f"{v:.6g}" for v in flat[:4])
        return f"[{shown}{', ...' if len(flat) > 4 else ''}] (shape {tuple(x.shape)})"
    if isinstance(x, float):
        return f"{x:.6g}"
    return repr(x)


def _as_float(value, what: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        raise _Mismatch(f"{what} returned {value!r}; expected a single number") from None


def _close(a: float, b: float, rtol: float = 1e-6, atol: float = 1e-9) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= atol + rtol * abs(b)


# --------------------------------------------------------------------------- 01: HR@K and NDCG@K


def _ranking_cases(k: int) -> list[tuple[str, torch.Tensor]]:
    """Score matrices (users, 1 positive + 100 negatives), positive in column 0."""
    g = torch.Generator().manual_seed(1)
    n_neg = 100

    def at_rank(ranks: list[int]) -> torch.Tensor:
        # positive scores 0; `r` negatives score above it (1..), the rest below; columns shuffled
        rows = []
        for r in ranks:
            neg = torch.cat([torch.rand(r, generator=g) + 0.5, -torch.rand(n_neg - r, generator=g) - 0.5])
            rows.append(torch.cat([torch.zeros(1), neg[torch.randperm(n_neg, generator=g)]]))
        return torch.stack(rows)  # (U, 101)

    return [
        ("random scores, 64 users x (1 positive + 100 negatives)", torch.randn(64, 1 + n_neg, generator=g)),
        ("positive on top for every user (rank 0)", at_rank([0] * 8)),
        (f"positive at rank {k - 1}: the last place inside the top {k}", at_rank([k - 1] * 4)),
        (f"positive at rank {k}: the first place outside the top {k}", at_rank([k] * 4)),
        ("one user per rank 0..100", at_rank(list(range(n_neg + 1)))),
        ("ties: every item scores the same (a tie counts against the positive)", torch.zeros(5, 1 + n_neg)),
        ("ties: two negatives tie with the positive, two are above it", torch.tensor(
            [[0.0, 1.0, 1.0, 0.0, 0.0] + [-1.0] * (n_neg - 4)])),
    ]


def _rank_hint(scores: torch.Tensor, got: float, k: int, metric: str) -> str:
    ranks_strict = (scores[:, 1:] > scores[:, :1]).sum(1).double()
    if metric == "hr":
        if _close(got, (ranks_strict < k).double().mean().item()):
            return ("\nhint: that is what you get when ties count for the positive (`>`); the course counts "
                    "a negative that scores equal to the positive as ranked above it (`>=`).")
        if _close(got, (ranks_strict <= k).double().mean().item()) or _close(
                got, ((scores[:, 1:] >= scores[:, :1]).sum(1) <= k).double().mean().item()):
            return f"\nhint: a hit is rank < {k} with 0-based ranks (rank {k} is the {k + 1}th place)."
        return ""
    ranks = (scores[:, 1:] >= scores[:, :1]).sum(1).double()
    hit = ranks < k
    for base, label in ((math.e, "natural log"), (10.0, "log10")):
        alt = torch.where(hit, math.log(base) / torch.log(ranks + 2), torch.zeros_like(ranks)).mean().item()
        if _close(got, alt):
            return f"\nhint: that is NDCG with the {label}; the discount is 1 / log2(rank + 2) (torch.log2)."
    alt = torch.where(hit, 1 / torch.log2(ranks + 1), torch.zeros_like(ranks)).mean().item()
    if _close(got, alt):
        return "\nhint: ranks are 0-based here, so the discount is 1 / log2(rank + 2), not log2(rank + 1)."
    alt = torch.where(ranks_strict < k, 1 / torch.log2(ranks_strict + 2), torch.zeros_like(ranks)).mean().item()
    if _close(got, alt):
        return "\nhint: ties must count against the positive (`>=`), as in HR@K."
    return ""


def _check_ranking_metric(name: str, fn, reference, k: int, metric: str) -> CheckResult:
    def case(scores):
        def run():
            expected = reference(scores, k)
            got = _as_float(_call(fn, scores.clone(), k), _label(fn))
            if not _close(got, expected):
                raise _Mismatch(f"expected {expected:.6g}, got {got:.6g}" + _rank_hint(scores, got, k, metric))
        return run

    return _finish(_run_cases(name, fn, [(c, case(s)) for c, s in _ranking_cases(k)]))


def check_hit_rate(fn: Callable, k: int = 10) -> CheckResult:
    """``fn(scores, k) -> float``: HR@K against ``course_lib.metrics.hit_rate_at_k`` (lesson 01)."""
    from .metrics import hit_rate_at_k

    return _check_ranking_metric("check_hit_rate", fn, hit_rate_at_k, k, "hr")


def check_ndcg(fn: Callable, k: int = 10) -> CheckResult:
    """``fn(scores, k) -> float``: NDCG@K against ``course_lib.metrics.ndcg_at_k`` (lesson 01)."""
    from .metrics import ndcg_at_k

    return _check_ranking_metric("check_ndcg", fn, ndcg_at_k, k, "ndcg")


# --------------------------------------------------------------------------- 02: scaling rules

_SCALING_CASES = [  # (base_lr, batch_size, base_batch_size)
    (0.1, 256, 256),
    (0.1, 512, 256),
    (0.1, 8192, 256),
    (0.001, 65536, 1024),
    (0.1, 768, 256),
    (0.1, 128, 256),
    (0.0, 1024, 256),
]


def _check_scaling_rule(name: str, fn, reference, other_rule: str) -> CheckResult:
    def case(base_lr, batch, base_batch):
        def run():
            expected = reference(base_lr, batch, base_batch)
            got = _as_float(_call(fn, base_lr, batch, base_batch), _label(fn))
            if not _close(got, expected, rtol=1e-9):
                k = batch / base_batch
                hint = ""
                if other_rule == "sqrt" and _close(got, base_lr * math.sqrt(k)):
                    hint = "\nhint: that is the square-root rule; the linear rule multiplies the lr by k = batch / base."
                elif other_rule == "linear" and _close(got, base_lr * k):
                    hint = "\nhint: that is the linear rule (lr x k); the square-root rule multiplies by sqrt(k)."
                elif _close(got, base_lr / k) or _close(got, base_lr / math.sqrt(k)):
                    hint = "\nhint: k is batch_size / base_batch_size: a bigger batch gets a bigger lr."
                raise _Mismatch(f"expected {expected:.6g}, got {got:.6g}{hint}")
        return run

    cases = [(f"base_lr={lr:g}, batch_size={b}, base_batch_size={bb} (k={b / bb:g})", case(lr, b, bb))
             for lr, b, bb in _SCALING_CASES]
    return _finish(_run_cases(name, fn, cases))


def check_linear_scaled_lr(fn: Callable) -> CheckResult:
    """``fn(base_lr, batch_size, base_batch_size) -> lr``: the linear scaling rule (lesson 02)."""
    from .optim import linear_scaled_lr

    return _check_scaling_rule("check_linear_scaled_lr", fn, linear_scaled_lr, "sqrt")


def check_sqrt_scaled_lr(fn: Callable) -> CheckResult:
    """``fn(base_lr, batch_size, base_batch_size) -> lr``: the square-root scaling rule (lesson 02)."""
    from .optim import sqrt_scaled_lr

    return _check_scaling_rule("check_sqrt_scaled_lr", fn, sqrt_scaled_lr, "linear")


# --------------------------------------------------------------------------- 03: warmup


def check_warmup_factor(fn: Callable) -> CheckResult:
    """``fn(step, warmup_steps, total_steps, decay) -> factor``: linear warmup from 0, then constant or cosine (lesson 03).

    Reference: ``course_lib.optim.lr_at(step, peak_lr=1, ..., warmup="linear", end_lr=0)``.
    The last case uses ``fn`` as ``LambdaLR``'s ``lr_lambda`` (through ``functools.partial``).
    """
    import functools

    from .optim import lr_at

    def ref(step, warmup_steps, total_steps, decay):
        return lr_at(step, peak_lr=1.0, warmup_steps=warmup_steps, total_steps=total_steps, decay=decay)

    def schedule_case(warmup_steps, total_steps, decay):
        def run():
            steps = range(total_steps + 4)  # a few steps past the end: the factor stays at its end value
            expected = [ref(s, warmup_steps, total_steps, decay) for s in steps]
            got = [_as_float(_call(fn, s, warmup_steps, total_steps, decay), f"{_label(fn)} at step {s}")
                   for s in steps]
            bad = [s for s in steps if not _close(got[s], expected[s], atol=1e-12)]
            if bad:
                s = bad[0]
                hint = ""
                if all(_close(got[t], expected[t + 1]) for t in range(min(warmup_steps, len(steps) - 1))):
                    hint = ("\nhint: your ramp is one step ahead: the factor is 0 at step 0 and reaches 1 exactly "
                            "at step == warmup_steps.")
                elif s > warmup_steps and decay == "cosine":
                    hint = ("\nhint: after warmup, progress = (step - warmup_steps) / (total_steps - warmup_steps), "
                            "capped at 1, and the factor is (1 + cos(pi * progress)) / 2.")
                raise _Mismatch(f"at step {s} expected {expected[s]:.6g}, got {got[s]:.6g}{hint}")
        return run

    def lambdalr_case():
        peak_lr, warmup_steps, total_steps = 0.4, 5, 20
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
            raise _NotImplemented() from exc
        except TypeError as exc:
            raise _Mismatch(f"LambdaLR could not call it as lr_lambda(step) with warmup_steps, total_steps and decay "
                            f"given by keyword: {exc}") from exc
        except Exception as exc:  # noqa: BLE001
            raise _LearnerError(exc) from exc
        for s, lr in enumerate(got):
            expected = peak_lr * ref(s, warmup_steps, total_steps, "cosine")
            if not _close(float(lr), expected):
                raise _Mismatch(f"optimizer lr at step {s}: expected {expected:.6g}, got {float(lr):.6g}")

    cases = [
        ("linear warmup over 5 steps, then constant (total 20)", schedule_case(5, 20, "constant")),
        ("linear warmup over 5 steps, then cosine to 0 at step 20", schedule_case(5, 20, "cosine")),
        ("no warmup (warmup_steps=0), cosine over 10 steps", schedule_case(0, 10, "cosine")),
        ("a one-step warmup, then cosine to step 8", schedule_case(1, 8, "cosine")),
        ("warmup over the whole run (warmup_steps == total_steps == 6)", schedule_case(6, 6, "cosine")),
        ("used as LambdaLR's lr_lambda: SGD(lr=0.4), warmup 5, cosine to step 20", lambdalr_case),
    ]
    return _finish(_run_cases("check_warmup_factor", fn, cases))


# --------------------------------------------------------------------------- 04: LARS


def check_lars_trust_ratio(fn: Callable) -> CheckResult:
    """``fn(w_norm, g_norm, trust_coefficient, weight_decay, eps) -> float`` against ``lars_trust_ratio`` (lesson 04)."""
    from .optim import lars_trust_ratio

    def case(w_norm, g_norm, tc, wd, eps):
        def run():
            expected = lars_trust_ratio(w_norm, g_norm, trust_coefficient=tc, weight_decay=wd, eps=eps)
            got = _as_float(_call(fn, w_norm, g_norm, tc, wd, eps), _label(fn))
            if not _close(got, expected, rtol=1e-6):
                hint = ""
                if w_norm == 0 or g_norm == 0:
                    hint = ("\nhint: the zero-norm guard: when ||w|| == 0 or ||g|| == 0 the ratio is 1 (a "
                            "zero-initialized weight would otherwise get 0 and never move).")
                elif _close(got, tc * w_norm / (g_norm + eps)):
                    hint = "\nhint: weight decay enters the denominator: ||g|| + weight_decay * ||w|| + eps."
                raise _Mismatch(f"expected {expected:.6g}, got {got:.6g}{hint}")
        return run

    params = [  # (w_norm, g_norm, trust_coefficient, weight_decay, eps)
        (3.0, 0.5, 0.001, 5e-4, 1e-8),
        (12.0, 400.0, 0.02, 1e-4, 1e-8),
        (0.7, 1e-4, 0.001, 0.0, 1e-8),
        (0.0, 2.0, 0.001, 5e-4, 1e-8),
        (3.0, 0.0, 0.001, 5e-4, 1e-8),
        (0.0, 0.0, 0.001, 5e-4, 1e-8),
    ]
    cases = [(f"||w||={w:g}, ||g||={g:g}, trust_coefficient={tc:g}, weight_decay={wd:g}"
              + (" (zero norm)" if w == 0 or g == 0 else ""), case(w, g, tc, wd, eps))
             for w, g, tc, wd, eps in params]
    return _finish(_run_cases("check_lars_trust_ratio", fn, cases))


def _small_net(zero_weight: bool = False) -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.ReLU(), nn.Linear(5, 3))
    nn.init.zeros_(net[0].bias)  # zero-initialized biases, as in most models
    if zero_weight:
        nn.init.zeros_(net[3].weight)  # a zero-initialized weight in a decayed group: ||w|| = 0
    return net


def _fixed_grads(net: nn.Module, steps: int, scale, seed: int, zero: str | None = None):
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


def _trajectory(net: nn.Module, step: Callable[[], None], grads) -> list[list[torch.Tensor]]:
    """Set the given gradients, take a step, record every parameter; once per step."""
    params = list(net.parameters())
    out = []
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        step()
        out.append([p.detach().clone() for p in params])
    return out


def _compare_trajectories(net, groups, expected, got, variants: dict[str, list] | None = None) -> None:
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
            raise _Mismatch(
                f"after step {t + 1}, parameter '{names[i]}' (group {group_of[id(params[i])]}, "
                f"weight_decay={grp['weight_decay']:g}) differs by up to {diff:.3g}:\n"
                f"  expected {_fmt(e)}\n  got      {_fmt(g)}{hint}")


def _learner_stepper(fn, groups, state, *extra):
    def step():
        with torch.no_grad():
            _call(fn, groups, state, *extra)
    return step


def check_lars_step(fn: Callable) -> CheckResult:
    """``fn(groups, state)``: one LARS step in place, against ``course_lib.optim.LARS`` (lesson 04).

    ``groups`` are optimizer-style dicts (``params``, ``lr``, ``momentum``, ``weight_decay``,
    ``trust_coefficient``, ``eps``) built by ``param_groups`` (biases and LayerNorm in a
    ``weight_decay=0`` group); ``state`` is a ``defaultdict(dict)`` keyed by parameter,
    kept across steps (for ``state[p]["momentum_buffer"]``). Called under ``torch.no_grad()``.
    """
    from .optim import LARS, param_groups

    def case(zero_weight=False, zero_grad=None, momentum=0.9, steps=3, grad_scale=1.0):
        hyper = dict(lr=1.0, momentum=momentum, trust_coefficient=0.02, eps=1e-8)

        def make_groups(net):
            return [dict(g, **hyper) for g in param_groups(net, weight_decay=5e-4)]

        def run():
            base = _small_net(zero_weight)
            grads = _fixed_grads(base, steps, grad_scale, seed=2, zero=zero_grad)
            ref_net = copy.deepcopy(base)
            ref_opt = LARS(make_groups(ref_net), **hyper)
            expected = _trajectory(ref_net, ref_opt.step, grads)
            variant_net = copy.deepcopy(base)
            variant = LARS(make_groups(variant_net), always_adapt=True, **hyper)
            variants = {"that applies the trust ratio to the weight_decay=0 group too (biases and norm "
                        "parameters must get plain SGD with momentum)": _trajectory(variant_net, variant.step, grads)}
            net = copy.deepcopy(base)
            groups = make_groups(net)
            got = _trajectory(net, _learner_stepper(fn, groups, defaultdict(dict)), grads)
            try:
                _compare_trajectories(net, groups, expected, got, variants)
            except _Mismatch as diff:
                zero_weight_index = [n for n, _ in net.named_parameters()].index("3.weight")
                if zero_weight and torch.count_nonzero(got[0][zero_weight_index]) == 0:
                    raise _Mismatch(f"{diff}\nhint: your zero-initialized weight did not move: its trust ratio "
                                    "must be 1 when ||w|| == 0 (the zero-norm guard).") from None
                if zero_grad is not None:
                    raise _Mismatch(f"{diff}\nhint: in this case layer '{zero_grad}' has ||g|| == 0; its trust "
                                    "ratio must be 1 (the zero-norm guard), not trust_coefficient / weight_decay.") from None
                raise
        return run

    cases = [
        ("3 steps, weights adapted, biases and LayerNorm in the weight_decay=0 group", case()),
        ("a zero-initialized weight (||w|| = 0)", case(zero_weight=True)),
        ("a layer whose gradient is all zeros (||g|| = 0)", case(zero_grad="0.weight")),
        ("large gradients (x1000)", case(grad_scale=1000.0)),
        ("momentum=0", case(momentum=0.0, steps=2)),
    ]
    return _finish(_run_cases("check_lars_step", fn, cases))


# --------------------------------------------------------------------------- 05: dynamic loss scaling


def check_loss_scaler(scaler_class: Callable) -> CheckResult:
    """A dynamic loss scaler class against ``torch.amp.GradScaler`` (lesson 05).

    ``scaler_class(init_scale, growth_factor, growth_interval, backoff_factor)`` (by keyword)
    must have ``scale(loss)``, ``step(optimizer)`` (unscale the gradients; skip the step
    when any is inf/nan), ``update()`` and ``get_scale()``, used as
    ``scaler.scale(loss).backward(); scaler.step(opt); scaler.update()``.
    """

    def case(plan: str, init_scale: float, growth_interval: int):
        kinds = {"c": "clean", "i": "inf", "n": "nan"}

        def run():
            torch.manual_seed(0)
            base = nn.Linear(4, 3)
            xs = torch.randn(len(plan), 8, 4, generator=torch.Generator().manual_seed(3))
            settings = dict(init_scale=init_scale, growth_factor=2.0, backoff_factor=0.5,
                            growth_interval=growth_interval)

            def drive(scaler, net):
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
                    yield dict(t=t, kind=kinds[kind], scaled=scaled_value,
                               loss=float(loss.detach()), scale_before=scale_before,
                               stepped=stepped, scale=float(scaler.get_scale()),
                               params=[p.detach().clone() for p in net.parameters()])

            reference = list(drive(torch.amp.GradScaler("cpu", **settings), copy.deepcopy(base)))
            try:
                scaler = scaler_class(**settings)
            except NotImplementedError as exc:
                raise _NotImplemented() from exc
            except Exception as exc:  # noqa: BLE001
                raise _LearnerError(exc) from exc
            steps = drive(scaler, copy.deepcopy(base))
            for exp in reference:
                try:
                    got = next(steps)
                except (NotImplementedError, StopIteration) as exc:
                    raise _NotImplemented() from exc
                except Exception as exc:  # noqa: BLE001
                    raise _LearnerError(exc) from exc
                where = f"step {exp['t'] + 1} ({exp['kind']} gradients)"
                if not _close(got["scaled"], exp["scaled"], rtol=1e-6):
                    raise _Mismatch(f"{where}: scale(loss) gave {got['scaled']:.6g}, expected loss x scale = "
                                    f"{exp['loss']:.6g} x {exp['scale_before']:g} = {exp['scaled']:.6g}")
                if got["stepped"] != exp["stepped"]:
                    if exp["stepped"]:
                        raise _Mismatch(f"{where}: the gradients are finite, so step() must call optimizer.step(); "
                                        "yours left the parameters unchanged")
                    raise _Mismatch(f"{where}: the reference SKIPPED optimizer.step() (a gradient is {exp['kind']}) "
                                    "and left the parameters unchanged; yours changed them. Skip the step when "
                                    "any gradient is not finite.")
                prev = reference[exp["t"] - 1]["params"] if exp["t"] else [p.detach() for p in base.parameters()]
                for name, e, g, before in zip(("weight", "bias"), exp["params"], got["params"], prev):
                    if not torch.allclose(g, e, rtol=1e-5, atol=1e-7, equal_nan=True):
                        hint = ""
                        moved = (e - before).abs().sum().item()
                        ratio = (g - before).abs().sum().item() / moved if moved > 0 else math.nan
                        if _close(ratio, exp["scale_before"], rtol=1e-3):
                            hint = ("\nhint: your update is `scale` times too big: unscale the gradients (divide "
                                    "them by the scale) before optimizer.step().")
                        raise _Mismatch(f"{where}: parameter '{name}' after the step:\n  expected {_fmt(e)}\n"
                                        f"  got      {_fmt(g)}{hint}")
                if got["scale"] != exp["scale"]:
                    raise _Mismatch(
                        f"{where}: scale after update() is {got['scale']:g}, expected {exp['scale']:g} "
                        f"(was {exp['scale_before']:g}; halve it after a skipped step, double it after "
                        f"growth_interval={growth_interval} clean steps in a row, and restart that count after "
                        "a skipped step or a growth)")
        return run

    cases = [
        ("init_scale=1024, growth_interval=3: clean, clean, inf, 4 clean, nan, inf, 3 clean",
         case("cciccccnic" + "cc", 1024.0, 3)),
        ("init_scale=4, growth_interval=1: growth every clean step, inf in between", case("ccicnc", 4.0, 1)),
        ("init_scale=65536, growth_interval=2000: an overflow on the very first step", case("icc", 65536.0, 2000)),
    ]
    return _finish(_run_cases("check_loss_scaler", scaler_class, cases))


# --------------------------------------------------------------------------- 06: all-reduce by hand


def _spawnable(name: str, fn) -> CheckResult | None:
    """A failing result when ``fn`` cannot be imported by spawned workers, else None."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "") or ""
    if module in (None, "__main__") or "<locals>" in qualname or "<lambda>" in qualname:
        return CheckResult(name, False, (
            f"{_label(fn)} is defined in the notebook (module {module!r}), so the worker processes cannot "
            "run it: launch() starts them with 'spawn', and a spawned process imports the function by its "
            "module and name; a fresh Python process has no notebook namespace. Write the function to a .py "
            "file (the %%writefile cell above), import it from there, and pass that imported function."))
    return None


def _probe_not_implemented(name: str, fn, probe: Callable[[], None]) -> CheckResult | None:
    """Call the stub in this process first: a NotImplementedError needs no worker processes."""
    try:
        probe()
    except NotImplementedError:
        return _not_implemented(name, fn)
    except Exception:  # noqa: BLE001 - a real implementation fails here without a process group; fine
        pass
    return None


def _distributed_check(name: str, fn, probe: Callable[[], None], worker: Callable, judge: Callable,
                       world_size: int, *args, timeout_s: float) -> CheckResult:
    """The shape of every multi-process check: refuse what spawn cannot import, answer a stub
    without launching, run ``worker`` on ``world_size`` ranks, then ``judge(per_rank_results)``."""
    early = _spawnable(name, fn)
    if early is None:
        early = _probe_not_implemented(name, fn, probe)
    if early is not None:
        return _finish(early)
    results = _launch_cases(name, worker, [fn], world_size, *args, timeout_s=timeout_s)
    if isinstance(results, CheckResult):
        return _finish(results)
    return _finish(judge([r[0] for r in results]))


def _launch_cases(name: str, worker: Callable, fns: list, world_size: int, *args,
                  timeout_s: float = 120.0) -> list | CheckResult:
    """Run ``worker(rank, world_size, fns, *args)`` on ``world_size`` processes; map failures to results."""
    from .dist import LaunchTimeout, WorkerError, launch

    try:
        return launch(worker, world_size, fns, *args, backend="gloo", timeout_s=timeout_s,
                      collective_timeout_s=min(60.0, timeout_s))
    except WorkerError as err:
        tb = err.worker_traceback
        if "NotImplementedError" in tb:
            return _not_implemented(name, fns[0])
        tail = "\n".join(tb.strip().splitlines()[-12:])
        return CheckResult(name, False, f"your function failed on rank {err.rank}:\n{tail}")
    except (TypeError, ValueError) as err:  # launch() refused the function or its arguments
        return CheckResult(name, False, f"could not start the workers: {err}")
    except LaunchTimeout:
        return CheckResult(name, False, (
            f"the workers did not finish within {timeout_s:g} s. Most likely every rank is waiting for "
            "another: a ring where each rank first calls a blocking send() and only then recv() can "
            "deadlock. Post the send and the receive together (dist.isend + dist.irecv, then wait on "
            "both), or let even ranks send first and odd ranks receive first."))


def _grad_net() -> nn.Module:
    torch.manual_seed(0)  # every rank builds the same model, as DDP's broadcast would make it
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _grad_avg_worker(rank: int, world_size: int, fns: list, compare_ddp: bool) -> list[list[str]]:
    """For each learner function: problems found on this rank (empty when its gradients match)."""
    import torch.distributed as dist

    model = _grad_net()
    g = torch.Generator().manual_seed(4)
    per_rank = 4
    X = torch.randn(per_rank * world_size, 8, generator=g)  # (world_size * 4, 8): the global batch
    y = torch.randn(per_rank * world_size, 1, generator=g)
    shard = slice(rank * per_rank, (rank + 1) * per_rank)  # this rank's micro-batch

    if compare_ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(copy.deepcopy(model))
        F.mse_loss(ddp(X[shard]), y[shard]).backward()
        reference = {n.removeprefix("module."): p.grad.clone() for n, p in ddp.named_parameters()}
        ref_name = "DDP's gradient"
    else:
        # Equal shards and a mean loss: the average of the shard gradients is the gradient of
        # the whole batch in one process, which is what DDP computes.
        full = copy.deepcopy(model)
        F.mse_loss(full(X), y).backward()
        reference = {n: p.grad.clone() for n, p in full.named_parameters()}
        ref_name = "the one-process gradient of the whole global batch"

    out = []
    for fn in fns:
        net = copy.deepcopy(model)
        F.mse_loss(net(X[shard]), y[shard]).backward()
        local = {n: p.grad.clone() for n, p in net.named_parameters()}
        fn(net)
        dist.barrier()
        problems = []
        for n, p in net.named_parameters():
            e, got = reference[n], p.grad
            if got is not None and torch.allclose(got, e, rtol=1e-4, atol=1e-6):
                continue
            hint = ""
            if got is None:
                problems.append(f"rank {rank}: parameter '{n}' has no gradient after your function")
                continue
            if torch.allclose(got, e * world_size, rtol=1e-4, atol=1e-6):
                hint = (f"\nhint: yours is world_size={world_size} times {ref_name}: all_reduce SUMs; divide "
                        "by the world size to average.")
            elif torch.allclose(got, local[n], rtol=1e-4, atol=1e-6):
                hint = "\nhint: yours is still this rank's own gradient: it was not all-reduced (in place)."
            elif torch.allclose(got, e / world_size, rtol=1e-4, atol=1e-6):
                hint = f"\nhint: yours is {ref_name} divided by world_size once more than needed."
            problems.append(f"rank {rank}: gradient of '{n}' differs from {ref_name}:\n"
                            f"  expected {_fmt(e)}\n  got      {_fmt(got)}{hint}")
        out.append(problems)
    return out


def _grad_avg_result(name: str, per_rank: list[list[str]], world_size: int, compare_ddp: bool) -> CheckResult:
    what = "DDP's" if compare_ddp else "the one-process whole-batch"
    cases = (f"{world_size} ranks x 4 samples each, a 2-layer MLP, every rank's gradients vs {what}",)
    problems = [p for rank_problems in per_rank for p in rank_problems]
    if problems:
        return CheckResult(name, False, problems[0] + (f"\n({len(problems) - 1} more difference(s) on these or "
                                                       "other ranks)" if len(problems) > 1 else ""), cases)
    return CheckResult(name, True, f"every gradient on every rank matches {what} gradients ({world_size} ranks "
                       "x 4 samples each, a 2-layer MLP).", cases)


def check_average_gradients(fn: Callable, world_size: int = 2, compare_ddp: bool = True,
                            timeout_s: float = 120.0) -> CheckResult:
    """``fn(model)``: average ``p.grad`` over the ranks with ``all_reduce``, compared with DDP (lesson 06).

    Launches ``world_size`` gloo processes; each computes the gradient of its own shard
    of one global batch, calls ``fn(model)``, and compares with the gradients that
    ``DistributedDataParallel`` computes (``compare_ddp=False``: with the whole batch's
    gradient in one process, which DDP equals; that saves DDP's start-up time).
    ``fn`` must live in an importable module (see ``%%writefile`` in lesson 06).
    """
    name = "check_average_gradients"
    return _distributed_check(name, fn, lambda: fn(_grad_net()), _grad_avg_worker,
                              lambda per_rank: _grad_avg_result(name, per_rank, world_size, compare_ddp),
                              world_size, compare_ddp, timeout_s=timeout_s)


def ring_sizes(world_size: int) -> list:
    """Tensor shapes the ring check uses: shorter than, equal to, not divisible by world_size, 2-D."""
    sizes = [1, world_size - 1, world_size, world_size + 1, 2 * world_size + 1, 64, 1001, 4099, (4, 3)]
    return list(dict.fromkeys(s for s in sizes if s != 0))


def _ring_worker(rank: int, world_size: int, fns: list, sizes: list) -> list[list[str]]:
    """For each learner function: the cases that differ from ``dist.all_reduce`` on this rank."""
    import torch.distributed as dist

    out = []
    for fn in fns:
        problems = []
        for size in sizes:
            shape = tuple(size) if isinstance(size, (tuple, list)) else (size,)
            g = torch.Generator().manual_seed(1000 * rank + math.prod(shape))
            x = torch.randn(shape, generator=g)  # different values on every rank
            expected = x.clone()
            dist.all_reduce(expected)
            got = x.clone()
            try:
                returned = fn(got)
            except NotImplementedError:
                raise
            except Exception as exc:
                raise RuntimeError(f"on a tensor of shape {shape}: {type(exc).__name__}: {exc}") from exc
            if torch.is_tensor(returned) and returned.data_ptr() != got.data_ptr():
                got = returned
            if got.shape == expected.shape and torch.allclose(got, expected, rtol=1e-5, atol=1e-5):
                continue
            case = f"shape {shape} on {world_size} ranks"
            if got.shape != expected.shape:
                problems.append(f"{case}: rank {rank} got shape {tuple(got.shape)}, expected {shape}")
                continue
            wrong = (~torch.isclose(got, expected, rtol=1e-5, atol=1e-5)).flatten().nonzero().flatten()
            n = got.numel()
            hint = ""
            if n % world_size and wrong.min().item() >= n - n % world_size:
                hint = (f"\nhint: only the last {n - wrong.min().item()} element(s) are wrong: {n} does not split "
                        f"into {world_size} equal chunks; let the chunk sizes differ (e.g. torch.tensor_split).")
            elif n % world_size:
                hint = (f"\nhint: {n} element(s) do not split evenly over {world_size} ranks (some chunks may even "
                        "be empty): use chunks of different sizes, e.g. torch.tensor_split(flat, world_size).")
            elif torch.equal(got, x):
                hint = "\nhint: the tensor is unchanged: the reduction must happen in place (copy the result into it)."
            problems.append(
                f"{case}: rank {rank} has {len(wrong)} of {n} element(s) different from dist.all_reduce, "
                f"first at flat index {wrong[0].item()}: expected {expected.flatten()[wrong[0]].item():.6g}, "
                f"got {got.flatten()[wrong[0]].item():.6g}{hint}")
        out.append(problems)
    return out


def _ring_result(name: str, per_rank: list[list[str]], world_size: int, sizes: list) -> CheckResult:
    cases = tuple(f"shape {tuple(s) if isinstance(s, (tuple, list)) else (s,)} on {world_size} ranks" for s in sizes)
    problems = [p for rank_problems in per_rank for p in rank_problems]
    if problems:
        more = f"\n({len(problems) - 1} more difference(s))" if len(problems) > 1 else ""
        return CheckResult(name, False, problems[0] + more, cases)
    listing = ", ".join(c.split(" on ")[0].removeprefix("shape ") for c in cases)
    return CheckResult(name, True, f"matches dist.all_reduce on every rank for {len(cases)} shapes on "
                       f"{world_size} ranks: {listing}", cases)


def check_ring_all_reduce(fn: Callable, world_size: int = 3, sizes: list | None = None,
                          timeout_s: float = 120.0) -> CheckResult:
    """``fn(tensor)``: a ring all-reduce (sum, in place) from send/recv, against ``dist.all_reduce`` (lesson 06).

    Launches ``world_size`` gloo processes and runs ``fn`` on tensors of every shape in
    ``sizes`` (default ``ring_sizes(world_size)``: lengths below, at and not divisible by
    ``world_size``, and a 2-D tensor). ``fn`` must live in an importable module.
    """
    name = "check_ring_all_reduce"
    sizes = ring_sizes(world_size) if sizes is None else list(sizes)
    return _distributed_check(name, fn, lambda: fn(torch.zeros(3)), _ring_worker,
                              lambda per_rank: _ring_result(name, per_rank, world_size, sizes),
                              world_size, sizes, timeout_s=timeout_s)


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
    from .optim import LAMB, param_groups

    max_grad_norm = 1.0
    hyper = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-6)

    def make_groups(net):
        return [dict(g, **hyper) for g in param_groups(net, weight_decay=0.01)]

    def case(zero_weight=False, grad_scale=0.01, steps=3):
        def run():
            base = _small_net(zero_weight)
            grads = _fixed_grads(base, steps, grad_scale, seed=5)

            def reference(**overrides):
                net = copy.deepcopy(base)
                opt = LAMB(make_groups(net), **{**hyper, "max_grad_norm": max_grad_norm, **overrides})
                return _trajectory(net, opt.step, grads)

            expected = reference()
            variants = {
                "without bias correction (divide m by 1 - beta1**t and v by 1 - beta2**t, t counted from 1)":
                    reference(bias_correction=False),
                "without the global gradient pre-normalization (divide every gradient by "
                "max(1, ||g||_global / max_grad_norm) first, the norm over all parameters together)":
                    reference(max_grad_norm=None),
                "that applies the trust ratio to the weight_decay=0 group too": reference(always_adapt=True),
            }
            net = copy.deepcopy(base)
            groups = make_groups(net)
            got = _trajectory(net, _learner_stepper(fn, groups, defaultdict(dict), max_grad_norm), grads)
            _compare_trajectories(net, groups, expected, got, variants)
        return run

    cases = [
        ("3 steps, small gradients (global norm < max_grad_norm: no pre-normalization)", case()),
        ("3 steps, large gradients of changing size (global norm > max_grad_norm: pre-normalized)",
         case(grad_scale=[3.0, 40.0, 0.5])),
        ("a zero-initialized weight (||w|| = 0: trust ratio 1)", case(zero_weight=True, grad_scale=0.5)),
    ]
    return _finish(_run_cases("check_lamb_step", fn, cases))
