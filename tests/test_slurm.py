"""``notebooks/beyond/ncf_ddp.sbatch`` under a real SLURM: one node, 2 CPUs, 2 gloo ranks.

The module's fixture starts munged, slurmctld and slurmd (``tests/_slurm_cluster.py``: Debian's
packages, everything in a temp dir, loopback ports) and always stops them, checking that no
process of the cluster or its jobs is left. The jobs are the script as a site would submit it,
with the site-specific ``#SBATCH`` lines overridden on the command line (one node, no GPU) and
train_ddp's arguments after the script's name (the smoke profile's small synthetic set):

* the script runs to completion: its log, the result JSON rank 0 writes, a checkpoint;
* one rank failing ends the job FAILED with that rank and its exception in the job's log;
* ``scancel`` during training leaves no process of the job behind.

Skipped, with the reason, where the SLURM/MUNGE programs are missing or the suite does not run
as root (slurmd needs it), or where the daemons cannot start (the command and its message).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import _slurm_cluster
from _slurm_cluster import Cluster, SlurmUnavailable, unavailable_reason
from _timing import scaled

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "notebooks" / "beyond" / "ncf_ddp.sbatch"
# The script's own lines ask for 2 nodes with 4 GPUs; this cluster is one node with 2 CPUs.
OPTIONS = ["--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=2", "--gpus-per-node=0", "--time=00:10:00"]
SMOKE = ["--dataset", "synthetic", "--profile", "smoke", "--global-batch", "1024"]
JOB_TIMEOUT_S = 300  # a job here takes ~40 s on a loaded 2-core box: start-up (torch imports) and a few steps


@pytest.fixture(scope="module")
def cluster():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    c = Cluster(cpus=2)
    try:
        c.start()
    except SlurmUnavailable as exc:
        c.stop()
        pytest.skip(f"SLURM's daemons cannot run on this machine: {exc}")
    print(f"\ntest cluster up in {c.start_s:.1f} s; listening: {', '.join(c.listening)}")
    try:
        yield c
    finally:
        leftovers = c.stop()
        assert not leftovers, f"processes of the test cluster outlived it (killed now): {leftovers}"


@pytest.fixture(scope="module")
def data_cache(tmp_path_factory):
    """One processed-data cache for the module's jobs (the first job builds the synthetic set)."""
    return tmp_path_factory.mktemp("slurm-data")


@pytest.fixture
def job_dir(tmp_path):
    """A fresh submit directory per job: its own logs/ and checkpoints/ (no resume from another test)."""
    (tmp_path / "logs").mkdir()
    return tmp_path


