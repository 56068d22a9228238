"""Recorded histories: what the earlier lessons can leave in a results folder, one per kind of outcome.

A later lesson starts from what an earlier one measured (the ladder's rungs, lesson 01's lr, lesson 02's
curve, lesson 05's speeds, lesson 07's runs), so each learner's course takes its own path through the
same code. These are those outcomes as data, written into a fresh results folder with the course's own
writers (``ladder.save_ladder_row``, ``results.save_result``), as the tier plan's tests feed it hardware
descriptions of machines we do not have. ``tests/test_carried_paths.py`` runs each lesson's own setting
lines on every one of them.

Covered, at least once each: every optimizer a rung can carry (Adam, SGD, LARS, LAMB); no warmup, a
short one, an exponential one and one longer than any short run a later lesson makes (lesson 03's 38
steps at batch 65536 that failed lesson 05's 19-step histogram run); each precision (fp32, bf16, fp16
with dynamic and static loss scaling); the smallest batch (256, lesson 01's) and the largest the plan's
grids allow (65536); a rung that did not reach the target; a rung missing below one that is saved;
lesson 05 not running 16 bits; lesson 01's record from another dataset; lesson 02's curve missing, from
the other profile or too short; lesson 02's linear rule missing the target, or not, or on another
dataset; lesson 05's speeds missing or partial; lesson 07 missing, without runs,
from the other profile, or with runs that missed the target.
"""

from __future__ import annotations

from course_lib import ladder
from course_lib.results import save_result
from course_lib.train import TrainConfig

DATASET = "synthetic-tiny"  # the suite's data (tests/conftest.py): rungs are read only on the data they ran on
TARGET_HR = 0.5
FULL = dict(max_epochs=3.0, eval_every_epochs=0.25, **ladder.NEAR_TARGET)  # the full profile's budget


def setting(batch: int, *, optimizer: str = "adam", rule: str = "sqrt", lr: float = 1e-3, warmup_steps: int = 0,
            warmup: str = "linear", precision: str = "fp32", **more) -> TrainConfig:
    """A rung's recipe as the lessons make it: Adam and LAMB scale lesson 01's lr from batch 256 by a rule,
    SGD and LARS take theirs as given (lesson 04)."""
    scaled = dict(lr_scaling=rule, base_batch_size=256) if rule != "none" else {}
    return TrainConfig(global_batch_size=batch, optimizer=optimizer, base_lr=lr, warmup_steps=warmup_steps,
                       warmup=warmup, precision=precision, target_hr=TARGET_HR, **FULL, **scaled, **more)


def rung(step: str, cfg: TrainConfig, *, reached: bool = True, carry: TrainConfig | None = None, **details):
    """One saved rung: the call the lesson makes, with a time to target or None (not reached)."""
    steps = 40 if reached else None
    return dict(step=step, time_to_target_s=10.0 if reached else None, steps_to_target=steps,
                final_hr=0.6 if reached else 0.4, target_hr=TARGET_HR, dataset=DATASET, config=cfg.to_dict(),
                carry=carry, seed_runs=[{"seed": 0, "time_to_target_s": 10.0 if reached else None,
                                         "steps_to_target": steps}], **details)


BASE = rung("baseline", setting(256, rule="none"))
LINEAR_1024 = rung("+linear scaling", setting(1024, rule="linear", lr=1e-3))  # lesson 02's smallest batch
LINEAR_65536 = rung("+linear scaling", setting(65536, rule="sqrt"))  # ... and its largest
LINEAR_16384 = rung("+linear scaling", setting(16384, rule="sqrt"))
# lesson 03 at the largest batch with a 0.5-epoch warmup on ml-1m: 38 steps (the make course failure)
WARMUP_LONG = rung("+warmup", setting(65536, warmup_steps=38))
WARMUP_EXP = rung("+warmup", setting(16384, warmup_steps=40, warmup="exponential"))
WARMUP_4096 = rung("+warmup", setting(4096, rule="linear", warmup_steps=300))
LARS = dict(optimizer="lars", rule="none", lr=7.0, trust_coefficient=0.001)


def lars_rung(batch: int, warmup_steps: int, *, reached: bool = True, **kind):
    return rung("+LARS", setting(batch, warmup_steps=warmup_steps, **{**LARS, **kind}), reached=reached)


