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


# --------------------------------------------------------------------------- the critical batch, one fit

# McCandlish et al. (2018, eq. 2.11): S = S_min (1 + B_crit / B), a line in 1 / B with two parameters; a third
# point is the least that leaves the fit a degree of freedom to say how well it holds.
MIN_FIT_POINTS = 3
UNFIT_STATUS = ("fewer than three of lesson 02's batch sizes reached the target: no critical-batch fit "
                "(S_min and B_crit are not shown)")


def fastest_per_batch(rows: Sequence[dict] | None) -> list[dict]:
    """The fewest steps to target at each batch size (with that run's ``resolution (steps)``), sorted by batch:
    the model assumes an lr tuned at each batch, so of several runs at one batch the fastest stands for it.
    Runs that missed the target are left out."""
    best: dict[int, dict] = {}
    for r in rows or ():
        if r.get("steps to target"):
            b = r["batch size"]
            if b not in best or r["steps to target"] < best[b]["steps to target"]:
                best[b] = r
    return [{"batch size": b, "steps to target": best[b]["steps to target"],
             "resolution (steps)": best[b].get("resolution (steps)")} for b in sorted(best)]


def fieller(a: float, b: float, vaa: float, vbb: float, vab: float, k: float) -> tuple[float, float]:
    """The range of ``beta = b / a`` within ``k`` standard errors, by Fieller's theorem (Fieller 1954): every
    ``beta >= 0`` for which ``(b - beta a)^2 <= k^2 (vbb - 2 beta vab + beta^2 vaa)``, as ``(low, high)``, the
    hull of that set over ``beta >= 0``; ``high`` is ``inf`` when ``a`` itself is within ``k`` errors of zero
    (then ``b / a`` has no upper bound)."""
    qa, qb, qc = a * a - k * k * vaa, a * b - k * k * vab, b * b - k * k * vbb  # qa beta^2 - 2 qb beta + qc <= 0
    disc = qb * qb - qa * qc
    if qa > 0:
        root = math.sqrt(max(disc, 0.0))
        return (max((qb - root) / qa, 0.0), max((qb + root) / qa, 0.0))
    if qa == 0:  # linear: -2 qb beta + qc <= 0
        return (max(qc / (2 * qb), 0.0), math.inf) if qb > 0 else (0.0, math.inf)
    if disc <= 0:
        return (0.0, math.inf)  # every beta: the data cannot place the ratio at all
    r1, r2 = sorted(((qb - math.sqrt(disc)) / qa, (qb + math.sqrt(disc)) / qa))  # the set: beta <= r1 or >= r2
    return (0.0, math.inf) if r1 >= 0 else (max(r2, 0.0), math.inf)


@dataclass
class CriticalBatchFit:
    """``S = S_min (1 + B_crit / B)`` fitted to steps to target: the parameters, their standard errors, their 95%
    ranges (``B_crit``'s by Fieller's theorem, unbounded above where ``S_min`` is within its errors of 0), the
    degrees of freedom (points - 2) and the points themselves."""

    label: str
    s_min: float
    b_crit: float  # inf where S_min is not positive: no bend in the steps
    s_min_se: float
    b_crit_se: float
    s_min_range: tuple[float, float]
    b_crit_range: tuple[float, float]
    df: int
    scale: float  # the weighted residuals' rms over df, at least 1: how far the scatter exceeds the spacing
    points: list[dict] = field(default_factory=list)

    @property
    def bends(self) -> bool:
        """A positive S_min and B_crit: the model predicts steps at any batch."""
        return self.s_min > 0 and 0 < self.b_crit < math.inf

    def basis(self) -> str:
        return (f"{self.label}: line in 1/B weighted by evaluation spacing, {len(self.points)} batches, one seed "
                f"each, {self.df} df")

    def estimates(self) -> list:
        """``S_min`` and ``B_crit`` as :class:`course_lib.compare.Estimate` rows."""
        from . import compare
        tag = f", {self.label}" if self.label else ""
        return [compare.Estimate(f"S_min (steps){tag}", self.s_min, self.s_min_se, *self.s_min_range,
                                 basis=self.basis()),
                compare.Estimate(f"B_crit (samples){tag}", self.b_crit, self.b_crit_se, *self.b_crit_range,
                                 basis=self.basis())]

    def to_dict(self) -> dict:
        """JSON-safe (an unbounded end is the string "inf", as compare's rows keep it)."""
        return {"label": self.label, "estimates": [e.to_dict() for e in self.estimates()], "df": self.df,
                "scale": self.scale, "points": self.points}


def _weighted_line(pts: list[dict]) -> tuple[float, float, float, float, float, float]:
    """``(intercept, slope, var_intercept, var_slope, cov, scale)`` of ``S`` against ``1 / B``, each point weighted
    by ``1 / sigma^2`` with ``sigma = resolution / sqrt(12)`` (the target was crossed somewhere in the last
    evaluation interval: a uniform error; a point without a resolution is known to the step). The covariance is
    ``scale^2 (X^T W X)^-1``, ``scale`` the weighted residuals' rms over ``n - 2`` where the points scatter more
    than their spacing allows (one seed per point: that scatter is the only sign of seed-to-seed noise), 1 if not."""
    xs = [1.0 / p["batch size"] for p in pts]
    ys = [float(p["steps to target"]) for p in pts]
    ws = [12.0 / max(float(p.get("resolution (steps)") or 1), 1.0) ** 2 for p in pts]
    sw = sum(ws)
    mx, my = sum(w * x for w, x in zip(ws, xs)) / sw, sum(w * y for w, y in zip(ws, ys)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
    slope = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / sxx
    intercept = my - slope * mx
    chi2 = sum(w * (y - intercept - slope * x) ** 2 for w, x, y in zip(ws, xs, ys))
    scale = max(math.sqrt(chi2 / (len(pts) - 2)), 1.0)
    s2 = scale * scale
    return intercept, slope, s2 * (1 / sw + mx * mx / sxx), s2 / sxx, -s2 * mx / sxx, scale


def critical_batch_fit(rows: Sequence[dict] | None, label: str = "") -> CriticalBatchFit | None:
    """The course's one fit of ``S = S_min (1 + B_crit / B)`` (McCandlish et al. 2018) to steps-to-target rows
    (``batch size``, ``steps to target``, ``resolution (steps)``; the fastest run at each batch): a weighted line
    in ``1 / B`` (:func:`_weighted_line`), intercept ``S_min``, ``B_crit = slope / intercept``, 95% ranges at
    Student's t with ``n - 2`` degrees of freedom. None where fewer than :data:`MIN_FIT_POINTS` batches reached
    the target (print :data:`UNFIT_STATUS`)."""
    from scipy import stats
    pts = fastest_per_batch(rows)
    if len(pts) < MIN_FIT_POINTS:
        return None
    a, b, vaa, vbb, vab, scale = _weighted_line(pts)
    df = len(pts) - 2
    k = float(stats.t.ppf(0.975, df))
    s_se = math.sqrt(vaa)
    if a > 0:
        b_crit = b / a  # its standard error by the delta method, the two parameters' covariance kept
        b_se = abs(b_crit) * math.sqrt(max(vbb / b ** 2 + vaa / a ** 2 - 2 * vab / (a * b), 0.0)) if b else math.nan
    else:
        b_crit, b_se = math.inf, math.nan
    return CriticalBatchFit(label, a, b_crit, s_se, b_se, (a - k * s_se, a + k * s_se), fieller(a, b, vaa, vbb, vab, k),
                            df, scale, pts)
