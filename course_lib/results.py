"""Saved results: each lesson writes what it measured as JSON (lessons 01-07).

The run's results directory is ``$COURSE_RESULTS_DIR`` (set by ``make course``), else
``runs/interactive/results``. The trick ladder's rungs are results too, written and read
only by :mod:`course_lib.ladder`; the run summary is :mod:`course_lib.summary`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from .fileio import atomic_write_text


def results_dir() -> Path:
    """Where this run's results go: ``$COURSE_RESULTS_DIR`` (set by ``make course``), else
    ``runs/interactive/results`` in the course checkout (or the current directory)."""
    if os.environ.get("COURSE_RESULTS_DIR"):
        return Path(os.environ["COURSE_RESULTS_DIR"])
    repo = Path(__file__).resolve().parent.parent
    root = repo if (repo / "pyproject.toml").exists() else Path.cwd()
    return root / "runs" / "interactive" / "results"


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
    d = Path(directory or results_dir())
    return {p.stem: json.loads(p.read_text()) for p in sorted(d.glob("*.json"))} if d.is_dir() else {}
