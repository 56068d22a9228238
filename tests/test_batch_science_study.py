"""Lesson 11's readings: the critical batch fitted to steps-to-target, and every verdict on both outcomes."""

import math
from types import SimpleNamespace

import pytest
import torch

from course_lib.lessons import l11_batch_size_science as study
from course_lib.parallel import sync_batchnorm as sbn


def _curve(b_crit, s_min=100, batches=(256, 1024, 4096, 16384)):
    return [{"batch size": b, "steps to target": round(s_min * (1 + b_crit / b))} for b in batches]


def test_critical_batch_recovers_the_model_it_fits():
    fit = study.critical_batch(_curve(2000))
    assert fit["status"] == "fit" and fit["b_crit"] == pytest.approx(2000, rel=0.02)
    assert fit["s_min"] == pytest.approx(100, rel=0.02)
    perfect = [{"batch size": b, "steps to target": 1_000_000 // b} for b in (256, 1024, 4096)]
    assert study.critical_batch(perfect)["status"] == "no bend"
    assert study.critical_batch(_curve(2000)[:2])["status"] == "too few points"
    beyond = study.critical_batch(_curve(100_000))
    assert beyond["status"] == "beyond range" and beyond["b_crit"] > 16384


def _noisy(b_crit, s_min=100, batches=(256, 1024, 4096, 16384), rel=0.0, resolution=0.0):
    """The model's steps at each batch, off by +rel, -rel, +rel, ... (a seed's scatter), each known to within
    ``resolution`` of itself (the evaluation spacing)."""
    out = []
    for i, b in enumerate(batches):
        s = round(s_min * (1 + b_crit / b) * (1 + rel * (-1) ** i))
        out.append({"batch size": b, "steps to target": s, "resolution (steps)": max(1, round(resolution * s))})
    return out


def test_the_fits_range_widens_with_the_points_error_and_decides_the_bend_both_ways():
    exact = study.critical_batch(_curve(2000))
    lo, hi = exact["range"]
    assert lo <= exact["b_crit"] <= hi and hi / lo < 1.05  # exact points: a narrow range around the model's
    noisy = study.critical_batch(_noisy(2000, rel=0.1))
    assert noisy["rel_error"] > 0.05 and noisy["rel_error_from"] == "the scatter about the fit"
    assert noisy["range"][1] / noisy["range"][0] > hi / lo  # more scatter, a wider range
    spaced = study.critical_batch(_noisy(2000, resolution=0.2))
    assert spaced["rel_error_from"] == "the evaluation spacing"
    assert spaced["rel_error"] == pytest.approx(0.2 / math.sqrt(12), rel=0.05)
    # opposite results: a bend inside the range, none up to the largest batch, and a range that holds both
    assert exact["bend"] == "bend" and study.bend_reading(exact).startswith("A bend, decided")
    far = study.critical_batch(_noisy(1e6, batches=(4096, 16384, 65536), rel=0.02))
    assert far["bend"] == "no bend" and study.bend_reading(far).startswith(
        "The critical batch lies above every batch measured (up to 65,536), decided")
    assert "No bend" not in study.bend_reading(far) and "already bends gradually" in study.bend_reading(far)
    edge = study.critical_batch(_noisy(65536, batches=(4096, 16384, 65536), rel=0.15))
    assert edge["bend"] == "not decided" and "is not decided" in study.bend_reading(edge)
    perfect = study.critical_batch([{"batch size": b, "steps to target": 1_000_000 // b} for b in (256, 1024, 4096)])
    assert perfect["status"] == "no bend" and math.isinf(perfect["range"][1]) and perfect["bend"] == "no bend"
    few = study.critical_batch(_curve(2000)[:2])
    assert few["bend"] == "not decided" and "fewer than the 3" in study.bend_reading(few)


def test_fieller_range_is_bounded_only_when_the_denominator_is_resolved():
    assert study._fieller(10.0, 1000.0, 0.0, 0.0, 0.0) == pytest.approx((100.0, 100.0))
    lo, hi = study._fieller(10.0, 1000.0, 4.0, 100.0, 0.0)  # a = 10 +/- 2: resolved at 2 s.e.
    assert lo < 100 < hi < math.inf
    lo, hi = study._fieller(10.0, 1000.0, 36.0, 100.0, 0.0)  # a = 10 +/- 6: 0 lies within 2 s.e.
    assert math.isinf(hi) and 0 < lo < 100


def test_noise_verdict_both_ways():
    fit = study.critical_batch(_curve(2000))
    assert study.noise_verdict(2500, fit).endswith("within the factor 3 McCandlish et al. report.")
    no = study.noise_verdict(40000, fit)
    assert "Outside the factor 3" in no and "does not predict" in no and "lr tuned at every batch" in no
    assert "Outside" in study.noise_verdict(100, fit)
    # an unbounded B_crit (no S_min within the errors): only "far below it" decides
    open_ended = study.critical_batch(_noisy(1e6, batches=(4096, 16384, 65536), rel=0.1))
    assert math.isinf(open_ended["range"][1])
    assert "Outside" in study.noise_verdict(50, open_ended)
    assert "Not decided" in study.noise_verdict(open_ended["range"][0], open_ended, stderr=1.0)
    assert "fewer than 3" in study.noise_verdict(10, study.critical_batch([]))
    assert "not positive" in study.noise_verdict(math.inf, fit)


def test_noise_verdict_reads_the_curve_it_fits_and_the_stated_error():
    # review 2026-12-01 #18-#20: lesson 02's 285 -> 100 steps for 4x the batch is not "no bend yet"; an
    # unweighted fit gave a negative intercept; the stated errors (B_simple's and the fit's) decide
    rows = [{"batch size": b, "steps to target": s} for b, s in ((256, 17406), (1024, 4400), (4096, 1150),
                                                                 (16384, 285), (65536, 100))]
    fit = study.critical_batch(rows)
    assert fit["status"] in ("fit", "beyond range") and fit["s_min"] > 0
    said = study.noise_verdict(6613, fit, stderr=1800)
    assert "from batch 16,384 to 65,536 (x4) the steps to target fell 285 -> 100 (x2.85; perfect scaling: x4)" in said
    assert "B_simple = 6,600 +/- 1,800" in said  # r8d 11-3: at the error's precision
    near = {**fit, "b_crit": 6613 * 3.3, "range": (6613 * 3.1, 6613 * 3.6)}
    assert "Not decided" in study.noise_verdict(6613, near, stderr=1800)
    assert "Outside" in study.noise_verdict(6613, near, stderr=10)
    assert "Not decided" in study.noise_verdict(6613, {**near, "range": (6613 * 0.5, 6613 * 3.6)}, stderr=10)
    assert "within the factor" in study.noise_verdict(6613, {**fit, "b_crit": 6613.0, "range": (6000, 7000)},
                                                      stderr=100)


def _noise_tab(values, errors, repeats=None):
    probes = [{"epoch": 0.25 * (i + 1), "step": i, "hr": 0.5, "b_simple": v, "stderr": e, "trace_cov": 1.0,
               "grad_sq_norm": 1.0, **({"repeats": repeats[i]} if repeats else {})}
              for i, (v, e) in enumerate(zip(values, errors))]
    return study.noise_table(SimpleNamespace(probes=probes))


def test_noise_trend_reads_growth_only_beyond_the_errors():
    noisy = _noise_tab([4906, 29838, 39227, 6613], [1600, 29000, 32000, 1800])  # review 2026-12-01 #19
    said = study.noise_trend(noisy)
    assert "did not change beyond its errors" in said and "4,900, 30,000, 39,000, 6,600" in said  # r8d 11-3
    fit = study.trend_fit(noisy)
    assert abs(fit["slope"]) < 2 * fit["stderr"]
    assert "grew" in study.noise_trend(_noise_tab([1000, 5000, 9000], [100, 100, 100]))
    assert "fell" in study.noise_trend(_noise_tab([9000, 5000, 1000], [100, 100, 100]))
    # the same two ends, but the middle far off the line: the scatter widens the slope's error, undecided
    assert "did not change" in study.noise_trend(_noise_tab([1000, 40000, 9000], [100, 100, 100]))
    assert "no trend" in study.noise_trend(_noise_tab([1000], [100]))


def test_the_repeats_sentence_says_where_the_stated_error_was_met():
    tab = _noise_tab([1000, 2000, 3000], [100, 250, 900], repeats=[24, 48, 384])
    assert "stderr / B_simple" in tab.columns and "repeats" in tab.columns
    said = study.repeats_sentence(tab, 0.15, 384)
    assert "met at 2 of 3 measurements, with 24-384 gradient pairs" in said and "NOISE_MAX_REPEATS = 384" in said
    every = study.repeats_sentence(_noise_tab([1000, 2000], [100, 200], repeats=[24, 24]), 0.15, 384)
    assert "met at 2 of 2 measurements, with 24 gradient pairs each." in every and "MAX" not in every
    assert "no repeats" in study.repeats_sentence(_noise_tab([1000], [100]), 0.15, 384)


def _fake_runs(steps_at, monkeypatch):
    """``train_to_target`` replaced by a table: ``steps_at(batch, lr) -> steps to target`` (None: never), each run
    stopping at its ``max_steps``; returns the settings it was called with."""
    from course_lib import train

    calls = []

    def fake(data, cfg, **kw):
        calls.append(cfg)
        need = steps_at(cfg.global_batch_size, cfg.peak_lr)
        cap = cfg.max_steps or 10 ** 6
        hit = need is not None and need <= cap
        steps = need if hit else cap
        return SimpleNamespace(steps_to_target=need if hit else None, epochs_to_target=steps / 100 if hit else None,
                               reached=hit, epochs=steps / 100, samples=steps * cfg.global_batch_size,
                               best_hr=0.8 if hit else 0.5, curve={"step": [0, steps - 10, steps]})

    monkeypatch.setattr(train, "train_to_target", fake)
    return calls


def test_the_tuned_sweep_picks_the_fewest_steps_and_stops_what_cannot_win(monkeypatch):
    from course_lib.train.ncf import TrainConfig

    base = TrainConfig(global_batch_size=256, optimizer="adam", base_lr=1e-3, max_epochs=1.0)
    # at 1024 the rule's lr is best; at 4096 twice it, and four times it (the edge extension) better still
    table = {(1024, 1): 400, (1024, 0.5): 900, (1024, 2): 500, (4096, 1): 200, (4096, 2): 150, (4096, 4): 120}

    def steps_at(b, lr):
        f = round(lr / (1e-3 * math.sqrt(b / 256)), 3)
        return table.get((b, f))

    calls = _fake_runs(steps_at, monkeypatch)
    sweep = study.tuned_sweep(None, base, (1024, 4096), max_epochs=2.0, eval_every_epochs=0.25)
    assert [c.max_steps for c in calls[:3]] == [None, 400, 400]  # the rule's lr first, the others capped by it
    chosen = {r["batch size"]: r["x rule lr"] for r in sweep if r["chosen"]}
    assert chosen == {1024: 1.0, 4096: 4.0}  # 4x came from the edge extension
    assert sorted(r["x rule lr"] for r in sweep if r["batch size"] == 4096) == [0.5, 1.0, 2.0, 4.0]
    missed = [r for r in sweep if r["batch size"] == 1024 and r["x rule lr"] == 0.5][0]
    assert missed["steps to target"] is None and missed["capped at"] == 400
    assert calls[0].dense_eval_margin > 0  # evaluation grows dense near the target, as in lesson 02
    tab = study.tuned_table(sweep, [{"batch size": 1024, "steps to target": 450}])
    assert "not by step 400" in str(tab) and "450" in str(tab)
    assert study.tuned_rows(sweep) == [{"batch size": 1024, "lr": sweep[1]["lr"], "steps to target": 400,
                                        "resolution (steps)": 10},
                                       {"batch size": 4096, "lr": sweep[-1]["lr"], "steps to target": 120,
                                        "resolution (steps)": 10}]
    assert "runs at 2 batches" in study.sweep_cost_sentence(sweep)
    with pytest.raises(ValueError, match="SWEEP_LR_FACTORS"):
        study.tuned_sweep(None, base, (1024,), (0, 1), max_epochs=2.0, eval_every_epochs=0.25)


def test_the_tuned_sweep_takes_lesson02s_run_at_the_rules_lr_instead_of_running_it_again(monkeypatch):
    from course_lib.train.ncf import TrainConfig

    base = TrainConfig(global_batch_size=256, optimizer="adam", base_lr=1e-3, max_epochs=1.0)
    calls = _fake_runs(lambda b, lr: 500, monkeypatch)
    saved = {"profile": "full", "rows": [
        {"rule": "sqrt", "batch size": 1024, "lr": 2e-3, "steps to target": 400, "resolution (steps)": 20},
        {"rule": "linear", "batch size": 4096, "lr": 1.6e-2, "steps to target": 90},  # another rule: not taken
        {"rule": "sqrt", "batch size": 4096, "lr": 5e-3, "steps to target": 100}]}  # another lr: run again
    known = study.rule_runs_from_lesson02(saved, "full")
    assert set(known) == {1024, 4096} and study.rule_runs_from_lesson02(saved, "smoke") == {}
    sweep = study.tuned_sweep(None, base, (1024, 4096), (0.5, 1.0, 2.0), max_epochs=2.0, eval_every_epochs=0.25,
                              max_extensions=0, known=known)
    assert len(calls) == 5 and [c.max_steps for c in calls[:2]] == [400, 400]  # capped by lesson 02's steps
    reused = [r for r in sweep if r["from"] == "lesson 02"]
    assert [(r["batch size"], r["steps to target"], r["chosen"]) for r in reused] == [(1024, 400, True)]
    assert "(lesson 02's run)" in str(study.tuned_table(sweep))
    assert "1 rule-lr points are lesson 02's runs" in study.sweep_cost_sentence(sweep)


def test_lesson02_rows_take_the_fastest_rule_and_refuse_too_little():
    saved = {"rows": [{"batch size": 1024, "steps to target": 300}, {"batch size": 1024, "steps to target": 250},
                      {"batch size": 4096, "steps to target": None}, {"batch size": 256, "steps to target": 900},
                      {"batch size": 4096, "steps to target": 90}]}
    assert study.steps_rows_from_lesson02(saved) == [{"batch size": 256, "steps to target": 900},
                                                     {"batch size": 1024, "steps to target": 250},
                                                     {"batch size": 4096, "steps to target": 90}]
    assert study.steps_rows_from_lesson02(None) is None
    assert study.steps_rows_from_lesson02({"rows": saved["rows"][:2]}) is None
    assert study.steps_rows_from_lesson02({**saved, "profile": "smoke"}, profile="full") is None
    assert len(study.steps_rows_from_lesson02({**saved, "profile": "full"}, profile="full")) == 3


def _row(batch, top, gap):
    return {"batch": batch, "top eigenvalue": top, "gap": gap}


def test_sharpness_verdict_every_outcome():
    assert study.sharpness_verdict(_row(256, 1.0, 0.01), _row(8192, 3.0, 0.05)).startswith("As Keskar")
    assert "did not move together" in study.sharpness_verdict(_row(256, 1.0, 0.05), _row(8192, 3.0, 0.01))
    assert "did not move together" in study.sharpness_verdict(_row(256, 1.0, 0.02), _row(8192, 1.02, 0.02))
    assert "moved together" in study.sharpness_verdict(_row(256, 3.0, 0.05), _row(8192, 1.0, 0.01))
    assert "not measured" in study.sharpness_verdict(_row(256, 1.0, None), _row(8192, 2.0, None))


def _run(steps, hr, reached=True, t=1.0):
    return SimpleNamespace(steps=steps, final_hr=hr, reached=reached, time_to_target_s=t if reached else None)


def test_growth_verdict_every_outcome():
    assert "as Smith et al." in study.growth_verdict(_run(1000, 0.60), _run(400, 0.605))
    assert "accuracy fell" in study.growth_verdict(_run(1000, 0.60), _run(400, 0.50))
    assert "better final HR" in study.growth_verdict(_run(1000, 0.50), _run(400, 0.60))
    assert "no saving" in study.growth_verdict(_run(400, 0.60), _run(400, 0.60))
    # #37 (fourth full run, read r4c): both runs reached the target at step 304, before the milestone: the seconds
    # (9.774 against 7.42) are the machine's pace; at different steps the time to target is read as before
    decay, grow = _run(455, 0.7911, t=9.774), _run(341, 0.7858, t=7.42)
    decay.steps_to_target = grow.steps_to_target = 304
    said = study.growth_verdict(decay, grow)
    assert "time to target 7.4 s vs 9.8 s for the same 304 steps to the target" in said and "machine's pace" in said
    grow.steps_to_target = 200
    assert "machine's pace" not in study.growth_verdict(decay, grow)


def _bn_rows(small_local, small_sync):
    rows = []
    for b, acc in ((4, {"local BN": small_local, "synchronized BN": small_sync}), (64, {"local BN": 0.9,
                                                                                      "synchronized BN": 0.9})):
        for v, a in acc.items():
            rows.append({"per_rank_batch": b, "global_batch": 2 * b, "variant": v, "test_accuracy": a,
                         "step_ms": 2.0 if v == "synchronized BN" else 1.0})
    return rows


def test_bn_verdict_and_table_both_ways():
    hurt = study.bn_verdict(_bn_rows(0.70, 0.85))
    assert "synchronized BN" in hurt and "the few samples per rank cost accuracy" in hurt and "x2.0" in hurt
    assert "not beaten" in study.bn_verdict(_bn_rows(0.85, 0.80))
    assert "no measurable loss" in study.bn_verdict(_bn_rows(0.849, 0.85))


def test_bn_verdict_points_at_the_running_averages_when_sync_does_not_help():
    # review 2026-12-01 #23: sync BN = local BN (0.857/0.858), recomputed statistics +0.029 even at 256 per rank
    rows = _bn_rows(0.857, 0.858)
    for b, acc in ((4, 0.90), (64, 0.929)):
        rows.append({"per_rank_batch": b, "global_batch": 2 * b, "variant": "local BN, recomputed stats",
                     "test_accuracy": acc, "step_ms": 1.0})
    said = study.bn_verdict(rows)
    assert "Synchronized statistics did not help (0.858)" in said
    assert "the running averages cost accuracy at every batch here" in said  # r8d 11-1: not "not the batch size"
    assert "three extra" not in said
    t = study.bn_table(_bn_rows(0.7, 0.85))
    assert "2 ranks" in t.title and len(t.rows) == 2


def test_ncf_sampler_and_loss_follow_the_estimators_convention():
    data = SimpleNamespace(train_users=torch.arange(50), train_items=torch.arange(50) % 7, num_items=20)
    users, items, labels = study.ncf_sampler(data, seed=1)(4000)
    assert users.shape == items.shape == labels.shape == (4000,)
    assert 0.15 < float(labels.mean()) < 0.25  # 1 positive per 4 negatives
    assert torch.equal(items[labels.bool()], data.train_items[users[labels.bool()]])

    class Dot(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))

        def forward(self, u, i):
            return self.w * (u - i).float()

    with torch.no_grad():
        assert float(study.ncf_loss(Dot(), (users, items, labels))) == pytest.approx(math.log(2))


def test_recomputed_statistics_are_the_populations():
    torch.manual_seed(0)
    model = sbn.bn_variant_model("local BN", 8, 16)
    x, _ = sbn.bn_task(2048, 8, seed=0)
    sbn.recompute_batchnorm_stats(model, x, batch_size=256)
    with torch.no_grad():
        h = model.fc1(x)
    assert torch.allclose(model.bn.running_mean, h.mean(0), atol=1e-4)
    assert torch.allclose(model.bn.running_var, h.var(0), rtol=0.01)
    assert model.bn.momentum == 0.1  # restored
    wn = sbn.bn_variant_model("weight norm (no BN)", 8, 16)
    assert not any(isinstance(m, torch.nn.BatchNorm1d) for m in wn.modules())
    with pytest.raises(ValueError, match="unknown BatchNorm variant"):
        sbn.bn_variant_model("group norm", 8, 16)


# --------------------------------------------------------------------------- lesson 07's BERT


def test_two_points_give_the_critical_batch_of_the_model_through_them():
    for b_crit in (64, 500, 4000):
        rows = [{"batch size": b, "steps to target": 100 * (1 + b_crit / b)} for b in (32, 256)]
        assert study.two_point_critical_batch(rows) == pytest.approx(b_crit)
    perfect = [{"batch size": 32, "steps to target": 800}, {"batch size": 256, "steps to target": 100}]
    assert study.two_point_critical_batch(perfect) == math.inf
    flat = [{"batch size": 32, "steps to target": 100}, {"batch size": 256, "steps to target": 100}]
    assert study.two_point_critical_batch(flat) is None


def test_bert_noise_verdict_every_outcome():
    rows = [{"batch size": 32, "steps to target": 100 * (1 + 200 / 32)},
            {"batch size": 256, "steps to target": 100 * (1 + 200 / 256)}]
    agree = study.bert_noise_verdict(300.0, rows)
    assert "B_crit = 200" in agree and "within the factor 3" in agree and "x8" in agree
    assert "outside the factor 3" in study.bert_noise_verdict(5000.0, rows)
    perfect = [{"batch size": 32, "steps to target": 800}, {"batch size": 256, "steps to target": 100}]
    assert ("no bend" in study.bert_noise_verdict(1000.0, perfect)
            and "B_simple agrees" in study.bert_noise_verdict(1000.0, perfect))
    assert "predicted a bend the runs did not show" in study.bert_noise_verdict(10.0, perfect)
    flat = [{"batch size": 32, "steps to target": 100}, {"batch size": 256, "steps to target": 100}]
    assert "B_simple agrees" in study.bert_noise_verdict(20.0, flat)
    assert "did not show" in study.bert_noise_verdict(5000.0, flat)
    assert "missing" in study.bert_noise_verdict(100.0, None)
    # a smoke copy read B_simple 201 +/- 2,405 as "outside the factor 3" right after saying it predicts nothing
    assert "not decided" in study.bert_noise_verdict(5000.0, rows, stderr=6000.0)
    noisy = study.bert_noise_verdict(300.0, rows, stderr=400.0)
    assert (noisy.startswith("BERT's B_simple = 300 +/- 400 sequences") and "predicts nothing yet" in noisy
            and "B_crit = 200" in noisy)
    assert study.bert_noise_verdict(300.0, rows, stderr=30.0).startswith(agree.split(" The two points")[0])
    assert "within two standard errors), within the factor" in study.bert_noise_verdict(300.0, rows, stderr=30.0)
    assert "all noise" in study.bert_noise_verdict(math.inf, rows)


def test_bert_setting_repeats_lesson07s_small_adam_run_and_reads_its_steps():
    plan = SimpleNamespace(bert_model="mini", bert_seq_len=64, bert_vocab_size=4096, bert_large_batch_factor=8)
    saved = {
        "profile": "full",
        "model": "mini",
        "seq_len": 64,
        "target_loss": 5.1,
        "runs": [
            {"label": "adam b=32", "global_batch_size": 32, "steps": 240, "steps_to_loss": 228},
            {"label": "lamb b=32", "global_batch_size": 32, "steps": 240, "steps_to_loss": 216},
            {"label": "adam b=256, sqrt rule x0.5", "global_batch_size": 256, "steps": 120, "steps_to_loss": 48},
            {"label": "adam b=256 (best lr, seed 1)", "global_batch_size": 256, "steps": 120, "steps_to_loss": 36},
        ],
    }
    got = study.bert_setting(saved, "full", plan)
    cfg = got["config"]
    assert ((cfg.optimizer, cfg.global_batch_size, cfg.max_steps, cfg.peak_lr, cfg.dropout)
            == ("adam", 32, 240, 1e-3, 0.0))
    # no saved curves here: the counts' resolution is unknown (r10e 11-H5)
    assert got["rows"] == [{"batch size": 32, "steps to target": 228, "resolution (steps)": None},
                           {"batch size": 256, "steps to target": 48, "resolution (steps)": None}]
    assert (got["small_batch"], got["large_batch"], got["target_loss"]) == (32, 256, 5.1)
    other = study.bert_setting(saved, "smoke", plan)  # another profile's result is not compared
    assert other["rows"] is None and other["target_loss"] is None and "defaults" in other["source"]
    missed = dict(saved, runs=[dict(r, steps_to_loss=None) if "256" in r["label"] else r for r in saved["runs"]])
    assert study.bert_setting(missed, "full", plan)["rows"] is None


def test_probe_steps_spread_over_the_evaluations_and_keep_the_last():
    cfg = SimpleNamespace(eval_every_steps=12, max_steps=240)
    assert study.probe_steps(cfg, 5) == {12, 72, 132, 180, 240}
    assert study.probe_steps(SimpleNamespace(eval_every_steps=1, max_steps=3), 10) == {1, 2, 3}
    assert study.probe_steps(cfg, 1) == {240}


def test_bert_b_simple_at_target_takes_the_first_probe_there():
    rec = {"probes": [{"step": 2, "eval_loss": 6.0, "b_simple": 10.0}, {"step": 4, "eval_loss": 5.0, "b_simple": 20.0},
                      {"step": 6, "eval_loss": 4.0, "b_simple": 30.0}]}
    assert study.mlm_b_simple_at_target(rec, 5.5)["b_simple"] == 20.0
    assert "did not reach" in study.mlm_b_simple_at_target(rec, 1.0)["at"]
    assert study.mlm_b_simple_at_target(rec, None)["b_simple"] == 30.0
    with pytest.raises(ValueError, match="no noise-scale probe"):
        study.mlm_b_simple_at_target({"probes": []}, 5.0)


def test_sharpness_verdict_does_not_decide_when_eigenvalue_and_trace_disagree():
    # review 2026-12-01 #21: "sharper" by the top eigenvalue while the Hessian trace said flatter (5.54 vs 6.86)
    small = {**_row(4096, 1.0, 0.01), "Hessian trace": 6.86}
    large = {**_row(65536, 2.0, 0.05), "Hessian trace": 5.54}
    said = study.sharpness_verdict(small, large)
    assert said.startswith("Not decided") and "sharper" in said and "flatter (5.54 vs 6.86)" in said
    agree = study.sharpness_verdict(small, {**large, "Hessian trace": 9.0})
    assert agree.startswith("As Keskar")


def test_repeats_for_error_scales_with_the_square_of_the_error():
    # review 2026-12-01: 24 repeats gave standard errors of 27-97%
    assert "27% of it at 24 repeats; 20% needs about 45" in study.repeats_for_error(6613, 1800, 24)
    assert "within 20%" in study.repeats_for_error(1000, 100, 24)
    assert "no finite" in study.repeats_for_error(math.inf, 1.0, 24)


def _scaling_paces(neumf_step_s: float, bert_step_s: float):
    """A NeuMF run (100 steps), a plain one with 10 evaluations of 0.5 s, and a BERT run (240 steps, 20
    evaluations of 0.1 s) at the given paces: what lesson 11's earlier cells hand :func:`study.size_scaling`."""
    neumf = SimpleNamespace(train_time_s=100 * neumf_step_s, steps=100, eval_time_s=99.0, curve={"step": [0]})
    plain = SimpleNamespace(train_time_s=1.0, steps=10, eval_time_s=5.0, curve={"step": list(range(10))})
    bert = {"train_time_s": 240 * bert_step_s, "steps": 240, "eval_time_s": 2.0,
            "curves": {"eval_step": list(range(20))}}
    return dict(neumf_run=neumf, neumf_eval_run=plain, neumf_runs=6, neumf_steps=1800, neumf_evals=12, bert_run=bert,
                bert_runs=4, bert_steps=240)


def test_the_scaling_sections_take_what_the_lessons_budget_has_left():
    # full plan: 6 x (1800 x 0.01 + 12 x 0.5) + 4 x (240 x 0.1 + 20 x 0.1) = 144 + 104 = 248 s
    fast = study.size_scaling(1000, 100, **_scaling_paces(0.01, 0.1))
    assert not fast.cut and fast.steps(1800) == 1800 and round(fast.planned_full_s) == 248
    # 400 s budget, 200 s gone, 40 s for the cells after: 160 s left, the runs' steps cut alike
    cut = study.size_scaling(400, 200, **_scaling_paces(0.01, 0.1))
    assert cut.cut and not cut.over_budget and cut.planned_s <= 160 + 1e-9
    assert 1800 * study.SCALING_FLOOR <= cut.steps(1800) < 1800 and cut.steps(240) < 240
    assert "budget 160 s" in cut.line() and "x0." in cut.line()
    # a slow machine (or a lesson already over its budget): the floor, said so
    slow = study.size_scaling(400, 390, **_scaling_paces(0.05, 0.5))
    assert slow.over_budget and slow.steps(1800) == round(1800 * study.SCALING_FLOOR)
    assert "Even this floor is over the budget" in slow.line()


def test_the_sized_bert_setting_keeps_its_rules():
    from course_lib.train.mlm import MLMTrainConfig

    cfg = MLMTrainConfig(optimizer="adam", global_batch_size=32, micro_batch_size=32, base_lr=1e-3, base_batch_size=32,
                         max_steps=240, warmup_steps=24, eval_every_steps=12, model="mini")
    short = study.sized_bert_config(cfg, 80)
    assert (short.max_steps, short.warmup_steps, short.eval_every_steps) == (80, 8, 4)
    assert short.peak_lr == cfg.peak_lr and short.global_batch_size == 32
