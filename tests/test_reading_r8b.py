"""Readings fixed after the eighth full-profile read (#37, helper r8b: lessons 05, 06 and 07 of the run of
2026-12-02, /tmp/course13; /work/notes/read-full-run-8-r8b.md). Each test feeds the reading that run's own numbers,
which printed a statement its outputs contradict (or a figure its noise does not allow), and the opposite results."""

from types import SimpleNamespace

from test_mixed_precision import AMX_SERVER
from test_reading_agreement import disagreements

from course_lib.lessons import l05_mixed_precision as L05
from course_lib.lessons import l06_data_parallel as L06
from course_lib.train import TrainConfig

# the eighth run's lesson 05, cell 11: fastest of 3 interleaved repeats at batch 16384 (ms per step by phase)
EIGHTH_PHASES = {"fp32": {"sampling": 0.4155e-3, "forward_backward": 21.48e-3, "optimizer": 2.209e-3},
                 "bf16": {"sampling": 0.3951e-3, "forward_backward": 15.17e-3, "optimizer": 2.135e-3},
                 "fp16": {"sampling": 0.5284e-3, "forward_backward": 188.6e-3, "optimizer": 3.039e-3}}
EIGHTH_REPEATS = {"fp32": [5.74e5, 6.77e5, 5.86e5], "bf16": [7.73e5, 9.2e5, 9.11e5], "fp16": [7.27e4, 8.52e4, 8.22e4]}


def _speed(repeats=EIGHTH_REPEATS, phases=EIGHTH_PHASES):
    runs = {}
    for m, reps in repeats.items():
        prec = {"mode": m, "loss_scaling": "dynamic" if m == "fp16" else "none"}
        runs[m] = L05.SpeedRun(m, max(reps), sum(phases[m].values()), phases[m], prec, 30, 3)
    return L05.PrecisionSpeed(runs, repeats, 30, load=1.6)


def test_the_step_bound_keeps_the_figures_the_repeats_noise_allows():
    """r8b 05-1: cell 15 "forward+backward is 89% of fp32's step, so even free 16-bit math could make the step at most
    9.19x faster", beside "tolerance 13%" (fp32's repeats 5.74e5, 6.77e5, 5.86e5): 1/(1 - share) multiplies the
    share's noise by share/(1 - share), about 8 here, so the bound is known to one figure. Opposite: quiet repeats and
    a half-share step keep two figures."""
    text = L05.speedup_reading(_speed(), AMX_SERVER, "cpu", neumf_share=0.011, load_now=1.7)
    assert "9.19x" not in text and text.count("could make the step at most 9x faster") == 2, text
    assert "tolerance 13%" in text
    quiet = {m: [v[1], v[1] * 0.995, v[1] * 0.99] for m, v in EIGHTH_REPEATS.items()}
    half = {m: {**p, "optimizer": p["forward_backward"]} for m, p in EIGHTH_PHASES.items()}
    other = L05.speedup_reading(_speed(quiet, half), AMX_SERVER, "cpu", load_now=1.7)
    share = 21.48 / (0.4155 + 2 * 21.48)
    assert f"at most {1 / (1 - share):.2g}x faster" in other and "tolerance 3%" in other, other
    assert L05.amdahl_bound_text(0.5, 0.001) == "2x" and L05.amdahl_bound_text(0.9, 0.001) == "10x"
    assert L05.amdahl_bound_text(0.25, 0.004) == "1.33x"


def _scaling_rows(monkeypatch, dynamic_end=2.0 ** 16):
    """loss_scaling_runs on the eighth run's numbers (cell 19): training and the probe replaced by what they measured
    there (zeros at each scale: unscaled 5.782%, at 2^16 0.002%, at 2^17 0.004%), ``dynamic_end`` the dynamic run's
    final scale."""
    zeros = {1.0: 0.05782, 2.0 ** 15: 0.00050, 2.0 ** 16: 0.00002, 2.0 ** 17: 0.00004}

    def train(data, c, **kw):
        scale = {"none": 1.0, "static": c.loss_scale, "dynamic": dynamic_end}[c.loss_scaling]
        return SimpleNamespace(precision={"loss_scale": scale if c.precision == "fp16" else 1.0, "skipped_steps": 0},
                               model=object(), steps=303, curve={"loss": [0.3575]}, final_hr=0.7654, diverged=False)

    def probe(model, data, cfg, *, scales, batches):
        scales = tuple(sorted(set(scales)))
        top = scales[-1]
        zero = {sc: {"activation": zeros[sc], "parameter": zeros[sc] / 2} for sc in scales}
        under = {sc: {k: max(0.0, zero[sc][k] - zero[top][k]) for k in zero[sc]} for sc in scales}
        return {"zero": zero, "underflow": under}

    monkeypatch.setattr(L05, "train_to_target", train)
    monkeypatch.setattr(L05, "autocast_gradients", probe)
    monkeypatch.setattr(L05, "steps_per_epoch", lambda data, cfg: 303)
    cfg = TrainConfig(global_batch_size=16384, base_lr=0.001, base_batch_size=256, lr_scaling="sqrt")
    return L05.loss_scaling_runs(None, cfg, steps=303, static_scale=2.0 ** 17, device="cpu")


