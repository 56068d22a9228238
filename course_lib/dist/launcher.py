"""``launch()``: multi-process work from a notebook cell, and the supervisor that keeps it safe.

The rank helpers and process groups the workers use are in :mod:`course_lib.dist.groups`; this module
starts the workers, streams their output, brings back their results and errors, and makes sure no
process outlives the cell.

Why ``launch`` looks the way it does (each point is a failure seen in notebooks):

* **never fork the kernel**: fork after CUDA is initialised fails ("Cannot re-initialize CUDA
  in forked subprocess"). Workers are forked from multiprocessing's fork server instead (a
  fresh process that imported torch once: ``_worker_context``), or spawned where there is
  none. Both pickle the function by reference, so it must live in an importable module; a
  function typed into the notebook lives in ``__main__`` and the child fails with ``Can't get
  attribute ... on <module '__main__'>`` (pytorch#20375). We refuse it up front instead.
* **a fresh port on 127.0.0.1 per launch**: the rendezvous store is a ``TCPStore`` that
  the launching process serves from a socket it bound to 127.0.0.1 on port 0 (the OS
  picks a free port) and holds for the launch; workers connect to it as clients. No fixed
  29500 (EADDRINUSE on re-run), no race between "find a free port" and "bind it", nothing
  listening on all interfaces. The workers' own transports are pinned to the loopback
  interface too (``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``): gloo otherwise listens on
  the address the hostname resolves to, the cluster network on an HPC node.
* **results through files, not queues**: each worker ``torch.save``s its return value to
  a private temp dir (atomic rename); large payloads through a queue can hang, and a
  shared-memory tensor read after its worker exited can vanish.
* **no orphans**: each worker asks the kernel to SIGKILL it when its parent dies
  (``PR_SET_PDEATHSIG``, Linux) and also watches its parent pid; on error, interrupt or
  timeout the launcher SIGKILLs each worker's process group. If the launcher itself is
  SIGKILLed, a small watchdog process (its own session, fed through a pipe) kills the
  workers' process groups -- what the workers started: subprocesses, DataLoader workers --
  and removes the run folder. Workers blocked inside a
  gloo/NCCL collective never see a Python signal, so only a forceful kill works, and
  collectives get a finite timeout at ``init_process_group`` as a second line of defence.
* **output in the cell**: workers write stdout/stderr to per-rank log files that the
  launcher streams into the cell prefixed with ``[rank r]``, all of it before ``launch``
  returns (nbval only waits ~5 s for late output).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as _dt
import io
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from ..fileio import atomic_torch_save, atomic_write_text, new_private_temp_dir, pid_alive
from ..hardware import usable_cpu_cores
from .groups import DEFAULT_COLLECTIVE_TIMEOUT_S, LOOPBACK, choose_backend, cleanup


# --------------------------------------------------------------------------- errors


class WorkerError(RuntimeError):
    """A worker raised (or died); carries the failing rank and the worker's traceback."""

    def __init__(self, rank: int, message: str, worker_traceback: str = ""):
        self.rank = rank
        self.worker_traceback = worker_traceback
        super().__init__(message)


class LaunchTimeout(TimeoutError):
    """The workers did not finish within ``timeout_s``; they have been killed."""


# --------------------------------------------------------------------------- worker side


@dataclass(frozen=True)
class _WorkerSpec:
    payload: bytes  # pickle of (fn, args): unpickled in the worker once its environment is the launcher's
    environ: dict  # the launcher's os.environ at launch (a fork server's own is from when it started)
    rank: int
    world_size: int
    backend: str
    port: int
    run_dir: str
    tmp_dir: str | None
    parent_pid: int
    collective_timeout_s: float
    threads: int
    rendezvous_timeout_s: float = 0.0  # 0: the collective timeout (see _rendezvous_timeout)


def _rendezvous_timeout(timeout_s: float | None, collective_timeout_s: float) -> float:
    """How long the ranks may take to meet: the launch's own bound (300 s without one), never less than a
    collective's. Only where torch can set the collective timeout afterwards (else: the collective's)."""
    if _pg_timeout_setter() is None:
        return collective_timeout_s
    return max(collective_timeout_s, timeout_s or DEFAULT_COLLECTIVE_TIMEOUT_S)


