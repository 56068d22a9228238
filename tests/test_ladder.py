"""The trick ladder: rows saved by lessons 01-05, its table, its figure, and the run summary's PNG."""

import importlib
from pathlib import Path

import pytest

from course_lib import compare, ladder, ladder_view, results, summary, tiers
from course_lib.hardware import detect
from course_lib.sweeps import scaled_config, scaling_table, sweep_table
from course_lib.train import TrainConfig, TrainResult

REPO = Path(__file__).resolve().parent.parent


def fake_result(batch, lr, ttt, hr=0.76, optimizer="adam", precision="fp32") -> TrainResult:
    cfg = TrainConfig(global_batch_size=batch, base_lr=lr, optimizer=optimizer, precision=precision,
                      eval_every_epochs=0.25, **ladder.NEAR_TARGET)  # as the ladder's lessons evaluate
    return TrainResult(config=cfg.to_dict(), dataset="synthetic-tiny", data_source="test", synthetic=True,
                       device="cpu", world_size=1, target_hr=0.75, time_to_target_s=ttt,
                       steps_to_target=None if ttt is None else 100, epochs_to_target=None if ttt is None else 1.0,
                       epochs=1.0, steps=100, samples=batch * 100, train_time_s=ttt or 50.0, eval_time_s=1.0,
                       samples_per_s=1e5, phase_time_s={}, final_hr=hr, precision={"mode": precision})


def seeded(batch, lr, ttt, seed, optimizer="adam", rule=None, precision="fp32"):
    r = fake_result(batch, lr, ttt, optimizer=optimizer, precision=precision)
    r.config["seed"] = seed
    if rule:
        r.config.update(lr_scaling=rule, base_batch_size=256)
    return r


STEADY = {"before": 100.0, "after": 100.0, "rate": 100.0}  # a yardstick that did not move


def test_ladder_rows_order_speedup_and_not_reached(tmp_path):
    ladder.save_ladder_result("+warmup", fake_result(16384, 0.01, None, hr=0.7), directory=tmp_path)
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", fake_result(4096, 4e-3, 10.0), directory=tmp_path)
    rows = ladder.ladder_rows(tmp_path)
    assert [r["step"] for r in rows] == ["baseline", "+linear scaling", "+warmup"]
    assert rows[0]["speedup"] == pytest.approx(1.0) and rows[1]["speedup"] == pytest.approx(4.0)
    assert rows[2]["speedup"] is None and rows[2]["time_to_target_s"] is None and rows[2]["comparison"] is None
    assert rows[1]["batch_size"] == 4096 and rows[1]["precision"] == "fp32"
    # no pace recorded: each arm is trusted only to the flagged drift, and a 4x speedup still clears it
    c = rows[1]["comparison"]
    assert c.outcome == compare.HIGHER and c.low < 4.0 / (1 + 2 * ladder.UNPACED_RESOLUTION) < c.high
    table = ladder.ladder_table(tmp_path)
    assert table.rows[1]["speedup"] == "4x" and table.rows[1]["outcome"] == "higher"
    assert table.rows[2]["time to target (s)"] == "not reached" and table.rows[2]["outcome"] == "—"
    assert table.rows[1]["pace vs lesson 01"] == "—"
    ladder.save_ladder_result("+LARS", fake_result(16384, 0.01, 20.0, optimizer="lamb"), directory=tmp_path)
    rows = ladder.ladder_rows(tmp_path)  # +LARS is compared with +linear scaling (+warmup never reached)
    assert rows[3]["vs_previous"] == pytest.approx(0.5) and rows[3]["previous_step"] == "+linear scaling"
    assert rows[3]["vs_below"].outcome == compare.LOWER and not rows[3]["helped"]
    with pytest.raises(ValueError):
        ladder.save_ladder_row("+magic", time_to_target_s=1.0, final_hr=0.8, target_hr=0.75, dataset="synthetic-tiny",
                               directory=tmp_path)
    with pytest.raises(ValueError, match="dataset"):
        ladder.save_ladder_row("+LARS", time_to_target_s=1.0, final_hr=0.8, target_hr=0.75, dataset="",
                               directory=tmp_path)


