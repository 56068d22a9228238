"""#37 item 8: output a learner can read. Training progress under papermill is one line per run (plus a
line a minute for a long one), and no lesson cell prints more than ~40 lines.

The second test reads the smoke copies tests/test_notebooks.py executes into ci/executed/ (skipped
when they are not there: it runs after that test in ``make test``)."""

import json
from pathlib import Path

import pytest

from course_lib.progress import LogThrottle, run_line
from course_lib.train.ncf import TrainConfig, train_to_target

REPO = Path(__file__).resolve().parent.parent
EXECUTED = REPO / "ci" / "executed" / "notebooks"
MAX_LINES = 40
LESSONS = tuple(f"{n:02d}" for n in range(7))  # lessons 00-06 (#37); 07-12 join when their cells are trimmed


def _lines(output: dict) -> int:
    """Lines of text a cell output shows: streams, plain-text results (a figure or an HTML table is not text)."""
    kind = output.get("output_type")
    if kind == "stream":
        text = output.get("text", "")
        return len(("".join(text) if isinstance(text, list) else text).splitlines())
    if kind in ("execute_result", "display_data"):
        data = output.get("data", {})
        if "image/png" in data or "text/html" in data:
            return 0
        text = data.get("text/plain", "")
        return len(("".join(text) if isinstance(text, list) else text).splitlines())
    if kind == "error":
        return len(output.get("traceback", []))
    return 0


def cell_lines(notebook: dict) -> list[tuple[int, int]]:
    """``(cell index, lines printed)`` for every code cell of an executed notebook."""
    return [(i, sum(_lines(o) for o in c.get("outputs", []))) for i, c in enumerate(notebook["cells"])
            if c["cell_type"] == "code"]


def test_a_run_under_papermill_prints_one_line(data, capsys, monkeypatch):
    from course_lib.train import ncf

    cfg = TrainConfig(global_batch_size=1024, max_epochs=1.0, eval_every_epochs=0.25, target_hr=0.01)
    monkeypatch.setattr(ncf, "in_notebook", lambda: True)  # a kernel, as under papermill
    train_to_target(data, cfg, progress="log", label="one")
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("[one] global batch 1024") and "first at epoch" in out[0]
    train_to_target(data, cfg, progress="none")
    assert capsys.readouterr().out == ""
    # a script (a SLURM job's log): the settings as the run begins, then the same one line as it ends
    monkeypatch.setattr(ncf, "in_notebook", lambda: False)
    train_to_target(data, cfg, progress="log", label="one")
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].startswith("[one] global batch 1024") and "->" not in out[0], out
    assert "first at epoch" in out[1], out


def test_a_long_run_says_it_is_alive_at_most_once_a_period():
    now = [0.0]
    throttle = LogThrottle(every=60.0, clock=lambda: now[0])
    due = []
    for t in range(0, 300, 5):
        now[0] = float(t)
        due.append(throttle.due())
    assert sum(due) == 4  # at 60, 120, 180, 240 s: not at the start, not every evaluation
    curve = {"epoch": [0.0, 0.5], "step": [0, 10], "time_s": [0.0, 1.0], "loss": [None, 0.5], "hr": [0.1, 0.2],
             "ndcg": [0.05, 0.1]}
    assert run_line("x", "s", curve, 0.7).endswith("HR@10 >= 0.7 not reached")
    assert run_line("x", "", None, 0.7) == "[x] -> no evaluation point"


def test_the_counter_counts_text_not_figures():
    nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", "text": ["a\n", "b\n"]},
                                                      {"output_type": "display_data", "data": {"image/png": "x"}},
                                                      {"output_type": "execute_result",
                                                       "data": {"text/plain": "t\nu", "text/html": "<table>"}}]},
                    {"cell_type": "markdown", "source": "x"}]}
    assert cell_lines(nb) == [(0, 2)]


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_lesson_cell_prints_more_than_forty_lines(lesson):
    paths = sorted(EXECUTED.glob(f"{lesson}_*.ipynb"))
    if not paths:
        pytest.skip(f"no executed copy of lesson {lesson} in {EXECUTED} (tests/test_notebooks.py writes them)")
    long = [(i, n) for i, n in cell_lines(json.loads(paths[0].read_text())) if n > MAX_LINES]
    assert not long, f"{paths[0].name}: cells printing more than {MAX_LINES} lines (cell index, lines): {long}"
