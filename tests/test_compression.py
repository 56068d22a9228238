"""Communication-efficient data parallelism (course_lib.comm.compression): the methods' bookkeeping and bytes."""


import pytest
import torch

from course_lib import dist as cdist
from course_lib.comm import compression as cc
from _timing import scaled


# --------------------------------------------------------------------------- top-k and error feedback


def test_topk_with_k_all_sends_the_whole_corrected_gradient_and_keeps_no_residual():
    g, r = torch.randn(50), torch.randn(50)
    values, indices, new_r = cc.topk_compress(g, 50, r)
    assert torch.equal(cc.topk_average(values, indices, 50, 1), g + r)
    assert torch.equal(new_r, torch.zeros(50))


def test_error_feedback_residual_bookkeeping_loses_nothing():
    gen = torch.Generator().manual_seed(0)
    residual, sent_total, grad_total = torch.zeros(100), torch.zeros(100), torch.zeros(100)
    for _ in range(6):
        g = torch.randn(100, generator=gen)
        values, indices, new_r = cc.topk_compress(g, 7, residual)
        sent = cc.topk_average(values, indices, 100, 1)
        assert torch.allclose(sent + new_r, g + residual, atol=1e-6)  # each step: sent + kept = corrected
        assert int((sent != 0).sum()) == 7 and torch.all(new_r[indices] == 0)
        residual, sent_total, grad_total = new_r, sent_total + sent, grad_total + g
    assert torch.allclose(sent_total + residual, grad_total, atol=1e-5)  # over the run, every entry arrives or waits


def test_topk_without_error_feedback_sends_the_largest_and_drops_the_rest():
    g = torch.tensor([0.1, -3.0, 0.2, 2.0, -0.05])
    values, indices, residual = cc.topk_compress(g, 2, None)
    assert residual is None and sorted(indices.tolist()) == [1, 3]
    assert torch.equal(cc.topk_average(values, indices, 5, 1), torch.tensor([0.0, -3.0, 0.0, 2.0, 0.0]))


def test_topk_average_adds_every_ranks_entries_and_divides_by_the_world_size():
    values, indices = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([0, 2, 2, 3])  # rank 0: (0, 2), rank 1: (2, 3)
    assert torch.equal(cc.topk_average(values, indices, 4, 2), torch.tensor([0.5, 0.0, 2.5, 2.0]))


def test_bad_settings_are_clear_errors():
    for make, word in [(lambda: cc.TopK(0.0), "density"), (lambda: cc.TopK(1.5), "density"),
                       (lambda: cc.LocalSGD(0), "period"), (lambda: cc.PowerSGD(0), "rank"),
                       (lambda: cc.PowerSGD(4, start_iter=1), "start_iter"), (lambda: cc.make_method("zip"), "zip"),
                       (lambda: cc.message_time("bcast", 8, 2, 1e-6, 1e-9), "bcast")]:
        with pytest.raises(ValueError, match=word):
            make()


def test_an_all_gather_costs_more_with_p_an_all_reduce_does_not_grow_past_2n():
    a, b, n = 1e-6, 1e-9, 1e6
    assert cc.message_time("all_reduce", n, 2, a, b) == pytest.approx(2 * a + n * b)
    assert cc.message_time("all_gather", n, 2, a, b) == pytest.approx(a + n * b)
    assert cc.message_time("all_gather", n, 64, a, b) > 30 * cc.message_time("all_gather", n, 2, a, b)
    assert cc.message_time("all_reduce", n, 64, a, b) < 2 * n * b + 2 * 63 * a + 1e-12
    assert cc.comm_time_per_step([("all_reduce", n)] * 4, 4, 2, a, b) == pytest.approx(2 * a + n * b)


# --------------------------------------------------------------------------- the equalities, at 2 ranks


@pytest.fixture(scope="module")
def mlp_runs():
    from _compression_workers import methods_on_an_mlp

    return cdist.launch(methods_on_an_mlp, 2, 8, backend="gloo", quiet=True, timeout_s=scaled(600))


@pytest.mark.slow
def test_local_sgd_with_h1_and_topk_of_everything_equal_synchronous_data_parallelism(mlp_runs):
    out = mlp_runs[0]
    assert not torch.allclose(out["fp32"], out["initial"])  # it trained
    for name in ("local H=1", "topk all, EF", "topk all, no EF"):
        assert torch.allclose(out[name], out["fp32"], rtol=0, atol=1e-6), name
    assert not torch.allclose(out["local H=4"], out["fp32"], atol=1e-6)  # averaging less often is another run
    assert torch.equal(out["delayed after one step"], out["initial"])  # step 0 has no average to apply yet
    assert not torch.allclose(out["delayed"], out["fp32"], atol=1e-6)
    for rank_out in mlp_runs[1:]:  # every method leaves the ranks with the same weights
        for name in ("fp32", "local H=1", "local H=4", "topk all, EF", "topk all, no EF", "delayed"):
            assert torch.allclose(rank_out[name], out[name], rtol=0, atol=1e-7), name


@pytest.mark.slow
def test_the_recorder_counts_each_methods_bytes(mlp_runs):
    out = mlp_runs[0]
    n = out["num_params"]
    assert out["fp32 bytes/step"] == 4 * n and out["delayed bytes/step"] == 4 * n
    assert out["local H=1 bytes/step"] == 4 * n and out["local H=4 bytes/step"] == n  # the weights, every 4 steps
    assert out["topk all, EF bytes/step"] == (4 + 8) * n  # values (fp32) and indices (int64), all of them


@pytest.mark.slow
def test_powersgd_sends_10x_fewer_bytes_than_fp32_on_bert_mini_at_rank_4():
    from _compression_workers import powersgd_on_bert_mini

    out = cdist.launch(powersgd_on_bert_mini, 2, 4, backend="gloo", quiet=True, timeout_s=scaled(600))[0]
    assert out["fp32"] / out["rank 4"] >= 10
    assert out["rank 4"] > out["rank 1"]  # rank r sends r columns per factor
    assert out["fp32 ranks agree"] and out["rank 4 ranks agree"]
