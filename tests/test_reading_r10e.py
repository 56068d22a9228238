"""#37, read r10e of the tenth full run (20261203-073331, head 30428d3): lesson 11's readings against the numbers
that run printed, and an opposite case each."""

from types import SimpleNamespace

from course_lib.lessons import l11_batch_size_science as L11
from test_reading_agreement import disagreements

# --------------------------------------------------------------------------- 11-H2: the sharpness verdict and the gap

TENTH_SHARP = ({"run": "small batch", "batch": 4096, "lr": 0.004, "steps": 1208, "epochs": 1.0, "reached": True,
                "top eigenvalue": 1.536, "Hessian trace": 6.858, "train loss": 0.3095, "train HR@10": 0.8212,
                "test HR@10": 0.7709, "gap": 0.05033},
               {"run": "large batch", "batch": 65536, "lr": 0.016, "steps": 114, "epochs": 1.5, "reached": True,
                "top eigenvalue": 1.948, "Hessian trace": 5.539, "train loss": 0.3099, "train HR@10": 0.8215,
                "test HR@10": 0.7752, "gap": 0.04636})


def test_the_sharpness_verdict_reads_the_gap_where_the_two_measures_of_sharpness_disagree():
    """r10e 11-H2: "Not decided: by its top eigenvalue batch 65,536 ended sharper ... by the Hessian trace flatter
    (5.54 vs 6.86); ... so there is no sharpness to set against the gap", with nothing said of the gaps, 0.04636
    against 0.05033: the same within the verdict's 0.005, so the large batch did not generalize worse. Opposite: a
    large batch whose gap is wider says so, beyond 0.005."""
    small, large = TENTH_SHARP
    said = L11.sharpness_verdict(small, large)
    assert said.startswith("Not decided:"), said
    assert ("The gap, read alone: batch 65,536's was the same (+0.046 vs +0.050, within 0.005): the large batch did "
            "not generalize worse here.") in said, said
    assert disagreements(said, L11.sharpness_table([small, large]), extra=(0.005,)) == [], said
    wider = L11.sharpness_verdict(small, {**large, "gap": 0.08})
    assert "batch 65,536's was wider (+0.080 vs +0.050, beyond 0.005)." in wider, wider
    assert "did not generalize worse" not in wider


# --------------------------------------------------------------------------- 11-H4: synchronized BN's factor of 2

TENTH_BN = {"local BN": ((0.858, 0.879, 0.906, 0.938), (6.3, 5.3, 4.7, 4.9)),
            "synchronized BN": ((0.857, 0.88, 0.918, 0.937), (14.0, 15.1, 13.8, 13.7)),
            "local BN, recomputed stats": ((0.88, 0.934, 0.961, 0.967), (4.5, 4.7, 5.1, 4.2)),
            "weight norm (no BN)": ((0.733, 0.826, 0.863, 0.921), (2.5, 2.3, 3.6, 4.3))}


def _bn_rows(table, ranks=2, batches=(4, 16, 64, 256)):
    return [{"per_rank_batch": b, "global_batch": ranks * b, "variant": v, "test_accuracy": acc[i], "step_ms": ms[i]}
            for v, (acc, ms) in table.items() for i, b in enumerate(batches)]


def _wn_gaps(rows):
    """f12i 11-H4: bn_verdict quotes weight norm's gaps to local BN at every per-rank batch (cells rounded)."""
    acc = {(r["variant"], r["per_rank_batch"]): round(r["test_accuracy"], 3) for r in rows}
    return [acc[("local BN", b)] - acc[("weight norm (no BN)", b)] for v, b in acc if v == "local BN"
            and ("weight norm (no BN)", b) in acc]


