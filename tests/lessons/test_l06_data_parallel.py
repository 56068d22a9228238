"""Lesson 06 (course_lib.lessons.l06_data_parallel), fed rows constructed for each tier (CPU processes over gloo,
one GPU whose ranks are CPU processes, eight GPUs over NCCL, one rank) and rows recorded from full-profile runs:
each verdict's outcome follows from its own interval, and the tables count what the rows hold."""

from pathlib import Path

import pytest

from course_lib import comm
from course_lib.compare import HIGHER, LOWER, SAME, UNRESOLVED
from course_lib.lessons import l06_data_parallel as study

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
    """2 gloo ranks on a 2-core CPU: small buckets are slower; fp16 runs, DDP refuses bf16 (torch without CUDA)."""
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
    rows = [x for x in cpu_tier().rows if x["compression"] != "bf16"]
    rows.append(_row("DDP + bf16 compression", 25.0, True, "bf16", [10.0, 9.8, 10.2], comm_ms=4.7, nbytes=2e6,
                     loss=(1.0, 0.4), rel=0.03, reduces=True))
    return _result(2, "gloo", rows)


def eight_gpu_tier():
    """8 GPUs over NCCL: overlap pays, compression saves comm time."""
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


def _by_question(comps, start):
    found = [c for c in comps if c.question.startswith(start)]
    assert len(found) == 1, [c.question for c in comps]
    return found[0]


# --------------------------------------------------------------------------- overlap and buckets


def test_communication_that_doubles_the_step_is_higher_than_the_floor():
    c = _by_question(study.overlap_comparisons(cpu_tier()), "step, 25 MiB / no comm")
    assert c.outcome == HIGHER and c.n == "3 pairs" and c.low > 2


def test_overlap_is_judged_on_a_setting_with_more_than_one_bucket():
    comps = study.overlap_comparisons(eight_gpu_tier())
    overlap = _by_question(comps, "step, 25 MiB / serial")
    assert overlap.outcome == LOWER
    assert _by_question(comps, "step, 0.25 MiB / 25 MiB").outcome == HIGHER


def test_no_setting_with_several_buckets_asks_no_overlap_question():
    rows = [_row("DDP buckets", 25.0, True, "none", [4.0, 5.0]),
            _row("one all-reduce after backward", 4.0, False, "none", [4.2, 4.9]),
            _row("no communication (floor)", 0.0, None, None, [3.9, 4.8], nbytes=0, n=0)]
    comps = study.overlap_comparisons(_result(2, "gloo", rows))
    assert [c.question for c in comps] == ["step, 25 MiB / no comm"]
    assert comps[0].outcome == UNRESOLVED  # overlapping rounds: within the noise


def test_one_repeat_is_judged_at_one_runs_resolution():
    rows = [_row("DDP buckets", 1.0, True, "none", [12.0], n=5),
            _row("one all-reduce after backward", 4.0, False, "none", [9.0])]
    c = study.overlap_comparisons(_result(2, "gloo", rows))[0]
    assert c.outcome == UNRESOLVED and "one repeat" in c.basis  # 1.33x, within 30%
    rows[0] = _row("DDP buckets", 1.0, True, "none", [20.0], n=5)
    assert study.overlap_comparisons(_result(2, "gloo", rows))[0].outcome == HIGHER  # 2.2x, beyond it


def test_the_timeline_splits_pending_time_into_overlapped_and_waited():
    rows = [_row("DDP buckets", 1.0, True, "none", [5.0, 5.1], n=2),  # all-reduces [2, 4.5], [3, 5.5]; last ready 3
            _row("one all-reduce after backward", 4.0, False, "none", [6.0, 6.1])]
    rows[1]["timeline"] = {"backward_start_ms": 1.0, "backward_end_ms": 5.0, "step_ms": 8.0,
                           "allreduces_ms": [[5.2, 7.0, 4e6]]}  # after backward returned
    buckets, serial = study.timeline_table(_result(2, "gloo", rows)).rows
    assert buckets["pending ms"] == 3.5 and buckets["under backward ms"] == 1.0
    assert serial["pending ms"] == 1.8 and serial["under backward ms"] == 0.0
    assert study.timeline_table(_result(2, "gloo", [rows[0] | {"timeline": None}])).rows == []


# --------------------------------------------------------------------------- compression


