"""``notebooks/beyond/ncf_ddp.sbatch`` on two nodes: SLURM on the virtual cluster (course_lib/cluster.py).

slurmctld on the first node, one slurmd in each node's namespaces (``tests/_slurm_cluster.py``'s
``MultiNodeCluster``), so ``sbatch --nodes=2`` places one task on each node: each runs a torchrun with
2 gloo processes, the rendezvous on the first node of the allocation, the workers talking over the
nodes' links. SLURM's commands run on the head node (the host's own namespace has no route to the
nodes). The jobs run as root here, so the interpreter's path (which may lie under root's home, mode
0700) is readable by them; a site's jobs run as the user who submitted them.

Skipped where the virtual cluster or SLURM cannot run (not root, programs missing: the reason).
"""

import json
import time

import pytest

from course_lib import cluster as vc
from _slurm_cluster import MultiNodeCluster, SlurmUnavailable, unavailable_reason
from _timing import scaled
from test_multinode import model_parameters
from test_slurm import SCRIPT, SMOKE, job_env, job_log

pytestmark = pytest.mark.slow

OPTIONS = ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=2", "--gpus-per-node=0", "--time=00:10:00"]
STEPS = 30
JOB_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = vc.unavailable_reason() or unavailable_reason()
    if reason:
        pytest.skip(reason)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_CLUSTER_DIR", str(tmp_path_factory.mktemp("clusters")))
        virtual = vc.up(f"s{int(time.time() * 1000) % 10**8}", nodes=2, rate="1gbit")
        c = MultiNodeCluster(virtual)
        try:
            try:
                c.start()
            except SlurmUnavailable as exc:
                pytest.skip(f"SLURM's daemons cannot run on the virtual cluster's nodes: {exc}")
            print(f"\n2-node SLURM up in {c.start_s:.1f} s; listening: {', '.join(c.listening)}")
            yield c
        finally:
            leftovers = c.stop()
            virtual.down()
            assert vc.leftovers(virtual.name) == []
            assert not leftovers, f"processes of the test cluster outlived it (killed now): {leftovers}"


def test_the_daemons_listen_on_the_nodes_addresses(cluster):
    heads = [e for e in cluster.listening if e.startswith("node0 ")]
    assert "node0 198.18.0.1:6817" in heads and "node0 198.18.0.1:6818" in heads, cluster.listening
    assert "node1 198.18.0.2:6818" in cluster.listening, cluster.listening


def test_sbatch_on_two_nodes_runs_to_completion_over_the_links(cluster, tmp_path, tmp_path_factory):
    (tmp_path / "logs").mkdir()
    data_cache = tmp_path_factory.mktemp("slurm-multinode-data")
    before = cluster.virtual.link_bytes()
    t0 = time.monotonic()
    job = cluster.sbatch(SCRIPT, *SMOKE, "--max-steps", str(STEPS), "--checkpoint-every", "10", options=OPTIONS,
                         env=job_env(data_cache), workdir=tmp_path)
    state = cluster.wait_job(job, scaled(JOB_TIMEOUT_S))
    after = cluster.virtual.link_bytes()
    log = job_log(tmp_path, job)
    sent = {n: after[n]["tx"] - before[n]["tx"] for n in after}
    must = STEPS * 4 * model_parameters()  # see test_multinode: the all-reduces' minimum across the cut
    print(f"\njob {job}: {state['JobState']} in {time.monotonic() - t0:.1f} s on {state.get('NodeList')}; "
          f"sent over the links: {sent} ({sent['node0'] / must:.2f} and {sent['node1'] / must:.2f} x the minimum)")
    assert (state["JobState"], state["ExitCode"]) == ("COMPLETED", "0:0"), log
    assert state["NodeList"] == "node[0-1]" and state["NumNodes"] == "2", state
    assert f"job {job}: 2 nodes (node0 node1), 2 processes each, rendezvous node0:" in log, log
    for rank in range(4):
        assert f"rank {rank} of 4 stopped after {STEPS} steps" in log, log
    record = json.loads((tmp_path / "logs" / f"ncf_ddp-{job}.json").read_text())
    assert (record["world_size"], record["steps"]) == (4, STEPS)
    for node in ("node0", "node1"):
        assert must <= sent[node] <= 4 * must + 20_000_000, (node, sent, must)
