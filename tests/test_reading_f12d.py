"""Readings fixed after the twelfth full-profile read (helper f12d: lesson 06 of /tmp/course17/runs/20261204-012210;
/work/notes/read-full-run-12-r12c.md, findings 06-H1, 06-H2, 06-H3). Each test feeds the reading that run's own
numbers, which printed a statement its outputs contradict, and the opposite results."""

from test_reading_agreement import disagreements
from test_reading_r10c import _rec

from course_lib import ladder
from course_lib.lessons import l06_data_parallel as L06
from course_lib.results import save_result

# the twelfth run's cell 29 (its scaling table): one rank 6.576 s for 285 steps of 16384, two ranks 6.257 s of which
# 1.944 s all-reduce; the weak one-rank run at batch 8192 (510 steps, 5.897 s); the 2-rank setting's second seed 6.158 s
TWELFTH = {1: _rec(16384, 710111.3422766564, 6.575644863000662, 0.9405940594059405, 0.0, 6.575644863000662),
           2: _rec(16384, 746330.2417728172, 6.256533285999922, 0.9405940594059405, 1.943814246000784,
                   6.256533285999922)}
TWELFTH_WEAK = {1: _rec(8192, 708525.7548756468, 5.896638155000119, 0.8429752066115702, 0.0, 5.896638155000119,
                        steps=510), 2: TWELFTH[2]}
TWELFTH_AGAIN = [_rec(16384, 285 * 16384 / 6.15839391600025, 6.15839391600025, 0.9405940594059405, 1.9, 6.158)]
# the yardstick's pace before this lesson's runs and after them (cell 31: "97,017 ... 88,315 after (-9%)")
TWELFTH_PACE = {"before": 97016.51469354985, "after": 88315.2825440606, "rate": 92665.89861880522}


def test_a_time_to_target_gain_within_the_lessons_pace_drift_gives_no_verdict():
    """f12d 06-H1: "every run faster than one rank by more than 5% (the runs of one setting differed by 1.6%; at least
    5%): the ranks scaled" on 6.576 s against 6.257 and 6.158 s (1.051x), while the yardstick's pace moved -9% over
    the same lesson. Opposite: a pace that held keeps the verdict, and a gain beyond the drift is a verdict whose
    resolution is the drift."""
    rows = L06.scaling_rows(TWELFTH, TWELFTH_WEAK)
    printed = L06.optimization_reading(rows, 0.05, repeats=TWELFTH_AGAIN)  # what the run printed: no pace given
    assert "by more than 5% (the runs of one setting differed by 1.6%; at least 5%): the ranks scaled" in printed
    text = L06.optimization_reading(rows, 0.05, repeats=TWELFTH_AGAIN, pace=TWELFTH_PACE)
    assert ": the ranks scaled" not in text, text
    assert ("one rank's time is within 9% (the yardstick's pace moved -9% over this lesson's runs, more than the 1.6% "
            "the runs of one setting differed by) of the nearest of them, so these runs do not say whether the ranks "
            "scaled") in text, text
    drift = TWELFTH_PACE["after"] / TWELFTH_PACE["before"] - 1
    extra = [0.05, 6.158, 6.2565 / 6.158, 6.2565 / 6.158 - 1, 285, 1, 2, 4, drift]
    assert disagreements(text, L06.scaling_table(rows), extra=extra) == [], text

    held = {"before": 97016.5, "after": 95000.0, "rate": 96008.0}  # -2%: within the 5% floor
    steady = L06.optimization_reading(rows, 0.05, repeats=TWELFTH_AGAIN, pace=held)
    assert "more than 5% (the runs of one setting differed by 1.6%; at least 5%): the ranks scaled" in steady, steady
    slow_one = {**TWELFTH, 1: _rec(16384, 285 * 16384 / 8.0, 8.0, 0.9406, 0.0, 8.0)}  # 1.28x the slower seed
    rows2 = L06.scaling_rows(slow_one, TWELFTH_WEAK)
    beyond = L06.optimization_reading(rows2, 0.05, repeats=TWELFTH_AGAIN, pace=TWELFTH_PACE)
    assert ("every run faster than one rank by more than 9% (the yardstick's pace moved -9% over this lesson's runs, "
            "more than the 1.6% the runs of one setting differed by): the ranks scaled") in beyond, beyond