def test_a_rung_measured_while_the_machine_was_slower_is_compared_at_the_baseline_pace(tmp_path):
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), pace=STEADY, directory=tmp_path)
    # the machine ran at half the pace during this lesson: its 20 s are 10 s at lesson 01's pace
    ladder.save_ladder_result("+linear scaling", fake_result(4096, 4e-3, 20.0), directory=tmp_path,
                              pace={"before": 60.0, "after": 40.0, "rate": 50.0})
    ladder.save_ladder_result("+warmup", fake_result(16384, 8e-3, 9.0), directory=tmp_path,
                              pace={"before": 95.0, "after": 105.0, "rate": 100.0})
    base, lin, warm = ladder.ladder_rows(tmp_path)
    assert lin["paced_time_s"] == pytest.approx(10.0) and lin["speedup"] == pytest.approx(4.0)
    assert lin["pace_drift"] == pytest.approx(-0.5) and lin["flags"] == ["pace vs lesson 01", "pace within the lesson"]
    assert warm["vs_previous"] == pytest.approx(10.0 / 9.0) and warm["flags"] == []  # paced 10 s vs 9 s
    # ... but the yardstick moved 33% and 10% within the two lessons: 1 s in 10 is not resolved through it
    assert warm["vs_below"].outcome == compare.UNRESOLVED and not warm["helped"]
    assert warm["vs_below"].low < 10.0 / 9.0 / 1.43 and warm["vs_below"].high > 10.0 / 9.0 * 1.43
    row = ladder.ladder_table(tmp_path).rows[1]
    assert row["pace vs lesson 01"] == "-50% (!)" and row["pace moved"] == "33% (!)"


def test_a_rung_at_two_seeds_takes_their_mean_and_is_decided_against_their_spread(tmp_path):
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), pace=STEADY, directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", seeded(4096, 4e-3, 10.0, 0), seeds=[seeded(4096, 4e-3, 12.0, 1)],
                              pace=STEADY, directory=tmp_path)
    ladder.save_ladder_result("+warmup", seeded(16384, 4e-3, 11.5, 0), seeds=[seeded(16384, 4e-3, 10.5, 1)],
                              pace=STEADY, directory=tmp_path)
    _, lin, warm = ladder.ladder_rows(tmp_path)
    assert lin["time_to_target_s"] == pytest.approx(11.0) and [s["seed"] for s in lin["seed_runs"]] == [0, 1]
    assert lin["comparison"].n == "2/1" and lin["comparison"].outcome == compare.HIGHER
    assert warm["vs_previous"] == pytest.approx(1.0, abs=0.01) and warm["vs_below"].outcome == compare.UNRESOLVED
    assert warm["vs_below"].n == "2/2" and not warm["helped"]
    row = ladder.ladder_table(tmp_path).rows[1]
    assert row["time to target (s)"] == "11.0 (10.0, 12.0)"
    # a setting that reached the target on one seed of two is not a rung that reached it
    ladder.save_ladder_result("+LARS", seeded(16384, 4e-3, 8.0, 0), seeds=[seeded(16384, 4e-3, None, 1)],
                              directory=tmp_path)
    lars = ladder.ladder_rows(tmp_path)[-1]
    assert lars["time_to_target_s"] is None and lars["steps_to_target"] is None
    assert ladder.ladder_table(tmp_path).rows[-1]["time to target (s)"] == "not reached (1/2 seeds)"


def test_the_comparisons_are_the_table_rows_outcomes(tmp_path):
    """Each rung's verdicts: the speedup over the baseline, and over the rung it built on where that is not the
    baseline; a clear 4x is higher, a rung level with the one below is not."""
    ladder.save_ladder_result("baseline", seeded(256, 1e-3, 40.0, 0), seeds=[seeded(256, 1e-3, 42.0, 1)],
                              pace=STEADY, directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", seeded(4096, 4e-3, 10.0, 0), seeds=[seeded(4096, 4e-3, 10.4, 1)],
                              pace=STEADY, directory=tmp_path)
    ladder.save_ladder_result("+warmup", seeded(16384, 4e-3, 10.1, 0), seeds=[seeded(16384, 4e-3, 10.3, 1)],
                              pace=STEADY, directory=tmp_path)
    comps = ladder.ladder_comparisons(tmp_path)
    assert [c.question for c in comps] == ["+linear scaling over baseline", "+warmup over baseline",
                                           "+warmup over +linear scaling"]
    assert [c.outcome for c in comps[:2]] == [compare.HIGHER, compare.HIGHER] and not comps[2].decided
    assert all(c.low <= c.estimate <= c.high for c in comps)
    table = ladder.ladder_table(tmp_path)
    assert [r["outcome"] for r in table.rows] == ["—", "higher", "higher"]
    assert table.rows[2]["vs outcome"] == comps[2].outcome and table.rows[2]["built on"] == "+linear scaling"
    assert ladder.ladder_comparisons(tmp_path / "empty") == []


