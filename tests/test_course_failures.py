"""A lesson that fails leaves the course consistent: the summary says which lesson
failed at which cell and which later rungs therefore started from an earlier one, and the ladder marks
the missing rung "not run: lesson NN failed at cell K" instead of skipping it."""

import os
import time

import _histories as H
from course_lib import ladder, summary
from course_lib.train import TrainConfig


def _ladder_up_to_lars(directory):
    for row in [H.BASE, H.LINEAR_16384, H.WARMUP_LONG, H.lars_rung(32768, 80)]:
        row = dict(row)
        ladder.save_ladder_row(row.pop("step"), directory=directory, **row)


def test_a_failed_lessons_rung_is_marked_not_run_and_the_next_lesson_says_it_starts_below_it(tmp_path):
    _ladder_up_to_lars(tmp_path)
    line = summary.record_failure("notebooks/05_mixed_precision.ipynb", 5,
                                  "ValueError: warmup_steps=38 is more than total_steps=19", directory=tmp_path)
    assert line == ("lesson 05 (05_mixed_precision) failed at cell 5: ValueError: warmup_steps=38 is more than "
                    "total_steps=19; its rung '+mixed precision' is marked not run")
    md = ladder.ladder_table(tmp_path).to_markdown()
    assert "| +mixed precision |" in md and "| not run |" in md
    # lesson 06 starts from the best rung so far (here the baseline: no rung above it helped), and says that the
    # failed rung was not run
    cfg, below, note = ladder.start_from("+data parallel", TrainConfig(target_hr=H.TARGET_HR), dataset=H.DATASET,
                                         directory=tmp_path)
    assert below["step"] == "baseline" and cfg.optimizer == "adam"
    assert note.startswith("starting from the 'baseline' rung") and "'+mixed precision' (not run)" in note
    # ... and once it saved its rung, the summary says what it built on
    ladder.save_ladder_row("+data parallel", **{k: v for k, v in H.rung("+data parallel", cfg).items() if k != "step"},
                           directory=tmp_path)
    text = summary.summary_markdown(tmp_path)
    assert text.startswith("## Lessons that failed\n\n- lesson 05 (05_mixed_precision) failed at cell 5: ValueError")
    assert "  - its rung '+mixed precision' is marked \"not run\" in the ladder" in text
    assert "  - '+data parallel' (lesson 06) therefore started from the 'baseline' rung" in text
    assert "| course_failures" not in text  # the record is the section above, not a table of scalars


def test_a_rung_saved_before_the_failure_is_kept_and_a_previous_runs_rung_is_not(tmp_path):
    _ladder_up_to_lars(tmp_path)
    started = time.time()
    assert ladder.mark_failed_lesson("04", 12, directory=tmp_path, since=started - 60) is None  # saved this run
    assert ladder.ladder_rows(tmp_path)[-1]["time_to_target_s"] == 10.0
    path = tmp_path / "ladder_3.json"
    os.utime(path, (started - 3600, started - 3600))  # a rung an earlier run left in this folder
    assert ladder.mark_failed_lesson("04", 12, directory=tmp_path, since=started) == "+LARS"
    rows = {r["step"]: r for r in ladder.ladder_rows(tmp_path)}
    assert rows["+LARS"]["not_run"] == "lesson 04 failed at cell 12" and rows["+LARS"]["dataset"] == H.DATASET
    assert ladder.mark_failed_lesson("07", 3, directory=tmp_path) is None  # lesson 07 saves no rung


def test_a_failure_before_any_rung_was_saved_compares_nothing(tmp_path):
    summary.record_failure("notebooks/01_baseline.ipynb", None, "DeadKernelError: Kernel died", directory=tmp_path)
    rows = ladder.ladder_rows(tmp_path)  # a rung without a dataset is no mismatch
    assert rows[0]["not_run"] == "lesson 01 failed"
    assert ladder.ladder_table(tmp_path).to_markdown().count("not run") == 1
    H.write_ladder("02 at its smallest batch, linear rule", tmp_path)  # a later rerun of the lessons
    assert [r["step"] for r in ladder.ladder_rows(tmp_path)] == ["baseline", "+linear scaling"]
    assert "lesson 01 (01_baseline) failed at its start: DeadKernelError" in summary.summary_markdown(tmp_path)
