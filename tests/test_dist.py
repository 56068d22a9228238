"""The launcher's contract (course_lib.dist.launch), on CPU with gloo and 2 workers."""

import contextlib
import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import _thread

import psutil
import pytest
import torch

from course_lib import dist as cdist
from course_lib.dist import launcher  # the supervisor's own names, for the tests of the supervisor
from course_lib import fileio

import _dist_workers as W
import _procs
from _timing import scaled

# every test: the orphan checks count only the processes their own test started
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("children_before_test")]

# Margins (times the suite's scale, COURSE_TEST_TIMEOUT_SCALE: see _timing.py). A shared login node or a loaded CI box
# can be many times slower than an idle one
# (spawning a worker imports torch: 2-3 s idle, 20 s and more under load; a 60 s wait racing a
# 60 s launch timeout failed that way). So every wait below is generous -- a wait that is met
# returns at once, it costs nothing on a fast machine -- and a launch's own timeout is always
# far longer than any helper's wait, so a helper that gives up fails the test with its own
# message instead of leaving it to the launch's timeout.
WAIT_S = scaled(300)  # for workers to start and report
LAUNCH_TIMEOUT_S = scaled(900)  # never reached by a passing test


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _pids(pid_dir, n, timeout=WAIT_S):
    deadline = time.time() + timeout
    while time.time() < deadline:
        files = glob.glob(os.path.join(pid_dir, "*.pid"))
        if len(files) == n:
            return [int(open(f).read()) for f in files]
        time.sleep(0.05)
    raise AssertionError(f"workers did not write {n} pid files in {timeout}s")


def _assert_all_gone(pids, within=None):
    within = scaled(60) if within is None else within
    deadline = time.time() + within
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    survivors = [p for p in pids if _alive(p)]
    assert not survivors, f"worker processes survived: {survivors}"


def test_results_come_back_by_rank_and_output_is_prefixed(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # launch's private dir goes here
    # the run folder of a launcher that was SIGKILLed (its pid is gone): this launch removes it
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"course-launch-{fileio.owner_tag().rsplit('-', 1)[0]}-{dead.pid}-x1y2z3w4"
    (stale / "tmp" / "pymp-abcdefgh").mkdir(parents=True)
    (stale / "rank0.log").write_text("a large log\n")
    results = cdist.launch(W.echo, 2, {"k": [1, 2]})
    out = capsys.readouterr().out
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["world_size"] == 2 and r["payload"] == {"k": [1, 2]} for r in results)
    assert [r["helpers"] for r in results] == [(0, 2, True), (1, 2, False)]
    assert {r["backend"] for r in results} == {"gloo"}
    assert "[rank 0] hello from rank 0" in out and "[rank 1] hello from rank 1" in out
    assert results[0]["addr"] == "127.0.0.1"
    if results[0]["stdout_file"]:  # Linux: the worker's stdout was its log file in the private dir
        assert results[0]["stdout_file"].startswith(str(tmp_path))
    # What may stay is this process's own multiprocessing folder (the fork server's socket, made
    # by the first launch of the process, maybe this one), removed when the process exits.
    mp_tmp = launcher._multiprocessing_temp_dir()
    assert [p for p in tmp_path.iterdir() if str(p) != mp_tmp] == [], "the private temp dir must be removed"
    assert not _procs.stray_children()


def test_workers_see_the_environment_of_their_launch_not_of_the_fork_server(monkeypatch):
    """The fork server keeps the environment it started with; a notebook that sets a variable
    later (COURSE_DATA_DIR, NCCL_DEBUG, CUDA_VISIBLE_DEVICES) must see it in the next launch's
    workers, and one it removed must be gone there."""
    monkeypatch.setenv("COURSE_TEST_REMOVED", "before")
    cdist.launch(W.echo, 2, None, quiet=True)  # the server is running from here on (if not before)
    monkeypatch.setenv("COURSE_TEST_MARK", "set after the server started")
    monkeypatch.delenv("COURSE_TEST_REMOVED")
    assert cdist.launch(W.env_value, 2, "COURSE_TEST_MARK", quiet=True) == ["set after the server started"] * 2
    assert cdist.launch(W.env_value, 2, "COURSE_TEST_REMOVED", quiet=True) == [None, None]


