"""Each lesson's time budget, and the sizing of a lesson's runs from this machine's measured pace.

``make course`` promises about an hour on a 2-4 core CPU. A fixed number of steps cannot keep that
promise: the same lesson 07 took 1110 s on one 2-core host and 2646 s on another (and 1390 s on the
second one when quiet). So each lesson has a budget in seconds of wall time (:data:`BUDGETS_S`,
stated up front by ``make course`` and by :func:`budget_line`), and a lesson whose runs could exceed
it times a few steps of its own model first and sizes its plan with :func:`size_plan`: the same
runs, measurements and verdicts, with fewer sweep points (the grid's edge extensions) or fewer steps
per run (every run alike, so the runs stay comparable), down to a stated floor. When even the floor
does not fit, it says so and runs the floor: a shorter run than the floor would not show what the
lesson measures.

:func:`size_plan` is pure (the pace is an argument), so tests feed it a fast, a slow and a too-slow
machine; the lesson measures the pace (``course_lib.train.mlm.throughput``, ``ladder.yardstick_pace``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

# Seconds of wall time for each lesson's full profile on a 2-4 core CPU: about what a quiet 2-core machine took
# (00 8 s, 01 262, 02 151, 03 104, 04 486, 05 148, 06 76, 07 555) with some room for a shared machine. Lesson 04
# brackets the lr of SGD and of LARS and re-runs both at three seeds (its floor: the sweep plan's table says
# when even that is over), lesson 07 sizes its runs to its budget, lesson 05 keeps its fp16 runs short where
# fp16 is emulated. 3160 s: 53 minutes, ~55 with the kernels' starts and make's install check.
BUDGETS_S: dict[str, int] = {
    "00_setup": 20, "01_baseline": 300, "02_linear_scaling": 160, "03_warmup": 120, "04_lars": 480,
    "05_mixed_precision": 150, "06_data_parallel": 80, "07_bert_lamb": 700, "08_collectives": 160,
    "09_performance_model": 70, "10_model_parallelism": 70, "11_batch_size_science": 400,
    "12_hyperparameter_search": 250, "13_multi_node": 200,
}
# On a GPU tier the lessons' models are larger (ml-20m, BERT-small) but each step is far faster; the same
# budgets hold (a budget there may only be smaller, never larger: the course is sized for the CPU).
GPU_BUDGETS_S: dict[str, int] = dict(BUDGETS_S)


def budget_s(lesson: str, tier: str = "cpu") -> int:
    """The budget of ``lesson`` (``"07_bert_lamb"`` or ``"07"``) on ``tier`` ("cpu", "one-gpu", "multi-gpu")."""
    table = BUDGETS_S if tier == "cpu" else GPU_BUDGETS_S
    key = next((k for k in table if k == lesson or k.split("_", 1)[0] == lesson), None)
    if key is None:
        raise ValueError(f"lesson={lesson!r}: no budget for it; lessons with one: {', '.join(table)}")
    return table[key]


def total_s(tier: str = "cpu") -> int:
    return sum((BUDGETS_S if tier == "cpu" else GPU_BUDGETS_S).values())


def budget_line(lessons=None, tier: str = "cpu") -> str:
    """The plan's total, printed by ``make course`` up front: each lesson's budget and their sum."""
    table = BUDGETS_S if tier == "cpu" else GPU_BUDGETS_S
    names = [k for k in table if lessons is None or any(k.startswith(str(n)[:2]) for n in lessons)]
    total = sum(table[k] for k in names)
    return (f"time budget ({tier} tier, full profile): {total} s = {total / 60:.0f} min for {len(names)} lesson(s) ("
            + ", ".join(f"{k[:2]} {table[k]}" for k in names) + ")")


@dataclass(frozen=True)
class Runs:
    """One kind of run in a lesson's plan: ``count`` runs of ``steps`` steps at ``step_s`` seconds a step
    (measured), plus, for each of its ``sweeps``, up to ``extensions`` runs that happen only if the sweep's
    best sits at its grid's edge (the worst case is planned for: the budget must hold whatever the sweeps
    find). ``overhead_s``: seconds per run besides its steps (evaluations, building the model)."""

    name: str
    count: int
    steps: int
    step_s: float
    sweeps: int = 0
    extensions: int = 0
    overhead_s: float = 0.0

    def n_runs(self, extensions: int | None = None) -> int:
        return self.count + self.sweeps * (self.extensions if extensions is None else min(extensions, self.extensions))

    def seconds(self, scale: float = 1.0, extensions: int | None = None) -> float:
        return self.n_runs(extensions) * (max(1, round(self.steps * scale)) * self.step_s + self.overhead_s)


@dataclass(frozen=True)
class SizedPlan:
    """What :func:`size_plan` decided: ``scale`` (steps per run, x the full plan's), ``extensions`` (edge
    extensions allowed per sweep), the planned seconds, and whether even the floor is over budget."""

    budget_s: float
    planned_full_s: float
    planned_s: float
    scale: float
    extensions: int
    full_extensions: int
    over_budget: bool
    cuts: list[str] = field(default_factory=list)
    pace: str = ""

    @property
    def cut(self) -> bool:
        return bool(self.cuts)

    def steps(self, full_steps: int) -> int:
        """A run's steps in this plan (at least 1)."""
        return max(1, round(full_steps * self.scale))

    def line(self) -> str:
        head = (f"budget {self.budget_s:.0f} s; measured pace {self.pace}; the full plan takes "
                f"{self.planned_full_s:.0f} s here")
        if not self.cuts:
            return head + ": it fits, nothing cut"
        tail = f"; sized plan {self.planned_s:.0f} s: " + "; ".join(self.cuts)
        if self.over_budget:
            tail += (f". Even this floor is over the budget ({self.planned_s:.0f} s > {self.budget_s:.0f} s): "
                     "running the floor (a shorter run would not show what the lesson measures)")
        return head + tail


