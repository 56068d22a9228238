"""course_lib.parallel.pipeline, pure parts: the schedules are valid, simulate to the bubble formula,
and hold the activations they should. The executor on 2 and 4 gloo ranks is in tests/test_model_parallel.py."""

import pytest

from course_lib.parallel import pipeline as P


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("name", list(P.SCHEDULES))
def test_every_schedule_is_valid_and_simulates_to_the_formula(name, p, m):
    sched = P.SCHEDULES[name](p, m)
    P.check_schedule(sched, m)
    for tf, tb in [(1.0, 1.0), (1.0, 2.0), (0.3, 0.7)]:
        assert P.idle_fraction(P.simulate(sched, tf, tb)) == pytest.approx(P.bubble_fraction(p, m), abs=1e-12)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 2), (3, 3)])
def test_1f1b_holds_at_most_p_minus_s_micro_batches_and_gpipe_holds_m(p, m):
    assert P.peak_in_flight(P.gpipe_schedule(p, m)) == [m] * p
    assert P.peak_in_flight(P.one_f_one_b_schedule(p, m)) == [min(p - s, m) for s in range(p)]


def test_1f1b_order_on_four_stages():
    sched = P.one_f_one_b_schedule(4, 6)
    assert " ".join(map(str, sched[0])) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5"
    assert " ".join(map(str, sched[3])) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"


def test_a_bad_schedule_is_refused():
    with pytest.raises(ValueError, match="B0 before F0"):
        P.check_schedule([[P.Op("B", 0), P.Op("F", 0)]], 1)
    with pytest.raises(ValueError, match="exactly once"):
        P.check_schedule([[P.Op("F", 0)]], 1)
    # stage 1 waits for B0 from stage 2 before it forwards F1, which stage 2 needs first: a deadlock
    bad = [[P.Op("F", 0), P.Op("F", 1), P.Op("B", 0), P.Op("B", 1)],
           [P.Op("F", 0), P.Op("B", 1), P.Op("F", 1), P.Op("B", 0)]]
    with pytest.raises(ValueError, match="deadlocks"):
        P.simulate(bad)


def test_bubble_formula_values_and_inputs():
    assert P.bubble_fraction(2, 1) == 0.5 and P.bubble_fraction(2, 8) == pytest.approx(1 / 9)
    assert P.bubble_fraction(1, 5) == 0.0
    with pytest.raises(ValueError):
        P.bubble_fraction(0, 4)
    with pytest.raises(ValueError, match="equal micro-batches"):
        import torch
        P.micro_batches(torch.zeros(10, 2), 4)
    assert P.stage_bounds(8, 3) == [(0, 3), (3, 6), (6, 8)]
    with pytest.raises(ValueError, match="cannot fill"):
        P.stage_bounds(2, 3)


@pytest.mark.parametrize("name", list(P.SCHEDULES))
def test_a_replay_of_a_simulated_run_is_that_run(name):
    """Replaying a run with its own durations and no gaps gives it back; a run with gaps between ops
    replays to less idle (the gaps were not the schedule's)."""
    sched = P.SCHEDULES[name](3, 4)
    run = P.simulate(sched, 1.0, 2.5)
    assert P.idle_fraction(P.replay(sched, run)) == pytest.approx(P.idle_fraction(run))
    order = {(e.stage, e.kind, e.mb): k for s in range(3)
             for k, e in enumerate(sorted((e for e in run if e.stage == s), key=lambda e: e.start))}
    late = [P.Event(e.stage, e.kind, e.mb, e.start + 0.3 * order[(e.stage, e.kind, e.mb)],  # a gap before every op
                    e.end + 0.3 * order[(e.stage, e.kind, e.mb)]) for e in run]
    assert P.idle_fraction(P.replay(sched, late)) < P.idle_fraction(late)
    uneven = P.simulate(sched, durations={(s, o.kind, o.mb): (1.0 if o.kind == "F" else 2.0) * (1 + (s == 2))
                                          for s in range(3) for o in sched[s]})
    assert P.idle_fraction(uneven) > P.bubble_fraction(3, 4)  # a slower stage: more than the formula


