"""nbgrader grades the exercises: the steps an instructor runs (docs/instructors.md), run here with nbgrader itself on
a temporary course.

    cp solutions/*.ipynb <course>/source/<assignment>/
    nbgrader generate_assignment <assignment>          # the learners' copies, in release/
    COURSE_CHECKS_STRICT=1 nbgrader autograde <assignment> --create
    nbgrader export                                     # grades.csv

The release equals what ``make exercises`` writes; the solution gets full marks, the untouched release 0 (and no
crash), and a submission with one subtly wrong function loses that function's check points and no others.
"""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _timing import scaled

pytest.importorskip("nbgrader")

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((REPO / "solutions").glob("*.ipynb"))
GRADED = ("01_metrics", "02_scaling_rules")  # two quick exercises for the autograder (a kernel each, per student)

pytestmark = pytest.mark.slow


def _nbgrader(course: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    # nbgrader runs alembic (its database migrations) as a command: the venv's bin must be on PATH
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    run = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, capture_output=True, text=True,
                         env={**os.environ, "PATH": path, "COURSE_PROFILE": "smoke", **env}, timeout=scaled(600))
    assert run.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("nbgrader-course")
    (root / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.course_id = "largebatch"\n')
    for assignment, names in (("exercises", [p.stem for p in SOLUTIONS]), ("graded", GRADED)):
        (root / "source" / assignment).mkdir(parents=True)
        for name in names:
            shutil.copy(REPO / "solutions" / f"{name}.ipynb", root / "source" / assignment)
        _nbgrader(root, "generate_assignment", assignment, "--force")
    return root


def _cells(path: Path) -> list[tuple[str, str]]:
    return [(c["cell_type"], "".join(c["source"]).strip()) for c in json.loads(path.read_text())["cells"]]


def test_generate_assignment_gives_the_exercises(course):
    released = sorted((course / "release" / "exercises").glob("*.ipynb"))
    assert [p.name for p in released] == [p.name for p in SOLUTIONS]
    for path in released:
        assert _cells(path) == _cells(REPO / "exercises" / path.name), f"{path.name}: nbgrader's release differs " \
            "from exercises/ (run `make exercises`)"


def _wrong_ndcg(path: Path) -> None:
    """One subtly wrong function: NDCG's discount log2(rank + 1) instead of log2(rank + 2)."""
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if "def ndcg_at_k" in "".join(c["source"]))
    source = "".join(cell["source"])
    assert "torch.log2(rank + 2.0)" in source
    cell["source"] = source.replace("torch.log2(rank + 2.0)", "torch.log2(rank + 1.0)")
    path.write_text(json.dumps(nb))


def test_autograde_scores_solution_release_and_a_wrong_submission(course):
    for student, origin in (("solution", "source"), ("untouched", "release"), ("wrong", "source")):
        folder = course / "submitted" / student / "graded"
        folder.mkdir(parents=True)
        for name in GRADED:
            shutil.copy(course / origin / "graded" / f"{name}.ipynb", folder)
    _wrong_ndcg(course / "submitted" / "wrong" / "graded" / "01_metrics.ipynb")
    _nbgrader(course, "autograde", "graded", "--create", "--force", COURSE_CHECKS_STRICT="1")
    _nbgrader(course, "export")
    with open(course / "grades.csv", newline="") as f:
        scores = {r["student_id"]: (float(r["score"]), float(r["max_score"])) for r in csv.DictReader(f)}
    total = scores["solution"][1]
    assert total == 4  # two checks per exercise, one point each
    assert scores == {"solution": (total, total), "untouched": (0.0, total), "wrong": (total - 1, total)}

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        lost = {g.name: g.score for g in gb.find_submission_notebook("01_metrics", "graded", "wrong").grades
                if g.max_score and g.score < g.max_score}
    assert list(lost) == ["01_metrics-" + _check_cell_id("check_ndcg")], lost


def _check_cell_id(check: str) -> str:
    nb = json.loads((REPO / "solutions" / "01_metrics.ipynb").read_text())
    return next(c["id"] for c in nb["cells"] if f"checks.{check}(" in "".join(c["source"]))
