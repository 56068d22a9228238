"""Lesson 13's nodes: which path runs (SLURM, the virtual cluster, or lesson 09's model), running a worker on
nodes (:class:`VirtualNodes`, :class:`SlurmNodes`), and a node lost mid-run, staged on the virtual cluster
(:func:`stage_node_loss`) with its table and comparisons.

Every run is ``torchrun -m course_lib.run WORKER ARGS --out FILE`` on each node, rendezvous (c10d) on the
first node: the worker is the one a notebook cell would launch, rank 0's return value comes back through
the file (a folder every node sees).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .. import cluster as vc
from .. import compare
from ..tables import Table

PATHS = ("slurm", "virtual", "model")
# HR@10 of two runs that end with the same parameters up to float rounding: within a few users of the
# evaluation set (about 6,000 users: one user is 1.7e-4)
HR_TOLERANCE = 2e-3
# the parameters a resumed run ends with, relative to the uninterrupted run's: float rounding, no more
PARAM_TOLERANCE = 1e-6


def slurm_nodes() -> int:
    """How many nodes this machine's SLURM offers (0: no SLURM commands, or no controller answers)."""
    if shutil.which("sinfo") is None or shutil.which("srun") is None:
        return 0
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%D"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(int(x) for x in r.stdout.split() if x.isdigit()) if r.returncode == 0 else 0


def choose_path(slurm_node_count: int, virtual_reason: str | None, want: str = "auto") -> dict:
    """``{"path", "why"}``: SLURM with >= 2 nodes, else the virtual cluster where it can be made, else the model.
    ``want`` forces one (``"slurm"``, ``"virtual"``, ``"model"``); a forced path that cannot run is an error."""
    if want not in ("auto", *PATHS):
        raise ValueError(f"RUN_ON={want!r}: choose 'auto', 'slurm', 'virtual' or 'model'")
    can = {"slurm": slurm_node_count >= 2, "virtual": virtual_reason is None, "model": True}
    why = {"slurm": f"SLURM offers {slurm_node_count} node(s); this lesson needs at least 2",
           "virtual": f"the virtual cluster cannot be made here: {virtual_reason}", "model": ""}
    if want != "auto":
        if not can[want]:
            raise ValueError(f"RUN_ON={want!r} cannot run here: {why[want]}")
        return {"path": want, "why": f"RUN_ON={want!r} was asked for"}
    if can["slurm"]:
        return {"path": "slurm", "why": f"SLURM offers {slurm_node_count} nodes: the runs go to your cluster"}
    if can["virtual"]:
        return {"path": "virtual", "why": f"{why['slurm']}; the virtual cluster (network namespaces) can be made"}
    return {"path": "model", "why": f"{why['slurm']}, and {why['virtual']}. This lesson needs one of the two to "
                                    "measure; meanwhile it shows lesson 09's model's PREDICTIONS"}


# --------------------------------------------------------------------------- running on nodes


def _torchrun(nnodes: int, nproc: int, head: str, port: int, worker: str, args: list, out: str) -> list[str]:
    return [str(Path(sys.executable).parent / "torchrun"), "--nnodes", str(nnodes), "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{head}:{port}", "--rdzv-id", f"l13-{port}",
            "-m", "course_lib.run", worker, *[json.dumps(a) for a in args], "--out", out]


def _load(out: str):
    import torch

    return torch.load(out, weights_only=False)