def test_fp16_that_trains_the_same_is_the_same_and_bf16_refused_is_a_status_line():
    comps = study.compression_comparisons(cpu_tier())
    assert _by_question(comps, "loss after 20 steps, fp16").outcome == SAME
    assert _by_question(comps, "step, fp16").estimate > 1  # 9.9-10.1 against 8.6-9.3 ms
    assert not [c for c in comps if "bf16" in c.question]
    (line,) = study.refusals(cpu_tier())
    assert line.startswith("bf16: not run") and REFUSED in line


def test_a_loss_a_fifth_of_the_gain_away_is_changed_training():
    comps = study.compression_comparisons(one_gpu_tier())
    assert _by_question(comps, "loss after 20 steps, bf16").outcome == LOWER  # 0.4 against 0.5 after a gain of 0.5


def test_compression_that_saves_time_on_eight_gpus_is_lower():
    comps = study.compression_comparisons(eight_gpu_tier())
    assert _by_question(comps, "step, fp16").outcome == LOWER
    assert study.refusals(eight_gpu_tier()) == []


def test_no_compression_rows_no_comparisons():
    assert study.compression_comparisons(_result(2, "gloo", cpu_tier().rows[:5])) == []


# --------------------------------------------------------------------------- the ring and the sweep


@pytest.mark.parametrize("p, sent, rounds", [(2, 1.0, 2), (4, 1.5, 6), (8, 1.75, 14)])
def test_the_ring_is_counted_on_its_schedule(p, sent, rounds):
    row = {r["ranks"]: r for r in study.ring_table(8).rows}[p]
    assert row["rounds"] == rounds and row["sent / n"] == pytest.approx(sent) == row["2(p-1)/p"]


def test_ring_table_shows_the_lessons_ranks_and_one_rank_sends_nothing():
    assert [r["ranks"] for r in study.ring_table(3).rows] == [2, 3, 4, 8]
    assert study.ring_table(1).rows[0]["sent"] == 0


def _sweep(times_us, spreads_us, p=2, sizes=None):
    sizes = sizes or [4 * 16**k for k in range(len(times_us))]
    rows = []
    for n, t, s in zip(sizes, times_us, spreads_us):
        t_s = t * 1e-6
        rows.append({"size_bytes": n, "time_s": t_s, "time_min_s": t_s - s * 0.5e-6, "time_max_s": t_s + s * 0.5e-6,
                     "algbw_GBps": n / t_s / 1e9, "busbw_GBps": comm.busbw(n / t_s, p) / 1e9})
    return comm.BenchResult(rows=rows, world_size=p, backend="gloo")


def _exact_sweep(spread_us=0.1):
    sizes = [4**k for k in range(1, 14)]
    times = [(50e-6 + n / 2e9) * 1e6 for n in sizes]
    return _sweep(times, [spread_us] * len(sizes), p=4, sizes=sizes)


def test_a_sweep_on_the_alpha_beta_line_is_described_by_its_fit():
    estimates, comps = study.allreduce_fit(_exact_sweep())
    assert [c.outcome for c in comps] == [SAME, SAME, SAME]
    est = {e.name: e for e in estimates}
    assert est["alpha"].value == pytest.approx(50, rel=1e-3)
    assert est["busbw asymptote"].value == pytest.approx(3.0, rel=1e-3)
    assert est["alpha / beta"].value == pytest.approx(1e5, rel=1e-3)


def test_a_sweep_whose_blocks_spread_widely_is_unresolved():
    comps = study.allreduce_fit(_sweep([100, 104, 98], [300, 300, 300]))[1]
    assert comps and all(c.outcome == UNRESOLVED for c in comps)


def test_small_messages_far_off_the_fit_are_not_described_by_it():
    """4 B 554.7, 16 B 314.2, 256 B 875, 64 KiB 219.2 us: no line describes these, the smallest least of all."""
    bench = _sweep([554.7, 314.2, 875.0, 219.2], [30, 30, 30, 30], sizes=[4, 16, 256, 65536])
    first = study.allreduce_fit(bench)[1][0]
    assert first.question.startswith("time at 4 B") and first.decided


def test_a_sweep_on_one_rank_has_no_link_to_compare():
    assert study.allreduce_fit(_sweep([5, 5], [1, 1], p=1)) == ([], [])


# --------------------------------------------------------------------------- scaling


def _rec(batch, samples_per_s, ttt, epochs, comm_s, train_s, steps=285, config=None):
    """A lesson 06 run record, as ``ncf_worker`` returns it (the fields the scaling rows read)."""
    return {"config": {"global_batch_size": batch, "peak_lr": 0.008, **(config or {})},
            "samples_per_s": samples_per_s, "time_to_target_s": ttt, "epochs_to_target": epochs,
            "steps_to_target": steps, "train_time_s": train_s, "comm_time_s": comm_s,
            "comm_method": "timed: every bucket's all-reduce (host clock)" if comm_s else None, "final_hr": 0.7533}


