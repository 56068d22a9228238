"""How long work shows progress: a bar in a notebook a person watches, log lines elsewhere."""

from __future__ import annotations

import os

PROGRESS_MODES = ("auto", "bar", "log", "none")


def in_notebook() -> bool:
    """True inside a Jupyter kernel (papermill's included: it cannot be told apart)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def resolve_progress(progress: str = "auto") -> str:
    """``"auto"``: a tqdm bar (and live figure) in an interactive notebook, log lines otherwise.

    A kernel cannot tell papermill from a person, so ``$CI`` or ``$COURSE_PROFILE`` (what CI
    and ``make course`` set) count as non-interactive; ``$COURSE_PROGRESS`` overrides all.
    """
    progress = os.environ.get("COURSE_PROGRESS", "") or progress
    if progress not in PROGRESS_MODES:
        raise ValueError(f"progress={progress!r}; choose one of {PROGRESS_MODES}")
    if progress != "auto":
        return progress
    if os.environ.get("CI") or os.environ.get("COURSE_PROFILE") or not in_notebook():
        return "log"
    return "bar"


def time_to_go(step: int, total: int, seconds: float) -> str:
    """``"  ~42s to go"``: a run's remaining training time at its pace so far (a log line's end, issue 36:
    ``make course`` shows each run's progress); "" before the first step or at the end."""
    if step <= 0 or step >= total or seconds <= 0:
        return ""
    return f"  ~{seconds / step * (total - step):.0f}s to go"