def _pg_timeout_setter():
    """torch's ``_set_pg_timeout(timeout, group)`` (torch >= 2.3; private, so looked up, not assumed)."""
    from torch.distributed import distributed_c10d

    return getattr(distributed_c10d, "_set_pg_timeout", None)


def _set_collective_timeout(seconds: float, rendezvous: "_dt.timedelta") -> None:
    """The default group's collective timeout, after a rendezvous that had a longer one (measured with
    torch 2.13 and gloo: a barrier a peer never joins then fails after ``seconds``)."""
    setter = _pg_timeout_setter()
    if setter is not None and rendezvous.total_seconds() != seconds:
        setter(_dt.timedelta(seconds=seconds), None)


def _release_fork_server() -> None:
    """Let go of the fork server's "alive" pipe, inherited from it.

    multiprocessing hands every process forked by the server the write end of the pipe the
    server watches (so that it could fork from the server in turn), and the server exits only
    when every holder is gone. A worker that kept it would keep its own parent alive after the
    launcher died, and neither the parent-death signal nor the parent watch would ever fire."""
    with contextlib.suppress(Exception):
        from multiprocessing import forkserver

        server = forkserver._forkserver
        if server._forkserver_pid is None and server._forkserver_alive_fd is not None:  # inherited, not ours
            os.close(server._forkserver_alive_fd)
            server._forkserver_alive_fd = None
            server._forkserver_address = None


def _die_with_parent(launcher_pid: int) -> None:
    """Make sure this worker cannot outlive the process that launched it.

    The worker's parent is the launcher (spawn) or the launcher's fork server, which exits
    as soon as the launcher is gone (it reads EOF on a pipe only the launcher holds). Either
    way the parent's death is the signal: the kernel's parent-death signal, and a thread that
    exits when the parent pid changes (the worker was reparented)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    parent = os.getppid()
    # The launcher may have died before prctl took effect; and other OSes have no prctl.
    if parent == 1 or not pid_alive(launcher_pid):
        os._exit(1)

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def loopback_interface() -> str:
    """The name of this machine's loopback network interface ("lo" on Linux, "lo0" on macOS)."""
    with contextlib.suppress(Exception):
        import psutil

        for name, addrs in psutil.net_if_addrs().items():
            if any(a.address in (LOOPBACK, "::1") for a in addrs):
                return name
    return "lo0" if sys.platform == "darwin" else "lo"


def _pin_transports_to_loopback() -> None:
    """Make every socket a single-node launch's workers open listen on loopback.

    Pinning the rendezvous store to 127.0.0.1 is not enough: gloo's TCP transport listens
    on (and tells its peers) the address this machine's *hostname* resolves to, falling back
    to 127.0.0.1 only when the hostname does not resolve. On an HPC node the hostname
    resolves to the cluster network, so every notebook's workers would accept connections
    from other nodes. ``GLOO_SOCKET_IFNAME`` makes each gloo device (the default group and
    every ``new_group``) bind the named interface instead; ``NCCL_SOCKET_IFNAME`` does the
    same for NCCL's bootstrap sockets. Both are set unconditionally: ``launch()`` is always
    one node, so a cluster-wide setting inherited from the environment does not apply.
    """
    lo = loopback_interface()
    os.environ["GLOO_SOCKET_IFNAME"] = lo
    os.environ["NCCL_SOCKET_IFNAME"] = lo


