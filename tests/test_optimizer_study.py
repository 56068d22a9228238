"""Lesson 07's study helpers (course_lib.lessons.l07_bert_lamb) and the edge-extending sweep (course_lib.sweeps)."""

import math

import pytest

from course_lib.lessons import l07_bert_lamb as st
from course_lib.sweeps import sweep_with_edge_extension


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


def test_study_config_states_the_settings_once():
    study = st.Study(small_batch=32, large_batch=256, micro_batch=64, small_seqs=7680, large_seqs=30720,
                     common=dict(model="tiny", dropout=0.0))
    small, large = study.config("adam", 32), study.config("lamb", 256, lr_factor=0.5, seed=1)
    assert (small.max_steps, small.warmup_steps, small.micro_batch_size) == (240, 24, 32)
    assert (large.max_steps, large.warmup_steps, large.micro_batch_size, large.seed) == (120, 24, 64, 1)
    assert large.batch(1).grad_accum_steps == 4 and large.eval_every_steps == 6
    assert large.peak_lr == pytest.approx(1e-2 * 0.5 * math.sqrt(256 / 32))  # sqrt rule from the small batch
    assert small.peak_lr == pytest.approx(1e-3) and small.model == "tiny"


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


@pytest.mark.parametrize("best, expected_grid", [
    (0.45, [0.25, 0.5, 1.0]),  # inside the grid: no extension
    (0.05, [0.0625, 0.125, 0.25, 0.5, 1.0]),  # below the grid: halve twice (max_extensions=2)
    (3.0, [0.25, 0.5, 1.0, 2.0, 4.0]),  # above: double until the best is inside
])
def test_sweep_with_edge_extension(best, expected_grid):
    calls = []

    def run(f):
        calls.append(f)
        return {"loss": abs(math.log(f / best))}

    done = sweep_with_edge_extension(run, (1.0, 0.25, 0.5), lambda r: r["loss"], max_extensions=2)
    assert sorted(calls) == expected_grid and list(done) == expected_grid  # each factor runs once, in order


def test_budget_never_passes_over_a_small_corpus_more_than_the_cap():
    """#12.10: lesson 07 on one GPU with the pydoc corpus trained ~100 epochs of ~950 sequences."""
    small, large, note = st.budget(256, 950, large_batches=100)
    assert large <= st.MAX_EPOCHS * 950 and small * 4 == large and "capped" in note and "950" in note
    assert st.budget(256, 100_000, large_batches=30) == (7680, 30720, "")  # a large corpus: uncapped
    assert st.budget(256, 10, large_batches=30)[0] == 256  # never less than one large batch
    with pytest.raises(ValueError, match="num_train=0"):
        st.budget(256, 0, large_batches=30)


def test_race_gives_each_optimizer_its_own_best_lr_and_extends_an_edge(monkeypatch):
    """Each optimizer is swept around its own starting lr; a best at the grid's edge gets one
    more point beyond it. Fake runs: Adam reaches the target fastest at its starting lr, SGD
    only gets better with a larger lr and never reaches it."""
    from types import SimpleNamespace

    from course_lib import sweeps as search
    from course_lib.train.ncf import TrainConfig

    def fake_train(data, cfg, **kw):
        lr = cfg.base_lr
        if cfg.optimizer == "adam":
            t = {0.5e-3: 9.0, 1e-3: 5.0, 2e-3: 7.0}[lr]
            return SimpleNamespace(time_to_target_s=t, best_hr=0.8, final_hr=0.8, config={"peak_lr": lr})
        return SimpleNamespace(time_to_target_s=None, best_hr=min(0.7, lr / 100), final_hr=0.1,
                               config={"peak_lr": lr})

    monkeypatch.setattr(search, "train_to_target", fake_train)
    base = TrainConfig(global_batch_size=1024, optimizer="adam", base_lr=1e-3, lr_scaling="none")
    starts = {"adam": base, "sgd": base.replace(optimizer="sgd", base_lr=8.0)}
    results, labels = search.race(None, starts, (0.5, 1.0, 2.0), max_extensions=1)
    assert labels == ["b1024 adam lr 0.0005", "b1024 adam lr 0.001", "b1024 adam lr 0.002",
                      "b1024 sgd lr 4", "b1024 sgd lr 8", "b1024 sgd lr 16", "b1024 sgd lr 32"]
    assert search.race_score(results[1]) == (0, 5.0) and search.race_score(results[-1]) == (1, -0.32)
    assert min(results[:3], key=search.race_score).config["peak_lr"] == 1e-3