def test_a_run_at_the_reference_scale_or_above_has_no_underflow_measured(monkeypatch):
    """r8b 05-2: cell 19 "with the static scale 2^17, 0.004% zero (0.000% underflow); with the dynamic one (at 2^16 by
    the end), 0.004% zero (0.000% underflow)": the underflow is the zeros at the run's scale less those at the largest
    scale probed, 2^16 or the run's own, so for these two runs it was the run against itself, zero by construction.
    Opposite: a dynamic run that ended at 2^15 (after an overflow) has a larger scale to measure against."""
    rows = _scaling_rows(monkeypatch)
    by = {r["loss scaling"] if r["precision"] == "fp16" else "fp32": r for r in rows}
    assert by["none"]["activation grads underflow"] == 0.05782 - 0.00002
    assert by["static"]["activation grads underflow"] is None and by["dynamic"]["activation grads underflow"] is None
    text = L05.loss_scaling_reading(rows, 6040)
    assert "0.000% underflow" not in text and "without loss scaling 5.782% zero (5.780% underflow)" in text, text
    assert ("with the static scale 2^17, 0.004% zero (no underflow separated: its scale is at least 2^16, the scale "
            "the underflow is measured against)") in text
    table = L05.loss_scaling_table(rows)
    assert "0.000%" not in str(table) and "— (at 2^17: not separated)" in str(table)
    extra = [2 * L05.hr_standard_error(0.7654, 6040), 6040, 2, 16, 10]  # HR@10
    assert disagreements(text.split(" Every run")[0], table, extra=extra) == [], text

    lower = {r["loss scaling"]: r for r in _scaling_rows(monkeypatch, dynamic_end=2.0 ** 15)
             if r["precision"] == "fp16"}
    assert abs(lower["dynamic"]["activation grads underflow"] - (0.00050 - 0.00002)) < 1e-12
    assert "(at 2^15 by the end), 0.050% zero (0.048% underflow)" in L05.loss_scaling_reading(
        _scaling_rows(monkeypatch, dynamic_end=2.0 ** 15), 6040)


def _dp(sps, ttt, batch, ranks, comm=0.0, epochs=0.9406, steps=285):
    return {"samples_per_s": sps, "time_to_target_s": ttt, "epochs_to_target": epochs, "steps_to_target": steps,
            "config": {"global_batch_size": batch, "peak_lr": 0.008}, "comm_time_s": comm, "train_time_s": ttt,
            "final_hr": 0.753}


def test_the_step_fit_is_not_read_where_another_run_of_the_setting_does_not_fit_it():
    """r8b 06-1: cell 29 "Fitted over the 2 sizes: each step costs 13.61 ms whatever the batch ... plus 1.13 us per
    sample, so at 8192 samples per rank 60% of the step does not shrink ... Compute would be 80% of the step from
    about 48,000 samples per rank", from a 2-rank run at 717,900 samples/s (22.8 ms per step), in the reading that
    also says the same setting's second seed ran at efficiency 0.39: 285 steps in 11.6 s, 40.7 ms per step, longer
    than one rank's 32.0 ms at twice the samples per rank, which no cost per step plus cost per sample can make.
    Opposite: a second seed that fits keeps the split."""
    strong = {1: _dp(5.114e5, 9.131, 16384, 1), 2: _dp(7.179e5, 6.505, 16384, 2, comm=2.047)}
    weak = {1: _dp(5.439e5, 7.682, 8192, 1, epochs=0.843, steps=510), 2: strong[2]}
    rows = L06.scaling_rows(strong, weak)
    again = [_dp(16384 * 285 / 11.6, 11.6, 16384, 2)]
    text = L06.scaling_reading(rows, repeats=again)
    assert "efficiency 0.70" in text and "efficiency 0.39" in text, text
    assert "13.61" not in text and "Compute would be" not in text and "48,000" not in text, text
    assert "took 40.7 ms per step, no shorter than one rank's 32 ms at 2x the samples per rank" in text, text
    step1, step2 = 16384 / 5.114e5, 16384 / 7.179e5
    comm2 = 2.047 / 6.505 * step2  # r10c 06-C1: the timed all-reduce is taken out before the fit
    slope = (step1 - (step2 - comm2)) / 8192
    fixed = step2 - comm2 - slope * 8192  # below zero here: read as 0
    extra = [0, 1e3 * fixed, 1e6 * slope, 1e3 * comm2, comm2 / step2, 1e3 * step1,
             1e3 * 16384 / (16384 * 285 / 11.6), 0.39, 2, 8192]
    assert disagreements(text, L06.scaling_table(rows), extra=extra) == [], text

    fits = [_dp(16384 * 285 / 7.0, 7.0, 16384, 2)]  # 24.6 ms per step: shorter than one rank's, the split holds
    kept = L06.scaling_reading(rows, repeats=fits)
    # r11 06-C1: these rows' intercept is below zero (-0.76 ms): the split it gave (read as 0 ms + the all-reduce,
    # "from about 14,000 samples per rank") is no longer read; the second seed that fits adds no "no such split"
    assert "no such split" not in kept and "an intercept below zero (-0.757 ms per step)" in kept, kept


