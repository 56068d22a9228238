"""Files that are either complete or absent: atomic writes, verified downloads, the cache dir,
and private temporary directories.

Everything the course writes (results, checkpoints, processed datasets, tokenizers,
downloads) goes through ``atomic_path``: write to a temporary name in the destination's
directory, then ``os.replace`` onto the final name. An interrupted run, a full disk or a
failed checksum leaves the old file (or nothing), never half of a new one.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import re
import shutil
import socket
import stat
import tempfile
import urllib.request
from pathlib import Path
from typing import Callable, Iterator


def cache_dir() -> Path:
    """The per-user course cache: ``$COURSE_DATA_DIR``, else ``$XDG_CACHE_HOME/largebatch-course``
    (``~/.cache/largebatch-course``). Never a shared, world-writable path such as /tmp."""
    env = os.environ.get("COURSE_DATA_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "largebatch-course"


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike, suffix: str = ".part") -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; when the block succeeds it becomes ``dest``.

    If the block raises, the temporary file is removed and ``dest`` is untouched.
    """
    from .userdirs import private_dir

    dest = Path(dest)
    private_dir(dest.parent)  # made 0700 where missing; refused when it is another user's
    remove_stale_partials(dest.parent)
    # the owner's host and pid in the name: a later process can tell when the writer was killed
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.{owner_tag()}.", suffix=suffix, dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, dest)
    finally:
        tmp_path.unlink(missing_ok=True)


def atomic_write_bytes(dest: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)
    return Path(dest)


