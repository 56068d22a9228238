"""Readings of lessons 00-04 fixed after the seventh full-profile run (2026-12-02, /tmp/course12, main 8cbfa9e; read
by r7a, /work/notes/read-full-run-7-r7a.md): each test feeds the reading that run's numbers and the opposite results."""

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

from course_lib.lessons import l01_baseline as L01  # noqa: E402
from test_reading_agreement import disagreements  # noqa: E402

# lesson 01 cell 14 of the run: the bursts around the baseline run, their mean, and the run's own samples/s
RUN_PACE = {"before": 47_605.0, "after": 36_143.0, "rate": 41_874.0, "run": 54_681.0}


def test_the_pace_line_says_its_bursts_bracket_the_baseline_run_not_the_lessons_runs(monkeypatch, tmp_path):
    """r7a 01-1: "yardstick pace 47,605 samples/s before this lesson's runs, 36,143 after (-24%)" and "moved -24%
    during this lesson (47,605 samples/s before its runs, ...)": lesson 01 times the bursts after its lr sweep had run
    five runs (cell 12), right before and after the baseline run (cell 14), and before the cells that follow it."""
    from course_lib import ladder
    from course_lib.train.ncf import TrainConfig

    said = L01.pace_drift_reading(RUN_PACE)
    assert said.startswith("the yardstick's pace moved -24% across the baseline run (47,605 samples/s in the bursts "
                           "before it, 36,143 after); later lessons put their times at the mean, 41,874 samples/s")
    assert "before its runs" not in said and "during this lesson" not in said
    # the line Pace prints: a pace finished with the run it bracketed says so
    bursts = iter([47_605.0, 36_143.0, 37_196.0, 16_409.0])
    monkeypatch.setattr(ladder, "yardstick_pace", lambda **kw: next(bursts))
    pace = ladder.Pace(None, TrainConfig(global_batch_size=256), directory=tmp_path, quiet=True)
    rec = pace.finish(run=SimpleNamespace(config={"global_batch_size": 256}, samples_per_s=54_681.0))
    assert set(rec) == {"before", "after", "rate", "run"}
    assert pace.describe() == "yardstick pace 47,605 samples/s before the run, 36,143 after (-24%)"
    # opposite: a later lesson's bursts around its own runs (lesson 02: 37,196 -> 16,409), finished without a run
    later = ladder.Pace(None, TrainConfig(global_batch_size=256), directory=tmp_path, quiet=True)
    later.finish()
    assert later.describe() == "yardstick pace 37,196 samples/s before this lesson's runs, 16,409 after (-56%)"
    old = L01.pace_drift_reading({k: v for k, v in RUN_PACE.items() if k != "run"})
    assert "moved -24% during this lesson (47,605 samples/s before its runs, 36,143 after)" in old


def test_the_pace_drift_reading_says_the_ladder_writes_large_speedups_as_whole_numbers():
    """r7a 02-1: lesson 01 said "the ladder shows such speedups to 1 significant figure" (±31 %), and lesson 02's
    ladder showed '+sqrt scaling' at "11x (±86%)": ``speedup_cell`` writes a speedup of ten or more (at one figure)
    as a whole number rather than "1e+01x"; the reading says so."""
    from course_lib.ladder import speedup_cell
    from course_lib.tables import Table

    said = L01.pace_drift_reading(RUN_PACE)
    assert "uncertain by at least ±31% from this lesson alone" in said
    assert "the ladder shows such speedups to 1 significant figure, or as a whole number from ten up," in said
    assert speedup_cell(81.49 / (11.29 * 26_802 / 41_874), 0.86) == "11x (±86%)"  # lesson 02 cell 18's cell
    assert speedup_cell(6.17, 0.34) == "6x (±34%)"  # below ten: one figure
    pace = Table(["before", "after", "rate", "run"], rows=[RUN_PACE])
    off = RUN_PACE["run"] / RUN_PACE["rate"] - 1
    assert disagreements(said, pace, extra=[off, RUN_PACE["after"] / RUN_PACE["before"] - 1, 1]) == [], said
    # opposite: a drift of a few percent: two figures, whole numbers from a hundred up (123x, not 1.2e+02x)
    small = L01.pace_drift_reading({"before": 100_000.0, "after": 103_000.0})
    assert "to 2 significant figures, or as a whole number from a hundred up," in small
    assert speedup_cell(123.4, 0.03) == "123x (±3%)" and speedup_cell(12.34, 0.03) == "12x (±3%)"
