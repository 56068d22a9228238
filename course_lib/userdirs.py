"""Each learner's own folders: results, caches and compile caches, never a shared install's.

On an HPC centre's JupyterHub many learners run one shared installation of the course at the same
time (docs/instructors.md, "Installing at an HPC centre"). Anything the course keeps next to that installation,
or at a predictable path in the shared temp dir, is either unwritable to learners or shared by all
of them: one learner's lesson 01 baseline, ladder rungs or Optuna journals become another's inputs,
and a planted torch.compile cache entry (a pickle) runs in another learner's kernel. So:

- the course's default folders are in the learner's home: results under ``$XDG_DATA_HOME``
  (``~/.local/share/largebatch-course/runs/interactive/results``), caches under ``$XDG_CACHE_HOME``
  (``~/.cache/largebatch-course``, :func:`course_lib.fileio.cache_dir`); an explicit
  ``$COURSE_RESULTS_DIR`` / ``$COURSE_DATA_DIR`` still wins;
- every folder the course makes is made 0700 (:func:`private_dir`), and every folder it writes
  into or reads its own state from is checked to be the learner's before use (:func:`check_own`);
- the kernel's torch.compile cache goes to a private folder (``compile_cache.use_private_compile_caches``,
  called by every lesson's ``setup()``).

Nothing here runs at import.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

APP = "largebatch-course"


class NotYoursError(PermissionError):
    """A folder or file the course would use belongs to someone else, or others may change it."""


def _who(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def check_own(path: str | os.PathLike, *, what: str = "folder", setting: str | None = None,
              allow_group_write: bool = True) -> Path:
    """``path`` (which exists) must belong to this user and must not be writable by every user.

    Raises :class:`NotYoursError` saying who owns it, what its mode is and what to do. A group-
    writable folder passes unless ``allow_group_write`` is False (a project folder the learner
    chose on purpose); the course's own folders are made 0700 by :func:`private_dir` anyway.
    """
    path = Path(path)
    st = os.stat(path)
    uid = os.getuid()
    fix = f"set {setting} to a folder of your own" if setting else "remove it or move it away"
    if st.st_uid != uid:
        raise NotYoursError(
            f"The course's {what} {path} belongs to {_who(st.st_uid)}, not to you ({_who(uid)}): another "
            f"user could read or change what the course keeps there (results, caches, compiled code). "
            f"Do not use it: {fix}.")
    loose = stat.S_IWOTH | (0 if allow_group_write else stat.S_IWGRP)
    if st.st_mode & loose:
        raise NotYoursError(
            f"The course's {what} {path} is writable by {'every user' if st.st_mode & stat.S_IWOTH else 'its group'} "
            f"(mode {stat.S_IMODE(st.st_mode):o}): anyone could replace what the course keeps there. "
            f"Run `chmod go-w {path}`, or {fix}.")
    return path


def private_dir(path: str | os.PathLike, *, what: str = "folder", setting: str | None = None,
                tighten: bool = False) -> Path:
    """Make ``path`` (and every missing parent) with mode 0700, then :func:`check_own` it.

    ``tighten``: a folder that is the course's own (one of its defaults) and already exists with a
    looser mode is set to 0700, when it is this user's (a folder from before this rule)."""
    path = Path(path).expanduser()
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:
            continue  # made at the same moment by another of this learner's processes
        except OSError as exc:
            fix = f"set {setting} to a folder you can write" if setting else "choose a folder you can write"
            raise OSError(exc.errno, f"cannot make the course's {what} {path} ({exc.strerror} at {p}): {fix}") from None
        os.chmod(p, 0o700)  # mkdir's mode passes through the umask; never looser than asked
    if tighten and path not in missing:
        st = os.stat(path)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(path, 0o700)
    return check_own(path, what=what, setting=setting, allow_group_write=not tighten)


def data_home() -> Path:
    """The course's per-user data folder: ``$XDG_DATA_HOME/largebatch-course`` (``~/.local/share/...``)."""
    xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(xdg) / APP


def default_results_dir() -> Path:
    """Where results go with no ``$COURSE_RESULTS_DIR``: the learner's own data folder, made 0700."""
    private_dir(data_home(), what="data folder", setting="XDG_DATA_HOME", tighten=True)
    return private_dir(data_home() / "runs" / "interactive" / "results", what="results folder",
                       setting="COURSE_RESULTS_DIR", tighten=True)


def is_own_checkout(root: Path) -> bool:
    """Whether ``root`` (a course checkout) is this user's own clone, not a shared installation."""
    try:
        st = os.stat(root)
    except OSError:
        return False
    return st.st_uid == os.getuid() and os.access(root, os.W_OK) and not st.st_mode & stat.S_IWOTH
