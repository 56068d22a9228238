"""A copy of the checkout that other Unix users can read, for the tests that run something as one of them.

A fresh clone can lie under a folder other users cannot enter: root's home is mode 0700, and so is any
``mktemp -d``. A test that runs course code or a script as another user (a fresh unprivileged user making a
virtual cluster, ``nobody`` running ci/browser-deps.sh, the learners of the multi-user hub) cannot read the
checkout there, so it gives that user a copy of the parts it needs instead: owned by root, read-only to
everyone else, in a temporary folder every user can pass through (and list nothing in).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def others_can_enter(path: Path) -> bool:
    """Whether a user who is neither the owner nor in the group can reach ``path`` (every folder on the way
    to it searchable by others)."""
    path = Path(path).resolve()
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [path, *path.parents] if p.is_dir())


def readable_copy(dest: Path, parts, src: Path = REPO) -> Path:
    """``src``'s ``parts`` (files or folders, relative paths) copied into ``dest`` (made here), every file
    readable and every folder searchable by all, writable by the owner alone; returns ``dest``."""
    dest.mkdir(parents=True)
    for part in parts:
        (dest / part).parent.mkdir(parents=True, exist_ok=True)
        if (src / part).is_dir():
            shutil.copytree(src / part, dest / part, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        else:
            shutil.copy2(src / part, dest / part)
    subprocess.run(["chmod", "-R", "a+rX,go-w", str(dest)], check=True)
    return dest


def _shared_temp_dir() -> str:
    """The temp dir (``$TMPDIR``, as the suite sets it) when other users can enter it, else the system's."""
    for candidate in (tempfile.gettempdir(), "/tmp", "/var/tmp"):
        if os.path.isdir(candidate) and others_can_enter(Path(candidate)):
            return candidate
    raise RuntimeError("no temporary folder that other users can enter (tried $TMPDIR, /tmp, /var/tmp)")


@contextmanager
def readable_checkout(parts, src: Path = REPO) -> Iterator[Path]:
    """A copy of ``src``'s ``parts`` that any user can read, for the length of the block; removed after.

    The copy is made wherever the checkout lies, so a test reads the same copy whether or not the clone's
    own folder is open to others (``others_can_enter``): its path through the other user is always tested."""
    root = Path(tempfile.mkdtemp(prefix="course-readable-", dir=_shared_temp_dir()))
    try:
        os.chmod(root, 0o711)  # others pass through to the copy and list nothing
        yield readable_copy(root / "checkout", parts, src)
    finally:
        shutil.rmtree(root, ignore_errors=True)
