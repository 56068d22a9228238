"""HR@K / NDCG@K on a case small enough to compute by hand (lesson 01)."""

import math

import pytest
import torch

from course_lib.metrics import (hit_rate_at_k, hr_ndcg, ndcg_at_k, positive_rank, speedup, throughput, time_to_target)


def test_ranks_hr_and_ndcg_by_hand():
    # column 0 is the held-out positive
    scores = torch.tensor([
        [0.9, 0.1, 0.2, 0.3],  # best: rank 0
        [0.5, 0.6, 0.1, 0.7],  # two negatives above: rank 2
        [0.1, 0.2, 0.3, 0.4],  # worst: rank 3
        [0.5, 0.5, 0.1, 0.1],  # a tie counts against the positive: rank 1
    ])
    assert positive_rank(scores).tolist() == [0, 2, 3, 1]
    # K = 2: users 0 and 3 hit
    assert hit_rate_at_k(scores, 2) == pytest.approx(0.5)
    assert ndcg_at_k(scores, 2) == pytest.approx((1 / math.log2(2) + 1 / math.log2(3)) / 4)
    # K = 3: users 0, 1, 3 hit
    hr, ndcg = hr_ndcg(scores, 3)
    assert hr == pytest.approx(0.75)
    assert ndcg == pytest.approx((1.0 + 1 / math.log2(4) + 1 / math.log2(3)) / 4)


def test_constant_scores_never_hit():
    assert hit_rate_at_k(torch.zeros(5, 101), 10) == 0.0


def test_time_to_target_is_none_when_not_reached():
    times, hrs = [0.0, 1.0, 2.0], [0.1, 0.5, 0.6]
    assert time_to_target(times, hrs, 0.5) == 1.0
    assert time_to_target(times, hrs, 1.0) is None
    assert speedup(10.0, 2.0) == 5.0 and speedup(None, 2.0) is None
    assert throughput(100, 2.0) == 50.0 and math.isnan(throughput(1, 0.0))


def test_a_diverged_model_scores_no_hits():
    scores = torch.full((5, 101), float("nan"))
    assert hit_rate_at_k(scores, 10) == 0.0 and ndcg_at_k(scores, 10) == 0.0
    mixed = torch.zeros(2, 11)
    mixed[0, 0] = float("nan")  # only the positive is NaN: a miss, not a hit
    mixed[1, 0] = 1.0
    assert hit_rate_at_k(mixed, 1) == 0.5


def test_a_nan_negative_counts_as_the_lowest_score():
    nan = float("nan")
    scores = torch.tensor([
        [0.5, nan, 0.9, 0.1],  # one negative above, the NaN one below: rank 1
        [0.5, nan, nan, 0.1],  # no negative above: rank 0 (a NaN negative never outranks the positive)
        [nan, nan, 0.1, -1.0],  # NaN positive: lowest, tied with the NaN negative (a tie counts against it)
    ])
    assert positive_rank(scores).tolist() == [1, 0, 3]
    assert hit_rate_at_k(scores, 1) == pytest.approx(1 / 3) and hit_rate_at_k(scores, 2) == pytest.approx(2 / 3)
    assert ndcg_at_k(scores, 2) == pytest.approx((1 / math.log2(3) + 1.0) / 3)
    assert hr_ndcg(scores, 2) == (hit_rate_at_k(scores, 2), ndcg_at_k(scores, 2))


def test_hr_standard_error_is_the_binomial_one():
    from course_lib.metrics import hr_standard_error

    assert hr_standard_error(0.77, 6040) == pytest.approx(math.sqrt(0.77 * 0.23 / 6040))
    assert hr_standard_error(0.0, 100) == 0.0 and hr_standard_error(1.0, 100) == 0.0


