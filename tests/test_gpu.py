"""The GPU tier's own tests: they run on a GPU machine and skip everywhere else.

The rest of the suite checks the CPU tier on every machine (``tests/conftest.py`` hides the
GPUs); these ask for the GPUs::

    COURSE_TEST_GPU=1 pytest tests/test_gpu.py        # ci/gpu-check.sh runs them

Kept small, and each one states the invariant it checks on the device: the plan for this
machine, NeuMF and BERT steps in each precision with the fused optimizer, phase timing by
CUDA events, lesson 01's step variants (SparseAdam tables, pinned DataLoader batches, CUDA
graphs through torch.compile), the launcher's backend per GPU count, and (two GPUs or more)
NCCL data parallelism equal to one process.
"""

import os

import pytest
import torch

from course_lib import dist as cdist
from course_lib import hardware, tiers
from course_lib.bench import bert_throughput
from course_lib.data import load_synthetic
from course_lib.optim import fused_on_gpu
from course_lib.parallel import CHECKPOINT_NAME, Checkpointer
from course_lib.train import TrainConfig, train_to_target
from course_lib.train.ncf import build_model, make_optimizer
from course_lib.train.workers import RunSpec, ncf_worker
from _timing import scaled

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="GPU tier: needs CUDA (COURSE_TEST_GPU=1 on a GPU machine)")
TWO_GPUS = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs or more")
CFG = TrainConfig(global_batch_size=256, optimizer="adam", base_lr=5e-3, factors=8, layers=(16, 8),
                  eval_every_epochs=0.011, max_steps=8)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    old = os.environ.get("COURSE_DATA_DIR")
    os.environ["COURSE_DATA_DIR"] = str(tmp_path_factory.mktemp("cache"))  # workers inherit it
    try:
        yield load_synthetic("tiny")
    finally:
        os.environ.pop("COURSE_DATA_DIR") if old is None else os.environ.__setitem__("COURSE_DATA_DIR", old)


def test_the_plan_for_this_machine_is_a_gpu_tier():
    hw = hardware.detect()
    assert hw.gpu_count == torch.cuda.device_count() and hw.tier in ("one-gpu", "multi-gpu")
    p = tiers.plan(hw, "full")
    assert (p.device, p.dataset) == ("cuda", "ml-20m")
    assert p.dp_backend == ("nccl" if hw.gpu_count >= 2 else "gloo")


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_neumf_trains_on_the_gpu_with_fused_adam(data, precision):
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("no bf16 on this GPU")
    r = train_to_target(data, CFG.replace(precision=precision), device="cuda", progress="none", time_phases=True,
                        keep_model=True)
    assert r.device.startswith("cuda") and r.steps == 8 and all(torch.isfinite(p).all() for p in r.model.parameters())
    assert r.precision["mode"] == precision
    # CUDA events timed each phase without synchronizing every step; the clock read them at the end
    assert all(r.phase_time_s[p] > 0 for p in ("sampling", "forward_backward", "optimizer"))


def test_fused_adam_is_used_on_the_gpu(data):
    assert fused_on_gpu(torch.nn.Linear(4, 4).cuda()) and not fused_on_gpu(torch.nn.Linear(4, 4))
    assert make_optimizer(build_model(data, CFG).cuda(), CFG).defaults["fused"] is True


def test_lesson_01_step_variants_train_on_the_gpu(data):
    """Lesson 01's variants on CUDA: SparseAdam tables with fused dense Adam, pinned DataLoader batches, and
    a compiled step with CUDA graphs (inductor, mode "reduce-overhead"), whose losses follow eager's."""
    run = dict(device="cuda", progress="none", keep_model=True)
    eager = train_to_target(data, CFG, **run)
    sparse = train_to_target(data, CFG.replace(sparse_embeddings=True), **run)
    assert sparse.steps == 8 and all(torch.isfinite(p).all() for p in sparse.model.parameters())
    assert make_optimizer(sparse.model, CFG.replace(sparse_embeddings=True)).dense.defaults["fused"] is True
    pinned = train_to_target(data, CFG.replace(loader="dataloader", num_workers=1, pin_memory=True), **run)
    assert pinned.steps == 8
    graphs = train_to_target(data, CFG.replace(compile="reduce-overhead"), **run)
    losses = [(a, b) for a, b in zip(eager.curve["loss"], graphs.curve["loss"]) if a is not None]
    assert losses and all(abs(a - b) <= 1e-3 * abs(a) for a, b in losses)


def test_bert_steps_on_the_gpu():
    res = bert_throughput("tiny", seq_len=32, batch_size=8, device="cuda", steps=2, warmup_steps=1)
    assert res["fp32"]["seqs_per_s"] > 0 and {"bf16", "fp16"} & set(res)


def test_the_launcher_picks_the_backend_the_gpus_allow():
    """Two ranks: NCCL with one GPU each, gloo CPU processes when they would share one GPU."""
    out = cdist.launch(cdist.allreduce_demo, 2, quiet=True, timeout_s=scaled(300))
    expected = "nccl" if torch.cuda.device_count() >= 2 else "gloo"
    assert [o["backend"] for o in out] == [expected, expected]
    assert torch.equal(out[0]["received"], 3 * torch.arange(1, 5, dtype=torch.float32))


@TWO_GPUS
def test_nccl_data_parallel_equals_one_process(data, tmp_path):
    """W=2 x b=64 x k=2 over NCCL == one GPU with batch 256 (fp32; TF32 off, torch's default)."""
    spec = RunSpec(dataset="synthetic", synthetic_size="tiny", checkpoint_dir=str(tmp_path / "ddp"),
                   checkpoint_every=8, progress="none")
    cfg = CFG.replace(micro_batch_size=64)
    out = cdist.launch(ncf_worker, 2, cfg, spec, backend="nccl", quiet=True, timeout_s=scaled(600))
    assert out[0]["device"] == "cuda:0" and out[1]["device"] == "cuda:1"
    train_to_target(data, CFG, device="cuda", progress="none", checkpoint=Checkpointer(tmp_path / "one", 8))
    a = torch.load(tmp_path / "ddp" / CHECKPOINT_NAME, weights_only=True)["model"]
    b = torch.load(tmp_path / "one" / CHECKPOINT_NAME, weights_only=True)["model"]
    for k in a:
        rel = ((a[k].double() - b[k].double()).norm() / b[k].double().norm().clamp_min(1e-30)).item()
        assert rel < 1e-4, f"{k}: {rel:.2e}"
