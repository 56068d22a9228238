"""sweeps.Confirmed: the deciding comparison of a sweep at more seeds (lessons 02-05's rungs), as compare rows: the
winner's lead in time to target (widened by the evaluations' spacing, and by one run's resolution where an arm ran
once) and in steps to target."""

from types import SimpleNamespace

from course_lib import compare
from course_lib.compare import HIGHER, LOWER, UNRESOLVED
from course_lib.sweeps import Confirmed


def _decided(times: dict, steps: dict | None = None, best: str | None = None, spacing: int = 5) -> Confirmed:
    """Runs evaluated ``spacing`` steps apart near the target (default 100 steps: 5%)."""
    def run(t, n):
        return SimpleNamespace(time_to_target_s=t, steps_to_target=n, curve={"step": [0, n - spacing, n]})

    labels = list(times)
    runs = [[run(t, (steps or {}).get(label, [100] * len(times[label]))[i]) for i, t in enumerate(times[label])]
            for label in labels]
    return Confirmed(labels, runs, labels.index(best or labels[0]))


def test_a_runner_up_slower_on_every_seed_beyond_their_spread_is_higher():
    comps = _decided({"a": [6.0, 6.1], "b": [9.0, 9.2]}).comparisons()
    assert [c.question for c in comps] == ["time to target, b / a"] and comps[0].outcome == HIGHER


def test_seeds_that_disagree_leave_the_choice_unresolved():
    (c,) = _decided({"a": [9.764, 10.87], "b": [14.51, 11.43]}).comparisons()
    assert c.outcome == UNRESOLVED


def test_one_seed_each_is_judged_at_one_runs_resolution_and_a_missed_target_gives_no_ratio():
    (c,) = _decided({"a": [6.0], "b": [7.0]}).comparisons()
    assert c.outcome == UNRESOLVED and "one seed" in c.basis and c.high / c.estimate > 1 + compare.ONE_RUN
    assert _decided({"a": [6.0, 6.1], "b": [None, 9.0]}).comparisons() == []


def test_steps_to_target_are_widened_by_the_evaluation_spacing():
    close = _decided({"a": [6.0, 6.1], "b": [9.0, 9.2]}, {"a": [95, 95], "b": [100, 100]}).comparisons(steps=True)
    assert [c.question for c in close] == ["time to target, b / a", "steps to target, b / a"]
    assert close[1].outcome == UNRESOLVED  # 5% apart, evaluations 5% apart
    far = _decided({"a": [6.0, 6.1], "b": [9.0, 9.2]}, {"a": [50, 50], "b": [100, 100]}).comparisons(steps=True)[1]
    assert far.outcome == HIGHER and far.low > 1.5


def test_faster_on_the_clock_in_the_same_steps_is_not_credited_to_fewer_steps():
    d = _decided({"no warmup": [11.72, 10.80], "linear 20": [9.87, 9.16]},
                 {"no warmup": [100, 92], "linear 20": [95, 96]}, best="linear 20")
    time, steps = d.comparisons(steps=True)
    assert time.estimate > 1 and steps.outcome == UNRESOLVED


def test_time_comparison_and_winner_between_any_two_candidates():
    d = _decided({"adam": [20.0, 21.0], "lamb": [10.0, 10.4]}, spacing=20)
    clear = d.time_comparison("adam", "lamb")
    assert clear.question == "time to target, lamb / adam" and clear.outcome == LOWER
    assert d.winner("adam", "lamb") == "lamb"
    tied = _decided({"adam": [20.0, 12.0], "lamb": [13.0, 19.0]}, spacing=20)
    assert tied.time_comparison("adam", "lamb").outcome == UNRESOLVED and tied.winner("adam", "lamb") is None
    missed = _decided({"adam": [20.0, 21.0], "lamb": [10.0, None]})
    assert missed.time_comparison("adam", "lamb") is None and missed.winner("adam", "lamb") == "adam"
    assert compare.outcomes_line([clear]) == "time to target, lamb / adam: lower"
    assert compare.outcomes_line([]) == "not reached on every seed"