def test_the_bn_verdict_says_what_synchronizing_two_ranks_can_rule_out():
    """r10e 11-H4: "Synchronized statistics did not help (0.857): statistics over both ranks' samples did no better
    than each rank's own 4, so their noise was not what cost this": on 2 ranks the synchronized statistics are over
    twice the samples, their noise sqrt(2) smaller, which rules out what a doubling recovers, not the noise. The
    factor follows the ranks (4 ranks: sqrt(4), 4x); opposite: synchronized statistics that recover accuracy say so."""
    rows = _bn_rows(TENTH_BN)
    said = L11.bn_verdict(rows)
    assert "so their noise was not what cost this" not in said, said
    assert ("statistics over both ranks' samples did no better than each rank's own 4; their noise is only sqrt(2) "
            "smaller than one rank's, so this rules out what 2x the samples would recover, not the statistics' noise "
            "itself.") in said, said
    at = {r["variant"]: r["test_accuracy"] for r in rows if r["per_rank_batch"] == 4}
    big = {r["variant"]: r["test_accuracy"] for r in rows if r["per_rank_batch"] == 256}
    extra = (at["local BN, recomputed stats"] - at["local BN"], big["local BN, recomputed stats"] - big["local BN"],
             0.01, 4, 256, *_wn_gaps(rows))  # f12i 11-H4: weight norm's gaps to local BN
    assert disagreements(said, L11.bn_table(rows), extra=extra) == [], said
    four = L11.bn_verdict(_bn_rows(TENTH_BN, ranks=4))
    assert "only sqrt(4) smaller than one rank's, so this rules out what 4x the samples would recover" in four, four
    helped = {**TENTH_BN, "synchronized BN": ((0.878,) + TENTH_BN["synchronized BN"][0][1:],
                                              TENTH_BN["synchronized BN"][1])}
    other = L11.bn_verdict(_bn_rows(helped))
    assert "Synchronized statistics recovered 0.020" in other and "sqrt(2)" not in other, other


# --------------------------------------------------------------------------- 11-H1: the adaptive batch's resolution

def _adaptive(run, batches, steps, samples, steps_res, samples_res):
    return {"run": run, "reached": True, "steps_to_target": steps, "samples_to_target": samples, "batches": batches,
            "final_hr": 0.77, "steps": steps, "samples": samples, "steps_resolution": steps_res,
            "samples_resolution": samples_res}


TENTH_ADAPTIVE = [_adaptive("fixed batch 4,096", [4096], 1208, 4_947_968, 302, 1_236_992),
                  _adaptive("batch x 4 at epochs (1,)", [4096], 1208, 4_947_968, 302, 1_236_992),
                  _adaptive("batch = B_simple", [4096, 8192, 4096], 906, 4_947_968, 302, 1_236_992)]


def test_the_adaptive_verdict_reads_its_ratios_at_the_evaluation_spacing():
    """r10e 11-H1: "Against fixed batch 4,096: 0.75x the steps, 1.00x the samples" and "a tie ... (4,947,968 each)"
    for runs evaluated every 0.25 epoch (302 steps, 1,236,992 samples at 4,096) that each first met the target at
    their 1.00-epoch point: 906 steps in (604, 906] against 1,208 in (906, 1,208] (fewer, decided; 0.50-1.00x), the
    samples within the spacing (0.75-1.33x, not decided). Opposite: counts far apart beyond dense spacings decide
    both; rows without resolutions read as before."""
    said = L11.adaptive_verdict(TENTH_ADAPTIVE)
    assert ("Against fixed batch 4,096: 0.75x the steps (0.50x-1.00x: fewer, decided), 1.00x the samples "
            "(0.75x-1.33x: not decided at the evaluation spacing); each count is known to its last evaluation "
            "interval (302 and 302 steps, 1,236,992 and 1,236,992 samples).") in said, said
    assert said.endswith("The noise scale bought fewer steps; what they cost in samples lies within the evaluation "
                         "spacing, so it is not measured here."), said
    table = L11.adaptive_table(TENTH_ADAPTIVE)
    assert "resolution (steps)" in table.columns and "resolution (samples)" in table.columns
    assert disagreements(said, table) == [], said

    dense = [_adaptive("fixed batch 4,096", [4096], 1020, 4_176_293, 15, 61_440),
             _adaptive("batch = B_simple", [4096, 16384], 600, 6_000_000, 15, 61_440)]
    costly = L11.adaptive_verdict(dense)
    assert "0.59x the steps (0.57x-0.60x: fewer, decided), 1.44x the samples (1.42x-1.46x: more, decided)" in costly
    assert costly.endswith("the batch outgrew what the noise justified at some point."), costly
    unresolved = [{k: v for k, v in r.items() if not k.endswith("_resolution")} for r in TENTH_ADAPTIVE]
    old = L11.adaptive_verdict(unresolved)
    assert "Against fixed batch 4,096: 0.75x the steps, 1.00x the samples." in old, old
    assert "resolution (steps)" not in L11.adaptive_table(unresolved).columns


