"""Real Unix learners for tests/test_hub_multiuser.py: users made and removed by the test, the shared
environment every learner can run, and the isolation checks between learners.

The checks are a function of what is on disk (:func:`isolation_problems`), and what one learner can
do to another's files is asked of the kernel, not read from mode bits: a probe runs *as* the other
learner (``subprocess`` with ``user=``/``group=``, root only) and tries to list, read and write each
path. So the same checks can be fed a layout where the course fell back to one shared results
folder (the test of the checks themselves) and must fail there.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from _timing import scaled

REPO = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's: every user can run it (the default python3 is under /root)
APP = "largebatch-course"


def why_not() -> str | None:
    """Why real learners cannot be made here (a skip reason), or None."""
    if os.geteuid() != 0:
        return "making Unix users for the learners needs root (useradd); run the suite as root, as CI does"
    for tool in ("useradd", "userdel"):
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
            return f"no {tool} on this machine (Debian: the passwd package)"
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"no {SYSTEM_PYTHON}: the shared environment needs an interpreter every learner can run"
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import venv, ensurepip"], capture_output=True)
    if probe.returncode != 0:
        return f"{SYSTEM_PYTHON} has no venv/ensurepip (Debian: apt-get install python3-venv)"
    return None


@dataclass
class Learner:
    name: str
    uid: int
    gid: int
    home: Path

    def results_dir(self) -> Path:
        return self.home / ".local" / "share" / APP / "runs" / "interactive" / "results"

    def cache_dir(self) -> Path:
        return self.home / ".cache" / APP


def _sbin(tool: str) -> str:
    return shutil.which(tool) or f"/usr/sbin/{tool}"


def make_learners(n: int, homes: Path) -> list[Learner]:
    """``n`` Unix users with random names (``cl<hex>``), each with a private home under ``homes``.
    Remove them with :func:`remove_learners`, also on failure."""
    made = []
    try:
        for _ in range(n):
            name = f"cl{secrets.token_hex(4)}"
            home = homes / name
            subprocess.run([_sbin("useradd"), "--create-home", "--home-dir", str(home), "--shell", "/bin/sh",
                            "--user-group", "--comment", "course test learner (tests/test_hub_multiuser.py)", name],
                           check=True, capture_output=True, timeout=scaled(60))
            pw = pwd.getpwnam(name)
            os.chmod(home, 0o700)
            made.append(Learner(name, pw.pw_uid, pw.pw_gid, home))
    except BaseException:
        remove_learners(made)
        raise
    return made


def processes_of(learners: list[Learner]) -> list[psutil.Process]:
    uids = {u.uid for u in learners}
    out = []
    for p in psutil.process_iter(["uids"]):
        try:
            if p.info["uids"] and p.info["uids"].real in uids:
                out.append(p)
        except psutil.Error:
            pass
    return out


def remove_learners(learners: list[Learner]) -> list[str]:
    """Kill what still runs as the learners (by pid: processes of users this test made), delete the
    users and their groups and homes. Returns what was still running (``"pid name user"``)."""
    left = []
    procs = processes_of(learners)
    for p in procs:
        try:
            left.append(f"{p.pid} {p.name()} {p.username()}")
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=scaled(10))
    for u in learners:
        subprocess.run([_sbin("userdel"), u.name], capture_output=True, timeout=scaled(60))
        subprocess.run([_sbin("groupdel"), u.name], capture_output=True, timeout=scaled(60))
        shutil.rmtree(u.home, ignore_errors=True)
    return left


# --------------------------------------------------------------------------- the shared environment

# The cached dependencies: root's, outside /tmp and every home, readable by all. A folder per set of
# pins and interpreter; built in place under a lock, its ".complete" marker written last (a killed build
# is found incomplete and built again).
CACHE_ROOT = Path(os.environ.get("COURSE_TEST_SHARED_ENV_CACHE", "/var/cache/largebatch-course-tests"))


def _requirements() -> list[str]:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    hub = ("jupyterhub", "configurable-http-proxy")
    dev = [r for r in project["optional-dependencies"]["dev"] if r.split("==")[0] in hub]
    return list(project["dependencies"]) + dev + ["setuptools>=68", "wheel"]


def dependencies_env() -> tuple[Path, float]:
    """The course's pinned dependencies (and JupyterHub's) in a venv of Debian's Python, built once
    per set of pins and cached; (its folder, seconds spent building it now: 0 when cached).

    Built from the suite's own venv when it can be (:func:`_clone_suite_packages`, seconds), else by
    pip from the package index (``COURSE_TEST_SHARED_ENV_PIP=1`` asks for that: 533 s measured)."""
    reqs = _requirements()
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version)"], capture_output=True,
                             text=True, check=True).stdout.strip()
    key = hashlib.sha256(json.dumps([version, reqs]).encode()).hexdigest()[:16]
    env = CACHE_ROOT / f"deps-{key}"
    if (env / ".complete").exists():
        return env, 0.0
    import fcntl

    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    st = CACHE_ROOT.lstat()
    if st.st_uid != 0 or st.st_mode & 0o022 or not CACHE_ROOT.is_dir() or CACHE_ROOT.is_symlink():
        raise RuntimeError(f"{CACHE_ROOT} (the shared environment's cache) must be a folder of root's that nobody "
                           f"else can write; it is mode {st.st_mode & 0o7777:o}, uid {st.st_uid}. Remove it.")
    with open(CACHE_ROOT / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; the others then find it complete
        if (env / ".complete").exists():
            return env, 0.0
        t0 = time.monotonic()
        # in place; the marker last: a killed build is found incomplete and built again
        shutil.rmtree(env, ignore_errors=True)
        how = _clone_suite_packages(env) if os.environ.get("COURSE_TEST_SHARED_ENV_PIP") != "1" else None
        if how is None:
            subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(env)], check=True, capture_output=True,
                           timeout=scaled(300))
            pip = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", *reqs],
                                 capture_output=True, text=True, timeout=scaled(1800))
            if pip.returncode != 0:
                shutil.rmtree(env, ignore_errors=True)
                raise RuntimeError("pip could not build the shared environment: "
                                   f"{pip.stdout[-2000:]}{pip.stderr[-3000:]}")
            how = "pip install from the package index"
        subprocess.run(["chmod", "-R", "a+rX,go-w", str(env)], check=True)
        (env / ".complete").write_text(json.dumps({"requirements": reqs, "python": version, "built_by": how}))
    return env, time.monotonic() - t0


def _clone_suite_packages(env: Path) -> str | None:
    """The dependencies copied from the suite's own venv (hard links where the file system allows),
    in a venv of Debian's Python: seconds, where pip from the package index takes minutes on a busy
    2-core machine. Only when the suite runs in a
    venv of the same Python minor version (compiled wheels are per minor version) that holds the
    pinned torch; else None (then pip builds it). The course itself is left out (the run installs it
    with ``pip install -e``), and so are the suite's editable-install hooks."""
    import sysconfig

    if sys.prefix == sys.base_prefix:
        return None
    minor = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                           text=True).stdout.strip()
    if minor != str(sys.version_info[:2]):
        return None
    src = Path(sysconfig.get_paths()["purelib"])
    pinned = next((r for r in _requirements() if r.startswith("torch==")), "")
    if not list(src.glob(f"torch-{pinned.split('==')[-1]}*.dist-info")):
        return None
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(env)], check=True, capture_output=True,
                   timeout=scaled(120))
    dest = next((env / "lib").glob("python3*/site-packages"))
    skip = ("__editable__", "largebatch_course", "a1_coverage.pth", "__pycache__")
    entries = [p for p in src.iterdir() if not p.name.startswith(skip)]
    # and the packages' data files beside the interpreter: JupyterHub's templates and static files,
    # JupyterLab's extensions, the servers' extension config (<prefix>/share, <prefix>/etc)
    data = [(Path(sys.prefix) / d, env) for d in ("share", "etc") if (Path(sys.prefix) / d).is_dir()]
    ways = ((["-al"], "hard links to the suite venv's packages"), (["-a"], "a copy of the suite venv's packages"))
    for flags, how in ways:
        done = subprocess.run(["cp", *flags, *map(str, entries), str(dest)], capture_output=True, timeout=scaled(900))
        for folder, into in data:
            if done.returncode == 0:
                done = subprocess.run(["cp", *flags, str(folder), str(into)], capture_output=True, timeout=scaled(900))
        if done.returncode == 0:
            return how
        for p in [*dest.iterdir(), *(env / f.name for f, _ in data)]:  # a partial hard-link copy: again, copying
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return None


