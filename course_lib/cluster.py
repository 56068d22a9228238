"""A virtual cluster on one host: nodes that are network namespaces on shaped links (lesson 13).

    python -m course_lib.cluster up --name vc --nodes 2 --rate 1gbit     # prints one JSON line
    python -m course_lib.cluster run --name vc node1 -- hostname          # a command inside node1
    python -m course_lib.cluster down --name vc                           # removes all of it

What a node is: its own network namespace (``ip netns``: named ``course-<name>-node<k>``) with one
interface ``eth0`` at ``198.18.0.<k+1>/24`` (the benchmarking range, RFC 2544), its own hostname
(a UTS namespace) and its own ``/etc/hosts`` naming every node (a mount namespace; everything else of
the file system is the host's, so every node sees the same files: the "shared file system" a real
cluster has). Each ``eth0`` is one end of a veth pair; the other end is a port of a bridge that lives
in a namespace of its own (``course-<name>-br``), so the host's own network namespace has no address
and no route into the cluster, and the nodes reach nothing but each other.

The links: every node's traffic, in both directions, goes through a token-bucket filter (``tbf``)
at ``--rate`` -- on the node's ``eth0`` (what it sends) and on its bridge port (what it receives),
like a full-duplex NIC of that speed. Latency is not emulated: that needs ``netem``, which this
course's kernel does not have (``tc qdisc add ... netem`` answers "Specified qdisc kind is
unknown"); a link here has the bandwidth it is set to and the host's (microsecond) latency.

``run`` starts the command through ``nsenter`` into a small holder process per node (``sleep``,
started by ``nsenter --net=/run/netns/... unshare --uts --mount``) that keeps the node's UTS and mount
namespaces alive; the command's exit status is passed through. Its environment is the caller's with
``HOSTNAME`` and ``COURSE_CLUSTER``/``COURSE_CLUSTER_NODE`` set, nothing network-specific: gloo
then binds the address the hostname resolves to, ``eth0``'s, as on a real node.

State (the nodes, their namespaces and holders, the watchdog) lives in a private folder (0700) under
``$COURSE_CLUSTER_DIR``, else ``$XDG_RUNTIME_DIR/largebatch-course-clusters``, else
``~/.cache/largebatch-course/clusters``: never a predictable path in the shared /tmp. ``up`` also
starts a watchdog in its own session that removes everything when the cluster's owner exits without
``down`` (the owner: the process that ran ``python -m course_lib.cluster up`` -- a shell, a test, a
notebook's kernel -- or ``--owner PID``; the calling process for :func:`up` in Python).

As root, the namespaces are named ones (``ip netns add``, under /run/netns). As any other user, where the
kernel allows unprivileged user namespaces, ``up`` builds the same cluster inside a user namespace of that
user's own (see "Without root" below the imports; ``COURSE_CLUSTER_MODE=userns`` asks for it as root too):
the same nodes, links, JSON line and ``run``/``down``, with commands in the nodes running as the namespace's
root (uid 0 inside, the invoking user outside: files they write belong to that user). Where the kernel
refuses user namespaces, ``up`` says which step was refused, which sysctl (if any) forbids them, and what to do.
Programs: ``ip`` and ``tc`` (Debian's iproute2), ``unshare`` and ``nsenter`` (util-linux).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

# Without root (``Cluster.mode == "userns"``). A process whose uid owns a user namespace may join it
# (setns(2) needs CAP_SYS_ADMIN in the target user namespace, which its owner has), and on joining "gains a
# full set of capabilities in that namespace" (user_namespaces(7)): enough to create network, UTS and mount
# namespaces owned by it, veths, a bridge and tbf qdiscs in them (checked on this kernel as an ordinary user).
# Joining a network namespace also needs CAP_SYS_ADMIN in one's *own* user namespace, so every command enters
# the user namespace first (``nsenter --user``). ``nsenter --user`` alone fails with "setgroups failed:
# Operation not permitted" when the namespace was made by ``unshare --map-root-user``, which writes "deny" to
# /proc/PID/setgroups as the kernel requires of an unprivileged gid_map; ``--preserve-credentials`` skips the
# setgroups/setuid calls (util-linux issues #1006 and #3553, slirp4netns #263), and the caller's uid is 0
# inside anyway, the one uid mapped (to the invoking user).
# Why holder processes (/proc/PID/ns/*) and not ``ip netns``: ``ip netns add`` keeps its namespaces as bind
# mounts under /run/netns, hard-wired in iproute2; an unprivileged user cannot create that folder, and a tmpfs
# over /run in a private mount namespace would hide the host's /run (XDG_RUNTIME_DIR, munge's socket) from the
# nodes' jobs. A holder -- ``sleep`` in the namespaces -- needs no file at all, ``ip link ... netns PID``
# moves a veth end into a holder's network namespace, and the kernel frees the namespaces with their last
# process, so ``down`` only has to kill every process of the cluster's user namespace.
# The anchor: ``unshare --user --map-root-user --net sleep``, the user namespace and the bridge's network
# namespace; each node's holder: ``nsenter`` into the anchor's user namespace, then ``unshare --net --uts
# --mount``.

PROGRAMS = {"ip": "iproute2", "tc": "iproute2", "unshare": "util-linux", "nsenter": "util-linux"}
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,23}$")
MAX_NODES = 64
SUBNET = "198.18.0"  # 198.18.0.0/15: the benchmarking range (RFC 2544); .1 .. .64 are the nodes
INTERFACE = "eth0"
LATENCY_NOTE = "latency is not emulated (no netem on this kernel): links have a set bandwidth only"
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$", re.IGNORECASE)
_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}  # tc's units: kbit is 1000 bit/s


class ClusterError(RuntimeError):
    """The cluster could not be made, found or used; the message names the step and what to do."""


@dataclass(frozen=True)
class Node:
    name: str  # its hostname too: node0, node1, ...
    address: str
    interface: str
    netns: str  # the ip netns name
    port: str  # its veth's other end, a port of the bridge (in the bridge's namespace)
    holder_pid: int = 0


@dataclass(frozen=True)
class Cluster:
    name: str
    nodes: tuple[Node, ...]
    rate: str
    rate_bits_per_s: float
    bridge_netns: str
    state_dir: str
    watchdog_pid: int = 0
    owner_pid: int = 0
    mode: str = "root"  # "root": named namespaces (ip netns); "userns": inside a user namespace of the caller's
    anchor_pid: int = 0  # userns: the process holding the user namespace and the bridge's network namespace
    userns_inode: int = 0  # userns: that user namespace's inode (down kills every process in it)

    # ---------------------------------------------------------------- lookup
    def node(self, name: str) -> Node:
        """A node by its name (``node1``) or its index (``1``)."""
        for n in self.nodes:
            if name in (n.name, str(self.nodes.index(n))):
                return n
        raise ClusterError(f"cluster {self.name!r} has no node {name!r}; its nodes: "
                           f"{', '.join(n.name for n in self.nodes)}")

    def summary(self) -> dict:
        """What ``up`` prints: the name and every node's name, address and interface."""
        return {"name": self.name, "nodes": [{"name": n.name, "address": n.address, "interface": n.interface}
                                             for n in self.nodes],
                "rate": self.rate, "shaping": "tbf", "latency": LATENCY_NOTE}

    # ---------------------------------------------------------------- use
    def command(self, node: str, cmd: list[str], cwd: str | None = None) -> list[str]:
        """``cmd`` as a command line that runs it inside ``node`` (in ``cwd``, default the current one)."""
        n = self.node(node)
        # Not nsenter's --wd: nsenter opens that folder *before* it enters the mount namespace, so the command's
        # working folder is a dentry of the host's namespace, which the node's root cannot reach; getcwd() then
        # falls back to walking up with readdir, and in a user namespace that fails on any folder above it that
        # others may traverse but not read (Python's `-c` died with PermissionError under make test's 0711
        # TMPDIR). env --chdir changes folder by its path once inside, where it resolves in the node's own mounts.
        return ["nsenter", f"--target={n.holder_pid}", *_USER[self.mode], "--net", "--uts", "--mount", "--",
                "env", f"--chdir={cwd or os.getcwd()}", *cmd]

    def env(self, node: str, base: dict | None = None) -> dict:
        """The environment of a command on ``node``: ``base`` (this one's) with its hostname and cluster."""
        n = self.node(node)
        return {**(os.environ if base is None else base), "HOSTNAME": n.name, "COURSE_CLUSTER": self.name,
                "COURSE_CLUSTER_NODE": n.name}

    def popen(self, node: str, cmd: list[str], *, env: dict | None = None, cwd: str | None = None,
              **kw) -> subprocess.Popen:
        """Start ``cmd`` on ``node`` (``subprocess.Popen``'s keywords pass through)."""
        return subprocess.Popen(self.command(node, cmd, cwd), env=self.env(node, env), **kw)

    def run(self, node: str, cmd: list[str], *, env: dict | None = None, cwd: str | None = None,
            **kw) -> subprocess.CompletedProcess:
        """Run ``cmd`` on ``node`` to completion (``subprocess.run``'s keywords pass through)."""
        return subprocess.run(self.command(node, cmd, cwd), env=self.env(node, env), **kw)

    def set_rate(self, rate: str) -> "Cluster":
        """Every link at ``rate`` from now on (the qdiscs replaced in place; running connections carry on)."""
        bits = parse_rate(rate)
        shape = _shape(rate, bits)
        for n in self.nodes:
            _run(_in(self, n, "tc", "qdisc", "replace", "dev", n.interface, *shape), f"reshape {n.name}'s link")
            _run(_in(self, None, "tc", "qdisc", "replace", "dev", n.port, *shape), f"reshape {n.name}'s link")
        c = replace(self, rate=rate, rate_bits_per_s=bits)
        _save(c)
        return c

    def link_bytes(self) -> dict[str, dict[str, int]]:
        """Bytes each node sent (``tx``) and received (``rx``) over its link, from its bridge port's counters."""
        out = _run(_in(self, None, "ip", "-s", "-j", "link", "show"), "read the links' counters").stdout
        ports = {entry["ifname"]: entry["stats64"] for entry in json.loads(out)}
        # the port's rx is what the node sent, its tx what the node received
        return {n.name: {"tx": ports[n.port]["rx"]["bytes"], "rx": ports[n.port]["tx"]["bytes"]}
                for n in self.nodes if n.port in ports}

    def processes(self, node: str | None = None, holders: bool = False) -> list[int]:
        """Pids of the processes inside ``node`` (every node when None); the holders only if asked."""
        nodes = self.nodes if node is None else (self.node(node),)
        inodes = {}
        for n in nodes:
            ino = self.netns_inode(n)
            if ino is not None:
                inodes[ino] = n
        skip = set() if holders else {n.holder_pid for n in self.nodes}
        return [pid for pid, ino in _all_netns_inodes().items() if ino in inodes and pid not in skip]

    def netns_inode(self, node: Node | None) -> int | None:
        """The inode of ``node``'s network namespace (the bridge's for None); None when it is gone."""
        if self.mode == "root":
            return _netns_inode(self.bridge_netns if node is None else node.netns)
        pid = self.anchor_pid if node is None else node.holder_pid
        if _ns_inode(pid, "user") != self.userns_inode:  # gone, or the pid reused by another process
            return None
        return _ns_inode(pid, "net")

    def netns_inodes(self) -> set[int]:
        """The inodes of every network namespace of the cluster (nodes and bridge) that still exists."""
        return {i for i in (self.netns_inode(n) for n in (*self.nodes, None)) if i is not None}

    def kill_node(self, node: str) -> list[int]:
        """SIGKILL every process on ``node`` (what a node that loses power does); the pids killed.
        The node itself stays (its holder, namespaces and link), ready for new processes."""
        killed: list[int] = []
        for _ in range(20):  # again, for what forked meanwhile
            pids = self.processes(node)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        return killed

    def down(self) -> list[str]:
        """Remove everything (see :func:`down`); what was still running in the nodes, as ``"pid cmdline"``."""
        return down(self.name)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.down()


