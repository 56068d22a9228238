"""The repository's own invariants: clean notebooks, consistent dependency lists, CI entry."""

import json
import re
import tomllib
from pathlib import Path

import pytest

from _timing import scaled

REPO = Path(__file__).resolve().parent.parent
ALL_NOTEBOOKS = sorted(p for d in ("notebooks", "solutions", "exercises") for p in (REPO / d).glob("*.ipynb"))


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_is_committed_clean(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"].get("kernelspec", {}).get("language") == "python", \
        "kernelspec.language must be set (papermill: 'No language found in notebook')"
    with_outputs = [i for i, c in enumerate(nb["cells"]) if c.get("outputs") or c.get("execution_count")]
    assert not with_outputs, f"cells {with_outputs} have outputs or execution counts: clear them before committing"


@pytest.mark.parametrize("path", [p for p in ALL_NOTEBOOKS if p.parent.name != "exercises"],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_has_a_parameters_cell_with_the_full_profile(path):
    nb = json.loads(path.read_text())
    tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters' (papermill injects after it)"
    source = "".join(tagged[0]["source"])
    assert re.search(r'^PROFILE = "full"', source, re.M), "the parameters cell sets PROFILE = \"full\""
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    # lesson.setup(PROFILE, ...) calls resolve_profile(PROFILE)
    assert "resolve_profile(PROFILE)" in code or "setup(PROFILE" in code, \
        "COURSE_PROFILE must be able to override PROFILE"


@pytest.mark.parametrize("path", [p for p in ALL_NOTEBOOKS if p.parent.name != "notebooks"],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_only_lessons_mark_cells_for_nbval(path):
    """ci/test.sh runs nbval on the executed lessons only: a marked cell anywhere else would never be compared."""
    marked = [i for i, c in enumerate(json.loads(path.read_text())["cells"])
              if c["cell_type"] == "code" and "NBVAL_CHECK_OUTPUT" in "".join(c["source"])]
    assert not marked, (f"cells {marked} are marked # NBVAL_CHECK_OUTPUT, but nbval runs only notebooks/ "
                        "(ci/test.sh): check the output with an assertion or a course_lib check instead")


def test_lesson_names_are_ordered():
    names = [p.name for p in sorted((REPO / "notebooks").glob("*.ipynb"))]
    assert names and all(re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", n) for n in names), names


def _requirement_map(reqs):
    out = {}
    for r in reqs:
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", r)
        out[m.group(1).lower().replace("_", "-")] = m.group(2).replace(" ", "")
    return out


def _environment_pip_requirements():
    """The pip: list of environment.yml, parsed without a YAML library (a small, fixed format)."""
    lines = (REPO / "environment.yml").read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if re.match(r"^\s*-\s*pip:\s*$", l))
    reqs = []
    for line in lines[start + 1:]:
        m = re.match(r"^\s{6,}-\s*(.+?)\s*$", line)
        if not m:
            break
        reqs.append(m.group(1))
    return reqs


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = _requirement_map(project["dependencies"] + project["optional-dependencies"]["dev"])
    env = _environment_pip_requirements()
    assert "-e ." in env, "environment.yml must install the course package itself (-e .)"
    got = _requirement_map([r for r in env if not r.startswith("-")])
    assert got == wanted, "environment.yml's pip list must match pyproject (dependencies + dev)"
    assert wanted["torch"] == "==2.13.0"
    text = (REPO / "environment.yml").read_text()
    assert re.search(r"^\s*-\s*python=3\.1[0-9]\s*$", text, re.M)


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    assert "make course" in readme and "make test" in readme
    assert re.search(r"^make test\s*$", (REPO / ".ci" / "run").read_text(), re.M)


@pytest.mark.parametrize("path", [p for p in ALL_NOTEBOOKS if p.parent.name != "exercises"],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_papermill_parses_every_parameter(path):
    """papermill must understand each knob (an '=' inside a trailing comment defeats its parser)."""
    import papermill

    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    assigned = re.findall(r"^([A-Za-z_]\w*)\s*=", "".join(cell["source"]), re.M)
    assert set(papermill.inspect_notebook(str(path))) == set(assigned)


def test_the_wheelhouse_holds_every_requirement_but_torch():
    """An offline GPU node installs from wheelhouse/ and keeps its own CUDA torch."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(REPO / "ci" / "requirements.py")], capture_output=True, text=True,
                         check=True).stdout.split()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = _requirement_map(project["dependencies"] + project["optional-dependencies"]["dev"])
    # the GPU node keeps its own torch; JupyterLab and the browser/JupyterHub/nbgrader tests' packages are not for it
    left_out = ("torch", "jupyterlab", "playwright", "jupyterhub", "configurable-http-proxy", "nbgrader")
    assert _requirement_map(out) == {k: v for k, v in wanted.items() if k not in left_out}
    assert {"papermill", "nbformat", "ipykernel", "pytest", "tokenizers"} <= set(_requirement_map(out))


def test_gpu_check_dry_run_installs_with_no_index_and_ends_with_its_budget(tmp_path):
    """The GPU check's plumbing on this CPU machine: the wheelhouse install (pip --no-index), the
    dependency check, the hardware and plan, the GPU tests (skipped here). Lessons and benchmarks
    are tested on their own (test_notebooks, test_bench)."""
    import os
    import subprocess
    import sys

    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "requirements.txt").write_text("")  # nothing to install, but pip runs with --no-index
    env = {**os.environ, "PY": sys.executable, "ALLOW_CPU": "1", "WHEELHOUSE": str(wheelhouse),
           "OUT": str(tmp_path / "out"), "CHECK_NOTEBOOKS": "none", "CHECK_BENCH": "0"}
    proc = subprocess.run(["bash", str(REPO / "ci" / "gpu-check.sh")], env=env, capture_output=True, text=True,
                          timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"installing from {wheelhouse} (no index)" in proc.stdout
    assert "The course's plan for this machine (cpu, smoke)" in proc.stdout
    assert re.search(r"gpu-check: ok in \d+ s \(within the 600 s budget\)", proc.stdout)
    (wheelhouse / "requirements.txt").unlink()
    proc = subprocess.run(["bash", str(REPO / "ci" / "gpu-check.sh")], env=env, capture_output=True, text=True,
                          timeout=scaled(600))
    assert proc.returncode == 2 and "make wheelhouse" in proc.stderr


def test_every_lesson_links_its_exercise_and_every_exercise_has_a_lesson():
    links = {}
    for nb in sorted((REPO / "notebooks").glob("*.ipynb")):
        text = "".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"]
                       if c["cell_type"] == "markdown")
        links[nb.name] = set(re.findall(r"\(\.\./exercises/([\w.]+\.ipynb)\)", text))
    exercises = {p.name for p in (REPO / "exercises").glob("*.ipynb")}
    for lesson, linked in links.items():
        assert linked <= exercises, f"{lesson} links a missing exercise: {linked - exercises}"
        if not lesson.startswith("00_"):
            assert linked, f"{lesson} links no exercise (end it with a link to exercises/NN_*.ipynb)"
    assert exercises <= set().union(*links.values()), (
        f"exercises no lesson links: {exercises - set().union(*links.values())}")


def test_every_lesson_asks_for_a_prediction_before_its_main_experiment():
    for nb in sorted((REPO / "notebooks").glob("0[1-7]_*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        asks = [i for i, c in enumerate(cells)
                if c["cell_type"] == "markdown" and "**Predict first.**" in "".join(c["source"])]
        assert asks, f"{nb.name} never asks the learner to predict before an experiment"
        assert all(i + 1 < len(cells) and cells[i + 1]["cell_type"] == "code" for i in asks), \
            f"{nb.name}: a prediction prompt must come right before the cell that answers it"


def test_the_course_has_at_least_four_widgets_and_every_one_is_used():
    import ast

    tree = ast.parse((REPO / "course_lib" / "widgets.py").read_text())
    public = {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")}
    widgets = public - {"widgets_available"}
    code = "\n".join("".join(c["source"]) for nb in sorted((REPO / "notebooks").glob("*.ipynb"))
                     for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
    used = {name for name in widgets if re.search(rf"\b{name}\(", code)}
    assert len(widgets) >= 4 and used == widgets, f"widgets {sorted(widgets)}, used by a lesson: {sorted(used)}"


def test_every_time_bound_in_the_suite_goes_through_the_one_scale():
    """A bare number of seconds as a timeout fails on a machine five times slower; ``scaled(...)`` (tests/_timing.py)
    multiplies every bound by COURSE_TEST_TIMEOUT_SCALE. Bounds of 0 or 1 s are left alone: they
    only read what already happened (pid files written before the launch returned)."""
    bare = re.compile(r"\b(timeout_s|timeout|cell_timeout|within|wait_s|WAIT_S|LAUNCH_TIMEOUT_S)\s*=\s*(\d+(\.\d*)?)")
    found = []
    for path in sorted((REPO / "tests").glob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in bare.finditer(line):
                if float(m.group(2)) > 1:
                    found.append(f"{path.name}:{n}: {line.strip()}")
    assert not found, "time bounds outside scaled():\n" + "\n".join(found)


def test_the_course_kernel_keeps_openmp_from_spinning_on_a_shared_machine(tmp_path):
    """`make kernel` (and so `make course` and a learner's JupyterLab) starts the kernel with a short OpenMP spin:
    libgomp's default spin made NeuMF's batch-256 step 25x slower beside busy processes (ci/bench_openmp.py), and
    lesson 01's sweep took 23 minutes of a loaded make course. Workers launch() starts inherit the kernel's env."""
    import os
    import subprocess

    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "HOME": str(tmp_path), "JUPYTER_DATA_DIR": str(tmp_path / "jupyter")}
    env.pop("GOMP_SPINCOUNT", None)
    subprocess.run(["make", "-s", "-C", str(repo), "kernel"], env=env, check=True, capture_output=True,
                   timeout=scaled(120))
    spec = json.loads((tmp_path / "jupyter" / "kernels" / "largebatch-course" / "kernel.json").read_text())
    assert spec["env"] == {"GOMP_SPINCOUNT": "10000"}
    # a learner's own setting wins
    subprocess.run(["make", "-s", "-C", str(repo), "kernel"], env={**env, "GOMP_SPINCOUNT": "1000"}, check=True,
                   capture_output=True, timeout=scaled(120))
    spec = json.loads((tmp_path / "jupyter" / "kernels" / "largebatch-course" / "kernel.json").read_text())
    assert spec["env"] == {"GOMP_SPINCOUNT": "1000"}
