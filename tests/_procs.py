"""The test services' processes and ports: the orphan checks' one notion of "a child this test left
behind", and the one way to pick a free loopback port for a service a test starts.

Under pytest-xdist a worker also holds session-wide services of other tests (the browser tests'
JupyterLab and Chromium, tests/test_browser.py), which live on between tests and are stopped by
their own fixtures. An orphan check asks about the processes started *during* its test: a module
with such checks uses the ``children_before_test`` fixture (tests/conftest.py), which records the
children that exist when each of its tests begins.
"""

import socket

import psutil

BEFORE_TEST: set[int] = set()


def record_children_before_test() -> None:
    BEFORE_TEST.clear()
    BEFORE_TEST.update(p.pid for p in psutil.Process().children(recursive=True))


def stray_children() -> list[psutil.Process]:
    """Live children of this process started in this test, except multiprocessing's resource tracker
    and fork server (one each per launching process, started by its first launch, exit with it)."""
    def helper(p) -> bool:
        cmd = " ".join(p.cmdline())
        return "resource_tracker" in cmd or "multiprocessing.forkserver" in cmd

    strays = []
    for p in psutil.Process().children(recursive=True):
        if p.pid in BEFORE_TEST:
            continue
        try:
            if p.status() == psutil.STATUS_ZOMBIE or helper(p):
                continue
            # A process started under a service that ran before this test (Chromium starts helper
            # processes whenever it likes) is that service's, not this test's. The fork server is the
            # exception: the workers it forks for this test's launches are this test's.
            if any(a.pid in BEFORE_TEST and not helper(a) for a in p.parents()):
                continue
            strays.append(p)
        except psutil.NoSuchProcess:  # exited since the listing: not a stray
            pass
    return strays


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now (JupyterLab, JupyterHub, SLURM)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
