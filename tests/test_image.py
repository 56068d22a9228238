"""The course as an OCI image (container/): it builds from Debian's packages and PyPI's wheels, and runs lessons and
the tier tests with no network; the Apptainer definition and the JupyterHub kernel spec say what they must.

The image's tests need root and podman (ci/container-deps.sh installs it with apt, as `make test` does); elsewhere
they skip with the reason. container/build.sh caches the image by a hash of its inputs: a cold build takes several
minutes, a cached one a second.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _timing import scaled

REPO = Path(__file__).resolve().parent.parent
CONTAINER = REPO / "container"


def test_the_apptainer_definition_bootstraps_from_the_saved_image():
    text = (CONTAINER / "course.def").read_text()
    header = dict(re.findall(r"^(Bootstrap|From):\s*(\S+)\s*$", text, re.M))
    assert header == {"Bootstrap": "oci-archive", "From": "largebatch-course.tar"}
    sections = re.findall(r"^%(\w+)", text, re.M)
    assert {"environment", "runscript", "labels"} <= set(sections)
    # the comment's recipe saves the archive the header names, from the image make image builds
    assert "podman save --format oci-archive -o largebatch-course.tar localhost/largebatch-course:cpu" in text


def test_the_kernel_spec_runs_the_courses_kernel_inside_the_image():
    spec = json.loads((CONTAINER / "kernel.json").read_text())
    argv = spec["argv"]
    assert argv[:2] == ["apptainer", "exec"] and "{SIF}" in argv
    assert argv[argv.index("{SIF}") + 1:] == ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    assert spec["language"] == "python" and spec["display_name"]


def _image_tools_reason() -> str:
    if os.geteuid() != 0:
        return "the image's tests run as root (podman builds and runs the image as root)"
    missing = [t for t in ("podman", "mmdebstrap") if shutil.which(t) is None]
    return f"{', '.join(missing)} missing: run ci/container-deps.sh as root" if missing else ""


@pytest.fixture(scope="module")
def image():
    reason = _image_tools_reason()
    if reason:
        pytest.skip(reason)
    build = subprocess.run(["bash", str(CONTAINER / "build.sh")], cwd=REPO, capture_output=True, text=True,
                           env={**os.environ, "PY": sys.executable}, timeout=scaled(2400))
    assert build.returncode == 0, f"container/build.sh failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    name = build.stdout.strip().splitlines()[-1]
    assert name == "localhost/largebatch-course:cpu", build.stdout
    show = f". {CONTAINER / 'podman-flags.sh'}; printf '%s\\n' \"${{PODMAN_FLAGS[@]}}\""
    flags = subprocess.run(["bash", "-c", show], capture_output=True, text=True, check=True).stdout.split("\n")
    return name, [f for f in flags if f]


def _run(image, tmp_path, *command):
    name, flags = image
    return subprocess.run(["podman", "run", *flags, "--rm", "--network=none", "-e", "COURSE_PROFILE=smoke",
                           "-e", "OMP_NUM_THREADS=1", "-v", f"{tmp_path}:/out", "-v", f"{REPO / 'tests'}:/opt/tests:ro",
                           name, *command], capture_output=True, text=True, timeout=scaled(1200))


@pytest.mark.slow
def test_the_image_runs_lessons_with_no_network(image, tmp_path):
    run = _run(image, tmp_path, "python", "ci/run_notebooks.py", "--kernel", "largebatch-course", "--out", "/out/run",
               "notebooks/00_setup.ipynb", "notebooks/02_linear_scaling.ipynb")
    assert run.returncode == 0, f"{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    assert "2 notebook(s)" in run.stdout and "0 failed" in run.stdout, run.stdout[-2000:]
    assert sorted(p.name for p in (tmp_path / "run" / "notebooks").glob("*.ipynb")) == \
        ["00_setup.ipynb", "02_linear_scaling.ipynb"]


@pytest.mark.slow
def test_the_tier_tests_pass_inside_the_image(image, tmp_path):
    run = _run(image, tmp_path, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir=/opt/tests",
               "/opt/tests/test_tiers.py")
    assert run.returncode == 0, f"{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    assert re.search(r"\d+ passed", run.stdout), run.stdout[-1000:]