def test_each_lesson_starts_from_the_closest_rung_below_that_reached_the_target(tmp_path):
    default = TrainConfig(global_batch_size=256, base_lr=1e-3, optimizer="adam", max_epochs=3, target_hr=0.75)
    cfg, rung, note = ladder.start_from("+linear scaling", default, directory=tmp_path)
    assert cfg == default and rung is None and "'baseline' (not saved)" in note
    assert "rung is saved: this lesson's default setting" in note  # what a lesson run alone prints (tests/_alone.py)
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), directory=tmp_path)
    lin = fake_result(4096, 1e-3, 10.0)
    lin.config.update(scaled_config(TrainConfig(base_lr=1e-3, optimizer="adam", max_epochs=9, seed=3), 4096,
                                    "sqrt", base_batch_size=256).to_dict())
    ladder.save_ladder_result("+linear scaling", lin, directory=tmp_path)
    ladder.save_ladder_result("+warmup", fake_result(16384, 0.01, None, hr=0.7), directory=tmp_path)
    cfg, rung, note = ladder.start_from("+LARS", default, directory=tmp_path)
    assert rung["step"] == "+linear scaling" and (cfg.global_batch_size, cfg.lr_scaling) == (4096, "sqrt")
    assert cfg.peak_lr == pytest.approx(4e-3) and (cfg.max_epochs, cfg.seed, cfg.target_hr) == (3, 0, 0.75)
    assert note == ("starting from the '+linear scaling' rung: batch 4096, adam lr 0.004 "
                    "(sqrt rule), fp32; passed over: '+warmup' (did not reach the target)")
    # a rung that carries another setting up
    bf16 = fake_result(4096, 4e-3, 2.0, precision="bf16")
    ladder.save_ladder_result("+mixed precision", bf16,
                              carry=TrainConfig.from_dict(bf16.config).replace(precision="fp32"),
                              directory=tmp_path)
    cfg, rung, note = ladder.start_from("+data parallel", default, directory=tmp_path)
    assert rung["step"] == "+mixed precision" and cfg.precision == "fp32" and "(the setting it carries up)" in note
    assert ladder.start_from("+data parallel", default, dataset="ml-20m", directory=tmp_path)[1] is None
    with pytest.raises(ValueError, match="unknown ladder step"):
        ladder.start_from("+magic", default, directory=tmp_path)


def test_a_rung_run_once_without_its_evaluation_spacing_is_still_compared(tmp_path):
    """A record with a steady pace and no evaluation spacing (a rung saved by hand, without its config): the single
    runs' interval comes from the drift the ladder flags, never from nothing."""
    for step, ttt in (("baseline", 40.0), ("+linear scaling", 10.0)):
        ladder.save_ladder_row(step, time_to_target_s=ttt, final_hr=0.8, target_hr=0.75, dataset="synthetic-tiny",
                               pace=STEADY, directory=tmp_path)
    c = ladder.ladder_rows(tmp_path)[1]["comparison"]
    assert c.outcome == compare.HIGHER and c.high / c.low == pytest.approx((1 + 2 * ladder.UNPACED_RESOLUTION) ** 2)


def test_a_rung_not_run_is_shown_as_such(tmp_path):
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), directory=tmp_path)
    ladder.save_ladder_row("+mixed precision", time_to_target_s=None, final_hr=None, target_hr=0.75,
                           dataset="synthetic-tiny", not_run="bf16 was slower than fp32 here", directory=tmp_path)
    row = ladder.ladder_table(tmp_path).rows[1]
    assert row["time to target (s)"] == "not run" and row["outcome"] == "—"
    assert [c.question for c in ladder.ladder_comparisons(tmp_path)] == []


