"""The tier plan, checked for machines we do not have: a CPU laptop, one GPU, nodes of 3, 4 and 8 GPUs."""

import pytest

from course_lib.config import BatchConfig
from course_lib.hardware import EMULATED, GPU, Hardware
from course_lib.tiers import largest_power_of_two_at_most, plan


def machine(gpus: int = 0, *, cores: int = 8, bf16: str | None = None, cuda: bool | None = None) -> Hardware:
    cuda = bool(gpus) if cuda is None else cuda
    return Hardware(cpu_cores=cores, cpu_model="test CPU",
                    gpus=tuple(GPU(i, "NVIDIA H100 80GB HBM3", 80.0, "9.0") for i in range(gpus)),
                    cuda_available=cuda, gloo_available=True, nccl_available=cuda and gpus > 0,
                    bf16_autocast=bf16 or ("native" if gpus else EMULATED),
                    fp16_autocast="native" if gpus else EMULATED)


LAPTOP, ONE, TWO, THREE, FOUR, EIGHT = (machine(0, cores=4), machine(1), machine(2), machine(3), machine(4),
                                       machine(8))


def test_cpu_laptop():
    p = plan(LAPTOP)
    assert (p.tier, p.device, p.dataset, p.precision) == ("cpu", "cpu", "ml-1m", "fp32")
    assert (p.dp_world_size, p.dp_backend, p.dp_on_ladder) == (2, "gloo", True)
    assert (p.dp_device, p.dp_precision) == ("cpu", "fp32")
    assert (p.demo_world_size, p.demo_backend) == (2, "gloo")
    assert p.scaling_world_sizes == (1, 2)
    assert (p.bert_model, p.bert_seq_len, p.bert_world_size) == ("tiny", 64, 1)
    assert plan(machine(0, bf16="native")).precision == "bf16"  # a CPU with AMX / AVX512-BF16


def test_one_gpu_measures_communication_on_two_gloo_ranks_and_keeps_them_off_the_ladder():
    p = plan(ONE)
    assert (p.tier, p.device, p.dataset, p.precision) == ("one-gpu", "cuda", "ml-20m", "bf16")
    assert (p.dp_world_size, p.dp_backend) == (2, "gloo")  # never two NCCL ranks on one GPU
    assert not p.dp_on_ladder  # CPU processes are not comparable with the GPU's rungs
    assert (p.dp_device, p.dp_precision) == ("cpu", "fp32")  # the GPU's bf16 is not the CPU ranks' (emulated there)
    assert (p.bert_model, p.bert_seq_len, p.bert_world_size) == ("small", 128, 1)


@pytest.mark.parametrize("hw, ranks", [(TWO, 2), (THREE, 2), (FOUR, 4), (EIGHT, 8)])
def test_gpu_nodes_use_nccl_on_a_power_of_two_ranks(hw, ranks):
    p = plan(hw)
    assert (p.tier, p.dp_world_size, p.dp_backend, p.dp_on_ladder) == ("multi-gpu", ranks, "nccl", True)
    assert (p.dp_device, p.dp_precision) == ("cuda", "bf16")
    assert p.demo_backend == "nccl" and p.bert_world_size == ranks
    assert p.scaling_world_sizes == tuple(w for w in (1, 2, 4, 8) if w <= ranks)


@pytest.mark.parametrize(
    "hw", [LAPTOP, ONE, TWO, THREE, FOUR, EIGHT], ids=["cpu", "1gpu", "2gpu", "3gpu", "4gpu", "8gpu"]
)
@pytest.mark.parametrize("profile", ["full", "smoke"])
def test_every_world_size_the_plan_launches_divides_the_lessons_batches(hw, profile):
    """Lesson 06's global batches (4096 and its micro batch 512; smoke 1024 / 128) and lesson 07's
    large batch split over every world size the plan launches."""
    p = plan(hw, profile)
    ncf_batch, ncf_micro = (1024, 128) if profile == "smoke" else (4096, 512)
    for w in set(p.scaling_world_sizes) | {p.dp_world_size}:
        BatchConfig(ncf_batch, ncf_batch // w, w)
    BatchConfig(2 * ncf_micro * 2, ncf_micro, p.demo_world_size)  # the accumulation check
    small = 8 if profile == "smoke" else 32
    large = small * p.bert_large_batch_factor
    micro = min(p.bert_max_micro_batch, large // p.bert_world_size)
    BatchConfig(large, micro, p.bert_world_size)


def test_the_whole_course_uses_one_dataset_per_machine():
    for hw in (LAPTOP, ONE, EIGHT):
        assert len({plan(hw, prof).dataset for prof in ("full", "smoke")}) == 1


def test_gpus_that_torch_cannot_use_are_a_clear_error_not_a_silent_cpu_tier():
    with pytest.raises(RuntimeError, match="nvidia-smi lists 2 GPU.*CUDA build of torch"):
        plan(machine(2, cuda=False))


def test_the_suite_runs_the_cpu_tier_on_a_gpu_host(tmp_path, monkeypatch):
    """On a GPU node the CPU-reference tests must not pick NCCL/CUDA.

    A fake ``nvidia-smi`` lists eight H100s; under the suite (conftest hides the GPUs with
    ``CUDA_VISIBLE_DEVICES=``) detection and the plan give the CPU tier, not an error.
    """
    import os

    from course_lib import hardware

    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\n" + "".join(
        f"echo '{i}, NVIDIA H100 80GB HBM3, 81559, 9.0'\n" for i in range(8)))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert hardware._gpus_from_nvidia_smi() == ()  # hidden, as CUDA will see them
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert len(hardware._gpus_from_nvidia_smi()) == 8  # the fake works: the hiding is what matters
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    hw = hardware.detect()
    assert (hw.tier, hw.cuda_available, plan(hw, "smoke").device) == ("cpu", False, "cpu")


