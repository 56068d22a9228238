"""torch.compile's caches in the learner's own folder, set by every lesson's ``setup()``.

torch's inductor keeps compiled kernels and FX graphs (pickles it loads back) in
``$TORCHINDUCTOR_CACHE_DIR``, by default ``<temp dir>/torchinductor_<user>``, made with
``exist_ok=True`` and no ownership check (torch/_inductor/runtime/cache_dir_utils.py, torch 2.13):
whoever creates that folder in a shared /tmp first controls what the kernel loads. Nothing here runs
at import.
"""

from __future__ import annotations

import os
from pathlib import Path

from .fileio import cache_dir
from .userdirs import check_own, private_dir


def compile_cache_dir() -> Path:
    """The learner's torch.compile (inductor) cache: ``<course cache>/torchinductor``, made 0700."""
    private_dir(cache_dir(), what="cache folder", setting="COURSE_DATA_DIR",
                tighten=not os.environ.get("COURSE_DATA_DIR"))
    return private_dir(cache_dir() / "torchinductor", what="torch.compile cache", setting="TORCHINDUCTOR_CACHE_DIR",
                       tighten=True)


def use_private_compile_caches() -> dict[str, str]:
    """Point torch.compile's caches at the learner's own folder before anything compiles.

    torch's inductor keeps compiled kernels and FX graphs (pickles it loads back) in
    ``$TORCHINDUCTOR_CACHE_DIR``, by default ``<temp dir>/torchinductor_<user>``, made with
    ``exist_ok=True`` and no ownership check (torch/_inductor/runtime/cache_dir_utils.py,
    torch 2.13): whoever creates that folder in a shared /tmp first controls what the kernel loads.
    Triton's kernels follow it (``triton_cache_dir``: ``<inductor cache>/triton`` unless
    ``$TRITON_CACHE_DIR`` is set). A folder the learner chose (the variable set to anything but
    torch's own default, which torch writes back into the environment once it has used it) is kept,
    after the ownership check. Returns the variables as set."""
    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if chosen and os.path.abspath(chosen) != os.path.abspath(_torch_default_inductor_dir()):
        Path(chosen).mkdir(parents=True, exist_ok=True)
        check_own(chosen, what="torch.compile cache", setting="TORCHINDUCTOR_CACHE_DIR")
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache_dir())
    if os.environ.get("TRITON_CACHE_DIR"):
        check_own(os.environ["TRITON_CACHE_DIR"], what="Triton cache", setting="TRITON_CACHE_DIR") \
            if os.path.exists(os.environ["TRITON_CACHE_DIR"]) else None
    return {k: os.environ[k] for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR") if k in os.environ}


def _torch_default_inductor_dir() -> str:
    """torch's own default, computed as torch does (without importing torch._inductor)."""
    import getpass
    import re
    import tempfile

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
