"""course_lib.parallel.staleness: stale and asynchronous SGD (simulated), and a parameter server on gloo ranks."""

import pytest
import torch

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


# The parameter server on gloo ranks is checked in tests/test_collectives.py, in the same launch as the
# collectives (a launch costs seconds of start-up).