def test_one_run_each_resolves_no_less_than_the_lessons_pace_drift():
    """f12d 06-H1, the smoke profile's branch (one run each, no second seed): the 30% one run resolves is the floor, and
    a pace that moved more than that (-40%) is the resolution. Opposite: a pace that moved 10% leaves the 30%."""
    one = _rec(16384, 285 * 16384 / 13.5, 13.5, 0.9406, 0.0, 13.5)
    two = _rec(16384, 285 * 16384 / 10.0, 10.0, 0.9406, 3.0, 10.0)  # 1.35x faster: beyond 30%, within 40%
    rows = L06.scaling_rows({1: one, 2: two}, {})
    moved = L06.optimization_reading(rows, 0.05, pace={"before": 100.0, "after": 60.0, "rate": 80.0})
    assert ("1.4x faster (time-to-target efficiency 0.68; one run each): within the 40% the yardstick's pace moved "
            "over this lesson's runs (more than the 30% one run each can resolve on a shared machine), so these two "
            "runs do not say whether the ranks scaled") in moved, moved
    quiet = L06.optimization_reading(rows, 0.05, pace={"before": 100.0, "after": 90.0, "rate": 95.0})
    assert "one run each): the ranks scaled" in quiet, quiet
    assert "one run each): the ranks scaled" in L06.optimization_reading(rows, 0.05)  # no pace timed: as before


def test_the_step_fits_intercept_is_not_split_into_parts_no_cell_timed():
    """f12d 06-H2: "each step costs 7.19 ms whatever the batch (optimizer step over every parameter, launches) plus
    0.969 us per sample": the intercept's parts named as if timed (lesson 05's phase table put the optimizer and the
    sampling at about a third of 7.19 ms). The intercept is said as the fit's, with nothing attributed. Opposite: with
    no all-reduce timed, the intercept is said to hold the 2-rank run's all-reduce too, which the fit's rows imply."""
    rows = L06.scaling_rows(TWELFTH, TWELFTH_WEAK)
    text = L06.scaling_reading(rows, repeats=TWELFTH_AGAIN)
    assert "optimizer step over every parameter" not in text and "launches" not in text, text
    assert ("each step costs 7.19 ms whatever the batch (the fit's intercept: no cell of this lesson timed its parts) "
            "plus 0.969 us per sample, and on 2 ranks the timed all-reduce, pending 6.82 ms per step") in text, text
    assert "a cost per sample that does not grow linearly lands in the intercept too" in text, text
    step1, step2 = 16384 / TWELFTH[1]["samples_per_s"], 16384 / TWELFTH[2]["samples_per_s"]
    comm2 = 1.943814246000784 / 6.256533285999922 * step2
    slope = (step1 - (step2 - comm2)) / 8192
    fixed = step2 - comm2 - slope * 8192
    assert f"{1e3 * fixed:.3g}" == "7.19" and f"{1e6 * slope:.3g}" == "0.969"
    need = 4 * (fixed + comm2) / slope
    extra = [1e3 * fixed, 1e6 * slope, 1e3 * comm2, (fixed + comm2) / step2, 0.8, round(need, -3), 65_536, 131_072,
             8, 2, 20, 131_072 / round(need, -3), 0.53]
    assert disagreements(text, L06.scaling_table(rows), extra=extra) == [], text

    untimed = {w: {**r, "comm_time_s": 0.0} for w, r in TWELFTH.items()}
    plain = L06.scaling_reading(L06.scaling_rows(untimed, {}))
    assert "(the fit's intercept: no cell of this lesson timed its parts, and with no all-reduce timed it holds the " \
        "2-rank run's all-reduce too)" in plain, plain
    assert "optimizer step over every parameter" not in plain and "launches" not in plain, plain


# the twelfth run's saved rungs below '+bf16' (its results/ladder_0..3.json, the fields the ladder reads)
def _sqrt(batch, lr, warmup=0, optimizer="adam"):
    return {"global_batch_size": batch, "optimizer": optimizer, "peak_lr": lr, "lr_scaling": "sqrt",
            "precision": "fp32", "warmup_steps": warmup}


def _seed(seed, steps, ttt, epochs):
    return {"seed": seed, "steps_to_target": steps, "time_to_target_s": ttt, "epochs_to_target": epochs,
            "final_hr": 0.75}


WARMUP_REASON = ("at batch 65536: no measurable difference: the seeds disagree (time to target: linear warmup, 38 "
                 "steps 9.56 s vs no warmup 9.31 s on average)")
