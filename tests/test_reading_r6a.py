"""Readings of lessons 00-04 fixed after the sixth full-profile run (2026-12-02, /tmp/course11; read by r6a,
/work/notes/read-full-run-6-r6a.md): each test feeds the reading that run's numbers and the opposite results."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_reading_agreement import disagreements  # noqa: E402
from test_reading_agreement_more import _warm_run  # noqa: E402

WARMUP_LABELS = ["no warmup", "linear warmup, 19 steps", "linear warmup, 38 steps", "linear warmup, 76 steps",
                 "exponential warmup, 38 steps"]
WARMUP_COLUMNS = ("rule", "time to target (s)", "steps to target", "epochs to target", "final HR@10", "best HR@10",
                  "epochs run")


def test_the_warmup_reading_says_when_the_clock_ranked_a_warmup_by_its_pace():
    """r6a 03-1: "best warmup: linear warmup, 38 steps, reached the target in 6.5 s (96 steps)" over the sweep table's
    19-step warmup, which reached it in 95 steps (7.877 s): at one batch and peak lr a step costs the same whatever the
    warmup, so the clock ranked the runs' pace (0.067 against 0.083 s per step), which the reading did not say."""
    from course_lib.lessons import l03_warmup as L03
    from course_lib.sweeps import sweep_table

    run = [_warm_run(8.555, 100, 0, hr=0.757), _warm_run(7.877, 95, 19, hr=0.7522), _warm_run(6.474, 96, 38, hr=0.75),
           _warm_run(6.78, 108, 76, hr=0.7536), _warm_run(9.625, 108, 38, "exponential", hr=0.7502)]
    text = L03.warmup_reading(run, WARMUP_LABELS)
    assert text.startswith("best warmup: linear warmup, 38 steps, reached the target in 6.5 s (96 steps); but linear "
                           "warmup, 19 steps reached it in fewer steps (95, in 7.9 s)"), text
    assert "(0.067 against 0.083 s per step)" in text and "which warmup is best is not resolved here" in text
    # the agreement check: the s per step are time to target / steps to target, two cells of one row
    paces = [r.time_to_target_s / r.steps_to_target for r in run]
    table = sweep_table(run, WARMUP_LABELS, columns=WARMUP_COLUMNS)
    assert disagreements(text, table, extra=(19, 38, 76, 10, *paces)) == [], text
    # opposite: the clock's fastest warmup also took the fewest steps: no such clause
    fewest = run[:2] + [_warm_run(6.474, 90, 38, hr=0.75)] + run[3:]
    text = L03.warmup_reading(fewest, WARMUP_LABELS)
    assert "reached it in fewer steps" not in text and "not resolved" not in text
    assert text.startswith("best warmup: linear warmup, 38 steps, reached the target in 6.5 s (90 steps); without")


# the sixth run's data-loading ladder (lesson 01 cell 21): rung index: (first batch s, loading, training samples/s)
LOADER_RUN = {0: (0.2371, 423_122, 79_963), 1: (0.2878, 100_603, 30_455), 3: (0.3046, 115_122, 30_864),
              4: (0.3328, 99_018, 33_235), 5: (0.2768, 151_329, 59_562), 6: (0.2702, 1_558_633, 91_086),
              7: (0.0162, 20_578_660, 89_866)}


def _loader_comp(values):
    """A ladder as loader_comparison returns it, each rung's kept (better) pass the values given, the other pass 1 %
    worse in every column."""
    from test_loader_ladder import constructed_comparison

    comp = constructed_comparison()
    comp["epoch_samples"] = 4_950_135
    for i, (first, load, train) in values.items():
        kept = {"first_batch_s": first, "load_sps": load, "train_sps": train}
        other = {"first_batch_s": first * 1.01, "load_sps": load * 0.99, "train_sps": train * 0.99}
        comp["rows"][i].update(passes=[other, kept], **kept)
    return comp