def test_lr_sweep_extends_a_best_at_the_edge(monkeypatch):
    """Lesson 01's sweep: the best of (1e-3, 2e-3, 5e-3) was 1e-3, the grid's edge; with
    ``max_extensions`` the sweep tries 5e-4 (and 2.5e-4) before it settles."""
    from types import SimpleNamespace

    from course_lib import sweeps as search
    from course_lib.train.ncf import TrainConfig

    def fake_train(data, cfg, **kw):
        hr = {2.5e-4: 0.60, 5e-4: 0.70, 1e-3: 0.65, 2e-3: 0.6, 5e-3: 0.5}.get(cfg.base_lr, 0.4)
        return SimpleNamespace(final_hr=hr, final_ndcg=hr / 2, epochs=0.5, steps=10, curve={"loss": [0.3]},
                               config={"optimizer": cfg.optimizer, "peak_lr": cfg.base_lr, "base_lr": cfg.base_lr})

    monkeypatch.setattr(search, "train_to_target", fake_train)
    cfg = TrainConfig(global_batch_size=256, optimizer="adam", base_lr=1e-3)
    _, best, runs = search.lr_sweep(None, cfg, (1e-3, 2e-3, 5e-3), max_extensions=2)
    assert best == 5e-4 and [r.config["base_lr"] for r in runs] == [2.5e-4, 5e-4, 1e-3, 2e-3, 5e-3]
    _, best, runs = search.lr_sweep(None, cfg, (1e-3, 2e-3, 5e-3))
    assert best == 1e-3 and len(runs) == 3


def test_lr_sweep_says_each_run_as_it_ends(data, capsys, monkeypatch):
    """Issue 36 item 5: a sweep's runs each print a line as they end (papermill streams it to make course's
    output), not nothing until the table; one line per run, not one per evaluation."""
    from course_lib import sweeps as search
    from course_lib.train.ncf import TrainConfig

    monkeypatch.delenv("COURSE_PROGRESS", raising=False)
    cfg = TrainConfig(global_batch_size=1024, optimizer="adam", base_lr=1e-3, eval_every_epochs=0.05)
    _, _, runs = search.lr_sweep(data, cfg, (1e-3, 4e-3), max_epochs=0.1,
                                 extra=(cfg.replace(optimizer="sgd", base_lr=0.1),))
    # each run's end: its settings and where it got (outside a notebook a line as it begins comes first)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[") and " -> " in line]
    assert len(runs) == 3 and len(lines) == 3, lines
    assert [line.split("]")[0] for line in lines] == ["[adam lr 0.001", "[adam lr 0.004", "[sgd lr 0.1"]


def _mlm(steps_to_target, best, *, seqs_per_s=100.0, batch=32, every=6, diverged=False, label="x"):
    """A record shaped like train_mlm's: evaluations every ``every`` steps, reaching ``best`` loss."""
    evals = list(range(0, 121, every))
    losses = [9.0 if (steps_to_target is None or s < steps_to_target) else best for s in evals]
    if steps_to_target is None:
        losses[-1] = best
    return {"curves": {"eval_step": evals, "eval_loss": losses, "eval_time_s": [s * batch / seqs_per_s for s in evals]},
            "best_eval_loss": best, "diverged": diverged, "seqs_per_s": seqs_per_s, "label": label,
            "config": {"global_batch_size": batch}}


def test_seeds_verdict_needs_a_gap_beyond_the_seeds_and_the_evaluation_interval():
    """Review 07.1: "both seeds agree" rested on one evaluation interval (66 vs 72, evaluations every
    6 steps), less than Adam's own seed spread (72 vs 90)."""
    from course_lib.lessons.l07_bert_lamb import large_batch_reading, seeds_verdict

    adam, lamb = [_mlm(72, 4.0), _mlm(90, 4.0)], [_mlm(66, 4.0), _mlm(72, 4.0)]
    won, why = seeds_verdict(adam, lamb, 4.1, 256)
    assert won is None and "no measurable difference" in why
    won, why = seeds_verdict([_mlm(108, 4.0), _mlm(114, 4.0)], [_mlm(48, 4.0), _mlm(54, 4.0)], 4.1, 256)
    assert won == "lamb" and "lamb lower on every seed" in why
    assert seeds_verdict([_mlm(None, 4.5), _mlm(None, 4.6)], lamb, 4.1, 256)[0] == "lamb"
    small = seeds_verdict([_mlm(120, 4.0)], [_mlm(60, 4.0)], 4.1, 32)
    text = large_batch_reading(small, (won, why))
    assert "ahead at the small batch as well" in text and "not shown to come from the batch" in text
    assert "the lead opens with the batch" in large_batch_reading(("adam", "at batch 32: adam ..."), (won, why))
    assert "level here" in large_batch_reading(small, (None, "at batch 256: no measurable difference"))


