"""Many learners on one node: two real Unix users, one shared environment, one
kernel spec, the instructor's checkout read-only to them, a real JupyterHub with LocalProcessSpawner
(each learner's server and kernels run as that learner), learners in the browser at the same time.

The centre's install, as docs/instructors.md's "Installing at an HPC centre" says, with the substitutions a test
needs (each named where it is made):

* the shared environment: a venv of Debian's ``/usr/bin/python3`` (the suite's own interpreter lives
  under /root, which learners cannot read) in place of the conda environment. The pinned dependencies
  are installed once into a cached venv (``_multiuser.dependencies_env``, by pip from this machine's
  package index: measured below) and the run's environment sees them through a ``.pth`` file; the
  course itself is installed into the run's environment with ``pip install -e <checkout>``, as
  ``environment.yml`` does;
* the instructor's checkout: a copy of this repository's course files, owned by root, read-only to
  the learners; the kernel spec's prefix and the staged data folder in the run's shared folder;
* the hub: 127.0.0.1 only, free ports, SharedPasswordAuthenticator with a random password,
  LocalProcessSpawner; the learners' temp dir a sticky world-writable folder of the test's (a
  node's /tmp), so that what they leave there is seen.

Then both learners run lesson 00 at the same time (it launches worker processes and saves its
result), then lesson 02 (smoke profile: it trains and saves its result and a ladder rung). Checked
(``_multiuser.isolation_problems``):
each learner's results are in their own folder and only there; neither can read or write the
other's results, caches, study journals or temp folders (asked as that learner); the checkout is
unchanged; when the hub stops, no process of the learners, no listening port and no temp folder is
left. ``test_the_checks_fail_when_results_fall_back_to_a_shared_folder`` feeds the same checks the
layout of the old default (results next to a shared install) and sees them fail.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest

import _multiuser as mu
from _lab import KERNEL, _settings, browser_missing, copy_notebooks
from _procs import free_port
from _readable import readable_copy
from _timing import scaled
from test_browser import PROMPTS_JS, _errors, _read, _wait
from test_hub import documented_kernel_install

MISSING = browser_missing() or mu.why_not()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]
# each round: what learner A and learner B run at the same time. Lesson 00 launches worker processes
# (two users' fork servers, rendezvous ports and run folders at once) and saves its result; lesson 02
# trains NeuMF and saves its result and a ladder rung.
ROUNDS = [("notebooks/00_setup.ipynb", "notebooks/00_setup.ipynb"),
          ("notebooks/02_linear_scaling.ipynb", "notebooks/02_linear_scaling.ipynb")]
SAVES = {"notebooks/00_setup.ipynb": ["00_setup"], "notebooks/02_linear_scaling.ipynb": ["02_linear_scaling"]}
PROXY_MAIN = "import sys; from configurable_http_proxy.cli import main; sys.exit(main())"
CHECKOUT_PARTS = ("course_lib", "notebooks", "pyproject.toml", "README.md", "environment.yml")


def _own(path: Path, u: mu.Learner) -> None:
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, u.uid, u.gid)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), u.uid, u.gid)


def _instructor_checkout(dest: Path) -> Path:
    return readable_copy(dest, CHECKOUT_PARTS)


class MultiUserHub:
    """JupyterHub (root) on 127.0.0.1 with LocalProcessSpawner and a random shared password, its
    programs from the shared environment's dependencies."""

    def __init__(self, tmp: Path, learners: list[mu.Learner], *, deps: Path, jupyter_path: Path, user_tmp: Path):
        from _lab import Service

        self.password = secrets.token_urlsafe(18)
        self.port, hub_port, self.api_port = free_port(), free_port(), free_port()
        self.ports = (self.port, hub_port, self.api_port)
        state = tmp / "hub"
        state.mkdir(mode=0o700)
        config = {
            "JupyterHub": {"ip": "127.0.0.1", "port": self.port, "hub_ip": "127.0.0.1", "hub_port": hub_port,
                           "authenticator_class": "shared-password", "spawner_class": "localprocess",
                           "db_url": f"sqlite:///{state / 'hub.sqlite'}",
                           "cookie_secret_file": str(state / "cookie_secret"),
                           "pid_file": str(state / "hub.pid")},
            "Authenticator": {"allowed_users": [u.name for u in learners]},
            "SharedPasswordAuthenticator": {"user_password": self.password},
            "ConfigurableHTTPProxy": {"api_url": f"http://127.0.0.1:{self.api_port}", "should_start": True,
                                      # by module, not by the env's scripts: the cached env can be moved
                                      "command": [str(deps / "bin" / "python"), "-c", PROXY_MAIN, "--proxy-timeout",
                                                  str(int(scaled(600) * 1000)), "--timeout",
                                                  str(int(scaled(600) * 1000))],
                                      "pid_file": str(state / "proxy.pid")},
            "Spawner": {"cmd": [str(deps / "bin" / "python"), "-m", "jupyterhub.singleuser"], "default_url": "/lab",
                        # the node's settings for every learner; nothing of the suite's environment
                        "env_keep": ["LANG"],
                        "environment": {"PATH": "/usr/local/bin:/usr/bin:/bin", "JUPYTER_PATH": str(jupyter_path),
                                        "TMPDIR": str(user_tmp), "COURSE_PROFILE": "smoke", "CUDA_VISIBLE_DEVICES": "",
                                        "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"},
                        "start_timeout": int(scaled(240)), "http_timeout": int(scaled(180))},
        }
        cfg = state / "jupyterhub_config.json"
        cfg.touch(mode=0o600)
        cfg.write_text(json.dumps(config, indent=1))
        env = {"PATH": f"{deps / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(state), "LANG": "C.UTF-8"}
        self.service = Service("jupyterhub (multi-user)",
                               [str(deps / "bin" / "python"), "-m", "jupyterhub", "-f", str(cfg)],
                               env=env, cwd=state, log=state / "hub.log")
        try:
            self.service.wait_http(f"{self.url}/hub/api/", timeout=scaled(180))
        except BaseException:
            self.service.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class _Learner:
    """One learner's browser context, logged in, on their own JupyterLab."""

    def __init__(self, browser, hub: MultiUserHub, u: mu.Learner):
        self.u, self.hub = u, hub
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.base = f"{hub.url}/user/{u.name}"

    def log_in(self) -> None:
        page = self.page
        page.goto(f"{self.hub.url}/hub/login")
        page.fill("input[name=username]", self.u.name)
        page.fill("input[name=password]", self.hub.password)
        page.click("input[type=submit], button[type=submit]")

    def wait_lab(self) -> None:
        try:
            self.page.wait_for_url(re.compile(rf"{re.escape(self.base)}/lab"), timeout=scaled(300) * 1000)
        except Exception as e:
            raise AssertionError(f"{self.u.name} is at {self.page.url}, not their JupyterLab ({e}); the hub's log:\n"
                                 f"{self.hub.service.log_tail()}") from None

    def api(self, path: str, method: str = "GET"):
        r = self.page.request.fetch(f"{self.base}/api/{path}", method=method)
        return r.status, (r.json() if r.body().strip() else None)

    def session(self, rel: str):
        status, sessions = self.api("sessions")
        return next((s for s in sessions or [] if s.get("path") == rel), None) if status == 200 else None

    def start(self, rel: str) -> None:
        """Open ``rel`` (the course kernel starts: the learner's copy names it) and Run All Cells."""
        page = self.page
        page.goto(f"{self.base}/lab/tree/{rel}?reset")
        page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell",
                               timeout=scaled(120) * 1000)
        _wait(f"{self.u.name} {rel}: the course kernel did not start",
              lambda: (lambda s: s and s["kernel"]["name"] == KERNEL and s["kernel"]["execution_state"] == "idle")(
                  self.session(rel)), scaled(240))
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-item", has=page.locator(".lm-Menu-itemLabel",
                                                       has_text=re.compile(r"^Run All Cells$"))).click()
        _wait(f"{rel}: Run All Cells started nothing",
              lambda: (lambda s: s["busy"] or s["done"])(page.evaluate(PROMPTS_JS)), scaled(60))

    def finished(self, rel: str) -> bool:
        state = self.page.evaluate(PROMPTS_JS)
        s = self.session(rel)
        return state["busy"] == 0 and s is not None and s["kernel"]["execution_state"] == "idle"

    def save(self, rel: str) -> dict:
        path = self.u.home / rel
        before = path.stat().st_mtime_ns
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^File$")).click()
        self.page.locator(".lm-Menu-item[data-command='docmanager:save']").click()
        _wait(f"{rel}: File > Save did not write the notebook", lambda: path.stat().st_mtime_ns != before, scaled(60))
        # the new mtime comes with the server's first write: an empty file was read under load (test_browser's
        # _save waits the same way for a notebook that parses)
        return _wait(f"{rel}: the saved notebook cannot be read", lambda: _read(path), scaled(30))


