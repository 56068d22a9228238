"""Lesson 04 (course_lib.lessons.l04_lars): an embedding row's gradient grows with its frequency, layers'
gradient scales differ by orders of magnitude, a trust ratio stuck at the fallback is a dead layer, and the
race's table and verdicts follow the runs."""

import math

import pytest
import torch

from course_lib import compare
from course_lib.lessons import l04_lars as study
from course_lib.metrics import hr_standard_error
from course_lib.train import TrainConfig
from course_lib.train.ncf import TrainResult

CFG = TrainConfig(factors=8, layers=(16, 8))


def test_row_gradients_grow_with_frequency_and_layers_differ_by_orders_of_magnitude(data):
    m = study.layer_gradient_norms(data, CFG, (256, 4096))
    comps = study.frequency_comparisons(m)  # measured slopes 0.50 and 0.69 (per-sample gradients partly cancel)
    assert len(comps) == 2 and all(0.3 < c.estimate < 1.2 for c in comps), comps
    ratio = {(r["batch"], r["layer"]): r["grad_to_weight"] for r in m["layers"]}
    layers = {layer for _, layer in ratio}
    spreads = study.layer_spread(m)
    assert len(spreads) == 2 and all(e.value > 10 for e in spreads)  # an order of magnitude apart or more
    # a mean over 16x the samples: at most the noise's 1/sqrt(16) = 4x fall (signal stays), never 16x
    assert all(ratio[(256, x)] / ratio[(4096, x)] < 8 for x in layers)
    rows = study.layer_scaling(m).rows
    assert len(rows) == len(layers) and {r["mostly"] for r in rows} <= {"noise", "signal", "mixed"}
    study.plot_row_gradients(m)


def _measured(changes, lo=256, hi=131072, slopes=(0.73, 0.09), rows=40):
    """Constructed norms: each layer's ||g||/||w|| at ``lo`` and ``lo``'s over ``changes[layer]`` at ``hi``; item rows
    whose gradient is their frequency to the power ``slopes`` (with a little noise, so a fit has residuals)."""
    base = {"gmf_user.weight": 1e-2, "gmf_item.weight": 2e-2, "mlp.2.weight": 1e-4, "out.weight": 5e-5}
    layers = [{"batch": b, "layer": name, "weight_norm": 1.0, "grad_norm": g / (changes[name] if b == hi else 1),
               "grad_to_weight": g / (changes[name] if b == hi else 1)} for b in (lo, hi) for name, g in base.items()]
    gen = torch.Generator().manual_seed(0)
    freq = torch.logspace(-4, -1, rows)
    noise = lambda: torch.exp(0.05 * torch.randn(rows, generator=gen))  # noqa: E731
    return {"layers": layers, "rows": {b: (freq, freq ** s * noise()) for b, s in zip((lo, hi), slopes)}}


def test_noise_falls_as_one_over_sqrt_b_and_signal_stays():
    """Embeddings that fell sqrt(512) = 22.6x are noise; layers that did not fall are signal; the signal's share at the
    large batch follows ||g||² = S + N / B."""
    m = _measured({"gmf_user.weight": 22.6, "gmf_item.weight": 22.9, "mlp.2.weight": 0.92, "out.weight": 0.93})
    regimes = {r["layer"]: r["mostly"] for r in study.layer_scaling(m).rows}
    assert regimes == {"gmf_user.weight": "noise", "gmf_item.weight": "noise", "mlp.2.weight": "signal",
                       "out.weight": "signal"}
    assert study.signal_share(math.sqrt(512), 512) == pytest.approx(0.0)
    assert study.signal_share(1.0, 512) == pytest.approx(1.0)
    assert study.signal_share(2.0, 16) == pytest.approx(12 / 15)


def test_the_frequency_verdict_follows_the_slope():
    """A slope of 0.73 clears 0.5 (higher: grows with frequency); 0.09 lies within it of 0 (same: does not follow)."""
    small, large = study.frequency_comparisons(_measured({k: 1.0 for k in ("gmf_user.weight", "gmf_item.weight",
                                                                             "mlp.2.weight", "out.weight")}))
    assert small.estimate == pytest.approx(0.73, abs=0.02) and small.outcome == compare.HIGHER
    assert large.estimate == pytest.approx(0.09, abs=0.02) and large.outcome == compare.SAME
    # two distinct frequencies leave no residual to measure a slope's error: no verdict, not a guess
    m = _measured({k: 1.0 for k in ("gmf_user.weight", "gmf_item.weight", "mlp.2.weight", "out.weight")})
    m["rows"] = {256: (torch.tensor([1e-3, 1e-3, 2e-3]), torch.tensor([1.0, 1.1, 2.0]))}
    assert study.frequency_comparisons(m) == []