def test_each_rung_records_its_slot_and_what_ran(tmp_path):
    lamb = fake_result(16384, 1e-2, 8.0, optimizer="lamb", precision="bf16")
    lamb.config["warmup_steps"] = 40
    ladder.save_ladder_result("+LARS", lamb, setting="layer-wise adaptive", directory=tmp_path)
    saved = results.load_results(tmp_path)["ladder_3"]
    assert (saved["step"], saved["ran_as"]) == ("+LARS", "LAMB")
    row = ladder.ladder_rows(tmp_path)[0]
    assert (row["ran"] == "batch 16384, lamb lr 0.01, linear warmup 40 steps, bf16"
            and row["dataset"] == "synthetic-tiny")
    assert row["tier"] == detect().tier and row["world_size"] == 1 and row["seed"] == 0
    cells = ladder.ladder_table(tmp_path).rows[0]
    assert (cells["step"], cells["ran as"]) == ("+LARS", "LAMB")
    assert cells["setting"] == "batch 16384, lamb lr 0.01, linear warmup 40 steps, bf16"
    assert ladder.what_ran({"global_batch_size": 4096, "optimizer": "adam", "peak_lr": 0.004, "lr_scaling": "sqrt",
                            "precision": "fp32"}, 2) == "batch 4096, adam lr 0.004 (sqrt rule), fp32, 2 ranks"
    sqrt = seeded(4096, 4e-3, 8.0, 0, rule="sqrt")
    ladder.save_ladder_result("+linear scaling", sqrt, directory=tmp_path)
    assert ladder.ladder_rows(tmp_path)[0]["ran_as"] == "sqrt scaling"


def test_a_rung_is_called_by_its_slot_and_shows_what_ran_beside_it(tmp_path):
    """What ran is a column beside the slot, never a second name: the verdicts, the rung built on and the note of the
    next lesson say the slot; a row saved without ``ran_as`` reads as before, its column filled from its setting."""
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), pace=STEADY, directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", seeded(4096, 4e-3, 10.0, 0, rule="sqrt"), pace=STEADY,
                              directory=tmp_path)
    lamb = fake_result(16384, 1e-2, 5.0, optimizer="lamb")
    lamb.config["warmup_steps"] = 40
    ladder.save_ladder_result("+LARS", lamb, pace=STEADY, directory=tmp_path)
    old = results.load_results(tmp_path)["ladder_3"]
    del old["ran_as"]
    results.save_result("ladder_3", old, tmp_path)
    questions = [c.question for c in ladder.ladder_comparisons(tmp_path)]
    assert questions == ["+linear scaling over baseline", "+LARS over baseline", "+LARS over +linear scaling"]
    table = ladder.ladder_table(tmp_path)
    assert [(r["step"], r["ran as"], r["built on"]) for r in table.rows] == [
        ("baseline", "—", None), ("+linear scaling", "sqrt scaling", "baseline"), ("+LARS", "LAMB", "+linear scaling")]
    note = ladder.start_from("+mixed precision", TrainConfig(), directory=tmp_path)[2]
    assert note.startswith("starting from the '+LARS' rung: ") and "LAMB" not in note and "ran as" not in note
    assert [r["interval"] != "—" for r in table.rows] == [False, True, True]
    import matplotlib

    matplotlib.use("Agg")
    ax = ladder_view.ladder_figure(tmp_path).axes[0]  # the figure's bars: slot and what ran, speedup with interval
    assert [t.get_text() for t in ax.get_yticklabels()][::-1] == ["baseline", "+linear scaling\nsqrt scaling",
                                                                  "+LARS\nLAMB"]
    assert sum(table.rows[2]["interval"] in t.get_text() for t in ax.texts) == 1


