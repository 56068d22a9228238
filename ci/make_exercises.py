"""Generate the learner notebooks in exercises/ from the solved ones in solutions/.

    python ci/make_exercises.py           # (re)write exercises/ (what `make exercises` runs)
    python ci/make_exercises.py --check   # exit 1 and list the files when exercises/ is out of date

Solutions mark what the learner writes in nbgrader's convention, and carry nbgrader's cell
metadata (written here, ``grading_metadata``), so instructors who use nbgrader can take
solutions/ as its ``source/`` as it is:

    ### BEGIN SOLUTION
    ...the answer...
    ### END SOLUTION

In a code cell the region becomes nbgrader's stub at the region's indentation
(``# YOUR CODE HERE`` + ``raise NotImplementedError()``); in a markdown cell it becomes
``YOUR ANSWER HERE``. Outputs and execution counts are dropped, cell ids are the
solution's, and the JSON is written with sorted keys, so regenerating is byte-identical
and ``--check`` can compare bytes.

nbgrader's cell metadata: a cell with a solution region is a *solution* cell; a check cell (a cell
that only calls ``checks.check_...``) a locked, autograded *test* cell worth ``CHECK_POINTS`` (a
failing check raises where ``COURSE_CHECKS_STRICT=1``, which the autograder's environment sets); every
other cell is locked (read-only). ``make exercises`` writes that metadata into solutions/ too, and
``--check`` fails where it is missing. tests/test_nbgrader.py runs nbgrader itself on them.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"
EXERCISES = REPO / "exercises"

BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION[ \t]*$")
END = re.compile(r"^[ \t]*### END SOLUTION[ \t]*$")
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
TEXT_STUB = "YOUR ANSWER HERE"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
CHECK = re.compile(r"^checks\.check_\w+\(.*\)\s*$", re.S)  # a check cell: one call to a check, nothing else
CHECK_POINTS = 1
# Cell metadata that records a run, not the notebook.
RUN_METADATA = ("execution", "collapsed", "scrolled", "papermill", "ExecuteTime")


class SolutionMarkerError(ValueError):
    """Unbalanced or nested BEGIN/END SOLUTION markers."""


def strip_solutions(source: str, cell_type: str, where: str = "") -> tuple[str, int]:
    """The cell source with every solution region replaced by its stub, and the number of regions."""
    out: list[str] = []
    indent: str | None = None
    regions = 0
    for lineno, line in enumerate(source.split("\n"), 1):
        begin, end = BEGIN.match(line), END.match(line)
        if begin:
            if indent is not None:
                raise SolutionMarkerError(f"{where} line {lineno}: BEGIN SOLUTION inside another solution region")
            indent = begin.group("indent")
            regions += 1
            if cell_type == "code":
                out += [indent + stub for stub in CODE_STUB]
            else:
                out.append(indent + TEXT_STUB)
        elif end:
            if indent is None:
                raise SolutionMarkerError(f"{where} line {lineno}: END SOLUTION without a BEGIN SOLUTION")
            indent = None
        elif indent is None:
            out.append(line)
    if indent is not None:
        raise SolutionMarkerError(f"{where}: BEGIN SOLUTION without an END SOLUTION")
    return "\n".join(out), regions


def grading_metadata(nb, stem: str) -> None:
    """Set nbgrader's metadata on every cell of ``nb`` (a solution notebook), in place (module docstring)."""
    for cell in nb.cells:
        solution = cell.cell_type != "raw" and any(BEGIN.match(line) for line in cell.source.split("\n"))
        check = cell.cell_type == "code" and bool(CHECK.match(cell.source.strip()))
        meta = {"grade": check, "grade_id": f"{stem}-{cell.get('id', '')}", "locked": not solution,
                "schema_version": 3, "solution": solution, "task": False}
        if check:
            meta["points"] = CHECK_POINTS
        cell.metadata["nbgrader"] = meta