def _redirect_output(log_path: str) -> None:
    """Send this process's stdout/stderr (Python and C level) to its rank log file."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), line_buffering=True, write_through=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0), line_buffering=True, write_through=True)




def _worker_main(spec: _WorkerSpec) -> None:
    # A worker forked from the fork server starts with the server's environment, from when the
    # server started: the launcher's own, at this launch, is the one that counts (a notebook may
    # have set COURSE_DATA_DIR, NCCL_DEBUG or CUDA_VISIBLE_DEVICES since).
    os.environ.clear()
    os.environ.update(spec.environ)
    _release_fork_server()
    if spec.tmp_dir:
        # Temporary files of this worker and of everything it starts (multiprocessing's pymp-*
        # folders, DataLoader workers' sockets, the user's own tempfile calls) go inside the
        # launch's run folder, so they go when it goes, whatever way the launch ends.
        os.environ["TMPDIR"] = spec.tmp_dir
        tempfile.tempdir = spec.tmp_dir
    _die_with_parent(spec.parent_pid)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # own process group, so the launcher can kill our children too
    _redirect_output(os.path.join(spec.run_dir, f"rank{spec.rank}.log"))
    os.environ.update(RANK=str(spec.rank), WORLD_SIZE=str(spec.world_size), LOCAL_RANK=str(spec.rank),
                      LOCAL_WORLD_SIZE=str(spec.world_size), MASTER_ADDR=LOOPBACK, MASTER_PORT=str(spec.port))
    _pin_transports_to_loopback()
    torch.set_num_threads(spec.threads)
    code = 0
    try:
        # Unpickling imports the function's module: here, with the launcher's environment and the
        # rank's log in place, a failing import is reported with its traceback like any error.
        fn, args = pickle.loads(spec.payload)
        if spec.backend == "nccl":
            torch.cuda.set_device(spec.rank)
        # The rendezvous waits for the slowest rank to start (spawn, import torch: 2-3 s here, several
        # times that on a busy machine), so it has its own, longer bound; the collectives get theirs
        # once every rank is in (a 15 s collective timeout failed a slow start on a loaded machine).
        meet = _dt.timedelta(seconds=spec.rendezvous_timeout_s or spec.collective_timeout_s)
        store = dist.TCPStore(LOOPBACK, spec.port, world_size=None, is_master=False, timeout=meet)
        dist.init_process_group(spec.backend, store=store, rank=spec.rank, world_size=spec.world_size, timeout=meet)
        # Every rank's side of gloo's full mesh is connected before any rank runs (and maybe
        # exits): a fast worker that returned and tore its group down while a slower peer was
        # still connecting failed that peer's init ("connectFullMesh ... closed by peer").
        dist.barrier()
        _set_collective_timeout(spec.collective_timeout_s, meet)
        result = fn(spec.rank, spec.world_size, *args)
        atomic_torch_save(result, os.path.join(spec.run_dir, f"result{spec.rank}.pt"))
    except BaseException:  # noqa: BLE001 - everything must reach the cell, KeyboardInterrupt too
        atomic_write_text(os.path.join(spec.run_dir, f"error{spec.rank}.txt"), traceback.format_exc())
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    if code == 0:
        with contextlib.suppress(Exception):
            cleanup()
    # After a failure, destroying a group whose peers are gone can block; the launcher
    # kills us anyway. os._exit skips interpreter teardown that can hang in NCCL/gloo.
    os._exit(code)


# --------------------------------------------------------------------------- launcher side


class _LogPump:
    """Streams the workers' log files into this process's stdout, prefixed by rank."""

    def __init__(self, run_dir: str, world_size: int, quiet: bool):
        self.paths = [os.path.join(run_dir, f"rank{r}.log") for r in range(world_size)]
        self.offsets = [0] * world_size
        self.partial = [""] * world_size
        self.quiet = quiet

    def pump(self, final: bool = False) -> None:
        out = []
        for r, path in enumerate(self.paths):
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets[r])
                    chunk = f.read()
            except FileNotFoundError:
                continue
            self.offsets[r] += len(chunk)
            text = self.partial[r] + chunk.decode("utf-8", errors="replace")
            lines = text.split("\n")
            self.partial[r] = "" if final else lines.pop()
            out += [f"[rank {r}] {line}\n" for line in lines if line or not final]
        if out and not self.quiet:
            sys.stdout.write("".join(out))
            sys.stdout.flush()


def _main_script() -> str | None:
    """The file of the script running as ``__main__``, or None in a notebook/interactive kernel."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path or os.path.basename(path) == "ipykernel_launcher.py":
        return None
    return path


def _check_picklable_function(fn: Callable) -> None:
    if not callable(fn):
        raise TypeError(f"launch() needs a function to run on each rank, got {fn!r}")
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    if module == "__main__":
        script = _main_script()
        where = f"the script {script}" if script else "the notebook"
        home = "the script" if script else "the notebook"
        raise ValueError(
            f"launch() cannot run {name!r}: it is defined in {where} (module '__main__').\n"
            f"Workers are new processes that never ran {home} (forked from a fork server, or spawned): "
            "they receive the function by reference (module + name), and have no "
            f"'__main__' of {home}'s to find it in (it would fail with \"Can't get attribute ... on <module "
            f"'__main__'>\").\nPut the function in a .py file next to {home} (or in course_lib) "
            f"and import it from there, e.g. `from my_workers import {name}`.")
    if "<locals>" in name or "<lambda>" in name:
        raise ValueError(
            f"launch() cannot run {name!r}: lambdas and functions defined inside other functions "
            "cannot be pickled into a spawned process. Define it at the top level of a module.")