def test_a_temp_dir_too_long_for_the_fork_servers_socket_means_spawned_workers(monkeypatch, tmp_path):
    """An HPC job's $TMPDIR can be too long for the fork server's AF_UNIX socket (107 bytes): the
    first launch must then spawn its workers instead of failing with "AF_UNIX path too long"."""
    from multiprocessing import forkserver, process

    monkeypatch.setattr(forkserver._forkserver, "_forkserver_address", None)  # as before a first launch
    monkeypatch.setitem(process.current_process()._config, "tempdir", None)
    long = tmp_path / ("d" * 90)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    assert launcher._worker_context().get_start_method() == "spawn"
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    assert launcher._worker_context().get_start_method() == "forkserver"


def test_rerun_at_once_uses_a_fresh_port():
    import socket

    first = cdist.launch(W.echo, 2, None, quiet=True)
    port = int(first[0]["port"])
    assert first[0]["port"] == first[1]["port"] and port != 29500
    with socket.socket() as held:
        # the finished launch released its port: nothing of it still listens there
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", port))
        held.listen()
        # and a launch made at once, with that port taken (a fixed port would fail here), runs on a new one
        second = cdist.launch(W.echo, 2, None, quiet=True)
    assert int(second[0]["port"]) != port and second[0]["port"] == second[1]["port"]
    assert [r["rank"] for r in second] == [0, 1]


def test_large_tensor_results_arrive_intact():
    n = 8 * 1024 * 1024  # 32 MiB per rank: queues hang on payloads like this
    results = cdist.launch(W.big_result, 2, n, quiet=True)
    for r, res in enumerate(results):
        t = res["tensor"]
        assert t.shape == (n,) and t.dtype == torch.float32
        assert torch.equal(t, torch.arange(n, dtype=torch.float32) + r)
        assert res["nested"][0] == r and torch.equal(res["nested"][1]["x"], torch.ones(3) * r)


def test_notebook_function_is_refused_before_anything_starts(monkeypatch):
    def in_notebook(rank, world_size):
        return rank

    import types

    in_notebook.__module__ = "__main__"
    in_notebook.__qualname__ = "in_notebook"
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # a kernel's: no __file__
    with pytest.raises(ValueError, match=r"(?s)defined in the notebook.*spawn.*import it"):
        cdist.launch(in_notebook, 2)
    assert not _procs.stray_children()


def test_script_main_function_is_refused_with_a_message_for_scripts(monkeypatch):
    import types

    script = types.ModuleType("__main__")
    script.__file__ = "/home/someone/train_ddp.py"
    monkeypatch.setitem(sys.modules, "__main__", script)

    def in_script(rank, world_size):
        return rank

    in_script.__module__ = "__main__"
    in_script.__qualname__ = "in_script"
    with pytest.raises(ValueError) as info:
        cdist.launch(in_script, 2)
    msg = str(info.value)
    assert "notebook" not in msg
    assert "defined in the script /home/someone/train_ddp.py" in msg and "from my_workers import in_script" in msg


def test_result_that_cannot_be_rebuilt_names_the_rank():
    with pytest.raises(cdist.WorkerError) as info:
        cdist.launch(W.result_only_the_worker_can_rebuild, 2, 1, quiet=True, timeout_s=LAUNCH_TIMEOUT_S)
    err = info.value
    assert err.rank == 1
    msg = str(err)
    assert "rank 1" in msg and "result_only_the_worker_can_rebuild" in msg
    assert "course_test_only_in_worker" in msg  # what could not be found
    assert "plain data" in msg  # what to do
    assert not _procs.stray_children()


def test_lambda_is_refused():
    with pytest.raises(ValueError, match="lambda"):
        cdist.launch(lambda r, w: r, 2)


def test_worker_exception_reraised_with_rank_and_traceback_and_no_survivors(tmp_path):
    t0 = time.time()
    with pytest.raises(cdist.WorkerError) as info:
        cdist.launch(W.fail_on, 2, 1, str(tmp_path), quiet=True, timeout_s=LAUNCH_TIMEOUT_S,
                     collective_timeout_s=LAUNCH_TIMEOUT_S)
    elapsed = time.time() - t0
    err = info.value
    assert err.rank == 1
    assert "ValueError: boom from rank 1" in str(err)
    assert "fail_on" in err.worker_traceback and "_dist_workers.py" in err.worker_traceback
    # Waiting for the healthy rank's barrier would take the whole collective timeout (900 s);
    # killing it takes a second or so, plus the workers' start-up (slow on a busy machine).
    assert elapsed < LAUNCH_TIMEOUT_S / 2, "the healthy rank in its barrier must be killed, not waited for"
    _assert_all_gone(_pids(str(tmp_path), 2, timeout=1))


