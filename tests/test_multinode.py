"""torchrun across nodes for real: two nodes of the virtual cluster (course_lib/cluster.py) x 2 gloo ranks.

Each node runs one ``torchrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint node0:PORT`` of
``course_lib.train_ddp`` (the worker notebooks/beyond/ncf_ddp.sbatch starts), smoke data on the
file system both nodes share, nothing network-specific in the environment: gloo binds the address
each node's hostname resolves to, its ``eth0``, so the ranks of different nodes talk over the
nodes' shaped links.

* the job runs to completion, and the links' byte counters carry at least what its all-reduces must
  move between the nodes (a lower bound that holds for any all-reduce algorithm) and not many times it;
* a node killed mid-run (every process in its namespaces SIGKILLed) ends the job on the other node
  within the collective timeout, with a message naming the lost node and its ranks, and nothing is
  left in either node; resubmitted with the same checkpoint folder the job resumes and ends with the
  same model (up to float rounding) and HR@10 as the uninterrupted run.

Skipped where the virtual cluster cannot be made (not root, programs missing: the reason).
"""

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_lib import cluster as vc
from course_lib.parallel.checkpoint import CHECKPOINT_NAME, checkpoint_params, max_relative_difference
from _timing import scaled

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(vc.unavailable_reason() is not None, reason=str(vc.unavailable_reason()))]

REPO = Path(__file__).resolve().parents[1]
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
NPROC = 2
STEPS = 60
SMOKE = ["--dataset", "synthetic", "--profile", "smoke", "--global-batch", "1024", "--max-steps", str(STEPS),
         "--checkpoint-every", "10", "--no-target"]
JOB_TIMEOUT_S = 240  # ~12 s here: torch's import and the rendezvous, then 60 small steps
COLLECTIVE_TIMEOUT_S = 300  # course_lib.dist.DEFAULT_COLLECTIVE_TIMEOUT_S: a lost node must be noticed before


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_CLUSTER_DIR", str(tmp_path_factory.mktemp("clusters")))
        c = vc.up(f"m{secrets.token_hex(4)}", nodes=2, rate="1gbit")
        try:
            yield c
        finally:
            left = c.down()
            assert vc.leftovers(c.name) == []
            assert not [p for p in left if "torchrun" in p or "train_ddp" in p], f"job processes outlived it: {left}"


@pytest.fixture(scope="module")
def data_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("multinode-data")


_ports = iter(range(29400, 29500))


class Job:
    """One torchrun per node of ``c``, started together; logs in ``job_dir/node<k>.log``."""

    def __init__(self, c: vc.Cluster, job_dir: Path, data_cache: Path, *args: str):
        self.c, self.dir = c, job_dir
        port = next(_ports)  # the namespaces are this test's own: no other job can hold the port
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               "OMP_NUM_THREADS": "1", "COURSE_DATA_DIR": str(data_cache)}
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
            env.pop(var, None)
        self.procs = {}
        for n in c.nodes:
            with open(job_dir / f"{n.name}.log", "wb") as log:
                self.procs[n.name] = c.popen(n.name, [
                    TORCHRUN, "--nnodes", str(len(c.nodes)), "--nproc-per-node", str(NPROC),
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{c.nodes[0].name}:{port}",
                    "--rdzv-id", f"job{port}", "--log-dir", str(job_dir / f"logs-{n.name}"),
                    "-m", "course_lib.train_ddp", *SMOKE, "--out", str(job_dir / "result.json"), *args],
                    env=env, cwd=str(job_dir), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log(self, node: str) -> str:
        return (self.dir / f"{node}.log").read_text(errors="replace")

    def wait(self, timeout_s: float = JOB_TIMEOUT_S) -> dict[str, int]:
        deadline = time.monotonic() + scaled(timeout_s)
        try:
            return {name: p.wait(max(0.1, deadline - time.monotonic())) for name, p in self.procs.items()}
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the job did not end within {scaled(timeout_s):.0f} s:\n"
                                 + "\n".join(f"--- {n}\n{self.log(n)[-3000:]}" for n in self.procs))

    def kill(self) -> None:
        for n in self.procs:
            self.c.kill_node(n)
        for p in self.procs.values():
            p.wait()