def _kill_worker(proc) -> None:
    """SIGKILL a worker and its process group. Collectives ignore gentler signals."""
    if proc.pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.kill(proc.pid, signal.SIGKILL)


def _stop_all(procs) -> None:
    for p in procs:
        if p.pid is not None and p.exitcode is None:
            _kill_worker(p)
    for p in procs:
        if p.pid is not None:
            p.join(timeout=10)
        # The worker's own children (e.g. DataLoader workers) share its process group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if p.pid is not None:
                os.killpg(p.pid, signal.SIGKILL)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (SIGKILL often means the machine ran out of memory)" if -code == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {code}"


def _loopback_store(timeout_s: float) -> "dist.TCPStore":
    """The rendezvous store for one launch, listening on 127.0.0.1 only, on a port the OS picks.

    Given a host and port 0, TCPStore's server still listens on all interfaces (seen with
    torch 2.13: ``*:<port>`` in ``ss -ltn``), which a shared login node must not do. So we
    bind the listening socket ourselves and hand it over (``master_listen_fd``; the store
    takes ownership and closes it). Where that is not supported, fall back to port 0.
    """
    import socket

    timeout = _dt.timedelta(seconds=timeout_s)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((LOOPBACK, 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        store = dist.TCPStore(LOOPBACK, port, world_size=None, is_master=True, wait_for_workers=False,
                              timeout=timeout, master_listen_fd=sock.fileno())
        sock.detach()  # the store owns the fd now
        return store
    except (RuntimeError, TypeError, ValueError) as exc:
        sock.close()
        import warnings

        # not silently: on a shared login node every user can reach this port meanwhile
        warnings.warn(f"launch: this torch cannot take a listening socket for its rendezvous store "
                      f"(TCPStore(master_listen_fd=...): {type(exc).__name__}: {exc}); the store of this launch "
                      "listens on all interfaces instead of 127.0.0.1 only, reachable by other users and hosts "
                      "while the launch runs. On a shared machine, use a torch whose TCPStore takes master_listen_fd "
                      "(Linux).", RuntimeWarning, stacklevel=3)
        return dist.TCPStore(LOOPBACK, 0, world_size=None, is_master=True, wait_for_workers=False,
                             timeout=timeout)


class _InterruptShield:
    """Once a launch starts cleaning up, further SIGINTs wait until the cleanup is done.

    A burst of interrupts (an impatient Ctrl-C, Jupyter's interrupt button pressed again)
    used to land inside the cleanup after the first one and abort it, leaving workers and
    the run folder behind. The handler raises ``KeyboardInterrupt`` as usual the first time
    and shields everything after; an interrupt that arrives during the cleanup of a launch
    that was not already failing is raised once the cleanup is done. Only in the main thread
    (Python runs signal handlers there); elsewhere nothing changes.
    """

    def __init__(self):
        self.shielding = False
        self.pending = False
        self.previous = None
        self.installed = False

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if callable(previous):  # not SIG_IGN/SIG_DFL, nor a handler set outside Python
                self.previous = previous
                signal.signal(signal.SIGINT, self._handle)
                self.installed = True
        return self

    def _handle(self, signum, frame):
        if self.shielding:
            self.pending = True
            return
        self.shielding = True  # set before raising: the next interrupt may come at any bytecode
        if self.previous is not signal.default_int_handler:
            self.previous(signum, frame)  # a custom handler (if it raises, that starts the cleanup)
            self.shielding = False  # it chose not to interrupt
            return
        raise KeyboardInterrupt

    def __exit__(self, exc_type, exc, tb):
        if self.installed:
            signal.signal(signal.SIGINT, self.previous)
        if self.pending and exc_type is None:
            raise KeyboardInterrupt
        return False


# The watchdog: a tiny process per launch, in its own session (a Ctrl-C or a kill of the
# kernel's process group does not reach it), that reads the launcher's pipe. The launcher
# writes each worker's process group to it, and "done" once it has cleaned up itself. EOF
# without "done" means the launcher died without cleaning up (SIGKILL, the OOM killer): the
# workers themselves die by their parent-death signal, but not what they started (a
# subprocess, DataLoader workers, multiprocessing's resource tracker), which share their
# process group. So the watchdog SIGKILLs those groups and removes the run folder.
_WATCHDOG_CODE = r"""
import os, shutil, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
fd, run_dir = int(sys.argv[1]), sys.argv[2]
groups, paths, done, buf = [], [run_dir], False, b""
while True:
    try:
        chunk = os.read(fd, 4096)
    except InterruptedError:
        continue
    except OSError:
        chunk = b""
    if not chunk:
        break
    buf += chunk
    *lines, buf = buf.split(b"\n")
    for line in lines:
        if line == b"done":
            done = True
        elif line.startswith(b"group "):
            groups.append(int(line[6:]))
        elif line.startswith(b"path "):
            paths.append(os.fsdecode(line[5:]))
if not done:
    for attempt in range(3):  # again: a child may have forked while the group was being killed
        for g in groups:
            for kill in (os.killpg, os.kill):
                try:
                    kill(g, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.2)
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
"""


class _Watchdog:
    """Kills the workers' process groups and removes the run folder if the launcher dies first."""

    def __init__(self, run_dir: str):
        import subprocess

        self.proc = None
        self.fd = None
        read_fd, write_fd = os.pipe()  # not inheritable: only this process holds the write end
        try:
            # -I -S: no user site, no PYTHON* variables, no site imports: starts in ~20 ms and
            # cannot be redirected to other code by the environment
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG_CODE, str(read_fd), run_dir],
                pass_fds=(read_fd,), start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.fd = write_fd
        except OSError:
            os.close(write_fd)  # no watchdog: the parent-death signal still stops the workers
        finally:
            os.close(read_fd)

    def watch_group(self, pgid: int) -> None:
        self._send(f"group {pgid}\n")

    def watch_path(self, path: str) -> None:
        """Also remove ``path`` (a folder) if the launcher dies first."""
        if "\n" not in path:
            self._send(f"path {path}\n")

    def _send(self, line: str) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.write(self.fd, line.encode())

    def stand_down(self) -> None:
        """The launcher cleaned up itself: tell the watchdog to exit without doing anything."""
        self._send("done\n")
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
        if self.proc is not None:
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=10)


