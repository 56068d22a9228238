"""The GPU tier's own tests: they run on a GPU machine and skip everywhere else.

The rest of the suite checks the CPU tier on every machine (``tests/conftest.py`` hides the
GPUs); these ask for the GPUs::

    COURSE_TEST_GPU=1 pytest tests/test_gpu.py        # ci/gpu-check.sh runs them

Kept small, and each one states the invariant it checks on the device: the plan for this
machine, NeuMF and BERT steps in each precision with the fused optimizer, phase timing by
CUDA events, lesson 01's step variants (SparseAdam tables, pinned DataLoader batches, CUDA graphs
through torch.compile), lesson 05's measurements on the device, the launcher's backend per GPU count,
lesson 10's workers on a GPU, and (two GPUs or more) NCCL data parallelism and lesson 10's launch equal
to one process, with the all-reduces timed by CUDA events in the comm hook.
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
from course_lib.train import RunHooks, TrainConfig, train_to_target
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
    r = train_to_target(data, CFG.replace(precision=precision), device="cuda", progress="none",
                        hooks=RunHooks(time_phases=True, keep_model=True))
    assert r.device.startswith("cuda") and r.steps == 8 and all(torch.isfinite(p).all() for p in r.model.parameters())
    assert r.precision["mode"] == precision
    # CUDA events timed each phase without synchronizing every step; the clock read them at the end
    assert all(r.phase_time_s[p] > 0 for p in ("sampling", "forward_backward", "optimizer"))


def test_lesson_05s_measurements_run_on_the_gpu(data):
    """Static loss scaling, steady-state throughput by phase, the activation-gradient probe and the
    trust ratio through Precision.step, on the device (lesson 05)."""
    from course_lib.lessons import l05_mixed_precision as MP
    from course_lib.lessons import l05_speed as SP

    r = train_to_target(data, CFG.replace(precision="fp16", loss_scaling="static", loss_scale=1024.0), device="cuda",
                        progress="none", hooks=RunHooks(keep_model=True))
    assert r.precision["loss_scaling"] == "static" and r.precision["loss_scale"] == 1024.0
    speed = SP.precision_throughput(data, CFG, ("fp32", "fp16"), steps=3, device="cuda", repeats=2, warmup_steps=1)
    assert all(v > 0 for run in speed.values() for v in run.phase_s.values())  # CUDA events, read at the end
    grads = MP.autocast_gradients(r.model, data, CFG)
    assert set(grads["dtypes"].values()) == {"float16"} and grads["count"]["activation"] > 0
    rows = MP.lars_unscale_rows(r.model, data, CFG, scale=2.0 ** 16)
    assert all(abs(x["Precision.step"] / x["fp32"] - 1) < 1e-4 for x in rows)
    assert "tensor cores" in SP.speed_causes_table(speed, hardware.detect(), "cuda").rows[0]["16-bit units"]
    assert SP.speed_comparisons(speed)[0].question == "samples/s, fp16 / fp32 (interleaved rounds)"


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
    train_to_target(data, CFG, device="cuda", progress="none",
                    hooks=RunHooks(checkpoint=Checkpointer(tmp_path / "one", 8)))
    a = torch.load(tmp_path / "ddp" / CHECKPOINT_NAME, weights_only=True)["model"]
    b = torch.load(tmp_path / "one" / CHECKPOINT_NAME, weights_only=True)["model"]
    for k in a:
        rel = ((a[k].double() - b[k].double()).norm() / b[k].double().norm().clamp_min(1e-30)).item()
        assert rel < 1e-4, f"{k}: {rel:.2e}"
    # the all-reduce time is measured as on gloo, by the recording hook, with CUDA events
    assert out[0]["comm_method"] == "timed: every bucket's all-reduce (CUDA events)"
    assert 0 < out[0]["comm_time_s"] <= out[0]["train_time_s"]


def test_cuda_event_clock_times_work_on_the_gpu():
    """The stamps lesson 06's hook records on GPU ranks: events read after the work, in order."""
    from course_lib.comm.hooks import make_clock

    clock = make_clock(torch.device("cuda", 0))
    x = torch.randn(2048, 2048, device="cuda")
    start = clock.stamp()
    for _ in range(10):
        x = x @ x / 2048 ** 0.5
    end = clock.stamp()
    t0, t1 = clock.seconds([start, end])
    assert 0 <= t0 < t1