def test_the_loader_reading_says_what_the_first_batch_wait_is_when_persistent_workers_do_not_shorten_it():
    """r6a 01-1: "with persistent workers the wait for an epoch's first batch went from 304.6 to 332.8 ms (1.09x
    longer)", under a markdown that called the "first batch" column the workers' start-up (which persistent workers
    skip), while the per-sample DataLoader, with no worker to start, waited 237.1 ms: the wait is the epoch's own
    set-up, and the reading did not say so."""
    from course_lib.lessons import l01_baseline as L01
    from test_reading_agreement import _pass_ratios

    comp = _loader_comp(LOADER_RUN)
    text, table = L01.loader_reading(comp), L01.comparison_table(comp)
    assert ("went from 304.6 to 332.8 ms (1.09x longer): the per-sample DataLoader, with no worker to start, waited "
            "237.1 ms for its first batch too, so the wait is mostly the epoch's own set-up, which keeping the "
            "workers alive does not skip; paid once per epoch, the wait without them (304.6 ms) is 0.71% of an epoch's "
            "loading at that rung's rate here") in text, text  # read f12a 01-S4: the wait named
    share = 0.3046 / (4_950_135 / 115_122)
    assert disagreements(text, table, extra=(1, 2, share, 0.05, *_pass_ratios(comp))) == [], text
    # opposite: persistent workers shortened the wait (the fifth run's 328.1 -> 252.7 ms): no clause
    shorter = _loader_comp({**LOADER_RUN, 3: (0.3281, 127_039, 25_456), 4: (0.2527, 116_285, 24_899)})
    text = L01.loader_reading(shorter)
    assert "(1.30x shorter); paid once per epoch" in text and "own set-up" not in text
    # opposite: no shorter wait, but the rung without workers waited little: the wait was the workers', not the epoch's
    quick = _loader_comp({**LOADER_RUN, 0: (0.0200, 423_122, 79_963)})
    text = L01.loader_reading(quick)
    assert "(1.09x longer): keeping the workers alive did not shorten it here; paid once" in text
    assert "own set-up" not in text


def _sixth_run_opt_comp(fused_faster=True):
    """Lesson 01 cell 23 of the sixth run (median ms per step; paired ratios consistent with its "within noise"
    marks); ``fused_faster=False``: a fused step within noise at batch 256 too."""
    from test_reading_r4a import _opt_row

    fused = [2.2, 2.19, 2.21] if fused_faster else [1.2, 0.9, 1.1]
    return {"baseline_impl": "for-loop", "device": "cpu", "repeats": 3, "rows": [
        _opt_row(256, "dense Adam, for-loop", 2.312, 4.323, [1, 1, 1], [1, 1, 1], True),
        _opt_row(256, "dense Adam, foreach", 1.765, 3.45, [1.4, 0.98, 1.3], [1.3, 0.97, 1.25]),
        _opt_row(256, "dense Adam, fused", 0.547, 1.969 if fused_faster else 4.0, [4.2, 4.23, 4.25], fused),
        _opt_row(256, "SparseAdam tables + Adam", 1.003, 1.959, [2.3, 2.31, 2.32], [2.2, 2.21, 2.22]),
        _opt_row(16384, "dense Adam, for-loop", 2.06, 22.19, [1, 1, 1], [1, 1, 1], True),
        _opt_row(16384, "dense Adam, foreach", 2.243, 24.26, [0.9, 0.92, 0.93], [0.9, 1.02, 0.91]),
        _opt_row(16384, "dense Adam, fused", 1.69, 24.34, [1.3, 0.95, 1.22], [0.91, 1.01, 0.9]),
        _opt_row(16384, "SparseAdam tables + Adam", 16.33, 36.1, [0.13, 0.13, 0.13], [0.61, 0.61, 0.62])]}


def test_the_optimizer_reading_says_which_rungs_keep_dense_adam():
    """r6a 01-2: "the baseline and every rung of the ladder keep dense Adam, for-loop (torch's default here) ... Every
    rung pays about the same dense optimizer step", while the ladder this run built (lesson 04 cell 15) has a
    '+LAMB' rung, which ran the course's LAMB: the sentence is true of the rungs that train with Adam."""
    from course_lib.lessons import l01_baseline as L01

    comp = _sixth_run_opt_comp()
    text = L01.optimizer_reading(comp)
    assert "every rung of the ladder keep dense Adam" not in text and "Every rung pays" not in text
    assert ("the baseline and every rung of the ladder that trains with Adam (a layer-wise rung runs its own "
            "optimizer) keep dense Adam, for-loop (torch's default here), although fused made the whole step "
            "measurably faster above. Every such rung pays about the same dense optimizer step whatever its batch "
            "(in these paired runs 2.31 ms at batch 256, 2.06 at 16384), but it is 53% of a step at batch 256 and 9% "
            "at 16384") in text, text
    ms = {(r["batch size"], r["variant"]): r["step_ms"] for r in comp["rows"]}
    moved = (ms[256, "dense Adam, for-loop"] / ms[256, "dense Adam, fused"]) / (
        ms[16384, "dense Adam, for-loop"] / ms[16384, "dense Adam, fused"])
    from test_reading_r10a import optimizer_derived  # r10a 01-C1: what each phase accounts for

    assert disagreements(text, L01.optimizer_table(comp), extra=(moved, *optimizer_derived(comp))) == [], text
    # opposite: no dense variant measurably faster at either batch: nothing said about what the rungs keep
    text = L01.optimizer_reading(_sixth_run_opt_comp(fused_faster=False))
    assert "keep dense Adam" not in text and "Every such rung" not in text