def model_parameters() -> int:
    """NeuMF's parameter count for the smoke set (what every step's all-reduce sums)."""
    from course_lib.models.ncf import NeuMF
    from course_lib.train.ncf import TrainConfig

    cfg = TrainConfig(global_batch_size=1024)
    model = NeuMF(1000, 500, factors=cfg.factors, layers=cfg.layers)  # the smoke profile's synthetic set
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def reference(cluster, data_cache, tmp_path_factory):
    """The uninterrupted job at 1 Gbit/s: its record, its checkpoint folder and what crossed the links."""
    job_dir = tmp_path_factory.mktemp("reference")
    before = cluster.link_bytes()
    t0 = time.monotonic()
    job = Job(cluster, job_dir, data_cache, "--checkpoint-dir", str(job_dir / "checkpoints"))
    codes = job.wait()
    seconds = time.monotonic() - t0
    after = cluster.link_bytes()
    return {"codes": codes, "job": job, "seconds": seconds, "dir": job_dir,
            "sent": {n: after[n]["tx"] - before[n]["tx"] for n in after},
            "received": {n: after[n]["rx"] - before[n]["rx"] for n in after},
            "record": json.loads((job_dir / "result.json").read_text()) if (job_dir / "result.json").exists() else None}


def test_torchrun_rendezvous_across_two_nodes_runs_to_completion(reference):
    job = reference["job"]
    print(f"\n2 nodes x {NPROC} gloo ranks, {STEPS} steps: {reference['seconds']:.1f} s")
    assert reference["codes"] == {"node0": 0, "node1": 0}, "\n".join(job.log(n) for n in job.procs)
    # torchrun numbered the ranks node by node; each node's log has its own ranks' lines
    for node, ranks in (("node0", (0, 1)), ("node1", (2, 3))):
        for r in ranks:
            assert f"rank {r} of 4 stopped after {STEPS} steps" in job.log(node), job.log(node)
    record = reference["record"]
    assert (record["world_size"], record["steps"], record["rank"]) == (4, STEPS, 0)
    assert "4 ranks x micro batch 256" in job.log("node0")


def test_the_all_reduces_crossed_the_nodes_links(reference):
    """Whatever the algorithm, an all-reduce of S bytes between two groups of ranks moves at least S bytes
    each way across the cut between them (half the elements reduced on each side, sent over, then the
    other half's results sent back); here the cut is the two links."""
    assert reference["codes"] == {"node0": 0, "node1": 0}
    grad_bytes = 4 * model_parameters()  # fp32 gradients, one all-reduce of all of them per step
    must = STEPS * grad_bytes
    print(f"\nper step {grad_bytes:,} bytes of gradients; node0 sent {reference['sent']['node0']:,}, node1 sent "
          f"{reference['sent']['node1']:,} bytes over their links in {STEPS} steps "
          f"({reference['sent']['node0'] / must:.2f} and {reference['sent']['node1'] / must:.2f} x the minimum)")
    for node in ("node0", "node1"):
        assert must <= reference["sent"][node] <= 4 * must + 20_000_000, (node, reference["sent"], must)
        assert must <= reference["received"][node] <= 4 * must + 20_000_000, (node, reference["received"], must)


