"""Real servers for the real-environment tests: JupyterLab (tests/test_browser.py) and JupyterHub
(tests/test_hub.py), and the Chromium that drives them.

Every server here listens on 127.0.0.1 only, on a port the kernel just handed out, with a random
token; it works in a private ``tempfile.mkdtemp`` folder (Jupyter's data, config and runtime
dirs, JupyterLab's settings, and a *copy* of the notebooks: the repository's notebooks are never
opened by the server). Each server runs in its own session (process group); ``Service.stop``
asks it to shut down, then kills its group and every descendant it had (kernels, the course's
worker processes, the hub's proxy and single-user servers), waits for them, and returns any
that survived so a test can assert there are none. Two pytest-xdist workers each start their
own server: nothing here is shared between them.

The browser is Debian's ``chromium`` (``ci/browser-deps.sh`` installs it; ``$COURSE_CHROMIUM``
names another executable). Playwright is pointed at it with ``executable_path``: it never
downloads a browser of its own.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from _procs import free_port
from _timing import scaled

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path(os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium"))
# The Makefile's `kernel` target: the course kernel's name and display name.
KERNEL = "largebatch-course"
KERNEL_DISPLAY = "Python (large-batch course)"
# Headless, no sandbox (CI runs as root), and none of Chromium's background connections: on a
# machine whose network is closed they are refused, many at a time, and slow every start.
CHROMIUM_ARGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def browser_missing(chromium: Path = CHROMIUM) -> str | None:
    """Why the browser tests cannot run here (a skip reason), or None when they can."""
    if not os.access(chromium, os.X_OK):
        return (f"no Chromium at {chromium}: `bash ci/browser-deps.sh` installs Debian's chromium when run as root "
                "(or `sudo apt-get install chromium`); $COURSE_CHROMIUM names another executable")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: pip install -e '.[dev]'"
    return None


def launch_browser(playwright):
    """Headless Debian Chromium through Playwright (no browser download)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
                                      timeout=scaled(60) * 1000)


def _http(url: str, method: str = "GET", data: bytes | None = None, headers: dict | None = None,
          timeout: float = 5.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Service:
    """One server process in a session of its own, its output in ``log``."""

    def __init__(self, name: str, cmd: list[str], *, env: dict, cwd: Path, log: Path):
        self.name, self.cmd, self.log = name, cmd, log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.pgid = self.proc.pid  # its own session: pgid == pid

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError as e:
            return f"(no log: {e})"

    def wait_http(self, url: str, timeout: float, ok=lambda status: status == 200) -> None:
        """Poll ``url`` until ``ok(status)``; fail with the log's tail if the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before answering {url}; "
                                   f"its log ({self.log}):\n{self.log_tail()}")
            try:
                status, _ = _http(url, timeout=scaled(2))
                if ok(status):
                    return
                last = f"HTTP {status}"
            except OSError as e:
                last = str(e)
            time.sleep(0.25)
        raise TimeoutError(f"{self.name} did not answer {url} within {timeout:.0f} s ({last}); "
                           f"its log ({self.log}):\n{self.log_tail()}")

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self, graceful=None, timeout: float | None = None) -> list[psutil.Process]:
        """End the server and everything it started; returns the processes still alive after (none, normally).

        ``graceful()`` (say, the server's shutdown API) is tried first; then SIGTERM, then SIGKILL to
        the process group and to every descendant seen before (kernels run in sessions of their own).
        """
        timeout = scaled(30) if timeout is None else timeout
        family = self.descendants()
        if self.proc.poll() is None and graceful is not None:
            try:
                graceful()
                self.proc.wait(timeout=timeout)
            except Exception:  # noqa: BLE001 - a failed graceful stop falls through to signals
                pass
        family += [p for p in self.descendants() if p not in family]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is None:
                try:
                    os.killpg(self.pgid, sig)
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(timeout=timeout if sig == signal.SIGTERM else scaled(10))
                except subprocess.TimeoutExpired:
                    continue
        try:  # anything left in the group (a child that outlived its parent)
            os.killpg(self.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(timeout=scaled(10))
        for p in family:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(family, timeout=scaled(10))
        return alive


def _settings(settings_dir: Path) -> None:
    """JupyterLab's user settings for a test: every cell in the DOM, no news or update pop-ups."""
    files = {
        # JupyterLab 4 renders only the cells in view by default; the checks read every cell.
        # A notebook opened starts the kernel its metadata names, with no "Select Kernel" dialog.
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none",
                                                                        "autoStartDefaultKernel": True},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                             "checkForUpdates": False},
    }
    for rel, value in files.items():
        path = settings_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