def test_plan_table_and_unknown_profile():
    assert "dp_world_size" in str(plan(EIGHT))
    with pytest.raises(ValueError, match="profile"):
        plan(LAPTOP, "huge")


def test_largest_power_of_two_at_most():
    assert [largest_power_of_two_at_most(n) for n in (1, 2, 3, 5, 7, 8, 9)] == [1, 2, 2, 4, 4, 8, 8]
    with pytest.raises(ValueError):
        largest_power_of_two_at_most(0)


def test_lesson_setup_takes_the_plan_and_lesson_01s_lr(tmp_path, monkeypatch, capsys):
    """One call per lesson: profile, plan, data of the plan's dataset, target, and the baseline lr
    lesson 01 saved for that dataset (1e-3 when it saved none)."""
    from course_lib import lesson
    from course_lib.results import save_result

    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COURSE_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("COURSE_PROFILE", "smoke")
    s = lesson.setup("full", hw=LAPTOP, base_batch=512)
    assert (s.profile, s.plan.dataset, str(s.device)) == ("smoke", "ml-1m", "cpu")
    assert s.data is not None and s.target_hr > 0 and s.base_lr == lesson.DEFAULT_BASE_LR
    assert s.base_cfg.global_batch_size == 512 and s.base_cfg.optimizer == "adam"
    assert s.base_cfg.target_hr == s.target_hr  # the target is part of the settings
    assert s.data.source.split("\n")[0] in capsys.readouterr().out  # it says what it loaded
    save_result("01_baseline", {"dataset": s.data.name, "lr": 2e-3})
    assert lesson.setup("full", hw=LAPTOP, quiet=True).base_lr == 2e-3
    save_result("01_baseline", {"dataset": "another", "lr": 5e-3})  # another dataset's choice is not taken
    assert lesson.setup("full", hw=LAPTOP, quiet=True).base_lr == lesson.DEFAULT_BASE_LR
    assert lesson.setup("full", ncf=False, hw=ONE, quiet=True).data is None


def test_settings_check_their_types_by_name_and_describe_their_arithmetic():
    from course_lib.train import TrainConfig
    from course_lib.train.mlm import MLMTrainConfig

    with pytest.raises(TypeError, match=r"TrainConfig.global_batch_size must be int, got '256'.*without quotes"):
        TrainConfig(global_batch_size="256")
    with pytest.raises(TypeError, match=r"TrainConfig.base_lr must be float, got '1e-3'"):
        TrainConfig(base_lr="1e-3")
    with pytest.raises(ValueError, match=r"TrainConfig.lr_scaling='cubic'"):
        TrainConfig(lr_scaling="cubic")
    # a warmup longer than the run is shortened where the run is made (RunSettings.fit_to_run; tests/test_run_fit.py)
    assert MLMTrainConfig(max_steps=5).fit_to_run(5)[0].warmup_steps == 5
    with pytest.raises(TypeError, match=r"MLMTrainConfig.max_grad_norm must be float \| None, got True"):
        MLMTrainConfig(max_grad_norm=True)
    assert TrainConfig(global_batch_size=4096, micro_batch_size=512, optimizer="adam", base_lr=4e-3).describe(2) == \
        "global batch 4096 = 2 ranks x micro batch 512 x 4 accumulation steps; adam lr 0.004 (as given); fp32"
    ncf = TrainConfig(global_batch_size=4096, base_lr=1e-3, base_batch_size=256, lr_scaling="sqrt", warmup_steps=50)
    assert ncf.describe() == ("global batch 4096 = 1 rank x micro batch 4096 x 1 accumulation step; sgd peak lr 0.004 "
                              "= 0.001 at batch 256 x sqrt(4096 / 256) (sqrt rule), linear warmup 50 steps; fp32")
    m = MLMTrainConfig(global_batch_size=256, micro_batch_size=64, base_lr=1e-2, base_batch_size=64, max_steps=100,
                       warmup_steps=20)
    assert m.describe().startswith("global batch 256 = 1 rank x micro batch 64 x 4 accumulation steps; ")
    assert "lamb peak lr 0.02 = 0.01 at batch 64 x sqrt(256 / 64) (sqrt rule), linear warmup 20 steps, " \
        "polynomial decay" in m.describe()
    # a saved setting comes back with the lr it ran at, and says where that lr came from
    saved = ncf.to_dict()
    assert saved["peak_lr"] == pytest.approx(4e-3) and TrainConfig.from_dict(saved) == ncf


