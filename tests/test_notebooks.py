"""Every lesson (and solution) notebook runs top to bottom in the smoke profile.

Executed copies are written to ci/executed/, where ci/test.sh runs nbval on them.
"""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "ci"))
import run_notebooks  # noqa: E402
from _timing import scaled  # noqa: E402

NOTEBOOKS = run_notebooks.find_notebooks([str(p) for p in (REPO / "notebooks", REPO / "solutions") if p.is_dir()])
EXECUTED = REPO / "ci" / "executed"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[f"{p.parent.name}/{p.name}" for p in NOTEBOOKS])
def test_notebook_executes_in_smoke_profile(nb, monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "smoke")  # restored after the test
    # A solution notebook must pass its own checks: strict checks raise instead of printing.
    monkeypatch.setenv("COURSE_CHECKS_STRICT", "1" if nb.parent.name == "solutions" else "0")
    run = run_notebooks.execute(nb, EXECUTED / nb.parent.name / nb.name, profile="smoke", kernel="python3",
                                results_dir=EXECUTED / "results", log_output=False, cell_timeout=scaled(900))
    print(f"{nb.name}: {run.seconds:.1f} s")
    assert run.ok, f"{nb.relative_to(REPO)} failed at {run.error}"


def test_there_are_lessons():
    assert [p.name for p in NOTEBOOKS if p.parent.name == "notebooks"][:1] == ["00_setup.ipynb"]
