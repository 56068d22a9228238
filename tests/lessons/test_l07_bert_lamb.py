"""Lesson 07 (course_lib.lessons.l07_bert_lamb): the study's settings and budget, time to a target loss, what gets
saved for later lessons, and the comparisons that decide the lesson's questions, fed simulated runs."""

import math

import pytest

from course_lib import compare
from course_lib.lessons import l07_bert_lamb as st


def record(evals, *, best=None, diverged=False, label="run", batch=256, steps=None):
    """A train_mlm-shaped record with held-out losses ``evals`` at steps 10, 20, ... (1 s apart)."""
    steps_ = [10 * (i + 1) for i in range(len(evals))]
    finite = [x for x in evals if math.isfinite(x)]
    return {
        "label": label,
        "config": {"global_batch_size": batch, "peak_lr": 1e-3},
        "diverged": diverged,
        "best_eval_loss": best if best is not None else (min(finite) if finite else None),
        "final_eval_loss": evals[-1],
        "steps": steps or steps_[-1],
        "seqs_per_s": 100.0,
        "curves": {
            "eval_step": steps_,
            "eval_loss": list(evals),
            "eval_time_s": [float(i + 1) for i in range(len(evals))],
        },
    }


def test_time_to_loss_is_the_first_evaluation_at_or_below_the_target():
    r = record([5.0, 4.5, 4.2, 4.3, 4.1])
    assert st.time_to_loss(r, 4.2) == (3.0, 30)
    assert st.time_to_loss(r, 4.0) == (None, None)
    assert st.time_to_loss(record([math.nan, 4.0]), 4.5) == (2.0, 20)  # NaN never counts as reached


def test_study_config_gives_every_batch_the_same_sequences():
    study = st.Study(small_batch=32, large_batch=256, micro_batch=64, seqs=7680, common=dict(model="tiny", dropout=0.0))
    small, large = study.config("adam", 32), study.config("lamb", 256, lr_factor=0.5, seed=1)
    assert (small.max_steps, small.warmup_steps, small.micro_batch_size) == (240, 24, 32)
    assert (large.max_steps, large.warmup_steps, large.micro_batch_size, large.seed) == (30, 6, 64, 1)
    assert small.max_steps * 32 == large.max_steps * 256  # equal epochs at every batch
    assert large.batch(1).grad_accum_steps == 4 and large.eval_every_steps == 1
    assert large.peak_lr == pytest.approx(1e-2 * 0.5 * math.sqrt(256 / 32))  # sqrt rule from the small batch
    assert small.peak_lr == pytest.approx(1e-3) and small.model == "tiny"


def test_the_largest_batch_that_keeps_its_steps_on_simulated_machines():
    runs = st.n_runs((0.5, 1, 2), (0.25, 0.5, 1), 1, 1)
    assert runs == 20
    fast = st.size_study(0.001, 700, num_train=100_000, small_batch=32, runs=runs)  # ~30k sequences a run
    slow = st.size_study(0.004, 700, num_train=100_000, small_batch=32, runs=runs)  # four times slower
    for s in (fast, slow):
        assert s["seqs"] // s["large_batch"] >= st.MIN_LARGE_STEPS  # the large batch keeps its steps...
        assert s["seqs"] // (2 * s["large_batch"]) < st.MIN_LARGE_STEPS or s["large_batch"] == 32 * 4  # ...largest
        assert s["planned_s"] <= 700 and not s["over_budget"]
    assert fast["large_batch"] == 4 * slow["large_batch"] and fast["seqs"] > slow["seqs"]
    small_corpus = st.size_study(0.001, 700, num_train=1800, small_batch=32, runs=runs)
    assert small_corpus["epochs"] <= st.MAX_EPOCHS and small_corpus["large_batch"] <= 900  # at most half the corpus
    floor = st.size_study(0.1, 700, num_train=100_000, small_batch=32, runs=runs)  # too slow: the floor, said
    assert floor["large_batch"] == 128 and floor["seqs"] == 128 * st.MIN_LARGE_STEPS and floor["over_budget"]
    given = st.size_study(0.001, 700, num_train=100_000, small_batch=8, runs=runs, large_batch=32, seqs=128)
    assert (given["large_batch"], given["seqs"]) == (32, 128)
    with pytest.raises(ValueError, match="num_train=0"):
        st.size_study(0.001, 700, num_train=0, small_batch=32, runs=runs)