def mixed_rung(below: TrainConfig, mode: str, *, carry: str | None = None, not_run: str = "", **scaling):
    """Lesson 05's rung: trained in ``mode`` and carrying ``carry`` (16 bits only where measurably faster),
    or, with ``not_run``, no 16-bit mode trained (its carry fp32)."""
    if not_run:
        return dict(step="+mixed precision", time_to_target_s=None, final_hr=None, target_hr=TARGET_HR,
                    dataset=DATASET, not_run=not_run, carry=below.replace(precision="fp32"))
    ran = below.replace(precision=mode, **scaling)
    return rung("+mixed precision", ran, carry=below.replace(precision=carry or mode, **scaling))


_W = setting(65536, warmup_steps=38)
_L = setting(32768, warmup_steps=80, **LARS)
LADDERS: dict[str, list[dict]] = {
    "fresh results folder": [],
    "baseline only": [BASE],
    "02 at its smallest batch, linear rule": [BASE, LINEAR_1024],
    "02 at its largest batch, sqrt rule": [BASE, LINEAR_65536],
    "02 did not reach the target": [BASE, rung("+linear scaling", setting(4096, rule="linear"), reached=False)],
    "02 missing below a saved 03": [BASE, WARMUP_4096],
    # lesson 05's make course failure: 03 chose a 38-step warmup at 65536, 04's layer-wise rung missed the target
    "03 long warmup at 65536, 04 not reached": [BASE, LINEAR_16384, WARMUP_LONG, lars_rung(131072, 76, reached=False)],
    "03 exponential warmup, 04 LARS won": [BASE, LINEAR_16384, WARMUP_EXP, lars_rung(32768, 80)],
    "04 LAMB won at 65536": [BASE, LINEAR_16384, WARMUP_EXP,
                             rung("+LARS", setting(65536, optimizer="lamb", warmup_steps=38))],
    "04 SGD carried, no warmup": [BASE, LINEAR_1024,
                                  rung("+LARS", setting(2048, optimizer="sgd", rule="none", lr=2.0))],
    "04 at the smallest batch": [BASE, lars_rung(256, 0)],
    "05 carries bf16": [BASE, LINEAR_16384, WARMUP_LONG, rung("+LARS", _L), mixed_rung(_L, "bf16")],
    "05 carries fp16, static loss scaling": [BASE, LINEAR_16384, WARMUP_LONG, mixed_rung(_W, "fp16",
                                             loss_scaling="static", loss_scale=4096.0)],
    "05 ran fp16 but carries fp32": [BASE, LINEAR_16384, WARMUP_LONG, mixed_rung(_W, "fp16", carry="fp32")],
    "05 trained no 16-bit mode": [BASE, LINEAR_16384, WARMUP_LONG,
                                  mixed_rung(_W, "", not_run="bf16 ran at 0.05x fp32's throughput")],
}

# lesson 01's record: the lr it chose (lesson.setup reads it), or one made on another dataset (not taken)
BASELINES = {"lesson 01's lr": {"dataset": DATASET, "lr": 3e-3}, "lesson 01 on another dataset": {"dataset": "ml-20m",
                                                                                               "lr": 5e-3}}