# AF_UNIX socket paths are limited to 107 bytes: multiprocessing puts listeners at
# <tmp>/pymp-XXXXXXXX/listener-XXXXXXXX, so the workers' temp dir must leave room for that.
_MAX_WORKER_TMP_LEN = 70


def _multiprocessing_temp_dir() -> str | None:
    """multiprocessing's temp folder in this process (``pymp-*``: the fork server's socket), if made.

    It is removed when this process exits normally; the watchdog removes it when it does not."""
    from multiprocessing import process

    with contextlib.suppress(Exception):
        return process.current_process()._config.get("tempdir")  # set by multiprocessing.util.get_temp_dir
    return None


# AF_UNIX socket paths are limited to 107 bytes (Linux; 103 on macOS). The fork server listens at
# <mp temp dir>/listener-XXXXXXXX, and multiprocessing makes its temp dir as <tmp>/pymp-XXXXXXXX.
_MAX_SOCKET_PATH = 100


def _fork_server_can_listen() -> bool:
    """Whether the fork server runs already, or its socket path would fit: an HPC job's $TMPDIR can
    be long enough that it would not ("AF_UNIX path too long"), and then workers are spawned."""
    with contextlib.suppress(Exception):
        from multiprocessing import forkserver

        if forkserver._forkserver._forkserver_address is not None:
            return True
    mp_tmp = _multiprocessing_temp_dir()
    folder = len(mp_tmp) if mp_tmp else len(tempfile.gettempdir()) + len("/pymp-XXXXXXXX")
    return folder + len("/listener-XXXXXXXX") <= _MAX_SOCKET_PATH