# -------------------------------------------------------------------- state


def state_root() -> Path:
    """The private folder (0700) that holds every cluster's state folder."""
    env = os.environ.get("COURSE_CLUSTER_DIR")
    if env:
        root = Path(env).expanduser()
    elif os.environ.get("XDG_RUNTIME_DIR"):
        root = Path(os.environ["XDG_RUNTIME_DIR"]) / "largebatch-course-clusters"
    else:
        root = Path(os.path.expanduser("~")) / ".cache" / "largebatch-course" / "clusters"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = root.stat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise ClusterError(f"the cluster state folder {root} must belong to you and be private (mode 0700); it is "
                           f"owned by uid {st.st_uid} with mode {oct(st.st_mode & 0o777)}. Fix it, or set "
                           "COURSE_CLUSTER_DIR to a private folder of your own")
    return root


def _state_dir(name: str) -> Path:
    return state_root() / name


def _netns_names(name: str) -> tuple[str, str]:
    return f"course-{name}-br", f"course-{name}-node"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ClusterError(f"--name {name!r}: a cluster's name is 1-24 characters, lower-case letters, digits "
                           "and '-', starting with a letter (it becomes part of namespace names)")
    return name


def load(name: str) -> Cluster:
    """The running cluster called ``name`` (from its state folder)."""
    path = _state_dir(check_name(name)) / "cluster.json"
    if not path.exists():
        raise ClusterError(f"no cluster named {name!r} is up (no {path}); start one with "
                           f"`python -m course_lib.cluster up --name {name} --nodes 2`")
    raw = json.loads(path.read_text())
    return Cluster(**{**raw, "nodes": tuple(Node(**n) for n in raw["nodes"])})