def job_env(data_cache) -> dict:
    """What a site's ``conda activate`` and exports would give the job: this interpreter's torchrun
    and python first on PATH, this checkout's course_lib, one thread per rank, 2 ranks."""
    bin_dir = str(Path(sys.executable).parent)
    assert shutil.which("torchrun", path=bin_dir), f"no torchrun next to {sys.executable}"
    return {"PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "NPROC_PER_NODE": "2", "OMP_NUM_THREADS": "1", "COURSE_DATA_DIR": str(data_cache)}


def submit(cluster, job_dir, data_cache, *args) -> int:
    return cluster.sbatch(SCRIPT, *SMOKE, *args, options=OPTIONS, env=job_env(data_cache), workdir=job_dir)


def job_log(job_dir, job_id) -> str:
    path = job_dir / "logs" / f"ncf-ddp-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else f"(no job log at {path})"


def wait_until_gone(procs: list[psutil.Process], timeout_s: float) -> list[str]:
    """The processes still alive after ``timeout_s`` (``"pid cmdline"``)."""
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    out = []
    for p in alive:
        try:
            out.append(f"{p.pid} {' '.join(p.cmdline())}")
        except psutil.NoSuchProcess:
            pass
    return out


def test_the_daemons_listen_on_loopback_only(cluster):
    assert {"slurmctld", "slurmd"} <= {entry.split()[0] for entry in cluster.listening}, cluster.listening
    assert all(entry.split()[1].startswith("127.0.0.1:") for entry in cluster.listening), cluster.listening


def test_sbatch_example_runs_to_completion(cluster, job_dir, data_cache):
    t0 = time.monotonic()
    job = submit(cluster, job_dir, data_cache, "--max-steps", "30", "--checkpoint-every", "10")
    state = cluster.wait_job(job, scaled(JOB_TIMEOUT_S))
    log = job_log(job_dir, job)
    print(f"\njob {job}: {state['JobState']} in {time.monotonic() - t0:.1f} s")
    assert (state["JobState"], state["ExitCode"]) == ("COMPLETED", "0:0"), log
    assert f"job {job}: 1 nodes ({cluster.node}), 2 processes each" in log, log
    for rank in (0, 1):
        assert f"rank {rank} of 2 stopped after 30 steps" in log, log
    result = job_dir / "logs" / f"ncf_ddp-{job}.json"
    assert f"wrote {result}" in log, log
    record = json.loads(result.read_text())
    assert (record["world_size"], record["steps"], record["rank"]) == (2, 30, 0)
    assert record["spec"]["profile"] == "smoke" and record["config"]["global_batch_size"] == 1024
    assert 0 <= record["final_hr"] <= 1
    assert any((job_dir / "checkpoints" / f"ncf-ddp-{job}").iterdir()), "no checkpoint in the job's --checkpoint-dir"
    assert (job_dir / "logs" / str(job)).is_dir(), "no torchrun --log-dir for the workers' logs"


def test_a_failing_rank_fails_the_job_with_its_rank_and_error(cluster, job_dir, data_cache):
    t0 = time.monotonic()
    job = submit(cluster, job_dir, data_cache, "--max-steps", "30", "--fail-at-step", "3", "--fail-rank", "1")
    state = cluster.wait_job(job, scaled(JOB_TIMEOUT_S))
    log = job_log(job_dir, job)
    print(f"\njob {job}: {state['JobState']} in {time.monotonic() - t0:.1f} s")
    assert state["JobState"] == "FAILED" and state["ExitCode"] != "0:0", log
    # torchrun's summary (train_ddp's main is wrapped in @record): the first failure, its rank
    # and its exception, not just "exitcode: 1" and a link to the docs
    assert "Root Cause (first observed failure)" in log, log
    root_cause = log.split("Root Cause (first observed failure)", 1)[1]
    assert "rank      : 1 (local_rank: 1)" in root_cause, log
    assert "RuntimeError: injected failure on rank 1 after step 3" in root_cause, log
    assert "srun: error:" in log and "Exited with exit code 1" in log, log
    assert not (job_dir / "logs" / f"ncf_ddp-{job}.json").exists(), "a failed run wrote a result"
    assert wait_until_gone(cluster.job_processes(job), scaled(30)) == []


def test_scancel_during_training_leaves_no_process(cluster, job_dir, data_cache):
    t0 = time.monotonic()
    job = submit(cluster, job_dir, data_cache, "--max-epochs", "100", "--no-target")
    deadline = time.monotonic() + scaled(JOB_TIMEOUT_S)
    # training has begun once rank 0 printed the run's settings (both ranks are in the group then: the model is
    # wrapped in DDP before; a script's log prints them as the run begins, course_lib.train.ncf._Progress)
    while "] global batch 1024 = 2 ranks" not in job_log(job_dir, job):
        assert time.monotonic() < deadline, f"job {job} did not start training:\n{job_log(job_dir, job)}"
        assert cluster.job_state(job)["JobState"] in ("PENDING", "RUNNING"), job_log(job_dir, job)
        time.sleep(0.25)
    procs = cluster.job_processes(job)
    ranks = [p for p in procs
             if "course_lib.train_ddp" in p.cmdline() and not any(a.endswith("torchrun") for a in p.cmdline())]
    assert len(ranks) >= 2, f"expected the 2 ranks among the job's processes: {[p.cmdline() for p in procs]}"
    t_cancel = time.monotonic()
    cluster.run("scancel", str(job))
    state = cluster.wait_job(job, scaled(60))
    left = wait_until_gone(procs, scaled(30))
    print(f"\njob {job}: training after {t_cancel - t0:.1f} s, {len(procs)} processes; "
          f"{state['JobState']} {time.monotonic() - t_cancel:.1f} s after scancel")
    assert state["JobState"] == "CANCELLED", job_log(job_dir, job)
    assert left == [], f"left behind by scancel: {left}"
    assert wait_until_gone(cluster.job_processes(job), scaled(30)) == []


def test_without_the_programs_or_root_the_reason_says_what_to_do(monkeypatch):
    monkeypatch.setattr(_slurm_cluster.shutil, "which", lambda cmd, path=None: None if cmd == "slurmd" else cmd)
    assert "slurmd" in unavailable_reason() and _slurm_cluster.PACKAGES in unavailable_reason()
    assert "ci/install-slurm.sh" in unavailable_reason()
    monkeypatch.setattr(_slurm_cluster.shutil, "which", lambda cmd, path=None: cmd)
    monkeypatch.setattr(_slurm_cluster.os, "geteuid", lambda: 1000)
    assert "root" in unavailable_reason()


def test_a_daemon_that_cannot_start_is_named_with_its_message_and_nothing_is_left():
    """What the module's fixture turns into a skip: here munged refuses a 16-byte key."""
    if unavailable_reason():
        pytest.skip(unavailable_reason())
    c = Cluster(key_bytes=16)
    with pytest.raises(SlurmUnavailable, match=r"munged --foreground .* exited with status 1:\n(.|\n)*[Kk]ey"):
        c.start()
    root = c.root
    assert c.stop() == [] and not root.exists()


def test_where_the_hostname_is_not_loopback_the_daemons_and_jobs_see_it_as_loopback():
    """A Docker container's hostname resolves to its network address, and slurmctld and slurmd then
    bind that address; the cluster runs them with a private /etc/hosts instead (forced here)."""
    if unavailable_reason():
        pytest.skip(unavailable_reason())
    try:
        with Cluster(private_hosts=True) as c:
            assert all(entry.split()[1].startswith("127.0.0.1:") for entry in c.listening), c.listening
            step = c.run("srun", "--nodes=1", "--ntasks=1", "getent", "hosts", socket.gethostname())
            assert step.stdout.split()[0] == "127.0.0.1", step.stdout
    except SlurmUnavailable as exc:
        pytest.skip(f"SLURM's daemons cannot run in a private mount namespace here: {exc}")


def test_a_test_process_killed_with_its_cluster_running_leaves_nothing(tmp_path):
    """SIGKILL the process that started a cluster (and a job in it): the watchdog kills the rest."""
    if unavailable_reason():
        pytest.skip(unavailable_reason())
    holder = subprocess.Popen([sys.executable, "-c", HOLD_A_CLUSTER], cwd=Path(__file__).parent,
                              stdout=subprocess.PIPE, text=True)
    try:
        root = Path(holder.stdout.readline().strip())
        assert root.name.startswith("course-slurm-"), root
        assert len(_slurm_cluster.cluster_processes(root)) >= 5  # munged, slurmctld, slurmd, stepd, job
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + scaled(60)
    while (left := _slurm_cluster.cluster_processes(root)) or root.exists():
        assert time.monotonic() < deadline, f"left after the holder's death: {left}, {root} exists: {root.exists()}"
        time.sleep(0.25)


HOLD_A_CLUSTER = """
import sys, time
from _slurm_cluster import Cluster
from _timing import scaled
c = Cluster()
c.start()
(c.root / "jobs" / "sleep.sh").write_text("#!/bin/bash\\nsleep 600\\n")
job = c.sbatch(c.root / "jobs" / "sleep.sh", options=["--output=/dev/null"], workdir=c.root / "jobs")
c.wait_job(job, scaled(60), until=("RUNNING",))
deadline = time.monotonic() + scaled(60)
while not any("sleep" in p.name() for p in c.job_processes(job)) and time.monotonic() < deadline:
    time.sleep(0.1)
print(c.root, flush=True)
time.sleep(scaled(600))
"""