@TWO_GPUS
def test_bucket_benchmark_over_nccl_counts_and_times_every_bucket():
    from course_lib import comm

    spec = comm.MLPSpec(in_features=256, hidden=1024, depth=3, out_features=10, batch_size=64)  # ~13 MiB
    rows = cdist.launch(comm.ddp_bucket_benchmark, 2, [1.0, 25.0], 5, spec, 2, True, ["fp16", "bf16"], 2,
                        backend="nccl", quiet=True, timeout_s=scaled(600))[0]
    grads = spec.num_params * 4
    assert [r["bytes_per_step"] for r in rows[:3]] == [grads] * 3
    assert all(r["refused"] is None and r["bytes_per_step"] == grads // 2 for r in rows[4:])  # NCCL >= 2.10: bf16 too
    assert all(r["comm_ms"] > 0 and r["clock"] == "CUDA events" for r in rows if r["overlap"] is not None)
    for r in rows:
        tl = r["timeline"]
        assert 0 < tl["backward_start_ms"] <= tl["backward_end_ms"] <= tl["step_ms"]
        assert all(0 <= a <= b for a, b, _ in tl["allreduces_ms"])


def _lesson10_checks(outs, device_of_rank):
    """Lesson 10's equalities, whatever the device: tensor parallel (ours and DTensor's), both pipeline schedules
    (ours and torch.distributed.pipelining), ZeRO-1 and FSDP2 against DDP, the halo convolution."""
    from course_lib.lessons import l10_model_parallelism as study
    from course_lib.parallel import pipeline

    assert [o["tensor"]["device"] for o in outs] == [device_of_rank(r) for r in range(len(outs))]
    assert {o["sharded"]["device"] for o in outs} == {o["pipeline"]["device"] for o in outs} == \
        {device_of_rank(r) for r in range(len(outs))}
    assert study.tensor_max_diff(outs) <= study.TOLERANCE
    rows = pipeline.measured_bubbles([o["pipeline"] for o in outs])
    assert all(r["grad_diff"] <= study.TOLERANCE for r in rows)
    assert all(r["native_grad_diff"] <= study.TOLERANCE for r in rows if r["native_grad_diff"] is not None)
    assert all(r["cpu_share"] is None for r in rows)  # a GPU's op is timed by the host clock, not a CPU share
    assert study.sharded_equal([o["sharded"] for o in outs])
    assert all(max(o["halo"]["out"], o["halo"]["input_grad"]) <= study.TOLERANCE for o in outs)


def test_lesson_10s_workers_run_on_one_gpu():
    """Every lesson 10 worker with its tensors on the GPU: one NCCL rank (the lesson itself runs 2 gloo CPU
    ranks on one GPU; this checks the device code a machine with 2 GPUs runs, on the one we have)."""
    from course_lib.lessons import l10_model_parallelism as study

    outs = cdist.launch(study.lesson_worker, 1, study.lesson_spec("smoke"), backend="nccl", quiet=True,
                        timeout_s=scaled(600))
    _lesson10_checks(outs, lambda r: f"cuda:{r}")


@TWO_GPUS
def test_lesson_10_on_nccl_equals_one_process():
    """Lesson 10's one launch on 2 NCCL ranks, one GPU each, as the tier plan runs it on 2 GPUs or more."""
    from course_lib.lessons import l10_model_parallelism as study

    plan = tiers.plan(hardware.detect(), "smoke")
    assert (plan.mp_world_size, plan.mp_backend) == (2, "nccl")
    outs = cdist.launch(study.lesson_worker, 2, study.lesson_spec("smoke", mesh_dp=1), backend="nccl", quiet=True,
                        timeout_s=scaled(600))
    _lesson10_checks(outs, lambda r: f"cuda:{r}")
    assert all(m["grad_diff"] <= study.TOLERANCE for m in (o["mesh"] for o in outs))