def test_launch_refuses_a_batch_that_does_not_split_before_starting_anything(monkeypatch):
    from course_lib import dist as cdist
    from course_lib.train import TrainConfig
    from course_lib.train.workers import RunSpec, ncf_runs, ncf_worker

    def no_process(*a, **k):
        raise AssertionError("a process was started")

    from course_lib.dist import launcher

    monkeypatch.setattr(launcher, "_loopback_store", no_process)
    cfg = TrainConfig(global_batch_size=4096, micro_batch_size=512)
    with pytest.raises(ValueError, match="4096 is not divisible by micro_batch_size \\* world_size = 512 \\* 3"):
        cdist.launch(ncf_worker, 3, cfg, RunSpec())
    with pytest.raises(ValueError, match="does not split evenly over world_size=3"):
        cdist.launch(ncf_runs, 3, [TrainConfig(global_batch_size=256), TrainConfig(global_batch_size=4096)], RunSpec())


@pytest.mark.parametrize("local_ranks, gpus, expected", [(2, 0, "gloo"), (2, 1, "gloo"), (2, 2, "nccl"), (4, 8, "nccl"),
                                                          (8, 4, "gloo")])
def test_torchrun_backend_needs_one_gpu_per_rank_on_the_node(local_ranks, gpus, expected, monkeypatch):
    """``torchrun --nproc-per-node 2`` on one GPU must not pick NCCL (two NCCL ranks on one GPU fail)."""
    import torch

    from course_lib import dist as cdist

    chosen = {}

    def fake_init(backend, **kw):
        chosen["backend"] = backend
        raise SystemExit  # stop before a real process group

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: None)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "init_process_group", fake_init)
    for k, v in {"WORLD_SIZE": str(local_ranks * 2), "LOCAL_WORLD_SIZE": str(local_ranks), "RANK": "0",
                 "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit):
        cdist.init_from_env("auto")
    assert chosen["backend"] == expected


@pytest.mark.parametrize("hw, profile, expected", [
    (LAPTOP, "full", (2, "gloo", 4, "gloo")), (LAPTOP, "smoke", (2, "gloo", 2, "gloo")),
    (ONE, "full", (2, "gloo", 4, "gloo")),  # never two NCCL ranks on one GPU: CPU processes, as lesson 06
    (TWO, "full", (2, "nccl", 4, "gloo")),  # the 2 x 2 mesh needs 4 GPUs for NCCL
    (TWO, "smoke", (2, "nccl", 2, "nccl")),  # the 1 x 2 mesh fits on the 2 GPUs
    (FOUR, "full", (2, "nccl", 4, "nccl")), (EIGHT, "full", (2, "nccl", 4, "nccl")),
    (EIGHT, "smoke", (2, "nccl", 2, "nccl"))],
    ids=["cpu", "cpu-smoke", "1gpu", "2gpu", "2gpu-smoke", "4gpu", "8gpu", "8gpu-smoke"])
def test_lesson_10_runs_nccl_only_with_a_gpu_per_rank(hw, profile, expected):
    """Lesson 10's two launches: its main one (2 ranks: the bubble's table is for p = 2) and the mesh's
    (2 x 2; smoke 1 x 2): NCCL where every rank has a GPU of its own, gloo CPU processes otherwise."""
    p = plan(hw, profile)
    assert (p.mp_world_size, p.mp_backend, p.mesh_world_size, p.mesh_backend) == expected
    for ranks, backend in ((p.mp_world_size, p.mp_backend), (p.mesh_world_size, p.mesh_backend)):
        assert backend == "gloo" or ranks <= hw.gpu_count


@pytest.mark.parametrize("hw, workers", [(machine(0, cores=2), 1), (LAPTOP, 3), (machine(0, cores=1), 1),
                                         (EIGHT, 7), (machine(8, cores=64), 8)])
def test_lesson_01_dataloader_workers_leave_the_training_process_a_core(hw, workers):
    assert plan(hw).loader_workers == plan(hw, "smoke").loader_workers == workers


@pytest.mark.parametrize("hw", [LAPTOP, ONE, EIGHT])
def test_lesson_01_compiles_with_cuda_graphs_on_gpus_and_captures_only_in_smoke(hw):
    full, smoke = plan(hw), plan(hw, "smoke")
    assert (full.compile_backend, smoke.compile_backend) == ("inductor", "aot_eager")
    assert full.compile_mode == ("reduce-overhead" if hw.gpu_count else "default")
    assert smoke.compile_mode == "default"  # inductor's modes mean nothing to aot_eager
    from course_lib.train import TrainConfig  # the plan's pair is a setting the engine accepts

    for p in (full, smoke):
        TrainConfig(optimizer="adam", compile=p.compile_mode, compile_backend=p.compile_backend)