def test_batch_reading_says_whether_throughput_paid_for_the_extra_sequences():
    from course_lib.lessons.l07_bert_lamb import batch_reading

    runs = {"adam b=32": _mlm(120, 4.0, seqs_per_s=176.0, batch=32),
            "adam b=256 (best lr)": _mlm(66, 4.0, seqs_per_s=221.0, batch=256)}
    text = batch_reading(runs, 4.1, 32, 256, "adam")
    assert "reached the target later" in text and "4.40x the sequences" in text and "1.26x the sequences/s" in text
    assert text.endswith("(sample efficiency decided)")
    runs["adam b=256 (best lr)"] = _mlm(12, 4.0, seqs_per_s=2000.0, batch=256)
    assert batch_reading(runs, 4.1, 32, 256, "adam").endswith("paid for the extra sequences")
    # #37, the full run: 0.70x (and 1.00x) the sequences/s: there was no throughput gain to name
    runs["adam b=256 (best lr)"] = _mlm(66, 4.0, seqs_per_s=123.2, batch=256)
    slower = batch_reading(runs, 4.1, 32, 256, "adam")
    assert "0.70x the sequences/s" in slower and "the throughput gain" not in slower
    assert "there was no throughput gain to pay for the extra sequences" in slower
    runs["adam b=256 (best lr)"] = _mlm(66, 4.0, seqs_per_s=176.0, batch=256)
    assert "no throughput gain" in batch_reading(runs, 4.1, 32, 256, "adam")


def test_lr_and_ablation_readings_compare_with_the_seed_to_seed_noise():
    from course_lib.lessons.l07_bert_lamb import ablation_reading, lr_choice_reading

    sweep = {"adam b=256, sqrt rule x0.25": _mlm(60, 4.00, label="adam b=256, sqrt rule x0.25"),
             "adam b=256, sqrt rule x0.5": _mlm(66, 4.05, label="adam b=256, sqrt rule x0.5"),
             "adam b=256, sqrt rule x1": _mlm(None, 4.9, label="adam b=256, sqrt rule x1")}
    assert "x0.5 is within the seed-to-seed noise" in lr_choice_reading(sweep, "adam", [4.0, 4.08])
    assert "0.050 lower in loss than x0.5" in lr_choice_reading(sweep, "adam", [4.0, 4.01])
    abl = {"lamb": _mlm(60, 4.0), "no pre-normalization": _mlm(66, 4.02), "no bias correction": _mlm(None, 4.35),
           "broken": _mlm(None, 9.0, diverged=True)}
    text = ablation_reading(abl, "lamb", 4.1, [4.0, 4.05]).splitlines()
    # review 2026-12-01 #3: step 66 against 60 is one evaluation interval (every 6 steps)
    assert text[0].startswith("no pre-normalization: reached the target at step 66 (full LAMB: 60 on its seeds, "
                              "evaluations every 6): no measurable difference in steps")
    assert "no measurable effect on the best loss" in text[0] and text[0].endswith("it did not diverge")
    assert text[1] == ("no bias correction: did not reach the target; best loss +0.350 vs the full LAMB "
                       "(seeds 0.050 apart); it did not diverge")
    assert text[2] == "broken: diverged"
    later = ablation_reading({"lamb": _mlm(60, 4.0), "slow": _mlm(90, 4.0)}, "lamb", 4.1, [4.0, 4.01], [60, 66])
    assert "(full LAMB: 60, 66 on its seeds, evaluations every 6): later by more than an evaluation interval" in later
    # the fourth read: "no bias correction: ... it did not diverge" at a best loss of 4.960, above the 4.940 that
    # token frequencies alone score; opposite: 4.35, below a floor of 4.94, says nothing of it
    floored = ablation_reading({**abl, "no bias correction": _mlm(None, 4.96)}, "lamb", 4.1, [4.0, 4.05],
                               floor=4.9404).splitlines()
    assert floored[1].endswith("it did not diverge, but its best loss, 4.960, is no lower than token frequencies "
                               "alone score (4.940): it learned nothing beyond them")
    assert ablation_reading(abl, "lamb", 4.1, [4.0, 4.05], floor=4.9404).splitlines() == text