def test_the_target_is_the_worse_optimizers_best_at_the_large_batch():
    sweep = {"adam x1": record([5.0, 4.4]), "adam x2": record([5.0, 4.6]), "lamb x1": record([5.0, 4.2]),
             "lamb x2": record([math.nan], diverged=True)}
    assert st.target_loss(sweep, margin=0.05) == pytest.approx(4.45)


def test_summary_and_best_of():
    a, b = record([4.5, 4.1], label="lamb x1"), record([4.4, 4.3], label="lamb x2")
    assert st.best_of({"lamb x1": a, "lamb x2": b, "adam x1": record([3.0])}, "lamb") is a
    s = st.summary(a, 4.2)
    assert (s["steps_to_loss"], s["time_to_loss_s"], s["eval_loss_curve"]) == (20, 2.0, [(10, 4.5), (20, 4.1)])


def test_trust_ratio_spread():
    r = {"trust_ratios": {"w1": [0.02, 0.04], "w2": [0.01, 0.04]}}
    out = st.trust_ratio_spread(r)
    assert (out["first_min"], out["first_max"]) == pytest.approx((0.01, 0.02))
    assert out["spread"].tolist() == pytest.approx([2.0, 1.0]) and out["spread_max"] == pytest.approx(2.0)


def _mlm(steps_to_target, best, *, seqs_per_s=100.0, batch=32, every=6, diverged=False, label="x", peak_lr=1e-3):
    """A record shaped like train_mlm's: evaluations every ``every`` steps, reaching ``best`` loss."""
    evals = list(range(0, 121, every))
    losses = [9.0 if (steps_to_target is None or s < steps_to_target) else best for s in evals]
    if steps_to_target is None:
        losses[-1] = best
    return {"curves": {"eval_step": evals, "eval_loss": losses, "eval_time_s": [s * batch / seqs_per_s for s in evals]},
            "best_eval_loss": best, "diverged": diverged, "seqs_per_s": seqs_per_s, "label": label,
            "config": {"global_batch_size": batch, "peak_lr": peak_lr}}


def test_the_tuned_small_batch_run_is_saved_under_the_name_later_lessons_read():
    # lessons 11 and 12 look up lesson 07's small-batch Adam run as "adam b=32", whichever lr its sweep chose
    r = record([5.0, 4.4], label="adam b=32, base lr x2", batch=32)
    saved = st.summary(r, 4.5, label="adam b=32")
    assert saved["label"] == "adam b=32" and saved["run"] == "adam b=32, base lr x2"
    assert st.summary(r, 4.5)["label"] == "adam b=32, base lr x2"


def _seeds(adam_steps, lamb_steps, every=6, batch=256):
    runs = {}
    for i, (a, b) in enumerate(zip(adam_steps, lamb_steps)):
        tag = "best lr" if i == 0 else "best lr, seed 1"
        runs[f"adam b={batch} ({tag})"] = _mlm(a, 4.0, batch=batch, every=every)
        runs[f"lamb b={batch} ({tag})"] = _mlm(b, 4.0, batch=batch, every=every)
    return runs


TAGS = ("best lr", "best lr, seed 1")


def _optimizers(runs):
    """The LAMB / Adam rows of the section's comparisons."""
    return [c for c in st.comparisons(runs, {}, {}, 4.1, 32, 256, TAGS) if "LAMB / Adam" in c.question]


def test_adam_against_lamb_needs_a_gap_beyond_the_seeds_and_the_evaluation_interval():
    clear = _optimizers(_seeds([108, 114], [48, 54]))
    assert [c.outcome for c in clear] == [compare.LOWER]  # LAMB needed about half the steps on both seeds
    # 66 and 72 against 72 and 90, evaluations every 6 steps: within the seeds and the interval
    unclear = _optimizers(_seeds([72, 90], [66, 72]))
    assert [c.outcome for c in unclear] == [compare.UNRESOLVED]
    missed = _seeds([72, 90], [66, 72])
    missed["adam b=256 (best lr)"] = _mlm(None, 4.5, batch=256)  # it missed the target: no row, the table shows it
    assert _optimizers(missed) == []
    small = {"adam b=32": _mlm(120, 4.0), "lamb b=32": _mlm(60, 4.0)}  # one run each: the interval is the resolution
    (c,) = _optimizers(small)
    assert c.question.endswith("b=32") and c.outcome == compare.LOWER and c.basis.startswith("1/1 run(s)")


