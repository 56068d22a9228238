"""Files that are either complete or absent: atomic writes, verified downloads, the cache dir.

Everything the course writes (results, checkpoints, processed datasets, tokenizers,
downloads) goes through ``atomic_path``: write to a temporary name in the destination's
directory, then ``os.replace`` onto the final name. An interrupted run, a full disk or a
failed checksum leaves the old file (or nothing), never half of a new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
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
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=suffix, dir=dest.parent)
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