def test_samples_resolution_is_the_last_evaluation_interval_in_samples():
    """The samples between the evaluation that first met the target and the one before, at the run's samples per
    epoch (the tenth run's fixed batch: 0.75 -> 1.00 epoch, 4,947,968 samples per epoch)."""
    r = SimpleNamespace(reached=True, epochs=1.0, samples=4_947_968, steps_to_target=1208,
                        curve={"step": [0, 302, 604, 906, 1208], "epoch": [0.0, 0.25, 0.5, 0.75, 1.0]})
    assert L11.samples_resolution(r) == 1_236_992
    assert L11.samples_resolution(SimpleNamespace(reached=False, epochs=1.0, samples=1, steps_to_target=None,
                                                  curve={})) is None


# --------------------------------------------------------------------------- 11-H3: the scaling runs' steps

TENTH_NEUMF = [{"fraction": f, "size": n, "metric": 1 - e, "error": e}
               for f, n, e in ((1 / 32, 36_803, 0.6258), (1 / 16, 67_566, 0.6224), (1 / 8, 129_075, 0.5737),
                               (1 / 4, 252_086, 0.4195), (1 / 2, 498_056, 0.3551))]
TENTH_HELD = {"fraction": 1.0, "size": 990_027, "metric": 0.6412, "error": 0.3588}
SETTING = {"global_batch_size": 4096, "peak_lr": 0.004, "optimizer": "adam", "seed": 0}
NOISE_RUN = SimpleNamespace(config=SETTING, curve={"step": [0, 302, 604, 906, 1208],
                                                   "hr": [0.1, 0.4129, 0.6399, 0.7343, 0.7709]})


def test_the_scaling_verdict_says_the_steps_held_the_runs_where_section_1_trained_longer():
    """r10e 11-H3: "Something other than the data limits these runs, which this lesson does not separate: the same
    steps are fewer passes over a larger set, and the model's size is fixed" under a whole-set run of 605 steps at
    HR@10 0.6412, while section 1's run, the same model and setting on the same set, had 0.6399 at step 604 and
    0.7709 by step 1,208. Opposite: a run in another setting, or one that got no further, leaves the old sentence."""
    pred = L11.scaling_prediction(TENTH_NEUMF, TENTH_HELD)
    longer = L11.longer_run(NOISE_RUN, SimpleNamespace(**SETTING), 605)
    assert longer == {"label": "section 1's run", "scaling_steps": 605, "steps": 604, "metric": 0.6399,
                      "best_steps": 1208, "best": 0.7709}
    said = L11.scaling_verdict(pred, longer=longer)
    assert "which this lesson does not separate" not in said, said
    assert ("Section 1's run, the same model and setting on the whole set, had HR@10 0.6399 at step 604 (the held-out "
            "size's run: 0.6412 in 605 steps) and reached 0.7709 by step 1,208: with more steps the same model went "
            "well past this error, so the steps held these runs, not the model's size or the data") in said, said
    derived = [L11.PREDICTION_GOAL, L11.FLAT_EXPONENT, pred["relative_error"], pred["size_for_measured"],
               pred["size_for_measured"] / pred["size"], L11.no_change_error(pred),
               pred["size"] / pred["largest_fitted"], 604, 605, 0.6399, 1208, 0.7709, 10]  # longer_run's; "HR@10"
    assert disagreements(said, L11.scaling_table(TENTH_NEUMF, pred, TENTH_HELD), extra=derived) == [], said

    assert L11.longer_run(NOISE_RUN, SimpleNamespace(**{**SETTING, "peak_lr": 0.008}), 605) is None
    assert L11.longer_run(NOISE_RUN, SimpleNamespace(**SETTING), 1208) is None
    assert "which this lesson does not separate" in L11.scaling_verdict(pred)
    stalled = SimpleNamespace(config=SETTING, curve={"step": [0, 604, 1208], "hr": [0.1, 0.6399, 0.6450]})
    flat = L11.scaling_verdict(pred, longer=L11.longer_run(stalled, SimpleNamespace(**SETTING), 605))
    assert "which this lesson does not separate" in flat and "the steps held" not in flat, flat


# --------------------------------------------------------------------------- 11-H5: BERT's two-point B_crit

