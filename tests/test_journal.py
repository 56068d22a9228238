"""Lesson 12's journals: a cut-off line is repaired, the file is private, a spent
study says so, and study folders never collide."""

import functools
import os
import socket
import stat
import subprocess
import sys

import pytest

from course_lib import journal
from course_lib import optuna_search as search

optuna = pytest.importorskip("optuna")
from optuna.trial import TrialState  # noqa: E402

OBJECTIVE = functools.partial(search.quadratic_objective, steps=3)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _open(path):
    return search.open_study("quad", path, strategy="random", seed=0, max_resource=3)


def _interrupted_mid_append(path):
    """A search whose process was killed during a trial, in the middle of writing a journal line."""
    study = _open(path)
    search.run_search(study, OBJECTIVE, budget=6)
    trial = study.ask()
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("pid", _dead_pid())
    with open(path, "ab") as f:  # what a SIGKILL or a full quota leaves of an append
        f.write(b'{"op_code":6,"worker_id":"dead","trial_id":')
    return trial.number


def test_a_cut_off_last_line_is_dropped_with_a_note_and_the_search_goes_on(tmp_path, capsys):
    path = tmp_path / "j.log"
    orphan = _interrupted_mid_append(path)
    study = _open(path)  # today: loads, then the next append joins the cut line, and every read fails
    done = search.run_search(study, OBJECTIVE, budget=12)
    assert "its last line was cut off" in capsys.readouterr().err
    assert done["orphans_failed"] == [orphan] and done["trials"]
    again = _open(path)  # a third process replays the whole journal
    assert again.trials[orphan].state == TrialState.FAIL
    assert search.budget_spent(again) >= 12


def test_a_line_joined_to_a_cut_one_keeps_its_complete_part(tmp_path, capsys):
    path = tmp_path / "j.log"
    _interrupted_mid_append(path)
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    # what a second process's append did before the repair existed: written straight after the cut
    complete = lines[-3] + b"\n"
    with open(path, "ab") as f:
        f.write(complete)
    notes = journal.prepare_journal(path)
    assert any("a later write was joined to" in n for n in notes)
    assert open(path, "rb").read().endswith(complete)
    _open(path).trials  # readable again


def test_the_journal_is_private(tmp_path):
    path = tmp_path / "j.log"
    old = os.umask(0o022)
    try:
        search.run_search(_open(path), OBJECTIVE, budget=3)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_study_whose_budget_is_spent_says_so_when_reopened(tmp_path, capsys):
    path = tmp_path / "j.log"
    search.run_search(_open(path), OBJECTIVE, budget=6)
    capsys.readouterr()
    done = search.run_search(_open(path), OBJECTIVE, budget=6)
    out = capsys.readouterr().out
    assert done["trials"] == [] and done["already_spent"]
    assert "study 'quad'" in out and "has already spent its budget" in out and str(path) in out


def test_study_folders_never_collide(tmp_path):
    a, b = journal.new_study_dir(tmp_path / "12_studies"), journal.new_study_dir(tmp_path / "12_studies")
    assert a != b and a.parent == b.parent  # made in the same second
    assert stat.S_IMODE(os.stat(a).st_mode) == 0o700
