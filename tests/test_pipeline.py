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


def _row(measured, replayed, *, m=8, cpu=1.0, forward_ms=10.0, predicted=None):
    return {"schedule": "GPipe", "p": 2, "m": m,
            "predicted": P.bubble_fraction(2, m) if predicted is None else predicted,
            "measured": measured, "replayed": replayed, "cpu_share": cpu, "forward_ms": forward_ms, "runs": 5,
            "grad_diff": 0.0, "native_grad_diff": 0.0}


def test_the_bubble_reading_for_each_outcome():
    from course_lib.lessons import l10_model_parallelism as study
    from _quoted import unquoted

    rows = [_row(0.15, 0.12), _row(0.52, 0.5, m=1)]
    ok = study.bubble_reading(rows)
    # review 2026-12-01 #14: "within 5 points" over a table saying +5.4; the table's own rounding now
    assert "measured 0.150 against 0.111 (+3.9 points, +35% of the formula's value), within the goal of 10" in ok
    assert unquoted(ok, study.bubble_table(rows), allowed={10, 35}) == set()  # the goal; 3.9 / 11.1
    busy = study.bubble_reading([_row(0.40, 0.30, cpu=0.5)])
    assert "+28.9 points" in busy and "more than the goal" in busy
    assert "+18.9 points come from unequal op times and +10.0 from the time between ops" in busy
    assert "had 50% of a core" in busy
    messages = study.bubble_reading([_row(0.40, 0.15, forward_ms=0.1)])
    assert "forward took 0.10 ms" in messages and "messages between the stages" in messages
    # review #15: unequal ops +2.2-4.4 points, between <= 1: the cause read is the larger part, also within the goal
    unequal = study.bubble_reading([_row(0.16, 0.15)])
    assert "within the goal" in unequal and "larger part is unequal op times" in unequal
    assert "messages" not in unequal
    gpu = study.bubble_reading([_row(0.40, 0.15, cpu=None)])  # no CPU share on a GPU: the messages
    assert "messages between the stages" in gpu
    assert "CPU share" in str(study.bubble_table([_row(0.2, 0.1, cpu=None)]))


def test_the_bubble_tables_pipelining_column_says_why_it_is_empty():
    """#37 (fourth full run, read r4c): the deeper pipelines' table (no torch.distributed.pipelining run there)
    read "n/a (1F1B needs m >= p)" on GPipe rows and on 1F1B rows with m >= p; the reason is given only where it
    holds (1F1B, m < p), a comparison that ran reads its result."""
    from course_lib.lessons import l10_model_parallelism as study

    rows = [{**_row(0.4, 0.3, m=m), "p": 3, "schedule": sched, "native_grad_diff": None}
            for sched in ("GPipe", "1F1B") for m in (1, 8)] + [_row(0.15, 0.12)]
    col = [r["torch.distributed.pipelining = one process"] for r in study.bubble_table(rows).rows]
    assert col == ["not run at this p", "not run at this p", "n/a (1F1B needs m >= p)", "not run at this p", "yes"]


def _at(p, m, measured, replayed=None, cpu=1.0, schedule="GPipe"):
    return {**_row(measured, measured if replayed is None else replayed, m=m, cpu=cpu), "p": p, "schedule": schedule,
            "predicted": P.bubble_fraction(p, m)}


