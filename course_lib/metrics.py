"""Ranking metrics and timing helpers (introduced in lesson 01).

Evaluation follows the NCF paper (He et al., 2017): every user has one held-out
positive (leave-one-out) and ``num_neg`` sampled items the user never interacted
with. The model scores the 1 + num_neg candidates; the positive sits in **column 0**
of the score matrix.

Ties are counted pessimistically: a negative that scores *equal* to the positive is
ranked above it. A model that outputs a constant therefore gets HR@K = 0, never a
lucky hit, and a popularity ranking cannot win by tie-breaking order.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

import torch


def positive_rank(scores: torch.Tensor) -> torch.Tensor:
    """0-based rank of the positive (column 0) among its row: (U, 1 + n) -> (U,).

    rank = number of negatives scoring >= the positive (ties pessimistic). A NaN score (a
    diverged model) counts as the lowest possible: NaN >= x is False, so without this a dead
    model would rank every positive first and score HR@10 = 1.
    """
    if scores.dim() != 2 or scores.shape[1] < 2:
        raise ValueError(f"scores must be (users, 1 + negatives), got shape {tuple(scores.shape)}")
    scores = torch.nan_to_num(scores.float(), nan=-math.inf)
    pos = scores[:, :1]  # (U, 1)
    return (scores[:, 1:] >= pos).sum(dim=1)  # (U,)


def hit_rate_at_k(scores: torch.Tensor, k: int = 10) -> float:
    """HR@K: fraction of users whose held-out positive is in the top K."""
    return (positive_rank(scores) < k).float().mean().item()


def ndcg_at_k(scores: torch.Tensor, k: int = 10) -> float:
    """NDCG@K with one relevant item: 1 / log2(rank + 2) if rank < K, else 0."""
    rank = positive_rank(scores).double()
    gain = torch.where(rank < k, 1.0 / torch.log2(rank + 2.0), torch.zeros_like(rank))
    return gain.mean().item()


def hr_ndcg(scores: torch.Tensor, k: int = 10) -> tuple[float, float]:
    """(HR@K, NDCG@K) in one pass over the ranks."""
    rank = positive_rank(scores)
    hit = rank < k
    gain = torch.where(hit, 1.0 / torch.log2(rank.double() + 2.0), torch.zeros((), dtype=torch.float64))
    return hit.float().mean().item(), gain.mean().item()


def hr_standard_error(hr: float, users: int) -> float:
    """The standard error of an HR@K measured over ``users`` users, sqrt(p (1 - p) / users): the
    evaluation's own sampling noise (each user's hit is one Bernoulli draw)."""
    return math.sqrt(max(hr * (1 - hr), 0.0) / max(users, 1))


def throughput(samples: int, seconds: float) -> float:
    """Samples per second; NaN when no time was measured."""
    return samples / seconds if seconds > 0 else math.nan


def time_to_target(times: Sequence[float], values: Sequence[float], target: float) -> float | None:
    """Clock time of the first evaluation point whose value reaches ``target``.

    Returns ``None`` when the target is never reached — never the total run time
    (in github.com/swethmandava/scaleDL_ghc19, the NCF notebook by the seed talk's speaker, ``utils.py``'s
    ``threshold = 1.0`` is an HR@10 no run reaches, so its "Time to Target" is the run length).
    """
    if len(times) != len(values):
        raise ValueError(f"{len(times)} times but {len(values)} values")
    for t, v in zip(times, values):
        if v >= target:
            return float(t)
    return None


def speedup(baseline_s: float | None, new_s: float | None) -> float | None:
    """How many times faster ``new_s`` reaches the target than ``baseline_s`` (None if either didn't)."""
    if baseline_s is None or new_s is None or new_s <= 0:
        return None
    return baseline_s / new_s


def jackknife_stderr(leave_one_out: Sequence[float]) -> float:
    """The jackknife standard error from the leave-one-out estimates of a statistic: ``sqrt((k-1)/k * sum (x_i -
    mean)^2)`` over its ``k`` estimates; nan with fewer than two."""
    k = len(leave_one_out)
    if k < 2:
        return math.nan
    m = sum(leave_one_out) / k
    return math.sqrt((k - 1) / k * sum((x - m) ** 2 for x in leave_one_out))


def line_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """Ordinary least squares ``y = intercept + slope * x``: ``(intercept, slope)``, or None
    with fewer than two distinct ``x`` (no slope to fit)."""
    xs, ys = [float(x) for x in xs], [float(y) for y in ys]
    if len(xs) != len(ys):
        raise ValueError(f"line_fit needs as many x as y, got {len(xs)} and {len(ys)}")
    if len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def slope_standard_error(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The standard error of :func:`line_fit`'s slope: the residuals' variance over ``n - 2`` degrees of freedom,
    over the spread of ``x`` (``sqrt(s^2 / sum (x - mean x)^2)``); None where no slope is fitted or ``n < 3``."""
    fit = line_fit(xs, ys)
    if fit is None or len(xs) < 3:
        return None
    (a, b), xs, ys = fit, [float(x) for x in xs], [float(y) for y in ys]
    mx = sum(xs) / len(xs)
    s2 = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys)) / (len(xs) - 2)
    return math.sqrt(s2 / sum((x - mx) ** 2 for x in xs))


def noise_verdict(
    a: Sequence[float],
    b: Sequence[float],
    *,
    names: tuple[str, str] = ("a", "b"),
    quantity: str = "time to target",
    unit: str = " s",
    resolution: float = 0.0,
    steps: tuple[Sequence[int], Sequence[int]] | None = None,
) -> tuple[int | None, str]:
    """Which of two settings measured lower ``quantity`` (a time, a step count), read against the
    measured noise: ``(0 | 1 | None, sentence)``.

    ``a`` and ``b`` hold one value per seed (paired by index: seed i of ``a`` with seed i of ``b``).
    The noise is the larger seed-to-seed range of the two. A difference of the means within it, or
    seeds that disagree on which is lower, is "no measurable difference" (``None``). With one value
    each there is no noise to compare with: the lower one is named, and the sentence says so.
    ``resolution``: how finely the quantity is measured at all (steps between evaluations): a gap
    within it is no measurable difference either, however close the seeds.
    ``steps``: the steps each seed's time covers (``a``'s and ``b``'s, a time to target's steps to it): where the
    range is not the steps' (:func:`_pace_range_note`), it is called the run-to-run range and said to be the
    machine's pace between runs, not the seed's."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    if not a or not b:
        raise ValueError(f"noise_verdict needs at least one value each, got {len(a)} and {len(b)}")
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    lower = 0 if ma <= mb else 1
    means = f"{quantity}: {names[0]} {ma:.3g}{unit} vs {names[1]} {mb:.3g}{unit}"
    if abs(ma - mb) <= resolution:
        return None, (f"no measurable difference ({means}, "
                      f"within the measurement's resolution of {resolution:.3g}{unit})")
    if len(a) < 2 or len(b) < 2:
        return lower, f"{names[lower]} lower on one seed ({means}); noise not measured"
    spread = max(max(a) - min(a), max(b) - min(b))
    note = _pace_range_note((a, b), steps, names, spread) if steps is not None else ""
    range_name = "run-to-run range" if note else "seed range"
    pairs = list(zip(a, b))
    if len({x < y for x, y in pairs}) > 1 or any(x == y for x, y in pairs):
        return None, f"no measurable difference: the seeds disagree ({means} on average)"
    if abs(ma - mb) <= spread:
        return None, f"no measurable difference ({means}, within the {range_name} {spread:.2g}{unit}{note})"
    return lower, f"{names[lower]} lower on every seed ({means}; {range_name} {spread:.2g}{unit}{note})"


def _pace_range_note(times, steps, names, spread: float) -> str:
    """Where a range of times to target is not the seeds' steps, what it is: the machine's pace between runs; ""
    where the steps account for it (or are unknown).

    Read f12b 02-H1 (twelfth full run): "no measurable difference (time to target: batch 16384, sqrt rule 6.42 s vs
    batch 4096, sqrt rule 7.57 s, within the seed range 1.3 s)" where each setting took the same steps on both
    seeds (285 and 285, 1020 and 1020): the 1.3 s was the pace of two runs of identical steps (0.0248 and 0.0202 s
    per step), which "the seed range" told a learner a seed did; and lesson 04's "seed range 11 s" was LAMB's 392 and
    380 steps in 20.15 and 31.51 s, the seed with fewer steps the slower. The range is the larger of the two
    settings' (``spread``); where that setting's seeds took the same steps, or steps whose difference at its mean s
    per step accounts for under half of it, the rest is the pace, and the note says so with the steps."""
    steps = [[int(s) if s is not None else None for s in ss] for ss in steps]
    if any(len(ss) != len(ts) or None in ss or 0 in ss for ss, ts in zip(steps, times)):
        return ""
    j = max(range(2), key=lambda i: max(times[i]) - min(times[i]))  # the setting whose range is the noise
    if all(len(set(ss)) == 1 for ss in steps):
        return (f": each setting took the same steps on every seed, {steps[0][0]} and {steps[1][0]} in that order, "
                f"so that range is the machine's pace between runs, not the seed's")
    if len(set(steps[j])) == 1:
        return (f": {names[j]} took {steps[j][0]} steps on every seed, so that range is the machine's "
                "pace between runs, not the seed's")
    per_step = sum(t / s for t, s in zip(times[j], steps[j])) / len(steps[j])
    apart = max(steps[j]) - min(steps[j])
    if per_step * apart > spread / 2:
        return ""
    return (f": {names[j]}'s seeds took {' and '.join(map(str, steps[j]))} steps, {apart} apart, about "
            f"{per_step * apart:.2g} s of it at its mean {per_step:.2g} s per step; the rest is the machine's pace "
            "between runs, not the seed's")


def paired_speedup(ratios: Sequence[float], min_effect: float = 0.05) -> tuple[float, bool]:
    """A speedup measured in paired repeats (lesson 01): ``ratios`` are the reference's time over the
    candidate's, one per repeat in which both ran back to back (> 1: the candidate is faster).

    Returns ``(median ratio, measurable)``: measurable when every repeat falls on the same side of 1
    by more than ``min_effect``. On a shared machine a busy moment slows both runs of a pair alike,
    so a pair disagrees only when the difference is smaller than what the load does in between.
    """
    if not ratios:
        raise ValueError("paired_speedup needs at least one repeat")
    median = statistics.median(ratios)
    faster = all(r > 1 + min_effect for r in ratios)
    slower = all(r < 1 - min_effect for r in ratios)
    return median, faster or slower


def speedup_text(ratios: Sequence[float], min_effect: float = 0.05) -> str:
    """``"1.94x faster"``, ``"1.30x slower"`` or ``"no measurable difference"`` from paired repeats."""
    median, measurable = paired_speedup(ratios, min_effect)
    if not measurable:
        return "no measurable difference"
    return f"{median:.2f}x faster" if median > 1 else f"{1 / median:.2f}x slower"