# A full-profile run on 2 CPU processes: one rank 12.04 s for 285 steps of 16384, two ranks 9.801 s of which 3.168 s
# all-reduce; the weak one-rank run at batch 8192 (510 steps, 10.08 s); the 2-rank setting's second seed 9.35 s
SCALED = {1: _rec(16384, 285 * 16384 / 12.04, 12.04, 0.9406, 0.0, 12.04),
          2: _rec(16384, 285 * 16384 / 9.801, 9.801, 0.9406, 3.168, 9.801)}
SCALED_WEAK = {1: _rec(8192, 510 * 8192 / 10.08, 10.08, 0.843, 0.0, 10.08, steps=510), 2: SCALED[2]}
SCALED_AGAIN = [_rec(16384, 285 * 16384 / 9.35, 9.35, 0.9406, 3.0, 9.35)]
# Another: one rank 6.576 s, two ranks 6.257 s and (second seed) 6.158 s, while the yardstick's pace fell 9%
DRIFTED = {1: _rec(16384, 710111.3, 6.5756, 0.9406, 0.0, 6.5756),
           2: _rec(16384, 746330.2, 6.2565, 0.9406, 1.9438, 6.2565)}
DRIFTED_AGAIN = [_rec(16384, 285 * 16384 / 6.1584, 6.1584, 0.9406, 1.9, 6.158)]
DRIFTED_PACE = {"before": 97016.5, "after": 88315.3, "rate": 92665.9}


def test_two_ranks_clear_of_every_seeds_spread_reached_the_target_sooner():
    rows = study.scaling_rows(SCALED, SCALED_WEAK)
    c = _by_question(study.optimization_comparisons(rows, 0.05, repeats=SCALED_AGAIN), "time to target")
    assert c.outcome == LOWER and c.n == "1/2"


def test_a_gain_within_the_paces_drift_is_unresolved():
    rows = study.scaling_rows(DRIFTED, {})
    c = _by_question(study.optimization_comparisons(rows, 0.05, repeats=DRIFTED_AGAIN, pace=DRIFTED_PACE),
                     "time to target")
    assert c.outcome == UNRESOLVED and "pace moved -9%" in c.basis
    slow_one = {**DRIFTED, 1: _rec(16384, 285 * 16384 / 8.0, 8.0, 0.9406, 0.0, 8.0)}  # 1.29x the slower seed
    c = _by_question(study.optimization_comparisons(study.scaling_rows(slow_one, {}), 0.05, repeats=DRIFTED_AGAIN,
                                                    pace=DRIFTED_PACE), "time to target")
    assert c.outcome == LOWER


@pytest.mark.parametrize("t2, outcome", [(4.886, UNRESOLVED), (2.5, LOWER), (9.0, HIGHER)])
def test_one_run_each_is_judged_at_one_runs_resolution(t2, outcome):
    strong = {1: _rec(16384, 8.4e5, 5.573, 0.9406, 0.0, 5.573), 2: _rec(16384, 9.6e5, t2, 0.9406, 1.0, t2)}
    c = _by_question(study.optimization_comparisons(study.scaling_rows(strong, dict(strong)), 0.05), "time to target")
    assert c.outcome == outcome


def test_strong_scaling_keeps_the_epochs_and_weak_scaling_is_read_at_the_dense_spacing():
    dense = {"dense_eval_margin": 0.05, "dense_eval_every_epochs": 0.05, "eval_every_epochs": 0.25}
    strong = {1: _rec(65536, 3e5, 13.35, 1.05, 0.0, 13.35, config=dense),
              2: _rec(65536, 5e5, 8.5, 1.05, 1.0, 8.5, config=dense)}
    weak = {1: _rec(32768, 3e5, 9.0, 1.05, 0.0, 9.0, config=dense), 2: {**strong[2], "epochs_to_target": 1.26}}
    comps = study.optimization_comparisons(study.scaling_rows(strong, weak), eval_every_epochs=0.25)
    assert _by_question(comps, "epochs to target, strong").outcome == SAME
    assert _by_question(comps, "epochs to target, weak").outcome == HIGHER
    def coarse(runs):
        return {w: {**r, "config": {"global_batch_size": r["config"]["global_batch_size"], "peak_lr": 0.008}}
                for w, r in runs.items()}

    comps = study.optimization_comparisons(study.scaling_rows(coarse(strong), coarse(weak)), eval_every_epochs=0.25)
    assert _by_question(comps, "epochs to target, weak").outcome == UNRESOLVED  # 0.25 epochs apart: too coarse


