"""The tier plan: every per-tier decision the lessons make, as one pure function of the hardware (lesson 00).

``plan(hw, profile)`` maps a hardware description (:class:`course_lib.hardware.Hardware`,
detected or written by hand) to a :class:`TierPlan`: the dataset of the NCF lessons, the
device of single-process runs, the ranks and backend of each multi-process section, the
precision ``"auto"`` means, and the BERT model size. Every lesson's setup cell reads it
(:func:`course_lib.lesson.setup`), and ``tests/test_tiers.py`` checks it for machines we
do not have (a CPU laptop, one GPU, nodes of 3, 4 and 8 GPUs).

The rules, and why:

* **one dataset for the whole course**: the trick ladder divides times measured by
  different lessons, so lessons 01-06 must train on the same data (ml-20m on GPUs, which
  make the larger set affordable; ml-1m on CPUs; synthetic stand-ins offline);
* **NCCL only with one GPU per rank**: two NCCL ranks on one GPU fail ("Duplicate GPU
  detected"), so on one GPU the multi-process sections run 2 gloo ranks on the CPU —
  communication is still measured — and their times are not put on the GPU's ladder;
* **a power-of-two number of ranks**: the course's global batches are powers of two, so
  a node of 3, 6 or 7 GPUs uses 2, 4 or 4 of them for data parallelism (a batch that does
  not divide is an error, not a silent change);
* **lesson 10 on the same rule**: its workers put their tensors on ``course_lib.dist.device()``;
  its main launch has 2 ranks on every tier (the pipeline bubble's table is for p = 2), NCCL
  with a GPU each on 2 or more GPUs, else gloo CPU processes (one GPU: the CPU, as lesson 06);
  the 2 x 2 mesh needs 4 ranks: NCCL on 4 or more GPUs, else 4 gloo CPU processes; in smoke
  the mesh shrinks to 1 x 2 and joins the main launch (one process start less);
* **precision**: bf16 where the hardware has it natively, fp16 on GPUs without it, fp32 on
  CPUs without native bf16 (autocast is emulated there, about 20x slower for NeuMF); lesson 06's
  ranks use what "auto" means on *their* device, so on one GPU (ranks on the CPU) a bf16 setting
  measured on the GPU falls back to the CPU's.
* **lesson 01's DataLoader workers**: every core but one, at most 8 — the training process keeps
  a core (on a 2-core machine the one worker still competes with it for the other core's time);
* **lesson 01's torch.compile**: ``reduce-overhead`` on GPUs (CUDA graphs: one launch replays a
  step's many small kernels) and the ``default`` mode on CPUs, which have no launch queue to
  shorten; with inductor in the full profile. The smoke profile captures the graph with
  AOTAutograd only (``aot_eager``): inductor's first, cold compile of NeuMF's step took 12 s on a
  2-core CPU (torch 2.13), as long as the rest of the smoke lesson.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .config import PROFILES
from .hardware import Hardware
from .precision import auto_mode
from .tables import Table

CPU_DEMO_RANKS = 2  # multi-process lessons on a CPU show the mechanics with 2 processes


def largest_power_of_two_at_most(n: int) -> int:
    """1, 2, 4, 8, ... the largest one <= ``n`` (``n >= 1``)."""
    if n < 1:
        raise ValueError(f"need at least 1, got {n}")
    return 1 << (n.bit_length() - 1)


@dataclass(frozen=True, repr=False)
class TierPlan:
    """What every lesson runs on this hardware (see the module docstring for the rules)."""

    tier: str  # "cpu" | "one-gpu" | "multi-gpu"
    profile: str  # "full" | "smoke"
    device: str  # single-process lessons: "cuda" | "cpu"
    dataset: str  # lessons 01-06 (NeuMF): "ml-20m" | "ml-1m"
    precision: str  # what Precision("auto") resolves to on `device`
    demo_world_size: int  # lesson 00's first all-reduce, lesson 06's checks (accumulation, resume, BatchNorm)
    demo_backend: str
    dp_world_size: int  # lesson 06's data-parallel training run and its largest scaling point
    dp_backend: str
    dp_on_ladder: bool  # the data-parallel run is comparable with the ladder's single-device rungs
    dp_device: str  # what each data-parallel rank computes on: "cuda" (NCCL, one GPU each) | "cpu"
    dp_precision: str  # what "auto" means on dp_device: a ladder setting measured on another device falls back to it
    scaling_world_sizes: tuple[int, ...]  # lesson 06's strong/weak scaling points
    bert_model: str  # lesson 07's preset (course_lib.models.bert.PRESETS)
    bert_seq_len: int
    bert_vocab_size: int  # WordPiece vocabulary trained on the corpus
    bert_large_batch_factor: int  # lesson 07's large batch = this x the small batch
    bert_max_micro_batch: int  # sequences per forward/backward on one rank
    bert_world_size: int  # lesson 07's data-parallel LAMB run; 1 = accumulation only
    mp_world_size: int = CPU_DEMO_RANKS  # lesson 10's tensor/pipeline/sharded runs (p = 2: the bubble's table)
    mp_backend: str = "gloo"  # lesson 10's main launch: "nccl" with a GPU per rank, else gloo CPU processes
    mesh_world_size: int = 4  # lesson 10's 2-D mesh (dp x tp = 2 x 2; smoke: 1 x 2)
    mesh_backend: str = "gloo"  # the mesh's launch: "nccl" with a GPU per rank, else gloo CPU processes
    loader_workers: int = 1  # lesson 01's DataLoader worker processes (every core but one, at most 8)
    compile_mode: str = "default"  # lesson 01's torch.compile mode: "reduce-overhead" (CUDA graphs) on GPUs
    compile_backend: str = "inductor"  # "aot_eager" in smoke: graph capture without inductor's code generation

    def to_dict(self) -> dict:
        return asdict(self)

    def table(self) -> Table:
        t = Table(["decision", "value"], title=f"The course's plan for this machine ({self.tier}, {self.profile})")
        for k, v in self.to_dict().items():
            t.add(decision=k, value=", ".join(map(str, v)) if isinstance(v, tuple) else v)
        return t

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def __str__(self) -> str:
        return str(self.table())

    # a notebook's last expression shows its repr outside HTML: the table, not a 700-character dataclass line
    __repr__ = __str__


def plan(hw: Hardware, profile: str = "full") -> TierPlan:
    """The tier plan for hardware ``hw`` in run profile ``profile`` (pure: no device is touched)."""
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r}; choose one of {PROFILES}")
    gpus = hw.gpu_count
    if gpus and not hw.cuda_available:
        raise RuntimeError(
            f"nvidia-smi lists {gpus} GPU(s) but this PyTorch cannot use them (torch.cuda.is_available() is False; "
            f"torch {hw.torch_version}). Install a CUDA build of torch that matches the driver, or hide the GPUs "
            "(CUDA_VISIBLE_DEVICES=) to run the CPU tier on purpose.")
    device = "cuda" if gpus else "cpu"
    smoke = profile == "smoke"
    nccl = gpus >= 2 and hw.nccl_available
    dp_world = largest_power_of_two_at_most(gpus) if nccl else CPU_DEMO_RANKS
    mesh_world = 2 if smoke else 4

    def one_gpu_per_rank(ranks: int) -> str:  # NCCL only with a GPU for every rank
        return "nccl" if hw.nccl_available and ranks <= gpus else "gloo"

    scaling = tuple(sorted({1, dp_world} | {w for w in (2, 4, 8) if w < dp_world}))
    return TierPlan(
        tier=hw.tier, profile=profile, device=device,
        dataset="ml-20m" if gpus else "ml-1m",
        precision=auto_mode(hw, device),
        demo_world_size=CPU_DEMO_RANKS, demo_backend="nccl" if nccl else "gloo",
        dp_world_size=dp_world, dp_backend="nccl" if nccl else "gloo",
        # one GPU: the 2 ranks are CPU processes, not comparable with the GPU rungs
        dp_on_ladder=nccl or not gpus,
        dp_device="cuda" if nccl else "cpu", dp_precision=auto_mode(hw, "cuda" if nccl else "cpu"),
        scaling_world_sizes=scaling,
        # a CPU trains the 2-layer preset: several times faster than "mini", it buys lesson 07 a larger batch
        bert_model="tiny" if smoke or not gpus else "small",
        bert_seq_len=32 if smoke else (128 if gpus else 64),
        bert_vocab_size=1024 if smoke else (8192 if gpus else 4096),
        bert_large_batch_factor=4 if smoke else (64 if gpus else 8),
        bert_max_micro_batch=16 if smoke else (256 if gpus else 64),
        bert_world_size=largest_power_of_two_at_most(gpus) if nccl else 1,
        mp_world_size=CPU_DEMO_RANKS, mp_backend=one_gpu_per_rank(CPU_DEMO_RANKS),
        mesh_world_size=mesh_world, mesh_backend=one_gpu_per_rank(mesh_world),
        loader_workers=max(1, min(8, hw.cpu_cores - 1)),
        # the modes other than "default" are inductor's: the smoke profile's aot_eager takes none
        compile_mode="reduce-overhead" if gpus and not smoke else "default",
        compile_backend="aot_eager" if smoke else "inductor",
    )
