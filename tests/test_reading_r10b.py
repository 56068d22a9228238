"""Readings fixed after the tenth full run (2026-12-03, head 30428d3, #37, read by r10b): each test feeds that run's
numbers (lessons 02-04) and an opposite case."""

import math

from course_lib.lessons import l02_linear_scaling as L02
from course_lib.metrics import hr_standard_error
from course_lib.sweeps import sweep_rows, sweep_table
from course_lib.train import TrainConfig
from course_lib.train.ncf import TrainResult
from test_reading_agreement import disagreements

USERS = 6040


def _run(batch, lr, test_hr, train_hr, epochs, steps=None, ttt=None):
    """A lesson-02 sweep run: reached the target when ``ttt`` is given (in ``steps`` steps)."""
    cfg = TrainConfig(global_batch_size=batch, base_lr=lr)
    return TrainResult(config=cfg.to_dict(), dataset="synthetic-ml-1m", data_source="", synthetic=True, device="cpu",
                       world_size=1, target_hr=0.75, time_to_target_s=ttt, steps_to_target=steps if ttt else None,
                       epochs_to_target=epochs if ttt else None, epochs=epochs, steps=steps or 1, samples=1,
                       train_time_s=ttt or 30.0, eval_time_s=1.0, samples_per_s=4e5, phase_time_s={},
                       final_hr=test_hr, final_train_hr=train_hr)


def _sweep(linear_reached_all=False):
    """The tenth run's lesson 02 sweep (cell 11's table, cell 15's gap table): the baseline once per rule, then the
    linear and the sqrt rule at 1024-65536. ``linear_reached_all``: the opposite case, the linear rule's two largest
    batches reaching the target at the same HR@10 and gaps."""
    base = _run(256, 1e-3, 0.7563, 0.7997, 0.9001, 17406, 94.41)
    big = dict(steps=909, ttt=32.9) if linear_reached_all else {}
    top = dict(steps=228, ttt=30.6) if linear_reached_all else {}
    linear = [_run(1024, 4e-3, 0.7517, 0.8031, 0.9009, 4356, 32.88),
              _run(4096, 1.6e-2, 0.75246, 0.79254, 1.241, 1500, 18.77),
              _run(16384, 6.4e-2, 0.6273, 0.6619, 3.0, **big), _run(65536, 0.256, 0.4184, 0.4295, 3.0, **top)]
    sqrt = [_run(1024, 2e-3, 0.7558, 0.8109, 0.9009, 4356, 19.79),
            _run(4096, 4e-3, 0.7520, 0.8056, 0.8437, 1020, 11.18),
            _run(16384, 8e-3, 0.7525, 0.8015, 0.9406, 285, 11.48),
            _run(65536, 1.6e-2, 0.75696, 0.80464, 1.316, 100, 14.62)]
    return [base, base] + linear + sqrt, ["linear", "sqrt"] + ["linear"] * 4 + ["sqrt"] * 4


def _noise(a, b):
    se = lambda r: math.hypot(hr_standard_error(r.final_hr, USERS), hr_standard_error(r.final_train_hr, USERS))  # noqa: E731
    return 2 * math.hypot(se(a), se(b))


def test_lesson_02s_gap_reading_compares_only_runs_that_reached_the_target():
    # the run: "linear: gap +0.0434 at batch 256 (0.90 epochs) -> +0.0111 at batch 65536 (3.00 epochs): it shrank by
    # 0.0323" over a 65536 run that missed the target (test HR@10 0.4184, train side 0.4295), 16384 likewise (0.6273)
    results, labels = _sweep()
    text = L02.gap_reading(results, labels, users=USERS)
    linear, sqrt = text.splitlines()
    assert "shrank" not in linear, linear
    assert linear.startswith("linear: gap +0.0434 at batch 256 (0.90 epochs) -> +0.0401 at batch 4096 (1.24 epochs, "
                             "the largest that reached the target): no measurable change"), linear
    assert ("batch 16384, 65536 missed the target (test HR@10 0.6273, 0.4184): their gaps (+0.0346, +0.0111) are those "
            "of models that learned less") in linear, linear
    assert sqrt.startswith("sqrt: gap +0.0434 at batch 256 (0.90 epochs) -> +0.0477 at batch 65536 (1.32 epochs): no "
                           "measurable change") and "missed" not in sqrt, sqrt
    # every number is a cell of the gap table printed under it, or the noise it is read against
    table = L02.gap_table(results[1:], labels[1:], baseline=results[0])
    extra = [_noise(results[0], results[3]), _noise(results[0], results[-1])]
    assert disagreements(text, table, extra=extra) == [], text
    # opposite: had the linear rule's largest batches reached the target, the same gaps compare end to end
    results, labels = _sweep(linear_reached_all=True)
    linear = L02.gap_reading(results, labels, users=USERS).splitlines()[0]
    assert linear.endswith("-> +0.0111 at batch 65536 (3.00 epochs): it shrank by 0.0323"), linear
    assert "missed" not in linear


