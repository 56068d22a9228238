"""The science of the batch size, as estimators (lesson 11): noise scale, sharpness, loss slices.

One calling convention for every estimator: ``loss_fn(model, batch)`` returns the **mean**
loss over the batch as a 0-d tensor, and the estimators differentiate it with respect to
every trainable parameter of ``model``.

* :func:`noise_scale` — the *simple noise scale* ``B_simple = tr(Sigma) / |G|^2`` of McCandlish
  et al. (2018, "An Empirical Model of Large-Batch Training", appendix A), from gradient norms
  measured at two batch sizes. ``G`` is the true (full-data) gradient, ``Sigma`` the covariance
  of one example's gradient. A batch of ``B`` examples has ``E|G_B|^2 = |G|^2 + tr(Sigma) / B``:
  two batch sizes give two equations, solved for both unknowns without bias. Their ratio
  predicts the critical batch: below it, doubling the batch halves the steps; above it, it
  does not.
* :func:`top_hessian_eigenvalue` — the sharpness of Keskar et al. (2017): the largest
  eigenvalue of the loss's Hessian, by power iteration on Hessian-vector products (a double
  backward pass: Pearlmutter 1994), never forming the Hessian.
* :func:`hutchinson_trace` — the Hessian's trace (the sum of all curvatures), by Hutchinson's
  estimator ``E[v^T H v]`` over random sign vectors.
* :func:`interpolation_slice`, :func:`random_direction_slice` — the loss along the straight
  line between two solutions, and along a random *filter-normalized* direction around one
  (Li et al. 2018, "Visualizing the Loss Landscape of Neural Nets"): the landscape figure.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import torch

from .metrics import jackknife_stderr

LossFn = Callable[[torch.nn.Module, object], torch.Tensor]  # (model, batch) -> mean loss, 0-d


def trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters the estimators differentiate: every one with ``requires_grad``."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"{type(model).__name__} has no trainable parameter: nothing to differentiate")
    return params


def _mean_loss(model: torch.nn.Module, loss_fn: LossFn, batch) -> torch.Tensor:
    loss = loss_fn(model, batch)
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
        raise ValueError(f"loss_fn(model, batch) must return the mean loss as a 0-d tensor, got "
                         f"{type(loss).__name__} {getattr(loss, 'shape', '')}: reduce it with .mean()")
    return loss


def grad_sq_norm(model: torch.nn.Module, loss_fn: LossFn, batch) -> float:
    """``|g|^2`` of the mean loss over ``batch``, all trainable parameters together."""
    grads = torch.autograd.grad(_mean_loss(model, loss_fn, batch), trainable(model))
    return float(sum(g.double().pow(2).sum() for g in grads))


# --------------------------------------------------------------------------- the noise scale


@dataclass(frozen=True)
class NoiseScale:
    """One two-batch estimate of the gradient noise scale (McCandlish et al. 2018, appendix A)."""

    b_simple: float  # tr(Sigma) / |G|^2, in examples
    trace_cov: float  # tr(Sigma): the per-example gradient variance, summed over parameters
    grad_sq_norm: float  # |G|^2: the squared norm of the true gradient
    stderr: float  # standard error of b_simple over the repeats (jackknife); nan with one repeat
    b_small: int
    b_big: int
    repeats: int
    # each pair's unbiased (|G|^2, tr(Sigma)): what a pooled estimate over several measurements is jackknifed over
    # (lesson 11's adaptive batch pools several measurements and shows that pool's error)
    g2s: tuple = field(default=(), repr=False)
    traces: tuple = field(default=(), repr=False)

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return (f"B_simple = {self.b_simple:,.0f} +/- {self.stderr:,.0f} examples "
                f"(tr Sigma {self.trace_cov:.3g}, |G|^2 {self.grad_sq_norm:.3g}; batches {self.b_small} and "
                f"{self.b_big}, {self.repeats} repeats)")


def two_batch_estimates(sq_small: float, sq_big: float, b_small: int, b_big: int) -> tuple[float, float]:
    """``(|G|^2, tr(Sigma))`` from mean squared gradient norms at two batch sizes (unbiased).

    From ``E|G_B|^2 = |G|^2 + tr(Sigma) / B`` at ``B = b_small`` and ``B = b_big``
    (McCandlish et al. 2018, eqs. A.2-A.3)::

        |G|^2    = (b_big |G_big|^2 - b_small |G_small|^2) / (b_big - b_small)
        tr Sigma = (|G_small|^2 - |G_big|^2) / (1 / b_small - 1 / b_big)
    """
    if not 0 < b_small < b_big:
        raise ValueError(f"need 0 < b_small < b_big, got b_small={b_small}, b_big={b_big}")
    g2 = (b_big * sq_big - b_small * sq_small) / (b_big - b_small)
    trace = (sq_small - sq_big) / (1.0 / b_small - 1.0 / b_big)
    return g2, trace


def _ratio_stderr(g2s: list[float], traces: list[float]) -> float:
    """Jackknife standard error of ``mean(trace) / mean(g2)`` over the repeats."""
    if len(g2s) < 2:
        return math.nan
    sg, st = sum(g2s), sum(traces)
    return jackknife_stderr([(st - t) / (sg - g) if sg - g != 0 else math.nan for g, t in zip(g2s, traces)])


def noise_scale(model: torch.nn.Module, loss_fn: LossFn, sample: Callable[[int], object], b_small: int, b_big: int,
                repeats: int = 8, *, rel_error: float | None = None, max_repeats: int | None = None) -> NoiseScale:
    """The simple noise scale of ``model`` at its current weights.

    ``sample(b)`` returns a fresh batch of ``b`` examples. Each repeat measures ``|G_B|^2`` on
    one batch of ``b_small`` and one of ``b_big`` and turns them into unbiased estimates of
    ``|G|^2`` and ``tr(Sigma)``; like McCandlish et al., the two are averaged over the repeats
    *before* their ratio is taken (the ratio of two noisy numbers is biased; the average of
    each is not). ``stderr`` is the jackknife standard error of that ratio over the repeats.
    Cost: ``repeats`` backward passes at each batch size; the weights are not changed.

    ``rel_error`` (lesson 11): the repeats are *chosen for a stated standard error*: after
    ``repeats`` pairs, while ``stderr`` is above ``rel_error`` times ``b_simple`` (or ``|G|^2`` is not
    yet positive), the pairs are doubled, up to ``max_repeats`` in all (default ``16 * repeats``).
    Doubling, not one pair at a time, so the stopping rule looks at the jackknife error a few times
    only (each look at a noisy error estimate that stops when it dips favours optimistic errors).
    The result's ``repeats`` says how many it took; its ``stderr`` may still exceed the goal when
    ``max_repeats`` was reached, and the caller says so."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if rel_error is not None and not rel_error > 0:
        raise ValueError(f"rel_error={rel_error}: the stated standard error must be a positive fraction of B_simple "
                         "(0.15: 15 %), or None for a fixed number of repeats")
    cap = repeats if rel_error is None else (max_repeats or 16 * repeats)
    if cap < repeats:
        raise ValueError(f"max_repeats={max_repeats} is below repeats={repeats}: raise it or lower repeats")
    g2s, traces = [], []
    want = repeats
    while True:
        while len(g2s) < want:
            s_small = grad_sq_norm(model, loss_fn, sample(b_small))
            s_big = grad_sq_norm(model, loss_fn, sample(b_big))
            g2, trace = two_batch_estimates(s_small, s_big, b_small, b_big)
            g2s.append(g2)
            traces.append(trace)
        est = _estimate(g2s, traces, b_small, b_big)
        met = rel_error is None or (math.isfinite(est.b_simple) and est.stderr <= rel_error * est.b_simple)
        if met or want >= cap:
            return est
        want = min(2 * want, cap)