TWELFTH_RUNGS = [
    {"step": "baseline", "time_to_target_s": 51.17627551300018, "steps_to_target": 17406.0,
     "pace": {"after": 73190.94831443677, "before": 85433.33919053171, "rate": 79312.14375248423,
              "run": 87070.3456891479},
     "seed_runs": [_seed(0, 17406, 51.17627551300018, 0.9)], "ran": "batch 256, adam lr 0.001, fp32",
     "config": {"global_batch_size": 256, "optimizer": "adam", "peak_lr": 0.001, "lr_scaling": "none",
                "precision": "fp32", "warmup_steps": 0}},
    {"step": "+linear scaling", "time_to_target_s": 6.421532907500023, "steps_to_target": 285.0,
     "pace": {"after": 113851.44816304905, "before": 66578.96839248032, "rate": 90215.20827776469},
     "seed_runs": [_seed(0, 285, 7.081538440000031, 0.94), _seed(1, 285, 5.761527375000014, 0.94)],
     "ran": "batch 16384, adam lr 0.008 (sqrt rule), fp32", "config": _sqrt(16384, 0.008)},
    {"step": "+warmup", "time_to_target_s": 9.562985883000067, "steps_to_target": 98.0,
     "pace": {"after": 109581.5056834303, "before": 114067.03709487568, "rate": 111824.27138915299},
     "seed_runs": [_seed(0, 96, 9.579409866999981, 1.26), _seed(1, 100, 9.546561899000153, 1.32)],
     "reason": WARMUP_REASON, "ran": "batch 65536, adam lr 0.016 (sqrt rule), linear warmup 38 steps, fp32",
     "config": _sqrt(65536, 0.016, 38)},
    {"step": "+LARS", "time_to_target_s": 25.829038591499625, "steps_to_target": 386.0,
     "pace": {"after": 36332.561291758495, "before": 77415.1392073887, "rate": 56873.850249573596},
     "seed_runs": [_seed(0, 392, 20.14777575199946, 2.58), _seed(1, 380, 31.51030143099979, 2.5)],
     "reason": "at batch 32768: b32768 adam lr 0.0113 lower on every seed (time to target: b32768 lamb lr 0.0226 "
               "25.8 s vs b32768 adam lr 0.0113 10.7 s; seed range 11 s)",
     "ran": "batch 32768, lamb lr 0.0226 (sqrt rule), linear warmup 76 steps, fp32",
     "config": _sqrt(32768, 0.022627416997969524, 76, "lamb")},
]


def _save(rungs, directory):
    for r in rungs:
        save_result(f"ladder_{ladder.LADDER_STEPS.index(r['step'])}",
                    {"final_hr": 0.75, "target_hr": 0.75, "dataset": "synthetic-ml-1m", **r}, directory)


def test_a_rungs_own_lesson_comparison_is_not_quoted_as_the_reason_for_the_ladders_verdict(tmp_path):
    """f12d 06-H3: "+warmup was slower than '+sqrt scaling' (0.5x (±75%)): at batch 65536: no measurable difference:
    the seeds disagree (...)": lesson 03's warmup against no warmup at batch 65536 quoted after a colon as the reason
    for a verdict on batch 65536 against batch 16384, "slower" beside "no measurable difference". The lesson's own
    comparison is introduced as such, in its own sentence (and the table's cell says whose it is). Opposite: a rung
    that beat the rung below carries no "slower" and quotes no reason; a slower rung without a reason quotes none."""
    _save(TWELFTH_RUNGS, tmp_path)
    reading = ladder.ladder_reading(tmp_path)
    line = next(ln for ln in reading.splitlines() if ln.startswith("+warmup was slower"))
    assert "(0.5x (±75%)): at batch" not in line and "(0.5x (±75%)): no measurable" not in line, line
    assert line == ("+warmup was slower than '+sqrt scaling' (0.5x (±75%)). Lesson 03's own comparison (warmup against "
                    f"none, at one pace): {WARMUP_REASON}"), line
    assert "+LAMB was slower than '+sqrt scaling' (0.4x (±124%)). Lesson 04's own comparison (the layer-wise " \
        "optimizer against Adam, at one pace): at batch 32768: b32768 adam lr 0.0113 lower on every seed" in reading
    table = ladder.ladder_table(tmp_path)
    cell = table.rows[2]["vs the rung below"]
    assert cell == ("0.5x (±75%): slower than '+sqrt scaling', this trick did not help here; lesson 03's own "
                    f"comparison (warmup against none, at one pace): {WARMUP_REASON}"), cell
    assert disagreements(reading, table, extra=[3, 4, 20]) == [], reading

    faster = tmp_path / "faster"
    rungs = [dict(r) for r in TWELFTH_RUNGS[:3]]
    rungs[2].update(time_to_target_s=2.5, seed_runs=[_seed(0, 96, 2.5, 1.26), _seed(1, 100, 2.6, 1.32)],
                    reason="at batch 65536: linear warmup, 38 steps lower on every seed")
    _save(rungs, faster)
    read = ladder.ladder_reading(faster)
    assert "+warmup was slower" not in read and "own comparison" not in read, read
    assert not ladder.ladder_table(faster).rows[2]["vs the rung below"].count("own comparison")

    bare = tmp_path / "bare"
    rungs = [dict(r) for r in TWELFTH_RUNGS[:3]]
    rungs[2].pop("reason")
    _save(rungs, bare)
    read = ladder.ladder_reading(bare)
    assert "+warmup was slower than '+sqrt scaling' (0.5x (±75%))\n" in read and "own comparison" not in read, read