def shared_course_env(root: Path, checkout: Path, deps: Path) -> Path:
    """docs/instructors.md's shared environment for this run: a venv of Debian's Python at ``root`` that sees
    the cached dependencies (a .pth naming their site-packages) and holds the course installed with
    ``pip install -e <checkout>`` (no dependencies: they are the cached ones)."""
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True,
                   timeout=scaled(120))
    site = next((root / "lib").glob("python3*/site-packages"))
    deps_site = next((deps / "lib").glob("python3*/site-packages"))
    (site / "00-course-test-dependencies.pth").write_text(f"{deps_site}\n")
    pip = subprocess.run([str(deps / "bin" / "python"), "-m", "pip", "--python", str(root / "bin" / "python"),
                          "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "-e", str(checkout)],
                         capture_output=True, text=True, timeout=scaled(600))
    assert pip.returncode == 0, f"pip install -e {checkout} into {root}: {pip.stdout[-2000:]}{pip.stderr[-2000:]}"
    subprocess.run(["chmod", "-R", "a+rX,go-w", str(root)], check=True)
    return root


# --------------------------------------------------------------------------- the isolation checks


PROBE = r"""
import json, os, sys
out = {}
for path in json.loads(sys.argv[1]):
    r = {}
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").read(1)
        r["read"] = True
    except OSError:
        r["read"] = False
    try:
        if os.path.isdir(path):
            p = os.path.join(path, ".probe-%d" % os.getpid())
            open(p, "w").close()
            os.unlink(p)
        else:
            open(path, "ab").close()
        r["write"] = True
    except OSError:
        r["write"] = False
    out[path] = r
print(json.dumps(out))
"""


def access_as(learner: Learner, paths: list[Path]) -> dict[str, dict]:
    """What ``learner`` can do to each of ``paths``: ``{path: {"read": bool, "write": bool}}``, asked
    of the kernel by a process running as that learner."""
    if not paths:
        return {}
    proc = subprocess.run([SYSTEM_PYTHON, "-c", PROBE, json.dumps([str(p) for p in paths])], user=learner.uid,
                          group=learner.gid, extra_groups=[], env={"PATH": "/usr/bin:/bin", "HOME": str(learner.home)},
                          cwd="/", capture_output=True, text=True, timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def tree_digest(root: Path) -> dict[str, str]:
    """Every path under ``root`` with its mode, owner and (for files) a hash of its bytes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            h = hashlib.sha256(p.read_bytes()).hexdigest()[:16] if p.is_file() and not p.is_symlink() else ""
            out[str(p.relative_to(root))] = f"{st.st_mode:o} {st.st_uid} {h}"
    return out


def course_paths(learner: Learner, tmp: Path) -> list[Path]:
    """What the course made for ``learner``: their results folder and every file in it, their
    cache folder, their study folders and journals, their folders in the shared temp dir."""
    found = []
    for top in (learner.home / ".local" / "share" / APP, learner.cache_dir()):
        if top.exists():
            found.append(top)
            for dirpath, dirnames, filenames in os.walk(top):
                d = Path(dirpath)
                if d.name in ("results", "torchinductor", "12_studies") or d.parent.name == "12_studies":
                    found.append(d)
                found += [d / f for f in filenames if f.endswith((".json", ".log"))]
    for entry in sorted(tmp.iterdir()) if tmp.exists() else []:
        if entry.lstat().st_uid == learner.uid:
            found.append(entry)
    return found


def results_files(root: Path) -> list[Path]:
    """Every ``<lesson>.json`` result anywhere under ``root`` (where results could have gone)."""
    return [p for p in root.rglob("*.json") if p.name.startswith(("00_", "01_", "02_", "ladder_")) and
            "ipynb_checkpoints" not in str(p)] if root.exists() else []


def isolation_problems(learners: list[Learner], *, lessons: dict[str, list[str]], checkout: Path,
                       checkout_before: dict, tmp: Path, searched: list[Path]) -> list[str]:
    """Issue 32's isolation checks, each problem a sentence (none: isolated).

    ``lessons``: the results each learner's lessons saved (``{name: ["00_setup", ...]}``);
    ``searched``: the folders results could have gone to (the homes, the checkout, the shared temp dir).
    """
    problems = []
    for u in learners:
        own = u.results_dir()
        for lesson in lessons[u.name]:
            if not (own / f"{lesson}.json").is_file():
                problems.append(f"{u.name}: {lesson}.json is not in their own results folder {own}")
        for root in searched:
            for p in results_files(root):
                if p.parent != own and p.stat().st_uid == u.uid:
                    problems.append(f"{u.name}: a result outside their own results folder: {p}")
        if own.exists():
            mode = own.stat().st_mode & 0o777
            if own.stat().st_uid != u.uid or mode & 0o077:
                problems.append(f"{u.name}: their results folder {own} is mode {mode:o}, owner uid {own.stat().st_uid}")
    for u in learners:
        theirs = course_paths(u, tmp)
        for root in searched:  # results wherever they went, and the folders holding them
            for p in results_files(root):
                if p.stat().st_uid == u.uid:
                    theirs += [p, p.parent] if p.parent not in theirs else [p]
        for other in learners:
            if other is u:
                continue
            for path, can in access_as(other, theirs).items():
                for what in ("read", "write"):
                    if can[what]:
                        problems.append(f"{other.name} can {what} {u.name}'s {path}")
    after = tree_digest(checkout)
    changed = sorted(set(after.items()) ^ set(checkout_before.items()))
    if changed:
        problems.append(f"the instructor's checkout {checkout} changed: {sorted({k for k, _ in changed})[:10]}")
    return problems
