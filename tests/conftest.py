"""The suite's tier, and fixtures shared by the training-loop tests.

``make test`` checks the **CPU tier** on every machine: its references (seeded runs,
gloo, AllReduceBatchNorm, the smoke notebooks' checked outputs) are CPU results, and on a
GPU host a test would otherwise pick NCCL or CUDA and compare a CUDA run with them. So the
suite hides the GPUs (``CUDA_VISIBLE_DEVICES=`` — the course's own way to ask for the CPU
tier, see ``course_lib.tiers``) before anything touches CUDA; workers and notebook kernels
inherit it. The GPU tier has its own tests, ``tests/test_gpu.py``, which skip without a
GPU: ``COURSE_TEST_GPU=1 pytest tests/test_gpu.py`` (``ci/gpu-check.sh`` runs them).

No test depends on the machine's speed: tests wait on events (pid files, process exits,
barriers), and every time bound is a generous base value times one suite-wide scale,
``COURSE_TEST_TIMEOUT_SCALE`` (default 1; ``tests/_timing.py``). Raise it on a machine
slower than a loaded 2-core box.
"""

import os

import pytest
import torch

from course_lib.data import load_synthetic
from _timing import SCALE
import _procs

GPU_RUN = os.environ.get("COURSE_TEST_GPU", "") not in ("", "0")


def pytest_configure(config):
    if not GPU_RUN:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    _stop_on_term()


def _stop_on_term() -> None:
    """SIGTERM (a CI time limit, SLURM, ``timeout``) ends the run as Ctrl-C does: pytest then runs the
    fixtures' teardown, which stops the services the tests started in sessions of their own (JupyterLab,
    JupyterHub, Chromium: tests/_lab.py), where a signal to pytest's process group does not reach them.
    By default SIGTERM ends Python with no teardown, and they were left running. A child forked from this
    process inherits the handler; it dies of the signal as before."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    me = os.getpid()

    def interrupt(signum, frame):
        if os.getpid() != me:  # a forked child: the default action, death by the signal
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        signal.signal(signum, signal.SIG_DFL)  # a second TERM ends the teardown too
        raise KeyboardInterrupt(f"signal {signum} (SIGTERM): stopping, with teardown")

    signal.signal(signal.SIGTERM, interrupt)


# The lessons form one chain -- lesson 01's lr and the ladder's rungs feed 02-07, lesson 06's
# measurements 08 and 09, 08's fit 10 -- so under pytest-xdist (ci/test.sh) they run in order on one
# worker, as in `make course`, while the other workers take everything else.
LESSON_CHAIN = "tests/test_notebooks.py::test_notebook_executes_in_smoke_profile[notebooks/"
# The browser's run of each lesson (tests/test_browser.py: one JupyterLab per worker) is not a chain: it
# empties its server's results folder before each lesson, so each runs alone, as a learner who opens it
# first, and checks what the papermill run alone checks. So any worker takes them, early
# (after the chain, they are the longest pieces of work), and where they run (Chromium and Playwright
# present: _lab.browser_missing, their own skip condition) each lesson's papermill run alone skips.
BROWSER_LESSON = "tests/test_browser.py::test_notebook_runs_in_jupyterlab[notebooks/"
# each lesson that reads earlier results runs alone, in papermill where the browser tests do not run
LESSONS_ALONE = "tests/test_notebooks.py::test_lesson_runs_alone_in_a_fresh_results_folder["


# trylast: after -k, -m and --deselect removed what will not run, so that a lesson's run alone is skipped only
# where its browser test is still selected (pytest's own hook, in _pytest/mark, has no ordering of its own)
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """The lessons' chain first: it is the suite's longest piece of work that cannot be split, so one
    worker starts it at once; then the lessons in the browser and alone, each its own piece; in one
    process the order does not matter."""
    items.sort(key=lambda item: 0 if item.nodeid.startswith(LESSON_CHAIN)
               else 1 if item.nodeid.startswith(BROWSER_LESSON) else 2 if item.nodeid.startswith(LESSONS_ALONE) else 3)
    _skip_alone_where_the_browser_runs(items)


def _skip_alone_where_the_browser_runs(items) -> None:
    """Skip each lesson's papermill run alone whose browser test is selected and can run: that test runs the
    lesson in a fresh results folder and checks the same (tests/_alone.py)."""
    in_browser = {item.nodeid[len(BROWSER_LESSON):-1] for item in items if item.nodeid.startswith(BROWSER_LESSON)}
    alone = [item for item in items if item.nodeid.startswith(LESSONS_ALONE)]
    if not (in_browser and alone):
        return
    from _lab import browser_missing

    if browser_missing() is not None:  # the browser tests skip for this reason: papermill runs the lessons alone
        return
    for item in alone:
        name = item.nodeid[len(LESSONS_ALONE):-1]
        if name in in_browser:
            item.add_marker(pytest.mark.skip(
                reason=f"run alone by {BROWSER_LESSON}{name}] (a fresh results folder, the same checks)"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the lessons' chain as one group, chosen here by test id.

    Not with ``xdist_group`` marks: pytest-xdist 3.8 groups by suffixing ``item._nodeid``, which
    pytest 9 does not read, so marked tests would be spread over workers and a lesson could start
    before the one whose saved results it reads had finished."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LessonChainScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            if nodeid.startswith(LESSON_CHAIN):
                return "lessons"
            # one test SLURM per worker would collide: each numbers its jobs from 1, and the sbatch
            # script derives the rendezvous port from the job id (measured: two job 1s on port 20001)
            if nodeid.startswith("tests/test_slurm.py::"):
                return "slurm"
            # a module's virtual cluster and its uninterrupted reference job (tests/test_multinode.py: ~20 s
            # of torchrun) are module fixtures: spread over workers, each worker would make them again
            for module in ("tests/test_multinode.py::", "tests/test_slurm_multinode.py::"):
                if nodeid.startswith(module):
                    return module
            return nodeid

    return LessonChainScheduling(config, log)


@pytest.fixture
def children_before_test():
    """What an orphan check must not count: processes other tests' session services had already
    started when this test began (tests/_procs.py). Modules with orphan checks use it for every test."""
    _procs.record_children_before_test()
    yield


def pytest_report_header(config):
    scale = f"time bounds x{SCALE:g} (COURSE_TEST_TIMEOUT_SCALE)"
    if GPU_RUN:
        return [f"course tier under test: GPUs visible (COURSE_TEST_GPU=1, "
                f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})", scale]
    return ["course tier under test: cpu (GPUs hidden; COURSE_TEST_GPU=1 pytest tests/test_gpu.py tests the GPU tier)",
            scale]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The tiny synthetic MovieLens set, built in a private cache, with one intra-op thread.

    One thread: these steps are tiny, and on a busy machine two spinning OpenMP threads per
    process made them up to 50x slower (measured on a shared 2-core box).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    old = os.environ.get("COURSE_DATA_DIR")
    os.environ["COURSE_DATA_DIR"] = str(tmp_path_factory.mktemp("cache"))
    try:
        yield load_synthetic("tiny")
    finally:
        torch.set_num_threads(threads)
        if old is None:
            os.environ.pop("COURSE_DATA_DIR")
        else:
            os.environ["COURSE_DATA_DIR"] = old


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium through Playwright, one per test session (tests/_lab.py)."""
    from playwright.sync_api import sync_playwright

    from _lab import launch_browser

    with sync_playwright() as p:
        b = launch_browser(p)
        try:
            yield b
        finally:
            b.close()