def test_lead_by_batch_says_whether_lambs_lead_grew_or_shrank():
    from course_lib.lessons.l07_bert_lamb import lead_by_batch

    # review 2026-12-01 #2: 120/168 = 0.71 at batch 32, 63/75 = 0.84 at batch 256
    runs = {"adam b=32": _mlm(168, 4.0), "lamb b=32": _mlm(120, 4.0, every=1),
            "adam b=256 (best lr)": _mlm(75, 4.0, every=1), "lamb b=256 (best lr)": _mlm(63, 4.0, every=1)}
    runs["adam b=32"] = {**_mlm(None, 4.0), "curves": {"eval_step": list(range(169)),
                                                       "eval_loss": [9.0] * 168 + [4.0],
                                                       "eval_time_s": [0.01 * s for s in range(169)]}}
    said = lead_by_batch(runs, 4.1, 32, 256)
    assert "0.71 at batch 32 (120/168), 0.84 at batch 256 (63/75): LAMB's lead shrank as the batch grew" in said
    runs["lamb b=256 (best lr)"] = _mlm(30, 4.0, every=1)
    assert "grew as the batch grew" in lead_by_batch(runs, 4.1, 32, 256)
    runs["lamb b=256 (best lr)"] = _mlm(90, 4.0, every=1)
    assert "LAMB ahead at batch 32 only" in lead_by_batch(runs, 4.1, 32, 256)
    runs["lamb b=256 (best lr)"] = _mlm(None, 9.5, every=1)
    assert "cannot be followed" in lead_by_batch(runs, 4.1, 32, 256)
    # #37, the full run of 2026-12-01: 56/36 at batch 32, 22/22 at 256 (evaluations every 2 and 4 steps): the
    # ratios are read with the resolution of their steps, so 1.00 is level, not "Adam fewer at both"
    full = {"adam b=32": _mlm(36, 4.0, every=4), "lamb b=32": _mlm(56, 4.0, every=4),
            "adam b=256 (best lr)": _mlm(22, 4.0, every=2), "lamb b=256 (best lr)": _mlm(22, 4.0, every=2)}
    said = lead_by_batch(full, 4.1, 32, 256)
    assert "1.56 at batch 32 (56/36), 1.00 at batch 256 (22/22)" in said and "at both batches" not in said
    assert "Adam needed fewer steps at batch 32; at batch 256 the two are level" in said
    # an earlier run: 0.71 (120/168) and 0.78 (63/81) with steps known to 12: not a measured shrink
    coarse = {"adam b=32": _mlm(168, 4.0, every=12), "lamb b=32": _mlm(120, 4.0, every=12),
              "adam b=256 (best lr)": _mlm(81, 4.0, every=3), "lamb b=256 (best lr)": _mlm(63, 4.0, every=3)}
    coarse["adam b=32"]["curves"] = {"eval_step": list(range(0, 169, 12)), "eval_loss": [9.0] * 14 + [4.0],
                                     "eval_time_s": [0.0] * 15}
    said = lead_by_batch(coarse, 4.1, 32, 256)
    assert "shrank" not in said and "LAMB ahead at both batches" in said, said


def test_run_line_is_one_line_per_run():
    from course_lib.lessons.l07_bert_lamb import quiet_progress, run_line

    r = {**_mlm(60, 4.0, label="lamb b=256"), "steps": 120, "train_time_s": 12.5}
    assert run_line(r) == ("[lamb b=256] 120 steps, best held-out loss 4.000 at step 60, 12.5 s training, "
                           "100.0 sequences/s")
    assert "diverged after 120 steps" in run_line({**r, "diverged": True})
    assert quiet_progress("log") == "none" and quiet_progress("bar") == "bar"


