"""Readings fixed after the tenth full-profile read (#37, helper r10c: lessons 05, 06 and 07 of the fresh-clone run of
head 30428d3, /tmp/course15/runs/20261203-073331; /work/notes/read-full-run-10-r10c.md). Each test feeds the reading
that run's own numbers, which printed a statement its outputs contradict or hide, and the opposite results."""

from test_reading_agreement import disagreements

from course_lib.lessons import l06_data_parallel as L06


def _rec(batch, samples_per_s, ttt, epochs, comm_s, train_s, steps=285):
    """A lesson 06 run record, as ``ncf_worker`` returns it (the fields the scaling rows read)."""
    return {"config": {"global_batch_size": batch, "peak_lr": 0.008}, "samples_per_s": samples_per_s,
            "time_to_target_s": ttt, "epochs_to_target": epochs, "steps_to_target": steps, "train_time_s": train_s,
            "comm_time_s": comm_s, "comm_method": "timed: every bucket's all-reduce (host clock)" if comm_s else None,
            "final_hr": 0.7533}


# the tenth run's cell 29 (its scaling table): one rank 12.04 s for 285 steps of 16384, two ranks 9.801 s of which
# 3.168 s all-reduce; the weak one-rank run at batch 8192 (510 steps, 10.08 s); the second seed of the 2-rank setting
TENTH = {1: _rec(16384, 285 * 16384 / 12.04, 12.04, 0.9406, 0.0, 12.04),
         2: _rec(16384, 285 * 16384 / 9.801, 9.801, 0.9406, 3.168, 9.801)}
TENTH_WEAK = {1: _rec(8192, 510 * 8192 / 10.08, 10.08, 0.843, 0.0, 10.08, steps=510), 2: TENTH[2]}
TENTH_AGAIN = [_rec(16384, 285 * 16384 / 9.35, 9.35, 0.9406, 3.0, 9.35)]


def test_the_step_fit_takes_out_the_all_reduce_one_rank_does_not_pay():
    """r10c 06-C1: "each step costs 26.55 ms whatever the batch (optimizer step over every parameter, all-reduce,
    launches) plus 0.96 us per sample, so at 8192 samples per rank 77% of the step does not shrink ... from about
    110,000 samples per rank": a line through one rank (42.2 ms per step, no all-reduce) and two (34.4 ms, 11.1 ms of it
    the timed all-reduce). Without the all-reduce the two points give 4.3 ms + 2.32 us per sample; with it, 45% of the
    2-rank step does not shrink, and compute is 80% of the step from about 27,000 samples per rank. Opposite: with no
    all-reduce timed, the fit reads the steps as they are, and says its fixed part holds the all-reduce."""
    rows = L06.scaling_rows(TENTH, TENTH_WEAK)
    text = L06.scaling_reading(rows, repeats=TENTH_AGAIN)
    assert "26.55" not in text and "0.96 us" not in text and "110,000" not in text, text
    assert "each step costs 4.3 ms whatever the batch (optimizer step over every parameter, launches) plus 2.32 us " \
        "per sample, and on 2 ranks the timed all-reduce, pending 11.1 ms per step" in text, text
    assert "45% of the step does not shrink" in text and "from about 27,000 samples per rank" in text, text
    assert "32,768" in text and "4.9x below NVIDIA's" in text, text
    step1, step2 = 16384 / TENTH[1]["samples_per_s"], 16384 / TENTH[2]["samples_per_s"]
    comm2 = 3.168 / 9.801 * step2
    slope = (step1 - (step2 - comm2)) / 8192
    fixed = step2 - comm2 - slope * 8192
    need = 4 * (fixed + comm2) / slope
    extra = [1e3 * fixed, 1e6 * slope, 1e3 * comm2, (fixed + comm2) / step2, 0.8, 27_000, 32_768, 65_536, 131_072,
             8, 2, 20, 0.64, 131_072 / 27_000]
    assert round(need, -3) == 27_000
    assert disagreements(text, L06.scaling_table(rows), extra=extra) == [], text

    untimed = {w: {**r, "comm_time_s": 0.0} for w, r in TENTH.items()}
    plain = L06.scaling_reading(L06.scaling_rows(untimed, {}))
    assert "26.5 ms whatever the batch (optimizer step over every parameter, all-reduce, launches)" in plain, plain
    assert "pending" not in plain and "with none timed, the fixed cost mixes the optimizer step with it" in plain