def test_lesson_02_says_up_to_which_batch_each_rule_reached_the_target():
    # the run: linear missed the target at 16384 and 65536 (final HR@10 0.6273, 0.4184 after 3 epochs), sqrt reached
    # it at every batch; the lesson's "Predict first" asks exactly that, and no line said it
    results, labels = _sweep()
    rows = sweep_rows(results, labels)
    text = L02.rule_reading(rows)
    assert text.splitlines() == [
        "linear: reached the target up to batch 4096, missed it from batch 16384 on (batch 16384: final HR@10 0.6273 "
        "after 3 epochs; batch 65536: final HR@10 0.4184 after 3 epochs; none diverged)",
        "sqrt: reached the target at every batch measured, 256 to 65536",
        "at the largest batch, 65536: sqrt reached the target, linear did not"], text
    assert disagreements(text, sweep_table(results, labels)) == [], text
    # opposite: every run reached the target
    results, labels = _sweep(linear_reached_all=True)
    text = L02.rule_reading(sweep_rows(results, labels))
    assert text.splitlines()[0] == "linear: reached the target at every batch measured, 256 to 65536", text
    assert text.splitlines()[-1] == "at the largest batch, 65536: every rule reached the target", text
    # and a run that diverged is said to have diverged
    gone = _run(65536, 0.256, 0.1, 0.1, 0.5)
    gone.diverged = True
    text = L02.rule_reading(sweep_rows([results[0], gone], ["linear", "linear"]))
    assert "missed it from batch 65536 on (batch 65536: diverged)" in text, text


def test_lesson_03s_takeaway_says_the_seeds_disagree_without_nested_parentheses():
    # the run: "Here warmup made no measurable difference (the seeds disagree (time to target: linear warmup, 19 steps
    # 12.5 s vs no warmup 13.7 s on average)): without it nothing blew up (...)", seeds 11.47 / 13.54 with the 19-step
    # warmup, 15.06 / 12.35 without
    from course_lib.lessons import l03_warmup as L03
    from test_reading_agreement import _decided

    rung = "linear warmup, 38 steps"  # _decided's label; the run's rung was the 19-step warmup
    text = L03.takeaway(_decided([11.47, 13.54], [15.06, 12.35], (0.5878, 0.5801), (0.5081, 0.5054)), rung)
    assert text.startswith("Here warmup made no measurable difference: the seeds disagree (time to target: "
                           "linear warmup, 38 steps 12.5 s vs no warmup 13.7 s on average); without it nothing blew up "
                           "(loss at the first evaluation: 0.505 to 0.508 over 2 seeds without warmup, 0.580 to 0.588 "
                           "over 2 seeds with it)"), text
    assert "))" not in text
    # opposite: a verdict within the seed range keeps its one pair of parentheses
    within = L03.takeaway(_decided([9.764, 10.87], [14.51, 11.43]), rung)
    assert within.startswith("Here warmup made no measurable difference (time to target: linear warmup, 38 steps "
                             "10.3 s vs no warmup 13 s, within the seed range 3.1 s): without it nothing blew up"), \
        within


def _lars_history(peaks=True):
    """The tenth run's LARS lr 8 run at batch 32768 (lesson 04 cell 12): first, median and last of each layer as its
    table printed them, sampled every 2 steps to step 410; with ``peaks`` the spikes its plot showed near step 32
    (read off the log axis: mlp.0.weight near 4e4, mlp_item.weight near 3e3, mlp_user.weight near 1e3, mlp.2.weight
    near 30, out.weight near 1)."""
    steps = list(range(0, 412, 2))
    table = {"gmf_item.weight": (154.3, 52.97, 19.01, None), "gmf_user.weight": (196.3, 115.9, 37.04, None),
             "mlp.0.weight": (13.84, 36.98, 10.04, 39000.0), "mlp.2.weight": (1.533, 1.184, 0.3746, 30.0),
             "mlp_item.weight": (3.372, 1.507, 3.49, 3120.0), "mlp_user.weight": (4.157, 4.009, 5.423, 1000.0),
             "out.weight": (0.1429, 0.05804, 0.1055, 1.02)}
    ratios = {}
    for name, (first, median, last, peak) in table.items():
        v = [first] + [median] * (len(steps) - 2) + [last]
        if peaks and peak is not None:
            v[16] = peak  # step 32
        ratios[name] = v
    return {"step": steps, "trust_ratio": ratios}


