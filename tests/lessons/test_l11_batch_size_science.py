"""Lesson 11: the estimators' adapters, the tuned sweep and the critical batch, and each section's comparisons
on a clear and an unclear case (fed simulated rows, or rows a full run recorded)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from course_lib import compare
from course_lib.lessons import l11_batch_size_science as study
from course_lib.parallel import sync_batchnorm as sbn

# --------------------------------------------------------------------------- section 1: the noise scale


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


def _probes(values, errors, repeats=None):
    return [{"epoch": 0.25 * (i + 1), "step": i, "hr": 0.5, "b_simple": v, "stderr": e, "trace_cov": 1.0,
             "grad_sq_norm": 1.0, **({"repeats": repeats[i], "b_small": 256, "b_big": 8192} if repeats else {})}
            for i, (v, e) in enumerate(zip(values, errors))]


def test_the_trend_is_decided_only_beyond_the_probes_errors():
    # a full run's probes: the middle two far off with errors as large as themselves
    assert study.trend_comparison(_probes([4906, 29838, 39227, 6613], [1600, 29000, 32000, 1800])).outcome \
        == compare.UNRESOLVED
    assert study.trend_comparison(_probes([1000, 5000, 9000], [100, 100, 100])).outcome == compare.HIGHER
    assert study.trend_comparison(_probes([9000, 5000, 1000], [100, 100, 100])).outcome == compare.LOWER
    # the same two ends, the middle far off the line: the scatter widens the slope's error
    assert study.trend_comparison(_probes([1000, 40000, 9000], [100, 100, 100])).outcome == compare.UNRESOLVED
    two = study.trend_comparison(_probes([1000, 9000], [100, 100]))  # two points: the stated errors alone
    assert two.outcome == compare.HIGHER and two.low > 0
    assert study.trend_comparison(_probes([1000], [100])) is None


def test_the_noise_table_and_the_cost_table_carry_each_probes_pairs():
    probes = _probes([1000, 2000, 3000], [100, 250, 900], repeats=[24, 48, 384])
    tab = study.noise_table(probes)
    assert "stderr / B_simple" in tab.columns and [r["repeats"] for r in tab.rows] == [24, 48, 384]
    cost = study.probe_cost_table({"run": SimpleNamespace(probes=probes, probe_time_s=2.0, train_time_s=4.0)})
    row = cost.rows[0]
    assert row["gradient pairs each"] == "24-384" and row["backward passes each"] == "48-768"
    assert row["probes / training"] == "50%"
    bert = study.probe_cost_table({"bert": {"probes": _probes([10], [1]), "probe_time_s": 1.0, "train_time_s": 1.0}})
    assert bert.rows[0]["gradient pairs each"] == "-"


def test_probe_steps_spread_over_the_evaluations_and_keep_the_last():
    cfg = SimpleNamespace(eval_every_steps=12, max_steps=240)
    assert study.probe_steps(cfg, 5) == {12, 72, 132, 180, 240}
    assert study.probe_steps(SimpleNamespace(eval_every_steps=1, max_steps=3), 10) == {1, 2, 3}
    assert study.probe_steps(cfg, 1) == {240}


def test_bert_b_simple_at_target_takes_the_first_probe_there():
    rec = {"probes": [{"step": 2, "eval_loss": 6.0, "b_simple": 10.0}, {"step": 4, "eval_loss": 5.0, "b_simple": 20.0},
                      {"step": 6, "eval_loss": 4.0, "b_simple": 30.0}]}
    assert study.b_simple_at_target(rec, 5.5)["b_simple"] == 20.0
    assert study.b_simple_at_target(rec, 1.0)["b_simple"] == 30.0  # never reached: the last probe
    assert study.b_simple_at_target(rec, None)["b_simple"] == 30.0
    with pytest.raises(ValueError, match="no noise-scale probe"):
        study.b_simple_at_target({"probes": []}, 5.0)
    neumf = SimpleNamespace(target_hr=0.5, probes=[dict(p, hr=h) for p, h in zip(rec["probes"], (0.3, 0.5, 0.6))])
    assert study.b_simple_at_target(neumf)["b_simple"] == 20.0


PLAN = SimpleNamespace(bert_model="mini", bert_seq_len=64, bert_vocab_size=4096, bert_large_batch_factor=8)


def test_bert_setting_repeats_lesson07s_small_adam_run_in_its_precision():
    saved = {"profile": "full", "model": "mini", "seq_len": 64, "target_loss": 5.1, "runs": [
        {"label": "adam b=32", "global_batch_size": 32, "steps": 240, "steps_to_loss": 228},
        {"label": "lamb b=32", "global_batch_size": 32, "steps": 240, "steps_to_loss": 216},
        {"label": "adam b=256, sqrt rule x0.5", "global_batch_size": 256, "steps": 120, "steps_to_loss": 48}]}
    got = study.bert_setting(saved, "full", PLAN)
    cfg = got["config"]
    assert ((cfg.optimizer, cfg.global_batch_size, cfg.max_steps, cfg.peak_lr, cfg.dropout)
            == ("adam", 32, 240, 1e-3, 0.0))
    assert (got["small_batch"], got["large_batch"], got["target_loss"]) == (32, 256, 5.1)
    assert cfg.precision == study.lesson07_precision(None, None)  # lesson 07's own setting where none was saved
    other = study.bert_setting(saved, "smoke", PLAN)  # another profile's result is not repeated
    assert other["target_loss"] is None and "defaults" in other["source"]


def test_lesson07s_precision_is_read_from_its_run_then_its_result():
    assert study.lesson07_precision({"precision": "bf16"}, {"precision": "fp32"}) == "bf16"
    assert study.lesson07_precision({"precision": {"mode": "bf16"}}, None) == "bf16"  # the loop's record
    assert study.lesson07_precision({}, {"precision": "fp32"}) == "fp32"
    saved = {"profile": "full", "model": "mini", "seq_len": 64, "target_loss": 5.1,
             "runs": [{"label": "adam b=32", "global_batch_size": 32, "steps": 80, "precision": "fp16"}]}
    assert study.bert_setting(saved, "full", PLAN)["config"].precision == "fp16"


# --------------------------------------------------------------------------- section 2: the critical batch


def _curve(b_crit, s_min=100, batches=(256, 1024, 4096, 16384)):
    return [{"batch size": b, "steps to target": round(s_min * (1 + b_crit / b))} for b in batches]


def _noisy(b_crit, s_min=100, batches=(256, 1024, 4096, 16384), rel=0.0, resolution=0.0):
    """The model's steps at each batch, off by +rel, -rel, +rel, ... (a seed's scatter), each known to within
    ``resolution`` of itself (the evaluation spacing)."""
    out = []
    for i, b in enumerate(batches):
        s = round(s_min * (1 + b_crit / b) * (1 + rel * (-1) ** i))
        out.append({"batch size": b, "steps to target": s, "resolution (steps)": max(1, round(resolution * s))})
    return out


def test_critical_batch_recovers_the_model_it_fits():
    fit = study.critical_batch(_curve(2000))
    assert fit["status"] == "fit" and fit["b_crit"] == pytest.approx(2000, rel=0.02)
    assert fit["s_min"] == pytest.approx(100, rel=0.02)
    perfect = [{"batch size": b, "steps to target": 1_000_000 // b} for b in (256, 1024, 4096)]
    assert study.critical_batch(perfect)["status"] == "no bend"
    assert study.critical_batch(_curve(2000)[:2])["status"] == "too few points"
    beyond = study.critical_batch(_curve(100_000))
    assert beyond["status"] == "beyond range" and beyond["b_crit"] > 16384


def test_lessons_09_and_11_report_the_same_critical_batch_on_lesson_02s_rows():
    from _histories import LESSON02

    from course_lib.lessons import l09_scaling
    saved = LESSON02["02 with three batches that reached"]
    ours, theirs = study.lesson02_fit(saved), l09_scaling.steps_fit(saved)
    assert study.fit_estimates(ours) == theirs.estimates()
    assert (ours["s_min"], ours["b_crit"]) == (theirs.s_min, theirs.b_crit)
    # fewer than three batches reached: neither lesson has a fit
    unfit = LESSON02["02 with one batch that reached"]
    assert study.lesson02_fit(unfit)["status"] == "too few points"
    assert study.fit_estimates(study.lesson02_fit(unfit)) == []
    assert l09_scaling.steps_fit(unfit) is None


def test_the_fits_range_widens_with_the_points_error_and_decides_the_bend_both_ways():
    exact = study.critical_batch(_noisy(2000, resolution=0.02))
    lo, hi = exact["range"]
    assert lo <= exact["b_crit"] <= hi
    noisy = study.critical_batch(_noisy(2000, rel=0.1, resolution=0.02))
    assert noisy["range"][1] / noisy["range"][0] > hi / lo  # more scatter, a wider range
    assert study.bend_comparison(exact).outcome == compare.LOWER  # a bend inside the batches measured
    far = study.critical_batch(_noisy(1e6, batches=(4096, 16384, 65536), resolution=0.01))
    assert study.bend_comparison(far).outcome == compare.HIGHER  # beyond them
    edge = study.critical_batch(_noisy(65536, batches=(4096, 16384, 65536), rel=0.15))
    assert study.bend_comparison(edge).outcome == compare.UNRESOLVED
    perfect = study.critical_batch([{"batch size": b, "steps to target": 1_000_000 // b} for b in (256, 1024, 4096)])
    c = study.bend_comparison(perfect)
    assert math.isinf(c.high) and c.outcome == compare.HIGHER
    assert study.bend_comparison(study.critical_batch(_curve(2000)[:2])) is None


def test_the_noise_scale_against_b_crit_is_same_within_the_factor_and_decided_outside_it():
    fit = study.critical_batch(_curve(2000))
    assert study.noise_comparison(2500, 100, fit).outcome == compare.SAME
    assert study.noise_comparison(40000, 1000, fit).outcome == compare.HIGHER
    assert study.noise_comparison(100, 5, fit).outcome == compare.LOWER
    # an error as large as the estimate: nothing is decided
    assert study.noise_comparison(2500, 2500, fit).outcome == compare.UNRESOLVED
    # an unbounded B_crit range: only the lower side can be excluded, so "same" cannot be
    open_ended = study.critical_batch(_noisy(1e6, batches=(4096, 16384, 65536), rel=0.1))
    assert math.isinf(open_ended["range"][1])
    c = study.noise_comparison(open_ended["b_crit"], 1.0, open_ended) if open_ended["b_crit"] else None
    assert c is None or c.outcome != compare.SAME
    assert study.noise_comparison(10, 1, study.critical_batch([])) is None
    assert study.noise_comparison(math.inf, 1, fit) is None
    # a full run's lesson 02 curve and its B_simple at the target
    rows = [{"batch size": b, "steps to target": s} for b, s in ((256, 17406), (1024, 4400), (4096, 1150),
                                                                 (16384, 285), (65536, 100))]
    recorded = study.critical_batch(rows)
    assert recorded["s_min"] > 0
    c = study.noise_comparison(6613, 1800, recorded)
    assert c.low <= c.estimate <= c.high and c.estimate == pytest.approx(6613 / recorded["b_crit"])


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
                               best_hr=0.8 if hit else 0.5,
                               curve={"step": [0, steps - 10, steps], "epoch": [0, (steps - 10) / 100, steps / 100]})

    monkeypatch.setattr(train, "train_to_target", fake)
    return calls


BASE = dict(global_batch_size=256, optimizer="adam", base_lr=1e-3, max_epochs=1.0)


def test_the_tuned_sweep_picks_the_fewest_steps_and_stops_what_cannot_win(monkeypatch):
    from course_lib.train.ncf import TrainConfig

    # at 1024 the rule's lr is best; at 4096 twice it, and four times it (the edge extension) better still
    table = {(1024, 1): 400, (1024, 0.5): 900, (1024, 2): 500, (4096, 1): 200, (4096, 2): 150, (4096, 4): 120}

    def steps_at(b, lr):
        return table.get((b, round(lr / (1e-3 * math.sqrt(b / 256)), 3)))

    calls = _fake_runs(steps_at, monkeypatch)
    sweep = study.tuned_sweep(None, TrainConfig(**BASE), (1024, 4096), max_epochs=2.0, eval_every_epochs=0.25)
    assert [c.max_steps for c in calls[:3]] == [None, 400, 400]  # the rule's lr first, the others capped by it
    assert {r["batch size"]: r["x rule lr"] for r in sweep if r["chosen"]} == {1024: 1.0, 4096: 4.0}
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
    cost = study.sweep_cost(sweep)
    assert cost["runs"] == len(sweep) and cost["batches"] == 2 and cost["from lesson 02"] == 0
    assert [r["x rule lr"] for r in study.unbracketed(sweep)] == [4.0]  # the extension's lr is the grid's edge
    with pytest.raises(ValueError, match="SWEEP_LR_FACTORS"):
        study.tuned_sweep(None, TrainConfig(**BASE), (1024,), (0, 1), max_epochs=2.0, eval_every_epochs=0.25)


def test_the_tuned_sweep_extends_past_an_edge_that_ties_the_best(monkeypatch):
    from course_lib.train.ncf import TrainConfig

    def steps_at(b, lr):  # x1 and x2 reach the target at 100 steps, the rest never
        return {1: 100, 2: 100}.get(round(lr / (1e-3 * math.sqrt(b / 256)), 3))

    calls = _fake_runs(steps_at, monkeypatch)
    sweep = study.tuned_sweep(None, TrainConfig(**BASE), (65536,), max_epochs=3.0, eval_every_epochs=0.25,
                              max_extensions=1)
    assert sorted(r["x rule lr"] for r in sweep) == [0.5, 1.0, 2.0, 4.0]
    assert [r["x rule lr"] for r in sweep if r["chosen"]] == [1.0]
    assert calls[-1].max_steps == 100 and study.unbracketed(sweep) == []  # x4 missed: bracketed now
    tied = [r for r in sweep if r["x rule lr"] != 4.0]  # without the extension, x2 on the edge ties the chosen x1
    assert [r["x rule lr"] for r in study.unbracketed(tied)] == [1.0]
    assert "(edge)" in str(study.tuned_table(tied))


def test_the_tuned_sweep_takes_lesson02s_run_at_the_rules_lr_instead_of_running_it_again(monkeypatch):
    from course_lib.train.ncf import TrainConfig

    calls = _fake_runs(lambda b, lr: 500, monkeypatch)
    saved = {"profile": "full", "rows": [
        {"rule": "sqrt", "batch size": 1024, "lr": 2e-3, "steps to target": 400, "resolution (steps)": 20},
        {"rule": "linear", "batch size": 4096, "lr": 1.6e-2, "steps to target": 90},  # another rule: not taken
        {"rule": "sqrt", "batch size": 4096, "lr": 5e-3, "steps to target": 100}]}  # another lr: run again
    known = study.lesson02_rows(saved, "full")[1]
    assert set(known) == {1024, 4096} and study.lesson02_rows(saved, "smoke")[1] == {}
    sweep = study.tuned_sweep(None, TrainConfig(**BASE), (1024, 4096), (0.5, 1.0, 2.0), max_epochs=2.0,
                              eval_every_epochs=0.25, max_extensions=0, known=known)
    assert len(calls) == 5 and [c.max_steps for c in calls[:2]] == [400, 400]  # capped by lesson 02's steps
    reused = [r for r in sweep if r["from"] == "lesson 02"]
    assert [(r["batch size"], r["steps to target"], r["chosen"]) for r in reused] == [(1024, 400, True)]
    assert "(lesson 02's run)" in str(study.tuned_table(sweep))
    assert study.sweep_cost(sweep)["from lesson 02"] == 1


def test_lesson02_rows_take_the_fastest_rule_and_refuse_too_little():
    saved = {"profile": "full", "rows": [{"batch size": 1024, "steps to target": 300},
                                         {"batch size": 1024, "steps to target": 250},
                                         {"batch size": 4096, "steps to target": None},
                                         {"batch size": 256, "steps to target": 900},
                                         {"batch size": 4096, "steps to target": 90}]}
    got = [(r["batch size"], r["steps to target"]) for r in study.lesson02_rows(saved, "full")[0]]
    assert got == [(256, 900), (1024, 250), (4096, 90)]
    assert study.lesson02_rows(None, "full") == (None, {})
    assert study.lesson02_rows({**saved, "rows": saved["rows"][:2]}, "full")[0] is None
    assert study.lesson02_rows(saved, "smoke")[0] is None  # another profile trains on other data


def test_samples_resolution_is_the_last_evaluation_interval_in_samples():
    r = SimpleNamespace(reached=True, epochs=1.0, samples=4_947_968, steps_to_target=1208, epochs_to_target=1.0,
                        curve={"step": [0, 302, 604, 906, 1208], "epoch": [0.0, 0.25, 0.5, 0.75, 1.0]})
    assert study.samples_to_target(r) == (4_947_968, 1_236_992)
    missed = SimpleNamespace(reached=False, epochs=1.0, samples=1, steps_to_target=None, curve={})
    assert study.samples_to_target(missed) == (None, None)


# --------------------------------------------------------------------------- sections 3 and 4


def _sharp(batch, top, gap, trace=None, trace_se=None):
    return {"batch": batch, "top eigenvalue": top, "gap": gap, "train HR@10": 0.7, "test HR@10": 0.7 - (gap or 0),
            "Hessian trace": trace, "trace +/- (stderr)": trace_se}


def test_sharpness_is_decided_by_each_measures_own_error_and_the_gap_by_the_users():
    comps = study.sharpness_comparisons(_sharp(256, 1.0, 0.01), _sharp(8192, 3.0, 0.05), users=6040)
    assert [c.outcome for c in comps] == [compare.HIGHER, compare.HIGHER]  # sharper, and a wider gap
    flat = study.sharpness_comparisons(_sharp(256, 1.0, 0.02), _sharp(8192, 1.02, 0.02), users=1_000_000)
    assert [c.outcome for c in flat] == [compare.SAME, compare.SAME]
    # the trace from few Hutchinson samples: its error decides nothing, however far its estimate moved
    traced = study.sharpness_comparisons(_sharp(256, 1.0, 0.01, 6.86, 3.0), _sharp(8192, 2.0, 0.01, 5.54, 3.0),
                                         users=6040)
    assert traced[1].question.startswith("Hessian trace") and traced[1].outcome == compare.UNRESOLVED
    few_users = study.sharpness_comparisons(_sharp(256, 1.0, 0.01), _sharp(8192, 3.0, 0.05), users=50)
    assert few_users[-1].outcome == compare.UNRESOLVED  # a 4-point gap over 50 users is within their noise
    assert len(study.sharpness_comparisons(_sharp(256, 1.0, None), _sharp(8192, 2.0, None), users=100)) == 1


def _run(steps, hr):
    return SimpleNamespace(steps=steps, final_hr=hr)


def test_growth_is_as_accurate_within_a_point_and_decided_only_beyond_the_users_noise():
    assert study.growth_comparisons(_run(1000, 0.60), _run(400, 0.6005), users=1_000_000)[0].outcome == compare.SAME
    assert study.growth_comparisons(_run(1000, 0.60), _run(400, 0.50), users=6040)[0].outcome == compare.LOWER
    assert study.growth_comparisons(_run(1000, 0.60), _run(400, 0.59), users=500)[0].outcome == compare.UNRESOLVED


# --------------------------------------------------------------------------- the adaptive batch


def _record(step, trace, g2, repeats=None, pairs=None):
    return {"step": step, "trace_cov": trace, "grad_sq_norm": g2, "b_simple": trace / g2 if g2 > 0 else math.inf,
            "stderr": 0.0, **({"repeats": repeats} if repeats else {}), **(pairs or {})}


def test_the_policy_follows_b_simple_within_bounds_with_the_sqrt_rule():
    pol = study.adaptive_batch_policy(1e-3, 256, 1024, 8192, window=1)
    assert pol(_record(1, 500.0, 1.0)) is None  # below b_min: stays at 1024
    assert pol(_record(2, 5000.0, 1.0)) == (4096, pytest.approx(1e-3 * 4))  # 2^12 <= 5000; sqrt(16) x the lr
    assert pol(_record(3, 1e6, 1.0)) == (8192, pytest.approx(1e-3 * math.sqrt(32)))  # capped
    assert pol(_record(4, 5.0, -1.0)) is None  # a negative |G|^2: keep the batch
    assert pol(_record(5, 2000.0, 1.0)) == (1024, pytest.approx(2e-3))  # it follows B_simple down as well
    assert [c[2] for c in pol.chosen] == [1024, 4096, 8192, 8192, 1024]
    smooth = study.adaptive_batch_policy(1e-3, 256, 1024, 1 << 20, rule="linear", window=2)
    smooth(_record(1, 4000.0, 1.0))
    assert smooth(_record(2, 14000.0, 1.0)) == (8192, pytest.approx(1e-3 * 32))  # (4000 + 14000) / 2 = 9000
    with pytest.raises(ValueError, match="b_min"):
        study.adaptive_batch_policy(1e-3, 256, 4096, 1024)
    with pytest.raises(ValueError, match="rule"):
        study.adaptive_batch_policy(1e-3, 256, 1024, 4096, rule="cubic")


# a full run's three runs to the target: the grown one reached it before its milestone, each count known to its
# last evaluation interval (302 steps)
RECORDED_ADAPTIVE = [
    {"batches": [4096], "final_hr": 0.7709, "reached": True, "run": "fixed batch 4,096", "samples": 4947968,
     "samples_resolution": 1236992, "samples_to_target": 4947968, "steps": 1208, "steps_resolution": 302,
     "steps_to_target": 1208},
    {"batches": [4096], "final_hr": 0.7709, "reached": True, "run": "batch x 4 at epochs (1,)", "samples": 4947968,
     "samples_resolution": 1236992, "samples_to_target": 4947968, "steps": 1208, "steps_resolution": 302,
     "steps_to_target": 1208},
    {"batches": [4096, 8192, 4096], "final_hr": 0.7684, "reached": True, "run": "batch = B_simple",
     "samples": 4947968, "samples_resolution": 2473984, "samples_to_target": 4947968, "steps": 906,
     "steps_resolution": 302, "steps_to_target": 906,
     "estimates": [{"step": 302, "b_simple": 2600.0, "stderr": 1100.0, "before": 4096, "batch": 4096, "pairs": 8},
                   {"step": 604, "b_simple": 11261.0, "stderr": 5000.0, "before": 4096, "batch": 8192, "pairs": 16},
                   {"step": 906, "b_simple": 3369.0, "stderr": 2000.0, "before": 8192, "batch": 4096, "pairs": 24}],
     "reference": {"step": 302, "b_simple": 9100.0, "stderr": 1400.0, "repeats": 192}}]


def test_the_adaptive_runs_counts_are_unresolved_at_their_evaluation_spacing_and_the_same_run_counted_once():
    comps = study.adaptive_comparisons(RECORDED_ADAPTIVE)
    counts = [c for c in comps if "to target, batch = B_simple" in c.question]
    assert len(counts) == 2  # the grown run is the fixed one up to the target: compared once
    assert all(c.outcome == compare.UNRESOLVED for c in counts)  # 906 in (604, 906] against 1,208 in (906, 1,208]
    ref = next(c for c in comps if "section 1" in c.question)
    assert ref.outcome == compare.LOWER  # 2,600 +/- 1,100 against 9,100 +/- 1,400 at the same weights
    switches = [c for c in comps if c.question.startswith("switch")]
    # up to 8,192 on 11,261 +/- 5,000: within the noise; back down on 3,369 +/- 2,000, below 8,192 beyond it
    assert [c.outcome for c in switches] == [compare.UNRESOLVED, compare.LOWER]


def test_the_adaptive_run_is_decided_where_its_counts_are_far_apart():
    fine = [dict(r, steps_resolution=10, samples_resolution=10_000, estimates=[], reference=None)
            for r in RECORDED_ADAPTIVE]
    fine[-1].update(steps_to_target=500, samples_to_target=4_000_000)
    steps, samples = [c for c in study.adaptive_comparisons(fine) if "to target, batch = B_simple" in c.question]
    assert steps.outcome == compare.LOWER and samples.outcome == compare.LOWER
    up = {"step": 1, "b_simple": 20000.0, "stderr": 1000.0, "before": 4096, "batch": 16384, "pairs": 100}
    down = {"step": 2, "b_simple": 1000.0, "stderr": 100.0, "before": 16384, "batch": 4096, "pairs": 100}
    assert [c.outcome for c in study.switch_comparisons([up, down])] == [compare.HIGHER, compare.LOWER]
    missed = [dict(RECORDED_ADAPTIVE[0]), dict(RECORDED_ADAPTIVE[1], reached=False),
              dict(RECORDED_ADAPTIVE[2], reached=False)]
    assert study.adaptive_comparisons(missed) == []
    assert "not reached" in str(study.adaptive_table([dict(RECORDED_ADAPTIVE[0], reached=False)]))
    assert "2,600 +/- 1,100" in str(study.adaptive_table(RECORDED_ADAPTIVE))


def test_the_milestones_fall_before_the_fixed_runs_target():
    fixed = SimpleNamespace(reached=True, epochs_to_target=1.0, epochs=1.0)
    assert study.milestones_before(fixed, (0.5,)) == (0.5,)
    assert study.milestones_before(fixed, (0.75, 0.25)) == (0.25, 0.75)
    assert study.milestones_before(SimpleNamespace(reached=False, epochs_to_target=None, epochs=3.0)) == (1.5,)
    with pytest.raises(ValueError, match="fractions"):
        study.milestones_before(fixed, (1.0,))


def test_the_batch_grows_once_at_each_milestone_mid_epoch():
    hooks = study.grow_at((0.5, 0.75), 4, 4096, 0.004, 3.0)
    got = []
    for epoch in (0.25, 0.5, 0.625, 0.75, 1.0):
        record = {"epoch": epoch, **hooks.on_eval(None, {"epoch": epoch})}
        got.append((record["batch"], hooks.adapt_batch(record)))
    assert got == [(4096, None), (4096, (16384, 0.004)), (16384, None), (16384, (65536, 0.004)), (65536, None)]
    assert hooks.stop_early({"epoch": 3.0}) and not hooks.stop_early({"epoch": 2.9})


def test_the_grown_batch_is_compared_with_the_fixed_one():
    fixed = dict(RECORDED_ADAPTIVE[0], steps_resolution=151, samples_resolution=618_496)
    grown = dict(RECORDED_ADAPTIVE[1], batches=[4096, 16384], steps_to_target=755, steps_resolution=38,
                 samples_to_target=4_947_968, samples_resolution=618_496)
    steps, samples = study.adaptive_comparisons([fixed, grown, RECORDED_ADAPTIVE[2]])[:2]
    assert steps.question.startswith("steps to target, batch x 4") and samples.question.startswith("samples")
    assert steps.outcome == compare.LOWER  # 755 against 1,208 steps, each known to an eighth of an epoch
    assert samples.outcome == compare.UNRESOLVED  # the same samples, each known to an eighth of an epoch
    missed = study.adaptive_comparisons([fixed, dict(grown, reached=False), RECORDED_ADAPTIVE[2]])
    assert not any("batch x 4 at epochs (1,) /" in c.question for c in missed)


# --------------------------------------------------------------------------- predictable scaling

SIZES = [1e3, 3e3, 1e4, 3e4, 1e5, 3e5]


@pytest.mark.parametrize("a,b,c", [(2.0, 0.35, 0.05), (50.0, 0.7, 0.2), (1.0, 0.2, 0.0)])
def test_the_fit_recovers_a_known_power_law(a, b, c):
    exact = [a * n ** -b + c for n in SIZES]
    fit = study.fit_power_law(SIZES, exact)
    assert fit["b"] == pytest.approx(b, rel=1e-3) and fit["c"] == pytest.approx(c, abs=1e-3)
    rng = np.random.default_rng(0)  # 0.5 % noise on each point: the exponent within 5 %
    fit = study.fit_power_law(SIZES, [v * (1 + 0.005 * rng.standard_normal()) for v in exact])
    assert fit["b"] == pytest.approx(b, rel=0.05)


def test_the_law_gives_the_size_an_error_needs_and_none_at_its_floor():
    rows = _rows(0.35)
    pred = study.scaling_prediction(rows, {"size": 2e5, "error": 2 * 2e5 ** -0.35 + 0.05})
    assert pred["size_for_measured"] == pytest.approx(2e5, rel=1e-3)
    assert study.scaling_prediction(rows, {"size": 2e5, "error": 0.04})["size_for_measured"] is None  # below c
    with pytest.raises(ValueError, match="at least 3"):
        study.fit_power_law([1, 2], [0.5, 0.4])
    with pytest.raises(ValueError, match="positive"):
        study.fit_power_law([1, 2, 3], [0.5, 0.0, 0.4])


def test_the_subsample_keeps_the_held_out_set():
    from course_lib.data.movielens import ImplicitData

    d = ImplicitData(name="x", num_users=3, num_items=5, train_users=torch.arange(100) % 3,
                     train_items=torch.arange(100) % 5, test_items=torch.tensor([0, 1, 2]),
                     eval_negatives=torch.zeros(3, 2, dtype=torch.long), source="test", synthetic=True)
    half = study.subsample_train(d, 0.5)
    assert 50 <= half.num_train <= 53 and torch.equal(half.test_items, d.test_items)
    tiny = study.subsample_train(d, 0.01)  # one interaction drawn, and one kept for every user
    assert set(tiny.train_users.tolist()) == {0, 1, 2} and tiny.num_train <= 4
    assert study.subsample_train(d, 1.0) is d
    with pytest.raises(ValueError, match="fraction"):
        study.subsample_train(d, 0.0)


def _rows(b):
    return [{"fraction": n / 1e5, "size": int(n), "metric": 1 - (2 * n ** -b + 0.05), "error": 2 * n ** -b + 0.05,
             "best_step": 100, "steps": 200, "converged": True} for n in SIZES[:5]]


def test_the_law_is_same_where_it_predicts_and_decided_off_where_it_misses():
    exact = study.scaling_prediction(_rows(0.35), {"size": 300_000, "error": 2 * 3e5 ** -0.35 + 0.05})
    law, data = study.scaling_comparisons(exact)
    assert law.outcome == compare.SAME and data.outcome == compare.LOWER  # the law holds, more data helped
    off = study.scaling_prediction(_rows(0.35), {"size": 300_000, "error": 0.2})
    assert study.scaling_comparisons(off)[0].outcome == compare.HIGHER
    held = dict(_rows(0.35)[-1], size=300_000, fraction=1.0, converged=False)
    assert "held out" in str(study.scaling_table(_rows(0.35), exact, held))
    assert "N^+0.010" in study.scaling_table(_rows(0.35), {"fit": {"a": 6.7, "b": -0.01, "c": 0.0}}).title


def test_a_law_that_misses_its_own_sizes_decides_nothing_at_the_held_out_one():
    # a full run's five fitted sizes and the whole set: the law misses its own points by 12-20%
    rows = [{"size": n, "fraction": f, "metric": 1 - e, "error": e}
            for n, f, e in ((36803, 1 / 32, 0.6311), (67566, 1 / 16, 0.6175), (129075, 1 / 8, 0.5647),
                            (252086, 1 / 4, 0.3755), (498056, 1 / 2, 0.2745))]
    pred = study.scaling_prediction(rows, {"size": 990027, "fraction": 1.0, "metric": 0.75, "error": 0.25})
    assert pred["residual_rms"] > study.PREDICTION_GOAL
    law, data = study.scaling_comparisons(pred)
    assert law.outcome == compare.UNRESOLVED


def test_the_plateau_stops_after_patience_evaluations_without_a_new_best():
    stop = study.plateau(3)
    hrs = [0.3, 0.5, 0.6, 0.59, 0.6, 0.61, 0.6, 0.58, 0.605]
    stops = [stop({"hr": h}) for h in hrs]
    assert stops == [False] * 8 + [True]  # 0.61 the last best; three evaluations after it without a new one


def test_each_size_trains_to_its_plateau_and_reports_its_best(monkeypatch):
    import course_lib.sweeps as sweeps
    import course_lib.train as train
    import course_lib.train.ncf as ncf

    seen = []

    def fake(sub, cfg, *, hooks, **_):
        seen.append(cfg)
        curve = {"step": [0, 50, 100, 150, 200], "hr": [0.1, 0.4, 0.62, 0.6, 0.61]}
        stopped = any(hooks.stop_early({"hr": h}) for h in curve["hr"][1:])
        return SimpleNamespace(curve=curve, steps=200, stopped_early=stopped, train_time_s=1.0)

    monkeypatch.setattr(train, "train_to_target", fake)
    monkeypatch.setattr(ncf, "steps_per_epoch", lambda sub, cfg: 400)
    monkeypatch.setattr(ncf, "epochs_to_steps", lambda epochs, data, cfg: round(epochs * 400))
    cfg = SimpleNamespace(replace=lambda **kw: SimpleNamespace(**kw))
    monkeypatch.setattr(sweeps, "scaled_config", lambda base, batch, rule, **kw: cfg)
    data = SimpleNamespace(num_train=1000, name="x", train_users=torch.arange(1000), train_items=torch.arange(1000))
    (row,) = study.scaling_runs(data, SimpleNamespace(global_batch_size=256), (1.0,), batch_size=1024,
                                cap_epochs=3.0, patience=2)
    assert (row["metric"], row["best_step"], row["steps"], row["converged"]) == (0.62, 100, 200, True)
    assert seen[0].max_epochs == 3.0 and seen[0].eval_every_epochs == 0.25 and not seen[0].stop_at_target
    assert "plateau" in str(study.scaling_table([dict(row, size=500, fraction=0.5)] * 3 + [row],
                                                study.scaling_prediction(_rows(0.35), {"size": 3e5, "error": 0.1})))


def test_the_exponent_comes_with_its_standard_error():
    rows = _rows(0.35)
    exact = study.exponent_estimate(rows, study.fit_power_law([r["size"] for r in rows], [r["error"] for r in rows]))
    assert exact.value == pytest.approx(0.35, rel=0.02) and exact.se < 0.01
    noisy = [dict(r, error=r["error"] * f) for r, f in zip(rows, (1.1, 0.9, 1.1, 0.9, 1.1))]
    fit = study.fit_power_law([r["size"] for r in noisy], [r["error"] for r in noisy])
    loose = study.exponent_estimate(noisy, fit)
    assert loose.se > exact.se and loose.low < loose.value < loose.high


# --------------------------------------------------------------------------- section 5: BatchNorm per rank


def _bn_rows(small_local, small_sync, extra=()):
    rows = []
    for b, acc in ((4, {"local BN": small_local, "synchronized BN": small_sync}),
                   (64, {"local BN": 0.9, "synchronized BN": 0.9})):
        for v, a in acc.items():
            rows.append({"per_rank_batch": b, "global_batch": 2 * b, "variant": v, "test_accuracy": a,
                         "step_ms": 2.0 if v == "synchronized BN" else 1.0})
    return rows + [{"per_rank_batch": b, "global_batch": 2 * b, "variant": v, "test_accuracy": a, "step_ms": 1.0}
                   for b, v, a in extra]


def test_bn_remedies_are_decided_against_local_bn_beyond_the_test_sets_noise():
    comps = {c.question: c for c in study.bn_comparisons(_bn_rows(0.70, 0.85), n_test=4096)}
    assert comps["acc at 4/rank: synchronized BN - local BN"].outcome == compare.HIGHER
    assert comps["acc of local BN: 4/rank - 64/rank"].outcome == compare.LOWER
    assert comps["ms/step at 64/rank: sync / local"].outcome == compare.HIGHER  # 2x the step
    same = {c.question: c for c in study.bn_comparisons(_bn_rows(0.90, 0.901), n_test=100_000)}
    assert same["acc at 4/rank: synchronized BN - local BN"].outcome == compare.SAME
    few = {c.question: c for c in study.bn_comparisons(_bn_rows(0.80, 0.82), n_test=200)}
    assert few["acc at 4/rank: synchronized BN - local BN"].outcome == compare.UNRESOLVED
    # recomputed statistics that help at both ends: the running averages, not the batch
    rec = study.bn_comparisons(_bn_rows(0.857, 0.858, [(4, "local BN, recomputed stats", 0.90),
                                                       (64, "local BN, recomputed stats", 0.929)]), n_test=4096)
    assert [c.outcome for c in rec if "recomputed" in c.question] == [compare.HIGHER, compare.HIGHER]
    t = study.bn_table(_bn_rows(0.7, 0.85))
    assert len(t.rows) == 2 and t.rows[0]["acc b=4"] == 0.7


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


def test_saved_comparisons_keep_their_outcomes_and_load_back_with_an_unbounded_end(tmp_path):
    fit = study.critical_batch([{"batch size": b, "steps to target": 1_000_000 // b} for b in (256, 1024, 4096)])
    comps = [study.bend_comparison(fit), study.trend_comparison(_probes([1000, 5000, 9000], [100, 100, 100]))]
    assert math.isinf(comps[0].high)
    compare.save("11", comps, tmp_path)
    back = compare.load_all(tmp_path)["11"]
    assert back == comps
