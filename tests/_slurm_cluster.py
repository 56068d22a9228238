"""A one-node SLURM cluster started by the tests: munged, slurmctld and slurmd, all in a temp dir.

Debian's ``slurmctld``, ``slurmd``, ``slurm-client`` and ``munge`` packages (``ci/install-slurm.sh``
installs them when the suite runs as root). Nothing of the machine's own SLURM or MUNGE set-up is
used or touched: the MUNGE key and socket, ``slurm.conf``, the state, spool and log directories
all live in a fresh ``tempfile.mkdtemp`` directory; the controller and the node daemon listen on
free ports of 127.0.0.1. ``CommunicationParameters=NoCtldInAddrAny,NoInAddrAny`` makes them bind
the address the machine's *hostname* resolves to instead of all interfaces (measured: with
``SlurmctldHost=localhost(127.0.0.1)`` too); where that is not a loopback address (a Docker
container's hostname maps to its network address) slurmctld and slurmd run in a private mount
namespace whose ``/etc/hosts`` maps the hostname to 127.0.0.1 (``unshare --mount``, root), and
so do the jobs they start. No cgroup plugin: a container rarely lets a daemon manage cgroups,
so processes are tracked by parentage (``proctrack/linuxproc``) and tasks are not bound.

Every daemon runs in the foreground (``-D``/``--foreground``) in its own process group, a child
of the test process; :meth:`Cluster.stop` cancels the jobs, kills the groups and then looks for
*any* process that still carries this cluster's ``SLURM_CONF`` in its environment or its
directory on its command line, or (``slurmstepd``, which leaves slurmd's process group with a
clean environment) a file of that directory open; kills them and reports them: the caller turns
that into a test failure. If the test process dies before that (SIGKILL, a CI job's timeout), a
small watchdog in its own session, fed through a pipe, does the killing and removes the directory.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from _procs import free_port
from _timing import scaled

COMMANDS = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue", "scontrol", "scancel")
PACKAGES = "slurmctld slurmd slurm-client munge"


class SlurmUnavailable(RuntimeError):
    """This machine cannot run the cluster; the message says which command failed and how."""


def unavailable_reason() -> str | None:
    """Why the cluster cannot start here before trying (missing programs, not root), else None."""
    missing = [c for c in COMMANDS if shutil.which(c, path=_sbin_path()) is None]
    if missing:
        return (f"SLURM/MUNGE programs not found: {', '.join(missing)}. Install Debian's {PACKAGES} "
                "(make test does it when run as root: ci/install-slurm.sh)")
    if os.geteuid() != 0:
        return ("slurmd must run as root to start jobs (it switches to the job's user); "
                "run the SLURM tests as root, e.g. in a container")
    return None


def _sbin_path() -> str:
    path = os.environ.get("PATH", "")
    return os.pathsep.join([path, "/usr/sbin", "/sbin"])


def hostname_is_loopback() -> bool:
    """Whether every address this machine's hostname resolves to is a loopback address
    (False when it does not resolve: the private ``/etc/hosts`` then gives it one)."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except socket.gaierror:
        return False
    return all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return f"({path.name} was not written)"


# The lines both clusters' slurm.conf share: how the daemons authenticate (MUNGE, the test's own socket), and a
# scheduler with nothing to account, track or bind (the tests want placement and signals, not policy)
_AUTH_CONF = """\
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
StateSaveLocation={root}/state
"""
_SCHEDULER_CONF = """\
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
SlurmctldTimeout=60
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=600
"""

SLURM_CONF = """\
# A one-node cluster for the course's tests (tests/_slurm_cluster.py); everything in {root}
ClusterName=course-test
SlurmctldHost={ctld_host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
""" + _AUTH_CONF + """SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
""" + _SCHEDULER_CONF + """NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=course Nodes={node} Default=YES MaxTime=30 State=UP
"""


