"""Which child processes a test started: the orphan checks' one notion of "ours".

Under pytest-xdist a worker also holds session-wide services of other tests (the browser tests'
JupyterLab and Chromium, tests/test_browser.py), which live on between tests and are stopped by
their own fixtures. An orphan check asks about the processes started *during* its test, so
tests/conftest.py records the children that exist when each test begins.
"""

import psutil

BEFORE_TEST: set[int] = set()


def record_children_before_test() -> None:
    BEFORE_TEST.clear()
    BEFORE_TEST.update(p.pid for p in psutil.Process().children(recursive=True))


def children_started_in_this_test() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in BEFORE_TEST]
