"""course_lib.parallel.staleness: stale and asynchronous SGD (simulated), and a parameter server on gloo ranks."""

import pytest
import torch

from course_lib import dist as cdist
from course_lib.parallel import staleness as S

PROBLEM = S.Problem(n_train=512, n_eval=256)


def test_tau_zero_is_plain_sgd_with_momentum():
    run = S.stale_sgd(PROBLEM, 0, steps=5, lr=0.05, eval_every=5)
    # by hand: the same batches, gradients at the current weights
    X, y, Xe, ye = PROBLEM.data()
    model = PROBLEM.model()
    w = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    v = torch.zeros_like(w)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        idx = torch.randint(0, len(X), (PROBLEM.batch_size,), generator=g)
        v = 0.9 * v + S._grad_at(model, w, X[idx], y[idx])
        w = w - 0.05 * v
    assert run["final_loss"] == pytest.approx(S.eval_loss(model, w, Xe, ye)[0], rel=1e-5)
    assert run["mean_staleness"] == 0


def test_staleness_is_what_was_asked_and_hurts_when_large():
    runs = {tau: S.stale_sgd(PROBLEM, tau, steps=120, lr=0.05, eval_every=10) for tau in (0, 3, 16, "async")}
    assert runs[3]["max_staleness"] == 3 and runs[3]["mean_staleness"] == pytest.approx(3 * (1 - 2 / 120), rel=0.01)
    assert 1 < runs["async"]["mean_staleness"] < 16  # 8 simulated workers: about 7
    assert runs[16]["final_loss"] > runs[0]["final_loss"]
    target = 1.1 * min(runs[0]["curve"]["loss"])
    assert S.steps_to_target(runs[0]["curve"], target) is not None
    table = S.staleness_table(runs, target)
    assert [r["tau"] for r in table.rows] == ["0", "3", "16", "async"]
    with pytest.raises(ValueError):
        S.stale_sgd(PROBLEM, -1, steps=1)


def test_steps_to_target_skips_nan():
    assert S.steps_to_target({"step": [1, 2, 3], "loss": [float("nan"), 2.0, 0.5]}, 1.0) == 3
    assert S.steps_to_target({"step": [1], "loss": [2.0]}, 1.0) is None


@pytest.mark.slow
def test_parameter_server_sync_async_and_a_straggler():
    configs = [S.ServerConfig(mode=m, straggler_rank=s, delay_s=0.02, budget_s=0.4, lr=0.05)
               for s in (None, 2) for m in ("sync", "async")]
    records = cdist.launch(S.parameter_server_worker, 3, configs, PROBLEM, backend="gloo", timeout_s=300,
                           threads_per_worker=1, quiet=True)[0]
    sync0, async0, sync1, async1 = records
    assert [r["label"] for r in records] == ["sync", "async", "sync, rank 2 +20 ms", "async, rank 2 +20 ms"]
    for r in (sync0, sync1):  # every round has one gradient from each worker, none stale
        assert r["max_staleness"] == 0 and len(set(r["gradients_from"].values())) == 1
    # the straggler: synchronous rounds take at least its delay; asynchronous updates do not wait for it
    assert sync1["updates_per_s"] < 1 / 0.02
    assert async1["gradients_from"][1] > 2 * async1["gradients_from"][2]
    assert async1["max_staleness"] >= 2
    assert all(r["final_loss"] < r["curve"]["loss"][0] for r in records)  # everyone learned something
    text = S.server_reading(records)
    assert "synchronous rounds fell from" in text and "updates old" in text
    assert len(S.server_table(S.with_target(records, 10.0)).rows) == 4