def test_a_level_rung_whose_pace_drift_leaves_out_1_says_whose_spread_decided():
    """r8b 05-3 / 06-2: the ladder (lesson 05 cell 23, lesson 06 cell 31) printed "+warmup ... 2x (±15%): no measurable
    difference: the seeds disagree (paced time to target: +warmup 6.88 s vs +sqrt scaling 10.3 s on average)" and
    "+LAMB ... 0.87x (±7%): no measurable difference": ratios whose ± leaves out 1, then level. The ± is the pace
    drift; the verdict is the seeds' (+sqrt scaling's 7.5 and 19.7 s); "+data parallel ... 0.5x (±63%): no measurable
    difference (... within the seed range 4.2 s)" likewise (0.19-0.82x). Opposite: 0.7x (±63%), whose ± holds 1."""
    from course_lib import ladder

    noise = ("no measurable difference: the seeds disagree (paced time to target: +warmup 6.88 s vs +sqrt scaling "
             "10.3 s on average)")
    cell = ladder._below_cell({"vs_previous": 1.55, "vs_previous_uncertainty": 0.15, "vs_noise": noise,
                               "previous_name": "+sqrt scaling"})
    assert cell == f"2x (±15%) in paced seconds (the ± is the pace drift alone, not the seeds' spread): {noise}", cell
    lamb = ladder._below_cell({"vs_previous": 0.87, "vs_previous_uncertainty": 0.07, "vs_noise": noise})
    assert lamb.startswith("0.87x (±7%) in paced seconds (the ± is the pace drift alone")
    dp = ladder._below_cell({"vs_previous": 0.464, "vs_previous_uncertainty": 0.63, "vs_noise": noise})
    assert dp.startswith("0.5x (±63%) in paced seconds (the ± is the pace drift alone"), dp
    wide = ladder._below_cell({"vs_previous": 0.7, "vs_previous_uncertainty": 0.63, "vs_noise": noise})
    assert wide == f"0.7x (±63%): {noise}"


def test_the_peak_step_line_multiplies_the_factors_it_prints():
    """r8b 07-1 (S): cell 19 "at the peak lr (step 9): LAMB lr 2.83e-02 x median ratio 0.047 = 1.34e-03 per element",
    where 2.83e-02 x 0.047 is 1.33e-03: the ratio (0.0473) was rounded only for the print. Opposite: a ratio that
    rounds cleanly gives the same product either way."""
    import torch

    from course_lib.lessons import l07_bert_lamb as L07

    lrs = [0.0283 * min(1.0, s / 8) for s in range(40)]  # 8 warmup steps, then flat: the peak at step 9
    lamb = {"curves": {"lr": lrs}}
    ratios = torch.full((19, 40), 0.0473)
    ratios[0] = 0.02
    line = L07.peak_step_line(lamb, 1.41e-3, {"table": ratios})
    assert line == ("at the peak lr (step 9): LAMB lr 2.83e-02 x median ratio 0.0473 = 1.34e-03 per element; "
                    "Adam's best peak lr 1.41e-03"), line
    clean = L07.peak_step_line(lamb, 1.41e-3, {"table": torch.full((19, 40), 0.05)})
    assert "x median ratio 0.05 = 1.42e-03 per element" in clean, clean


def test_one_size_off_the_latency_line_is_named_in_the_singular():
    """r8b 06-S: cell 18 "not a flat line: 4 B (251 us) lie off the median 1.59e+03 us by more than their blocks'
    spread" for one size (this run's sweep, block spreads from its table). Opposite: three sizes keep the plural."""
    from test_data_parallel_study import _sweep

    sizes = [4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
    times = [251, 749.5, 2029, 1592, 2151, 1785, 1030, 1221, 2579, 848.7, 4168, 13740, 69470]
    spreads = [665.4, 1748, 1966, 1739, 1127, 3144, 2362, 1961, 2782, 3053, 2499, 14540, 30170]
    text = L06.allreduce_reading(_sweep(times, spreads, sizes=sizes))
    assert "4 B (251 us) lies off the median 1.59e+03 us by more than its blocks' spread" in text, text
    three = L06.allreduce_reading(_sweep([554.7, 314.2, 875.0, 219.2], [30, 30, 30, 30], sizes=[4, 16, 256, 65536]))
    assert "64 KiB (219 us) lie off the median 555 us by more than their blocks' spread" in three, three