TENTH_BERT_ROWS = [{"batch size": 32, "steps to target": 36, "resolution (steps)": 4},
                   {"batch size": 256, "steps to target": 22, "resolution (steps)": 2}]


def test_the_bert_verdict_reads_the_two_point_critical_batch_at_lesson_07s_evaluation_spacing():
    """r10e 11-H5: "The two points give B_crit = 25.6: B_simple is 3.37x it (1.51-5.24x within two standard
    errors)" where lesson 07 evaluated every 4 steps at batch 32 (36 steps: in (32, 36]) and every 2 at 256 (22: in
    (20, 22]): B_crit lies in 17.8-33.0, B_simple / B_crit in 1.17-7.54x. Opposite: counts far apart at a fine
    spacing still decide (outside the factor 3); rows with no resolution read as before."""
    said = L11.bert_noise_verdict(86.35293614353206, TENTH_BERT_ROWS, stderr=23.867852239558406)
    assert ("The two points give B_crit = 25.6 (17.8-33.0 with each count known to its evaluation spacing, 4 and 2 "
            "steps): B_simple is 3.37x it (1.17x-7.54x within two standard errors and that spacing), not decided: the "
            "factor 3 boundary lies inside the errors of B_simple and of the two counts.") in said, said
    table = L11.bert_steps_table(TENTH_BERT_ROWS, 4.59)
    assert "resolution (steps)" in table.columns
    lo, hi = L11._two_point_range(TENTH_BERT_ROWS)
    b_simple, err = 86.35293614353206, 23.867852239558406
    # the prediction and the two-point B_crit (bert_noise_verdict's own arithmetic), its range over the counts'
    # resolution, B_simple over them within two standard errors, the factor 3 and the sequences
    extra = ((1 + b_simple / 32) / (1 + b_simple / 256), L11.two_point_critical_batch(TENTH_BERT_ROWS), lo, hi,
             b_simple / L11.two_point_critical_batch(TENTH_BERT_ROWS), (b_simple - 2 * err) / hi,
             (b_simple + 2 * err) / lo, 3, b_simple, 8)
    assert disagreements(said, table, extra=extra) == [], said

    fine = [{"batch size": 32, "steps to target": 400, "resolution (steps)": 1},
            {"batch size": 256, "steps to target": 60, "resolution (steps)": 1}]
    far = L11.bert_noise_verdict(5000.0, fine, stderr=100.0)
    assert "outside the factor 3" in far and "with each count known to its evaluation spacing, 1 and 1 steps" in far
    bare = [{k: v for k, v in r.items() if k != "resolution (steps)"} for r in TENTH_BERT_ROWS]
    old = L11.bert_noise_verdict(86.35293614353206, bare, stderr=23.867852239558406)
    assert "B_simple is 3.37x it (1.51-5.24x within two standard errors), not decided" in old, old


def test_curve_resolution_reads_the_interval_before_the_count():
    """Lesson 07's saved curves: [step, loss] every 4 steps at batch 32 and every 2 at 256 in the tenth run."""
    curve32 = [[s, 8.0 - s / 10] for s in range(0, 81, 4)]
    curve256 = [[s, 8.0 - s / 5] for s in range(0, 41, 2)]
    assert L11.curve_resolution(curve32, 36) == 4 and L11.curve_resolution(curve256, 22) == 2
    assert L11.curve_resolution(None, 36) is None and L11.curve_resolution(curve32, 37) is None
    plan = SimpleNamespace(bert_model="mini", bert_seq_len=64, bert_vocab_size=4096, bert_large_batch_factor=8)
    saved = {"profile": "full", "model": "mini", "seq_len": 64, "target_loss": 4.59,
             "runs": [{"label": "adam b=32", "global_batch_size": 32, "steps": 80, "steps_to_loss": 36,
                       "eval_loss_curve": curve32},
                      {"label": "adam b=256 (best lr)", "global_batch_size": 256, "steps": 40, "steps_to_loss": 22,
                       "eval_loss_curve": curve256}]}
    assert L11.bert_setting(saved, "full", plan)["rows"] == TENTH_BERT_ROWS