def test_ladder_figure_and_summary_png(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    assert ladder_view.ladder_figure(tmp_path / "empty") is None
    res = tmp_path / "results"
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), directory=res)
    ladder.save_ladder_result("+LARS", fake_result(65536, 1.0, 8.0, optimizer="lars"), directory=res)
    monkeypatch.syspath_prepend(str(REPO / "ci"))
    mod = importlib.import_module("run_notebooks")
    summary = mod.write_summary(mod.CourseRun("smoke", str(tmp_path)))
    text = summary.read_text()
    assert (tmp_path / "ladder.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![The trick ladder](ladder.png)" in text and "| +LARS |" in text and "| 5x |" in text
    assert "| +LARS over baseline |" in text  # the rung's comparison in the summary's verdict table


@pytest.mark.parametrize("tier", ["cpu", "one-gpu", "multi-gpu"])
def test_the_ladder_decides_what_each_tier_records(tier, tmp_path):
    """The rungs each tier's plan makes the lessons record (recorded shapes, not runs): on a CPU without native
    bf16 the 16-bit rung is slower and lesson 06 carries fp32; on GPUs it is faster; on one GPU there is no
    data-parallel rung."""
    from test_tiers import EIGHT, LAPTOP, ONE

    hw = {"cpu": LAPTOP, "one-gpu": ONE, "multi-gpu": EIGHT}[tier]
    p = tiers.plan(hw)
    save = lambda step, r, **kw: ladder.save_ladder_result(step, r, pace=STEADY, directory=tmp_path, **kw)  # noqa: E731
    save("baseline", fake_result(256, 1e-3, 100.0))
    save("+linear scaling", fake_result(4096, 4e-3, 20.0))
    save("+warmup", fake_result(16384, 8e-3, 12.0))
    save("+LARS", fake_result(32768, 1e-2, 10.0, optimizer="lamb"))
    slower = p.precision == "fp32"
    mixed = fake_result(32768, 1e-2, 14.0 if slower else 6.0, optimizer="lamb", precision="bf16")
    carry = TrainConfig.from_dict(mixed.config).replace(precision="fp32" if slower else "bf16")
    save("+mixed precision", mixed, carry=carry)
    if p.dp_on_ladder:
        save("+data parallel", fake_result(32768, 1e-2, 8.0 if slower else 1.0, optimizer="lamb",
                                           precision=carry.precision))
    rows = {r["step"]: r for r in ladder.ladder_rows(tmp_path)}
    mp = rows["+mixed precision"]
    assert mp["vs_below"].outcome == (compare.LOWER if slower else compare.HIGHER)
    assert mp["previous_step"] == "+LARS" and mp["ran_as"] == "bf16"
    assert ("+data parallel" in rows) == p.dp_on_ladder  # one GPU: CPU ranks are not put on the GPU's ladder
    cfg, rung, _ = ladder.start_from("+data parallel", TrainConfig(), directory=tmp_path)
    # a slower rung is not built on: the best so far ('+LARS', fp32) is, which is what lesson 05 carried
    assert rung["step"] == ("+LARS" if slower else "+mixed precision")
    assert cfg.precision == ("fp32" if slower else "bf16")


def test_a_rung_that_did_not_help_is_not_built_on(tmp_path):
    """'+warmup' level with the rung below: lessons 04-06 start from the best rung so far ('+linear scaling'),
    not from the rung below; the note says which it passed over. Once it helps, it is the best so far."""
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 54.4), pace=STEADY, directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", seeded(16384, 8e-3, 7.0, 0, rule="sqrt"),
                              seeds=[seeded(16384, 8e-3, 8.0, 1, rule="sqrt")], pace=STEADY, directory=tmp_path)
    ladder.save_ladder_result("+warmup", seeded(65536, 1.6e-2, 10.5, 0, rule="sqrt"),
                              seeds=[seeded(65536, 1.6e-2, 6.9, 1, rule="sqrt")], pace=STEADY, directory=tmp_path)
    default = TrainConfig(global_batch_size=256, base_lr=1e-3, optimizer="adam")
    cfg, rung, note = ladder.start_from("+LARS", default, directory=tmp_path)
    assert rung["step"] == "+linear scaling" and cfg.global_batch_size == 16384
    assert note.endswith("passed over: '+warmup' (speedup over '+linear scaling': unresolved)")
    ladder.save_ladder_result("+warmup", seeded(65536, 1.6e-2, 3.0, 0, rule="sqrt"),
                              seeds=[seeded(65536, 1.6e-2, 3.2, 1, rule="sqrt")], pace=STEADY, directory=tmp_path)
    assert ladder.start_from("+LARS", default, directory=tmp_path)[1]["step"] == "+warmup"
    ladder.save_ladder_result("+LARS", seeded(131072, 1e-2, 2.0, 0, "lamb"), pace=STEADY, directory=tmp_path)
    rows = {r["step"]: r for r in ladder.ladder_rows(tmp_path)}
    assert rows["+LARS"]["previous_step"] == "+warmup" and rows["+LARS"]["ran_as"] == "LAMB"