def test_timeout_kills_workers_blocked_in_a_collective(tmp_path):
    """The launch's timeout fires while rank 0 waits in a barrier rank 1 never joins.

    The timeout counts from the launch, start-up included, and a busy machine can take longer
    than a short timeout just to start the workers; then they never reached the collective
    and the test would prove nothing. So the timeout grows until both workers were inside
    the hang when it fired (one try on an idle machine).
    """
    for timeout_s in (5, 30, scaled(180)):
        pid_dir = tmp_path / f"timeout{timeout_s}"
        pid_dir.mkdir()
        with pytest.raises(cdist.LaunchTimeout, match=f"did not finish within timeout_s={timeout_s:g} s"):
            cdist.launch(W.hang_in_collective, 2, str(pid_dir), timeout_s=timeout_s, quiet=True)
        assert not _procs.stray_children()
        if len(glob.glob(str(pid_dir / "*.pid"))) == 2:
            _assert_all_gone(_pids(str(pid_dir), 2, timeout=1))
            return
    pytest.fail(f"the workers never reached the collective within a {timeout_s} s launch timeout")


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler for the test, as a terminal or a Jupyter kernel has it.

    A suite started in the background (``make test &`` from a non-interactive shell) inherits
    SIGINT ignored, and then Python installs no handler and ``interrupt_main()`` does nothing
    (documented for ``_thread.interrupt_main``): the test would wait for the collective timeout.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_keyboard_interrupt_kills_workers(tmp_path, capsys, python_sigint):
    helper_error = []

    def interrupt_when_started():
        try:
            _pids(str(tmp_path), 2)
        except BaseException as exc:  # noqa: BLE001 - the test reports it below
            helper_error.append(exc)
        finally:
            _thread.interrupt_main()  # also when giving up: the launch must not run on to its timeout

    threading.Thread(target=interrupt_when_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        cdist.launch(W.hang_in_collective, 2, str(tmp_path), timeout_s=LAUNCH_TIMEOUT_S, quiet=True)
    assert not helper_error, f"the helper thread gave up before the interrupt: {helper_error[0]}"
    assert "interrupted" in capsys.readouterr().err
    _assert_all_gone(_pids(str(tmp_path), 2, timeout=1))


def test_workers_die_with_a_killed_launcher(tmp_path):
    """A dead kernel or a killed CI job must not leave workers holding cores and ports."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import _dist_workers as W
        from course_lib import dist
        from course_lib.dist import launcher
        if __name__ == "__main__":
            dist.launch(W.hang_in_collective, 2, {str(tmp_path)!r}, timeout_s={LAUNCH_TIMEOUT_S})
    """)
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        pids = _pids(str(tmp_path), 2)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=WAIT_S)
        _assert_all_gone(pids)
    finally:
        parent.kill()


@pytest.mark.parametrize("ws, backend, gpus, cores, expected", [
    (2, "auto", 0, 2, "gloo"),
    (2, "auto", 4, 16, "nccl"),
    (8, "auto", 4, 16, "gloo"),  # more ranks than GPUs: fall back to gloo
    (1, "gloo", 4, 16, "gloo"),
])
def test_choose_backend(ws, backend, gpus, cores, expected, monkeypatch):
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    assert cdist.choose_backend(ws, backend, gpu_count=gpus, cpu_cores=cores) == expected