def test_the_law_prints_its_exponent_with_one_sign():
    """r10e 11-S3 (the smoke copy of the tenth run): "err(N) = 6.7 N^--0.001 + 0.000" for an exponent of -0.001, in
    the verdict and the table's title. Opposite: the full run's 0.236 still reads "N^-0.236"."""
    rising = {"fit": {"a": 6.7, "b": -0.001, "c": 0.0}, "size": 1266, "predicted_error": 6.7353,
              "measured_error": 6.7174, "relative_error": -0.0027, "size_for_measured": None, "largest_fitted": 633,
              "largest_fitted_error": 6.73}
    said = L11.scaling_verdict(rising, unit="sequences")
    assert "err(N) = 6.7 N^+0.001 + 0.000." in said and "--" not in said, said
    rows = [{"fraction": 0.5, "size": 633, "metric": 6.73, "error": 6.73}]
    assert "N^+0.001" in L11.scaling_table(rows, rising).title
    pred = L11.scaling_prediction(TENTH_NEUMF, TENTH_HELD)
    assert "err(N) = 8.15 N^-0.236 + 0.000." in L11.scaling_verdict(pred)


# --------------------------------------------------------------------------- 11-H6: the Hessian trace's error

def test_the_sharpness_verdict_reads_the_trace_within_its_standard_error():
    """r10e 11-H6: "by the Hessian trace flatter (5.54 vs 6.86)" from Hutchinson's estimate over 10 sign vectors,
    quoted and read (10% apart) with no error. With the samples' standard error the trace decides only beyond two of
    the difference's: errors of 0.6 leave 5.54 and 6.86 no different; errors of 0.2 keep them apart. The table shows
    the error."""
    small, large = TENTH_SHARP
    wide = L11.sharpness_verdict({**small, "trace +/- (stderr)": 0.6}, {**large, "trace +/- (stderr)": 0.6})
    assert ("by the Hessian trace no different within two standard errors (5.54 +/- 0.6 vs 6.86 +/- 0.6); one run "
            "each, and the trace, within its errors, does not bear the eigenvalue out, so there is no sharpness to set "
            "against the gap.") in wide, wide
    tight = L11.sharpness_verdict({**small, "trace +/- (stderr)": 0.2}, {**large, "trace +/- (stderr)": 0.2})
    assert "by the Hessian trace flatter (5.54 +/- 0.2 vs 6.86 +/- 0.2); one run each, and the two measures" in tight
    rows = [{**small, "trace +/- (stderr)": 0.61234}, {**large, "trace +/- (stderr)": 0.6}]
    table = L11.sharpness_table(rows)
    assert "trace +/- (stderr)" in table.columns and [r["trace +/- (stderr)"] for r in table.rows] == ["0.61", "0.6"]
    assert "trace +/- (stderr)" not in L11.sharpness_table(list(TENTH_SHARP)).columns


def test_hutchinson_trace_gives_its_standard_error_from_the_samples():
    from course_lib import batch_science as bs
    from test_batch_science import _quadratic

    model, loss_fn, a = _quadratic([4.0, 3.0, 2.0, 1.0] * 5, seed=1)
    mean, se = bs.hutchinson_trace(model, loss_fn, a, samples=50, with_stderr=True)
    assert mean == bs.hutchinson_trace(model, loss_fn, a, samples=50) and 0 < se < 0.2 * mean
    one = bs.hutchinson_trace(model, loss_fn, a, samples=1, with_stderr=True)
    assert one[1] != one[1]  # nan: one sample has no spread


def test_the_bert_verdict_says_how_the_steps_fell_as_the_neumf_one_does():
    """r10e 11-S2: "lesson 07's Adam needed x1.64 fewer steps to its target" (a ratio said as a number of steps
    fewer): it now reads as section 2's last_doubling does, the counts and their ratio. Opposite: steps that fell
    in proportion read x8."""
    said = L11.bert_noise_verdict(86.35293614353206, TENTH_BERT_ROWS, stderr=23.867852239558406)
    assert said.startswith("From batch 32 to 256 (x8) lesson 07's Adam's steps to its target fell 36 -> 22 (x1.64; "
                           "perfect scaling: x8); with B_crit = B_simple = 86 sequences"), said
    assert "fewer steps" not in said
    perfect = [{"batch size": 32, "steps to target": 80}, {"batch size": 256, "steps to target": 10}]
    assert "fell 80 -> 10 (x8.00; perfect scaling: x8)" in L11.bert_noise_verdict(50.0, perfect)
