"""The suite stops cleanly on SIGTERM (tests/conftest.py ``_stop_on_term``): a CI time limit or a SLURM
job's end runs the fixtures' teardown, so a service a test started in a session of its own (as
tests/_lab.py starts JupyterLab) is stopped, not left running."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from _timing import scaled

REPO = Path(__file__).resolve().parents[1]

INNER = '''
import subprocess, sys, time, pytest
@pytest.fixture
def service():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    open({pid!r}, "w").write(str(p.pid))
    yield p
    p.kill(); p.wait()
    open({done!r}, "w").write("torn down")
def test_waits(service):
    time.sleep(600)
'''


def test_sigterm_runs_the_teardown_of_a_service_in_its_own_session(tmp_path):
    pid_file, done = tmp_path / "service.pid", tmp_path / "done"
    (tmp_path / "test_inner.py").write_text(INNER.format(pid=str(pid_file), done=str(done)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
                            "--rootdir", str(tmp_path), str(tmp_path / "test_inner.py")],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + scaled(120)
    while not pid_file.exists() or not pid_file.read_text():
        assert run.poll() is None, run.stdout.read()
        assert time.monotonic() < deadline, "the inner test never started its service"
        time.sleep(0.2)
    service = psutil.Process(int(pid_file.read_text()))
    try:
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=scaled(60))
        assert done.read_text() == "torn down", out
        assert "SIGTERM" in out, out
        service.wait(timeout=scaled(10))
    finally:
        if service.is_running():
            service.kill()
        if run.poll() is None:
            run.kill()
