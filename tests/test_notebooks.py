"""Every lesson (and solution) notebook runs top to bottom in the smoke profile.

Executed copies are written to ci/executed/, where ci/test.sh runs nbval on them. The cells
marked ``# NBVAL_CHECK_OUTPUT`` are also compared with the outputs stored in
tests/expected_outputs.json (ci/expected_outputs.py): nbval proves them reproducible, the
stored values that they are the ones a reviewer accepted.
"""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "ci"))
import expected_outputs  # noqa: E402
import output_length  # noqa: E402
import run_notebooks  # noqa: E402
from _alone import ALONE, READS_RESULTS, missing_fallbacks, output_text  # noqa: E402
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
    if nb.parent.name == "notebooks":  # every lesson shows at least one figure (a drawing or a measurement)
        executed = json.loads(Path(run.output).read_text())
        assert any("image/png" in o.get("data", {}) for c in executed["cells"] for o in c.get("outputs", [])), \
            f"{nb.relative_to(REPO)} drew no figure"
        # checked here, on the copy just written (under xdist a separate test could run first)
        long = output_length.long_cells(Path(run.output))
        assert not long, (f"{nb.relative_to(REPO)}: cells printing more than {output_length.MAX_LINES} non-blank "
                          f"lines (cell index, id, lines): {long}")
    problems = expected_outputs.compare(Path(run.output))
    assert not problems, (
        f"{nb.relative_to(REPO)}: checked outputs differ from tests/expected_outputs.json "
        "(if the change is meant, run `python ci/expected_outputs.py --update` and commit the diff):\n"
        + "\n".join(problems)
    )


def test_there_are_lessons():
    assert [p.name for p in NOTEBOOKS if p.parent.name == "notebooks"][:1] == ["00_setup.ipynb"]


# --------------------------------------------------------------------------- the stored outputs