def test_the_large_batch_on_the_clock_and_in_sequences():
    runs = {"adam b=32": _mlm(120, 4.0, seqs_per_s=176.0, batch=32),
            "adam b=256 (best lr)": _mlm(66, 4.0, seqs_per_s=221.0, batch=256)}
    def batch(runs, drift=0.0):  # adam's runs at the small batch and the large one's seeds
        return st.batch_comparisons([runs["adam b=32"]], [runs["adam b=256 (best lr)"]], 4.1, 32, 256, "adam", drift)

    time, seqs, _ = batch(runs)
    assert seqs.estimate == pytest.approx(66 * 256 / (120 * 32)) and seqs.outcome == compare.HIGHER
    assert time.outcome == compare.HIGHER  # 4.4x the sequences at 1.26x the rate: later on the clock
    runs["adam b=256 (best lr)"] = _mlm(12, 4.0, seqs_per_s=2000.0, batch=256)
    time, seqs, _ = batch(runs)
    assert time.outcome == compare.LOWER
    # a busy machine: runs of the same work at one batch ran at 47.5-182 sequences/s, so the clock is unresolved
    busy = {"adam b=32, x2": _mlm(None, 4.5, seqs_per_s=47.5, batch=32),
            "lamb b=32, x1": _mlm(None, 4.5, seqs_per_s=182.0, batch=32)}
    runs = {"adam b=32": _mlm(36, 4.0, seqs_per_s=100.0, batch=32),
            "adam b=256 (best lr)": _mlm(6, 4.0, seqs_per_s=100.0, batch=256)}
    drift = st.pace_drift({**busy, **runs})
    time = batch(runs, drift)[0]
    assert time.outcome == compare.UNRESOLVED and drift == pytest.approx(182 / 47.5 - 1)
    assert st.batch_comparisons([_mlm(None, 4.5)], [], 4.1, 32, 256, "adam") == []


def test_throughput_per_batch_from_every_run_at_it():
    records = {f"r{i}": _mlm(60, 4.0, batch=b, seqs_per_s=v) for i, (b, v) in
               enumerate([(32, 100.0), (32, 104.0), (32, 98.0), (256, 150.0), (256, 155.0), (256, 149.0)])}
    def throughput(records):  # every run at each batch, whichever sweep it belongs to
        return st.comparisons({}, records, {}, 4.1, 32, 256)

    assert [c.outcome for c in throughput(records)] == [compare.HIGHER]
    records["r3"]["seqs_per_s"], records["r4"]["seqs_per_s"] = 60.0, 140.0  # one batch's runs spread over both
    assert throughput(records)[0].outcome == compare.UNRESOLVED
    assert throughput({"r0": records["r0"]}) == []


def test_the_lr_choice_and_the_ablations_against_the_seed_to_seed_noise():
    sweep = {"adam b=256, sqrt rule x0.25": _mlm(60, 4.00, label="adam b=256, sqrt rule x0.25"),
             "adam b=256, sqrt rule x0.5": _mlm(66, 4.05, label="adam b=256, sqrt rule x0.5"),
             "adam b=256, sqrt rule x1": _mlm(None, 4.9, label="adam b=256, sqrt rule x1")}
    noisy = [_mlm(60, 4.0), _mlm(60, 4.08)]
    assert st.lr_comparisons({}, sweep, "adam", 32, 256, noisy)[0].outcome == compare.UNRESOLVED
    steady = [_mlm(60, 4.0), _mlm(60, 4.001)]
    (c,) = st.lr_comparisons({}, sweep, "adam", 32, 256, steady)
    assert c.outcome == compare.HIGHER and "lr x0.5 - lr x0.25" in c.question
    seeds = [_mlm(60, 4.0), _mlm(66, 4.01)]
    abl = {"lamb": _mlm(60, 4.0), "no pre-normalization": _mlm(66, 4.005), "no bias correction": _mlm(None, 4.9),
           "broken": _mlm(None, 9.0, diverged=True)}
    got = {c.question: c for c in st.ablation_comparisons(abl, "lamb", 4.1, seeds)}
    assert got["no bias correction: best loss - full"].outcome == compare.HIGHER
    assert got["no pre-normalization: best loss - full"].outcome != compare.HIGHER
    assert got["no pre-normalization: steps to target / full"].outcome == compare.UNRESOLVED
    assert not any(q.startswith("broken") for q in got)  # diverged: no number to compare
    assert "no bias correction: steps to target / full" not in got  # it missed the target