def _estimate(g2s: list[float], traces: list[float], b_small: int, b_big: int) -> NoiseScale:
    """:class:`NoiseScale` from the repeats' unbiased estimates (averaged, then divided)."""
    n = len(g2s)
    g2, trace = sum(g2s) / n, sum(traces) / n
    b_simple = trace / g2 if g2 > 0 else math.inf  # |G|^2 <= 0: the noise swamps the signal at these batches
    return NoiseScale(b_simple=b_simple, trace_cov=trace, grad_sq_norm=g2, stderr=_ratio_stderr(g2s, traces),
                      b_small=b_small, b_big=b_big, repeats=n, g2s=tuple(g2s), traces=tuple(traces))


def pooled_noise_scale(measurements: Sequence[tuple[Sequence[float], Sequence[float]]]) -> tuple[float, float]:
    """``(B_simple, stderr)`` of several measurements pooled as ``sum_i mean tr(Sigma)_i / sum_i mean |G|^2_i`` (each
    measurement's ``(g2s, traces)`` pairs, :class:`NoiseScale`'s), the error by the jackknife over every pair, each
    left out of its own measurement's means; ``(inf, nan)`` when the pooled ``|G|^2`` is not positive, the error nan
    with fewer than two pairs in all."""
    ms = [(list(g), list(t)) for g, t in measurements if len(g)]
    if not ms or any(len(g) != len(t) for g, t in ms):
        raise ValueError("pooled_noise_scale: give each measurement's equal-length (g2s, traces) pairs")
    mg = [sum(g) / len(g) for g, _ in ms]
    mt = [sum(t) / len(t) for _, t in ms]
    sg, st = sum(mg), sum(mt)
    if not sg > 0:
        return math.inf, math.nan
    loo = []
    for i, (g, t) in enumerate(ms):
        n = len(g)
        if n < 2:
            continue
        for gj, tj in zip(g, t):
            dg = (n * mg[i] - gj) / (n - 1) - mg[i]
            dt = (n * mt[i] - tj) / (n - 1) - mt[i]
            loo.append((st + dt) / (sg + dg) if sg + dg != 0 else math.nan)
    return st / sg, jackknife_stderr(loo)