def _save(c: Cluster) -> None:
    path = Path(c.state_dir) / "cluster.json"
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(asdict(c), indent=1))
    os.replace(tmp, path)


# -------------------------------------------------------------------- helpers


def parse_rate(rate: str) -> float:
    """``"1gbit"`` -> 1e9 bits/s (tc's units: bit, kbit, mbit, gbit; k = 1000)."""
    m = _RATE_RE.match(str(rate).strip())
    if not m or float(m.group(1)) <= 0:
        raise ClusterError(f"--rate {rate!r}: give a bandwidth in tc's units, e.g. 100mbit, 1gbit, 2.5gbit")
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def _run(cmd: list[str], step: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise ClusterError(f"step '{step}' was refused: `{' '.join(cmd)}` exited with status {r.returncode}: "
                           f"{(r.stderr or r.stdout).strip()}{_privilege_hint()}")
    return r


def cluster_mode() -> str:
    """``"root"`` (named namespaces) as root, else ``"userns"``; ``COURSE_CLUSTER_MODE=userns`` asks for the
    unprivileged path as root too (the suite checks lesson 13's runs on it so)."""
    mode = os.environ.get("COURSE_CLUSTER_MODE", "").strip()
    if mode not in ("", "root", "userns"):
        raise ClusterError(f"COURSE_CLUSTER_MODE={mode!r}: choose 'root' (needs root) or 'userns' (a user "
                           "namespace of your own), or leave it unset")
    if mode == "root" and os.geteuid() != 0:
        raise ClusterError("COURSE_CLUSTER_MODE='root' needs root; unset it to build the cluster in a user namespace")
    return mode or ("root" if os.geteuid() == 0 else "userns")


def _privilege_hint() -> str:
    if os.geteuid() == 0 and os.environ.get("COURSE_CLUSTER_MODE", "").strip() != "userns":
        return ""
    return (f"\nThis step ran inside the cluster's own user namespace (as its root, which is your uid {os.geteuid()} "
            "outside), and the kernel refused it there: some kernels or security policies allow fewer operations "
            "in a user namespace than as root. Run `python -m course_lib.cluster up` as root (a VM or container of "
            "your own), or use a real cluster (lesson 13 then runs on SLURM).")


USERNS_PROBE = ["unshare", "--user", "--map-root-user", "--net", "--uts", "--mount", "true"]


def _read_sysctl(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def userns_advice() -> str:
    """What stops unprivileged user namespaces here, read from the sysctls that can, and what to do about it."""
    found = []
    if _read_sysctl("/proc/sys/user/max_user_namespaces") == "0":
        found.append("sysctl user.max_user_namespaces is 0 (an administrator can allow them: "
                     "`sysctl -w user.max_user_namespaces=10000`)")
    if _read_sysctl("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        found.append("sysctl kernel.unprivileged_userns_clone is 0 (Debian's switch; an administrator can allow "
                     "them: `sysctl -w kernel.unprivileged_userns_clone=1`)")
    if _read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        found.append("sysctl kernel.apparmor_restrict_unprivileged_userns is 1 (Ubuntu's AppArmor restriction; an "
                     "administrator can allow them with an AppArmor profile for unshare, or "
                     "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`)")
    if not found:
        found.append("no sysctl here forbids them, so a seccomp filter (a container's default profile) or a "
                     "security module does: run in a container or VM that allows them")
    return ("Unprivileged user namespaces are not available: " + "; ".join(found)
            + ". Otherwise run `python -m course_lib.cluster up` as root, or use a real cluster (lesson 13 then "
              "runs on SLURM).")


def userns_refusal() -> str | None:
    """None where this user may create user + network + UTS + mount namespaces (the one step tried), else why."""
    try:
        r = subprocess.run(USERNS_PROBE, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"step 'create a user namespace' failed: `{' '.join(USERNS_PROBE)}` could not run ({exc})."
    if r.returncode != 0:
        return (f"step 'create a user namespace' was refused: `{' '.join(USERNS_PROBE)}` exited with status "
                f"{r.returncode}: {r.stderr.strip()}. {userns_advice()}")
    return None


def missing_programs() -> list[str]:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [p for p in PROGRAMS if shutil.which(p, path=path) is None]


def unavailable_reason() -> str | None:
    """Why :func:`up` cannot work here before trying (missing programs, not root), else None."""
    missing = missing_programs()
    if missing:
        pkgs = sorted({PROGRAMS[p] for p in missing})
        return (f"programs not found: {', '.join(missing)}; install Debian's {' '.join(pkgs)} "
                f"(apt-get install {' '.join(pkgs)}; ci/install-slurm.sh does it for make test)")
    try:
        mode = cluster_mode()
    except ClusterError as exc:
        return str(exc)
    if mode == "userns":
        refused = userns_refusal()
        if refused:
            return "without root, the virtual cluster is built inside a user namespace, and " + refused
    return None


_USER = {"root": [], "userns": ["--user", "--preserve-credentials"]}  # see "Without root" at the top


def _in(c: Cluster, node: Node | None, prog: str, *args: str) -> list[str]:
    """``prog args`` (``ip`` or ``tc``) as a command line that runs in ``node``'s network namespace (the bridge's
    for None)."""
    if c.mode == "root":
        return [prog, "-n", c.bridge_netns if node is None else node.netns, *args]
    pid = c.anchor_pid if node is None else node.holder_pid
    return ["nsenter", f"--target={pid}", *_USER[c.mode], "--net", "--", prog, *args]


def _ns_inode(pid: int, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def _netns_inode(netns: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return None


def _all_netns_inodes(kind: str = "net") -> dict[int, int]:
    """pid -> inode of its network namespace (or its ``kind`` of namespace), for every process we can see."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                out[int(entry)] = os.stat(f"/proc/{entry}/ns/{kind}").st_ino
            except OSError:
                pass
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _burst_bytes(bits_per_s: float) -> int:
    # 4 ms of the rate: a busy 2-core host wakes the qdisc late, and a smaller bucket then loses rate;
    # a transfer of many MB overshoots the set rate by only burst/size (measured in tests/test_cluster.py)
    return int(max(bits_per_s / 8 * 0.004, 16 * 1024))


def _hosts_file(nodes: list[Node]) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{n.address}\t{n.name}" for n in nodes]
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------- up / down


def up(name: str, nodes: int = 2, rate: str = "1gbit", owner_pid: int | None = None) -> Cluster:
    """Create the cluster ``name`` with ``nodes`` nodes on links of ``rate``; removed by :func:`down`, or by
    its watchdog when ``owner_pid`` (default: this process) exits first. Raises :class:`ClusterError`
    naming the refused step (and removes whatever it had made)."""
    check_name(name)
    if not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise ClusterError(f"--nodes {nodes!r}: give a whole number from 1 to {MAX_NODES}")
    bits = parse_rate(rate)
    missing = missing_programs()
    if missing:
        raise ClusterError(unavailable_reason())
    bridge_ns, node_prefix = _netns_names(name)
    mode = cluster_mode()
    if (mode == "root" and os.path.exists(f"/run/netns/{bridge_ns}")) or (state_root() / name).exists():
        raise ClusterError(f"a cluster named {name!r} exists already (namespace {bridge_ns} or its state folder "
                           f"{state_root() / name}): `python -m course_lib.cluster down --name {name}` first")
    state = state_root() / name
    state.mkdir(mode=0o700)
    owner_pid = os.getpid() if owner_pid is None else owner_pid
    members = [Node(f"node{k}", f"{SUBNET}.{k + 1}", INTERFACE, f"{node_prefix}{k}", f"p{k}") for k in range(nodes)]
    c = Cluster(name, tuple(members), rate, bits, bridge_ns, str(state), 0, owner_pid, mode)
    _save(c)  # before anything exists: down() reads it to know what to remove
    try:
        # the first step that needs privileges, before the watchdog: refused, it is the one named
        if mode == "root":
            _run(["ip", "netns", "add", c.bridge_netns], "create the bridge's network namespace")
        else:
            c = _start_anchor(c)
            _save(c)
        c = _start_watchdog(c)
        _save(c)
        hosts = state / "hosts"
        hosts.write_text(_hosts_file(members))
        hosts.chmod(0o644)
        if mode == "root":  # the holders enter the named namespaces _build makes
            _build(c)
            c = replace(c, nodes=tuple(_start_holder(c, n, hosts) for n in members))
            _save(c)
        else:  # the holders make the namespaces, and _build moves a veth end into each by its pid
            c = replace(c, nodes=tuple(_start_holder(c, n, hosts) for n in members))
            _save(c)
            _build(c)
    except BaseException:
        down(name)
        raise
    return c


def _shape(rate: str, bits_per_s: float) -> list[str]:
    return ["root", "tbf", "rate", rate, "burst", str(_burst_bytes(bits_per_s)), "latency", "100ms"]


def _build(c: Cluster) -> None:
    shape = _shape(c.rate, c.rate_bits_per_s)
    _run(_in(c, None, "ip", "link", "add", "br0", "type", "bridge"), "create the bridge")
    _run(_in(c, None, "ip", "link", "set", "br0", "up"), "bring the bridge up")
    for n in c.nodes:
        if c.mode == "root":
            _run(["ip", "netns", "add", n.netns], f"create {n.name}'s network namespace")
        # `netns PID`: into the network namespace of that process (ip-link(8)), here the node's holder
        _run(_in(c, None, "ip", "link", "add", n.port, "type", "veth", "peer", "name", n.interface,
                 "netns", n.netns if c.mode == "root" else str(n.holder_pid)), f"create {n.name}'s link (a veth pair)")
        _run(_in(c, None, "ip", "link", "set", n.port, "master", "br0", "up"), f"attach {n.name}'s link to the bridge")
        # no IPv6 link-local address: the links then carry only what the cluster's commands send
        _run(_in(c, n, "ip", "link", "set", n.interface, "addrgenmode", "none"), f"quiet {n.name}'s IPv6")
        _run(_in(c, n, "ip", "addr", "add", f"{n.address}/24", "dev", n.interface), f"give {n.name} its address")
        _run(_in(c, n, "ip", "link", "set", n.interface, "up"), f"bring {n.name}'s link up")
        _run(_in(c, n, "ip", "link", "set", "lo", "up"), f"bring {n.name}'s loopback up")
        _run(_in(c, n, "tc", "qdisc", "add", "dev", n.interface, *shape), f"shape what {n.name} sends (tbf)")
        _run(_in(c, None, "tc", "qdisc", "add", "dev", n.port, *shape), f"shape what {n.name} receives (tbf)")


def _start_holder(c: Cluster, n: Node, hosts: Path) -> Node:
    """The process that keeps ``n``'s UTS and mount namespaces (hostname, /etc/hosts) alive."""
    # A fresh sysfs shows the node's own interfaces (as `ip netns exec` does), and the host's cgroup
    # mounts are moved back under it: slurmd refuses to start without /sys/fs/cgroup ("No filesystem
    # mounted on /sys/fs/cgroup", SLURM 22.05, measured), and `ip netns exec` would leave it empty.
    cgroups = Path(c.state_dir) / f"cgroup-{n.name}"
    cgroups.mkdir(mode=0o700)
    # In a user namespace `mount --move` of that bind is refused ("filesystem was mounted, but any subsequent
    # operation failed: Permission denied", measured as an ordinary user): a second rbind and a lazy unmount
    # of the first do the same there.
    move = ('mount --move "$3" /sys/fs/cgroup' if c.mode == "root"
            else 'mount --rbind "$3" /sys/fs/cgroup && umount -l "$3"')
    script = ('hostname "$1" && mount --bind "$2" /etc/hosts && '
              'if [ -d /sys/fs/cgroup ]; then mount --rbind /sys/fs/cgroup "$3" && mount -t sysfs none /sys && '
              f'{move}; else mount -t sysfs none /sys; fi && '
              'echo ready && exec sleep infinity')
    if c.mode == "root":
        enter = ["nsenter", f"--net=/run/netns/{n.netns}", "--", "unshare"]
    else:  # into the cluster's user namespace, then a network namespace of the node's own, owned by it
        enter = ["nsenter", f"--target={c.anchor_pid}", *_USER[c.mode], "--", "unshare", "--net"]
    cmd = [*enter, "--uts", "--mount", "--propagation", "private",
           "--", "sh", "-c", script, "holder", n.name, str(hosts), str(cgroups)]
    proc, err = _start_ready(cmd)
    if proc is None:
        raise ClusterError(f"step 'give {n.name} its hostname and /etc/hosts' was refused: `{' '.join(cmd)}`: "
                           f"{err}{_privilege_hint()}")
    return replace(n, holder_pid=proc.pid)


def _start_ready(cmd: list[str]) -> tuple[subprocess.Popen | None, str]:
    """Start a holder: a process that prints "ready" once its namespaces exist, then sleeps holding them.
    ``(process, "")``, or ``(None, why)`` when it did not say so within 30 s (it is killed then)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else b""
    if line.strip() != b"ready":
        proc.kill()
        err = proc.communicate(timeout=10)[1].decode(errors="replace").strip()
        status = f"exited with status {proc.returncode}: " if proc.returncode and proc.returncode > 0 else ""
        return None, status + (err or "no answer within 30 s")
    proc.stdout.close()
    proc.stderr.close()
    return proc, ""


def _start_anchor(c: Cluster) -> Cluster:
    """Without root: the process holding the cluster's user namespace and the bridge's network namespace."""
    cmd = ["unshare", "--user", "--map-root-user", "--net", "--", "sh", "-c", "echo ready && exec sleep infinity"]
    proc, err = _start_ready(cmd)
    if proc is None:
        raise ClusterError(f"step 'create the cluster's user namespace' was refused: `{' '.join(cmd)}`: "
                           f"{err}. {userns_advice()}")
    return replace(c, anchor_pid=proc.pid, userns_inode=_ns_inode(proc.pid, "user") or 0)


def _start_watchdog(c: Cluster) -> Cluster:
    proc = subprocess.Popen([sys.executable, "-m", "course_lib.cluster", "_watchdog", "--name", c.name,
                             "--owner", str(c.owner_pid)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True, cwd=str(Path(__file__).resolve().parents[1]),
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                filter(None, [str(Path(__file__).resolve().parents[1]),
                                              os.environ.get("PYTHONPATH")]))})
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    if not ready or proc.stdout.readline().strip() != b"watching":
        proc.kill()
        proc.wait()
        raise ClusterError("step 'start the watchdog' failed: it did not start watching within 60 s")
    proc.stdout.close()
    return replace(c, watchdog_pid=proc.pid)


def down(name: str) -> list[str]:
    """Kill every process in the cluster's nodes (holders too), delete its namespaces (and with them its links
    and qdiscs), stop its watchdog and remove its state folder. Idempotent. Returns the processes other than
    the holders that were still running, as ``"pid cmdline"``."""
    check_name(name)
    bridge_ns, node_prefix = _netns_names(name)
    state = _state_dir(name)
    try:
        c = load(name)
        netns = [n.netns for n in c.nodes]
        holders = {n.holder_pid for n in c.nodes} | {c.anchor_pid}
        watchdog = c.watchdog_pid
    except (ClusterError, ValueError, TypeError, KeyError):
        c, holders, watchdog = None, set(), 0
        netns = []
    userns = c.userns_inode if c is not None and c.mode == "userns" else 0
    # namespaces of this name found on the system, also ones the state does not list (a crash mid-up)
    try:
        if os.geteuid() == 0:  # without root, there are no named ones (see "Without root" at the top)
            netns += [e for e in os.listdir("/run/netns") if e.startswith(node_prefix) and e not in netns]
    except FileNotFoundError:
        pass
    inodes = {ino for ino in (_netns_inode(ns) for ns in netns) if ino is not None}
    left: list[str] = []
    for attempt in range(50):
        if userns:  # every process in the cluster's user namespace: its namespaces go with the last one
            # (a zombie keeps its user namespace -- it is in the credentials, unlike the network namespace, which
            # goes at exit -- so zombies, already dead, are not waited for)
            pids = [pid for pid, ino in _all_netns_inodes("user").items()
                    if ino == userns and pid != os.getpid() and _state_of(pid) != "Z"]
        else:
            pids = [pid for pid, ino in _all_netns_inodes().items() if ino in inodes]
        if not pids:
            break
        for pid in pids:
            if attempt == 0 and pid not in holders:
                left.append(f"{pid} {_cmdline(pid)}")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    for ns in [*netns, bridge_ns] if os.geteuid() == 0 else []:
        if os.path.exists(f"/run/netns/{ns}"):
            _run(["ip", "netns", "del", ns], f"delete the network namespace {ns}", check=False)
    if watchdog and watchdog != os.getpid():
        try:
            os.kill(watchdog, signal.SIGTERM)
        except ProcessLookupError:
            pass
    shutil.rmtree(state, ignore_errors=True)
    return left


def leftovers(name: str, inodes: set[int] = frozenset(), pids: set[int] = frozenset()) -> list[str]:
    """What of cluster ``name`` still exists: namespaces, its state folder, processes in the network namespaces
    ``inodes`` or among ``pids`` (the holders and watchdog a test noted while it was up). Empty when all is gone."""
    bridge_ns, node_prefix = _netns_names(name)
    found = []
    try:
        found += [f"namespace {e}" for e in os.listdir("/run/netns") if e == bridge_ns or e.startswith(node_prefix)]
    except FileNotFoundError:
        pass
    if (state_root() / name).exists():
        found.append(f"folder {state_root() / name}")
    for pid, ino in _all_netns_inodes().items():
        if ino in inodes or pid in pids:
            if Path(f"/proc/{pid}/stat").exists() and _state_of(pid) != "Z":
                found.append(f"process {pid} {_cmdline(pid)}")
    return found


def _state_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def _watch(name: str, owner: int) -> None:
    """The watchdog: when ``owner`` exits while the cluster is still up, take it down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the owner's process group
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # down() tells it the cluster is gone
    state = _state_dir(name)
    fd = None
    if owner > 0:
        try:
            fd = os.pidfd_open(owner)  # not fooled by a reused pid
        except OSError:  # gone already
            print("watching", flush=True)
            down(name)
            return
    print("watching", flush=True)
    while state.exists():
        if fd is not None and select.select([fd], [], [], 1.0)[0]:  # readable: the owner exited
            down(name)
            return
        if fd is None:
            time.sleep(1.0)


# -------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = cmd = None
    if "--" in argv:  # `run ... NODE -- CMD ...`: everything after -- is the command, untouched
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="python -m course_lib.cluster", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    u = sub.add_parser("up", help="create a cluster; prints one JSON line")
    u.add_argument("--name", required=True)
    u.add_argument("--nodes", type=int, default=2)
    u.add_argument("--rate", default="1gbit", help="every node's link, in tc's units (100mbit, 1gbit)")
    u.add_argument("--owner", type=int, default=None,
                   help="remove the cluster when this process exits (default: the caller, i.e. this command's "
                        "parent; 0: only `down` removes it)")
    r = sub.add_parser("run", help="run a command inside a node: run --name NAME NODE -- CMD ...")
    r.add_argument("--name", required=True)
    r.add_argument("node")
    d = sub.add_parser("down", help="remove a cluster: every namespace, link, process and folder")
    d.add_argument("--name", required=True)
    w = sub.add_parser("_watchdog")
    w.add_argument("--name", required=True)
    w.add_argument("--owner", type=int, required=True)
    a = p.parse_args(argv)
    command = a.command
    try:
        if command == "up":
            owner = os.getppid() if a.owner is None else a.owner
            c = up(a.name, a.nodes, a.rate, owner_pid=owner)
            print(json.dumps(c.summary()), flush=True)
            print(f"course_lib.cluster: {LATENCY_NOTE}", file=sys.stderr)
            return 0
        if command == "run":
            if not cmd:
                p.error("run needs a command after --: run --name NAME NODE -- CMD ...")
            c = load(a.name)
            line = c.command(a.node, cmd)
            os.execvpe(line[0], line, c.env(a.node))  # the command's exit status is ours
        if command == "down":
            left = down(a.name)
            if left:
                print(f"course_lib.cluster: killed what was still running: {'; '.join(left)}", file=sys.stderr)
            return 0
        if command == "_watchdog":
            _watch(a.name, a.owner)
            return 0
    except ClusterError as exc:
        print(f"course_lib.cluster {command}: {exc}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