def test_a_pace_that_moved_widens_every_speedup_over_the_rung(tmp_path):
    """A baseline whose own yardstick moved 39% in its lesson: every speedup over it carries that in its interval,
    and a 20% speedup is then unresolved; the same run at a steady pace is decided."""
    for pace, outcome in (({"before": 100.0, "after": 139.0, "rate": 119.5}, compare.UNRESOLVED),
                          (STEADY, compare.HIGHER)):
        d = tmp_path / outcome
        ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 12.0), directory=d, pace=pace)
        ladder.save_ladder_result("+linear scaling", fake_result(16384, 8e-3, 10.0), directory=d,
                                  pace={**pace, "before": pace["rate"], "after": pace["rate"]})
        c = ladder.ladder_rows(d)[1]["comparison"]
        assert c.estimate == pytest.approx(1.2) and c.outcome == outcome, c


def test_a_rung_its_lesson_decided_on_one_setting_is_built_on(tmp_path):
    """A rung saved with ``decided_by`` over the rung it built on (lesson 05: bf16 against fp32 on one setting, at
    one pace) helped even where the paced seconds leave it unresolved: the next lesson starts from its carry;
    without it, or decided over another rung, the rung is passed over."""
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 54.4), pace=STEADY, directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", fake_result(16384, 8e-3, 7.0), seeds=[fake_result(16384, 8e-3, 8.0)],
                              pace=STEADY, directory=tmp_path)
    default = TrainConfig(global_batch_size=256, base_lr=1e-3, optimizer="adam")
    below_cfg = ladder.start_from("+mixed precision", default, directory=tmp_path)[0]

    def save(decided_by):
        ladder.save_ladder_result("+mixed precision", fake_result(16384, 8e-3, 7.4, precision="bf16"),
                                  seeds=[fake_result(16384, 8e-3, 6.9, precision="bf16")], pace=STEADY,
                                  carry=below_cfg.replace(precision="bf16" if decided_by else "fp32"),
                                  decided_by=decided_by, directory=tmp_path)
        return {r["step"]: r for r in ladder.ladder_rows(tmp_path)}["+mixed precision"]

    mp = save(None)
    assert not mp["vs_below"].decided and not mp["helped"]
    assert ladder.start_from("+data parallel", default, directory=tmp_path)[1]["step"] == "+linear scaling"
    mp = save({"over": "+linear scaling", "by": "pace"})
    assert mp["helped"] and mp["decided"] == "pace"
    cfg, rung, note = ladder.start_from("+data parallel", default, directory=tmp_path)
    assert rung["step"] == "+mixed precision" and cfg.precision == "bf16", note
    assert ladder.ladder_table(tmp_path).rows[2]["decided in lesson by"] == "pace"
    assert not save({"over": "+warmup", "by": "pace"})["helped"]


def test_a_grown_batch_keeps_steps_in_an_epoch(data):
    cfg = TrainConfig()
    samples = data.num_train * (1 + cfg.neg_per_pos)
    assert ladder.grown_batch(64, 4, data, cfg, min_steps_per_epoch=2) == (256, "4x the batch of the rung below (64)")
    cap = 1 << ((samples // 8).bit_length() - 1)  # the largest power of two with 8 steps per epoch
    batch, note = ladder.grown_batch(cap // 2, 4, data, cfg)
    assert batch == cap and "(2x the rung below's" in note and "fewer than 8 steps per epoch" in note
    assert ladder.grown_batch(cap, 4, data, cfg)[0] == cap  # no room: the trick is added at the same batch


def test_the_yardstick_pace_is_a_rate_of_the_baseline_step_and_pace_records_both_ends(data, tmp_path):
    cfg = TrainConfig(global_batch_size=64, base_lr=1e-3, optimizer="adam")
    assert ladder.yardstick_pace(data, cfg, steps=5, repeats=2) > 0
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), directory=tmp_path,
                               pace={"before": 1e9, "after": 1e9, "rate": 1e9})
    pace = ladder.Pace(data, cfg, steps=5, repeats=1, directory=tmp_path, quiet=True)
    assert pace.baseline == 1e9 and "lesson 01 measured 1,000,000,000" in pace.describe()
    rec = pace.finish()
    assert set(rec) == {"before", "after", "rate"} and rec["rate"] == pytest.approx((rec["before"] + rec["after"]) / 2)


def test_ladder_refuses_rungs_of_different_datasets(tmp_path):
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), setting="b256", directory=tmp_path)
    other = fake_result(4096, 4e-3, 10.0)
    other.dataset = "ml-20m"
    ladder.save_ladder_result("+linear scaling", other, setting="b4096", directory=tmp_path)
    for read in (ladder.ladder_rows, ladder.ladder_table, ladder_view.ladder_figure):
        with pytest.raises(ladder.LadderMismatch, match="'baseline': synthetic-tiny, '\\+linear scaling': ml-20m"):
            read(tmp_path)