def _worker_context():
    """Where the workers come from: multiprocessing's fork server, with torch imported once.

    A spawned worker is a fresh interpreter that imports torch: 2-3 s of CPU per rank idle
    (and 1.7 s more for torch._dynamo at the first optimizer step), far more on a busy login
    node, paid again at every launch. The fork server is started by
    the first launch from this process (a kernel, a script), imports torch once, and forks
    each later worker from that state in milliseconds. It has spawn's safety: the server is a
    fresh process that never touches CUDA, and each worker still receives this process's
    sys.path, working directory and main module (multiprocessing's preparation data) and,
    from ``_worker_main``, its environment at the time of the launch. Its cost: one idle
    process holding torch's memory (a few hundred MB) while the kernel lives; it exits with
    the kernel. Where there is no fork server (Windows), workers are spawned."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods() or not _fork_server_can_listen():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    # Modules only, never '__main__': a script without the main guard must fail in its workers
    # (with the message that says so), not in the server. The list: course_lib/_forkserver_preload.py.
    ctx.set_forkserver_preload(["course_lib._forkserver_preload"])
    return ctx


def worker_start_method() -> str:
    """How ``launch`` starts its workers in this process: ``"forkserver"`` (torch imported once, by the fork
    server the first launch starts) or ``"spawn"`` (a fresh interpreter per worker, each importing torch)."""
    return _worker_context().get_start_method()


def fork_server_running() -> bool:
    """Whether this process's fork server is up already (started by an earlier launch): a launch then forks
    its workers from it and imports no torch again (each worker still imports its function's module)."""
    from multiprocessing import forkserver

    return forkserver._forkserver._forkserver_address is not None


def launch(fn: Callable, world_size: int, *args, backend: str = "auto", timeout_s: float | None = 3600.0,
           collective_timeout_s: float | None = None, threads_per_worker: int | None = None,
           quiet: bool = False) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` fresh processes; return their results.

    Each worker starts with the process group initialised (gloo on CPU, NCCL with one GPU
    per rank when there are enough GPUs). Returns the workers' return values as a list
    indexed by rank (loaded on the CPU). ``fn`` must live in an importable module.

    Raises ``WorkerError`` (with the rank and the worker's traceback) when a worker fails,
    ``LaunchTimeout`` after ``timeout_s``, and re-raises ``KeyboardInterrupt``; in every
    case all workers are killed and the temp dir removed before this returns.

    ``collective_timeout_s`` bounds each collective (default: the smaller of ``timeout_s``
    and 300 s). ``threads_per_worker`` defaults to an even share of the usable cores.

    Run settings among ``args`` are checked against ``world_size`` here, before any process
    starts: an argument with a ``check_world_size(world_size)`` method (``TrainConfig``,
    ``MLMTrainConfig``: a global batch that does not split over the ranks) raises in the cell.
    """
    _check_picklable_function(fn)
    backend = choose_backend(world_size, backend)
    for arg in args:
        for item in arg if isinstance(arg, (list, tuple)) else (arg,):
            if callable(getattr(item, "check_world_size", None)):
                item.check_world_size(world_size)
    try:
        payload = pickle.dumps((fn, args))
    except Exception as exc:
        raise TypeError(f"launch(): the function or its arguments cannot be pickled for the workers: {exc}") from exc
    if collective_timeout_s is None:
        collective_timeout_s = min(timeout_s or DEFAULT_COLLECTIVE_TIMEOUT_S, DEFAULT_COLLECTIVE_TIMEOUT_S)
    threads = threads_per_worker or max(1, usable_cpu_cores() // world_size)
    with _InterruptShield() as shield:
        return _launch(fn, payload, world_size, backend, timeout_s, collective_timeout_s, threads, quiet, shield)


def _launch(fn, payload, world_size, backend, timeout_s, collective_timeout_s, threads, quiet, shield) -> list:
    ctx = _worker_context()
    run_dir = store = pump = watchdog = None
    procs: list = []
    start = time.monotonic()
    try:
        # mode 0700, private to this user; named with this host and pid, so that the next
        # launch removes it if this process is SIGKILLed before its own cleanup runs
        run_dir = new_private_temp_dir("course-launch-")
        tmp_dir = _worker_tmp_dir(run_dir)
        pump = _LogPump(run_dir, world_size, quiet)
        watchdog = _Watchdog(run_dir)
        meet_s = _rendezvous_timeout(timeout_s, collective_timeout_s)
        store = _loopback_store(meet_s)
        specs = [_WorkerSpec(payload, dict(os.environ), r, world_size, backend, store.port, run_dir, tmp_dir,
                             os.getpid(), float(collective_timeout_s), threads, float(meet_s))
                 for r in range(world_size)]
        _start_workers(ctx, specs, procs, watchdog)
        failed, exited_ns = _wait_for_workers(procs, pump, start, timeout_s, fn)
        if failed:
            _let_others_report(procs, exited_ns)
            _stop_all(procs)
            pump.pump(final=True)
            raise _worker_error(run_dir, procs, exited_ns, fn, collective_timeout_s)
        pump.pump(final=True)
        return [_load_result(run_dir, r, world_size, fn) for r in range(world_size)]
    except KeyboardInterrupt:
        shield.shielding = True
        _stop_all(procs)
        if pump is not None:
            pump.pump(final=True)
        print(f"launch(): interrupted; all {len(procs)} worker(s) were killed.", file=sys.stderr)
        raise
    finally:
        shield.shielding = True  # from here on, an interrupt waits for the cleanup
        _stop_all(procs)
        del store
        if run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
        if watchdog is not None:
            watchdog.stand_down()


def _worker_tmp_dir(run_dir: str) -> str | None:
    """The workers' private temp folder inside ``run_dir``, or None when its path would be too long."""
    tmp_dir = os.path.join(run_dir, "tmp")
    os.mkdir(tmp_dir, 0o700)
    if len(tmp_dir) > _MAX_WORKER_TMP_LEN:
        # A very long $TMPDIR: the workers' temp files stay where they were (removed by
        # their own finalizers; after a SIGKILL their pymp-* folders remain there).
        return None
    return tmp_dir


def _start_workers(ctx, specs: list, procs: list, watchdog: "_Watchdog") -> None:
    """Start one worker per spec, appending each to ``procs`` as soon as it runs (so that the caller's
    cleanup stops every started one even if a later start fails), and put them under the watchdog."""
    for spec in specs:
        p = ctx.Process(target=_worker_main, args=(spec,), name=f"course-worker-{spec.rank}", daemon=False)
        p.start()
        procs.append(p)
        watchdog.watch_group(p.pid)  # the worker makes itself the leader of group p.pid
    mp_tmp = _multiprocessing_temp_dir()
    if mp_tmp:  # the fork server's socket lives there, as long as this process; after a SIGKILL, not longer
        watchdog.watch_path(mp_tmp)


def _wait_for_workers(procs: list, pump: "_LogPump", start: float, timeout_s, fn) -> tuple[list[int], dict]:
    """Relay the workers' output until all succeed or one fails; the failed ranks and when the launcher
    first saw each worker gone. Past ``timeout_s``, kill them all and raise :class:`LaunchTimeout`."""
    from multiprocessing.connection import wait as wait_any

    exited_ns: dict[int, int] = {}  # when the launcher first saw each worker gone
    while True:
        pump.pump()
        codes = [p.exitcode for p in procs]
        exited_ns.update({r: time.time_ns() for r, c in enumerate(codes) if c is not None and r not in exited_ns})
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed or all(c == 0 for c in codes):
            return failed, exited_ns
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            _stop_all(procs)
            pump.pump(final=True)
            raise LaunchTimeout(
                f"launch(): {len(procs)} worker(s) running {fn.__qualname__} did not finish within "
                f"timeout_s={timeout_s:g} s; all workers were killed. If the work is just slow, pass a "
                "larger timeout_s; if a rank waits in a collective that another rank never joins, "
                "check that every rank calls the same collectives in the same order.")
        wait_any([p.sentinel for p in procs if p.exitcode is None], timeout=0.1)


def _let_others_report(procs: list, exited_ns: dict) -> None:
    """After a failure, let the other ranks report their own errors for a moment (they usually fail
    with "connection closed by peer" once the first one is gone), noting when each is seen gone."""
    from multiprocessing.connection import wait as wait_any

    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and any(p.exitcode is None for p in procs):
        wait_any([p.sentinel for p in procs if p.exitcode is None], timeout=0.1)
        exited_ns.update({r: time.time_ns() for r, p in enumerate(procs)
                          if p.exitcode is not None and r not in exited_ns})


def _load_result(run_dir: str, r: int, world_size: int, fn) -> object:
    """Rank ``r``'s return value. A value that pickled in the worker can still fail to rebuild
    here (its class lives in a module only the worker imported); say which rank and why."""
    path = os.path.join(run_dir, f"result{r}.pt")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)  # our own files
    except Exception as exc:  # noqa: BLE001 - any unpickling error: name the rank
        raise WorkerError(
            r, f"rank {r} of {world_size} finished {fn.__qualname__}, but its return value could not be "
               f"rebuilt in the launching process ({type(exc).__name__}: {exc}). A worker's result is "
               "pickled and loaded here, so every class in it must be importable here too. Return plain "
               "data (tensors, numbers, strings, lists, dicts) or objects of classes from an importable "
               "module that this process can import.") from exc


# What a rank's collective raises when a peer's process is gone (gloo's TCP pairs; NCCL's proxy).
_PEER_LOST = re.compile(r"connection (reset|closed) by peer|socket closed|broken pipe|remote process exited",
                        re.IGNORECASE)


def _worker_error(run_dir: str, procs, exited_ns: dict[int, int], fn,
                  collective_timeout_s: float | None = None) -> WorkerError:
    """Build the error for the rank that failed first (the cause), mentioning the others.

    When one rank raises, its peers fail moments later in their pending collective
    ("connection closed by peer"), often before the launcher's next poll sees the first
    one gone. The root cause is the rank whose error was written first (each worker writes
    its traceback before it exits); a rank that died without one (a signal) counts from
    when the launcher saw it exit.
    """
    def error_path(r):
        return os.path.join(run_dir, f"error{r}.txt")

    def read_tb(r):
        return open(error_path(r)).read() if os.path.exists(error_path(r)) else ""

    def failed_at_ns(r):
        # a rank we killed ourselves after the grace period was never seen exiting: it sorts last
        return os.stat(error_path(r)).st_mtime_ns if os.path.exists(error_path(r)) else exited_ns.get(r, sys.maxsize)

    def follows_a_peer(r):
        # A rank whose last error line says its peer's connection went away failed *because* another
        # rank died; so did one we killed after the grace period. Any other failure comes first, even
        # if written later: a rank SIGKILLed (the OOM killer) is seen by the launcher only at its next
        # poll, and on a busy machine a peer can write "Connection reset by peer" before that
        # (rank 0's reset was then blamed for rank 1's SIGKILL).
        tb = read_tb(r).strip()
        if tb:
            return bool(_PEER_LOST.search(tb.splitlines()[-1]))
        return r not in exited_ns

    ranks = sorted((r for r, p in enumerate(procs) if p.exitcode not in (None, 0)),
                   key=lambda r: (follows_a_peer(r), failed_at_ns(r)))
    chosen = ranks[0]
    tb = read_tb(chosen)
    code = procs[chosen].exitcode
    if tb:
        last = tb.strip().splitlines()[-1]
        msg = f"rank {chosen} of {len(procs)} failed in {fn.__qualname__}: {last}"
        if collective_timeout_s is not None and re.search(r"timed out|timeout", last, re.IGNORECASE):
            msg += (f" -- a collective waited longer than collective_timeout_s={collective_timeout_s:g} s (or the "
                    "ranks' rendezvous longer than the launch's timeout). Usually another rank never joined it: "
                    "check that every rank "
                    "calls the same collectives in the same order. If the ranks are only slow (a busy "
                    "machine, a long first step), pass a larger collective_timeout_s to launch().")
    elif not os.path.exists(os.path.join(run_dir, f"rank{chosen}.log")):
        msg = (f"rank {chosen} of {len(procs)} {_describe_exit(code)} while starting, before it could run "
               f"{fn.__qualname__} (its own error went to the launching process's stderr: the terminal, "
               "or the Jupyter server's log). A script that calls launch() needs the "
               "`if __name__ == \"__main__\":` guard, because each worker re-imports the main script (spawn and "
               "the fork server both do).")
    else:
        msg = f"rank {chosen} of {len(procs)} {_describe_exit(code)} while running {fn.__qualname__}"
    others = [r for r in ranks if r != chosen]
    if others:
        msg += f" (rank(s) {others} stopped too; the other workers were killed)"
    if tb:
        msg += f"\n\n--- traceback from rank {chosen} ---\n{tb}"
    return WorkerError(chosen, msg, tb)


