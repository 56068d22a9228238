"""Output a learner can read. Training progress under papermill is one line per run (plus a
line a minute for a long one), and no lesson cell prints more than ~40 lines.

The last test reads the smoke copies tests/test_notebooks.py executes into ci/executed/ (skipped
when they are not there: it runs after that test in ``make test``); ``ci/output_length.py`` is the
same count, for a full run's folder (``python ci/output_length.py runs/latest/notebooks``)."""

import json
import sys
from pathlib import Path

import pytest

from course_lib.progress import LogThrottle, run_line
from course_lib.train.ncf import TrainConfig, train_to_target

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "ci"))
import output_length  # noqa: E402

EXECUTED = REPO / "ci" / "executed" / "notebooks"
MAX_LINES = output_length.MAX_LINES
LESSONS = tuple(sorted(p.name[:2] for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")))  # every lesson


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
    nb = {"cells": [{"cell_type": "code", "id": "a", "outputs": [
        {"output_type": "stream", "text": ["a\n", "\n", "b\n"]},
        {"output_type": "display_data", "data": {"image/png": "x"}},
        {"output_type": "execute_result", "data": {"text/plain": "t\nu", "text/html": "<table>"}}]},
        {"cell_type": "markdown", "source": "x"},
        {"cell_type": "code", "id": "b", "outputs": [
            # a tqdm bar under papermill: each update rewrites its line after a carriage return
            {"output_type": "stream", "name": "stderr", "text": "\r 10%|#  |\r 50%|###|\r100%|####|\n"},
            {"output_type": "execute_result", "data": {"text/plain": "x\r\ny\r\n"}}]}]}
    assert output_length.cell_lines(nb) == [(0, "a", 2), (2, "b", 3)]  # blank lines do not count


def test_the_script_names_the_lesson_and_cell_over_the_limit(tmp_path, capsys):
    cells = [{"cell_type": "code", "id": cid, "outputs": [{"output_type": "stream", "text": "x\n" * n}]}
             for cid, n in (("short", 40), ("long", 41))]
    (tmp_path / "11_x.ipynb").write_text(json.dumps({"cells": cells}))
    (tmp_path / "12_y.ipynb").write_text(json.dumps({"cells": cells[:1]}))
    assert output_length.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "11_x.ipynb: cell 1 (long) prints 41 lines" in out and "12_y" not in out and "1 cell(s) over 40" in out
    assert output_length.main([str(tmp_path / "12_y.ipynb")]) == 0
    with pytest.raises(SystemExit, match="neither"):
        output_length.main([str(tmp_path / "missing.ipynb")])


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_lesson_cell_prints_more_than_forty_lines(lesson):
    paths = sorted(EXECUTED.glob(f"{lesson}_*.ipynb"))
    if not paths:
        pytest.skip(f"no executed copy of lesson {lesson} in {EXECUTED} (tests/test_notebooks.py writes them)")
    long = output_length.long_cells(paths[0], MAX_LINES)
    assert not long, (f"{paths[0].name}: cells printing more than {MAX_LINES} non-blank lines "
                      f"(cell index, id, lines): {long}")