def jupyter_env(tmp: Path, **extra: str) -> dict:
    """The environment of a test server: private Jupyter dirs under ``tmp``, the course's variables."""
    env = dict(os.environ)
    for var in ("JUPYTER_PATH", "JUPYTER_PREFER_ENV_PATH", "COURSE_CHECKS_STRICT", "COURSE_PROGRESS"):
        env.pop(var, None)
    env.update(
        JUPYTER_DATA_DIR=str(tmp / "jupyter-data"), JUPYTER_CONFIG_DIR=str(tmp / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "jupyter-runtime"), IPYTHONDIR=str(tmp / "ipython"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp / "lab-settings"), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "lab-workspaces"),
        # the suite's CPU tier, one compute thread, the smoke profile, and live widgets: a real
        # frontend renders them although a profile is set (course_lib.widgets, $COURSE_WIDGETS)
        CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", COURSE_PROFILE="smoke", COURSE_WIDGETS="live",
        COURSE_RESULTS_DIR=str(tmp / "results"), PYTHONPATH=os.pathsep.join(
            [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.update(extra)
    _settings(tmp / "lab-settings")
    return env


def install_course_kernel(env: dict, python: str = sys.executable) -> None:
    """The Makefile's `kernel` target, into this server's private $JUPYTER_DATA_DIR."""
    subprocess.run([python, "-m", "ipykernel", "install", "--user", "--name", KERNEL, "--display-name", KERNEL_DISPLAY],
                   env=env, check=True, capture_output=True, timeout=scaled(120))


def copy_notebooks(folders: list[str], dest: Path, kernel: str = KERNEL) -> None:
    """Copies of the repository's notebook folders in ``dest``, each opened with ``kernel``."""
    for folder in folders:
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        for nb in (dest / folder).glob("*.ipynb"):
            doc = json.loads(nb.read_text())
            doc["metadata"]["kernelspec"] = {"name": kernel, "display_name": KERNEL_DISPLAY, "language": "python"}
            nb.write_text(json.dumps(doc, indent=1))


class _Server:
    """A server on 127.0.0.1:``self.port``, run as a ``Service``; stopped again if it never answers."""

    port: int
    start_seconds: float

    def _launch(self, name: str, cmd: list[str], *, env: dict, cwd: Path, log: Path, ready: str) -> None:
        t0 = time.monotonic()
        self.service = Service(name, cmd, env=env, cwd=cwd, log=log)
        try:
            self.service.wait_http(f"{self.url}{ready}", timeout=scaled(120))
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> list[psutil.Process]:
        raise NotImplementedError


class Lab(_Server):
    """A JupyterLab server on 127.0.0.1 with the course kernel, serving copies of ``folders``."""

    def __init__(self, folders=("notebooks", "exercises")):
        self.tmp = Path(tempfile.mkdtemp(prefix="course-lab-"))
        self.root = self.tmp / "work"
        self.root.mkdir()
        copy_notebooks(list(folders), self.root)
        self.env = jupyter_env(self.tmp)
        self.results = Path(self.env["COURSE_RESULTS_DIR"])  # the kernels' results folder
        install_course_kernel(self.env)
        self.port, self.token = free_port(), secrets.token_hex(16)
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.root}", "--LabApp.news_url=", "--ServerApp.terminals_enabled=False"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        self._launch("jupyter lab", cmd, env=self.env, cwd=self.root, log=self.tmp / "lab.log",
                     ready=f"/api/status?token={self.token}")

    def fresh_results(self) -> None:
        """Empty the kernels' results folder, as a learner's first lesson finds it: call it with no kernel running."""
        shutil.rmtree(self.results, ignore_errors=True)
        self.results.mkdir(mode=0o700)

    def notebook_url(self, rel: str) -> str:
        # ?reset: a fresh workspace, not the tabs an earlier page left open
        return f"{self.url}/lab/tree/{rel}?reset&token={self.token}"

    def api(self, path: str, method: str = "GET", body: dict | None = None) -> tuple[int, object]:
        data = json.dumps(body).encode() if body is not None else None
        status, raw = _http(f"{self.url}/api/{path}", method=method, data=data,
                            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
                            timeout=scaled(30))
        return status, (json.loads(raw) if raw.strip() else None)

    def stop(self) -> list[psutil.Process]:
        """Shut the server and its kernels down, remove its folder; the processes left alive (none)."""
        try:
            alive = self.service.stop(graceful=lambda: self.api("shutdown", "POST"))
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return alive