def test_a_node_killed_mid_run_is_named_nothing_is_left_and_the_resumed_job_matches(cluster, data_cache, tmp_path,
                                                                                    reference):
    assert reference["codes"] == {"node0": 0, "node1": 0}
    checkpoints = tmp_path / "checkpoints"
    slow = cluster.set_rate("200mbit")  # ~40 ms a step: time to kill it between two checkpoints
    try:
        job = Job(slow, tmp_path, data_cache, "--checkpoint-dir", str(checkpoints))
        deadline = time.monotonic() + scaled(JOB_TIMEOUT_S)
        while not (checkpoints / CHECKPOINT_NAME).exists():
            assert time.monotonic() < deadline, job.log("node0")
            assert all(p.poll() is None for p in job.procs.values()), job.log("node0") + job.log("node1")
            time.sleep(0.02)
        t_kill = time.monotonic()
        killed = cluster.kill_node("node1")
        code = job.procs["node0"].wait(scaled(COLLECTIVE_TIMEOUT_S))
        noticed_s = time.monotonic() - t_kill
        job.procs["node1"].wait(scaled(10))
    finally:
        cluster.set_rate("1gbit")
    step, _ = checkpoint_params(checkpoints)
    log = job.log("node0")
    print(f"\nnode1 killed ({len(killed)} processes) after the checkpoint of step {step}; node0's torchrun "
          f"ended {noticed_s:.1f} s later with status {code}")
    assert step < STEPS, "the job finished before the kill: nothing was interrupted"
    assert code != 0 and noticed_s < COLLECTIVE_TIMEOUT_S
    assert "Root Cause (first observed failure)" in log, log
    root_cause = log.split("Root Cause (first observed failure)", 1)[1]
    assert "lost its connection to node node1 (198.18.0.2), where ranks 2, 3 ran" in root_cause, log
    deadline = time.monotonic() + scaled(30)
    while left := cluster.processes():
        assert time.monotonic() < deadline, f"left in the nodes: {left}"
        time.sleep(0.1)

    # resubmitted: the same command, the same checkpoint folder
    (tmp_path / "result.json").unlink(missing_ok=True)
    resumed = Job(cluster, tmp_path, data_cache, "--checkpoint-dir", str(checkpoints))
    assert resumed.wait() == {"node0": 0, "node1": 0}, resumed.log("node0") + resumed.log("node1")
    record = json.loads((tmp_path / "result.json").read_text())
    ref = reference["record"]
    assert record["steps"] == STEPS
    (s1, resumed_model), (s2, reference_model) = checkpoint_params(checkpoints), checkpoint_params(
        reference["dir"] / "checkpoints")
    assert s1 == s2 == STEPS
    # the same model up to float rounding: measured 1.3e-7 (twice, the same value: an order of float additions
    # that differs after the resume, not different data); lesson 06's one-node resume test allows 1e-6 too
    difference = max_relative_difference(resumed_model, reference_model)
    print(f"resumed from step {step}: final HR@10 {record['final_hr']:.4f} (uninterrupted {ref['final_hr']:.4f}), "
          f"parameters within {difference:.1e}")
    assert difference <= 1e-6
    assert abs(record["final_hr"] - ref["final_hr"]) <= 2e-3 and abs(record["final_ndcg"] - ref["final_ndcg"]) <= 2e-3


def test_the_two_level_all_reduce_runs_across_the_nodes_and_saves_link_bytes(cluster, tmp_path):
    """Lesson 13's hierarchy worker on 2 nodes x 2 ranks (a 4 MiB message at 200 Mbit/s: the link sets the pace)."""
    from course_lib.lessons import l13_hierarchy as H
    from course_lib.nodes import VirtualNodes

    slow = cluster.set_rate("200mbit")
    try:
        rows = VirtualNodes(slow, tmp_path).run("course_lib.lessons.l13_hierarchy:hierarchy_worker",
                                                [[4**11], 3], nnodes=2, nproc=2, timeout_s=scaled(JOB_TIMEOUT_S))
    finally:
        cluster.set_rate("1gbit")
    reading = H.hierarchy_table(rows).to_markdown()
    print(f"\n{reading}")
    at = {r["algorithm"]: r["time_s"] for r in rows}
    assert at["flat ring"] > at["two-level"], reading  # 1.5x the bytes over the link for the flat ring