def _nb(tmp_path, outputs: dict[str, str], folder="notebooks", name="99_x.ipynb") -> Path:
    cells = [{"cell_type": "code", "id": cid, "source": "# NBVAL_CHECK_OUTPUT\nprint()", "metadata": {},
              "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}
             for cid, text in outputs.items()]
    path = tmp_path / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cells": cells}))
    return path


def test_stored_outputs_catch_a_changed_missing_or_removed_cell(tmp_path):
    nb = _nb(tmp_path, {"a": "lr 0.004\n", "b": "new\n"})
    stored = {"notebooks/99_x.ipynb": {"a": {"text": "lr 0.002\n"}, "gone": {"text": "x"}}}
    problems = expected_outputs.compare(nb, stored)
    assert len(problems) == 3
    assert "cell a: output differs" in problems[0] and "lr 0.002" in problems[0] and "lr 0.004" in problems[0]
    assert "cell b: marked" in problems[1] and "--update" in problems[1]
    assert "cell gone: has an expected output but is no longer marked" in problems[2]
    assert expected_outputs.compare(nb, {"notebooks/99_x.ipynb": {"a": {"text": "lr 0.004\n"},
                                                                  "b": {"text": "new\n"}}}) == []


def test_a_tolerance_applies_to_numbers_only(tmp_path):
    nb = _nb(tmp_path, {"a": "HR@10 = 0.3235, 58500 interactions\n"})
    def check(want, rtol=0.05):
        return expected_outputs.compare(nb, {"notebooks/99_x.ipynb": {"a": {"text": want, "rtol": rtol}}})
    assert check("HR@10 = 0.3230, 58491 interactions\n") == []
    assert "not within 5%" in check("HR@10 = 0.2000, 58491 interactions\n")[0]
    assert "not within 5%" in check("HR@5 = 0.3230, 58491 interactions\n")[0]  # numbers in names count too
    assert "text around the numbers" in check("HR@10 = 0.3230, 58491 users\n")[0]


def test_update_rewrites_from_executed_copies_and_keeps_tolerances(tmp_path):
    _nb(tmp_path / "executed", {"a": "one\n"})
    path = tmp_path / "expected.json"
    path.write_text(json.dumps({"notebooks/99_x.ipynb": {"a": {"text": "old", "rtol": 0.1}}}))
    new = expected_outputs.update(tmp_path / "executed", path)
    assert new == {"notebooks/99_x.ipynb": {"a": {"text": "one\n", "rtol": 0.1}}}
    assert expected_outputs.load(path) == new


def test_nbval_reruns_each_lesson_up_to_its_last_marked_cell(tmp_path):
    """ci/test.sh gives nbval these prefixes: every marked cell and what ran before it, nothing after; a lesson
    with no marked cell is not re-run."""
    def cell(source, kind="code"):
        return {"cell_type": kind, "source": source, "metadata": {}, **({"outputs": []} if kind == "code" else {})}
    marked = {"cells": [cell("x = 1"), cell("# NBVAL_CHECK_OUTPUT\nprint(x)"), cell("a note", "markdown"),
                        cell("# NBVAL_CHECK_OUTPUT\nprint(2)"), cell("train()")], "metadata": {}}
    plain = {"cells": [cell("train()")], "metadata": {}}
    assert expected_outputs.checked_prefix(marked)["cells"] == marked["cells"][:4]
    assert expected_outputs.checked_prefix(plain) is None
    for name, nb in (("01_a.ipynb", marked), ("02_b.ipynb", plain)):
        (tmp_path / "executed" / "notebooks").mkdir(parents=True, exist_ok=True)
        (tmp_path / "executed" / "notebooks" / name).write_text(json.dumps(nb))
    written = expected_outputs.write_prefixes(tmp_path / "executed", tmp_path / "nbval")
    assert written == [tmp_path / "nbval" / "notebooks" / "01_a.ipynb"]
    assert json.loads(written[0].read_text())["cells"] == marked["cells"][:4]


def test_every_marked_cell_in_the_repository_has_a_stored_output():
    stored = expected_outputs.load()
    for nb in NOTEBOOKS:
        cells = expected_outputs.marked_cells(json.loads(nb.read_text()))
        missing = cells.keys() - stored.get(expected_outputs.key(nb), {}).keys()
        assert not missing, f"{nb.relative_to(REPO)}: cells {sorted(missing)} have no stored output " \
            "(run `make test`, then `python ci/expected_outputs.py --update`)"


# --------------------------------------------------------------------------- every lesson alone

# Which lessons read earlier results, and what each says without them: tests/_alone.py. Where the browser tests
# run (Chromium and Playwright present), tests/test_browser.py runs each lesson alone in a fresh results folder
# and checks the same; tests/conftest.py then skips this test, naming the browser test that covers the lesson.


@pytest.mark.parametrize("name", sorted(ALONE))
def test_lesson_runs_alone_in_a_fresh_results_folder(name, tmp_path, monkeypatch):
    """Opened first, in a fresh results folder: the lesson runs to the end on its own defaults and says,
    in a line each, which earlier results it did not find (the chain above runs it with them)."""
    monkeypatch.setenv("COURSE_PROFILE", "smoke")
    monkeypatch.setenv("COURSE_CHECKS_STRICT", "0")
    nb = REPO / "notebooks" / name
    run = run_notebooks.execute(nb, tmp_path / "executed" / name, profile="smoke", kernel="python3",
                                results_dir=tmp_path / "results", log_output=False, cell_timeout=scaled(900))
    print(f"{name} alone: {run.seconds:.1f} s")
    assert run.ok, f"{name}, run alone in a fresh results folder, failed at {run.error}"
    missing = missing_fallbacks(name, output_text(json.loads(Path(run.output).read_text())))
    assert not missing, f"{name}, run alone, did not say it fell back to its defaults: no line with {missing}"


def test_a_lesson_alone_that_does_not_say_what_it_fell_back_from_is_caught():
    """The check both runs alone make (here and tests/test_browser.py), fed a lesson's outputs with and without
    its lines: a stream's list of lines, a ``text/plain`` result."""
    said = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "stream", "name": "stdout",
         "text": ["lr 0.004 (the default: ", "lesson 01 has not saved an lr for x here)\n"]},
        {"output_type": "execute_result", "data": {"text/plain": "lesson 01's baseline run is not saved here"}}]}]}
    assert missing_fallbacks("02_linear_scaling.ipynb", output_text(said)) == []
    said["cells"][0]["outputs"].pop()
    baseline = "lesson 01's baseline run is not saved here"
    assert missing_fallbacks("02_linear_scaling.ipynb", output_text(said)) == [baseline]
    assert missing_fallbacks("01_baseline.ipynb", "") == []  # reads no earlier result


def test_the_lessons_that_run_alone_are_those_that_read_earlier_results():
    """A lesson that reads no earlier result runs alone in the chain already; one that starts reading
    one must be added to ALONE (with the line it prints when the result is missing)."""
    lessons = [p for p in NOTEBOOKS if p.parent.name == "notebooks"]
    sources = {p.name: "".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"]) for p in lessons}
    reads = {name for name, source in sources.items() if any(r in source for r in READS_RESULTS)}
    assert reads <= ALONE.keys(), f"lessons that read earlier results but are not in ALONE: {reads - ALONE.keys()}"
    assert set(ALONE) <= {p.name for p in lessons}


def test_update_after_one_lesson_keeps_the_other_lessons_outputs(tmp_path):
    """A smoke run of one lesson (`-k notebooks/10`) then --update must not drop the other notebooks'
    stored outputs. The notebooks not executed keep theirs; a stored notebook
    that no longer exists in the repository goes."""
    _nb(tmp_path / "executed", {"a": "one\n"})
    path = tmp_path / "expected.json"
    kept = {"b": {"text": "lesson 01's\n"}}
    path.write_text(json.dumps({"notebooks/01_baseline.ipynb": kept, "notebooks/98_gone.ipynb": kept}))
    new = expected_outputs.update(tmp_path / "executed", path)
    assert new == {"notebooks/01_baseline.ipynb": kept, "notebooks/99_x.ipynb": {"a": {"text": "one\n"}}}