def test_lesson_04s_trust_ratio_table_and_reading_show_where_a_gradient_nearly_vanished():
    # the run: "no layer's trust ratio sat at exactly 1 (...): every adapted layer kept a gradient to the end" over a
    # table of first / median / last only, while the plot above showed mlp.0.weight's ratio near 4e4 at step 32
    # (median 36.98): its gradient ~1000x below its usual size there
    from course_lib.lessons import l04_lars as L04

    history = _lars_history()
    table = L04.trust_ratio_table(history)
    row = {r["layer"]: r for r in table.rows}["mlp.0.weight"]
    assert (row["peak"], row["peak at step"], row["median"]) == (39000.0, 32, 36.98), row
    said = L04.dead_layers_reading(history, lr=8.0)
    assert said.startswith("no layer's trust ratio sat at exactly 1"), said
    assert ("peaked at 100x its median or more for mlp.0.weight 3.9e+04 at step 32 (median 36.98); mlp_item.weight "
            "3120 at step 32 (median 1.507); mlp_user.weight 1000 at step 32 (median 4.009): the ratio is "
            "||w|| / ||g||, so there the layer's gradient nearly vanished, and came back") in said, said
    assert "mlp.2.weight" not in said and "out.weight" not in said  # 25x and 18x their medians: below the factor
    # disagreements reads no e-notation: "3.9e+04" is the peak cell as the table prints it (cell_text(39000.0))
    assert disagreements(said.replace("3.9e+04", "39000"), table, extra=[L04.SPIKE_FACTOR, 1]) == [], said
    # opposite: the same run without the spikes says only that every layer kept a gradient
    flat = L04.dead_layers_reading(_lars_history(peaks=False), lr=8.0)
    assert flat == ("no layer's trust ratio sat at exactly 1 (the zero-gradient fallback): every adapted layer kept a "
                    "gradient to the end"), flat


def _rows_measured(two_levels=True):
    """Lesson 04's row measurement as the tenth run's plot showed it: at B=256 the 248 touched item rows seen once
    (240) or twice (8), their log gradient norm spread by ±0.25 about a slope of 0.73; at B=32768 rows seen 1-37
    times about a slope of 0.64. ``two_levels=False``: the opposite case, the B=256 rows spread over 1-8 counts."""
    import torch

    from test_layerwise import _measured

    def rows(counts, b, slope, spread):
        freq = torch.tensor([c / b for c in counts])
        sign = torch.tensor([(-1.0) ** i for i in range(len(counts))])
        return freq, 6e-4 * torch.tensor([float(c) for c in counts]) ** slope * torch.exp(spread * sign)

    small = [1] * 240 + [2] * 8 if two_levels else [c for c in range(1, 9) for _ in range(31)]
    big = [c for c in range(1, 38) for _ in range(60)]
    m = _measured({"gmf_user.weight": 11.25, "gmf_item.weight": 11.39, "mlp.2.weight": 0.91, "out.weight": 0.92},
                  lo=256, hi=32768)
    m["rows"] = {256: rows(small, 256, 0.73, 0.25), 32768: rows(big, 32768, 0.64, 0.25)}
    return m


def test_lesson_04s_frequency_slopes_come_with_their_standard_error():
    # the run: "log-log slope 0.73 at B=256, 0.64 at B=32768; 0.5-1 means it grows" where at B=256 every touched row
    # was seen once or twice (the plot's two columns): a slope from two frequencies, quoted with no error
    from course_lib.lessons import l04_lars as L04
    from course_lib.metrics import slope_standard_error

    assert abs(slope_standard_error([0, 1, 2, 3], [0, 1, 1, 3]) - math.sqrt(0.35 / 5)) < 1e-12  # textbook OLS
    assert slope_standard_error([1, 1, 1], [1, 2, 3]) is None and slope_standard_error([0, 1], [0, 1]) is None
    measured = _rows_measured()
    slopes, errors = L04.frequency_slope(measured), L04.frequency_slope_errors(measured)
    assert round(slopes[256], 2) == 0.73 and round(slopes[32768], 2) == 0.64, slopes
    assert round(errors[256], 2) == 0.13 and errors[32768] < 0.01, errors
    text = L04.reading(measured)
    assert ("grows with its frequency in the batch (log-log slope 0.73 ± 0.13 at B=256, 0.64 ± 0.01 at B=32768; ± is "
            "one standard error of the fit; 0.5-1 means it grows)") in text, text
    # opposite: the same slope over rows seen 1-8 times is known far better
    wide = L04.frequency_slope_errors(_rows_measured(two_levels=False))
    assert wide[256] < errors[256] / 3, (wide, errors)


