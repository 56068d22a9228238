"""Lesson 13's nodes: which path runs (SLURM, the virtual cluster, or lesson 09's model; the runners are
:mod:`course_lib.nodes`), and a node lost mid-run (:func:`stage_node_loss`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from .. import cluster as vc
from .. import compare
from ..nodes import log_tails, start, torchrun_cmd, wait
from ..tables import Table

PATHS = ("slurm", "virtual", "model")
# two runs that end with the same parameters up to float rounding: a few users of ~6,000 evaluated (one is 1.7e-4)
HR_TOLERANCE = 2e-3
PARAM_TOLERANCE = 1e-6  # a resumed run's parameters against the uninterrupted run's: float rounding, no more


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
    """``{"path", "why"}``: SLURM with >= 2 nodes, else the virtual cluster where it can be made, else the model;
    ``want`` forces one (an error where it cannot run)."""
    if want not in ("auto", *PATHS):
        raise ValueError(f"RUN_ON={want!r}: choose 'auto', 'slurm', 'virtual' or 'model'")
    why = {"slurm": None if slurm_node_count >= 2 else f"SLURM offers {slurm_node_count} node(s), 2 needed",
           "virtual": virtual_reason and f"no virtual cluster ({virtual_reason})", "model": None}
    if want != "auto":
        if why[want]:
            raise ValueError(f"RUN_ON={want!r} cannot run here: {why[want]}")
        return {"path": want, "why": f"RUN_ON={want!r}"}
    path = next(p for p in PATHS if not why[p])
    said = [why[p] for p in PATHS[:PATHS.index(path)]] or [f"SLURM offers {slurm_node_count} nodes"]
    return {"path": path, "why": "; ".join(said) + ("; lesson 09's model PREDICTS instead" if path == "model" else "")}


def _train(c: vc.Cluster, workdir: Path, tag: str, port: int, nproc: int, args: list[str]) -> dict:
    """notebooks/beyond/ncf_ddp.sbatch's worker (``course_lib.train_ddp``) started on every node of ``c``."""
    cmd = torchrun_cmd(len(c.nodes), nproc, c.nodes[0].name, port, ["course_lib.train_ddp", *args])
    return start(c, c.nodes, cmd, workdir, tag)


def _run_to_end(c: vc.Cluster, workdir: Path, tag: str, port: int, nproc: int, args: list[str],
                timeout_s: float) -> float:
    """One training job on every node to its end; its seconds."""
    t0 = time.monotonic()
    job = _train(c, workdir, tag, port, nproc, args)
    codes = wait(c, job, timeout_s)
    if any(codes.values()):
        raise RuntimeError(f"the {tag} job failed ({codes}):\n{log_tails(job)}")
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
    """The training worker (smoke data) on the first ``nodes`` nodes: once uninterrupted, once with the last node
    SIGKILLed right after the first checkpoint (on ``slow_rate`` links: time to kill between checkpoints), then
    resubmitted on the same checkpoints. What the other nodes did, when they noticed, whether the resumed run
    ended with the uninterrupted run's model."""
    from ..parallel.checkpoint import CHECKPOINT_NAME, checkpoint_params, max_relative_difference

    if not 2 <= nodes <= len(cluster.nodes):
        raise ValueError(f"nodes={nodes}: a node loss needs 2 to {len(cluster.nodes)} nodes of {cluster.name!r}")
    c, workdir = replace(cluster, nodes=cluster.nodes[:nodes]), Path(workdir)
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
        job = _train(c, workdir, "interrupted", port + 1, nproc, base + ["--checkpoint-dir", str(lost_dir)])
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
    hr = {k: json.loads((workdir / f"{k}.json").read_text())["final_hr"] for k in ("uninterrupted", "resumed")}
    return {"nodes": len(c.nodes), "ranks_per_node": nproc, "steps": steps, "checkpoint_every": every,
            "lost_node": c.nodes[-1].name, "step_at_loss": step_at_loss, "left_after": len(left),
            **{k: v for k, v in kill.items() if k != "t_kill"},
            "reference_s": reference_s, "resumed_s": resumed_s, "resumed_steps": s_res, "reference_steps": s_ref,
            "interrupted_s": kill["t_kill"] - t_start, "max_relative_difference": max_relative_difference(m_res, m_ref),
            "final_hr": hr, "collective_timeout_s": 300}


def node_loss_table(r: dict) -> Table:
    """The staged loss as numbers; ``cost s``: the killed job's time to the kill, the time to notice and the
    resubmission, less the uninterrupted job's."""
    total = r["interrupted_s"] + r["noticed_s"] + r["resumed_s"] if r.get("interrupted_s") is not None else None
    rows = {"killed": f"{r['lost_node']} ({r['killed_processes']} processes)", "checkpoint step": r["step_at_loss"],
            "kill after checkpoint s": r.get("kill_after_checkpoint_s"), "survivor exit": r["survivor_exit"],
            "notice s": r["noticed_s"], "timeout s": r["collective_timeout_s"], "message": r["message"] or "none",
            "processes left": r["left_after"],
            "resumed steps, s": f"{r['step_at_loss']}-{r['resumed_steps']}, {r['resumed_s']:.1f}",
            "uninterrupted steps, s": f"{r['reference_steps']}, {r['reference_s']:.1f}",
            "max parameter difference": r["max_relative_difference"],
            "cost s": "-" if total is None else total - r["reference_s"]}
    return Table(["what", "value"], [{"what": k, "value": "-" if v is None else v} for k, v in rows.items()])


def node_loss_comparisons(r: dict) -> list[compare.Comparison]:
    """The resumed run against the uninterrupted one, exact values compared to float rounding: its final HR@10
    (``same`` within :data:`HR_TOLERANCE`: a checkpoint promises the same result) and its parameters."""
    hr = r["final_hr"]
    return [compare.difference("final HR@10, resumed - uninterrupted", hr["uninterrupted"], 0.0, hr["resumed"], 0.0,
                               needed=HR_TOLERANCE, resolution=1e-9, n="1/1", basis="one run each, exact values"),
            compare.quantity("parameters, max relative difference", r["max_relative_difference"], 0.0,
                             needed=PARAM_TOLERANCE, resolution=1e-12, n="1", basis="every parameter compared")]
