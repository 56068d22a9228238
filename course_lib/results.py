"""Saved results: each lesson writes what it measured as JSON (lessons 01-07).

The run's results directory is ``$COURSE_RESULTS_DIR`` (set by ``make course``), else
``runs/interactive/results`` in the learner's own clone of the course, else (a shared installation)
the learner's own data folder (:mod:`course_lib.userdirs`). The trick ladder's rungs are results too, written and read
only by :mod:`course_lib.ladder`; the run summary is :mod:`course_lib.summary`.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

from .fileio import atomic_write_text
from .userdirs import check_own, default_results_dir, is_own_checkout


def results_dir() -> Path:
    """Where this run's results go: ``$COURSE_RESULTS_DIR`` (set by ``make course``), else
    ``runs/interactive/results`` in the course checkout when it is this learner's own clone, else
    ``~/.local/share/largebatch-course/runs/interactive/results`` (``$XDG_DATA_HOME``), made 0700.

    Never next to a shared installation (an instructor's checkout on a JupyterHub, site-packages) nor
    in the current directory: there every learner would read and overwrite every other's baseline,
    rungs and journals. The folder is checked to be this learner's (``userdirs.check_own``)."""
    if os.environ.get("COURSE_RESULTS_DIR"):
        path = Path(os.environ["COURSE_RESULTS_DIR"]).expanduser()
        if path.exists():
            check_own(path, what="results folder", setting="COURSE_RESULTS_DIR")
        return path
    repo = Path(__file__).resolve().parent.parent
    if (repo / "pyproject.toml").exists() and is_own_checkout(repo):
        path = repo / "runs" / "interactive" / "results"
        if path.exists():
            check_own(path, what="results folder", setting="COURSE_RESULTS_DIR")
        return path
    return default_results_dir()


def _clean(value):
    """JSON-safe: NaN/inf become None (never a fake number), tensors become lists,
    devices and paths strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (Path,)) or type(value).__name__ == "device":
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "tolist"):
        return _clean(value.tolist())
    return value


def save_result(name: str, record, directory: Path | None = None, **extra) -> Path:
    """Write ``record`` (a dict, or a result with ``to_dict()``) plus ``extra`` fields as
    ``<name>.json`` in the results directory, atomically."""
    payload = record.to_dict() if hasattr(record, "to_dict") else dict(record)
    payload.update(extra)
    path = Path(directory or results_dir()) / f"{name}.json"
    atomic_write_text(path, json.dumps(_clean(payload), indent=2, sort_keys=True))
    return path


def load_results(directory: Path | None = None) -> dict[str, dict]:
    """Every ``<name>.json`` in the results directory as ``{name: record}``.

    A file that cannot be read as a JSON object (empty, cut off, another tool's) is reported by
    name and skipped: one bad file must not stop every later lesson's ``setup()``."""
    d = Path(directory or results_dir())
    if not d.is_dir():
        return {}
    check_own(d, what="results folder", setting="COURSE_RESULTS_DIR")
    records = {}
    for p in sorted(d.glob("*.json")):
        try:
            record = json.loads(p.read_text())
            if not isinstance(record, dict):
                raise ValueError(f"a JSON {type(record).__name__}, not an object")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            warnings.warn(f"results: skipped {p} ({type(exc).__name__}: {exc}); it is not a result the course "
                          f"wrote. Move it out of {d} or delete it (a lesson that wrote it rewrites it when run "
                          "again).",
                          stacklevel=2)
            continue
        records[p.stem] = record
    return records
