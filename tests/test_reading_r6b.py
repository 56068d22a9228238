"""Readings fixed after the sixth full-profile read (#37, helper r6b: lessons 05, 06 and 07 of the run of
2026-12-02 in a fresh clone of acc19ba, /tmp/course11; /work/notes/read-full-run-6-r6b.md). Each test feeds the reading
that run's own numbers, which printed a statement its outputs contradict, and the opposite results."""

from test_reading_agreement import disagreements

from course_lib.lessons import l06_data_parallel as L06


def _rec(batch, samples_per_s, ttt, epochs, comm_s, train_s, steps=285):
    """A lesson 06 run record, as ``ncf_worker`` returns it (the fields the scaling rows read)."""
    return {"config": {"global_batch_size": batch, "peak_lr": 0.008}, "samples_per_s": samples_per_s,
            "time_to_target_s": ttt, "epochs_to_target": epochs, "steps_to_target": steps, "train_time_s": train_s,
            "comm_time_s": comm_s, "comm_method": "timed: every bucket's all-reduce (host clock)" if comm_s else None,
            "final_hr": 0.7533}


# the sixth run's cell 29 (its scaling table): one rank 7.837e5 samples/s, 5.958 s; two ranks 4.537e5, 10.29 s, of
# which 3.231 s all-reduce; the weak one-rank run at batch 8192
SIXTH = {1: _rec(16384, 7.837e5, 5.958, 0.9406, 0.0, 5.958), 2: _rec(16384, 4.537e5, 10.29, 0.9406, 3.231, 10.29)}
SIXTH_WEAK = {1: _rec(8192, 6.903e5, 6.052, 0.843, 0.0, 6.052, steps=510), 2: SIXTH[2]}
# the fifth run's (read r5b 06-1): one rank 19.5 ms per step, two 22.7 ms with 7.9 ms all-reduce
FIFTH = {1: _rec(16384, 8.386e5, 5.568, 0.9406, 0.0, 5.568), 2: _rec(16384, 7.21e5, 6.476, 0.9406, 2.252, 6.476)}


def test_the_no_shrink_scaling_reading_splits_off_the_timed_all_reduce():
    """r6b 06-1: "The step time did not shrink ..., so fixed costs (the optimizer's step over every parameter, the
    all-reduce, launches) or noise dominate" over 20.9 ms on one rank and 36.1 ms on two, 11.3 ms of it the timed
    all-reduce: without it 24.8 ms, still more than one rank's whole step at twice the samples, which no cost that
    does not depend on the batch makes. Opposite (the fifth run): without its all-reduce the 2-rank step (14.8 ms) is
    below one rank's, and the reading says the all-reduce can account for it."""
    rows = L06.scaling_rows(SIXTH, SIXTH_WEAK)
    text = L06.scaling_reading(rows)
    assert "fixed costs (the optimizer's step over every parameter, the all-reduce, launches) or noise" not in text
    assert "36.1 ms per step on 2 ranks (8192 samples each) against 20.9 ms on 1 (16384)" in text
    assert "pending 11.3 ms of it (timed)" in text and "24.8 ms, still more than one rank's 20.9 ms at 2x" in text
    assert "cannot make a step with fewer samples slower" in text and "no cell here measured which" in text
    step1, step2 = 16384 / 7.837e5, 16384 / 4.537e5
    comm2 = 3.231 / 10.29 * step2
    extra = [1e3 * step1, 1e3 * step2, 1e3 * comm2, 1e3 * (step2 - comm2), 131_072, 8, 20, 1, 2]
    assert disagreements(text, L06.scaling_table(rows), extra=extra) == [], text

    # the same setting's second seed (cell 31's, 285 steps in 5.66 s) beside the table's efficiency (06-2)
    again = L06.scaling_reading(rows, repeats=[_rec(16384, 285 * 16384 / 5.66, 5.66, 0.9406, 2.0, 5.66)])
    assert "efficiency 0.29 (the table's run; the same setting at another seed ran at efficiency 0.53: how far one " \
        "run's pace moves it)" in again, again
    assert L06.scaling_reading(rows, repeats=[]) == text

    fifth = L06.scaling_reading(L06.scaling_rows(FIFTH, {}))
    # r10c 06-C1: the fit now takes the timed all-reduce out first, so the fifth run's 14.8 ms without it, below one
    # rank's 19.5 ms, gives a split (10.1 ms + 0.576 us per sample, and the 7.9 ms all-reduce on 2 ranks)
    assert "each step costs 10.1 ms whatever the batch" in fifth and "pending 7.9 ms per step" in fifth, fifth
    assert "79% of the step does not shrink" in fifth and "cannot make a step" not in fifth
    # no all-reduce timed on the larger size: the old sentence, nothing to split by
    untimed = {w: {**r, "comm_time_s": 0.0} for w, r in SIXTH.items()}
    assert "or noise dominate" in L06.scaling_reading(L06.scaling_rows(untimed, {}))