def test_equal_sequences_compares_at_the_small_batchs_budget():
    small = _mlm(60, 4.0, batch=32)  # 120 steps x 32 = 3840 sequences, ends at 4.0
    large = {**_mlm(None, 4.5, batch=256), "curves": {"eval_step": [0, 12, 15, 24], "eval_loss": [9.0, 4.6, 4.4, 3.9],
                                                      "eval_time_s": [0, 1, 2, 3]}}

    def equal_sequences():
        return st.batch_comparisons([small], [large], 4.1, 32, 256, "adam")[-1]

    c = equal_sequences()
    assert c.estimate == pytest.approx(0.4) and c.outcome == compare.HIGHER  # the large batch learned less
    large["curves"]["eval_loss"][2] = 3.5
    assert equal_sequences().outcome == compare.LOWER
    large["curves"]["eval_loss"][2] = 4.0005
    assert equal_sequences().outcome == compare.SAME


def test_the_tuned_lr_against_the_sqrt_rule():
    def swept(batch, lrs_losses):
        return {f"adam b={batch}, x{lr:g}": _mlm(60, loss, batch=batch, peak_lr=lr) for lr, loss in lrs_losses}

    small = swept(32, [(5e-4, 4.2), (1e-3, 4.0), (2e-3, 4.1)])  # tuned at 1e-3
    near = swept(256, [(1.4e-3, 4.3), (2.8e-3, 4.1), (5.6e-3, 4.2)])  # 2.8x: the sqrt rule's 2.83x
    c = st.lr_comparisons(small, near, "adam", 32, 256, [])[0]
    assert c.estimate == pytest.approx(2.8 / math.sqrt(8)) and not c.decided
    far = swept(256, [(2.5e-2, 4.3), (5e-2, 4.1), (1e-1, 4.2)])  # 50x: far above the rule
    assert st.lr_comparisons(small, far, "adam", 32, 256, [])[0].outcome == compare.HIGHER
    assert not [c for c in st.lr_comparisons({}, far, "adam", 32, 256, []) if "sqrt rule" in c.question]


def test_bf16_against_fp32_and_against_lesson_05s_neumf():
    tp = {"fp32": {"seqs_per_s": 100.0}, "bf16": {"seqs_per_s": 171.0}}
    (bert,) = st.precision_comparisons(tp, None, {})
    assert bert.outcome == compare.HIGHER and "10%" in bert.basis  # no runs: the stated resolution
    both = st.precision_comparisons(tp, {"fp32": 1.0, "bf16": 0.88}, {})
    assert both[1].outcome == compare.HIGHER  # 1.71x against 0.88x
    close = st.precision_comparisons(tp, {"fp32": 1.0, "bf16": 1.6}, {})
    assert close[1].outcome == compare.UNRESOLVED  # 1.07x apart, within the pace's movement
    assert st.precision_comparisons({"fp32": {"seqs_per_s": 1.0}}, None, {}) == []


def test_comparisons_cover_every_question_once():
    runs = {"adam b=32": _mlm(120, 4.0), "lamb b=32": _mlm(60, 4.0), **_seeds([108, 114], [48, 54])}
    sweep = {"adam b=256, sqrt rule x0.5": _mlm(66, 4.05, batch=256, label="adam b=256, sqrt rule x0.5"),
             "adam b=256, sqrt rule x1": runs["adam b=256 (best lr)"]}
    got = st.comparisons(runs, {}, sweep, 4.1, 32, 256, TAGS)
    questions = [c.question for c in got]
    assert len(questions) == len(set(questions))
    assert {"steps to target, LAMB / Adam, b=32", "steps to target, LAMB / Adam, b=256",
            "adam: time to target, b=256 / b=32", "lamb: sequences to target, b=256 / b=32",
            "seq/s, b=256 / b=32"} <= set(questions)