def test_runs_that_did_not_reach_the_target_give_no_verdict():
    strong = {1: _rec(1024, 3e5, None, None, 0.0, 5.0), 2: _rec(1024, 1.1e5, None, None, 1.0, 5.0)}
    assert study.optimization_comparisons(study.scaling_rows(strong, {}), 0.5) == []
    one = {2: _rec(1024, 1e5, 5.0, 1.0, 1.0, 5.0)}
    assert study.optimization_comparisons(study.scaling_rows(one, one), 0.5) == []


def _record(global_batch, step_s):
    return {"config": {"global_batch_size": global_batch, "peak_lr": 1e-3}, "samples_per_s": global_batch / step_s,
            "time_to_target_s": 10.0, "epochs_to_target": 1.0, "train_time_s": 20.0, "comm_time_s": 0.0,
            "final_hr": 0.7}


def _rows_for(fixed_s, per_sample_s, global_batch=16384, worlds=(1, 2, 4, 8)):
    runs = {w: _record(global_batch, fixed_s + per_sample_s * global_batch / w) for w in worlds}
    return study.scaling_rows(runs, runs)


def test_the_step_fit_recovers_a_fixed_and_a_per_sample_cost():
    fit = study.step_time_fit(_rows_for(4e-3, 1e-7))
    assert fit.intercept == pytest.approx(4e-3) and fit.slope == pytest.approx(1e-7)
    est = {e.name: e.value for e in study.scaling_estimates(_rows_for(4e-3, 1e-7))}
    # compute = 80% of the step from 4 x 4 ms / 0.1 us = 160,000 samples per rank
    assert est["per-rank batch, compute 80%"] == pytest.approx(160_000)
    assert est["fixed share, 8 ranks"] == pytest.approx(4e-3 / (4e-3 + 1e-7 * 2048))


def test_the_step_fit_takes_out_the_all_reduce_one_rank_does_not_pay():
    """One rank at 42.2 ms per step and two at 34.4 ms, 11.1 ms of it the timed all-reduce: without it the two points
    give 4.3 ms + 2.32 us per sample (with it, 26.5 ms + 0.96 us)."""
    fit = study.step_time_fit(study.scaling_rows(SCALED, SCALED_WEAK))
    assert 1e3 * fit.intercept == pytest.approx(4.30, abs=0.01) and 1e6 * fit.slope == pytest.approx(2.32, abs=0.01)
    untimed = {w: {**r, "comm_time_s": 0.0} for w, r in SCALED.items()}
    assert 1e3 * study.step_time_fit(study.scaling_rows(untimed, {})).intercept == pytest.approx(26.5, abs=0.1)


def test_a_fit_that_resolves_no_split_quotes_no_per_rank_batch():
    names = [e.name for e in study.scaling_estimates(_rows_for(4e-3, 0.0))]
    assert "per sample" in names
    assert not [n for n in names if n.startswith("per-rank batch")]
    assert study.scaling_estimates(_rows_for(4e-3, 1e-7, worlds=(1,))) == []


def test_the_efficiency_row_averages_every_seed_of_the_largest_setting():
    rows = study.scaling_rows(SCALED, SCALED_WEAK)
    (eff,) = [e for e in study.scaling_estimates(rows, repeats=SCALED_AGAIN) if e.name.startswith("efficiency")]
    assert eff.value == pytest.approx((12.04 / 9.801 + 12.04 / 9.35) / 4) and eff.low < eff.value < eff.high


def test_the_scaling_table_says_how_communication_was_measured():
    runs = {1: _record(1024, 0.01), 2: {**_record(1024, 0.006), "comm_method": "timed: every bucket's all-reduce"}}
    md = study.scaling_table(study.scaling_rows(runs, runs)).to_markdown()
    assert "comm by" in md and "timed: every bucket" in md


def test_the_sbatch_file_is_summarised_not_printed_whole():
    path = Path(__file__).resolve().parents[2] / "notebooks/beyond/ncf_ddp.sbatch"
    text = study.sbatch_summary(path)
    assert "#SBATCH" in text and "srun" in text and len(text.splitlines()) <= 31
    assert len(text.splitlines()) < len(path.read_text().splitlines())
    kept = text.splitlines()[1:]
    assert all(ln.startswith("#SBATCH") or not ln.lstrip().startswith("#") for ln in kept), text
    assert kept[-1].strip() == '"$@"' and kept[-2].endswith("\\"), text  # the launch, to its last line