class VirtualNodes:
    """Runs on the nodes of a virtual cluster (course_lib/cluster.py); ``workdir`` on the shared file system."""

    path = "virtual"

    def __init__(self, cluster: vc.Cluster, workdir: str | os.PathLike):
        self.cluster, self.workdir = cluster, Path(workdir)
        self._port = 29600

    def run(self, worker: str, args: list, *, nnodes: int, nproc: int, timeout_s: float = 600.0):
        """``worker(rank, world_size, *args)`` on ``nnodes`` nodes x ``nproc`` processes; rank 0's result."""
        self._port += 1
        out = str(self.workdir / f"result-{self._port}.pt")
        nodes = self.cluster.nodes[:nnodes]
        if len(nodes) < nnodes:
            raise ValueError(f"the virtual cluster {self.cluster.name!r} has {len(self.cluster.nodes)} nodes, "
                             f"{nnodes} asked for")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        for var in ("GLOO_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
            env.pop(var, None)
        cmd = _torchrun(nnodes, nproc, nodes[0].name, self._port, worker, args, out)
        logs = [open(self.workdir / f"run-{self._port}-{n.name}.log", "wb") for n in nodes]
        procs = [self.cluster.popen(n.name, cmd, env=env, cwd=str(self.workdir), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL) for n, log in zip(nodes, logs)]
        deadline = time.monotonic() + timeout_s
        try:
            codes = [p.wait(max(0.1, deadline - time.monotonic())) for p in procs]
        except subprocess.TimeoutExpired:
            codes = None
        finally:
            for n in nodes:
                self.cluster.kill_node(n.name)
            for p in procs:
                p.wait()
            for log in logs:
                log.close()
        if codes is None or any(codes):
            tail = "\n".join((self.workdir / f"run-{self._port}-{n.name}.log").read_text(errors="replace")[-2000:]
                             for n in nodes)
            raise RuntimeError(f"{worker} on {nnodes} node(s) x {nproc} "
                               f"{'timed out' if codes is None else f'failed (exit statuses {codes})'}:\n{tail}")
        return _load(out)


class SlurmNodes:
    """Runs on the learner's SLURM cluster: one ``srun`` per run, one torchrun task per node; ``workdir`` must be
    on a file system every node sees (the result file comes back through it). ``srun_options``: the site's
    (``--partition``, ``--account``, ``--time``)."""

    path = "slurm"

    def __init__(self, workdir: str | os.PathLike, srun_options: list[str] = (), *, wrap=None, env: dict | None = None):
        """``wrap(cmd) -> cmd`` and ``env``: how to reach SLURM from here (the tests run ``srun`` on a virtual
        cluster's head node); a login node needs neither."""
        self.workdir, self.srun_options = Path(workdir), list(srun_options)
        self.wrap, self.env = wrap or (lambda cmd: cmd), env

    def run(self, worker: str, args: list, *, nnodes: int, nproc: int, timeout_s: float = 1800.0):
        port = 20000 + os.getpid() % 20000
        out = str(self.workdir / f"result-{time.time_ns()}.pt")
        inner = _torchrun(nnodes, nproc, "HEAD", port, worker, args, out)
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


def _train_ddp(c: vc.Cluster, port: int, nproc: int, args: list[str]) -> list[str]:
    return [str(Path(sys.executable).parent / "torchrun"), "--nnodes", str(len(c.nodes)), "--nproc-per-node",
            str(nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{c.nodes[0].name}:{port}", "--rdzv-id",
            f"loss-{port}", "-m", "course_lib.train_ddp", *args]


def _start_job(c: vc.Cluster, workdir: Path, tag: str, port: int, nproc: int, args: list[str]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for var in ("GLOO_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        env.pop(var, None)
    procs, logs = {}, {}
    for n in c.nodes:
        logs[n.name] = workdir / f"{tag}-{n.name}.log"
        with open(logs[n.name], "wb") as log:
            procs[n.name] = c.popen(n.name, _train_ddp(c, port, nproc, args), env=env, cwd=str(workdir), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return {"procs": procs, "logs": logs}


def _wait_job(c: vc.Cluster, job: dict, timeout_s: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    try:
        return {n: p.wait(max(0.1, deadline - time.monotonic())) for n, p in job["procs"].items()}
    except subprocess.TimeoutExpired:
        for n in job["procs"]:
            c.kill_node(n)
        raise RuntimeError("the job did not end within the time allowed:\n" + "\n".join(
            p.read_text(errors="replace")[-1500:] for p in job["logs"].values()))


def _run_to_end(c: vc.Cluster, workdir: Path, tag: str, port: int, nproc: int, args: list[str],
                timeout_s: float) -> float:
    """One job on every node of ``c`` to its end; its seconds (raises with the first node's log where it failed)."""
    t0 = time.monotonic()
    job = _start_job(c, workdir, tag, port, nproc, args)
    codes = _wait_job(c, job, timeout_s)
    if any(codes.values()):
        raise RuntimeError(f"the {tag} job failed ({codes}):\n" + job["logs"][c.nodes[0].name].read_text())
    return time.monotonic() - t0


def _kill_after_first_checkpoint(c: vc.Cluster, job: dict, checkpoint: Path, timeout_s: float) -> dict:
    """Kill the last node of ``c`` as soon as ``job`` writes ``checkpoint``; how the first node's torchrun ended."""
    deadline = time.monotonic() + timeout_s
    while not checkpoint.exists():
        if time.monotonic() > deadline or any(p.poll() is not None for p in job["procs"].values()):
            for n in job["procs"]:
                c.kill_node(n)
            raise RuntimeError("the job ended or stalled before its first checkpoint")
        time.sleep(0.02)
    t_kill = time.monotonic()
    written_s = time.time() - checkpoint.stat().st_mtime  # the checkpoint's age at the kill
    killed = c.kill_node(c.nodes[-1].name)
    survivor = c.nodes[0].name
    code = job["procs"][survivor].wait(timeout_s)
    noticed_s = time.monotonic() - t_kill
    for n, p in job["procs"].items():
        if n != survivor:
            p.wait(30)
    log = job["logs"][survivor].read_text(errors="replace")
    said = next((line.strip() for line in log.splitlines() if "lost its connection to node" in line), None)
    if said:  # the sentence that names the node and its ranks (the transport's own words follow in brackets)
        said = said[said.find("rank "):].split(": that node", 1)[0]
    return {"t_kill": t_kill, "killed_processes": len(killed), "survivor_exit": code, "noticed_s": noticed_s,
            "message": said, "kill_after_checkpoint_s": max(0.0, written_s)}


def stage_node_loss(cluster: vc.Cluster, workdir: str | os.PathLike, steps: int = 60, every: int = 10, nproc: int = 1,
                    slow_rate: str | None = None, timeout_s: float = 300.0, nodes: int = 2) -> dict:
    """notebooks/beyond/ncf_ddp.sbatch's worker (``course_lib.train_ddp``, smoke data) on every node of ``c``: once
    uninterrupted, once with the last node SIGKILLed right after the first checkpoint, then resubmitted with the same
    checkpoint folder. What the other nodes did, how long they took to notice, and whether the resumed run ended
    with the uninterrupted run's model. ``slow_rate``: the links during the killed run (time to kill between two
    checkpoints); ``nodes``: the first that many nodes of ``cluster`` take part."""
    from dataclasses import replace

    from ..parallel.checkpoint import CHECKPOINT_NAME, checkpoint_params, max_relative_difference

    if not 2 <= nodes <= len(cluster.nodes):
        raise ValueError(f"nodes={nodes}: a node loss needs 2 to {len(cluster.nodes)} nodes of {cluster.name!r}")
    c = replace(cluster, nodes=cluster.nodes[:nodes])

    workdir = Path(workdir)
    base = ["--dataset", "synthetic", "--profile", "smoke", "--global-batch", "1024", "--max-steps", str(steps),
            "--checkpoint-every", str(every), "--no-target"]
    ref_dir, lost_dir = workdir / "uninterrupted", workdir / "interrupted"
    port = 29700 + os.getpid() % 200
    reference_s = _run_to_end(c, workdir, "uninterrupted", port, nproc, base + [
        "--checkpoint-dir", str(ref_dir), "--out", str(workdir / "uninterrupted.json")], timeout_s)
    if slow_rate:
        c.set_rate(slow_rate)
    try:
        t_start = time.monotonic()
        job = _start_job(c, workdir, "interrupted", port + 1, nproc, base + ["--checkpoint-dir", str(lost_dir)])
        kill = _kill_after_first_checkpoint(c, job, lost_dir / CHECKPOINT_NAME, timeout_s)
    finally:
        if slow_rate:
            c.set_rate(c.rate)
    for n in job["procs"]:
        c.kill_node(n)  # nothing of the failed job is left in any node
    left = c.processes()
    step_at_loss, _ = checkpoint_params(lost_dir)
    resumed_s = _run_to_end(c, workdir, "resumed", port + 2, nproc, base + [
        "--checkpoint-dir", str(lost_dir), "--out", str(workdir / "resumed.json")], timeout_s)
    (s_res, m_res), (s_ref, m_ref) = checkpoint_params(lost_dir), checkpoint_params(ref_dir)
    rec_ref = json.loads((workdir / "uninterrupted.json").read_text())
    rec_res = json.loads((workdir / "resumed.json").read_text())
    return {"nodes": len(c.nodes), "ranks_per_node": nproc, "steps": steps, "checkpoint_every": every,
            "lost_node": c.nodes[-1].name, "step_at_loss": step_at_loss, "left_after": len(left),
            **{k: v for k, v in kill.items() if k != "t_kill"},
            "reference_s": reference_s, "resumed_s": resumed_s, "resumed_steps": s_res, "reference_steps": s_ref,
            "interrupted_s": kill["t_kill"] - t_start,
            "max_relative_difference": max_relative_difference(m_res, m_ref),
            "final_hr": {"uninterrupted": rec_ref["final_hr"], "resumed": rec_res["final_hr"]},
            "collective_timeout_s": 300}


def node_loss_table(r: dict) -> Table:
    """What the staged loss showed, as numbers: the kill, the time to notice (against the collective timeout), the
    resume against the uninterrupted run, and the seconds the loss cost in all (the killed job's time to the kill,
    the time to notice and the resubmission, less the uninterrupted job's)."""
    total = r["interrupted_s"] + r["noticed_s"] + r["resumed_s"] if r.get("interrupted_s") is not None else None
    t = Table(["what", "value"], title=f"a node lost: {r['nodes']} nodes x {r['ranks_per_node']}, "
                                      f"{r['steps']} steps, a checkpoint every {r['checkpoint_every']}")
    for what, value in (("node killed", f"{r['lost_node']} ({r['killed_processes']} processes)"),
                        ("checkpoint step at the kill", r["step_at_loss"]),
                        ("killed after that checkpoint (s)", r.get("kill_after_checkpoint_s")),
                        ("the other node's exit status", r["survivor_exit"]),
                        ("seconds to notice", r["noticed_s"]),
                        ("collective timeout (s)", r["collective_timeout_s"]),
                        ("its message", r["message"] or "none naming the node"),
                        ("processes left in the nodes", r["left_after"]),
                        ("resumed: steps, seconds", f"{r['step_at_loss']}-{r['resumed_steps']}, {r['resumed_s']:.1f}"),
                        ("uninterrupted: steps, seconds", f"{r['reference_steps']}, {r['reference_s']:.1f}"),
                        ("parameters, max relative difference", r["max_relative_difference"]),
                        ("seconds the loss cost in all", "-" if total is None else total - r["reference_s"])):
        t.add(what=what, value="-" if value is None else value)
    return t


def node_loss_comparisons(r: dict) -> list[compare.Comparison]:
    """The resumed run against the uninterrupted one: its final HR@10 minus theirs (``same`` within
    :data:`HR_TOLERANCE`: a checkpoint promises the same result) and its parameters' largest relative difference
    (``same`` within :data:`PARAM_TOLERANCE`, float rounding); both are exact values, compared to float rounding."""
    hr = r["final_hr"]
    return [compare.difference("final HR@10, resumed - uninterrupted", hr["uninterrupted"], 0.0, hr["resumed"], 0.0,
                               needed=HR_TOLERANCE, resolution=1e-9, n="1/1", basis="one run each, exact values"),
            compare.quantity("parameters, max relative difference, resumed vs uninterrupted",
                             r["max_relative_difference"], 0.0, needed=PARAM_TOLERANCE, resolution=1e-12, n="1",
                             basis="every parameter compared")]