# lesson 02's curve, which lesson 11 reads
LESSON02 = {
    "02 missing": None,
    "02 from the smoke profile": {"profile": "smoke", "rows": [{"batch size": b, "steps to target": 400 // b}
                                                              for b in (1024, 4096)]},
    "02 with three batches that reached": {"profile": "full", "rows": [
        {"batch size": 256, "steps to target": 4000}, {"batch size": 1024, "steps to target": 1200},
        {"batch size": 4096, "steps to target": 500}, {"batch size": 65536, "steps to target": None}]},
    "02 with one batch that reached": {"profile": "full", "rows": [
        {"batch size": 1024, "steps to target": 1200}, {"batch size": 65536, "steps to target": None}]},
}

def _rule_row(rule: str, batch: int, *, missed: bool = False, diverged: bool = False) -> dict:
    """One run of lesson 02's sweep as it saves it (``sweeps.sweep_rows``, the keys lesson 03 reads)."""
    reached = not (missed or diverged)
    return {"rule": rule, "batch size": batch, "time to target (s)": 10.0 if reached else None,
            "steps to target": 4000 * 256 // batch if reached else None, "diverged": diverged,
            "epochs run": 1.0 if reached else 3.0, "samples/s": 1e5}


def lesson02_rules(missed=(), diverged=(), *, dataset: str | None = DATASET, profile: str = "full") -> dict:
    """Lesson 02's record: the baseline and both rules at its grid's batches, the linear rule missing the target at
    ``missed`` and diverging at ``diverged`` (the sqrt rule reaching it everywhere)."""
    rows = [_rule_row(rule, 256) for rule in ("linear", "sqrt")] + [
        _rule_row(rule, b, missed=rule == "linear" and b in missed, diverged=rule == "linear" and b in diverged)
        for rule in ("linear", "sqrt") for b in (1024, 4096, 16384, 65536)]
    record = {"rows": rows, "profile": profile, "target_hr": TARGET_HR, "best_batch": 65536, "best_rule": "sqrt"}
    return record if dataset is None else {**record, "dataset": dataset}


# lesson 02's sweep, which lesson 03 reads: where the linear rule missed the target, lesson 03 warms it up there
LESSON02_RULES = {
    "02 missing": None,
    "02 linear rule missed from 16384 on": lesson02_rules(missed=(16384, 65536)),  # ml-1m on a 2-core CPU
    "02 linear rule diverged at 4096": lesson02_rules(diverged=(4096,), missed=(16384,)),
    "02 linear rule reached everywhere": lesson02_rules(),
    "02 on another dataset": lesson02_rules(missed=(16384, 65536), dataset="ml-20m"),
    "02 from the other profile": lesson02_rules(missed=(4096,), profile="smoke"),
    "02 without its dataset": lesson02_rules(missed=(16384,), dataset=None),
}


# lesson 05's speeds, which lesson 07 reads
LESSON05 = {"05 missing": None, "05 with fp32 only": {"speed": {"fp32": 1e6}},
            "05 with every mode": {"speed": {"fp32": 1e6, "bf16": 5e4, "fp16": 4e4}}}


def bert_run(label: str, batch: int, steps: int, steps_to_loss: int | None) -> dict:
    return {"label": label, "steps": steps, "global_batch_size": batch, "peak_lr": 1e-3, "final_eval_loss": 5.0,
            "diverged": False, "time_to_loss_s": None if steps_to_loss is None else 30.0,
            "steps_to_loss": steps_to_loss,
            "seqs_per_s": 100.0, "eval_loss_curve": [[0, 7.0], [steps, 5.0]]}


def lesson07(profile: str, runs: list[dict], device: str = "cpu") -> dict:
    return {"profile": profile, "device": device, "model": "mini", "seq_len": 64, "target_loss": 5.5, "runs": runs,
            "throughput": {"fp32": {"seqs_per_s": 100.0}, "bf16": {"seqs_per_s": 20.0}}}


# lesson 07's record, which lessons 05 (its bf16 ratio), 11 and 12 read
LESSON07 = {
    "07 missing": None,
    "07 without runs": lesson07("full", []),
    "07 from the smoke profile": lesson07("smoke", [bert_run("adam b=8", 8, 8, 6)]),
    "07 reached": lesson07("full", [bert_run("adam b=32", 32, 240, 200), bert_run("lamb b=32", 32, 240, 180),
                                    bert_run("adam b=256, sqrt rule x0.5", 256, 120, 100)]),
    "07 missed the target": lesson07("full", [bert_run("adam b=32", 32, 240, None),
                                              bert_run("adam b=256, sqrt rule x1", 256, 120, None)]),
}


def write_ladder(name: str, directory) -> None:
    """The ladder history ``name`` (and lesson 01's record when it has a baseline) into ``directory``."""
    for row in LADDERS[name]:
        row = dict(row)
        ladder.save_ladder_row(row.pop("step"), directory=directory, **row)
    if LADDERS[name]:
        save_result("01_baseline", BASELINES["lesson 01's lr"], directory)


def write_record(name: str, record: dict | None, directory) -> None:
    if record is not None:
        save_result(name, record, directory)


def distinct_below(step: str) -> list[str]:
    """The ladder histories that differ in what a lesson adding ``step`` reads (the rungs below it),
    one name for each (the others would run the same path again)."""
    below = ladder.LADDER_STEPS[:ladder.LADDER_STEPS.index(step)]
    seen, names = set(), []
    for name, rows in LADDERS.items():
        key = repr([r for r in rows if r["step"] in below])
        if key not in seen:
            seen.add(key)
            names.append(name)
    return names
