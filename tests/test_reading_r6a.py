"""Readings of lessons 00-04 fixed after the sixth full-profile run (2026-12-02, /tmp/course11; read by r6a,
/work/notes/read-full-run-6-r6a.md): each test feeds the reading that run's numbers and the opposite results."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_reading_agreement import disagreements  # noqa: E402
from test_reading_agreement_more import _warm_run  # noqa: E402

WARMUP_LABELS = ["no warmup", "linear warmup, 19 steps", "linear warmup, 38 steps", "linear warmup, 76 steps",
                 "exponential warmup, 38 steps"]
WARMUP_COLUMNS = ("rule", "time to target (s)", "steps to target", "epochs to target", "final HR@10", "best HR@10",
                  "epochs run")


def test_the_warmup_reading_says_when_the_clock_ranked_a_warmup_by_its_pace():
    """r6a 03-1: "best warmup: linear warmup, 38 steps, reached the target in 6.5 s (96 steps)" over the sweep table's
    19-step warmup, which reached it in 95 steps (7.877 s): at one batch and peak lr a step costs the same whatever the
    warmup, so the clock ranked the runs' pace (0.067 against 0.083 s per step), which the reading did not say."""
    from course_lib.lessons import l03_warmup as L03
    from course_lib.sweeps import sweep_table

    run = [_warm_run(8.555, 100, 0, hr=0.757), _warm_run(7.877, 95, 19, hr=0.7522), _warm_run(6.474, 96, 38, hr=0.75),
           _warm_run(6.78, 108, 76, hr=0.7536), _warm_run(9.625, 108, 38, "exponential", hr=0.7502)]
    text = L03.warmup_reading(run, WARMUP_LABELS)
    assert text.startswith("best warmup: linear warmup, 38 steps, reached the target in 6.5 s (96 steps); but linear "
                           "warmup, 19 steps reached it in fewer steps (95, in 7.9 s)"), text
    assert "(0.067 against 0.083 s per step)" in text and "which warmup is best is not resolved here" in text
    # the agreement check: the s per step are time to target / steps to target, two cells of one row
    paces = [r.time_to_target_s / r.steps_to_target for r in run]
    table = sweep_table(run, WARMUP_LABELS, columns=WARMUP_COLUMNS)
    assert disagreements(text, table, extra=(19, 38, 76, 10, *paces)) == [], text
    # opposite: the clock's fastest warmup also took the fewest steps: no such clause
    fewest = run[:2] + [_warm_run(6.474, 90, 38, hr=0.75)] + run[3:]
    text = L03.warmup_reading(fewest, WARMUP_LABELS)
    assert "reached it in fewer steps" not in text and "not resolved" not in text
    assert text.startswith("best warmup: linear warmup, 38 steps, reached the target in 6.5 s (90 steps); without")