def atomic_write_text(dest: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(dest, text.encode("utf-8"))


def atomic_torch_save(obj, dest: str | os.PathLike) -> Path:
    import torch

    with atomic_path(dest) as tmp:
        torch.save(obj, tmp)
    return Path(dest)


def file_digest(path: str | os.PathLike, algorithm: str = "md5") -> str:
    """Hex digest of a file, read in 1 MiB blocks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def download(url: str, dest: str | os.PathLike, *, verify: Callable[[Path], None], timeout: float = 30.0,
             desc: str | None = None) -> Path:
    """Stream ``url`` to ``dest`` with a progress bar; ``verify(tmp)`` must pass before the rename.

    ``verify`` raises (e.g. on a checksum mismatch) to reject the file; then nothing is left
    behind. Network errors propagate as ``urllib.error.URLError``/``OSError``.
    """
    from tqdm.auto import tqdm

    dest = Path(dest)
    with atomic_path(dest) as tmp:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(tmp, "wb") as out:
            total = int(resp.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=desc or f"downloading {dest.name}") as bar:
                while block := resp.read(1 << 20):
                    out.write(block)
                    bar.update(len(block))
        verify(tmp)
    return dest


# --------------------------------------------------------------------------- private temp dirs


def _host_tag(hostname: str | None = None) -> str:
    """This host in owner tags: its first 16 letters and digits (readable) plus a hash of the full name.

    The name alone cut to 16 characters made ``cn-gpu-a100-rack01-01`` and ``...-02`` one host, and
    each node's stale-file cleanup removed the other's live ``.part`` files on a shared file system
    Letters and digits only, as the tag patterns below expect."""
    name = socket.gethostname() if hostname is None else hostname
    readable = re.sub(r"[^A-Za-z0-9]", "", name)[:16] or "host"
    return readable + hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:10]


def owner_tag() -> str:
    """``<host>-<pid>``: put in the names of temporary files and directories so that a later
    process can tell whether their owner is gone (see :func:`owner_is_gone`)."""
    return f"{_host_tag()}-{os.getpid()}"


def owner_is_gone(host: str, pid: int, last_modified: float) -> bool:
    """True when the process that made a temporary file (named with :func:`owner_tag`) is dead.

    Only files of this host are judged (a shared file system may hold another node's files).
    A pid that is alive again but started after the file was last written belongs to
    another process: the owner is gone. Conservative otherwise: when unsure, keep the file.
    """
    if host != _host_tag() or pid == os.getpid():
        return False
    try:
        import psutil

        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return True
        return proc.create_time() > last_modified + 1.0
    except ImportError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
    except Exception as exc:  # psutil.NoSuchProcess, AccessDenied, ...
        return type(exc).__name__ == "NoSuchProcess"


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_TAGGED_DIR = re.compile(r"^(?P<host>[A-Za-z0-9]+)-(?P<pid>[0-9]+)-[A-Za-z0-9_]+$")  # after the prefix


_UNTAGGED_DIR = re.compile(r"^[a-z0-9_]{8}$")  # mkdtemp's suffix, in names from before owner tags
UNTAGGED_DIR_MAX_AGE_S = 24 * 3600.0


def _newest_mtime(path: Path, st: os.stat_result) -> float:
    newest = st.st_mtime
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            with contextlib.suppress(OSError):
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    return newest


def remove_stale_temp_dirs(prefix: str, parent: str | os.PathLike | None = None) -> list[str]:
    """Remove ``<parent>/<prefix><host>-<pid>-*`` directories of this user whose process is gone
    (a SIGKILLed kernel or launcher never ran its own cleanup). Directories from before names
    carried their owner (``<prefix><8 characters>``) are removed once nothing in them changed
    for a day. Returns what was removed."""
    import time

    parent = Path(parent or tempfile.gettempdir())
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(prefix):
            continue
        m = _TAGGED_DIR.match(name[len(prefix):])
        untagged = m is None and _UNTAGGED_DIR.match(name[len(prefix):]) is not None
        if m is None and not untagged:
            continue
        path = parent / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue  # never follow a link, never touch another user's files
        if untagged:
            stale = time.time() - _newest_mtime(path, st) > UNTAGGED_DIR_MAX_AGE_S
        else:
            stale = owner_is_gone(m.group("host"), int(m.group("pid")), st.st_mtime)
        if stale:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


_TAGGED_PARTIAL = re.compile(r"^\..+\.(?P<host>[A-Za-z0-9]+)-(?P<pid>[0-9]+)\.[A-Za-z0-9_]+\.(part|tmp)$")
_UNTAGGED_PARTIAL = re.compile(r"^\..+\.[a-z0-9_]{8}\.part$")  # atomic_path's names before owner tags
UNTAGGED_PARTIAL_MAX_AGE_S = 3600.0


def remove_stale_partials(directory: str | os.PathLike, *, recursive: bool = False) -> list[str]:
    """Remove the temporary files of :func:`atomic_path` in ``directory`` whose writer is gone.

    A writer that was SIGKILLed (a dead kernel, a killed job) never runs its ``finally``, and
    its ``.part`` file (a 10 MB download, a processed dataset) would stay forever. Files from
    before names carried their owner are removed once they are an hour old.
    """
    import time

    removed = []
    walker = os.walk(directory) if recursive else [(str(directory), [], None)]
    for root, _dirs, files in walker:
        if files is None:
            try:
                files = os.listdir(root)
            except OSError:
                return removed
        for name in files:
            if not name.startswith(".") or not name.endswith((".part", ".tmp")):
                continue
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                continue
            m = _TAGGED_PARTIAL.match(name)
            if m is not None:
                stale = owner_is_gone(m.group("host"), int(m.group("pid")), st.st_mtime)
            else:
                stale = bool(_UNTAGGED_PARTIAL.match(name)) and time.time() - st.st_mtime > UNTAGGED_PARTIAL_MAX_AGE_S
            if stale:
                with contextlib.suppress(OSError):
                    os.unlink(path)
                    removed.append(path)
    return removed


_CLEANED_CACHES: set[str] = set()


def clean_cache_once(directory: str | os.PathLike | None = None) -> None:
    """Remove stale temporary files under the cache (once per process and directory)."""
    directory = str(directory or cache_dir())
    if directory not in _CLEANED_CACHES and os.path.isdir(directory):
        remove_stale_partials(directory, recursive=True)
        _CLEANED_CACHES.add(directory)


def new_private_temp_dir(prefix: str) -> str:
    """A fresh directory ``<tmp>/<prefix><host>-<pid>-<random>``, mode 0700, created exclusively
    (``mkdtemp``): nobody else can have made it first or read it. Stale directories of the
    same prefix whose process is gone are removed first. The caller removes it when done."""
    remove_stale_temp_dirs(prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{owner_tag()}-")


_SESSION_DIRS: dict[str, str] = {}


def session_temp_dir(prefix: str) -> str:
    """One private temp directory per process (kernel) and prefix, created on the first call,
    the same on every later call, removed when the process exits.

    For a notebook that writes modules for its spawned workers to import: never a fixed name
    such as ``/tmp/course-<user>``, which any user of a shared machine could create first
    (then their code would run in your workers).
    """
    path = _SESSION_DIRS.get(prefix)
    if path is None or not os.path.isdir(path):
        path = new_private_temp_dir(prefix)
        _SESSION_DIRS[prefix] = path
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def temp_dir_until_exit(prefix: str) -> str:
    """A fresh private directory (:func:`new_private_temp_dir`) that is removed when the process
    (kernel) exits, also when the cell that made it failed before its own clean-up; a kernel that is
    killed leaves it to the next call with the same prefix (its owner is gone). Lesson 06's checkpoints."""
    path = new_private_temp_dir(prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