def with_grading_metadata(solution: Path) -> str:
    """The solution notebook with nbgrader's metadata set, as the exact text to write."""
    nb = nbformat.read(solution, as_version=4)
    grading_metadata(nb, solution.stem)
    text = nbformat.writes(nb, version=4)
    return text if text.endswith("\n") else text + "\n"


def make_exercise(solution: Path) -> str:
    """The exercise notebook for ``solution``, as the exact text to write."""
    nb = nbformat.reads(with_grading_metadata(solution), as_version=4)
    regions = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type in ("code", "markdown"):
            cell.source, n = strip_solutions(cell.source, cell.cell_type, f"{solution.name} cell {i}")
            regions += n
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in RUN_METADATA:
            cell.metadata.pop(key, None)
    if regions == 0:
        raise SolutionMarkerError(f"{solution.name}: no ### BEGIN SOLUTION region, so nothing for the learner to do")
    nb.metadata = nbformat.from_dict({
        "kernelspec": KERNELSPEC,
        "language_info": {"name": "python"},
        # For maintainers: edit the solution and regenerate; learners edit this file.
        "course": {"generated_from": f"solutions/{solution.name}", "generator": "ci/make_exercises.py"},
    })
    text = nbformat.writes(nb, version=4)
    return text if text.endswith("\n") else text + "\n"


def expected_exercises(solutions: Path | None = None) -> dict[str, str]:
    """File name -> text for every notebook in solutions/."""
    solutions = solutions or SOLUTIONS
    return {p.name: make_exercise(p) for p in sorted(solutions.glob("*.ipynb"))}


def out_of_date(solutions: Path | None = None, exercises: Path | None = None) -> list[str]:
    """Exercise files that differ from what the solutions generate, are missing, or have no solution."""
    solutions, exercises = solutions or SOLUTIONS, exercises or EXERCISES
    wanted = expected_exercises(solutions)
    present = {p.name for p in exercises.glob("*.ipynb")} if exercises.is_dir() else set()
    stale = []
    for name, text in wanted.items():
        path = exercises / name
        if not path.exists():
            stale.append(f"exercises/{name} (missing)")
        elif path.read_bytes() != text.encode():
            stale.append(f"exercises/{name} (differs from solutions/{name})")
    stale += [f"exercises/{name} (no solutions/{name})" for name in sorted(present - set(wanted))]
    stale += [f"solutions/{p.name} (nbgrader metadata)" for p in sorted(solutions.glob("*.ipynb"))
              if p.read_bytes() != with_grading_metadata(p).encode()]
    return stale


def write_exercises(solutions: Path | None = None, exercises: Path | None = None) -> list[str]:
    """Write every exercise, remove those whose solution is gone; returns the files changed."""
    solutions, exercises = solutions or SOLUTIONS, exercises or EXERCISES
    exercises.mkdir(exist_ok=True)
    changed = []
    for path in sorted(solutions.glob("*.ipynb")):
        text = with_grading_metadata(path)
        if path.read_bytes() != text.encode():
            path.write_bytes(text.encode())
            changed.append(f"solutions/{path.name} (nbgrader metadata)")
    wanted = expected_exercises(solutions)
    for name, text in wanted.items():
        path = exercises / name
        if not path.exists() or path.read_bytes() != text.encode():
            path.write_bytes(text.encode())
            changed.append(f"exercises/{name}")
    for path in sorted(exercises.glob("*.ipynb")):
        if path.name not in wanted:
            path.unlink()
            changed.append(f"exercises/{path.name} (removed)")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that exercises/ is up to date")
    opts = parser.parse_args(argv)
    if opts.check:
        stale = out_of_date()
        if stale:
            print("exercises/ is out of date; run `make exercises` (python ci/make_exercises.py):", file=sys.stderr)
            print("\n".join(f"  {s}" for s in stale), file=sys.stderr)
            return 1
        print(f"exercises/ is up to date ({len(expected_exercises())} notebooks)")
        return 0
    changed = write_exercises()
    print(f"wrote {len(changed)} file(s)" + "".join(f"\n  {c}" for c in changed) if changed
          else "exercises/ was already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
