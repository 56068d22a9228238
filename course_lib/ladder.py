"""The trick ladder: the one writer and reader of its saved rungs (lessons 01-06).

baseline, +linear scaling, +warmup, +LARS, +mixed precision, +data parallel — each rung
with time-to-target, speedup over the baseline and final HR@10, all measured on this
machine and saved as a result (``ladder_<n>.json``) by the lesson that measured it.

Every rung records how it was obtained (settings, dataset, tier, world size, precision,
seed, device) and *what actually ran* (a "+LARS" rung that trained with LAMB says so). A speedup
is a ratio of two times on the same data: the ladder refuses to compare rungs measured on
different datasets (:class:`LadderMismatch`). Later lessons read the setting of an earlier
rung from here (:func:`config_from_ladder`, :func:`ladder_config`), and lesson 01's
baseline (:func:`load_baseline`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .hardware import detect
from .plots import plot_ladder
from .results import load_results, save_result
from .tables import Table
from .train.ncf import TrainConfig, TrainResult

LADDER_STEPS = ("baseline", "+linear scaling", "+warmup", "+LARS", "+mixed precision", "+data parallel")


class LadderMismatch(ValueError):
    """Rungs measured on different datasets cannot be compared."""


def what_ran(config: dict, world_size: int = 1) -> str:
    """The trick a rung's settings actually used, in a few words: optimizer, lr rule, warmup,
    precision, ranks — e.g. ``"lamb, sqrt rule, warmup 40 steps, bf16, 2 ranks"``."""
    parts = [config.get("optimizer", "?")]
    if config.get("lr_scaling") not in (None, "none"):
        parts.append(f"{config['lr_scaling']} rule")
    if config.get("warmup_steps"):
        parts.append(f"{config.get('warmup', 'linear')} warmup {config['warmup_steps']} steps")
    parts.append(config.get("precision", "fp32"))
    if world_size > 1:
        parts.append(f"{world_size} ranks")
    return ", ".join(str(p) for p in parts)


def save_ladder_row(step: str, *, time_to_target_s: float | None, final_hr: float, target_hr: float,
                    dataset: str, directory: Path | None = None, **details) -> Path:
    """Save one rung of the trick ladder. ``time_to_target_s=None`` means "not reached".

    ``dataset`` is required: rungs of different datasets are never compared."""
    if step not in LADDER_STEPS:
        raise ValueError(f"unknown ladder step {step!r}; choose one of {LADDER_STEPS}")
    if not dataset:
        raise ValueError(f"ladder step {step!r}: say which dataset it was measured on (dataset=...)")
    slug = LADDER_STEPS.index(step)
    row = {"step": step, "time_to_target_s": time_to_target_s, "final_hr": final_hr,
           "target_hr": target_hr, "dataset": dataset, **details}
    row.setdefault("tier", detect().tier)
    if "config" in row and "ran" not in row:
        row["ran"] = what_ran(row["config"], row.get("world_size", 1))
    return save_result(f"ladder_{slug}", row, directory)


def save_ladder_result(step: str, result, *, setting: str, directory: Path | None = None, **details) -> Path:
    """``save_ladder_row`` from a :class:`course_lib.train.TrainResult` (lessons 01-05): time to
    target, final HR@10, the dataset, and the run's settings, precision and throughput."""
    c = result.config
    return save_ladder_row(step, time_to_target_s=result.time_to_target_s, final_hr=result.final_hr,
                           target_hr=result.target_hr, dataset=result.dataset, directory=directory,
                           setting=setting, batch_size=c["global_batch_size"], lr=c["peak_lr"], optimizer=c["optimizer"],
                           precision=result.precision.get("mode", c["precision"]),
                           warmup_steps=c.get("warmup_steps", 0), seed=c.get("seed"),
                           steps_to_target=result.steps_to_target, epochs_to_target=result.epochs_to_target,
                           samples_per_s=result.samples_per_s, device=result.device,
                           world_size=result.world_size, config=c, **details)


def _saved_rungs(directory: Path | None) -> dict[str, dict]:
    return {r["step"]: r for name, r in load_results(directory).items() if name.startswith("ladder_")}


def ladder_rows(directory: Path | None = None) -> list[dict]:
    """The saved rungs in the course's order, each with ``speedup`` over the baseline (or None).

    Raises :class:`LadderMismatch` when the rungs were measured on different datasets."""
    saved = _saved_rungs(directory)
    datasets = {step: r.get("dataset") for step, r in saved.items()}
    if len(set(datasets.values())) > 1:
        listing = ", ".join(f"{step!r}: {d or 'not recorded'}" for step, d in datasets.items())
        raise LadderMismatch(
            f"the ladder's rungs were measured on different datasets ({listing}); a speedup between them would "
            "compare different problems. Rerun the lessons whose rungs differ with the same DATASET (the tier plan "
            "picks one for the whole course), or start a fresh results directory ($COURSE_RESULTS_DIR).")
    base = saved.get("baseline", {}).get("time_to_target_s")
    rows, before = [], None  # before: the latest rung below that reached the target
    for step in LADDER_STEPS:
        if step in saved:
            r = dict(saved[step])
            ttt = r.get("time_to_target_s")
            r["speedup"] = base / ttt if (base and ttt) else None
            # this rung against the one below it: a trick that did not help here says so
            r["vs_previous"] = before["time_to_target_s"] / ttt if (before and ttt) else None
            r["previous_step"] = before["step"] if before else None
            rows.append(r)
            if ttt:
                before = r
    return rows