def size_plan(runs: list[Runs], budget: float, *, floor_scale: float, other_s: float = 0.0,
              min_extensions: int = 0, step_unit: str = "steps", run_steps=None) -> SizedPlan:
    """Size a lesson's runs to ``budget`` seconds (the lesson's budget; ``other_s`` of it go to its cells
    besides these runs). Cuts, in this order, only as far as needed: the sweeps' edge extensions (down
    to ``min_extensions``), then every run's steps alike (``scale``, down to ``floor_scale`` of the
    full plan's). The same runs are made, so the same measurements and verdicts are read from them.
    ``run_steps(full_steps, scale)``: the steps a cut run will make, as the plan's line says them, where the lesson
    cuts its runs otherwise than :meth:`SizedPlan.steps` rounds them (lesson 04 cuts epochs)."""
    if not 0 < floor_scale <= 1:
        raise ValueError(f"floor_scale={floor_scale}: a fraction of the full plan's steps in (0, 1]")
    if budget <= 0 or not runs or any(r.step_s <= 0 or r.steps < 1 or r.count < 0 for r in runs):
        raise ValueError(f"size_plan needs a positive budget ({budget}) and runs with positive steps and paces "
                         f"({runs})")
    pace = (f"{runs[0].step_s:.3g} s/step" if len({r.step_s for r in runs}) == 1 else
            ", ".join(f"{r.name} {r.step_s:.3g} s/step" for r in runs))
    full_ext = max(r.extensions for r in runs)
    avail = budget - other_s

    def total(scale, ext):
        return other_s + sum(r.seconds(scale, ext) for r in runs)

    full = total(1.0, full_ext)
    if min_extensions > full_ext:
        min_extensions = full_ext
    plan = SizedPlan(budget, full, full, 1.0, full_ext, full_ext, False, pace=pace)
    if full <= budget:
        return plan
    cuts, ext = [], full_ext
    while ext > min_extensions and total(1.0, ext) > budget:
        ext -= 1
    if ext < full_ext:
        cuts.append(f"edge extensions per sweep {full_ext} -> {ext}")
    scale = 1.0
    if total(1.0, ext) > budget:
        fixed = sum(r.n_runs(ext) * r.overhead_s for r in runs)
        per_scale = sum(r.n_runs(ext) * r.steps * r.step_s for r in runs)
        scale = max(floor_scale, min(1.0, (avail - fixed) / per_scale if per_scale else 1.0))
        scale = math.floor(scale * 100) / 100 if scale > floor_scale else floor_scale
        cut = run_steps or (lambda n, x: max(1, round(n * x)))
        full_steps = ", ".join(f"{r.name} {r.steps} -> {cut(r.steps, scale)}" for r in runs)
        cuts.append(f"{step_unit} per run x{scale:.2f} ({full_steps}; floor x{floor_scale:.2f})")
    planned = total(scale, ext)
    return replace(plan, planned_s=planned, scale=scale, extensions=ext, cuts=cuts, over_budget=planned > budget)
