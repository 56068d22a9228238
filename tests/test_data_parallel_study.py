"""Lesson 06's readings (course_lib.lessons.l06_data_parallel), fed rows
constructed for each tier: CPU processes over gloo, one GPU (its ranks are CPU processes, in a torch
built with CUDA), eight GPUs over NCCL, and one rank. Each reading must say what its rows show."""


import pytest

from course_lib import comm
from course_lib.lessons import l06_data_parallel as study
from course_lib.lessons.l06_data_parallel import optimization_reading, scaling_rows

REFUSED = "BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+ or XPU and XCCL"


def _row(variant, cap, overlap, compression, reps, *, n=1, comm_ms=1.0, nbytes=4e6, loss=(1.0, 0.5), rel=0.0,
         backend="gloo", refused=None, reduces=None):
    row = {"variant": variant, "bucket_cap_mb": cap, "overlap": overlap, "compression": compression,
           "backend": backend, "steps": 20, "repeats": len(reps)}
    if compression not in ("none", None):
        row.update(refused=refused, backend_reduces_dtype=reduces)
    if refused:
        return {**row, "step_ms": None, "step_ms_repeats": [], "comm_ms": None, "bytes_per_step": None,
                "allreduces_per_step": None, "timeline": None, "params_in_sync": None, "update_rel_diff": None,
                "worst_tensor": None, "worst_tensor_rel_diff": None, "first_loss": None, "final_loss": None,
                "underflow": None}
    reps = list(reps)
    return {**row, "step_ms": sorted(reps)[len(reps) // 2], "step_ms_repeats": reps, "comm_ms": comm_ms,
            "bytes_per_step": nbytes, "allreduces_per_step": n,
            "timeline": {"backward_start_ms": 1.0, "backward_end_ms": 5.0, "step_ms": 6.0,
                         "allreduces_ms": [[2.0 + i, 4.5 + i, nbytes / n] for i in range(n)]},
            "params_in_sync": None if overlap is None else True, "update_rel_diff": rel, "worst_tensor": "0.weight",
            "worst_tensor_rel_diff": 2 * rel, "first_loss": loss[0], "final_loss": loss[1],
            "underflow": {"nonzero": 1000, "nonzero_sent": 990, "subnormal_sent": 20} if compression not in
            ("none", None) else None}


def _result(world_size, backend, rows):
    return comm.BucketResult(rows=rows, world_size=world_size, backend=backend, model_spec=comm.MLPSpec())


def cpu_tier():
    """2 gloo ranks on a 2-core CPU: overlap buys nothing measurable, small buckets are slower; fp16 runs,
    DDP refuses bf16 (a torch built without CUDA)."""
    return _result(2, "gloo", [
        _row("DDP buckets", 0.25, True, "none", [16.4, 19.5, 16.5], n=17, comm_ms=13.0),
        _row("DDP buckets", 1.0, True, "none", [12.5, 11.5, 15.9], n=5, comm_ms=9.8),
        _row("DDP buckets", 25.0, True, "none", [9.3, 9.3, 8.6], n=1, comm_ms=4.0),
        _row("one all-reduce after backward", 4.28, False, "none", [9.7, 9.6, 9.2], comm_ms=3.7),
        _row("no communication (floor)", 0.0, None, None, [4.0, 3.8, 3.9], comm_ms=0.0, nbytes=0, n=0),
        _row("DDP + fp16 compression", 25.0, True, "fp16", [10.1, 9.9, 10.1], comm_ms=4.8, nbytes=2e6,
             loss=(1.0, 0.50001), rel=7.5e-3),
        _row("DDP + bf16 compression", 25.0, True, "bf16", [], refused=REFUSED, reduces=True),
    ])


def one_gpu_tier():
    """One GPU: the ranks are CPU processes over gloo, but torch is a CUDA build, so DDP accepts bf16."""
    r = cpu_tier()
    rows = [x for x in r.rows if x["compression"] != "bf16"]
    rows.append(_row("DDP + bf16 compression", 25.0, True, "bf16", [10.0, 9.8, 10.2], comm_ms=4.7, nbytes=2e6,
                     loss=(1.0, 0.4), rel=0.03, reduces=True))
    return _result(2, "gloo", rows)


def eight_gpu_tier():
    """8 GPUs over NCCL: overlap pays, tiny caps give one tensor per bucket, compression saves comm time."""
    return _result(8, "nccl", [
        _row("DDP buckets", 0.25, True, "none", [3.1, 3.2, 3.15], n=4, comm_ms=1.2, backend="nccl"),
        _row("DDP buckets", 1.0, True, "none", [3.0, 3.05, 3.1], n=4, comm_ms=1.1, backend="nccl"),
        _row("DDP buckets", 25.0, True, "none", [2.6, 2.62, 2.65], n=2, comm_ms=1.0, backend="nccl"),
        _row("one all-reduce after backward", 39.0, False, "none", [3.6, 3.62, 3.58], comm_ms=1.0, backend="nccl"),
        _row("no communication (floor)", 0.0, None, None, [2.5, 2.52, 2.55], comm_ms=0.0, nbytes=0, n=0,
             backend="nccl"),
        _row("DDP + fp16 compression", 25.0, True, "fp16", [2.3, 2.32, 2.31], comm_ms=0.55, nbytes=2e6,
             rel=1e-3, backend="nccl"),
        _row("DDP + bf16 compression", 25.0, True, "bf16", [2.31, 2.33, 2.3], comm_ms=0.56, nbytes=2e6,
             rel=8e-3, backend="nccl", reduces=True),
    ])


# --------------------------------------------------------------------------- noise


def test_ranges_that_overlap_are_no_measurable_difference():
    a = {"step_ms": 10, "step_ms_repeats": [9, 10, 11]}
    assert study.measurably_different(a, {"step_ms": 10.5, "step_ms_repeats": [10.5, 12]}) is False
    assert study.measurably_different(a, {"step_ms": 13, "step_ms_repeats": [12, 13]}) is True
    assert study.measurably_different(a, {"step_ms": 13, "step_ms_repeats": [13]}) is None  # no noise estimate


# --------------------------------------------------------------------------- overlap, per tier


def test_timeline_reading_splits_pending_time_into_overlapped_and_waited():
    rows = [_row("DDP buckets", 1.0, True, "none", [5.0, 5.1], n=2),  # all-reduces [2, 4.5], [3, 5.5]; last ready 3
            _row("one all-reduce after backward", 4.0, False, "none", [6.0, 6.1])]
    rows[1]["timeline"] = {"backward_start_ms": 1.0, "backward_end_ms": 5.0, "step_ms": 8.0,
                           "allreduces_ms": [[5.2, 7.0, 4e6]]}  # after backward returned
    text = study.timeline_reading(_result(2, "gloo", rows))
    assert "1 MiB buckets: 2 all-reduces pending 3.5 ms of a 6 ms step, 1 ms of it (29%) while backward" in text
    assert "one all-reduce after backward: 1 all-reduce pending 1.8 ms of a 8 ms step, 0 ms of it (0%)" in text
    assert (study.timeline_reading(_result(2, "gloo", [rows[0] | {"timeline": None}]))
            == "no recorded all-reduces to read.")


def test_cpu_tier_overlap_reading():
    text = study.overlap_reading(cpu_tier())
    assert "Communication share: with the fastest setting, 25 MiB buckets (1 all-reduce per step)" in text
    assert f"{(9.3 - 3.9) / 9.3:.0%} of the step is communication" in text
    # r10c 06-H1: the fastest, 25 MiB, is one bucket and cannot overlap; the 1 MiB buckets (5 per step) can, and were
    # slower than one all-reduce after backward (11.5-15.9 vs 9.2-9.7 ms)
    assert "What overlap saved: the fastest bucket setting made one bucket, ready only when backward ended" in text
    assert "the fastest is the 1 MiB buckets (5 all-reduces per step): nothing — one all-reduce after backward took " \
        "9.6 ms per step, 2.9 ms less than the 1 MiB buckets" in text
    assert "Bucket size: 25 MiB took 9.3 ms per step, 7.2 ms less than 0.25 MiB" in text


def test_eight_gpu_overlap_reading_says_what_overlap_saved_and_why_caps_tie():
    text = study.overlap_reading(eight_gpu_tier())
    assert "What overlap saved: the best bucket setting took 2.62 ms per step, 0.98 ms less than one all-reduce" in text
    assert "Caps 0.25, 1 MiB made the same number of buckets" in text and "largest gradient is 0.25 MiB" in text


def test_a_step_no_slower_than_the_floor_is_not_called_hidden_without_saying_the_noise():
    rows = [_row("DDP buckets", 25.0, True, "none", [4.0, 5.0]),
            _row("one all-reduce after backward", 4.0, False, "none", [4.2, 4.9]),
            _row("no communication (floor)", 0.0, None, None, [3.9, 4.8], nbytes=0, n=0)]
    text = study.overlap_reading(_result(2, "gloo", rows))
    assert "Communication share: not measurable here" in text and "noise" in text
    assert "What overlap saved: not measured: every bucket setting made one bucket per step" in text  # r10c 06-H1
    assert "nothing measurable" in text


def test_overlap_that_costs_time_is_said_so():
    rows = [_row("DDP buckets", 1.0, True, "none", [12.0, 12.5], n=5),
            _row("one all-reduce after backward", 4.0, False, "none", [9.0, 9.5])]
    assert "What overlap saved: nothing — one all-reduce after backward took 9" in study.overlap_reading(
        _result(2, "gloo", rows))


def test_one_repeat_says_there_is_no_noise_estimate():
    rows = [_row("DDP buckets", 1.0, True, "none", [12.0]),
            _row("one all-reduce after backward", 4.0, False, "none", [9.0])]
    assert "no noise estimate" in study.overlap_reading(_result(2, "gloo", rows))


def test_one_rank_is_said_to_have_nobody_to_all_reduce_with():
    rows = [_row("DDP buckets", 25.0, True, "none", [3.0, 3.1])]
    assert study.overlap_reading(_result(1, "gloo", rows)).startswith("One rank")


# --------------------------------------------------------------------------- compression, per tier


def test_cpu_tier_compression_reading_counts_bytes_and_explains_the_bf16_refusal():
    text = study.compression_reading(cpu_tier())
    assert "fp16: 1.9 MiB all-reduced per step instead of 3.8 MiB (0.5x, counted" in text
    assert "no measurable difference between fp16 and uncompressed" not in text  # 9.9-10.1 vs 8.6-9.3
    assert "fp16 took 10.1 ms per step, 0.8 ms more than uncompressed" in text
    assert "training unchanged within 1%" in text
    assert f"{7.5e-3 / 2**-11:.2g} units of fp16's rounding" in text
    assert "1.00% became zero in fp16 and 2.00% were subnormal" in text
    assert "bf16: not run here. DDP refuses torch's bf16_compress_hook" in text and REFUSED in text
    assert "gloo itself summed bf16 tensors correctly" in text


def test_one_gpu_tier_runs_bf16_and_says_when_training_changed():
    text = study.compression_reading(one_gpu_tier())
    assert "bf16: 1.9 MiB all-reduced per step" in text and "not run" not in text
    assert "training changed within 1%" in text  # loss 0.4 vs 0.5 after a gain of 0.5: 20 %


def test_eight_gpu_compression_saves_measurable_time():
    text = study.compression_reading(eight_gpu_tier())
    assert "fp16 took 2.31 ms per step, 0.31 ms less than uncompressed" in text
    assert "all-reduces pending 0.55 ms per step against 1" in text


def test_no_compression_rows():
    rows = cpu_tier().rows[:5]
    assert study.compression_reading(_result(2, "gloo", rows)) == "gradient compression was not measured in this run."


# --------------------------------------------------------------------------- the ring and the sweep


@pytest.mark.parametrize("p, sent, rounds", [(2, 1.0, 2), (4, 1.5, 6), (8, 1.75, 14)])
def test_ring_reading_counts_the_schedule(p, sent, rounds):
    text = study.ring_reading(p)
    assert f"{rounds} rounds" in text and f"{sent:.3g}x the tensor" in text


def test_ring_reading_one_rank():
    assert study.ring_reading(1).startswith("one rank")


def _sweep(times_us, spreads_us, p=2, sizes=None):
    sizes = sizes or [4 * 16**k for k in range(len(times_us))]
    rows = []
    for n, t, s in zip(sizes, times_us, spreads_us):
        t_s = t * 1e-6
        rows.append({"size_bytes": n, "time_s": t_s, "time_min_s": t_s - s * 0.5e-6, "time_max_s": t_s + s * 0.5e-6,
                     "algbw_GBps": n / t_s / 1e9, "busbw_GBps": comm.busbw(n / t_s, p) / 1e9})
    return comm.BenchResult(rows=rows, world_size=p, backend="gloo")


def test_the_reviews_small_messages_are_not_called_a_flat_line():
    """Finding 06.4: 4 B 554.7, 16 B 314.2, 256 B 875, 64 KiB 219.2 us; only the fit is flat."""
    bench = _sweep([554.7, 314.2, 875.0, 219.2], [30, 30, 30, 30], sizes=[4, 16, 256, 65536])
    text = study.allreduce_reading(bench)
    assert "not a flat line: 16 B (314 us), 256 B (875 us), 64 KiB (219 us) lie off the median 555 us" in text
    assert "4-fold from fastest to slowest" in text


def test_an_outlying_block_does_not_make_a_line_crooked():
    """A size whose median is high but whose blocks spread as far is within its own noise."""
    text = study.allreduce_reading(_sweep([68, 116, 108, 97, 109, 111, 108, 389], [535, 34, 26, 29, 16, 33, 29, 1922]))
    assert "a flat line within the noise" in text


def test_small_messages_flat_within_the_block_spread():
    text = study.allreduce_reading(_sweep([100, 104, 98], [20, 20, 20]))
    assert "a flat line within the noise" in text and "No size measured here is large enough" in text


def test_a_sweep_that_reaches_bandwidth_reports_the_busbw_against_the_fit():
    sizes = [4**k for k in range(1, 14)]
    alpha, beta = 50e-6, 1 / 2e9
    times = [(alpha + beta * n) * 1e6 for n in sizes]
    text = study.allreduce_reading(_sweep(times, [1.0] * len(sizes), p=4, sizes=sizes))
    assert "Latency regime up to about" in text and "Bandwidth regime above it" in text
    assert "of the fit's asymptote (3 GB/s" in text  # 2(p-1)/p / beta = 1.5 x 2 GB/s


def test_a_sweep_whose_fit_resolved_no_latency_says_so():
    """On a busy machine the all-reduce fit can put alpha at 0 (the same class as lesson 08's ping-pong, CI stop
    39): the reading began "Bandwidth regime above it" with no latency regime for "it" to point to. It says the
    fit resolved no latency, and reads every size as the bandwidth regime."""
    sizes = [4 * 16**k for k in range(7)]
    times = [1e-3 * n**1.1 for n in sizes]  # us; faster than linear in the size: the line's intercept is below 0
    bench = _sweep(times, [0.0] * len(sizes), sizes=sizes)
    assert bench.fit()[0] == 0.0
    text = study.allreduce_reading(bench)
    assert text.startswith("The fit resolved no latency at all") and "above it" not in text
    assert "Bandwidth regime at every size measured" in text


def test_a_sweep_on_one_rank_reads_no_link():
    assert study.allreduce_reading(_sweep([5, 5], [1, 1], p=1)).startswith("one rank")


# --------------------------------------------------------------------------- scaling, per tier


def _record(w, batch, ttt, epochs, sps, hr=0.6):
    return {"config": {"global_batch_size": batch, "peak_lr": 0.004}, "samples_per_s": sps, "time_to_target_s": ttt,
            "epochs_to_target": epochs, "train_time_s": 10.0, "comm_time_s": 1.0 if w > 1 else None,
            "comm_method": "timed: every bucket's all-reduce (host clock)" if w > 1 else None, "final_hr": hr}


def test_the_reviews_weak_rows_with_equal_epochs_say_no_measurable_change():
    """Finding 06.6: both weak rows at 0.9992 epochs; finding 06.2: 2 ranks slower than one."""
    strong = {1: _record(1, 4096, 13.23, 0.9992, 3e5), 2: _record(2, 4096, 22.12, 0.9992, 1.8e5)}
    weak = {1: _record(1, 2048, 12.0, 0.9992, 2.5e5), 2: strong[2]}
    text = optimization_reading(scaling_rows(strong, weak), eval_every_epochs=0.25)
    assert "Strong scaling (the same global batch): no measurable change in epochs to target" in text
    assert "Weak scaling (the global batch grows with the ranks): no measurable change" in text
    assert "22.1 s on 2 ranks against 13.2 s on one rank of the same threads, 1.7x slower" in text
    assert "adding ranks lengthened the run" in text and "the lesson's one verdict on it" in text
    assert "shortened" not in text  # #37: the ladder's row is the one verdict on data parallelism


def test_eight_gpus_weak_scaling_that_needs_more_epochs_says_so():
    strong = {w: _record(w, 65536, 100.0 / w ** 0.8, 1.5, 1e6 * w ** 0.8) for w in (1, 2, 4, 8)}
    weak = {w: _record(w, 8192 * w, 80.0, 1.5 + 0.5 * (w > 4), 1e6 * w ** 0.9) for w in (1, 2, 4, 8)}
    weak[8] = strong[8] = {**strong[8], "epochs_to_target": 2.0}  # the largest run is both (as in the lesson)
    text = optimization_reading(scaling_rows(strong, weak), eval_every_epochs=0.25)
    assert "Strong scaling (the same global batch): epochs to target grew from 1.5 to 2" in text
    assert "should not do" in text
    assert "Weak scaling (the global batch grows with the ranks): epochs to target grew from 1.5 to 2" in text
    assert "faster" in text and "the ranks scaled" in text and "shortened" not in text


def test_weak_scaling_is_read_at_the_evaluation_spacing_the_runs_had():
    """#37 (review 06 #15): 1.05 vs 1.26 epochs is 4 intervals when evaluations came every 0.05 epoch near the
    target, not "within one interval (0.25 epochs)"; the same rows without the dense spacing stay within one."""
    dense = {"dense_eval_margin": 0.05, "dense_eval_every_epochs": 0.05, "eval_every_epochs": 0.25}
    strong = {1: _record(1, 65536, 13.35, 1.05, 3e5), 2: _record(2, 65536, 8.5, 1.05, 5e5)}
    weak = {1: _record(1, 32768, 9.0, 1.05, 3e5), 2: {**strong[2]}}
    weak[2] = {**weak[2], "epochs_to_target": 1.26}
    for r in [*strong.values(), *weak.values()]:
        r["config"] = {**r["config"], **dense}
    text = optimization_reading(scaling_rows(strong, weak), eval_every_epochs=0.25)
    assert "epochs to target grew from 1.05 to 1.26" in text and "(0.05 epochs)" in text
    for r in [*strong.values(), *weak.values()]:
        r["config"] = {k: v for k, v in r["config"].items() if not k.startswith("dense")}
    text = optimization_reading(scaling_rows(strong, weak), eval_every_epochs=0.25)
    assert "no measurable change in epochs to target" in text.split("Weak scaling")[1]


def test_runs_that_did_not_reach_the_target_compare_final_hr():
    strong = {1: _record(1, 1024, None, None, 3e5, hr=0.396), 2: _record(2, 1024, None, None, 1.1e5, hr=0.393)}
    text = optimization_reading(scaling_rows(strong, {}), eval_every_epochs=0.5)
    assert "neither run reached the target" in text and "0.3960 and 0.3930" in text
    assert "not reached by 1 rank(s) and 2 rank(s)" in text


def test_one_size_only():
    strong = {2: _record(2, 1024, 5.0, 1.0, 1e5)}
    assert optimization_reading(scaling_rows(strong, strong), 0.5) == "one data-parallel size only: nothing to compare."


def test_a_time_to_target_ratio_within_one_runs_resolution_gets_no_verdict():
    """#37 (full run 2026-12-01, lesson 06 cell 29): "1.1x faster (...; one run each, so rerun before trusting a few
    tens of percent): the ranks scaled". Within ONE_RUN_RESOLUTION no verdict; beyond it, either way, one."""
    def text(t2):
        strong = {1: _record(1, 16384, 5.573, 0.9406, 8.4e5), 2: _record(2, 16384, t2, 0.9406, 9.6e5)}
        return optimization_reading(scaling_rows(strong, dict(strong)), eval_every_epochs=0.05)

    full = text(4.886)  # 1.14x
    assert "1.1x faster" in full and "do not say whether the ranks scaled" in full and "the ranks scaled" not in \
        full.replace("whether the ranks scaled", "")
    assert "the ranks scaled" in text(2.5) and "do not say" not in text(2.5)  # 2.2x
    assert "adding ranks lengthened the run" in text(9.0)  # 1.6x slower