def test_bad_requests_are_clear_errors_naming_the_numbers():
    with pytest.raises(RuntimeError, match="needs CUDA GPUs.*none visible"):
        cdist.choose_backend(2, "nccl", gpu_count=0, cpu_cores=2)
    with pytest.raises(RuntimeError, match="world_size=4 but only 2 GPU"):
        cdist.choose_backend(4, "nccl", gpu_count=2, cpu_cores=8)
    with pytest.raises(ValueError, match="at least 1, got 0"):
        cdist.choose_backend(0, gpu_count=0, cpu_cores=2)
    with pytest.raises(ValueError, match="world_size=64 is far beyond this machine's 2 usable"):
        cdist.choose_backend(64, gpu_count=0, cpu_cores=2)
    with pytest.raises(TypeError):
        cdist.choose_backend(2.0, gpu_count=0, cpu_cores=2)
    if not torch.cuda.is_available():  # the launcher itself refuses before starting anything
        with pytest.raises(RuntimeError, match="needs CUDA GPUs"):
            cdist.launch(W.echo, 2, None, backend="nccl")


def test_rank_helpers_default_without_a_process_group(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert (cdist.rank(), cdist.world_size(), cdist.local_rank(), cdist.is_main_process()) == (0, 1, 0, True)
    assert cdist.device() == torch.device("cpu")
    cdist.barrier()  # a no-op, not an error
    assert cdist.init_from_env() is False
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert (cdist.rank(), cdist.world_size(), cdist.local_rank(), cdist.is_main_process()) == (3, 4, 1, False)


def test_same_worker_runs_under_torchrun(tmp_path):
    out = tmp_path / "result.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "course_lib.run", "course_lib.dist:allreduce_demo", "3", "--out", str(out)],
        capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = torch.load(out, weights_only=False)
    assert result["rank"] == 0 and result["backend"] == "gloo"
    assert torch.equal(result["received"], torch.tensor([3.0, 6.0, 9.0]))  # (1 + 2) * [1, 2, 3]


def test_run_entry_without_torchrun_is_one_process(tmp_path, monkeypatch):
    from course_lib import run

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "r.pt"
    assert run.main(["course_lib.dist:allreduce_demo", "2", "--out", str(out)]) == 0
    result = torch.load(out, weights_only=False)
    assert result["backend"] == "none" and torch.equal(result["received"], torch.tensor([1.0, 2.0]))


def test_rendezvous_listens_on_loopback_only():
    store = launcher._loopback_store(10)
    try:
        listening = [c for c in psutil.Process().net_connections(kind="tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port == store.port]
        assert listening and all(c.laddr.ip == "127.0.0.1" for c in listening), listening
    finally:
        del store


def test_the_rank_that_failed_first_is_blamed(tmp_path):
    """Peers of a failing rank fail moments later in their collective; blame the first error."""
    from types import SimpleNamespace

    (tmp_path / "error1.txt").write_text("Traceback ...\nValueError: the real cause\n")
    (tmp_path / "error0.txt").write_text("Traceback ...\nRuntimeError: Connection closed by peer\n")
    os.utime(tmp_path / "error1.txt", ns=(1_000_000_000, 1_000_000_000))
    os.utime(tmp_path / "error0.txt", ns=(2_000_000_000, 2_000_000_000))
    procs = [SimpleNamespace(exitcode=1), SimpleNamespace(exitcode=1), SimpleNamespace(exitcode=-9)]
    err = launcher._worker_error(str(tmp_path), procs, {0: 3_000_000_000, 1: 3_000_000_000}, W.echo)
    assert err.rank == 1 and "ValueError: the real cause" in str(err)
    assert "rank(s) [0, 2] stopped too" in str(err)


def test_a_rank_killed_by_a_signal_is_blamed_before_a_peer_that_lost_its_connection(tmp_path):
    """The launcher sees a SIGKILLed rank only at its next poll; its peer may already have written
    "Connection reset by peer". The killed rank is the cause all the same."""
    from types import SimpleNamespace

    (tmp_path / "rank0.log").write_text("")
    (tmp_path / "rank1.log").write_text("")
    (tmp_path / "error0.txt").write_text("Traceback ...\nRuntimeError: [pair.cc:537] Read error [127.0.0.1]:19340: "
                                         "Connection reset by peer\n")
    os.utime(tmp_path / "error0.txt", ns=(1_000_000_000, 1_000_000_000))
    procs = [SimpleNamespace(exitcode=1), SimpleNamespace(exitcode=-signal.SIGKILL)]
    err = launcher._worker_error(str(tmp_path), procs, {0: 2_000_000_000, 1: 1_500_000_000}, W.echo)
    assert err.rank == 1 and "rank 1 of 2 was killed by SIGKILL" in str(err), str(err)
    assert "rank(s) [0] stopped too" in str(err)
    # ...but a rank we killed ourselves after the grace period (never seen exiting) is not the cause
    procs = [SimpleNamespace(exitcode=1), SimpleNamespace(exitcode=-signal.SIGKILL)]
    err = launcher._worker_error(str(tmp_path), procs, {0: 2_000_000_000}, W.echo)
    assert err.rank == 0 and "Connection reset by peer" in str(err)


# --------------------------------------------------------------------------- no sockets beyond loopback


def test_every_socket_of_the_launch_is_on_loopback(tmp_path):
    """Not only the store: the workers' gloo listeners and connections, and anything else the
    launch's process tree opens, must be bound to (and connected to) loopback addresses."""
    results, sockets, error = W.launch_and_scan_sockets(str(tmp_path))
    assert error is None, f"the socket scan failed: {error!r}"
    assert results == [4.0, 4.0]  # 0 * 4 ones + 1 * 4 ones: the all-reduce really ran
    assert any(s["status"] == psutil.CONN_LISTEN and s["pid"] != os.getpid() for s in sockets), \
        f"expected the workers' gloo listeners among {sockets}"
    assert not W.non_loopback(sockets), f"sockets beyond loopback: {W.non_loopback(sockets)}"


def _global_ipv4():
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family.name == "AF_INET" and not a.address.startswith(("127.", "169.254.")):
                return a.address
    return None


def test_workers_stay_on_loopback_when_the_hostname_resolves_to_the_network(tmp_path):
    """HPC nodes: the hostname resolves to the cluster network, and gloo by default listens on
    the address the hostname resolves to. Reproduce that in a private mount namespace with an
    /etc/hosts that maps this machine's hostname to its global address."""
    import json
    import shutil
    import socket

    addr = _global_ipv4()
    if addr is None:
        pytest.skip("this machine has no global IPv4 address to map its hostname to")
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to give /etc/hosts a private mount")
    host = socket.gethostname()
    lines = []
    for line in open("/etc/hosts").read().splitlines():
        fields = line.split("#")[0].split()
        kept = [f for f in fields[1:] if f != host]
        if fields and kept:
            lines.append(" ".join([fields[0], *kept]))
    hosts = tmp_path / "hosts"
    hosts.write_text(f"{addr} {host}\n" + "\n".join(lines) + "\n")
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    script = tmp_path / "scan.py"
    script.write_text(textwrap.dedent(f"""
        import json, socket, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import _dist_workers as W
        if __name__ == "__main__":
            resolved = socket.gethostbyname(socket.gethostname())
            results, sockets, error = W.launch_and_scan_sockets({str(pid_dir)!r})
            print("SCAN " + json.dumps({{"resolved": resolved, "results": results, "sockets": sockets,
                                         "error": repr(error) if error else None}}))
    """))
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True, timeout=scaled(60))
    if probe.returncode != 0:
        pytest.skip(f"unshare -m is not allowed here: {probe.stderr.strip()}")
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", 'mount --bind "$1" /etc/hosts && exec "$2" "$3"', "sh",
         str(hosts), sys.executable, str(script)],
        capture_output=True, text=True, timeout=scaled(600), env={**os.environ, "OMP_NUM_THREADS": "1"})
    scan = [line for line in proc.stdout.splitlines() if line.startswith("SCAN ")]
    assert proc.returncode == 0 and scan, proc.stdout + proc.stderr
    report = json.loads(scan[0][5:])
    if report["resolved"] != addr:
        pytest.skip(f"the private /etc/hosts did not take effect ({host} -> {report['resolved']})")
    assert report["error"] is None, report["error"]
    assert report["results"] == [4.0, 4.0]
    assert not W.non_loopback(report["sockets"]), \
        f"with {host} -> {addr}, sockets beyond loopback: {W.non_loopback(report['sockets'])}"