def test_scaling_rules_table_and_configs():
    base = TrainConfig(global_batch_size=256, base_lr=1e-3, optimizer="adam")
    t = scaling_table(1e-3, 256, [256, 1024, 65536])
    assert [r["lr (linear: k x)"] for r in t.rows] == pytest.approx([1e-3, 4e-3, 0.256])
    assert [r["lr (sqrt: sqrt(k) x)"] for r in t.rows] == pytest.approx([1e-3, 2e-3, 1.6e-2])
    scaled = scaled_config(base, 4096, "sqrt")
    assert scaled.peak_lr == pytest.approx(4e-3)
    assert (scaled.base_lr, scaled.base_batch_size, scaled.lr_scaling) == (1e-3, 256, "sqrt")  # the base is kept
    assert scaled_config(scaled, 16384, "linear").peak_lr == pytest.approx(1e-3 * 64)  # from the same base
    assert scaled_config(base, 4096, "linear", warmup_steps=10).warmup_steps == 10
    with pytest.raises(ValueError):
        scaled_config(base, 4096, "cubic")
    table = sweep_table([fake_result(256, 1e-3, 40.0), fake_result(4096, 4e-3, None)], ["linear", "linear"])
    assert table.rows[1]["time to target (s)"] == "not reached"


def test_figure_lines_one_per_scalar_and_unreached_said_so(tmp_path):
    results.save_result("07_x", {"lamb_steps_to_target": 60, "adam_steps_to_target": None, "time_to_target_s": None,
                                 "speedup": 2.03, "label": "text is not a figure", "curve": [1, 2], "ok": True,
                                 "note": None}, directory=tmp_path)
    assert summary.figure_lines(tmp_path) == [
        "FIGURE 07_x.adam_steps_to_target = not reached",
        "FIGURE 07_x.lamb_steps_to_target = 60",
        "FIGURE 07_x.speedup = 2.03",
        "FIGURE 07_x.time_to_target_s = not reached",
    ]


def test_at_batch_keeps_a_rule_or_scales_an_lr_given_as_is():
    from course_lib.sweeps import at_batch

    ruled = scaled_config(TrainConfig(global_batch_size=256, base_lr=1e-3), 4096, "sqrt")
    assert at_batch(ruled, 1024).peak_lr == pytest.approx(1e-3 * 2)  # sqrt(1024 / 256), from its own base
    given = TrainConfig(global_batch_size=4096, base_lr=4e-3)
    assert at_batch(given, 1024, "linear").peak_lr == pytest.approx(1e-3)  # 4e-3 x 1024 / 4096
    assert at_batch(given, 16384).peak_lr == pytest.approx(8e-3)  # sqrt by default


def test_a_race_whose_every_lr_blew_up_extends_its_grid_downward():
    from course_lib.sweeps import blew_up, sweep_with_edge_extension

    def run(f):
        r = fake_result(131072, 8.0 * f, None, hr=0.107 - 0.001 * f, optimizer="sgd")  # chance-level noise
        r.curve = {"loss": [None, 2.9 if f >= 0.25 else 0.6]}
        return r

    score = lambda r: (2, r.config["peak_lr"]) if blew_up(r) else (1, -(r.final_hr or 0.0))  # noqa: E731
    done = sweep_with_edge_extension(run, (0.5, 1.0, 2.0), score, max_extensions=3)
    # down to the first lr that did not blow up, and one more
    assert sorted(done) == [0.0625, 0.125, 0.25, 0.5, 1.0, 2.0]




