"""Data parallel training (course_lib.parallel, course_lib.train.workers): the invariants that make lesson 06 true,
on CPU/gloo.

Launches cost seconds each (process start, torch import, the first DDP construction), so
one module-scoped launch serves several tests, with two runs: Adam, 2 ranks x micro batch 64
x 2 accumulation steps, 8 steps, checkpoint every 2 steps; and plain SGD (no momentum: a
gradient-scale bug shows at O(1), not damped by Adam's normalization), 2 ranks x micro batch
512 x 4 accumulation steps, across the end of the first epoch (whose last batch is partial).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from course_lib import dist as cdist
from course_lib.config import BatchConfig
from course_lib.parallel import CHECKPOINT_NAME, Checkpointer, batch_config, batch_table
from course_lib.parallel.checkpoint import LOCK_NAME, PREVIOUS_NAME
from course_lib.parallel.sync_batchnorm import batchnorm_table, batchnorm_worker
from course_lib.train import RunHooks, TrainConfig, train_to_target
from course_lib.train.ncf import build_model
import _procs
from _timing import scaled
from course_lib.train.workers import RunSpec, ncf_worker

# every test: the orphan checks count only the processes their own test started
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("children_before_test")]

REPO = Path(__file__).resolve().parent.parent
# global batch 256 = 2 ranks x micro batch 64 x 2 accumulation steps; an eval point every 3 steps
STEPS = 8
CFG = TrainConfig(global_batch_size=256, micro_batch_size=64, optimizer="adam", base_lr=5e-3, factors=8, layers=(16, 8),
                  eval_every_epochs=0.011, max_steps=STEPS)
# tiny synthetic data: 16 full global batches of 4096 and a last one of 1119 per epoch
SGD_STEPS, SGD_STEPS_PER_EPOCH = 19, 17
SGD_CFG = TrainConfig(global_batch_size=4096, micro_batch_size=512, optimizer="sgd", momentum=0.0, base_lr=0.5,
                      factors=8, layers=(16, 8), max_steps=SGD_STEPS)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Tiny synthetic data cached where the spawned workers (which inherit os.environ) find it."""
    from course_lib.data import load_implicit

    saved = {k: os.environ.get(k) for k in ("COURSE_DATA_DIR", "COURSE_PROFILE")}
    os.environ["COURSE_DATA_DIR"] = str(tmp_path_factory.mktemp("cache"))
    os.environ.pop("COURSE_PROFILE", None)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        data = load_implicit("synthetic", synthetic_size="tiny")
        yield {"data": data, "tmp": tmp_path_factory.mktemp("ddp")}
    finally:
        torch.set_num_threads(threads)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _spec(checkpoint_dir, **kw):
    return RunSpec(dataset="synthetic", synthetic_size="tiny", checkpoint_dir=str(checkpoint_dir),
                   checkpoint_every=2, progress="none", **kw)


def _model(checkpoint_dir):
    state = torch.load(Path(checkpoint_dir) / CHECKPOINT_NAME, weights_only=True)  # tensors and plain containers only
    return state["step"], state["model"]


def _assert_same_params(a, b, rtol=1e-6):
    assert a.keys() == b.keys()
    for k in a:
        rel = ((a[k].double() - b[k].double()).norm() / b[k].double().norm().clamp_min(1e-30)).item()
        assert rel <= rtol, f"{k}: relative difference {rel:.2e} > {rtol:g}"


@pytest.fixture(scope="module")
def ddp_launch(env):
    """One launch, two runs: CFG (Adam, checkpoints in full/) and SGD_CFG (across an epoch end, in sgd/)."""
    from _dist_workers import ncf_runs_with_specs

    runs = [(CFG, _spec(env["tmp"] / "full")),
            (SGD_CFG, RunSpec(dataset="synthetic", synthetic_size="tiny", checkpoint_dir=str(env["tmp"] / "sgd"),
                              checkpoint_every=SGD_STEPS, progress="none", evaluate_points=False))]
    per_rank = cdist.launch(ncf_runs_with_specs, 2, runs, quiet=True, timeout_s=scaled(600))
    return [[r[i] for r in per_rank] for i in range(len(runs))]


@pytest.fixture(scope="module")
def ddp_run(env, ddp_launch):
    return ddp_launch[0], env["tmp"] / "full"


