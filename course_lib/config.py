"""Run profiles, the batch arithmetic, and settings checked by field (introduced in lesson 00).

A lesson's papermill ``parameters`` cell sets ``PROFILE = "full"``; the environment
variable ``COURSE_PROFILE`` (CI sets ``smoke``) overrides it, so papermill and nbval
runs both shrink the work while executing every code path.

The run settings themselves (one vocabulary for every training run) are
:class:`course_lib.settings.RunSettings`; :func:`check_field_types` checks them by name.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

PROFILES = ("full", "smoke")
PROFILE_ENV = "COURSE_PROFILE"


def resolve_profile(requested: str = "full") -> str:
    """The profile in force: ``$COURSE_PROFILE`` when set, else ``requested``.

    An unknown name is an error rather than a silent fallback to ``full``.
    """
    env = os.environ.get(PROFILE_ENV, "").strip()
    profile = env or requested
    if profile not in PROFILES:
        source = f"${PROFILE_ENV}" if env else "PROFILE"
        raise ValueError(f"{source}={profile!r} is not a run profile; choose one of {PROFILES}")
    return profile


def pick(profile: str, *, full, smoke):
    """Choose a lesson knob by profile: ``pick(P, full=4096, smoke=256)``."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {PROFILES}")
    return full if profile == "full" else smoke


@dataclass(frozen=True)
class BatchConfig:
    """The batch is stated once; everything else is derived and checked here.

    ``global_batch_size = micro_batch_size * grad_accum_steps * world_size``.
    """

    global_batch_size: int
    micro_batch_size: int
    world_size: int = 1

    def __post_init__(self):
        for name in ("global_batch_size", "micro_batch_size", "world_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        per_step = self.micro_batch_size * self.world_size
        if self.global_batch_size % per_step != 0:
            raise ValueError(
                f"global_batch_size={self.global_batch_size} is not divisible by "
                f"micro_batch_size * world_size = {self.micro_batch_size} * {self.world_size} = {per_step}; "
                f"choose a global batch that is a multiple of {per_step}"
            )

    @property
    def grad_accum_steps(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.world_size)

    @property
    def per_rank_batch_size(self) -> int:
        return self.global_batch_size // self.world_size

    def describe(self) -> str:
        """``global batch 4096 = 2 ranks x micro batch 512 x 4 accumulation steps``."""
        return (f"global batch {self.global_batch_size} = {self.world_size} rank{'s' if self.world_size > 1 else ''} "
                f"x micro batch {self.micro_batch_size} x {self.grad_accum_steps} accumulation step"
                f"{'s' if self.grad_accum_steps > 1 else ''}")


def batch_config(global_batch_size: int, micro_batch_size: int | None, world_size: int) -> BatchConfig:
    """``BatchConfig`` for a run; ``micro_batch_size=None`` means no accumulation (b = B / W)."""
    if micro_batch_size is None:
        if global_batch_size % world_size:
            raise ValueError(f"global batch {global_batch_size} does not split evenly over world_size={world_size} "
                             f"ranks; choose a multiple of {world_size}")
        micro_batch_size = global_batch_size // world_size
    return BatchConfig(global_batch_size, micro_batch_size, world_size)


# --------------------------------------------------------------------------- settings are checked once, by name

_SIMPLE = {"int": int, "float": (int, float), "str": str, "bool": bool}


def check_field_types(settings) -> None:
    """Every field of a settings dataclass has its annotated type; a wrong one is an error naming
    the field, the value and the type (``lr='1e-3'`` fails here, not deep inside a run).

    Understands the annotations settings use: ``int``, ``float``, ``str``, ``bool``, ``X | None``
    and ``tuple[...]``. A bool is not accepted where a number is expected."""
    cls = type(settings).__name__
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        kinds = [k.strip() for k in str(f.type).split("|")]
        if value is None and "None" in kinds:
            continue
        ok = False
        for kind in kinds:
            if kind == "None":
                continue  # value is not None here
            if kind.startswith("tuple"):
                ok = isinstance(value, (tuple, list))
            elif kind in _SIMPLE:
                ok = isinstance(value, _SIMPLE[kind]) and (kind == "bool" or not isinstance(value, bool))
            else:
                ok = True  # a type this checker does not know: not its business
            if ok:
                break
        if not ok:
            raise TypeError(f"{cls}.{f.name} must be {f.type}, got {value!r} ({type(value).__name__})"
                            + (" — write the number without quotes" if isinstance(value, str) else ""))