def ladder_figure(directory: Path | None = None, path: Path | None = None):
    """The ladder as a bar chart (:func:`course_lib.plots.plot_ladder`); written to ``path`` as PNG
    when given (the run summary's ``ladder.png``). Returns the figure, or None without rows."""
    rows = ladder_rows(directory)
    if not rows:
        return None
    fig = plot_ladder(rows)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def ladder_table(directory: Path | None = None) -> Table:
    """The trick ladder from saved rows, in the course's order, with speedups over the baseline
    and what each rung actually ran."""
    rows = ladder_rows(directory)
    dataset = rows[0].get("dataset", "") if rows else ""
    t = Table(["step", "time to target (s)", "speedup", "vs the rung below", "final HR@10", "target", "setting",
               "ran"], title=f"The trick ladder (measured on this machine{', ' + dataset if dataset else ''})")
    for r in rows:
        ttt = r.get("time_to_target_s")
        vs = r.get("vs_previous")
        below = "—" if vs is None else (f"{vs:.2f}x" + ("" if vs >= 1 else f": slower than {r['previous_step']!r}, "
                                                          "this trick did not help here"))
        t.add(**{"step": r["step"], "time to target (s)": ttt if ttt is not None else "not reached",
                 "speedup": f"{r['speedup']:.1f}x" if r["speedup"] else "—", "vs the rung below": below,
                 "final HR@10": r.get("final_hr"), "target": r.get("target_hr"), "setting": r.get("setting", ""),
                 "ran": r.get("ran", "")})
    return t


# --------------------------------------------------------------------------- later lessons read earlier rungs


def load_baseline(data, target_hr: float, directory=None) -> TrainResult | None:
    """Lesson 01's saved baseline run as a ``TrainResult`` when it was measured on the same data
    and target in this results directory; else None (the lesson then measures it itself)."""
    rec = load_results(directory).get("01_baseline")
    if not rec or rec.get("dataset") != data.name or rec.get("target_hr") != target_hr:
        return None
    names = {f.name for f in dataclasses.fields(TrainResult)}
    try:
        return TrainResult(**{k: v for k, v in rec.items() if k in names})
    except TypeError:  # an older record without some required field
        return None


# What a later lesson takes from a rung is its recipe; the budget, the target and how often to
# evaluate stay the later lesson's own.
NOT_THE_RECIPE = ("max_epochs", "max_steps", "target_hr", "stop_at_target", "eval_every_epochs")


def _config(base_cfg: TrainConfig, saved: dict) -> TrainConfig:
    names = {f.name for f in dataclasses.fields(base_cfg)}
    return base_cfg.replace(**{k: v for k, v in saved.items() if k in names and k not in NOT_THE_RECIPE})


def config_from_ladder(base_cfg: TrainConfig, directory=None, steps=None, dataset: str | None = None):
    """``(cfg, row)``: the training config of the fastest saved rung that reached its target
    (lesson 05 adds mixed precision on top of it), measured on ``dataset`` when given;
    ``(base_cfg, None)`` when there is none."""
    rows = [r for r in ladder_rows(directory) if r.get("time_to_target_s") and r.get("config")
            and (steps is None or r["step"] in steps) and (dataset is None or r.get("dataset") == dataset)]
    if not rows:
        return base_cfg, None
    row = min(rows, key=lambda r: r["time_to_target_s"])
    return _config(base_cfg, row["config"]), row


def rung_batch(step: str, default: int, *, dataset: str | None = None, directory=None) -> tuple[int, str]:
    """``(global batch, where it came from)``: the batch of the saved rung ``step`` (measured on
    ``dataset`` when given), else ``default`` — lesson 04 takes lesson 03's batch, which lesson
    03 picks at run time, rather than a number typed in."""
    for r in ladder_rows(directory):
        if r["step"] == step and (dataset is None or r.get("dataset") == dataset) and r.get("batch_size"):
            return int(r["batch_size"]), f"the {step!r} rung's batch (saved by an earlier lesson)"
    return default, f"the default {default}: no {step!r} rung saved{' for ' + dataset if dataset else ''} yet"


def ladder_config(default: TrainConfig, directory=None, dataset: str | None = None):
    """The setting to add data parallelism to: the recipe of the latest saved rung (before
    "+data parallel") that recorded its ``config``, measured on ``dataset`` when given, with
    ``default``'s budget and target; else ``default``. Returns ``(cfg, rung)``."""
    rows = {r["step"]: r for r in ladder_rows(directory) if dataset is None or r.get("dataset") == dataset}
    for rung in reversed(LADDER_STEPS[:-1]):
        saved = rows.get(rung, {}).get("config")
        if isinstance(saved, dict):
            return _config(default, saved), rung
    return default, None