def test_ranks_x_micro_batches_x_accumulation_equals_one_big_batch(env, ddp_run):
    """W=2 x b=64 x k=2 (DDP, no_sync) == one process with batch 256, after 8 Adam steps, fp32."""
    results, ckpt = ddp_run
    assert [r["steps"] for r in results] == [STEPS, STEPS] and results[0]["world_size"] == 2
    assert results[0]["samples"] == STEPS * CFG.global_batch_size
    assert results[0]["curve"]["hr"] == results[1]["curve"]["hr"], "ranks must evaluate identical models"
    # the all-reduces ran inside the training clock: their time is some of it, not more
    assert 0 < results[0]["comm_time_s"] <= results[0]["train_time_s"]
    ref_dir = env["tmp"] / "reference"
    ref = train_to_target(env["data"], CFG.replace(micro_batch_size=None), device="cpu",
                          progress="none", hooks=RunHooks(checkpoint=Checkpointer(ref_dir, 2)))
    assert ref.world_size == 1 and ref.comm_time_s is None
    step, ddp_params = _model(ckpt)
    assert step == STEPS
    _assert_same_params(ddp_params, _model(ref_dir)[1])
    assert results[0]["curve"]["step"] == ref.curve["step"]


def test_accumulation_all_reduces_once_per_step_on_the_last_micro_step(ddp_launch):
    """no_sync really skips the all-reduce: DDP's communication hook (gloo) ran during the backward
    of micro step k - 1 only, once per step. A plain context in place of no_sync gives the same
    numbers (the all-reduce of accumulated sums is linear) but all-reduces on every micro step."""
    for results, cfg in zip(ddp_launch, (CFG, SGD_CFG)):
        k = cfg.global_batch_size // (2 * cfg.micro_batch_size)
        assert k > 1
        for r in results:
            assert r["allreduce_micro_steps"] == {k - 1: r["steps"]}, (k, r["allreduce_micro_steps"])


def test_plain_sgd_across_an_epoch_end_equals_one_big_batch(env, ddp_launch):
    """W=2 x b=512 x k=4 (DDP, no_sync) == one process with batch 4096, plain SGD, 19 steps: the
    partial last batch of epoch 1 (1119 samples, slices of unequal size) is step 17."""
    results = ddp_launch[1]
    assert [r["steps"] for r in results] == [SGD_STEPS, SGD_STEPS]
    assert results[0]["steps_per_epoch"] == SGD_STEPS_PER_EPOCH and results[0]["epochs"] > 1
    ref_dir = env["tmp"] / "sgd-reference"
    ref = train_to_target(env["data"], SGD_CFG.replace(micro_batch_size=None), device="cpu", progress="none",
                          hooks=RunHooks(evaluate_points=False, checkpoint=Checkpointer(ref_dir, SGD_STEPS)))
    assert ref.steps == SGD_STEPS and ref.steps_per_epoch == SGD_STEPS_PER_EPOCH
    assert results[0]["samples"] == ref.samples
    step, ddp_params = _model(env["tmp"] / "sgd")
    assert step == SGD_STEPS
    ref_params = _model(ref_dir)[1]
    _assert_same_params(ddp_params, ref_params, rtol=1e-5)
    # and the runs moved: equal because both trained, not because neither did
    torch.manual_seed(SGD_CFG.seed)  # as train_to_target does before it builds the model
    start = build_model(env["data"], SGD_CFG)
    moved = max(((ref_params[k] - v).norm() / v.norm().clamp_min(1e-30)).item()
                for k, v in start.state_dict().items() if v.is_floating_point())
    assert moved > 1e-3


def test_accumulation_on_one_process_equals_the_full_batch(env):
    runs = {}
    for micro in (None, 64):  # k = 1 and k = 4
        d = env["tmp"] / f"single-{micro}"
        train_to_target(env["data"], CFG.replace(micro_batch_size=micro, max_steps=4), device="cpu",
                        progress="none", hooks=RunHooks(evaluate_points=False, checkpoint=Checkpointer(d, 4)))
        runs[micro] = _model(d)[1]
    _assert_same_params(runs[64], runs[None])


def test_global_batch_that_does_not_divide_is_a_clear_error(env):
    with pytest.raises(ValueError, match=r"global_batch_size=1000 is not divisible by .* 64 \* 1 = 64"):
        train_to_target(env["data"], CFG.replace(global_batch_size=1000, micro_batch_size=64, max_steps=1),
                        device="cpu")
    with pytest.raises(ValueError, match="global batch 1000 does not split evenly over world_size=3"):
        batch_config(1000, None, 3)
    assert batch_config(4096, 256, 2) == BatchConfig(4096, 256, 2) and BatchConfig(4096, 256, 2).grad_accum_steps == 8
    rows = batch_table(4096, 256, (1, 2, 3)).rows
    assert [r["grad_accum_steps"] for r in rows] == [16, 8, "does not divide"]


