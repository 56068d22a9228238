"""The run settings: one vocabulary for every training run of the course, NeuMF and BERT alike (lessons 01-07).

``course_lib.train.TrainConfig`` (NeuMF) and ``course_lib.train.mlm.MLMTrainConfig`` (BERT)
extend :class:`RunSettings` with what is their own (the model, the target, how often to
evaluate); everything a large-batch recipe varies is named the same in both.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .config import BatchConfig, batch_config, check_field_types
from .optim.schedules import DECAY_KINDS, LR_SCALINGS, WARMUP_KINDS, scaled_lr
from .precision import LOSS_SCALINGS



PRECISIONS = ("fp32", "bf16", "fp16", "auto")  # "auto": course_lib.precision.auto_mode


@dataclass(frozen=True)
class RunSettings:
    """What every training run of the course states, in one vocabulary (NeuMF and BERT).

    - the batch: ``global_batch_size`` (all ranks, one optimizer step) and, optionally,
      ``micro_batch_size`` (per forward/backward on one rank; ``None``: global / ranks, no
      accumulation); :meth:`batch` derives ``grad_accum_steps`` for a world size;
    - the lr: ``base_lr`` at ``base_batch_size`` (``None``: the global batch itself), scaled
      by ``lr_scaling`` ("none" | "linear" | "sqrt") to :attr:`peak_lr`; the base is kept, so
      a scaled setting still says where its lr came from;
    - the schedule: ``warmup_steps`` of ``warmup`` ("linear" | "exponential"), then ``decay``
      ("none" | "polynomial" | "cosine") over the run's planned steps;
    - ``precision``, ``optimizer``, ``weight_decay``, ``betas``, ``seed``; for fp16, ``loss_scaling``
      ("dynamic" | "static" | "none", :class:`course_lib.precision.Precision`) and ``loss_scale``
      (dynamic: the starting scale; static: the fixed S);
    - the budget: ``max_steps`` (``None``: the subclass's own budget, e.g. NeuMF's epochs) and
      ``stop_at_target``; the target itself is the subclass's (an HR@10, a loss).

    Every field's type is checked by name at construction (``base_lr="1e-3"`` is an error
    here, not deep in a run), and so are the choices.
    """

    global_batch_size: int = 256
    micro_batch_size: int | None = None
    optimizer: str = "adam"
    base_lr: float = 1e-3
    base_batch_size: int | None = None
    lr_scaling: str = "none"
    warmup_steps: int = 0
    warmup: str = "linear"
    decay: str = "none"
    precision: str = "fp32"
    loss_scaling: str = "dynamic"  # fp16 only (lesson 05)
    loss_scale: float = 65536.0  # fp16: dynamic's starting scale (GradScaler's default), or static's S
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    seed: int = 0
    max_steps: int | None = None
    stop_at_target: bool = True

    OPTIMIZERS = ("adam",)  # each subclass names its own

    def __post_init__(self):
        check_field_types(self)
        for name, allowed in (("optimizer", self.OPTIMIZERS), ("lr_scaling", LR_SCALINGS),
                              ("warmup", WARMUP_KINDS), ("decay", ("none",) + DECAY_KINDS),
                              ("precision", PRECISIONS), ("loss_scaling", LOSS_SCALINGS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{type(self).__name__}.{name}={getattr(self, name)!r}; choose one of {allowed}")
        for name in ("global_batch_size", "micro_batch_size", "base_batch_size", "max_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{type(self).__name__}.{name} must be at least 1, got {value}")
        if not (self.base_lr > 0 and math.isfinite(self.base_lr)):
            raise ValueError(f"{type(self).__name__}.base_lr must be a positive number, got {self.base_lr}")
        if not (self.loss_scale > 0 and math.isfinite(self.loss_scale)):
            raise ValueError(f"{type(self).__name__}.loss_scale must be a positive number, got {self.loss_scale}")
        if self.warmup_steps < 0:
            raise ValueError(f"{type(self).__name__}.warmup_steps must be >= 0, got {self.warmup_steps}")
        object.__setattr__(self, "betas", tuple(self.betas))

    @property
    def peak_lr(self) -> float:
        """The lr at the end of warmup: ``base_lr`` scaled by ``lr_scaling`` from ``base_batch_size``."""
        return scaled_lr(self.lr_scaling, self.base_lr, self.global_batch_size,
                         self.base_batch_size or self.global_batch_size)

    def batch(self, world_size: int = 1) -> BatchConfig:
        """The batch arithmetic on ``world_size`` ranks; raises (naming the numbers) when it does not divide.
        A micro batch larger than one rank's share is that share (:meth:`fit_to_run` says so at a run's start)."""
        return batch_config(self.global_batch_size, self._micro_batch_that_fits(world_size), world_size)

    # ---------------------------------------------------------------- what a run of a given length can take
    # Issue 36: a carried setting (a rung's warmup, a lesson's micro batch) can be longer or larger than
    # the run a later lesson makes of it (lesson 05's 0.25-epoch histogram run at a carried 65536 batch:
    # 19 steps, with the carried 38-step warmup). What such a setting becomes is decided here, once, for
    # every trainer (NeuMF's train_to_target, BERT's train_mlm), and said in one printed line.

    def _micro_batch_that_fits(self, world_size: int) -> int | None:
        """``micro_batch_size``, or one rank's share of the batch (no accumulation) where it is more than that."""
        if self.micro_batch_size is not None and world_size >= 1 \
                and self.micro_batch_size > self.global_batch_size // world_size >= 1:
            return self.global_batch_size // world_size
        return self.micro_batch_size

    def _fit_budget(self, planned_steps: int) -> tuple[dict, list[str]]:
        """The subclass's own derived quantities that do not fit its budget: ``(changes, notes)``."""
        return {}, []

    def fit_to_run(self, planned_steps: int, *, world_size: int = 1) -> tuple["RunSettings", list[str]]:
        """``(settings, notes)``: this setting as a run that plans ``planned_steps`` optimizer steps on
        ``world_size`` ranks can take it, and one sentence per change (empty: nothing changed).

        - a warmup longer than the run is shortened to the whole run (the warmup is part of the run; the
          lr then reaches its peak at the last planned step, so the run still ramps as the setting says);
        - a micro batch larger than one rank's share of the global batch is that share (no accumulation);
        - the subclass's own: NeuMF's milestones at or past the end are dropped and an evaluation interval
          longer than the budget becomes the budget (:class:`course_lib.train.TrainConfig`); BERT's
          evaluation interval likewise (:class:`course_lib.train.mlm.MLMTrainConfig`).
        """
        if not isinstance(planned_steps, int) or planned_steps < 1:
            raise ValueError(f"planned_steps must be a positive integer, got {planned_steps!r}")
        changes, notes = {}, []
        if self.warmup_steps > planned_steps:
            changes["warmup_steps"] = planned_steps
            steps = f"{planned_steps} step{'s' if planned_steps > 1 else ''}"
            notes.append(f"{self.warmup} warmup shortened from {self.warmup_steps} to {steps} (the whole run): a "
                         f"warmup is part of its run, and this run plans {steps}")
        if self._micro_batch_that_fits(world_size) != self.micro_batch_size:
            share = self.global_batch_size // world_size
            changes["micro_batch_size"] = share
            notes.append(f"micro batch {self.micro_batch_size} is more than one rank's share of the batch ({share}): "
                         f"micro batch {share}, no accumulation")
        own, own_notes = self._fit_budget(planned_steps)
        changes.update(own)
        notes += own_notes
        return (self.replace(**changes) if changes else self), notes

    def check_world_size(self, world_size: int) -> None:
        """Raise unless the global batch splits over ``world_size`` ranks
        (``course_lib.dist.launch`` calls it before it starts any process)."""
        self.batch(world_size)

    def lr_derivation(self) -> str:
        """``lr 4e-3 = 1e-3 at batch 256, x sqrt(4096 / 256) (sqrt rule)``, or ``lr 1e-3 (as given)``."""
        base = self.base_batch_size or self.global_batch_size
        if self.lr_scaling == "none" or base == self.global_batch_size:
            return f"lr {self.peak_lr:.3g} (as given)" if self.lr_scaling == "none" else \
                f"lr {self.peak_lr:.3g} (base batch)"
        factor = {"linear": f"{self.global_batch_size} / {base}",
                  "sqrt": f"sqrt({self.global_batch_size} / {base})"}[self.lr_scaling]
        return f"peak lr {self.peak_lr:.3g} = {self.base_lr:g} at batch {base} x {factor} ({self.lr_scaling} rule)"

    def describe(self, world_size: int = 1) -> str:
        """What a run prints at its start: the batch arithmetic and the lr derivation."""
        warm = f", {self.warmup} warmup {self.warmup_steps} steps" if self.warmup_steps else ""
        decay = f", {self.decay} decay" if self.decay != "none" else ""
        return (f"{self.batch(world_size).describe()}; {self.optimizer} {self.lr_derivation()}{warm}{decay}; "
                f"{self.precision}{self.loss_scaling_note()}")

    def loss_scaling_note(self) -> str:
        """`` (static loss scale 4096)`` / `` (no loss scaling)`` for fp16 runs that are not dynamic, else ``""``."""
        if self.precision != "fp16" or self.loss_scaling == "dynamic":
            return ""
        return f" (static loss scale {self.loss_scale:g})" if self.loss_scaling == "static" else " (no loss scaling)"

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The fields, plus the derived ``peak_lr`` (so a saved record says the lr it ran with)."""
        return {**dataclasses.asdict(self), "peak_lr": self.peak_lr}

    @classmethod
    def from_dict(cls, saved: dict):
        """The settings back from ``to_dict()`` (derived and unknown keys ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in names})


def fit_run(settings: RunSettings, planned_steps: int, *, world_size: int = 1, label: str = "",
            quiet: bool = False) -> RunSettings:
    """``settings.fit_to_run(planned_steps)``, with its notes printed as one line (unless ``quiet``:
    ranks > 0): what every trainer calls before its first step, so a setting a run cannot take is
    changed where the run is made, and said, instead of failing mid-lesson."""
    fitted, notes = settings.fit_to_run(planned_steps, world_size=world_size)
    if notes and not quiet:
        print(f"note{' (' + label + ')' if label else ''}: " + "; ".join(notes), flush=True)
    return fitted
