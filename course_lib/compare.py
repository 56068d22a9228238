"""The one place where the course decides whether a difference is real.

Every judgement a lesson makes on its measurements is a :class:`Comparison`: what was compared, the
estimate, a 95% interval, the smallest effect that counts (``needed``), how many measurements went into
each arm and what set the interval (``basis``). Its :attr:`~Comparison.outcome` is one word of a fixed
vocabulary, computed from the interval alone, so a row cannot contradict itself:

===============  ===========================================================================
outcome          the interval ...
===============  ===========================================================================
``higher``       lies wholly above the reference by more than ``needed``
``lower``        lies wholly below the reference by more than ``needed``
``same``         lies wholly within ``needed`` of the reference (a difference ruled out)
``unresolved``   straddles a boundary: more repeats, or a finer measurement, would be needed
===============  ===========================================================================

The reference is 1 for a ratio and 0 for a difference; a single quantity (a fitted slope, a model's
error) is compared with a reference the caller names. For ratios ``needed`` is relative (0.05: 5%) and is
applied on the log scale, so a ratio and its inverse are decided alike.

The noise sources are combined here and nowhere else: the spread of repeated measurements (a Student t
interval, from :mod:`scipy.stats`), and a *resolution*, a known limit of the measurement itself (the
spacing of evaluations, the drift of the machine's pace over a lesson), added to the half-width. An arm
measured once has no spread: its interval comes from a stated resolution, never from nothing.

Constructors: :func:`ratio` (two arms of repeats), :func:`paired_ratio` (repeats run back to back in
pairs), :func:`difference` (two estimates with standard errors), :func:`quantity` (one estimate with
its standard error), :func:`slope` (a fitted line's slope), :func:`widen` (a known resolution on top).
:func:`estimate` and :func:`estimates_table` are the rows for quantities that are not comparisons.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from typing import Iterable, Sequence

from scipy import stats

from .results import load_results, save_result
from .tables import Table

CONFIDENCE = 0.95  # every interval in the course: two-sided 95%

HIGHER, LOWER, SAME, UNRESOLVED = "higher", "lower", "same", "unresolved"
OUTCOMES = (HIGHER, LOWER, SAME, UNRESOLVED)

# The smallest effects that count, one reason each. A lesson passes one of these, never a bare number.
TIME_EFFECT = 0.05  # a time within 5% is not worth a change of setting on a shared machine
SPEED_EFFECT = 0.05  # the same for a throughput or a step time
HR_EFFECT = 0.01  # one point of HR@10 is what the NCF literature reports differences in
LOSS_EFFECT = 0.02  # nats: a masked-LM loss difference below this is within one evaluation's sampling noise
MODEL_EFFECT = 0.25  # a performance model within 25% of a measurement is as close as such models claim
EXACT = 0.0  # for an invariant: any resolved difference counts
# A resolution, not an effect: what one run per arm resolves on a shared machine, where runs of one setting move by
# tens of percent between them (the interval of an arm measured once).
ONE_RUN = 0.3


@dataclass(frozen=True)
class Comparison:
    """One verdict: ``question`` (what is compared, e.g. "time to target, 2 ranks / 1 rank"), the
    ``estimate`` with its interval ``[low, high]``, the smallest effect that counts (``needed``), the
    ``unit``, ``n`` (measurements per arm, "3/3"), ``basis`` (what set the interval) and ``reference``
    (what "no effect" is: 1 for a ratio, 0 for a difference). ``relative``: ``needed`` is a fraction of
    the reference, applied on the log scale (ratios)."""

    question: str
    estimate: float
    low: float
    high: float
    needed: float
    unit: str = ""
    n: str = ""
    basis: str = ""
    reference: float = 0.0
    relative: bool = False

    def __post_init__(self):
        for name in ("estimate", "low", "high"):
            if math.isnan(getattr(self, name)):
                raise ValueError(f"Comparison {self.question!r}: {name} is NaN; a comparison needs a measured value")
        if not self.low <= self.estimate <= self.high:
            raise ValueError(f"Comparison {self.question!r}: the interval [{self.low}, {self.high}] does not "
                             f"contain the estimate {self.estimate}")
        if self.needed < 0:
            raise ValueError(f"Comparison {self.question!r}: needed must be >= 0, got {self.needed}")

    @property
    def bounds(self) -> tuple[float, float]:
        """The band around the reference that does not count: ``(ref - needed, ref + needed)``, or for a
        relative comparison ``(ref / (1 + needed), ref * (1 + needed))``."""
        if self.relative:
            return self.reference / (1 + self.needed), self.reference * (1 + self.needed)
        return self.reference - self.needed, self.reference + self.needed

    @property
    def outcome(self) -> str:
        """One of :data:`OUTCOMES`, from the interval alone."""
        lo, hi = self.bounds
        if self.low > hi:
            return HIGHER
        if self.high < lo:
            return LOWER
        if self.needed > 0 and lo <= self.low and self.high <= hi:
            return SAME
        return UNRESOLVED

    @property
    def decided(self) -> bool:
        """The interval clears ``needed`` in one direction."""
        return self.outcome in (HIGHER, LOWER)

    def to_dict(self) -> dict:
        """JSON-safe: an unbounded end (a ratio's range with no upper bound) is the string "inf" or "-inf"."""
        d = {**asdict(self), "outcome": self.outcome}
        return {k: (str(v) if isinstance(v, float) and math.isinf(v) else v) for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict) -> "Comparison":
        unbounded = lambda v: float(v) if v in ("inf", "-inf") else v  # noqa: E731
        return cls(**{k: unbounded(d[k]) for k in cls.__dataclass_fields__ if k in d})

    def row(self) -> dict:
        """The row :func:`table` shows."""
        return {"question": self.question, "estimate": _num(self.estimate, self.unit),
                "interval": f"[{_num(self.low, self.unit)}, {_num(self.high, self.unit)}]",
                "needed": _needed(self), "n": self.n, "basis": self.basis, "outcome": self.outcome}


def _num(x: float, unit: str) -> str:
    if math.isinf(x):
        return "-inf" if x < 0 else "inf"
    text = f"{x:.3g}" if x == 0 or 1e-3 <= abs(x) < 1e5 else f"{x:.2e}"
    return f"{text}{unit}" if unit in ("x", "%") else (f"{text} {unit}" if unit else text)


def _needed(c: Comparison) -> str:
    if c.relative:
        return f"±{100 * c.needed:.3g}%"
    return f"±{_num(c.needed, c.unit)}"


def _t(df: float | None) -> float:
    """The two-sided 95% quantile: Student's t at ``df`` degrees of freedom, the normal's where df is None."""
    q = 0.5 + CONFIDENCE / 2
    return float(stats.norm.ppf(q)) if df is None or math.isinf(df) else float(stats.t.ppf(q, df))


def _positive(values: Sequence[float], what: str) -> list[float]:
    out = [float(v) for v in values]
    if not out:
        raise ValueError(f"{what}: no measurements")
    bad = [v for v in out if not (v > 0 and math.isfinite(v))]
    if bad:
        raise ValueError(f"{what}: a ratio needs positive, finite measurements, got {bad}")
    return out


def _mean_var(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, (sum((x - m) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0)


def ratio(question: str, a: Sequence[float], b: Sequence[float], *, needed: float, resolution: float = 0.0,
          basis: str = "", unit: str = "x") -> Comparison:
    """``b`` relative to ``a``: the ratio of their **geometric means**, from repeated measurements of each
    arm (seeds, repeats; not paired).

    The interval is Welch's t interval of the difference of the arms' mean logarithms (each arm's spread
    estimated separately, Welch-Satterthwaite degrees of freedom), exponentiated, so ``low <= estimate
    <= high`` always and the ratio and its inverse get the same verdict. ``resolution`` (relative: 0.09
    for a pace that moved 9%) is added to the half-width on the log scale. An arm measured once
    contributes no spread: with a single measurement in either arm the interval is the resolution
    alone, and a resolution must be given."""
    a, b = _positive(a, question), _positive(b, question)
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    (ma, va), (mb, vb) = _mean_var(la), _mean_var(lb)
    est = mb - ma
    if min(len(a), len(b)) < 2:
        if resolution <= 0:
            raise ValueError(f"{question}: an arm measured once has no spread; pass the resolution that bounds "
                             "it (evaluation spacing, pace drift) or measure each arm at least twice")
        half = 0.0
    else:
        se2a, se2b = va / len(a), vb / len(b)
        se = math.sqrt(se2a + se2b)
        df = (se2a + se2b) ** 2 / (se2a ** 2 / (len(a) - 1) + se2b ** 2 / (len(b) - 1)) if se > 0 else None
        half = _t(df) * se
    half += math.log1p(resolution)
    return Comparison(question, math.exp(est), math.exp(est - half), math.exp(est + half), needed, unit,
                      f"{len(a)}/{len(b)}", basis or _basis(len(a), len(b), resolution), 1.0, True)


def paired_ratio(question: str, a: Sequence[float], b: Sequence[float], *, needed: float,
                 resolution: float = 0.0, basis: str = "", unit: str = "x") -> Comparison:
    """``b`` relative to ``a`` where measurement ``i`` of each arm ran back to back (interleaved rounds on a
    shared machine: a busy moment slows both runs of a pair alike). The estimate is the geometric mean of
    the per-pair ratios, the interval a one-sample t interval of their logarithms (n - 1 degrees of
    freedom), widened by ``resolution`` as in :func:`ratio`; one pair needs a resolution."""
    a, b = _positive(a, question), _positive(b, question)
    if len(a) != len(b):
        raise ValueError(f"{question}: paired measurements need as many of each arm, got {len(a)} and {len(b)}")
    logs = [math.log(y / x) for x, y in zip(a, b)]
    m, v = _mean_var(logs)
    if len(logs) < 2:
        if resolution <= 0:
            raise ValueError(f"{question}: one pair has no spread; pass a resolution or run more rounds")
        half = 0.0
    else:
        half = _t(len(logs) - 1) * math.sqrt(v / len(logs))
    half += math.log1p(resolution)
    return Comparison(question, math.exp(m), math.exp(m - half), math.exp(m + half), needed, unit,
                      f"{len(a)} pairs", basis or f"{len(a)} interleaved rounds", 1.0, True)


def difference(question: str, a: float, se_a: float, b: float, se_b: float, *, needed: float,
               df: float | None = None, resolution: float = 0.0, basis: str = "", unit: str = "",
               n: str = "") -> Comparison:
    """``b - a`` from two independent estimates with standard errors: ``se = sqrt(se_a^2 + se_b^2)``, a t
    interval at ``df`` degrees of freedom (the normal's where None), plus ``resolution`` (absolute, in
    ``unit``). Two exact values (both standard errors 0) need a resolution."""
    se = math.sqrt(se_a ** 2 + se_b ** 2)
    if se == 0 and resolution <= 0:
        raise ValueError(f"{question}: two values without standard errors need a resolution to be compared")
    half = _t(df) * se + resolution
    est = b - a
    return Comparison(question, est, est - half, est + half, needed, unit, n, basis or _basis_se(df, resolution))


def quantity(question: str, value: float, se: float, *, reference: float = 0.0, needed: float,
             df: float | None = None, resolution: float = 0.0, basis: str = "", unit: str = "",
             n: str = "") -> Comparison:
    """One estimate with its standard error against ``reference`` (a fitted slope against 0, a model's
    prediction against the measurement): a t interval at ``df`` degrees of freedom plus ``resolution``."""
    if se == 0 and resolution <= 0:
        raise ValueError(f"{question}: a value without a standard error needs a resolution to be compared")
    half = _t(df) * se + resolution
    return Comparison(question, value, value - half, value + half, needed, unit, n,
                      basis or _basis_se(df, resolution), reference)


def quantity_ratio(question: str, value: float, rel_se: float, *, needed: float, df: float | None = None,
                   resolution: float = 0.0, basis: str = "", unit: str = "x", n: str = "") -> Comparison:
    """A ratio known with a relative standard error (a measurement over a model's prediction whose spread
    was measured): the interval on the log scale, ``exp(±(t * rel_se + log(1 + resolution)))``."""
    if not value > 0:
        raise ValueError(f"{question}: a ratio must be positive, got {value}")
    if rel_se == 0 and resolution <= 0:
        raise ValueError(f"{question}: a ratio without a standard error needs a resolution to be compared")
    half = _t(df) * rel_se + math.log1p(resolution)
    return Comparison(question, value, value * math.exp(-half), value * math.exp(half), needed, unit, n,
                      basis or _basis_se(df, resolution), 1.0, True)


@dataclass(frozen=True)
class Fit:
    """A least-squares line ``y = intercept + slope * x`` with the standard errors :func:`scipy.stats.linregress`
    gives (``df = n - 2``); standard errors are NaN with fewer than three points."""

    intercept: float
    slope: float
    intercept_se: float
    slope_se: float
    n: int

    @property
    def df(self) -> int:
        return self.n - 2


def line_fit(xs: Sequence[float], ys: Sequence[float], weights: Sequence[float] | None = None) -> Fit:
    """The least-squares line through ``(xs, ys)``; with ``weights`` (``1 / sigma^2`` per point) a weighted
    fit whose standard errors come from the weighted residuals. Raises where fewer than two distinct x."""
    xs, ys = [float(x) for x in xs], [float(y) for y in ys]
    if len(xs) != len(ys):
        raise ValueError(f"line_fit needs as many x as y, got {len(xs)} and {len(ys)}")
    if len(set(xs)) < 2:
        raise ValueError(f"line_fit needs at least two distinct x, got {sorted(set(xs))}")
    if weights is None:
        if len(xs) == 2:
            slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
            return Fit(ys[0] - slope * xs[0], slope, math.nan, math.nan, 2)
        r = stats.linregress(xs, ys)
        return Fit(float(r.intercept), float(r.slope), float(r.intercept_stderr), float(r.stderr), len(xs))
    w = [float(x) for x in weights]
    sw = sum(w)
    mx, my = sum(wi * x for wi, x in zip(w, xs)) / sw, sum(wi * y for wi, y in zip(w, ys)) / sw
    sxx = sum(wi * (x - mx) ** 2 for wi, x in zip(w, xs))
    slope = sum(wi * (x - mx) * (y - my) for wi, x, y in zip(w, xs, ys)) / sxx
    intercept = my - slope * mx
    if len(xs) < 3:
        return Fit(intercept, slope, math.nan, math.nan, len(xs))
    s2 = sum(wi * (y - intercept - slope * x) ** 2 for wi, x, y in zip(w, xs, ys)) / (len(xs) - 2)
    return Fit(intercept, slope, math.sqrt(s2 * (1 / sw + mx ** 2 / sxx)), math.sqrt(s2 / sxx), len(xs))


def slope(question: str, xs: Sequence[float], ys: Sequence[float], *, needed: float, reference: float = 0.0,
          unit: str = "", basis: str = "") -> Comparison:
    """A fitted line's slope against ``reference`` (0: does ``y`` change with ``x`` at all?), with its t
    interval at ``n - 2`` degrees of freedom. Needs three points (two leave no residual to measure)."""
    fit = line_fit(xs, ys)
    if fit.n < 3:
        raise ValueError(f"{question}: a slope's interval needs at least three points, got {fit.n}")
    return quantity(question, fit.slope, fit.slope_se, reference=reference, needed=needed, df=fit.df, unit=unit,
                    n=str(fit.n), basis=basis or f"line through {fit.n} points")


def widen(c: Comparison, resolution: float, basis: str) -> Comparison:
    """``c`` with ``resolution`` added to both sides of its interval (relative for a ratio, in ``c.unit``
    otherwise), and ``basis`` appended to what set it."""
    if resolution < 0:
        raise ValueError(f"a resolution must be >= 0, got {resolution}")
    if c.relative:
        f = 1 + resolution
        low, high = c.low / f, c.high * f
    else:
        low, high = c.low - resolution, c.high + resolution
    return replace(c, low=low, high=high, basis=f"{c.basis}; {basis}" if c.basis else basis)


def _basis(na: int, nb: int, resolution: float) -> str:
    parts = [f"spread of {na} and {nb} runs"] if min(na, nb) > 1 else []
    if resolution > 0:
        parts.append(f"resolution {100 * resolution:.2g}%")
    return "; ".join(parts)


def _basis_se(df, resolution: float) -> str:
    parts = ["standard error" + (f", {df:g} dof" if df is not None else "")]
    if resolution > 0:
        parts.append(f"resolution {resolution:.3g}")
    return "; ".join(parts)


def outcomes_line(comparisons: Iterable[Comparison]) -> str:
    """Each comparison's question and outcome, for a saved result's one-line reason (no numbers: those are the
    comparisons' own)."""
    return "; ".join(f"{c.question}: {c.outcome}" for c in comparisons) or "not reached on every seed"


COLUMNS = ["question", "estimate", "interval", "needed", "n", "basis", "outcome"]


def table(comparisons: Iterable[Comparison], title: str = "") -> Table:
    """The course's verdict table: question | estimate | interval (95%) | needed | n | basis | outcome."""
    t = Table(list(COLUMNS), title=title)
    for c in comparisons:
        t.add(**c.row())
    return t


@dataclass(frozen=True)
class Estimate:
    """A measured quantity that is not a comparison (an alpha-beta fit, a crossover, a noise scale), with its
    standard error and 95% interval."""

    name: str
    value: float
    se: float
    low: float
    high: float
    unit: str = ""
    basis: str = ""

    def to_dict(self) -> dict:
        """JSON-safe: an unbounded end is the string "inf" or "-inf", a standard error not measured is None."""
        return {k: (str(v) if isinstance(v, float) and math.isinf(v) else None
                    if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "Estimate":
        back = lambda v: float(v) if v in ("inf", "-inf") else math.nan if v is None else v  # noqa: E731
        return cls(**{k: back(d[k]) for k in cls.__dataclass_fields__ if k in d})

    def row(self) -> dict:
        se = "n/a" if math.isnan(self.se) else _num(self.se, self.unit)
        interval = ("n/a" if math.isnan(self.low) else f"[{_num(self.low, self.unit)}, {_num(self.high, self.unit)}]")
        return {"quantity": self.name, "estimate": _num(self.value, self.unit), "standard error": se,
                "interval": interval, "basis": self.basis}


def estimate(name: str, value: float, se: float, *, df: float | None = None, unit: str = "",
             basis: str = "") -> Estimate:
    """A quantity with its standard error (NaN where none was measured) and the t interval at ``df``."""
    half = _t(df) * se if not math.isnan(se) else math.nan
    return Estimate(name, float(value), float(se), value - half, value + half, unit, basis)


def mean_estimate(name: str, values: Sequence[float], *, unit: str = "", basis: str = "") -> Estimate:
    """The mean of repeated measurements with its standard error (n - 1 degrees of freedom)."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError(f"{name}: no measurements")
    m, v = _mean_var(xs)
    se = math.sqrt(v / len(xs)) if len(xs) > 1 else math.nan
    return estimate(name, m, se, df=len(xs) - 1 if len(xs) > 1 else None, unit=unit,
                    basis=basis or f"{len(xs)} measurements")


def estimates_table(estimates: Iterable[Estimate], title: str = "") -> Table:
    t = Table(["quantity", "estimate", "standard error", "interval", "basis"], title=title)
    for e in estimates:
        t.add(**e.row())
    return t


RESULT_PREFIX = "comparisons_"


def save(lesson: str, comparisons: Iterable[Comparison], directory=None):
    """Save a lesson's comparisons with its results (``comparisons_<lesson>.json``), for the run summary."""
    return save_result(f"{RESULT_PREFIX}{lesson}", {"lesson": lesson,
                                                     "comparisons": [c.to_dict() for c in comparisons]}, directory)


def load_all(directory=None) -> dict[str, list[Comparison]]:
    """Every lesson's saved comparisons, ``{lesson: [Comparison, ...]}``, in lesson order."""
    out = {}
    for name, rec in sorted(load_results(directory).items()):
        if name.startswith(RESULT_PREFIX):
            try:
                out[rec.get("lesson", name[len(RESULT_PREFIX):])] = [Comparison.from_dict(d)
                                                                      for d in rec.get("comparisons", [])]
            except (TypeError, ValueError, KeyError) as exc:
                raise ValueError(f"{name}.json in the results folder is not a list of comparisons ({exc}); "
                                 "delete it and re-run its lesson") from exc
    return out


def summary_table(directory=None) -> Table | None:
    """One table of every lesson's saved comparisons (what this machine showed), None where none were saved."""
    saved = load_all(directory)
    if not saved:
        return None
    t = Table(["lesson", *COLUMNS], title="What this machine showed: every lesson's comparisons")
    for lesson, comps in saved.items():
        for c in comps:
            t.add(lesson=lesson, **c.row())
    return t


def dumps(comparisons: Iterable[Comparison]) -> str:
    return json.dumps([c.to_dict() for c in comparisons], indent=2)


def difference_of_means(question: str, a: Sequence[float], b: Sequence[float], *, needed: float,
                        resolution: float, basis: str) -> Comparison:
    """``mean(b) - mean(a)`` from repeated measurements of each arm (seeds, not paired): Welch's t interval (each
    arm's spread estimated separately, Welch-Satterthwaite degrees of freedom), as :func:`ratio`
    takes on the log scale, plus ``resolution``. An arm measured once contributes no spread: with a single
    measurement in either arm the interval is the resolution alone."""
    ea, eb = mean_estimate(question, a), mean_estimate(question, b)
    sa, sb = (0.0, 0.0) if min(len(a), len(b)) < 2 else (ea.se, eb.se)
    df = (sa ** 2 + sb ** 2) ** 2 / (sa ** 4 / (len(a) - 1) + sb ** 4 / (len(b) - 1)) if sa or sb else None
    return difference(question, ea.value, sa, eb.value, sb, needed=needed, df=df, resolution=resolution,
                      n=f"{len(a)}/{len(b)}", basis=basis)
