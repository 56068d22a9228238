"""Running a worker on nodes (lessons 08 and 13): every run is ``torchrun -m MODULE ARGS`` on each node, rendezvous
(c10d) on the first; rank 0's return value comes back through a file every node sees."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from . import cluster as vc

_UNSET = ("GLOO_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")  # each node finds its own


def torchrun_cmd(nnodes: int, nproc: int, head: str, port: int, module_args: list[str]) -> list[str]:
    return [str(Path(sys.executable).parent / "torchrun"), "--nnodes", str(nnodes), "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{head}:{port}", "--rdzv-id", f"nodes-{port}", "-m",
            *module_args]


def _worker_args(worker: str, args: list, out: str) -> list[str]:
    return ["course_lib.run", worker, *[json.dumps(a) for a in args], "--out", out]


def _load(out: str):
    import torch

    return torch.load(out, weights_only=False)


def start(c: vc.Cluster, nodes, cmd: list[str], workdir: Path, tag: str) -> dict:
    """``cmd`` on each of ``nodes``, its output in ``workdir/TAG-NODE.log``."""
    env = {**{k: v for k, v in os.environ.items() if k not in _UNSET}, "OMP_NUM_THREADS": "1"}
    procs, logs = {}, {}
    for n in nodes:
        logs[n.name] = workdir / f"{tag}-{n.name}.log"
        with open(logs[n.name], "wb") as log:
            procs[n.name] = c.popen(n.name, cmd, env=env, cwd=str(workdir), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
    return {"procs": procs, "logs": logs}


def log_tails(job: dict, chars: int = 2000) -> str:
    return "\n".join(p.read_text(errors="replace")[-chars:] for p in job["logs"].values())


def wait(c: vc.Cluster, job: dict, timeout_s: float) -> dict[str, int]:
    """Each node's exit status; past ``timeout_s`` every node's processes are killed and the logs raised."""
    deadline = time.monotonic() + timeout_s
    try:
        return {n: p.wait(max(0.1, deadline - time.monotonic())) for n, p in job["procs"].items()}
    except subprocess.TimeoutExpired:
        for n, p in job["procs"].items():
            c.kill_node(n)
            p.wait()
        raise RuntimeError("the job did not end within the time allowed:\n" + log_tails(job, 1500)) from None


class VirtualNodes:
    """Runs on the nodes of a virtual cluster (course_lib/cluster.py); ``workdir`` on the shared file system."""

    path = "virtual"

    def __init__(self, cluster: vc.Cluster, workdir: str | os.PathLike):
        self.cluster, self.workdir = cluster, Path(workdir)
        self._port = 29600

    def run(self, worker: str, args: list, *, nnodes: int, nproc: int, timeout_s: float = 600.0):
        """``worker(rank, world_size, *args)`` on ``nnodes`` nodes x ``nproc`` processes; rank 0's result."""
        self._port += 1
        nodes = self.cluster.nodes[:nnodes]
        if len(nodes) < nnodes:
            raise ValueError(f"the virtual cluster {self.cluster.name!r} has {len(self.cluster.nodes)} nodes, "
                             f"{nnodes} asked for")
        out = str(self.workdir / f"result-{self._port}.pt")
        cmd = torchrun_cmd(nnodes, nproc, nodes[0].name, self._port, _worker_args(worker, args, out))
        job = start(self.cluster, nodes, cmd, self.workdir, f"run-{self._port}")
        try:
            codes = wait(self.cluster, job, timeout_s)
        finally:
            for n in nodes:
                self.cluster.kill_node(n.name)
        if any(codes.values()):
            raise RuntimeError(f"{worker} on {nnodes} node(s) x {nproc} failed ({codes}):\n{log_tails(job)}")
        return _load(out)


class SlurmNodes:
    """Runs on the learner's SLURM cluster, one ``srun`` a run and a torchrun task a node; ``workdir`` on a file
    system every node sees. ``srun_options``: the site's (``--partition``, ``--account``, ``--time``); ``wrap(cmd)``
    and ``env``: how to reach SLURM from here (the tests go through a virtual cluster's head node)."""

    path = "slurm"

    def __init__(self, workdir: str | os.PathLike, srun_options: list[str] = (), *, wrap=None, env: dict | None = None):
        self.workdir, self.srun_options = Path(workdir), list(srun_options)
        self.wrap, self.env = wrap or (lambda cmd: cmd), env

    def run(self, worker: str, args: list, *, nnodes: int, nproc: int, timeout_s: float = 1800.0):
        port = 20000 + os.getpid() % 20000
        out = str(self.workdir / f"result-{time.time_ns()}.pt")
        inner = torchrun_cmd(nnodes, nproc, "HEAD", port, _worker_args(worker, args, out))
        # the rendezvous host is the allocation's first node, known only inside the step
        script = ('head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1); exec '
                  + " ".join(shlex.quote(a) for a in inner).replace("HEAD:", '"$head":'))
        cmd = ["srun", f"--nodes={nnodes}", "--ntasks-per-node=1", f"--cpus-per-task={nproc}", "--kill-on-bad-exit=1",
               *self.srun_options, "bash", "-c", script]
        r = subprocess.run(self.wrap(cmd), capture_output=True, text=True, timeout=timeout_s, cwd=str(self.workdir),
                           env=self.env)
        if r.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd[:6])} ...` failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
        return _load(out)