def _journals_as(learners: list[mu.Learner], env_python: Path, user_tmp: Path) -> dict[str, str]:
    """Lesson 12's default study layout, opened by each learner at once (as that learner): each
    journal goes under their own results folder. {learner: study folder}."""
    code = ("import functools; from course_lib import journal, optuna_search as search; "
            "from course_lib.results import results_dir; "
            "d = journal.new_study_dir(results_dir() / '12_studies'); "
            "s = search.open_study('probe', d / 'probe.log', strategy='random', seed=0, max_resource=3); "
            "search.run_search(s, functools.partial(search.quadratic_objective, steps=3), budget=3); print(d)")
    procs = {u.name: subprocess.Popen([str(env_python), "-c", code], user=u.uid, group=u.gid, extra_groups=[],
                                      cwd=u.home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env={"PATH": "/usr/bin:/bin", "HOME": str(u.home), "TMPDIR": str(user_tmp),
                                           "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"})
             for u in learners}
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=scaled(180))
        assert proc.returncode == 0, stderr[-3000:]
        out[name] = stdout.strip().splitlines()[-1]
    return out


def _listening(ports) -> list[str]:
    out = []
    for c in psutil.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports:
            out.append(f"{c.laddr.ip}:{c.laddr.port} pid {c.pid}")
    return out