# --------------------------------------------------------------------------- nothing left behind


@pytest.fixture
def short_tmp():
    """A private $TMPDIR for a launcher process, with a short path: the workers' temporary
    files go into the run folder only when the path leaves room for AF_UNIX socket names
    (pytest's tmp_path is too long for that)."""
    import pathlib
    import shutil

    # under the suite's own temp dir when its path is short enough, else right under /tmp
    # (ci/test.sh's private $TMPDIR, /tmp/ctest.XXXXXX, already leaves too little room)
    parent = tempfile.gettempdir()
    if len(parent) + 12 + 52 > launcher._MAX_WORKER_TMP_LEN and os.path.isdir("/tmp"):
        parent = "/tmp"
    path = pathlib.Path(tempfile.mkdtemp(prefix="ct-", dir=parent))
    assert len(str(path)) + 52 <= launcher._MAX_WORKER_TMP_LEN, f"the system temp dir {path.parent} is too long"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _start_launcher(tmp_path, worker, tmp_dir, *args, watchdog=True):
    """A launcher in its own process (as a kernel would be), with a private $TMPDIR to inspect.
    ``watchdog=False`` gives the watchdog no process group to kill. Returns (process, pid_dir)."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    script = textwrap.dedent(f"""
        import signal, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import _dist_workers as W
        from course_lib import dist
        from course_lib.dist import launcher
        if __name__ == "__main__":
            # as in a terminal or a kernel; a suite started in the background inherits SIGINT ignored
            signal.signal(signal.SIGINT, signal.default_int_handler)
            if not {watchdog!r}:
                launcher._Watchdog.watch_group = lambda self, pgid: None
            dist.launch(W.{worker}, 2, {str(pid_dir)!r}, *{args!r}, timeout_s={LAUNCH_TIMEOUT_S})
    """)
    env = {**os.environ, "TMPDIR": str(tmp_dir), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", script], env=env), pid_dir


def _assert_empty_soon(path, within=None):
    within = scaled(60) if within is None else within
    deadline = time.time() + within
    while time.time() < deadline and list(path.iterdir()):
        time.sleep(0.1)
    assert not list(path.iterdir()), f"left behind in {path}: {sorted(p.name for p in path.iterdir())}"


def test_a_burst_of_interrupts_still_cleans_up_everything(tmp_path, short_tmp):
    """Ctrl-C pressed again and again: the later interrupts must not abort the cleanup of the
    first one (before: the run folder stayed in 2 of 4 tries)."""
    tmp_dir = short_tmp
    parent, pid_dir = _start_launcher(tmp_path, "hang_in_collective", tmp_dir)
    try:
        pids = _pids(str(pid_dir), 2)
        for _ in range(100):  # 2 s of interrupts every 20 ms, or until the launcher is gone
            if parent.poll() is not None:
                break
            parent.send_signal(signal.SIGINT)
            time.sleep(0.02)
        assert parent.wait(timeout=WAIT_S) != 0
        _assert_all_gone(pids)
        # the launcher's own cleanup: its run folder went before it exited
        assert not [p.name for p in tmp_dir.iterdir() if p.name.startswith("course-launch-")]
        # multiprocessing's folder (the fork server's socket) goes when the server exits, just after
        # the launcher; the server removes it itself if the interrupts cut the launcher's exit short
        _assert_empty_soon(tmp_dir)
    finally:
        parent.kill()


def test_the_fork_server_removes_its_socket_folder_when_the_launcher_skipped_its_exit_handlers(short_tmp):
    """A launcher that exits without its atexit handlers (os._exit here; a burst of Ctrl-C or a
    SIGKILL in life) leaves multiprocessing's folder, where the fork server's socket is: the server,
    which exits with its launcher, removes it."""
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import _dist_workers as W
        from course_lib import dist
        from course_lib.dist import launcher
        if __name__ == "__main__":
            dist.launch(W.echo, 2, None, quiet=True)
            print(sorted(os.listdir(os.environ["TMPDIR"])), flush=True)
            os._exit(0)
    """)
    env = {**os.environ, "TMPDIR": str(short_tmp), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert out.returncode == 0, out.stderr
    assert "pymp-" in out.stdout  # the server's folder existed while the launcher lived
    _assert_empty_soon(short_tmp)


def test_a_kernel_killed_with_its_process_group_leaves_no_fork_server_and_no_folder(short_tmp):
    """Jupyter ends a kernel by killing its whole process group (jupyter_client, at the end of a
    shutdown). The fork server, started by the kernel's first launch, is out of that group: it sees
    its launcher go, exits, and removes the launcher's pymp-* folder (before: one folder left in the
    temp dir per lesson of `make course`, and the server killed with the kernel)."""
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import _dist_workers as W
        from course_lib import dist
        from multiprocessing import forkserver
        if __name__ == "__main__":
            dist.launch(W.echo, 2, None, quiet=True)
            print(forkserver._forkserver._forkserver_pid, flush=True)
            time.sleep(600)
    """)
    env = {**os.environ, "TMPDIR": str(short_tmp), "OMP_NUM_THREADS": "1"}
    kernel = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)  # a process group of its own, as a kernel's
    server = None
    try:
        server = int(kernel.stdout.readline())
        assert os.getpgid(server) != kernel.pid  # not in the kernel's group
        assert any(p.name.startswith("pymp-") for p in short_tmp.iterdir())
        os.killpg(kernel.pid, signal.SIGKILL)
        kernel.wait(timeout=WAIT_S)
        _assert_all_gone([server])
        _assert_empty_soon(short_tmp)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(kernel.pid, signal.SIGKILL)
        if server is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(server, signal.SIGKILL)
        kernel.stdout.close()


def test_a_killed_launcher_takes_the_workers_children_and_run_folder_with_it(tmp_path, short_tmp):
    """SIGKILL of the kernel: the workers die by the parent-death signal, and what they started
    (a plain subprocess, a DataLoader worker, multiprocessing's resource tracker) must die too;
    the run folder (logs, results, the workers' pymp-* folders) must go."""
    tmp_dir = short_tmp
    parent, pid_dir = _start_launcher(tmp_path, "children_then_hang", tmp_dir)
    descendants = []
    try:
        pids = _pids(str(pid_dir), 2)
        descendants = _descendants(pid_dir)
        assert len(descendants) >= 4  # per worker: the subprocess and the DataLoader worker at least
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=WAIT_S)
        _assert_all_gone(pids + descendants)
        _assert_empty_soon(tmp_dir)
    finally:
        parent.kill()
        _kill_all(descendants)


# --------------------------------------------------------------------------- each orphan defence alone


def _descendants(pid_dir):
    return [int(x) for r in range(2) for x in (pid_dir / f"desc{r}.txt").read_text().split()]


def _kill_all(pids):
    for pid in pids:  # never leave the test's own orphans behind
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("keep", ["watchdog", "pdeathsig", "parent-watch"])
def test_each_defence_alone_stops_the_workers_of_a_killed_launcher(tmp_path, short_tmp, keep):
    """The launcher is SIGKILLed with only one defence left. Any one stops the workers; only the
    watchdog, which kills their process groups, also stops what the workers started (the two
    worker-side defences end the worker alone: its children are reparented and live on)."""
    parent, pid_dir = _start_launcher(tmp_path, "children_then_hang_with_only", short_tmp, keep,
                                      watchdog=keep == "watchdog")
    descendants = []
    try:
        pids = _pids(str(pid_dir), 2)
        descendants = _descendants(pid_dir)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=WAIT_S)
        _assert_all_gone(pids + (descendants if keep == "watchdog" else []))
    finally:
        parent.kill()
        _kill_all(descendants)


def test_process_groups_alone_stop_what_the_workers_started(tmp_path, monkeypatch, python_sigint):
    """The launcher alive (an interrupt): no watchdog groups, no worker-side defences; killing
    each worker's process group takes the subprocess and the DataLoader worker with it."""
    monkeypatch.setattr(launcher._Watchdog, "watch_group", lambda self, pgid: None)
    helper_error = []

    def interrupt_when_started():
        try:
            _pids(str(tmp_path), 2)
        except BaseException as exc:  # noqa: BLE001 - reported below
            helper_error.append(exc)
        finally:
            _thread.interrupt_main()

    threading.Thread(target=interrupt_when_started, daemon=True).start()
    descendants = []
    try:
        with pytest.raises(KeyboardInterrupt):
            cdist.launch(W.children_then_hang_with_only, 2, str(tmp_path), "none", timeout_s=LAUNCH_TIMEOUT_S,
                         quiet=True)
        assert not helper_error, f"the helper thread gave up before the interrupt: {helper_error[0]}"
        descendants = _descendants(tmp_path)
        _assert_all_gone(_pids(str(tmp_path), 2, timeout=1) + descendants)
    finally:
        _kill_all(descendants)


# --------------------------------------------------------------------------- the messages of the ways a rank dies


def test_a_rank_killed_by_a_signal_is_named_with_the_signal(tmp_path):
    with pytest.raises(cdist.WorkerError) as err:
        cdist.launch(W.killed_by_signal, 2, 1, str(tmp_path), timeout_s=LAUNCH_TIMEOUT_S,
                     collective_timeout_s=LAUNCH_TIMEOUT_S, quiet=True)
    msg = str(err.value)
    assert err.value.rank == 1
    assert "rank 1 of 2 was killed by SIGKILL" in msg and "ran out of memory" in msg
    assert "while running killed_by_signal" in msg
    _assert_all_gone(_pids(str(tmp_path), 2, timeout=1))


def test_a_collective_timeout_says_what_to_check(tmp_path):
    """Rank 1 never joins rank 0's barrier: with a finite collective timeout rank 0 fails by
    itself (no launch timeout needed), and the message says which setting and what to check."""
    with pytest.raises(cdist.WorkerError) as err:
        cdist.launch(W.hang_in_collective, 2, str(tmp_path), timeout_s=LAUNCH_TIMEOUT_S,
                     collective_timeout_s=scaled(10), quiet=True)
    msg = str(err.value)
    assert f"collective_timeout_s={scaled(10):g} s" in msg and "same collectives in the same order" in msg
    assert not _procs.stray_children()


def test_a_rank_that_dies_while_starting_points_at_the_main_guard(tmp_path):
    """A worker that died before it set up its log (spawn re-importing a script without the
    __main__ guard, a broken environment) left no traceback: the message says where its own
    error went and the usual cause."""
    class Proc:
        def __init__(self, exitcode):
            self.exitcode = exitcode

    def work(rank, world_size):
        return rank

    (tmp_path / "rank0.log").write_text("")  # rank 0 started; rank 1 never got that far
    err = launcher._worker_error(str(tmp_path), [Proc(0), Proc(1)], {1: 0}, work, 60.0)
    msg = str(err)
    assert err.rank == 1 and "rank 1 of 2 exited with code 1 while starting, before it could run" in msg
    assert "stderr" in msg and '`if __name__ == "__main__":` guard' in msg


def test_a_rank_that_starts_later_than_the_collective_timeout_still_joins(monkeypatch):
    """The rendezvous waits for the slowest rank's start (spawn and ``import torch``: several times
    longer on a busy machine); only the collectives after it are bounded by ``collective_timeout_s``
    (a 15 s collective timeout failed a 3-rank launch on a loaded machine)."""
    import _slow_start_worker as S

    monkeypatch.setenv("COURSE_TEST_SLOW_START_S", "6")
    out = cdist.launch(S.rank_after_a_collective, 2, timeout_s=LAUNCH_TIMEOUT_S, collective_timeout_s=2, quiet=True)
    assert out == [(0, 2.0), (1, 2.0)]


def test_run_refuses_malformed_json_arguments():
    """Issue 32: '{"lr": 0.1' was passed to the worker as a plain string."""
    from course_lib import run

    assert run._parse_arg('{"lr": 0.1}') == {"lr": 0.1} and run._parse_arg("4") == 4
    assert run._parse_arg("ml-1m") == "ml-1m"  # a plain word stays a string
    for bad in ('{"lr": 0.1', "[1, 2", "1.2.3", '"unterminated'):
        with pytest.raises(SystemExit, match="looks like JSON but is not valid JSON"):
            run._parse_arg(bad)


def test_a_store_that_cannot_listen_on_loopback_only_says_so(monkeypatch):
    """Issue 32: where TCPStore refused master_listen_fd, the launch fell back, silently, to a store
    listening on every interface."""
    import torch.distributed as tdist

    real = tdist.TCPStore

    def no_listen_fd(*args, **kw):
        if "master_listen_fd" in kw:
            raise TypeError("unexpected keyword argument 'master_listen_fd'")
        return real(*args, **kw)

    monkeypatch.setattr(launcher.dist, "TCPStore", no_listen_fd)
    with pytest.warns(RuntimeWarning, match="listens on all interfaces instead of 127.0.0.1 only"):
        store = launcher._loopback_store(5.0)
    del store