HUB_USER = "learner"


class Hub(_Server):
    """A JupyterHub on 127.0.0.1: SharedPasswordAuthenticator (user ``learner`` only, with a password
    random per hub, ``self.password``: the DummyAuthenticator took any password, so while the suite ran
    any local user could log in and get a server running as the suite's user, root in CI), local
    single-user servers (SimpleLocalProcessSpawner: the hub's own user, each user's home in the
    private folder), and the Python configurable-http-proxy, each on its own free port.

    ``jupyter_path`` is where the single-user servers look for kernels besides their own
    environment (docs/instructors.md's ``ipykernel install --prefix``: ``<prefix>/share/jupyter``).
    ``home_setup(home)`` fills the learner's home before the hub starts (their copy of the course).
    """

    def __init__(self, tmp: Path, *, jupyter_path: Path, home_setup=None):
        self.tmp = tmp
        self.home = tmp / "home" / HUB_USER
        self.home.mkdir(parents=True)
        if home_setup is not None:
            home_setup(self.home)
        self.port, hub_port, api_port = free_port(), free_port(), free_port()
        self.password = secrets.token_urlsafe(18)
        bindir = Path(sys.executable).parent
        env = jupyter_env(tmp)
        single_user_env = {k: env[k] for k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "COURSE_PROFILE",
                                               "COURSE_WIDGETS", "COURSE_RESULTS_DIR", "JUPYTERLAB_SETTINGS_DIR",
                                               "JUPYTERLAB_WORKSPACES_DIR", "PYTHONDONTWRITEBYTECODE")}
        # the suite's private temp folder (ci/test.sh): JupyterHub starts each server with a clean environment,
        # so without it the learner's kernel (its fork server's pymp-* folder) writes into the shared /tmp
        single_user_env.update({"TMPDIR": env["TMPDIR"]} if env.get("TMPDIR") else {})
        single_user_env.update(JUPYTER_PATH=str(jupyter_path), JUPYTER_CONFIG_DIR=str(tmp / "user-jupyter-config"),
                               JUPYTER_DATA_DIR=str(tmp / "user-jupyter-data"),
                               JUPYTER_RUNTIME_DIR=str(tmp / "user-jupyter-runtime"))
        config = {
            "JupyterHub": {
                "ip": "127.0.0.1",
                "port": self.port,
                "hub_ip": "127.0.0.1",
                "hub_port": hub_port,
                "authenticator_class": "shared-password",
                "spawner_class": "simple",
                "db_url": f"sqlite:///{tmp / 'hub.sqlite'}",
                "cookie_secret_file": str(tmp / "cookie_secret"),
                "pid_file": str(tmp / "hub.pid"),
            },
            "Authenticator": {"allowed_users": [HUB_USER]},
            "SharedPasswordAuthenticator": {"user_password": self.password},
            "ConfigurableHTTPProxy": {
                "api_url": f"http://127.0.0.1:{api_port}",
                "should_start": True,
                # the Python proxy buffers each response, and gives up on a
                # backend after 20 s by default: the spawn page's progress
                # stream lasts as long as the spawn, so allow that
                "command": [
                    str(bindir / "configurable-http-proxy"),
                    "--proxy-timeout",
                    str(int(scaled(600) * 1000)),
                    "--timeout",
                    str(int(scaled(600) * 1000)),
                ],
                "pid_file": str(tmp / "proxy.pid"),
            },
            "SimpleLocalProcessSpawner": {"home_dir_template": str(tmp / "home" / "{username}")},
            "Spawner": {
                "cmd": [str(bindir / "jupyterhub-singleuser")],
                "default_url": "/lab",
                "args": ["--allow-root"] if os.geteuid() == 0 else [],
                "environment": single_user_env,
                "start_timeout": int(scaled(180)),
                "http_timeout": int(scaled(120)),
            },
        }
        config_file = tmp / "jupyterhub_config.json"
        config_file.touch(mode=0o600)  # it holds the password
        config_file.write_text(json.dumps(config, indent=1))
        cmd = [str(bindir / "jupyterhub"), "-f", str(tmp / "jupyterhub_config.json")]
        self._launch("jupyterhub", cmd, env=env, cwd=tmp, log=tmp / "hub.log", ready="/hub/api/")

    def stop(self) -> list[psutil.Process]:
        """SIGTERM the hub (it stops its proxy and the single-user servers it spawned), then kill what is left."""
        return self.service.stop()