def test_two_learners_at_once_each_keep_their_own_results_caches_and_studies(browser):
    timings, learners, hub, pages, left = {}, [], None, [], []
    tmp = Path(tempfile.mkdtemp(prefix="course-multiuser-"))
    try:
        os.chmod(tmp, 0o711)  # the learners pass through to their homes and the shared folder, list nothing
        shared, homes, user_tmp = tmp / "shared", tmp / "home", tmp / "tmp"
        shared.mkdir(mode=0o755)
        homes.mkdir(mode=0o711)
        user_tmp.mkdir()
        os.chmod(user_tmp, 0o1777)  # the node's /tmp

        # 1. the shared environment: cached dependencies, the course installed from the instructor's checkout
        t0 = time.monotonic()
        deps, built_s = mu.dependencies_env()
        timings["dependencies (cached)" if built_s == 0 else "dependencies (built now)"] = time.monotonic() - t0
        t0 = time.monotonic()
        checkout = _instructor_checkout(shared / "checkout")
        env_root = mu.shared_course_env(shared / "envs" / "largebatch-course", checkout, deps)
        timings["course env"] = time.monotonic() - t0

        # 2. one kernel spec, the documented line with the test's prefix, environment and data folder
        prefix, data = shared / "prefix", shared / "datasets" / "movielens"
        data.mkdir(parents=True)
        subs = {"/shared/envs/largebatch-course/bin/python": str(env_root / "bin" / "python"),
                "/usr/local": str(prefix), "/shared/datasets/movielens": str(data)}
        argv = [subs.get(a, a) for a in documented_kernel_install()]
        subprocess.run(argv, check=True, capture_output=True, timeout=scaled(120))
        subprocess.run(["chmod", "-R", "a+rX,go-w", str(shared)], check=True)
        checkout_before = mu.tree_digest(checkout)

        # 3. two learners, each with their own copy of the notebooks
        learners = mu.make_learners(2, homes)
        for u in learners:
            copy_notebooks(["notebooks"], u.home, kernel=KERNEL)
            _settings(u.home / ".jupyter" / "lab" / "user-settings")
            _own(u.home, u)

        t0 = time.monotonic()
        hub = MultiUserHub(tmp, learners, deps=deps, jupyter_path=prefix / "share" / "jupyter", user_tmp=user_tmp)
        timings["hub start"] = time.monotonic() - t0

        # 4. both log in (their servers spawn at once), then run lessons at the same time
        t0 = time.monotonic()
        pages = [_Learner(browser, hub, u) for u in learners]
        for p in pages:
            p.log_in()
        for p in pages:
            p.wait_lab()
        timings["logins and spawns"] = time.monotonic() - t0
        for n, lessons in enumerate(ROUNDS):
            t0 = time.monotonic()
            for p, rel in zip(pages, lessons):
                p.start(rel)
            def all_done():
                return all(p.finished(rel) for p, rel in zip(pages, lessons))
            _wait(f"round {n + 1}: the lessons did not finish", all_done, scaled(900), every=0.5)
            time.sleep(0.5)  # idle between two cells is possible: ask again
            _wait(f"round {n + 1}: the lessons did not finish", all_done, scaled(900), every=0.5)
            for p, rel in zip(pages, lessons):
                problems = _errors(rel, p.save(rel))
                assert not problems, f"{p.u.name}, {rel}:\n" + "\n".join(problems)
            timings[f"round {n + 1} ({', '.join(Path(r).stem[:2] for r in lessons)})"] = time.monotonic() - t0

        # 5. lesson 12's journals, as each learner (its default layout, under their results)
        t0 = time.monotonic()
        studies = _journals_as(learners, env_root / "bin" / "python", user_tmp)
        timings["journals"] = time.monotonic() - t0
        for u in learners:
            assert studies[u.name].startswith(str(u.results_dir() / "12_studies")), studies

        # 6. the isolation checks, while the kernels (and their temp folders) are alive
        t0 = time.monotonic()
        saved = {u.name: [s for lessons in ROUNDS for s in SAVES[lessons[i]]] for i, u in enumerate(learners)}
        for u in learners:  # the checks below have something of each kind to probe
            probed = mu.course_paths(u, user_tmp)
            assert any(p.parent == user_tmp for p in probed), f"{u.name} has no folder in the temp dir while running"
            assert any(p.suffix == ".log" for p in probed) and any(p.name == "results" for p in probed), probed
        problems = mu.isolation_problems(learners, lessons=saved, checkout=checkout, checkout_before=checkout_before,
                                         tmp=user_tmp, searched=[homes, checkout, user_tmp])
        timings["isolation checks"] = time.monotonic() - t0
        assert not problems, "\n".join(problems)
        inductor = [u.cache_dir() / "torchinductor" for u in learners]
        assert all(d.is_dir() and d.stat().st_uid == u.uid and d.stat().st_mode & 0o777 == 0o700
                   for d, u in zip(inductor, learners)), "each kernel's torch.compile cache, private"
    finally:
        for p in pages:
            try:
                p.context.close()
            except Exception:  # noqa: BLE001
                pass
        t0 = time.monotonic()
        alive = hub.service.stop() if hub is not None else []
        timings["hub stop"] = time.monotonic() - t0
        # 7. nothing left: no learner process, no port, nothing in the learners' temp dir
        time.sleep(0.5)
        still = [f"{p.pid} {p.name()}" for p in mu.processes_of(learners)]
        ports = _listening(hub.ports) if hub is not None else []
        leftovers = sorted(os.listdir(tmp / "tmp")) if (tmp / "tmp").exists() else []
        left = mu.remove_learners(learners)
        shutil.rmtree(tmp, ignore_errors=True)
        print("\nmulti-user hub test times: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    assert not alive and not still and not left, f"left behind: {[(p.pid, p.name()) for p in alive]}, {still}, {left}"
    assert not ports, f"still listening: {ports}"
    assert not leftovers, f"left in the learners' temp dir: {leftovers}"


def test_the_checks_fail_when_results_fall_back_to_a_shared_folder():
    """The old default, results next to a writable shared install: every check above must see it."""
    tmp = Path(tempfile.mkdtemp(prefix="course-multiuser-"))
    learners = []
    try:
        os.chmod(tmp, 0o711)
        homes, user_tmp = tmp / "home", tmp / "tmp"
        homes.mkdir(mode=0o711)
        user_tmp.mkdir()
        os.chmod(user_tmp, 0o1777)
        checkout = _instructor_checkout(tmp / "checkout")
        checkout_before = mu.tree_digest(checkout)
        learners = mu.make_learners(2, homes)
        shared = checkout / "runs" / "interactive" / "results"  # results_dir()'s old fallback
        shared.mkdir(parents=True)
        subprocess.run(["chmod", "-R", "a+rwx", str(checkout / "runs")], check=True)
        for u in learners:  # each learner's lesson 00 saves there (0644, as the old code wrote)
            name = "00_setup.json" if u is learners[0] else "00_setup_b.json"
            probe = f"open({str(shared / name)!r}, 'w').write('{{}}')"
            subprocess.run([mu.SYSTEM_PYTHON, "-c", probe], user=u.uid, group=u.gid, extra_groups=[], check=True,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(u.home)}, cwd="/")
        problems = mu.isolation_problems(learners, lessons={u.name: ["00_setup"] for u in learners}, checkout=checkout,
                                         checkout_before=checkout_before, tmp=user_tmp, searched=[checkout])
        said = "\n".join(problems)
        a, b = learners
        assert f"{b.name}: 00_setup.json is not in their own results folder" in said
        assert f"{a.name}: a result outside their own results folder: {shared / '00_setup.json'}" in said
        assert f"{b.name} can read {a.name}'s" in said and f"{b.name} can write {a.name}'s" in said
        assert f"the instructor's checkout {checkout} changed" in said
    finally:
        mu.remove_learners(learners)
        shutil.rmtree(tmp, ignore_errors=True)