def test_the_ladder_gives_each_seeds_steps_where_they_differ(tmp_path):
    # the run: "+warmup | ... | 96 | 12.5 (seeds: 11.5, 13.5)" over seeds of 95 and 96 steps (lesson 03's deciding
    # table), "+LAMB | ... | 386 | 32.1 (seeds: 35.8, 28.5)" over 392 and 380; '+sqrt scaling' ran 285 steps at both
    from course_lib import ladder
    from test_reading_r8a import _rung

    base = dict(global_batch_size=256, base_lr=1e-3)
    sqrt = dict(global_batch_size=16384, base_lr=1e-3, base_batch_size=256, lr_scaling="sqrt")
    warm = dict(global_batch_size=65536, base_lr=1e-3, base_batch_size=256, lr_scaling="sqrt", warmup_steps=19)
    _rung(tmp_path, "baseline", [(94.41, 17406)], 47_606, 47_606, base)
    _rung(tmp_path, "+linear scaling", [(11.48, 285), (7.541, 285)], 57_837, 55_000, sqrt)
    cfg = TrainConfig(**warm).to_dict()
    ladder.save_ladder_row("+warmup", time_to_target_s=12.505, final_hr=0.7522, target_hr=0.75,
                           dataset="synthetic-ml-1m", steps_to_target=95.5,  # as save_ladder_result: the seeds' mean
                           seed_runs=[{"seed": 0, "time_to_target_s": 11.47, "steps_to_target": 95},
                                      {"seed": 1, "time_to_target_s": 13.54, "steps_to_target": 96}],
                           pace={"before": 46_175, "after": 52_467, "rate": 49_321}, config=cfg, carry=cfg,
                           directory=tmp_path)
    rows = {r["step"]: r for r in ladder.ladder_table(tmp_path).rows}
    assert rows["+warmup"]["steps to target"] == "96 (seeds: 95, 96)", rows["+warmup"]
    assert rows["+warmup"]["time to target (s)"] == "12.5 (seeds: 11.5, 13.5)"
    # opposite: seeds that took the same steps, and a rung of one seed, keep the one number
    assert rows["+sqrt scaling"]["steps to target"] == 285 and rows["baseline"]["steps to target"] == 17406


def test_lesson_04_says_which_noisy_layers_are_mostly_signal_at_the_large_batch():
    # the run: "mlp_user.weight, mlp_item.weight fell 6.72-11.39x (sqrt(128) = 11.3): mostly noise" (with the gmf
    # tables) and "mlp.0.weight fell 2.39x: between the two", while by ||g||² = S + N / B a fall of 6.72x over 128x
    # the batch leaves the signal (128 - 6.72²) / 127 = 65 % of ||g||² at B=32768, the race's batch
    from course_lib.lessons import l04_lars as L04
    from test_reading_r7a import RUN_NORMS, _layers, _rows

    run = {"layers": _layers(RUN_NORMS), "rows": _rows({256: 0.7302, 32768: 0.6446}, {256: -3.342, 32768: -5.497})}
    text = L04.reading(run)
    assert "fell 6.72-11.39x (sqrt(128) = 11.3): mostly noise at B=256, which a mean" in text, text
    assert ("Read as ||g||² = signal + noise / B (one batch at each size), a fall short of sqrt(128) puts the signal's "
            "share of ||g||² at B=32768 at 60% for mlp_item.weight, 65% for mlp_user.weight, 96% for mlp.0.weight: "
            "mostly noise at B=256, these layers' gradients are mostly signal at B=32768.") in text, text
    assert "gmf_user.weight, 6" not in text.splitlines()[2]  # the gmf tables fell the full sqrt(128): noise at both
    # the shares follow from the table's "fell by" cells by the rule signal_share names
    table = L04.layer_scaling_table(run)
    falls = [float(r["fell by"].rstrip("x")) for r in table.rows]
    extra = [L04.signal_share(f, 128) for f in falls] + [128, 0.5, 1, 256, 32768, 2]  # 2: the square in ||g||²
    line = text.splitlines()[2]
    assert disagreements(line, table, extra=extra) == [], line
    assert abs(L04.signal_share(6.72, 128) - (128 - 6.72 ** 2) / 127) < 1e-12 and L04.signal_share(12.0, 128) == 0.0
    # opposite: layers that fell the full sqrt(k) or stayed put have crossed nothing, and no such line is printed
    from test_layerwise import _measured

    flat = L04.reading(_measured({"gmf_user.weight": 22.6, "gmf_item.weight": 22.9, "mlp.2.weight": 0.92,
                                  "out.weight": 0.93}))
    assert "Read as ||g||²" not in flat and "mostly noise at B=256" in flat, flat