def test_the_time_to_target_verdict_reads_every_run_of_the_largest_setting():
    """r6b 06-2: cell 29 read "10.3 s on 2 ranks against 5.96 s on one rank ..., 1.7x slower ...: adding ranks
    lengthened the run" from one 2-rank run; the same setting's second seed (cell 31) took 5.7 s for the same 285 steps,
    below one rank's 5.96 s. Given every run of the setting, one rank's time lies within their range: no verdict.
    Opposite: both 2-rank runs slower (or faster) than one rank beyond one run's resolution keep a verdict."""
    rows = L06.scaling_rows(SIXTH, SIXTH_WEAK)
    alone = L06.optimization_reading(rows, 0.25)
    assert "1.7x slower" in alone and "adding ranks lengthened the run" in alone  # as printed, one run each
    text = L06.optimization_reading(rows, 0.25, repeats=[_rec(16384, 8.2e5, 5.7, 0.9406, 2.0, 5.7)])
    assert ("10.3 and 5.7 s on 2 ranks (2 runs of one setting at different seeds, the same 285 steps: 1.81x apart)"
            in text)
    assert "against 5.96 s on one rank" in text and "do not say whether the ranks scaled" in text
    assert "adding ranks lengthened the run" not in text and "the lesson's one verdict on it" in text
    extra = [0.05, 0.25, L06.ONE_RUN_RESOLUTION, 1, 2, 5.7, 10.29 / 5.7, 285]
    assert disagreements(text, L06.scaling_table(rows), extra=extra) == [], text

    slower = L06.optimization_reading(rows, 0.25, repeats=[_rec(16384, 5e5, 9.6, 0.9406, 3.0, 9.6)])
    # r10c 06-H2: the resolution is how far the runs of one setting moved (10.29 and 9.6 s), not a constant 30%
    assert "every run slower than one rank by more than the 7% the runs of one setting differed by" in slower
    assert "lengthened the run" in slower
    near = L06.optimization_reading(rows, 0.25, repeats=[_rec(16384, 5e5, 7.0, 0.9406, 3.0, 7.0)])
    assert "within the 47% the runs of one setting differed by" in near and "lengthened" not in near  # 1.17x
    fast = {1: SIXTH[1], 2: _rec(16384, 1.5e6, 3.0, 0.9406, 1.0, 3.0)}
    scaled = L06.optimization_reading(L06.scaling_rows(fast, {}), 0.25, repeats=[_rec(16384, 1.4e6, 3.4, 0.94, 1, 3.4)])
    assert "every run faster than one rank" in scaled and "the ranks scaled" in scaled
    # a repeat that did not reach the target adds nothing: the one-run verdict as before
    assert L06.optimization_reading(rows, 0.25, repeats=[{**SIXTH[2], "time_to_target_s": None}]) == alone


def _sixth_bucket_result(pending_25=7.451):
    """Lesson 06 cell 22's bucket table of the sixth run (2 gloo ranks; step = the median repeat, as printed)."""
    from course_lib import comm

    def row(variant, cap, overlap, reps, step, n, comm_ms, compression="none"):
        return {"variant": variant, "bucket_cap_mb": cap, "overlap": overlap, "compression": compression,
                "step_ms": step, "step_ms_repeats": list(reps), "allreduces_per_step": n, "comm_ms": comm_ms,
                "params_in_sync": None if overlap is None else True}
    rows = [row("DDP buckets", 0.25, True, [26.7, 25.6, 33.1], 26.74, 17, 21.48),
            row("DDP buckets", 1.0, True, [26.9, 24.7, 21.3], 24.71, 5, 12.43),
            row("DDP buckets", 25.0, True, [23.2, 23.5, 15.4], 23.19, 1, pending_25),
            row("one all-reduce after backward", 4.276, False, [22.3, 15.3, 18.0], 18.02, 1, 5.439),
            row("no communication (floor)", 0.0, None, [14.7, 10.9, 9.81], 10.9, 0, 0.0, None)]
    return comm.BucketResult(rows=rows, world_size=2, backend="gloo", model_spec=comm.MLPSpec())


def test_the_communication_share_says_how_much_of_it_the_all_reduces_were():
    """r6b 06-3: "a step took 23.2 ms against 10.9 ms with no communication, so 53% of the step is communication that
    did not hide behind backward (all-reduces were pending 7.45 ms per step)": of the 12.3 ms the all-reduces were
    pending 7.45 (32% of the step); the other 4.84 ms is time outside them, and the reading says so. Opposite: an
    all-reduce pending about as long as the step grew keeps the old sentence."""
    from course_lib.lessons import l06_data_parallel as study

    result = _sixth_bucket_result()
    text = study.overlap_reading(result)
    share = text.split("What overlap saved")[0]
    assert ("a step took 23.2 ms against 10.9 ms with no communication, so 53% of the step is communication's cost "
            "that did not hide behind backward (12.3 ms): the all-reduces themselves were pending 7.45 ms per step "
            "(32% of the step), and the other 4.84 ms is time spent outside them") in share, share
    assert "no cell here measured which" in share and "communication that did not hide" not in share
    table = result.table()
    extra = [23.19 - 10.9, 7.451 / 23.19, (23.19 - 10.9) / 23.19, 23.19 - 10.9 - 7.451, 26.74 - 23.19,
             (26.74 - 23.19) / 26.74, 1, 25, 0.25, 5,
             24.71 - 18.02, (24.71 - 18.02) / 24.71]  # r10c 06-H1: the 1 MiB buckets (5) against the serial one
    assert disagreements(text, table, extra=extra) == [], text
    level = study.overlap_reading(_sixth_bucket_result(pending_25=11.8)).split("What overlap saved")[0]
    assert "53% of the step is communication that did not hide behind backward (all-reduces were pending 11.8 ms" \
        in level and "outside them" not in level, level
