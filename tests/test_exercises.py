"""exercises/ is generated from solutions/ and in sync with it; every check reports a stub
as "not implemented yet" (so no check passes code that does nothing).

The solutions themselves are executed, with strict checks, by tests/test_notebooks.py.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest

from _exercise_stubs import untouched_exercise_problems
from _lab import browser_missing
from course_lib import checks

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "ci"))
import make_exercises  # noqa: E402

SOLUTIONS = sorted((REPO / "solutions").glob("*.ipynb"))
PUBLIC_CHECKS = [getattr(checks, name) for name in checks.__all__ if name.startswith("check_")]


def _code(path: Path) -> str:
    nb = json.loads(path.read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


# --------------------------------------------------------------------------- generation


def test_exercises_are_in_sync_with_solutions():
    assert SOLUTIONS, "solutions/ has no notebooks"
    stale = make_exercises.out_of_date()
    assert not stale, "exercises/ is out of date; run `make exercises`:\n" + "\n".join(stale)


def test_check_mode_lists_what_is_out_of_date(tmp_path, capsys, monkeypatch):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    for p in SOLUTIONS[:2]:
        shutil.copy(p, sol / p.name)
    make_exercises.write_exercises(sol, ex)
    assert make_exercises.out_of_date(sol, ex) == []
    first = (ex / SOLUTIONS[0].name).read_bytes()
    make_exercises.write_exercises(sol, ex)
    assert (ex / SOLUTIONS[0].name).read_bytes() == first, "regeneration must be byte-identical"

    nb = json.loads((sol / SOLUTIONS[0].name).read_text())
    nb["cells"][0]["source"] = "# an edited solution\n"
    (sol / SOLUTIONS[0].name).write_text(json.dumps(nb))
    (ex / "99_orphan.ipynb").write_text("{}")
    (ex / SOLUTIONS[1].name).unlink()
    stale = make_exercises.out_of_date(sol, ex)
    assert stale == [f"exercises/{SOLUTIONS[0].name} (differs from solutions/{SOLUTIONS[0].name})",
                     f"exercises/{SOLUTIONS[1].name} (missing)",
                     "exercises/99_orphan.ipynb (no solutions/99_orphan.ipynb)",
                     f"solutions/{SOLUTIONS[0].name} (nbgrader metadata)"]

    # the command line: --check exits 1 and names the files; plain mode brings them back in sync
    monkeypatch.setattr(make_exercises, "SOLUTIONS", sol)
    monkeypatch.setattr(make_exercises, "EXERCISES", ex)
    assert make_exercises.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "make exercises" in err and all(line in err for line in stale)
    assert make_exercises.main([]) == 0
    assert make_exercises.main(["--check"]) == 0
    assert not (ex / "99_orphan.ipynb").exists()


def test_solution_regions_become_nbgrader_stubs():
    source = (
        "def f(x):\n"
        '    """Doc."""\n'
        "    ### BEGIN SOLUTION\n"
        "    y = x + 1\n"
        "    return y\n"
        "    ### END SOLUTION\n"
        "\n"
        "class A:\n"
        "    def g(self):\n"
        "        ### BEGIN SOLUTION\n"
        "        return 2\n"
        "        ### END SOLUTION\n"
    )
    out, regions = make_exercises.strip_solutions(source, "code")
    assert regions == 2
    assert out == (
        "def f(x):\n"
        '    """Doc."""\n'
        "    # YOUR CODE HERE\n"
        "    raise NotImplementedError()\n"
        "\n"
        "class A:\n"
        "    def g(self):\n"
        "        # YOUR CODE HERE\n"
        "        raise NotImplementedError()\n"
    )
    text, regions = make_exercises.strip_solutions("Why?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION", "markdown")
    assert (text, regions) == ("Why?\nYOUR ANSWER HERE", 1)


@pytest.mark.parametrize("source", [
    "### BEGIN SOLUTION\nx = 1\n",
    "x = 1\n### END SOLUTION\n",
    "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n",
])
def test_unbalanced_markers_are_an_error(source):
    with pytest.raises(make_exercises.SolutionMarkerError):
        make_exercises.strip_solutions(source, "code")


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_exercise_matches_its_solution_cell_for_cell(solution):
    exercise = REPO / "exercises" / solution.name
    sol, ex = json.loads(solution.read_text()), json.loads(exercise.read_text())
    assert [c["id"] for c in ex["cells"]] == [c["id"] for c in sol["cells"]], "cell ids are the solution's"
    assert ex["metadata"]["kernelspec"] == make_exercises.KERNELSPEC
    assert sol["metadata"]["kernelspec"] == make_exercises.KERNELSPEC
    ex_text = "\n".join("".join(c["source"]) for c in ex["cells"])
    markers = [line for line in ex_text.split("\n")
               if make_exercises.BEGIN.match(line) or make_exercises.END.match(line)]
    assert not markers, "solution markers left in the exercise"
    assert "raise NotImplementedError()" in ex_text
    assert not any(c.get("outputs") or c.get("execution_count") for c in ex["cells"])
    assert ex["metadata"]["course"]["generated_from"] == f"solutions/{solution.name}"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_every_solution_ends_its_exercise_with_a_check(solution):
    code = _code(solution)
    assert "### BEGIN SOLUTION" in code
    used = [c.__name__ for c in PUBLIC_CHECKS if f"checks.{c.__name__}(" in code]
    assert used, f"{solution.name} calls no course_lib.checks check"
    # a check comes after the last solution region, so the learner's last edit gets checked
    assert code.rindex("checks.check_") > code.rindex("### END SOLUTION")


def test_every_check_is_used_by_a_solution():
    code = "\n".join(_code(p) for p in SOLUTIONS)
    unused = [c.__name__ for c in PUBLIC_CHECKS if f"checks.{c.__name__}(" not in code]
    assert not unused, f"checks that no exercise uses: {unused}"


def test_lesson_06_writes_the_learner_module_outside_the_repo():
    code = _code(REPO / "solutions" / "06_allreduce.ipynb")
    assert "%%writefile {WORK_DIR}/" in code and "session_temp_dir(" in code
    assert "sys.path.insert(0, WORK_DIR)" in code and "importlib.reload" in code


@pytest.mark.parametrize("folder", ["solutions", "exercises"])
def test_lesson_06_never_imports_from_a_planted_shared_temp_dir(folder, tmp_path, monkeypatch):
    """The directory that goes first on sys.path must be fresh and private: a predictable name
    in the shared temp dir (e.g. /tmp/course-ex06-<user>) can be created first by anyone, with a
    planted course_lib/ inside that every worker would import."""
    import getpass
    import os
    import stat
    import tempfile

    from course_lib import fileio

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(fileio, "_SESSION_DIRS", {})
    monkeypatch.setattr(sys, "path", list(sys.path))
    planted = tmp_path / f"course-ex06-{getpass.getuser()}"
    (planted / "course_lib").mkdir(parents=True)
    (planted / "course_lib" / "__init__.py").write_text("raise SystemExit('planted code ran')\n")
    planted.chmod(0o777)
    nb = json.loads((REPO / folder / "06_allreduce.ipynb").read_text())
    cell = next("".join(c["source"]) for c in nb["cells"]
                if c["cell_type"] == "code" and "WORK_DIR =" in "".join(c["source"]))
    namespace = {"os": os, "sys": sys, "tempfile": tempfile, "getpass": getpass}  # what earlier cells import
    exec(cell, namespace)  # the notebook's own cell
    work_dir = namespace["WORK_DIR"]
    assert os.path.realpath(work_dir) != os.path.realpath(planted) and not os.listdir(work_dir)
    st = os.stat(work_dir)
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert sys.path[0] == work_dir
    exec(cell, namespace)  # re-running the cell keeps the same directory
    assert namespace["WORK_DIR"] == work_dir and sys.path.count(work_dir) == 1


# --------------------------------------------------------------------------- stubs


def _stub(*args, **kwargs):
    # nbgrader's stub, as the exercises have it
    # YOUR CODE HERE
    raise NotImplementedError()


class StubScaler:
    """The loss-scaler exercise with only __init__ written: every method is still a stub."""

    def __init__(self, **settings):
        self.settings = settings

    def get_scale(self):
        raise NotImplementedError()

    scale = step = update = get_scale


STUBS = {"check_loss_scaler": StubScaler}


@pytest.mark.parametrize("check", PUBLIC_CHECKS, ids=lambda c: c.__name__)
def test_every_check_reports_a_stub_as_not_implemented(check, monkeypatch):
    monkeypatch.delenv(checks.STRICT_ENV, raising=False)
    result = check(STUBS.get(check.__name__, _stub))
    assert isinstance(result, checks.CheckResult)
    assert not result.passed and result.not_implemented
    assert "not implemented" in result.message
    assert "NOT IMPLEMENTED YET" in repr(result) and "NOT IMPLEMENTED YET" in result._repr_html_()


def test_a_stub_fails_in_strict_mode(monkeypatch):
    monkeypatch.setenv(checks.STRICT_ENV, "1")
    with pytest.raises(checks.CheckFailed, match="not implemented yet"):
        checks.check_lars_step(_stub)
    with pytest.raises(AssertionError):  # CheckFailed is an AssertionError: pytest and CI read it as a failure
        checks.check_loss_scaler(StubScaler)


# --------------------------------------------------------------------------- the learner's copy, run


EXERCISES = sorted((REPO / "exercises").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.skipif(browser_missing() is None, reason="tests/test_browser.py runs every untouched exercise in "
                    "JupyterLab and checks the same (tests/_exercise_stubs.py); this papermill run is its stand-in "
                    "where there is no browser")
@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda p: p.name)
def test_an_untouched_exercise_runs_and_every_check_says_not_implemented(exercise, tmp_path, monkeypatch):
    """What a learner sees on opening an exercise and choosing "Run All" before writing anything:
    every cell runs (no cell but the stubs depends on the answer), and every check cell reports
    NOT IMPLEMENTED YET — not PASS, not FAIL, not a traceback."""
    import run_notebooks
    from _timing import scaled

    monkeypatch.setenv("COURSE_PROFILE", "smoke")
    monkeypatch.setenv(checks.STRICT_ENV, "0")
    out = tmp_path / exercise.name
    run = run_notebooks.execute(exercise, out, profile="smoke", kernel="python3", results_dir=tmp_path / "results",
                                log_output=False, cell_timeout=scaled(900))
    assert run.ok, f"{exercise.relative_to(REPO)} failed at {run.error}"
    problems = untouched_exercise_problems(exercise.name, json.loads(out.read_text()))
    assert not problems, "\n".join(problems)
