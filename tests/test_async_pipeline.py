"""course_lib.parallel.async_pipeline (lesson 10): PipeDream's 1F1B without flushes on the executor of
course_lib.parallel.pipeline. Pure parts (weight versions read from the schedule, no bubble in the steady
state, the replay at p = 1 is SGD), one launch of 4 gloo ranks (the pipeline at p = 2 and 4, stashed and not,
equal to its one-process replay; the unstashed run's distance grows with depth), and the readings fed
opposite results."""

import pytest
import torch

from course_lib import compare
from course_lib.lessons import l10_pipelines as pipes
from course_lib.parallel import async_pipeline as A
from course_lib.parallel import pipeline as P

from _timing import scaled

SPEC = {"width": 8, "depth": 4, "micro_batch": 4, "n": 10, "lr": 0.5, "depths": [2, 4]}


@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 3, 9])
def test_versions_are_read_from_the_schedule(p, n):
    fwd, bwd = A.weight_versions(A.pipedream_schedule(p, n))
    assert fwd == [[max(0, i - (p - s - 1)) for i in range(n)] for s in range(p)]
    assert bwd == [list(range(n))] * p
    assert A.staleness(A.pipedream_schedule(p, max(n, p))) == [p - s - 1 for s in range(p)]


@pytest.mark.parametrize("p,n", [(2, 3), (3, 8), (4, 20)])
def test_no_bubble_in_the_steady_state_and_the_whole_run_pays_p_minus_1_once(p, n):
    for tf, tb in [(1.0, 1.0), (1.0, 2.0), (0.3, 0.7)]:
        events = P.simulate(A.pipedream_schedule(p, n), tf, tb)
        assert A.steady_idle_fraction(events) == pytest.approx(0.0, abs=1e-12)
        assert P.idle_fraction(events) == pytest.approx(P.bubble_fraction(p, n), abs=1e-12)


def test_a_slow_op_in_the_steady_state_shows_as_idle():
    sched = A.pipedream_schedule(3, 8)
    durations = {(s, o.kind, o.mb): 1.0 if o.kind == "F" else 2.0 for s, ops in enumerate(sched) for o in ops}
    durations[(2, "F", 3)] = 5.0  # the last stage is slow once: the others wait for its gradient
    assert A.steady_idle_fraction(P.simulate(sched, durations=durations)) > 0.05


def test_the_replay_at_one_stage_is_plain_sgd():
    ref = A.sequential_replay(SPEC, 1, stash=True)
    xs, ts = A._problem(SPEC)
    model = P.mlp_stack(SPEC["width"], SPEC["depth"], seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=SPEC["lr"])
    for x, t in zip(xs, ts):
        opt.zero_grad()
        ((model(x) - t) ** 2).mean().backward()
        opt.step()
    assert max(float((a.detach() - b).abs().max()) for a, b in zip(model.parameters(), ref["weights"][0])) < 1e-6
    # staleness changes the result; without stashing it changes it again
    stale, unstashed = A.sequential_replay(SPEC, 4, True), A.sequential_replay(SPEC, 4, False)
    assert A.max_difference(stale["weights"], unstashed["weights"]) > 1e-6


@pytest.fixture(scope="module")
def four():
    from course_lib import dist as cdist

    return cdist.launch(A.async_worker, 4, SPEC, backend="gloo", threads_per_worker=1, quiet=True,
                        timeout_s=scaled(600))


@pytest.mark.slow
def test_the_pipeline_equals_its_replay_and_stashing_matters_more_with_depth(four):
    rows = pipes.async_rows(four, SPEC)
    assert {(r["p"], r["mode"]) for r in rows} == {(p, m) for p in (2, 4) for m in A.MODES}
    assert pipes.async_equal(rows)
    for r in rows:
        assert r["staleness"] == [r["p"] - s - 1 for s in range(r["p"])]
        assert r["held"] == ([r["p"] - s for s in range(r["p"])] if r["mode"] == "stashed" else [1] * r["p"])
        assert len(r["losses"]) == SPEC["n"]
    gaps = pipes.stash_gaps(rows)
    assert 0 < gaps[2] < gaps[4]
    assert [c.outcome for c in pipes.stash_comparisons(gaps)] == [compare.HIGHER, compare.HIGHER]
    assert "replay" in str(pipes.async_table(rows)) and "stage 3" in str(pipes.versions_table(rows[-1]))
    # each stage's record is (forward's, backward's, updated): stashed, the backward's is the forward's; not
    # stashed, the one updated
    for r in rows:
        for stage in r["versions"]:
            assert all(b == (f if r["mode"] == "stashed" else u) for f, b, u in stage)
    # the steady state replayed with each op's duration is computed for every run
    assert all(r["steady_replayed"] is not None and r["steady_replayed"] >= -1e-9 for r in rows)


def test_async_equal_needs_every_run_within_the_tolerance():
    assert not pipes.async_equal([{"replay_diff": 1e-3}]) and not pipes.async_equal([])
    assert pipes.async_equal([{"replay_diff": 0.0}])


def test_a_launch_too_small_for_the_depths_is_refused():
    with pytest.raises(ValueError, match="need 4 ranks"):
        A.async_worker(0, 2, SPEC)


