"""The suite's one time scale: every time bound a test sets is ``scaled(base)``.

A test that waits for workers, launches processes or bounds a duration uses a generous base
value (minutes for anything that spawns Python and imports torch) multiplied by
``COURSE_TEST_TIMEOUT_SCALE`` (default 1). On a machine slower than a loaded 2-core box -- a
busy login node, an emulated CPU -- raise it (``COURSE_TEST_TIMEOUT_SCALE=5 make test``);
nothing else in the suite depends on the machine's speed. A wait that is met returns at once,
so a large scale costs nothing on a fast machine; only a failing test waits longer.

Where a test can wait on an event (a pid file, a process exit, a barrier) it does, and the
bound is only a backstop against hanging forever.
"""

import os


def _scale() -> float:
    raw = os.environ.get("COURSE_TEST_TIMEOUT_SCALE", "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"COURSE_TEST_TIMEOUT_SCALE={raw!r}: expected a positive number") from None
    if not value > 0:
        raise ValueError(f"COURSE_TEST_TIMEOUT_SCALE={raw!r}: expected a positive number")
    return value


SCALE = _scale()


def scaled(seconds: float) -> float:
    """``seconds`` times the suite's time scale (``$COURSE_TEST_TIMEOUT_SCALE``, default 1)."""
    return seconds * SCALE