def test_precision_reading_explains_a_gap_only_where_there_is_one():
    from course_lib.lessons.l07_bert_lamb import precision_reading

    assert "mostly matmuls" in precision_reading(1.71, 0.88)
    # #37, the full runs: NeuMF 1.43x (and 1.48x) faster in bf16 itself: not "which they did not speed up"
    both = precision_reading(2.33, 1.43)
    assert "sped up both steps here, the transformer's, made of matmuls, more" in both
    assert "did not speed up" not in both and "did not speed up here" in precision_reading(2.33, 1.02)
    assert "no difference between the models" in precision_reading(1.01, 1.07)
    assert "NeuMF gained more" in precision_reading(0.9, 1.2)
    assert precision_reading(1.5, None).endswith("(lesson 05's NeuMF ratio is not saved here)")


def test_equal_sequences_reading_compares_at_the_small_batchs_budget():
    from course_lib.lessons.l07_bert_lamb import equal_sequences_reading

    small = _mlm(60, 4.0, batch=32)  # 120 steps x 32 = 3840 sequences, ends at 4.0
    large = {**_mlm(None, 4.5, batch=256), "curves": {"eval_step": [0, 12, 15, 24], "eval_loss": [9.0, 4.6, 4.4, 3.9],
                                                      "eval_time_s": [0, 1, 2, 3]}}
    said = equal_sequences_reading({"adam b=32": small, "adam b=256 (best lr)": large}, 32, 256, "adam")
    assert "after 3,840 sequences (step 15) the large batch's held-out loss was 4.400, higher than the small" in said
    assert said.endswith("learned less")
    large["curves"]["eval_loss"][2] = 3.5
    assert equal_sequences_reading({"adam b=32": small, "adam b=256 (best lr)": large}, 32, 256, "adam").endswith(
        "learned more")


def test_tuning_reading_compares_each_batchs_tuned_lr_with_the_sqrt_rule():
    def swept(batch, lrs_losses):
        out = {}
        for lr, loss in lrs_losses:
            r = record([loss + 1, loss], label=f"adam b={batch}, x{lr:g}", batch=batch)
            r["config"]["peak_lr"] = lr
            out[r["label"]] = r
        return out

    small = swept(32, [(5e-4, 4.2), (1e-3, 4.0), (2e-3, 4.1)])  # tuned at 1e-3, inside the grid
    large = swept(256, [(1.4e-3, 4.3), (2.8e-3, 4.1), (5.6e-3, 4.2)])  # tuned at 2.8e-3: 2.8x, the sqrt rule's 2.83x
    said = st.tuning_reading(small, large, "adam", 32, 256)
    assert "tuned peak lr 1.00e-03 at batch 32, 2.80e-03 at batch 256: 2.80x, close to the sqrt rule's 2.83x" in said
    assert "edge" not in said
    large = swept(256, [(1.4e-3, 4.0), (2.8e-3, 4.1), (5.6e-3, 4.2)])  # the opposite: best at the small edge
    said = st.tuning_reading(small, large, "adam", 32, 256)
    assert "1.40x, below the sqrt rule's 2.83x" in said and "edge of its grid at batch 256" in said
    large = swept(256, [(2.8e-3, 4.3), (5.6e-3, 4.2), (1.12e-2, 4.1)])
    assert "above the sqrt rule" in st.tuning_reading(small, large, "adam", 32, 256)
    assert "no tuned lr" in st.tuning_reading({}, large, "adam", 32, 256)


def test_the_tuned_small_batch_run_is_saved_under_the_name_later_lessons_read():
    # lessons 11 and 12 look up lesson 07's small-batch Adam run as "adam b=32", whichever lr its sweep chose
    r = record([5.0, 4.4], label="adam b=32, base lr x2", batch=32)
    saved = st.summary(r, 4.5, label="adam b=32")
    assert saved["label"] == "adam b=32" and saved["run"] == "adam b=32, base lr x2"
    assert st.summary(r, 4.5)["label"] == "adam b=32, base lr x2"


def test_the_lessons_study_shares_one_budget_and_splits_the_large_batch_over_the_ranks():
    kw = dict(small_batch=32, large_batch=256, num_train=100_000, large_factor=4, max_micro_batch=64,
              common=dict(model="mini", seed=0))
    note, one = st.make_study(30, world_size=1, **kw)
    assert note == "" and (one.small_seqs, one.large_seqs) == st.budget(256, 100_000, large_batches=30,
                                                                          large_factor=4)[:2]
    assert one.micro_batch == 64 and one.base_lrs == {"adam": 1e-3, "lamb": 1e-2}
    _, four = st.make_study(30, world_size=8, **kw)
    assert four.micro_batch == 32  # 256 over 8 ranks
    capped, small = st.make_study(30, world_size=1, **{**kw, "num_train": 1000})
    assert "capped" in capped and small.large_seqs < one.large_seqs