def test_dead_layers_are_read_from_a_trust_ratio_stuck_at_the_fallback():
    """A LARS run whose MLP ratios spike, then sit at exactly 1: the layer is dead from the first 1 of the tail."""
    history = {"step": list(range(0, 40, 2)),
               "trust_ratio": {"mlp.0.weight": [14.2, 43.7, 394, 1490] + [1.0] * 16,
                               "gmf_user.weight": [394 - i for i in range(20)],
                               "out.weight": [0.14, 1.0] + [0.5] * 18}}  # a single 1 mid-run is not a dead layer
    dead = {r["layer"]: r["dead from"] for r in study.trust_ratio_table(history).rows}
    assert dead == {"mlp.0.weight": 8, "gmf_user.weight": None, "out.weight": None}
    rows = {r["layer"]: r for r in study.trust_ratio_table(history).rows}
    assert rows["mlp.0.weight"]["peak/median"] == "1.49e+03x"  # the peak against the median of 1
    alive = {"step": history["step"], "trust_ratio": {"mlp.0.weight": [14.2 + i for i in range(20)]}}
    assert study.trust_ratio_table(alive).rows[0]["dead from"] is None


def fake_result(batch, lr, ttt, hr=0.76, optimizer="adam", steps=100, max_steps=None) -> TrainResult:
    cfg = TrainConfig(global_batch_size=batch, base_lr=lr, optimizer=optimizer, max_steps=max_steps)
    return TrainResult(config=cfg.to_dict(), dataset="synthetic-tiny", data_source="test", synthetic=True,
                       device="cpu", world_size=1, target_hr=0.75, time_to_target_s=ttt,
                       steps_to_target=None if ttt is None else steps, epochs_to_target=None if ttt is None else 1.0,
                       epochs=1.0, steps=steps, samples=batch * steps, train_time_s=ttt or 50.0, eval_time_s=1.0,
                       samples_per_s=1e5, phase_time_s={}, final_hr=hr, precision={"mode": "fp32"})


def test_the_race_table_names_each_optimizers_best_run_and_what_blew_up():
    runs = [fake_result(16384, 1e-2, 12.0), fake_result(16384, 2e-2, None, hr=0.70),
            fake_result(16384, 8.0, None, hr=0.30, optimizer="sgd"),
            fake_result(16384, 32.0, None, hr=0.05, optimizer="sgd"),
            fake_result(16384, 5.0, 30.0, optimizer="lars")]
    runs[3].diverged = True
    runs[2].curve = {"hr": [0.1, 0.2, 0.3], "loss": [0.6, 0.55, 0.52]}  # still rising when the race ended
    rows = {r["optimizer"]: r for r in study.race_table(runs, caps={"adam": 2}).rows}
    assert rows["adam"]["best lr"] == "0.01" and rows["adam"]["bracketed"] == "no (edge, cap 2)"
    assert rows["adam"]["to target (s)"] == 12.0 and rows["adam"]["rising"] is False
    assert rows["sgd"]["best lr"] == "8" and rows["sgd"]["blew up at"] == "32"
    assert rows["sgd"]["to target (s)"] == "not reached" and rows["sgd"]["rising"] is True
    assert rows["lars"]["bracketed"] == "one lr" and rows["lars"]["blew up at"] == "—"
    # every lr blew up: no best run is ranked among chance-level noise
    blown = [fake_result(131072, lr, None, hr=0.107, optimizer="sgd") for lr in (8.0, 16.0)]
    for r in blown:
        r.diverged = True
    assert study.race_table(blown, caps={}).rows[0]["best lr"] is None
    assert study.race_comparisons(blown, floor_hr=0.39, users=6040) == []


def test_a_constant_predictor_is_told_from_a_blow_up():
    r = fake_result(16384, 4.0, None, hr=0.106, optimizer="sgd")
    r.curve = {"loss": [0.69, 0.5006]}  # the labels' entropy at 4 negatives per positive: 0.5004
    assert study.collapsed(r)
    r.curve = {"loss": [0.69, 0.40]}
    assert not study.collapsed(r)


def test_a_run_that_missed_the_target_is_judged_against_the_popularity_ranking():
    """Its best HR@10 minus the popularity ranking's, with the evaluation's sampling error: a run at the floor is
    not lower (nor higher) than it; one well above it is higher; one at chance is lower."""
    def outcome(hr):
        runs = [fake_result(32768, 1.0, None, hr=hr, optimizer="sgd"), fake_result(32768, 1e-2, 10.0)]
        (c,) = study.race_comparisons(runs, floor_hr=0.3929, users=6040)  # the run that reached it: no row
        return c.outcome

    assert outcome(0.3925) in (compare.SAME, compare.UNRESOLVED)
    assert outcome(0.697) == compare.HIGHER
    assert outcome(0.106) == compare.LOWER