def least_squares_noise_scale(delta_sq_norm: float, dim: int, noise_var: float) -> dict:
    """The closed form the estimator is tested against: ``y = x . w* + eps``, ``x ~ N(0, I_d)``,
    ``eps ~ N(0, s^2)``, loss ``(x . w - y)^2 / 2`` at ``w = w* + delta``. The per-example
    gradient is ``x (x . delta - eps)``, so ``G = delta``, ``E|g|^2 = (d + 2)|delta|^2 + d s^2``
    (Gaussian fourth moments) and ``tr(Sigma) = (d + 1)|delta|^2 + d s^2``."""
    g2 = delta_sq_norm
    trace = (dim + 1) * delta_sq_norm + dim * noise_var
    return {"grad_sq_norm": g2, "trace_cov": trace, "b_simple": trace / g2}


def least_squares_problem(dim: int = 10, noise: float = 0.5, delta_norm: float = 1.0, seed: int = 0):
    """The problem of :func:`least_squares_noise_scale`, ready for :func:`noise_scale`:
    ``(model, loss_fn, sample, exact)`` — a bias-free ``Linear(dim, 1)`` at ``w* + delta`` with
    ``|delta| = delta_norm`` (float64), the mean squared-error loss / 2, a sampler of Gaussian
    ``(x, y)`` batches, and the closed-form ``grad_sq_norm``, ``trace_cov`` and ``b_simple``."""
    gen = torch.Generator().manual_seed(seed)
    w_star = torch.randn(dim, generator=gen, dtype=torch.float64)
    delta = torch.randn(dim, generator=gen, dtype=torch.float64)
    delta *= delta_norm / delta.norm()
    model = torch.nn.Linear(dim, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_((w_star + delta)[None])

    def sample(b: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(b, dim, generator=gen, dtype=torch.float64)  # (b, dim)
        return x, x @ w_star + noise * torch.randn(b, generator=gen, dtype=torch.float64)

    def loss_fn(m: torch.nn.Module, batch) -> torch.Tensor:
        x, y = batch
        return 0.5 * (m(x).squeeze(1) - y).pow(2).mean()

    return model, loss_fn, sample, least_squares_noise_scale(delta_norm ** 2, dim, noise ** 2)


# --------------------------------------------------------------------------- sharpness


def hessian_vector_product(model: torch.nn.Module, loss_fn: LossFn, batch, vec: Sequence[torch.Tensor],
                           grads: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """``H v`` by a double backward: the gradient of ``g . v`` (``grads`` built with
    ``create_graph=True`` may be passed to reuse the first backward)."""
    params = trainable(model)
    if grads is None:
        grads = torch.autograd.grad(_mean_loss(model, loss_fn, batch), params, create_graph=True)
    dot = sum((g * v).sum() for g, v in zip(grads, vec))
    return list(torch.autograd.grad(dot, params, retain_graph=True))


def _dot(a, b) -> float:
    return float(sum((x.double() * y.double()).sum() for x, y in zip(a, b)))


def top_hessian_eigenvalue(model: torch.nn.Module, loss_fn: LossFn, batch, iters: int = 100, tol: float = 1e-3,
                           seed: int = 0) -> float:
    """The largest-magnitude eigenvalue of the Hessian of the mean loss on ``batch`` (the
    sharpness), by power iteration on Hessian-vector products: ``v <- H v / |H v|`` until the
    Rayleigh quotient ``v . H v`` changes by less than ``tol`` (relative) or ``iters`` run out.
    Near a minimum the top of the spectrum is positive, and this is its top. The graph of the
    first backward is built once and reused by every iteration."""
    params = trainable(model)
    grads = torch.autograd.grad(_mean_loss(model, loss_fn, batch), params, create_graph=True)
    gen = torch.Generator().manual_seed(seed)
    v = [torch.randn(p.shape, generator=gen).to(p) for p in params]
    norm = math.sqrt(_dot(v, v))
    v = [x / norm for x in v]
    eig = None
    for _ in range(iters):
        hv = hessian_vector_product(model, loss_fn, batch, v, grads)
        new = _dot(v, hv)  # Rayleigh quotient, |v| = 1
        norm = math.sqrt(_dot(hv, hv))
        if norm == 0:
            return 0.0
        v = [x / norm for x in hv]
        if eig is not None and abs(new - eig) <= tol * abs(new):
            return new
        eig = new
    return eig


def hutchinson_trace(model: torch.nn.Module, loss_fn: LossFn, batch, samples: int = 32, seed: int = 0,
                     with_stderr: bool = False):
    """``tr(H)`` by Hutchinson's estimator: the mean of ``v . H v`` over random sign vectors ``v``
    (unbiased; its variance is ``2 * sum of the squared off-diagonal entries`` per sample). With
    ``with_stderr``: ``(trace, standard error)``, the error from the samples' spread (nan for one sample)."""
    params = trainable(model)
    grads = torch.autograd.grad(_mean_loss(model, loss_fn, batch), params, create_graph=True)
    gen = torch.Generator().manual_seed(seed)
    values = []
    for _ in range(samples):
        v = [(torch.randint(0, 2, p.shape, generator=gen) * 2 - 1).to(p) for p in params]
        values.append(_dot(v, hessian_vector_product(model, loss_fn, batch, v, grads)))
    mean = sum(values) / samples
    if not with_stderr:
        return mean
    if samples < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((x - mean) ** 2 for x in values) / (samples - 1) / samples)


# --------------------------------------------------------------------------- loss slices


def flat_parameters(model: torch.nn.Module) -> list[torch.Tensor]:
    """A detached copy of the trainable parameters (a 'solution' for the slices)."""
    return [p.detach().clone() for p in trainable(model)]


@torch.no_grad()
def _losses_along(model, loss_fn, batch, point: Callable[[float], list[torch.Tensor]], alphas) -> list[float]:
    params = trainable(model)
    saved = [p.detach().clone() for p in params]
    was_training = model.training
    model.eval()  # a slice reads the landscape; BatchNorm/dropout must not move with it
    out = []
    try:
        for a in alphas:
            for p, x in zip(params, point(float(a))):
                p.copy_(x)
            out.append(float(loss_fn(model, batch)))
    finally:
        for p, x in zip(params, saved):
            p.copy_(x)
        model.train(was_training)
    return out


def interpolation_slice(model: torch.nn.Module, loss_fn: LossFn, batch, theta_a: Sequence[torch.Tensor],
                        theta_b: Sequence[torch.Tensor], alphas: Sequence[float]) -> list[float]:
    """The loss at ``(1 - alpha) theta_a + alpha theta_b`` for each alpha (0: a, 1: b); the
    model's own weights are restored afterwards."""
    return _losses_along(model, loss_fn, batch, lambda a: [(1 - a) * x + a * y for x, y in zip(theta_a, theta_b)],
                         alphas)


def filter_normalized_direction(theta: Sequence[torch.Tensor], seed: int = 0) -> list[torch.Tensor]:
    """A random direction scaled filter by filter to the weights' own norms (Li et al. 2018):
    for a tensor with 2+ dims each slice along dim 0 (a neuron's weights, an embedding row)
    gets the norm of the same slice of ``theta``; 1-D tensors (biases, norm parameters) get 0."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for w in theta:
        d = torch.randn(w.shape, generator=gen).to(w)
        if w.dim() < 2:
            out.append(torch.zeros_like(w))
            continue
        dims = tuple(range(1, w.dim()))
        scale = w.norm(dim=dims, keepdim=True) / d.norm(dim=dims, keepdim=True).clamp_min(1e-12)
        out.append(d * scale)
    return out


def random_direction_slice(model: torch.nn.Module, loss_fn: LossFn, batch, alphas: Sequence[float],
                           theta: Sequence[torch.Tensor] | None = None, seed: int = 0) -> list[float]:
    """The loss at ``theta + alpha d`` along a filter-normalized random direction ``d``
    (``theta``: the model's current weights by default). Because ``d`` is scaled like the
    weights, slices of two solutions with different weight norms can be compared."""
    theta = flat_parameters(model) if theta is None else list(theta)
    d = filter_normalized_direction(theta, seed)
    return _losses_along(model, loss_fn, batch, lambda a: [x + a * y for x, y in zip(theta, d)], alphas)