def test_the_budget_line_says_the_steps_each_batch_gets():
    # #37, third full run: "budget: 2560 sequences at the small batch, 10240 at the large one (10 large batches'
    # worth: the steps above, rounded)": 10240 sequences are 40 batches of 256; the 10 were the small batch's
    kw = dict(small_batch=32, large_batch=256, num_train=100_000, large_factor=4, max_micro_batch=64, world_size=1,
              common=dict(model="mini", seed=0))
    _, sized = st.make_study(10, **kw)
    line = st.budget_line(sized, 10, cut=True)
    assert line.startswith("budget: 2560 sequences at the small batch, 10240 at the large one (2560 = 10 large "
                           "batches' worth, the large batch 4x that: 80 steps at batch 32, 40 at batch 256")
    assert sized.config("lamb", 32).max_steps == 80 and sized.config("lamb", 256).max_steps == 40
    _, full = st.make_study(30, **kw)  # nothing cut: no parenthesis; a capping note is said instead
    assert st.budget_line(full, 30, cut=False) == "budget: 7680 sequences at the small batch, 30720 at the large one"
    assert st.budget_line(full, 30, cut=True, note="NOTE: capped") == "NOTE: capped"
    assert "240 steps at batch 32, 120 at batch 256" in st.budget_line(full, 30, cut=True)


def test_batch_reading_leaves_the_throughput_unresolved_where_runs_at_one_batch_spread_over_both():
    # #37 (third full run, read r3b): on a busy machine Adam's runs at batch 32 ran at 47.5-182.0 sequences/s
    # (the same work per step), the large batch's at 109.7-121.7: a "throughput gain" of one run over another is
    # the machine's load
    from course_lib.lessons.l07_bert_lamb import batch_reading, rate_spread

    runs = {"adam b=32": _mlm(36, 4.0, seqs_per_s=47.5, batch=32),
            "adam b=256 (best lr)": _mlm(24, 4.0, seqs_per_s=121.7, batch=256),
            "adam b=256 (best lr, seed 1)": _mlm(24, 4.0, seqs_per_s=115.0, batch=256)}
    sweeps = {"adam b=32, base lr x0.5": _mlm(60, 4.0, seqs_per_s=54.5, batch=32),
              "adam b=32, base lr x2": _mlm(None, 4.5, seqs_per_s=182.0, batch=32),
              "adam b=256, sqrt rule x0.25": _mlm(None, 4.6, seqs_per_s=109.7, batch=256),
              "lamb b=32, base lr x1": _mlm(40, 4.0, seqs_per_s=500.0, batch=32)}  # another optimizer
    assert rate_spread({**sweeps, **runs}, "adam", 32) == (47.5, 182.0)
    # read f12e 07-C1: the batch's spread is every run's at it, whichever optimizer (the same work per step)
    assert rate_spread({**sweeps, **runs}, None, 32) == (47.5, 500.0)
    busy = batch_reading(runs, 4.1, 32, 256, "adam", others=sweeps)
    assert "ran at 2.56x the sequences/s" in busy  # 121.7 / 47.5, the two runs' cells
    assert ("but runs at one batch, both optimizers', ran at 47.5-500 sequences/s at batch 32 and 109.7-121.7 at "
            "batch 256 (the same work per step, so something outside the step moved: on a shared machine, other jobs; "
            "no cell here measured which), so the throughput side is not resolved here") in busy  # read r4b 07-1
    assert "the machine's load" not in busy
    assert busy.endswith(": the extra sequences it needed are what the measurement can tell (sample efficiency)")
    assert "gain" not in busy
    # the opposite: a quiet machine, each batch's runs close together and apart from the other's: read as before
    quiet = {k: {**r, "seqs_per_s": (300.0 if "b=32" in k else 280.0) + i} for i, (k, r) in
             enumerate({**sweeps, **runs}.items())}
    calm = batch_reading({k: quiet[k] for k in runs}, 4.1, 32, 256, "adam",
                         others={k: quiet[k] for k in sweeps})
    assert "not resolved" not in calm and "there was no throughput gain" in calm
    # without the sweeps (one run at the small batch): no spread to read, as before
    assert "not resolved" not in batch_reading(runs, 4.1, 32, 256, "adam")
