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