def test_a_cut_sweep_brackets_the_lr_and_the_full_length_run_is_the_one_judged():
    """SGD and LARS grids run cut (``max_steps``); the table lists the grid's lrs and says whether its best is inside,
    and the verdicts read the best lr's full-length run."""
    sgd = [fake_result(32768, lr, None, hr=hr, optimizer="sgd", max_steps=228)
           for lr, hr in ((0.5, 0.30), (1.0, 0.39), (2.0, 0.35))] + [fake_result(32768, 1.0, None, hr=0.392,
                                                                                 optimizer="sgd")]
    lars = [fake_result(32768, lr, None, hr=hr, optimizer="lars", max_steps=228)
            for lr, hr in ((4.0, 0.40), (8.0, 0.45), (16.0, 0.50), (32.0, 0.55))] + [
        fake_result(32768, 32.0, None, hr=0.67, optimizer="lars")]
    rows = {r["optimizer"]: r for r in study.race_table(sgd + lars, caps={"sgd": 1, "lars": 1}).rows}
    assert rows["sgd"]["lrs"] == "0.5, 1, 2" and rows["sgd"]["bracketed"] == "yes"
    assert rows["sgd"]["sweep steps"] == 228 and rows["sgd"]["best HR@10"] == 0.392  # the full-length run
    assert rows["lars"]["best lr"] == "32" and rows["lars"]["bracketed"] == "no (edge, cap 1)"
    kept, labels = study.full_length(sgd + lars, [f"run {i}" for i in range(len(sgd + lars))])
    assert kept == [sgd[-1], lars[-1]] and labels == ["run 3", "run 8"]
    fast = [fake_result(32768, 8.0, 10.0, optimizer="lars", max_steps=228)]  # reached the target in its cut run
    assert study.full_length(sgd + fast, ["a", "b", "c", "d", "e"]) == ([sgd[-1]] + fast, ["d", "e"])


def _seeds(optimizer, lr, hrs):
    return [fake_result(32768, lr, None, hr=hr, optimizer=optimizer) for hr in hrs]


def test_lars_against_sgd_is_decided_over_the_seeds_and_the_evaluations_error():
    """LARS's mean best HR@10 over the seeds minus SGD's: seeds that agree, LARS far above SGD, is higher; LARS's
    seeds apart by more than the gap is unresolved (the evaluation's error alone would call it higher); the interval
    never narrows below the evaluation's sampling error; an arm whose every lr blew up gives no row."""
    sgd = _seeds("sgd", 1.0, (0.392, 0.390))
    c = study.rescue_comparison(sgd, _seeds("lars", 32.0, (0.67, 0.66)), users=6040)
    assert c.question == "best HR@10, lars lr 32 - sgd lr 1" and c.n == "2/2"
    assert c.estimate == pytest.approx(0.665 - 0.391) and c.outcome == compare.HIGHER
    apart = study.rescue_comparison(sgd, _seeds("lars", 32.0, (0.67, 0.45)), users=6040)
    assert apart.estimate == pytest.approx(0.56 - 0.391) and apart.outcome == compare.UNRESOLVED
    once = study.rescue_comparison(sgd[:1], _seeds("lars", 32.0, (0.45,)), users=6040)
    assert once.n == "1/1" and once.outcome == compare.HIGHER  # no seeds' spread: the evaluation's error alone
    sampling = 1.96 * math.hypot(hr_standard_error(0.391, 6040), hr_standard_error(0.391, 6040))
    same = study.rescue_comparison(sgd, _seeds("lars", 32.0, (0.390, 0.392)), users=6040)
    assert same.high - same.estimate >= sampling and same.outcome == compare.UNRESOLVED
    blown = _seeds("sgd", 8.0, (0.107,))
    blown[0].diverged = True
    assert study.rescue_comparison(blown, _seeds("lars", 32.0, (0.67,)), users=6040) is None


PLAN = dict(per_epoch=152, full_runs=5, max_epochs=3.0, sweep_epochs=1.5, max_extensions=2)


def test_the_sweep_is_sized_by_its_cap_on_extensions_never_by_shorter_runs():
    """At 0.06 s a step (a 1.5-epoch sweep run 17.7 s, a 3-epoch run 31.4 s): plenty of time keeps the cap; less
    lowers it (fewer lr points) down to 0; the sweep's runs and the full-length runs keep their length."""
    full = study.sweep_plan(1000, 0.06, **PLAN)
    assert full["extension cap"] == 2 and full["planned (s)"] <= 1000
    assert study.sweep_plan(300, 0.06, **PLAN)["extension cap"] == 1  # 157 + 8 x 17.7 = 299 s
    short = study.sweep_plan(100, 0.06, **PLAN)
    assert short["extension cap"] == 0 and short["planned (s)"] > 100  # the floor runs anyway
    assert short["sweep steps"] == full["sweep steps"] == 228 and short["sweep epochs"] == 1.5
    assert short["uncut runs (s)"] == full["uncut runs (s)"] == round(5 * (456 * 0.06 + study.OVERHEAD_S))