def test_the_talks_ladder_holds_its_figures_as_said_in_the_courses_slots():
    assert [t.step for t in ladder_view.TALK_LADDER] == list(ladder.LADDER_STEPS[:5])
    assert [t.time_s for t in ladder_view.TALK_LADDER] == [1384.0, 172.0, 130.0, 135.0, 70.0]
    for t in ladder_view.TALK_LADDER:  # each time is quoted where the talk says it
        assert f"{t.time_s:g}" in t.says and t.where
    linear, mixed = ladder_view.TALK_LADDER[1], ladder_view.TALK_LADDER[4]
    assert "9x" in linear.says and "2x" in mixed.says  # its own words, beside its times' ratio
    assert ladder_view.talk_speedup(linear) == pytest.approx(1384 / 172)
    assert ladder_view.talk_speedup(ladder_view.TALK_LADDER[0]) == 1


def _plan(**changes):
    import dataclasses

    return dataclasses.replace(tiers.plan(detect()), **changes)


def test_the_talks_ladder_sits_beside_this_machines_with_its_interval_and_outcome(tmp_path):
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), pace=STEADY, directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", fake_result(4096, 4e-3, 10.0), pace=STEADY, directory=tmp_path)
    ladder.save_ladder_result("+warmup", fake_result(16384, 1e-2, None, hr=0.7), pace=STEADY, directory=tmp_path)
    rows = ladder_view.talk_table(tmp_path, _plan(precision="bf16", dp_device="cuda")).rows
    assert [r["rung"] for r in rows] == list(ladder.LADDER_STEPS)
    base, linear, warm, lars, mixed, dp = rows
    assert (linear["talk's time (s)"], linear["talk's speedup"]) == ("172", "8.05x")
    assert linear["this machine's speedup"] == "4x" and linear["outcome"] == compare.HIGHER
    assert linear["interval"] == ladder.ladder_rows(tmp_path)[1]["comparison"].row()["interval"]
    assert (warm["this machine's speedup"], warm["outcome"]) == ("not reached", "—")
    assert lars["this machine's speedup"] == "not saved" and dp["the talk ran"] == "—"
    assert all(r["this hardware"] == "—" for r in rows)  # 16-bit units and a GPU per rank: nothing it cannot show


def test_what_this_hardware_cannot_show_comes_from_the_tier_plan_as_fixed_words(tmp_path):
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), pace=STEADY, directory=tmp_path)
    rows = ladder_view.talk_table(tmp_path, _plan(precision="fp32", dp_device="cpu")).rows
    assert {r["rung"]: r["this hardware"] for r in rows if r["this hardware"] != "—"} == {
        "+mixed precision": ladder_view.NO_16_BIT_UNITS, "+data parallel": ladder_view.ONE_DEVICE}
    one_gpu = _plan(precision="bf16", dp_device="cpu", dp_on_ladder=False)  # its ranks are CPU processes
    assert ladder_view.hardware_limit("+data parallel", one_gpu) == ladder_view.ONE_DEVICE
    assert ladder_view.hardware_limit("+mixed precision", one_gpu) is None
    assert ladder_view.hardware_limit("+mixed precision", _plan(precision="fp16")) is None  # fp16 units without bf16


def test_summary_and_figure_show_the_talks_ladder_beside_this_machines(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), pace=STEADY, directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", fake_result(4096, 4e-3, 10.0), pace=STEADY, directory=tmp_path)
    md = summary.summary_markdown(tmp_path)
    assert "The talk's ladder beside this machine's" in md and ladder_view.TALK_SOURCE in md
    assert md.index("The trick ladder") < md.index("The talk's ladder")
    fig = ladder_view.ladder_figure(tmp_path, tier_plan=_plan(precision="fp32", dp_device="cpu"))
    beside = fig.axes[2]
    assert [t.get_text() for t in beside.get_yticklabels()] == list(ladder.LADDER_STEPS)
    assert len(beside.patches) == len(ladder_view.TALK_LADDER) + 2  # the talk's five bars and this machine's two
    notes = {t.get_text().strip() for t in beside.texts}
    assert {"not saved", ladder_view.NO_16_BIT_UNITS, ladder_view.ONE_DEVICE} <= notes
