"""Every lesson's setup, as one call: ``s = setup(PROFILE, ...)`` (lessons 00-07).

It resolves the run profile, detects the hardware, takes the tier plan
(:func:`course_lib.tiers.plan`) and, for the NeuMF lessons, loads the plan's dataset, the
HR@10 target and the baseline setting lesson 01 chose (its saved lr and Adam implementation), then prints one
paragraph saying all of it. The lessons' papermill parameters override the plan where
the learner sets them (``DATASET``, ``DEVICE``, ``TARGET_HR``, ``BASE_LR``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import resolve_profile
from .data import load_implicit
from .data.movielens import ImplicitData
from .hardware import Hardware, detect
from .results import load_results
from .tiers import TierPlan, plan
from .compile_cache import use_private_compile_caches
from .train.ncf import TrainConfig, default_target_hr

DEFAULT_BASE_LR = 1e-3  # Adam's lr at batch 256 when lesson 01 has not chosen one here


@dataclass
class Lesson:
    """What a lesson's setup cell established (``print(s)`` says it again)."""

    profile: str
    hw: Hardware
    plan: TierPlan
    device: torch.device
    data: ImplicitData | None = None
    target_hr: float | None = None
    base_cfg: TrainConfig | None = None
    base_lr_source: str = ""  # where the baseline's lr came from (a lesson run alone says so)

    @property
    def base_lr(self) -> float | None:
        return None if self.base_cfg is None else self.base_cfg.base_lr

    def describe(self) -> str:
        lines = [f"profile {self.profile}; {self.hw.tier} machine; device {self.device}"]
        if self.data is not None:
            lines.append(self.data.source)
            lines.append(f"target HR@10 >= {self.target_hr:g}")
        if self.base_cfg is not None:
            c = self.base_cfg
            impl = f" ({c.adam_impl})" if c.optimizer == "adam" and c.adam_impl != "auto" else ""
            lines.append(f"baseline: batch {c.global_batch_size}, {c.optimizer}{impl} lr {c.peak_lr:g}"
                         + (f" ({self.base_lr_source})" if self.base_lr_source else ""))
        return "\n".join(lines)

    __str__ = describe


def baseline_lr(data: ImplicitData, directory=None) -> float | None:
    """The lr lesson 01 chose for ``data`` (its saved record in this results directory), or None."""
    saved = load_results(directory).get("01_baseline", {})
    return saved.get("lr") if saved.get("dataset") == data.name else None


def baseline_adam_impl(data: ImplicitData, directory=None) -> str:
    """The Adam implementation lesson 01's baseline ran on ``data`` (its saved setting's ``adam_impl``); "auto",
    torch's default, where lesson 01 saved none here or saved its record before it chose one."""
    saved = load_results(directory).get("01_baseline", {})
    config = saved.get("config") if saved.get("dataset") == data.name else None
    return (config or {}).get("adam_impl", "auto")


def setup(profile: str = "full", *, ncf: bool = True, dataset: str | None = None, device=None,
          target_hr: float | None = None, base_lr: float | None = None, base_batch: int = 256,
          optimizer: str = "adam", eval_every: float = 0.25, hw: Hardware | None = None,
          quiet: bool = False) -> Lesson:
    """The setup of a lesson: profile, hardware, tier plan; with ``ncf=True`` also the NeuMF data,
    target and baseline config. ``None`` arguments take the plan's (or lesson 01's) choice."""
    use_private_compile_caches()  # before anything compiles in this kernel (lesson 01's compile study)
    profile = resolve_profile(profile)
    hw = hw or detect()
    tier_plan = plan(hw, profile)
    s = Lesson(profile=profile, hw=hw, plan=tier_plan, device=torch.device(device or tier_plan.device))
    if ncf:
        s.data = load_implicit(dataset or tier_plan.dataset, profile=profile)
        s.target_hr = target_hr or default_target_hr(s.data)
        saved_lr = baseline_lr(s.data)
        lr = base_lr or saved_lr or DEFAULT_BASE_LR
        s.base_lr_source = ("BASE_LR, as given" if base_lr else "lesson 01's choice" if saved_lr else
                            f"the default: lesson 01 has not saved an lr for {s.data.name} here")
        s.base_cfg = TrainConfig(global_batch_size=base_batch, base_lr=lr, optimizer=optimizer,
                                 adam_impl=baseline_adam_impl(s.data), eval_every_epochs=eval_every,
                                 target_hr=s.target_hr)
    if not quiet:
        print(s.describe())
    return s
