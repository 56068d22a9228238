"""Device and backend detection: what this machine can do (lesson 00).

Detection never creates a CUDA context in the calling process when ``nvidia-smi`` is
available (the notebook should not hold GPU memory before it launches workers), and
never needs a GPU: on a CPU-only machine every field has a sensible value.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .tables import Table


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    memory_gib: float
    compute_capability: str  # "9.0"


@dataclass(frozen=True, repr=False)
class Hardware:
    cpu_cores: int  # cores this process may use (affinity / cgroup aware)
    cpu_model: str
    gpus: tuple[GPU, ...] = field(default_factory=tuple)
    cuda_available: bool = False
    gloo_available: bool = False
    nccl_available: bool = False
    # "native": the processor has instructions (CPU) or tensor cores (GPU) for the format; it says
    # nothing about speed, which lesson 05 measures. EMULATED: converted in software (no speed either).
    bf16_autocast: str = "no"  # "native", EMULATED or "no"
    fp16_autocast: str = "no"
    torch_version: str = torch.__version__
    cpu_isa16: tuple[str, ...] = ()  # the CPU's 16-bit flags found in /proc/cpuinfo (CPU_ISA16)

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def tier(self) -> str:
        """The course's hardware tier: 'cpu', 'one-gpu' or 'multi-gpu'."""
        return {0: "cpu", 1: "one-gpu"}.get(self.gpu_count, "multi-gpu")

    @property
    def default_backend(self) -> str:
        return "nccl" if self.gpu_count and self.nccl_available else "gloo"

    def table(self) -> Table:
        t = Table(["property", "value"], title="This machine")
        t.add(property="tier", value=self.tier)
        t.add(property="CPU", value=f"{self.cpu_model} — {self.cpu_cores} usable cores")
        if self.gpus:
            for g in self.gpus:
                t.add(property=f"GPU {g.index}",
                      value=f"{g.name}, {g.memory_gib:.0f} GiB, compute capability {g.compute_capability}")
        else:
            t.add(property="GPUs", value="none (CUDA not available)")
        t.add(property="torch", value=self.torch_version)
        t.add(property="gloo / NCCL", value=f"{_yes(self.gloo_available)} / {_yes(self.nccl_available)}")
        t.add(property="default backend", value=self.default_backend)
        units = sixteen_bit_units(self)
        for fmt in ("bf16", "fp16"):
            kind = getattr(self, f"{fmt}_autocast")
            t.add(property=f"{fmt} autocast",
                  value=f"{kind}: {units[fmt]}" if units[fmt] else f"{kind}: no {fmt} instructions or tensor cores")
        t.add(property="16-bit speed", value="not measured here: 'native' names instructions, not a speedup "
                                             "(lesson 05 measures it)")
        return t

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def __str__(self) -> str:
        return str(self.table())

    __repr__ = __str__


# The label names the mechanism, not a speed: nothing here measures it (lesson 05 does)
EMULATED = "emulated (converted in software)"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


# CPU flags (Linux /proc/cpuinfo names) of 16-bit arithmetic, and what each one is
CPU_ISA16 = {
    "amx_bf16": ("bf16", "AMX-BF16 tile matrix units"),
    "avx512_bf16": ("bf16", "AVX512-BF16 dot-product instructions"),
    "amx_fp16": ("fp16", "AMX-FP16 tile matrix units"),
    "avx512_fp16": ("fp16", "AVX512-FP16 arithmetic instructions"),
}


def sixteen_bit_units(hw: Hardware, device: str | None = None) -> dict:
    """What does 16-bit math in hardware on ``device`` (default: the GPU when there is one), per
    format: ``{"bf16": text or None, "fp16": text or None}`` (lessons 00, 05). GPUs by compute
    capability: fp16 tensor cores from Volta (7.0), bf16 ones from Ampere (8.0); CPUs by their
    flags (:data:`CPU_ISA16`). None: no such units, autocast converts in software."""
    on_gpu = (device or ("cuda" if hw.gpu_count and hw.cuda_available else "cpu")).startswith("cuda")
    if on_gpu and hw.gpus:
        cc = min(hw.gpus, key=lambda g: tuple(map(int, g.compute_capability.split("."))))
        major = int(cc.compute_capability.split(".")[0])
        where = f"tensor cores ({cc.name}, compute capability {cc.compute_capability})"
        return {"bf16": f"bf16 {where}" if major >= 8 else None, "fp16": f"fp16 {where}" if major >= 7 else None}
    found = {"bf16": [], "fp16": []}
    for flag in hw.cpu_isa16:
        if flag in CPU_ISA16:
            fmt, text = CPU_ISA16[flag]
            found[fmt].append(text)
    return {fmt: ", ".join(texts) or None for fmt, texts in found.items()}


