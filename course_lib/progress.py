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
    """``"  ~42s to go"``: a run's remaining training time at its pace so far (a log line's end:
    ``make course`` shows each run's progress); "" before the first step or at the end."""
    if step <= 0 or step >= total or seconds <= 0:
        return ""
    return f"  ~{seconds / step * (total - step):.0f}s to go"


# --------------------------------------------------------------------------- log lines

LOG_EVERY_S = 60.0  # under papermill, a long run says it is alive at most this often; a short one prints one line


class LogThrottle:
    """True at most once every ``every`` seconds of wall clock (the first call is not due: a run's own
    line comes when it ends)."""

    def __init__(self, every: float | None = None, clock=None):
        import time

        self.every = LOG_EVERY_S if every is None else every
        self.clock = clock or time.monotonic
        self.last = self.clock()

    def due(self) -> bool:
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            return True
        return False


def point_text(curve: dict, i: int = -1) -> str:
    """One evaluation point of a training curve, as the log lines show it."""
    loss = "  -   " if curve["loss"][i] is None else f"{curve['loss'][i]:.4f}"
    return (f"epoch {curve['epoch'][i]:.2f}  step {curve['step'][i]}  train {curve['time_s'][i]:.1f}s  "
            f"loss {loss}  HR@10 {curve['hr'][i]:.4f}  NDCG@10 {curve['ndcg'][i]:.4f}")


def run_line(label: str, settings: str, curve: dict | None, target_hr: float | None) -> str:
    """A finished run in one line: its settings, its last evaluation point, and where it crossed the target."""
    head = f"[{label}] {settings}" if settings else f"[{label}]"
    if not curve or not curve.get("step"):
        return f"{head} -> no evaluation point"
    text = f"{head} -> {point_text(curve)}"
    if target_hr is not None:
        hit = next((i for i, h in enumerate(curve["hr"]) if h is not None and h >= target_hr), None)
        text += (f"; HR@10 >= {target_hr:g} first at epoch {curve['epoch'][hit]:.2f} (step {curve['step'][hit]})"
                 if hit is not None else f"; HR@10 >= {target_hr:g} not reached")
    return text