def test_failed_rank_stops_all_and_resume_reaches_the_same_parameters(env, ddp_run):
    _, full = ddp_run
    ckpt = env["tmp"] / "interrupted"
    t0 = time.time()
    with pytest.raises(cdist.WorkerError) as info:  # rank 1 dies after step 5; rank 0 waits in an all-reduce
        cdist.launch(ncf_worker, 2, CFG, _spec(ckpt, fail_at_step=5, fail_rank=1), quiet=True,
                     timeout_s=scaled(900), collective_timeout_s=scaled(900))
    assert info.value.rank == 1 and "injected failure on rank 1 after step 5" in str(info.value)
    # waiting for rank 0's all-reduce would take the whole collective timeout; killing it is
    # immediate (the margin covers a busy machine's slow start-up and training)
    assert time.time() - t0 < scaled(900) / 2 and not _procs.stray_children()
    assert _model(ckpt)[0] == 4, "the last checkpoint before the failure"
    assert sorted(set(os.listdir(ckpt)) - {LOCK_NAME}) == sorted([CHECKPOINT_NAME, PREVIOUS_NAME]), (
        "the latest and the previous checkpoint, no half-written one (temp file) left behind "
        "(the killed run's lock may stay)"
    )

    resumed = cdist.launch(ncf_worker, 2, CFG, _spec(ckpt), quiet=True, timeout_s=scaled(600))
    uninterrupted = _model(full)
    assert resumed[0]["steps"] == STEPS and _model(ckpt)[0] == STEPS
    _assert_same_params(_model(ckpt)[1], uninterrupted[1])
    full_record = torch.load(full / CHECKPOINT_NAME, weights_only=True)["loop"]["curve"]
    assert resumed[0]["curve"]["step"] == full_record["step"] and resumed[0]["curve"]["hr"] == full_record["hr"]


def test_synchronized_batchnorm_matches_one_process_and_local_does_not(env):
    out = cdist.launch(batchnorm_worker, 2, 4, 3, quiet=True, timeout_s=scaled(600))[0]
    local, sync = out["rows"]["local BatchNorm"], out["rows"]["synchronized BatchNorm"]
    assert max(sync["running_mean"], sync["running_var"], sync["parameters"]) < 1e-5
    assert min(local["running_mean"], local["running_var"]) > 1e-2
    assert sync["bn_class"] == "AllReduceBatchNorm"  # CPU: torch's SyncBatchNorm needs GPU tensors
    assert [r["matches (< 1e-05)"] for r in batchnorm_table(out).rows] == [False, True]


def test_synchronized_batchnorm_with_unequal_shards_is_one_process_batchnorm():
    """5 rows on rank 0, 2 on rank 1 (a global batch that does not divide): the statistics are
    the global batch's, weighted by each rank's count, not an average of the two ranks' means."""
    import _dist_workers as W

    for out in cdist.launch(W.allreduce_batchnorm_unequal_shards, 2, (5, 2), quiet=True, timeout_s=scaled(600)):
        assert max(out.values()) < 1e-5, out


def test_same_worker_under_torchrun_with_two_cpu_processes(env):
    out = env["tmp"] / "torchrun.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "course_lib.train_ddp", "--dataset", "synthetic", "--synthetic-size", "tiny",
           "--global-batch", "256", "--micro-batch", "64", "--max-steps", "8", "--target-hr", "0.0",
           "--config", json.dumps({"factors": 8, "layers": [16, 8], "eval_every_epochs": 0.011}), "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the target (0.0) is met at step 0; the first decision point after training is step 3, and
    # rank 0's decision is broadcast, so both ranks stop there
    assert "rank 0 of 2 stopped after 3 steps" in proc.stdout and "rank 1 of 2 stopped after 3 steps" in proc.stdout
    record = json.loads(out.read_text())
    assert record["world_size"] == 2 and record["steps"] == 3 and record["steps_to_target"] == 0


def test_script_runs_train_to_the_datasets_target_on_its_own_device(env, monkeypatch):
    """``python -m course_lib.train_ddp`` (and the sbatch example) stop at the dataset's
    target, and a process alone trains on the machine's GPU, not on the CPU beside it."""
    from course_lib import train_ddp
    from course_lib.train import workers

    cfg, spec, _, _ = train_ddp.parse(["--dataset", "synthetic"])
    assert cfg["target_hr"] is None and spec.default_target
    cfg, spec, _, _ = train_ddp.parse(["--no-target"])
    assert not spec.default_target and cfg["stop_at_target"] is False
    cfg, spec, _, _ = train_ddp.parse(["--target-hr", "0.5"])
    assert cfg["target_hr"] == 0.5 and not spec.default_target
    _, spec, _, _ = train_ddp.parse(["--fail-at-step", "3"])  # tests/test_slurm.py: a rank dying under srun
    assert (spec.fail_at_step, spec.fail_rank) == (3, 1) and train_ddp.parse([])[1].fail_at_step is None

    monkeypatch.setattr(workers, "default_target_hr", lambda data: 0.0)
    record = ncf_worker(0, 1, CFG.replace(global_batch_size=64, micro_batch_size=None, max_steps=4),
                        RunSpec(dataset="synthetic", synthetic_size="tiny", progress="none", default_target=True))
    assert record["target_hr"] == 0.0 and record["steps_to_target"] == 0

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert str(cdist.device()) == "cuda"  # no process group: the GPU of a GPU machine
