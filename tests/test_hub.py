"""The course kernel under a real JupyterHub, installed as docs/instructors.md's "Installing at an HPC centre"
says, used by a learner through the browser.

The test reads that page's install block and runs its ``ipykernel install`` line as written,
with three substitutions a test needs: the course's own venv for the conda environment
``/shared/envs/largebatch-course`` (``environment.yml`` and ``pyproject.toml`` pin the same
packages, tests/test_repo.py checks; conda's channels are not reachable from CI), a temporary
prefix for ``/usr/local`` (no test writes to the system; the single-user servers get
``<prefix>/share/jupyter`` on their ``JUPYTER_PATH``, as that page says for any other prefix) and a
temporary folder for the staged data. Then a JupyterHub (tests/_lab.py: 127.0.0.1, free ports,
a shared-password authenticator with a random password, local single-user servers started with
``--allow-root`` when the suite runs as root, the Python configurable-http-proxy) serves the
learner's home holding their copy of
the repository's notebooks. In headless Chromium the learner logs in, opens lesson 00, picks
the course kernel (Kernel > Change Kernel, the notebooks name ``python3``), runs Run > Run All
Cells, and the saved notebook must have no error. The hub, its proxy, the single-user server
and the kernels are stopped afterwards, also on failure, and none may be left.

Why the Python configurable-http-proxy (PyPI) rather than npm's: it is pinned in pyproject's
dev extras and installed by the same ``pip install`` as everything else, needs neither Node.js
nor a global ``npm install -g`` (root), and implements the REST API and flags JupyterHub's
``ConfigurableHTTPProxy`` uses. Its one difference that shows here: it buffers each response
instead of streaming it, so the spawn page's progress stream arrives whole when the server is
ready (tests/_lab.py raises its 20 s backend timeout, which otherwise cut that stream on a
loaded machine and left the learner on "Your server is starting up").
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from _lab import HUB_USER, KERNEL, KERNEL_DISPLAY, REPO, Hub, browser_missing
from _timing import scaled
from test_browser import _errors, _run_all, _save, _wait

MISSING = browser_missing()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]
LESSON = "notebooks/00_setup.ipynb"
SHOT = REPO / "ci" / "executed" / "browser" / "hub__00_setup.png"


INSTRUCTORS = REPO / "docs" / "instructors.md"


def documented_kernel_install() -> list[str]:
    """The ``ipykernel install`` command of the instructors' JupyterHub section, as argv."""
    page = INSTRUCTORS.read_text()
    section = page.split("## Installing at an HPC centre (JupyterHub kernel)", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [shlex.split(c, comments=True) for c in block.replace("\\\n", " ").splitlines()]
    found = [c for c in commands if "ipykernel" in c and "install" in c]
    assert len(found) == 1, f"{INSTRUCTORS.name}'s JupyterHub section should have one `ipykernel install` line: {found}"
    return found[0]


class _UserServer:
    """The learner's single-user server, reached through the hub with the browser's login cookie."""

    def __init__(self, page, base: str, root: Path):
        self.page, self.base, self.root = page, base, root

    def api(self, path: str, method: str = "GET", body: dict | None = None):
        r = self.page.request.fetch(f"{self.base}/api/{path}", method=method, data=body)
        return r.status, (r.json() if r.body().strip() else None)


def test_documented_kernel_install_names_the_course_kernel_and_its_data():
    argv = documented_kernel_install()
    assert argv[:4] == ["/shared/envs/largebatch-course/bin/python", "-m", "ipykernel", "install"]
    assert argv[argv.index("--name") + 1] == KERNEL and argv[argv.index("--display-name") + 1] == KERNEL_DISPLAY
    assert "COURSE_MOVIELENS_DIR" in argv[argv.index("--env") + 1:argv.index("--env") + 2]


def test_lesson_00_runs_on_the_course_kernel_under_jupyterhub(browser):
    tmp = Path(tempfile.mkdtemp(prefix="course-hub-"))
    timings, hub, page = {}, None, None
    try:
        # 1. the centre installs the kernel: the documented line, with the test's substitutions
        prefix, data = tmp / "prefix", tmp / "datasets" / "movielens"
        data.mkdir(parents=True)
        subs = {"/shared/envs/largebatch-course/bin/python": sys.executable, "/usr/local": str(prefix),
                "/shared/datasets/movielens": str(data)}
        argv = [subs.get(a, a) for a in documented_kernel_install()]
        t0 = time.monotonic()
        subprocess.run(argv, check=True, capture_output=True, timeout=scaled(120))
        spec = json.loads((prefix / "share" / "jupyter" / "kernels" / KERNEL / "kernel.json").read_text())
        assert spec["argv"][0] == sys.executable and spec["display_name"] == KERNEL_DISPLAY
        assert spec.get("env", {}).get("COURSE_MOVIELENS_DIR") == str(data)
        timings["kernel install"] = time.monotonic() - t0

        # 2. the hub, the learner's copy of the course in their home
        def home_setup(home: Path):
            shutil.copytree(REPO / "notebooks", home / "notebooks")
        t0 = time.monotonic()
        hub = Hub(tmp, jupyter_path=prefix / "share" / "jupyter", home_setup=home_setup)
        timings["hub start"] = time.monotonic() - t0

        # 3. the learner logs in; the hub spawns their server and sends them to JupyterLab
        t0 = time.monotonic()
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{hub.url}/hub/login")
        # closed to anyone without the hub's password (the suite's hub once took any password)
        page.fill("input[name=username]", HUB_USER)
        page.fill("input[name=password]", "any password")
        page.click("input[type=submit], button[type=submit]")
        page.wait_for_selector("text=Invalid username or password", timeout=scaled(60) * 1000)
        assert "/hub/login" in page.url, f"a wrong password let the learner in: {page.url}"
        page.fill("input[name=username]", HUB_USER)
        page.fill("input[name=password]", hub.password)
        page.click("input[type=submit], button[type=submit]")
        base = f"{hub.url}/user/{HUB_USER}"
        try:
            page.wait_for_url(re.compile(rf"{re.escape(base)}/lab"), timeout=scaled(240) * 1000)
        except Exception as e:
            raise AssertionError(f"after logging in the learner is at {page.url}, not their JupyterLab ({e}); "
                                 f"page text: {page.inner_text('body')[:500]!r}; the hub's log:\n"
                                 f"{hub.service.log_tail()}") from None
        timings["login and spawn"] = time.monotonic() - t0

        # 4. lesson 00, on the course kernel, Run All
        t0 = time.monotonic()
        server = _UserServer(page, base, hub.home)
        page.goto(f"{base}/lab/tree/{LESSON}?reset")
        page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell",
                               timeout=scaled(120) * 1000)
        _change_kernel(page, server)
        _run_all(page, server, LESSON, timeout=scaled(900))
        nb = _save(page, server, LESSON)
        timings["lesson 00"] = time.monotonic() - t0
        problems = _errors(LESSON, nb)
        assert not problems, f"{LESSON} under JupyterHub:\n" + "\n".join(problems)
    finally:
        if page is not None:
            SHOT.parent.mkdir(parents=True, exist_ok=True)
            try:
                page.screenshot(path=str(SHOT))
            finally:
                page.close()
        t0 = time.monotonic()
        alive = hub.stop() if hub is not None else []
        timings["hub stop"] = time.monotonic() - t0
        shutil.rmtree(tmp, ignore_errors=True)
        print("\nhub test times: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    assert not alive, f"left behind by the hub: {[(p.pid, p.name()) for p in alive]}"


def _change_kernel(page, server: _UserServer) -> None:
    """Kernel > Change Kernel... > "Python (large-batch course)", as a learner does it."""
    def session():
        status, sessions = server.api("sessions")
        return next((s for s in sessions or [] if s.get("path") == LESSON), None) if status == 200 else None
    _wait(f"{LESSON}: no kernel started", session, scaled(180))
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Kernel$")).click()
    page.locator(".lm-Menu-item", has=page.locator(".lm-Menu-itemLabel",
                                                   has_text=re.compile(r"^Change Kernel"))).click()
    page.select_option(".jp-Dialog select", label=KERNEL_DISPLAY)
    page.locator(".jp-Dialog .jp-mod-accept").click()
    _wait(
        f"{LESSON}: the course kernel did not start and go idle",
        lambda: (lambda s: s and s["kernel"]["name"] == KERNEL and s["kernel"]["execution_state"] == "idle")(session()),
        scaled(180),
    )
