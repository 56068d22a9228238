"""What `make course` (ci/run_notebooks.py) shows while it runs and leaves when a lesson fails:
each training run's lines reach its terminal as they come, prefixed by the lesson, and a
failing lesson is named with its cell in the output, the summary and the ladder."""

import json
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "ci"))
import run_notebooks  # noqa: E402

pytestmark = pytest.mark.slow

CELLS = [
    "PROFILE = 'smoke'",
    # a training cell as the lessons have them: the engine's log lines, one per evaluation
    "from course_lib.data import load_synthetic\nfrom course_lib.train import TrainConfig, train_to_target\n"
    "data = load_synthetic('tiny')\n"
    "r = train_to_target(data, TrainConfig(global_batch_size=4096, optimizer='adam', base_lr=1e-3, max_epochs=0.6,\n"
    "                    eval_every_epochs=0.2, stop_at_target=False), device='cpu', label='tiny run')",
    "raise ValueError('warmup_steps=38 is more than total_steps=19')",
    "print('never reached')",
]


def _notebook(path: Path) -> Path:
    cells = [{"cell_type": "code", "id": f"c{i}", "source": src, "metadata": {"tags": ["parameters"]} if i == 0 else {},
              "outputs": [], "execution_count": None} for i, src in enumerate(CELLS)]
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5, "metadata": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}}}))
    return path


def test_a_training_cells_lines_reach_the_terminal_and_a_failure_is_named_everywhere(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "cache"))
    nb = _notebook(tmp_path / "course" / "05_tiny_lesson.ipynb")
    out = tmp_path / "runs" / "now"
    rc = run_notebooks.main(["--profile", "smoke", "--out", str(out), str(nb)])
    stdout, stderr = capfd.readouterr()
    assert rc == 1
    # one line per run under papermill (readable output; a long run adds a line with its time to go at
    # most once a minute, course_lib.progress.LOG_EVERY_S): its settings and where it got, as it ended
    lines = [line for line in stdout.splitlines() if line.startswith("  05 | [tiny run] ")]
    assert len(lines) == 1 and "-> epoch 0.6" in lines[0] and "step 11" in lines[0], stdout
    assert "never reached" not in stdout
    # cell 4 of the executed copy (runs/<timestamp>/), which holds papermill's injected parameters
    assert "[1/1] lesson 05 (05_tiny_lesson) failed at cell 4: ValueError: warmup_steps=38" in stdout
    summary = (out / "summary.md").read_text()
    assert "- lesson 05 (05_tiny_lesson) failed at cell 4: ValueError: warmup_steps=38 is more than" in summary
    assert "| not run |" in summary  # the ladder's row for the missing rung
    assert "| 05_tiny_lesson.ipynb | FAILED (cell 4) |" in summary
    # the next run of this profile next to it knows how long each lesson took here (none succeeded yet)
    assert run_notebooks.previous_seconds(tmp_path / "runs" / "next", "smoke") == {}
    saved = json.loads((out / "summary.json").read_text())
    saved["notebooks"][0]["ok"] = True
    (out / "summary.json").write_text(json.dumps(saved))
    assert run_notebooks.previous_seconds(tmp_path / "runs" / "next", "smoke").keys() == {"05_tiny_lesson.ipynb"}
    assert run_notebooks.previous_seconds(tmp_path / "runs" / "next", "full") == {}


def test_lesson_lines_are_whole_lines_with_the_lesson_in_front():
    import io

    out = io.StringIO()
    lines = run_notebooks.LessonLines(out, "  07 | ")
    lines.write("[adam b=32] step 10/240")
    lines.write("  eval loss 5.1\n[adam b=32] step 20/240\r\n\n")
    lines.write("partial")
    assert out.getvalue() == "  07 | [adam b=32] step 10/240  eval loss 5.1\n  07 | [adam b=32] step 20/240\n"
    lines.close()
    assert out.getvalue().endswith("  07 | partial\n")


def test_a_quiet_lesson_says_it_is_still_running():
    """Issue 36 item 5: a cell that prints nothing for a while (lesson 01's sweep: 23 minutes on a loaded machine)
    gets a line saying the lesson is alive; printing resets the wait, and no line comes while the kernel talks."""
    import io

    out = io.StringIO()
    lines = run_notebooks.LessonLines(out, "  01 | ")
    beat = run_notebooks.Heartbeat(lines, every_s=0.2, budget_s=300)
    beat.start()
    try:
        deadline = time.monotonic() + 30  # generous: a busy machine may not schedule the thread at once
        while "still running" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        beat.stop()
    said = [line for line in out.getvalue().splitlines() if "still running" in line]
    assert said and said[0].startswith("  01 | ... still running: no output for ") and "(its budget: 300 s)" in said[0]
    assert not beat.is_alive()
    # a kernel that keeps printing gets no heartbeat
    out = io.StringIO()
    lines = run_notebooks.LessonLines(out, "  01 | ")
    beat = run_notebooks.Heartbeat(lines, every_s=3600)
    beat.start()
    lines.write("a line\n")
    beat.stop()
    assert out.getvalue() == "  01 | a line\n"