def usable_cpu_cores(**cgroup) -> int:
    """Cores this process may run on (respects taskset/SLURM affinity and a cgroup CPU quota: a
    JupyterHub cpu_limit, a container's --cpus), at least 1. ``cgroup``: where the cgroup files are
    (``_cgroup.cpu_quota_cores``; tests)."""
    from ._cgroup import cores_allowed_by_quota

    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        cores = max(1, os.cpu_count() or 1)
    quota = cores_allowed_by_quota(**cgroup)
    return cores if quota is None else min(cores, quota)


def cpu_info() -> tuple[str, set[str]]:
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown CPU":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        import platform

        model = platform.processor() or model
    return model, flags


def _gpus_from_nvidia_smi() -> tuple[GPU, ...] | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name,memory.total,compute_cap", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = []
    for line in out.strip().splitlines():
        idx, name, mem_mib, cc = [p.strip() for p in line.split(",")]
        gpus.append((idx, name, float(mem_mib) / 1024, cc))
    if visible is not None:  # renumber as CUDA will see them
        order = [v.strip() for v in visible.split(",") if v.strip()]
        by_idx = {g[0]: g for g in gpus}
        gpus = [by_idx[v] for v in order if v in by_idx]
        if len(gpus) != len(order):  # UUIDs or MIG names: let torch decide
            return None
    return tuple(GPU(i, n, m, c) for i, (_, n, m, c) in enumerate(gpus))


def _gpus_from_torch() -> tuple[GPU, ...]:
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)  # creates a CUDA context: fallback only
        gpus.append(GPU(i, p.name, p.total_memory / 2**30, f"{p.major}.{p.minor}"))
    return tuple(gpus)


def detect() -> Hardware:
    """Detect cores, GPUs, backends and autocast support of this machine."""
    cuda = torch.cuda.is_available()
    # nvidia-smi is asked even without CUDA: GPUs this torch cannot use (a CPU-only build, a
    # driver too old) are listed with cuda_available=False, and the tier plan says so.
    gpus: tuple[GPU, ...] = _gpus_from_nvidia_smi() or ()
    if cuda and len(gpus) != torch.cuda.device_count():
        gpus = _gpus_from_torch()
    model, flags = cpu_info()
    if gpus and cuda:
        major = min(int(g.compute_capability.split(".")[0]) for g in gpus)
        bf16 = "native" if major >= 8 else EMULATED  # bf16 tensor cores from Ampere (8.0)
        fp16 = "native" if major >= 7 else "yes"  # fp16 tensor cores from Volta (7.0)
    else:
        # CPU autocast always works functionally, but without AVX512-BF16/AMX it is emulated (on an
        # AVX2-only server about 20x slower than fp32 for NeuMF: a measurement of that machine, not of
        # this one, so the label does not say "slow"; lesson 05 measures this machine's speed).
        bf16 = "native" if flags & {"avx512_bf16", "amx_bf16"} else EMULATED
        fp16 = "native" if flags & {"avx512_fp16", "amx_fp16"} else EMULATED
    return Hardware(
        cpu_cores=usable_cpu_cores(),
        cpu_model=model,
        gpus=gpus,
        cuda_available=cuda,
        gloo_available=dist.is_available() and dist.is_gloo_available(),
        nccl_available=dist.is_available() and dist.is_nccl_available() and cuda,
        bf16_autocast=bf16,
        fp16_autocast=fp16,
        cpu_isa16=tuple(sorted(flags & set(CPU_ISA16))),
    )


def default_device() -> torch.device:
    """``cuda`` when a GPU is visible, else ``cpu`` — for single-process lessons."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