class Cluster:
    """``with Cluster() as c:`` munged + slurmctld + slurmd, stopped on every exit path."""

    def __init__(self, cpus: int = 2, memory_mb: int = 1000, key_bytes: int = 1024,
                 private_hosts: bool | None = None):
        """``private_hosts``: run the SLURM daemons with the hostname mapped to 127.0.0.1 in their own
        ``/etc/hosts`` (None: when the hostname does not resolve to a loopback address here)."""
        self.cpus, self.memory_mb, self.key_bytes = cpus, memory_mb, key_bytes
        self.node = socket.gethostname().split(".")[0]  # slurmd's own node name: the short hostname
        self.ctld_host = self.node
        self.private_hosts = not hostname_is_loopback() if private_hosts is None else private_hosts
        self.root: Path | None = None
        self.daemons: list[tuple[str, subprocess.Popen, Path]] = []
        self.start_s: float | None = None
        self._watchdog: subprocess.Popen | None = None
        self.listening: list[str] = []

    # ------------------------------------------------------------------ start
    def __enter__(self) -> "Cluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        leftovers = self.stop()
        if leftovers and exc[0] is None:
            raise AssertionError(f"processes of the test cluster outlived it (killed now): {leftovers}")

    @property
    def env(self) -> dict:
        """The environment for SLURM's commands (and, through ``--export=ALL``, the jobs)."""
        return {**os.environ, "SLURM_CONF": str(self.root / "slurm.conf"), "PATH": _sbin_path()}

    def start(self) -> None:
        t0 = time.monotonic()
        self.root = Path(tempfile.mkdtemp(prefix="course-slurm-"))
        # if this process dies without stop() (SIGKILL, a CI job's timeout), the watchdog cleans up
        self._watchdog = subprocess.Popen([sys.executable, __file__, "--watch", str(self.root)],
                                          stdin=subprocess.PIPE, start_new_session=True)
        # munged insists that every directory above its socket is searchable by all
        self.root.chmod(0o755)
        for d in ("munge", "state", "spool", "log", "jobs"):
            (self.root / d).mkdir()
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(self.key_bytes))
        key.chmod(0o400)
        (self.root / "slurm.conf").write_text(SLURM_CONF.format(
            root=self.root, node=self.node, ctld_host=self.ctld_host, ctld_port=free_port(), slurmd_port=free_port(),
            cpus=self.cpus, memory_mb=self.memory_mb))
        m = self.root / "munge"
        self._daemon("munged", ["munged", "--foreground", f"--socket={m}/munge.socket", f"--key-file={key}",
                                f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log",
                                f"--seed-file={m}/munged.seed"],
                     ready=lambda: (m / "munge.socket").exists())
        conf = str(self.root / "slurm.conf")
        self._daemon("slurmctld", self._hosts_mapped(["slurmctld", "-D", "-f", conf]), ready=self._controller_answers)
        self._daemon("slurmd", self._hosts_mapped(["slurmd", "-D", "-f", conf, "-N", self.node]), ready=self._node_idle)
        self.start_s = time.monotonic() - t0
        self.listening = self.listening_sockets()

    def _hosts_mapped(self, cmd: list[str]) -> list[str]:
        """``cmd`` in a private mount namespace where the hostname resolves to 127.0.0.1 (if asked)."""
        if not self.private_hosts:
            return cmd
        hosts = self.root / "hosts"
        names = {socket.gethostname(), self.node}
        kept = [line for line in Path("/etc/hosts").read_text().splitlines()
                if not names & set(line.split("#")[0].split()[1:])]
        hosts.write_text("\n".join([f"127.0.0.1 {' '.join(sorted(names))}", *kept]) + "\n")
        return ["unshare", "--mount", "--propagation", "private", "--",
                "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts), *cmd]

    def _daemon(self, name: str, cmd: list[str], ready) -> None:
        log = self.root / "log" / f"{name}.out"
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self.env, start_new_session=True)
        self.daemons.append((name, proc, log))
        deadline = time.monotonic() + scaled(60)
        while not ready():
            if proc.poll() is not None:
                raise SlurmUnavailable(f"`{' '.join(cmd)}` exited with status {proc.returncode}:\n{_tail(log)}")
            if time.monotonic() > deadline:
                raise SlurmUnavailable(f"`{' '.join(cmd)}` did not become ready within {scaled(60):.0f} s:\n"
                                       f"{_tail(log)}")
            time.sleep(0.2)

    def _controller_answers(self) -> bool:
        return self.run("scontrol", "ping", check=False).returncode == 0

    def _node_idle(self) -> bool:
        return self.run("sinfo", "-h", "-n", self.node, "-o", "%T", check=False).stdout.strip() == "idle"

    def listening_sockets(self) -> list[str]:
        """``"name address:port"`` for every TCP socket the daemons listen on."""
        found = []
        for _, proc, _ in self.daemons:
            try:
                p = psutil.Process(proc.pid)
                for c in p.net_connections(kind="inet"):
                    if c.status == psutil.CONN_LISTEN:
                        found.append(f"{p.name()} {c.laddr.ip}:{c.laddr.port}")
            except psutil.NoSuchProcess:
                pass
        return found

    # ------------------------------------------------------------------ use
    def run(self, *cmd: str, check: bool = True, timeout: float | None = None, **kw) -> subprocess.CompletedProcess:
        """A SLURM command against this cluster; ``check``: raise with its output when it fails."""
        r = subprocess.run(cmd, env=kw.pop("env", self.env), capture_output=True, text=True,
                           timeout=timeout or scaled(60), **kw)
        if check and r.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` failed ({r.returncode}): {r.stdout}{r.stderr}")
        return r

    def sbatch(self, script: str | os.PathLike, *args: str, options: list[str] = (), env: dict | None = None,
               workdir: str | os.PathLike) -> int:
        """Submit ``script args`` from ``workdir`` (the job's working directory); the job id."""
        r = self.run("sbatch", "--parsable", *options, str(script), *args, cwd=workdir, env={**self.env, **(env or {})})
        return int(r.stdout.strip().split(";")[0])

    def job_state(self, job_id: int) -> dict:
        """``scontrol show job``'s fields (JobState, ExitCode, ...) as a dict."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id)).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait_job(self, job_id: int, timeout_s: float, until=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                                                 "NODE_FAIL", "OUT_OF_MEMORY")) -> dict:
        """Poll until the job reaches one of the ``until`` states; its fields."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.job_state(job_id)
            if state.get("JobState") in until:
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {state.get('JobState')} after {timeout_s:.0f} s")
            time.sleep(0.25)

    def processes(self) -> list[psutil.Process]:
        """Every process of this cluster: daemons, slurmstepd, the jobs' processes."""
        return cluster_processes(self.root) if self.root is not None else []

    def job_processes(self, job_id: int) -> list[psutil.Process]:
        """Processes of one job (``SLURM_JOB_ID`` in their environment), slurmstepd included."""
        found = []
        for p in self.processes():
            try:
                if p.environ().get("SLURM_JOB_ID") == str(job_id) or f"[{job_id}." in " ".join(p.cmdline()):
                    found.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        return found

    # ------------------------------------------------------------------ stop
    def stop(self) -> list[str]:
        """Cancel every job, stop the daemons (their process groups), kill whatever of this cluster
        is left and remove its directory. Returns the leftovers that had to be killed."""
        if self.root is None:
            return []
        if any(name == "slurmctld" and proc.poll() is None for name, proc, _ in self.daemons):
            try:  # the controller may not answer (it failed to start): the kills below still run
                self.run("scancel", "--full", "--partition=course", check=False, timeout=scaled(15))
                deadline = time.monotonic() + scaled(30)
                while self.run("squeue", "-h", check=False, timeout=scaled(15)).stdout.strip() \
                        and time.monotonic() < deadline:
                    time.sleep(0.25)
            except subprocess.TimeoutExpired:
                pass
        for _, proc, _ in reversed(self.daemons):
            _stop_group(proc)
        leftovers = kill_all(self.root)
        shutil.rmtree(self.root, ignore_errors=True)
        if self._watchdog is not None:
            self._watchdog.communicate(b"done\n", timeout=scaled(30))
        self.root, self.daemons, self._watchdog = None, [], None
        return leftovers


# Several nodes: the nodes of a virtual cluster (course_lib/cluster.py), each a network, UTS and
# mount namespace with its own hostname and address. slurmctld runs on the first node (the head node, also
# the "login node" SLURM's commands run on: the host's own namespace has no route to the nodes), and one
# slurmd on every node, inside that node's namespaces, so that what it starts (slurmstepd, the job's tasks)
# runs there too. Every slurmd reads the same slurm.conf; its spool, pid and log files are per node through
# slurm.conf's %n (the node's name), and every daemon listens on the standard ports of its own node's
# address: no port can clash across namespaces. Debian's SLURM is not built with --enable-multiple-slurmd,
# and needs not be: each slurmd is alone on its "host".
MULTI_NODE_CONF = """\
# A {count}-node cluster on a virtual cluster's nodes for the course's tests (tests/_slurm_cluster.py); all in {root}
ClusterName=course-test
SlurmctldHost={head}({head_addr})
SlurmctldPort=6817
SlurmdPort=6818
""" + _AUTH_CONF + """SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
""" + _SCHEDULER_CONF + """{node_lines}
PartitionName=course Nodes={node_list} Default=YES MaxTime=30 State=UP
"""


class MultiNodeCluster(Cluster):
    """``with MultiNodeCluster(virtual) as c:`` munged (the host's, its socket on the shared file system),
    slurmctld on the virtual cluster's first node and one slurmd on each of its nodes."""

    def __init__(self, virtual, cpus: int = 2, memory_mb: int = 1000, key_bytes: int = 1024):
        super().__init__(cpus=cpus, memory_mb=memory_mb, key_bytes=key_bytes, private_hosts=False)
        self.virtual = virtual
        self.node = self.ctld_host = virtual.nodes[0].name  # the head node; SLURM's commands run there
        self.nodes = [n.name for n in virtual.nodes]

    def start(self) -> None:
        t0 = time.monotonic()
        self.root = Path(tempfile.mkdtemp(prefix="course-slurm-"))
        self._watchdog = subprocess.Popen([sys.executable, __file__, "--watch", str(self.root)],
                                          stdin=subprocess.PIPE, start_new_session=True)
        self.root.chmod(0o755)
        for d in ("munge", "state", "spool", "log", "jobs"):
            (self.root / d).mkdir()
        for n in self.nodes:
            (self.root / "spool" / n).mkdir()
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(self.key_bytes))
        key.chmod(0o400)
        head = self.virtual.nodes[0]
        (self.root / "slurm.conf").write_text(MULTI_NODE_CONF.format(
            root=self.root, count=len(self.nodes), head=head.name, head_addr=head.address,
            node_list=",".join(self.nodes),
            node_lines="\n".join(f"NodeName={n.name} NodeAddr={n.address} CPUs={self.cpus} "
                                 f"RealMemory={self.memory_mb} State=UNKNOWN" for n in self.virtual.nodes)))
        m = self.root / "munge"
        self._daemon("munged", ["munged", "--foreground", f"--socket={m}/munge.socket", f"--key-file={key}",
                                f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log",
                                f"--seed-file={m}/munged.seed"],
                     ready=lambda: (m / "munge.socket").exists())
        conf = str(self.root / "slurm.conf")
        self._daemon("slurmctld", self.virtual.command(head.name, ["slurmctld", "-D", "-f", conf], cwd=str(self.root)),
                     ready=self._controller_answers)
        for n in self.nodes:
            self._daemon(f"slurmd-{n}", self.virtual.command(n, ["slurmd", "-D", "-f", conf, "-N", n],
                                                             cwd=str(self.root)),
                         ready=lambda n=n: self._state_of(n) in ("idle", "mixed", "allocated"))
        self.start_s = time.monotonic() - t0
        self.listening = self.listening_sockets()

    def listening_sockets(self) -> list[str]:
        """``"node address:port"`` for every TCP socket listening in the nodes (psutil looks only in the
        host's network namespace, so ``ss`` runs in each node)."""
        found = []
        for n in self.nodes:
            out = subprocess.run(self.virtual.command(n, ["ss", "-Hltn"], cwd="/"), capture_output=True, text=True)
            found += [f"{n} {line.split()[3]}" for line in out.stdout.splitlines() if line.strip()]
        return found

    def _state_of(self, node: str) -> str:
        return self.run("sinfo", "-h", "-n", node, "-o", "%T", check=False).stdout.strip()

    def run(self, *cmd: str, check: bool = True, timeout: float | None = None, **kw) -> subprocess.CompletedProcess:
        """A SLURM command on the head node (the host's namespace has no route to the controller)."""
        cwd = kw.pop("cwd", None)
        line = self.virtual.command(self.node, list(cmd), cwd=str(cwd) if cwd else str(self.root))
        return super().run(*line, check=check, timeout=timeout, **kw)


def cluster_processes(root: Path) -> list[psutil.Process]:
    """Every process of the cluster in ``root``: its SLURM_CONF in the environment, its directory on
    the command line, or (slurmstepd, which gets a clean environment) slurmd's log file open."""
    # "ROOT/": the watchdog's own command line has ROOT without the slash
    conf, mine, found = str(root / "slurm.conf"), f"{root}/", []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        if p.pid == os.getpid():
            continue
        try:
            if (any(mine in a for a in (p.info["cmdline"] or [])) or p.environ().get("SLURM_CONF") == conf
                    or p.info["name"] == "slurmstepd" and any(f.path.startswith(mine) for f in p.open_files())):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def kill_all(root: Path) -> list[str]:
    """SIGKILL every process of the cluster in ``root`` (again, for what forked meanwhile); what
    was killed, as ``"pid command line"``."""
    killed = []
    for _ in range(3):
        procs = cluster_processes(root)
        if not procs:
            break
        for p in procs:
            try:
                killed.append(f"{p.pid} {' '.join(p.cmdline())}")
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=scaled(10))
    return killed


def _watch(root: str) -> None:
    """``python _slurm_cluster.py --watch ROOT``, stdin a pipe from the test process: when the pipe
    closes without "done" (the test process died before stop()), kill the cluster, remove ROOT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for pytest reaches its process group
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if b"done" not in sys.stdin.buffer.read():
        kill_all(Path(root))
        shutil.rmtree(root, ignore_errors=True)


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the daemon's process group, SIGKILL if it has not exited within 10 s."""
    for sig, wait_s in ((signal.SIGTERM, scaled(10)), (signal.SIGKILL, scaled(10))):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            pass


if __name__ == "__main__" and sys.argv[1:2] == ["--watch"]:
    _watch(sys.argv[2])
