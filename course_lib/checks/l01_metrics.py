"""Exercise 01: HR@K and NDCG@K."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..metrics import hit_rate_at_k
from ..metrics import ndcg_at_k
from .harness import (
    CheckResult,
    finish_result,
    Mismatch,
    call_learner,
    learner_label,
    run_cases,
    as_float_value,
    is_close,
)


# --------------------------------------------------------------------------- 01: HR@K and NDCG@K


def _ranking_cases(k: int) -> list[tuple[str, int, torch.Tensor]]:
    """(label, k, scores): score matrices (users, 1 positive + negatives), positive in column 0.

    Every boundary case runs at the learner's ``k`` and at other values of k (1 and a k that
    is neither), and one case has 49 negatives instead of 100: a function that hard-codes
    k = 10 or 100 negatives fails.
    """
    g = torch.Generator().manual_seed(1)
    n_neg = 100

    def at_rank(ranks: list[int], negatives: int = n_neg) -> torch.Tensor:
        # positive scores 0; `r` negatives score above it (1..), the rest below; columns shuffled
        rows = []
        for r in ranks:
            neg = torch.cat([torch.rand(r, generator=g) + 0.5, -torch.rand(negatives - r, generator=g) - 0.5])
            rows.append(torch.cat([torch.zeros(1), neg[torch.randperm(negatives, generator=g)]]))
        return torch.stack(rows)  # (U, 1 + negatives)

    cases = [
        ("random scores, 64 users x (1 positive + 100 negatives)", k, torch.randn(64, 1 + n_neg, generator=g)),
        ("positive on top for every user (rank 0)", k, at_rank([0] * 8)),
        (f"positive at rank {k - 1}: the last place inside the top {k}", k, at_rank([k - 1] * 4)),
        (f"positive at rank {k}: the first place outside the top {k}", k, at_rank([k] * 4)),
        ("one user per rank 0..100", k, at_rank(list(range(n_neg + 1)))),
        ("ties: every item scores the same (a tie counts against the positive)", k, torch.zeros(5, 1 + n_neg)),
        ("ties: two negatives tie with the positive, two are above it", k, torch.tensor(
            [[0.0, 1.0, 1.0, 0.0, 0.0] + [-1.0] * (n_neg - 4)])),
    ]
    for other in [o for o in (1, 3 if k != 3 else 7) if o != k]:
        cases.append((f"another k: k={other}, one user per rank 0..100", other, at_rank(list(range(n_neg + 1)))))
        cases.append((f"another k: k={other}, positive at rank {other - 1} and at rank {other}", other,
                      at_rank([other - 1, other] * 2)))
    cases.append((f"49 negatives instead of 100 (k={min(k, 49)}): 30 users at ranks 0..49", min(k, 49),
                  at_rank([r % 50 for r in range(0, 150, 5)], negatives=49)))
    return cases


def _rank_hint(scores: torch.Tensor, got: float, k: int, metric: str) -> str:
    ranks_strict = (scores[:, 1:] > scores[:, :1]).sum(1).double()
    if metric == "hr":
        if is_close(got, (ranks_strict < k).double().mean().item()):
            return ("\nhint: that is what you get when ties count for the positive (`>`); the course counts "
                    "a negative that scores equal to the positive as ranked above it (`>=`).")
        if is_close(got, (ranks_strict <= k).double().mean().item()) or is_close(
                got, ((scores[:, 1:] >= scores[:, :1]).sum(1) <= k).double().mean().item()):
            return f"\nhint: a hit is rank < {k} with 0-based ranks (rank {k} is the {k + 1}th place)."
        return ""
    ranks = (scores[:, 1:] >= scores[:, :1]).sum(1).double()
    hit = ranks < k
    for base, label in ((math.e, "natural log"), (10.0, "log10")):
        alt = torch.where(hit, math.log(base) / torch.log(ranks + 2), torch.zeros_like(ranks)).mean().item()
        if is_close(got, alt):
            return f"\nhint: that is NDCG with the {label}; the discount is 1 / log2(rank + 2) (torch.log2)."
    alt = torch.where(hit, 1 / torch.log2(ranks + 1), torch.zeros_like(ranks)).mean().item()
    if is_close(got, alt):
        return "\nhint: ranks are 0-based here, so the discount is 1 / log2(rank + 2), not log2(rank + 1)."
    alt = torch.where(ranks_strict < k, 1 / torch.log2(ranks_strict + 2), torch.zeros_like(ranks)).mean().item()
    if is_close(got, alt):
        return "\nhint: ties must count against the positive (`>=`), as in HR@K."
    return ""


def _check_ranking_metric(name: str, fn, reference, k: int, metric: str) -> CheckResult:
    def case(scores, k):
        def run():
            expected = reference(scores, k)
            got = as_float_value(call_learner(fn, scores.clone(), k), learner_label(fn))
            if not is_close(got, expected):
                if k != 10 and is_close(got, reference(scores, 10)):
                    hint = f"\nhint: that is the value at k=10: use the k you are given (here k={k}), not a fixed 10."
                else:
                    hint = _rank_hint(scores, got, k, metric)
                raise Mismatch(f"expected {expected:.6g}, got {got:.6g}{hint}")
        return run

    return finish_result(run_cases(name, fn, [(c, case(s, kk)) for c, kk, s in _ranking_cases(k)]))


def check_hit_rate(fn: Callable, k: int = 10) -> CheckResult:
    """``fn(scores, k) -> float``: HR@K against ``course_lib.metrics.hit_rate_at_k`` (lesson 01)."""
    return _check_ranking_metric("check_hit_rate", fn, hit_rate_at_k, k, "hr")


def check_ndcg(fn: Callable, k: int = 10) -> CheckResult:
    """``fn(scores, k) -> float``: NDCG@K against ``course_lib.metrics.ndcg_at_k`` (lesson 01)."""
    return _check_ranking_metric("check_ndcg", fn, ndcg_at_k, k, "ndcg")
