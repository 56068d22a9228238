"""The trick ladder: rows saved by lessons 01-05, its table, its figure, and the run summary's PNG."""

import importlib
from pathlib import Path

import pytest

from course_lib import ladder, results, summary, tiers
from course_lib.hardware import detect
from course_lib.sweeps import scaled_config, scaling_table, sweep_table
from course_lib.train import TrainConfig, TrainResult

REPO = Path(__file__).resolve().parent.parent


def fake_result(batch, lr, ttt, hr=0.76, optimizer="adam", precision="fp32") -> TrainResult:
    cfg = TrainConfig(global_batch_size=batch, base_lr=lr, optimizer=optimizer, precision=precision)
    return TrainResult(config=cfg.to_dict(), dataset="synthetic-tiny", data_source="test", synthetic=True,
                       device="cpu", world_size=1, target_hr=0.75, time_to_target_s=ttt,
                       steps_to_target=None if ttt is None else 100, epochs_to_target=None if ttt is None else 1.0,
                       epochs=1.0, steps=100, samples=batch * 100, train_time_s=ttt or 50.0, eval_time_s=1.0,
                       samples_per_s=1e5, phase_time_s={}, final_hr=hr, precision={"mode": precision})


def test_ladder_rows_order_speedup_and_not_reached(tmp_path):
    ladder.save_ladder_result("+warmup", fake_result(16384, 0.01, None, hr=0.7), setting="b16384 warmup",
                               directory=tmp_path)
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), setting="b256", directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", fake_result(4096, 4e-3, 10.0), setting="b4096",
                               directory=tmp_path)
    rows = ladder.ladder_rows(tmp_path)
    assert [r["step"] for r in rows] == ["baseline", "+linear scaling", "+warmup"]
    assert rows[0]["speedup"] == pytest.approx(1.0) and rows[1]["speedup"] == pytest.approx(4.0)
    assert rows[2]["speedup"] is None and rows[2]["time_to_target_s"] is None
    assert rows[1]["batch_size"] == 4096 and rows[1]["precision"] == "fp32"
    md = ladder.ladder_table(tmp_path).to_markdown()
    assert "4.0x" in md and "not reached" in md and "not measured" in md  # no pace recorded: said, not assumed
    ladder.save_ladder_result("+LARS", fake_result(16384, 0.01, 20.0, optimizer="lamb"), setting="b16384 lamb",
                               directory=tmp_path, reason="LAMB needed 2x Adam's steps here")
    rows = ladder.ladder_rows(tmp_path)  # +LARS is compared with +linear scaling (+warmup never reached)
    assert rows[3]["vs_previous"] == pytest.approx(0.5) and rows[3]["previous_step"] == "+linear scaling"
    # read f12d 06-H3: the rung's reason is its lesson's own comparison, introduced as such
    assert "slower than '+linear scaling', this trick did not help here; lesson 04's own comparison (the layer-wise " \
        "optimizer against Adam, at one pace): LAMB needed 2x Adam's steps here" in \
        ladder.ladder_table(tmp_path).to_markdown()
    reading = ladder.ladder_reading(tmp_path)
    assert "the fastest rung is '+linear scaling': 4.0x" in reading
    assert "+LAMB was slower than '+linear scaling' (0.50x). Lesson 04's own comparison (the layer-wise optimizer " \
        "against Adam, at one pace): LAMB needed 2x" in reading  # #37: named by what ran; f12d 06-H3: whose reason
    assert "+warmup: did not reach the target" in reading
    with pytest.raises(ValueError):
        ladder.save_ladder_row("+magic", time_to_target_s=1.0, final_hr=0.8, target_hr=0.75, dataset="synthetic-tiny",
                               directory=tmp_path)
    with pytest.raises(ValueError, match="dataset"):
        ladder.save_ladder_row("+LARS", time_to_target_s=1.0, final_hr=0.8, target_hr=0.75, dataset="",
                               directory=tmp_path)


def test_a_rung_measured_while_the_machine_was_slower_is_compared_at_the_baseline_pace(tmp_path):
    base_pace = {"before": 100.0, "after": 100.0, "rate": 100.0}
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), pace=base_pace, directory=tmp_path)
    # the machine ran at half the pace during this lesson: its 20 s are 10 s at lesson 01's pace
    ladder.save_ladder_result("+linear scaling", fake_result(4096, 4e-3, 20.0), directory=tmp_path,
                               pace={"before": 60.0, "after": 40.0, "rate": 50.0})
    ladder.save_ladder_result("+warmup", fake_result(16384, 8e-3, 9.0), directory=tmp_path,
                               pace={"before": 95.0, "after": 105.0, "rate": 100.0})
    base, lin, warm = ladder.ladder_rows(tmp_path)
    assert lin["paced_time_s"] == pytest.approx(10.0) and lin["speedup"] == pytest.approx(4.0)
    assert lin["pace_drift"] == pytest.approx(-0.5) and len(lin["flags"]) == 2  # slower than lesson 01, and moving
    assert "-50% vs lesson 01's pace: compare steps, not seconds" in lin["flags"][0]
    assert "the pace moved -33% during the lesson" in lin["flags"][1]
    assert warm["vs_previous"] == pytest.approx(10.0 / 9.0) and warm["flags"] == []  # paced 10 s vs 9 s
    # ... but the yardstick moved 33% and 10% within the two lessons: 1 s in 10 is not measurable through it
    assert "no measurable difference" in warm["vs_noise"] and "resolution of 4.39 s" in warm["vs_noise"]
    md = ladder.ladder_table(tmp_path).to_markdown()
    assert "| -50% (!) " in md and "| +0% |" in md
    assert "paced seconds are unreliable for +linear scaling" in ladder.ladder_reading(tmp_path)


def test_a_rung_at_two_seeds_takes_their_mean_and_is_read_against_their_spread(tmp_path):
    def seeded(ttt, seed, batch=4096):
        r = fake_result(batch, 4e-3, ttt)
        r.config["seed"] = seed
        return r

    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", seeded(10.0, 0), seeds=[seeded(12.0, 1)], directory=tmp_path)
    ladder.save_ladder_result("+warmup", seeded(11.5, 0, 16384), seeds=[seeded(10.5, 1, 16384)], directory=tmp_path)
    _, lin, warm = ladder.ladder_rows(tmp_path)
    assert lin["time_to_target_s"] == pytest.approx(11.0) and [s["seed"] for s in lin["seed_runs"]] == [0, 1]
    assert warm["vs_previous"] == pytest.approx(1.0) and "no measurable difference" in warm["vs_noise"]
    md = ladder.ladder_table(tmp_path).to_markdown()
    assert "11.0 (seeds: 10.0, 12.0)" in md and "1.00x: no measurable difference" in md
    assert "no measurable difference from the rung below: +warmup" in ladder.ladder_reading(tmp_path)
    # a setting that reached the target on one seed of two is not a rung that reached it
    ladder.save_ladder_result("+LARS", seeded(8.0, 0, 16384), seeds=[seeded(None, 1, 16384)], directory=tmp_path)
    lars = ladder.ladder_rows(tmp_path)[-1]
    assert lars["time_to_target_s"] is None and lars["steps_to_target"] is None
    assert "not reached (on 1 of 2 seeds)" in ladder.ladder_table(tmp_path).to_markdown()


def test_each_lesson_starts_from_the_closest_rung_below_that_reached_the_target(tmp_path):
    default = TrainConfig(global_batch_size=256, base_lr=1e-3, optimizer="adam", max_epochs=3, target_hr=0.75)
    cfg, rung, note = ladder.start_from("+linear scaling", default, directory=tmp_path)
    assert cfg == default and rung is None and "no 'baseline' rung is saved" in note
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), directory=tmp_path)
    lin = fake_result(4096, 1e-3, 10.0)
    lin.config.update(scaled_config(TrainConfig(base_lr=1e-3, optimizer="adam", max_epochs=9, seed=3), 4096,
                                    "sqrt", base_batch_size=256).to_dict())
    ladder.save_ladder_result("+linear scaling", lin, directory=tmp_path)
    ladder.save_ladder_result("+warmup", fake_result(16384, 0.01, None, hr=0.7), directory=tmp_path)
    cfg, rung, note = ladder.start_from("+LARS", default, directory=tmp_path)
    assert rung["step"] == "+linear scaling" and (cfg.global_batch_size, cfg.lr_scaling) == (4096, "sqrt")
    assert cfg.peak_lr == pytest.approx(4e-3) and (cfg.max_epochs, cfg.seed, cfg.target_hr) == (3, 0, 0.75)
    assert note.startswith("the '+warmup' rung did not reach the target, so this lesson starts from the "
                           "'+linear scaling' rung's setting (shown as '+sqrt scaling': what ran), the best so far: "
                           "batch 4096, adam lr 0.004 (sqrt rule), fp32")
    # a rung that carries another setting up
    bf16 = fake_result(4096, 4e-3, 8.0, precision="bf16")
    ladder.save_ladder_result("+mixed precision", bf16,
                              carry=TrainConfig.from_dict(bf16.config).replace(precision="fp32"),
                              directory=tmp_path)
    cfg, rung, note = ladder.start_from("+data parallel", default, directory=tmp_path)
    assert rung["step"] == "+mixed precision" and cfg.precision == "fp32" and "(the setting it carries up)" in note
    assert ladder.start_from("+data parallel", default, dataset="ml-20m", directory=tmp_path)[1] is None
    with pytest.raises(ValueError, match="unknown ladder step"):
        ladder.start_from("+magic", default, directory=tmp_path)


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


def test_a_rung_not_run_says_why(tmp_path):
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), directory=tmp_path)
    ladder.save_ladder_row("+mixed precision", time_to_target_s=None, final_hr=None, target_hr=0.75,
                           dataset="synthetic-tiny", not_run="bf16 ran at 0.05x fp32's throughput here",
                           directory=tmp_path)
    assert "not run: bf16 ran at 0.05x" in ladder.ladder_table(tmp_path).to_markdown()
    assert "+mixed precision: not run (bf16 ran at 0.05x" in ladder.ladder_reading(tmp_path)


def test_ladder_refuses_rungs_of_different_datasets(tmp_path):
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), setting="b256", directory=tmp_path)
    other = fake_result(4096, 4e-3, 10.0)
    other.dataset = "ml-20m"
    ladder.save_ladder_result("+linear scaling", other, setting="b4096", directory=tmp_path)
    for read in (ladder.ladder_rows, ladder.ladder_table, ladder.ladder_figure):
        with pytest.raises(ladder.LadderMismatch, match="'baseline': synthetic-tiny, '\\+linear scaling': ml-20m"):
            read(tmp_path)


def test_each_rung_says_what_actually_ran(tmp_path):
    lamb = fake_result(16384, 1e-2, 8.0, optimizer="lamb", precision="bf16")
    lamb.config["warmup_steps"] = 40
    ladder.save_ladder_result("+LARS", lamb, setting="layer-wise adaptive", directory=tmp_path)
    row = ladder.ladder_rows(tmp_path)[0]
    assert (row["ran"] == "batch 16384, lamb lr 0.01, linear warmup 40 steps, bf16"
            and row["dataset"] == "synthetic-tiny")
    assert row["tier"] == detect().tier and row["world_size"] == 1 and row["seed"] == 0
    assert "| batch 16384, lamb lr 0.01, linear warmup 40 steps, bf16 |" in ladder.ladder_table(tmp_path).to_markdown()
    assert ladder.what_ran({"global_batch_size": 4096, "optimizer": "adam", "peak_lr": 0.004, "lr_scaling": "sqrt",
                            "precision": "fp32"}, 2) == "batch 4096, adam lr 0.004 (sqrt rule), fp32, 2 ranks"


def test_ladder_figure_and_summary_png(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    assert ladder.ladder_figure(tmp_path / "empty") is None
    res = tmp_path / "results"
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 40.0), setting="b256", directory=res)
    ladder.save_ladder_result("+LARS", fake_result(65536, 1.0, 8.0, optimizer="lars"), setting="lars",
                               directory=res)
    monkeypatch.syspath_prepend(str(REPO / "ci"))
    mod = importlib.import_module("run_notebooks")
    summary = mod.write_summary(mod.CourseRun("smoke", str(tmp_path)))
    text = summary.read_text()
    assert (tmp_path / "ladder.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![The trick ladder](ladder.png)" in text and "| +LARS |" in text and "5.0x" in text


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


@pytest.mark.parametrize("tier", ["cpu", "one-gpu", "multi-gpu"])
def test_the_ladder_reading_is_true_for_what_each_tier_records(tier, tmp_path):
    """#21: the ladder's computed reading, fed the rungs each tier's plan makes the lessons record
    (recorded shapes, not runs): on a CPU without native bf16 the 16-bit rung is slower and says why,
    and lesson 06 carries fp32; on GPUs it is faster; on one GPU there is no data-parallel rung."""
    from test_tiers import EIGHT, LAPTOP, ONE

    hw = {"cpu": LAPTOP, "one-gpu": ONE, "multi-gpu": EIGHT}[tier]
    p = tiers.plan(hw)
    pace = {"before": 100.0, "after": 100.0, "rate": 100.0}
    save = lambda step, r, **kw: ladder.save_ladder_result(step, r, pace=pace, directory=tmp_path, **kw)  # noqa: E731
    save("baseline", fake_result(256, 1e-3, 100.0))
    save("+linear scaling", fake_result(4096, 4e-3, 20.0))
    save("+warmup", fake_result(16384, 8e-3, 12.0))
    save("+LARS", fake_result(32768, 1e-2, 10.0, optimizer="lamb"))
    sixteen = "bf16"  # what lesson 05 tries first; fp32 is what "auto" means on a CPU without native bf16
    slower = p.precision == "fp32"
    mixed = fake_result(32768, 1e-2, 14.0 if slower else 6.0, optimizer="lamb", precision=sixteen)
    carry = TrainConfig.from_dict(mixed.config).replace(precision="fp32" if slower else sixteen)
    save("+mixed precision", mixed, carry=carry,
         reason=f"{sixteen} ran at {'0.70' if slower else '1.80'}x fp32's throughput here")
    if p.dp_on_ladder:
        save("+data parallel", fake_result(32768, 1e-2, 8.0 if slower else 1.0, optimizer="lamb",
                                           precision=carry.precision))
    reading = ladder.ladder_reading(tmp_path)
    if slower:
        assert ("+bf16 (the mixed-precision rung) was slower than '+LAMB' (0.714x). Lesson 05's own comparison (16 "
                "bits against fp32, at one pace): bf16 ran at 0.70x fp32's throughput here") in reading  # three
        # figures: the pace did not move; the reason introduced as lesson 05's own comparison (read f12d 06-H3)
    else:
        assert "+bf16 (the mixed-precision rung)" in reading.split("faster than the rung below: ")[1].splitlines()[0]
        assert "slower" not in reading
    assert ("+data parallel" in reading) == p.dp_on_ladder  # one GPU: CPU ranks are not put on the GPU's ladder
    cfg, rung, _ = ladder.start_from("+data parallel", TrainConfig(), directory=tmp_path)
    # #37: a slower rung is not built on: the best so far ('+LARS', fp32) is, which is what lesson 05 carried
    assert rung["step"] == ("+LARS" if slower else "+mixed precision")
    assert cfg.precision == ("fp32" if slower else "bf16")


def test_a_rung_that_did_not_help_beyond_the_noise_is_not_built_on(tmp_path):
    """#37 (review 03 #7): '+warmup' ran at 0.82x the rung below, "no measurable difference": lessons 04-06 start
    from the best rung so far ('+linear scaling'), not from the rung below; the note says which it passed over."""
    def seeded(batch, lr, ttt, seed, optimizer="adam"):
        r = fake_result(batch, lr, ttt, optimizer=optimizer)
        r.config.update(seed=seed, lr_scaling="sqrt", base_batch_size=256)
        return r

    pace = {"before": 100.0, "after": 100.0, "rate": 100.0}
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 54.4), pace=pace, directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", seeded(16384, 8e-3, 7.0, 0), seeds=[seeded(16384, 8e-3, 8.0, 1)],
                              pace=pace, directory=tmp_path)
    ladder.save_ladder_result("+warmup", seeded(65536, 1.6e-2, 10.5, 0), seeds=[seeded(65536, 1.6e-2, 6.9, 1)],
                              pace=pace, directory=tmp_path)
    default = TrainConfig(global_batch_size=256, base_lr=1e-3, optimizer="adam")
    cfg, rung, note = ladder.start_from("+LARS", default, directory=tmp_path)
    assert rung["step"] == "+linear scaling" and cfg.global_batch_size == 16384
    assert "the '+warmup' rung did not help beyond the noise (no measurable difference" in note
    assert "starts from the '+linear scaling' rung's setting (shown as '+sqrt scaling': what ran), the best so far" \
        in note
    # ... and once it helps beyond the noise, it is the best so far
    ladder.save_ladder_result("+warmup", seeded(65536, 1.6e-2, 3.0, 0), seeds=[seeded(65536, 1.6e-2, 3.2, 1)],
                              pace=pace, directory=tmp_path)
    assert ladder.start_from("+LARS", default, directory=tmp_path)[1]["step"] == "+warmup"
    # a rung that ran LAMB is compared with the best rung below, and named by what ran
    ladder.save_ladder_result("+LARS", seeded(131072, 1e-2, 2.0, 0, "lamb"), pace=pace, directory=tmp_path)
    rows = {r["step"]: r for r in ladder.ladder_rows(tmp_path)}
    assert rows["+LARS"]["previous_step"] == "+warmup" and rows["+LARS"]["name"] == "+LAMB"
    assert rows["+linear scaling"]["name"] == "+sqrt scaling"
    md = ladder.ladder_table(tmp_path).to_markdown()
    assert "| +sqrt scaling |" in md and "| +LAMB |" in md
    assert "named by what ran: '+linear scaling' ran as '+sqrt scaling'" in ladder.ladder_reading(tmp_path)


def test_speedups_carry_the_figures_their_pace_drift_allows(tmp_path):
    """#37 (review: a baseline whose own pace moved 39 %): one significant figure, and the ± it carries."""
    assert ladder.speedup_cell(7.27, 0.39) == "7x (±39%)" and ladder.speedup_cell(7.27, 0.04) == "7.3x (±4%)"
    assert ladder.speedup_cell(7.27, 0.002) == "7.27x" and ladder.speedup_cell(7.27, None) == "7.3x"
    assert ladder.speedup_cell(26.0, 0.3) == "26x (±30%)" and ladder.speedup_cell(None, 0.1) == "—"
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 54.4), directory=tmp_path,
                              pace={"before": 100.0, "after": 139.0, "rate": 119.5})
    ladder.save_ladder_result("+linear scaling", fake_result(16384, 8e-3, 7.0), directory=tmp_path,
                              pace={"before": 119.5, "after": 119.5, "rate": 119.5})
    lin = ladder.ladder_rows(tmp_path)[1]
    assert lin["speedup_uncertainty"] == pytest.approx(0.39)
    assert "| 8x (±39%) |" in ladder.ladder_table(tmp_path).to_markdown()


def test_a_rung_within_the_noise_of_the_one_below_names_it_as_the_table_shows_it(tmp_path):
    """#37 (full run of 2026-12-01, lesson 03 cell 16): "no measurable difference (paced time to target: +warmup
    5.87 s vs +linear scaling 4.36 s ...)" under a row printed "+sqrt scaling". Opposite: a linear-rule rung."""
    for rule, shown in (("sqrt", "+sqrt scaling"), ("linear", "+linear scaling")):
        d = tmp_path / rule
        runs = []
        for batch, ttt in ((16384, 4.0), (16384, 4.4), (65536, 4.2), (65536, 3.9)):
            r = fake_result(batch, 8e-3, ttt)
            r.config.update(lr_scaling=rule, base_batch_size=256)
            runs.append(r)
        ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 30.0), directory=d)
        ladder.save_ladder_result("+linear scaling", runs[0], seeds=[runs[1]], directory=d)
        ladder.save_ladder_result("+warmup", runs[2], seeds=[runs[3]], directory=d)
        table = ladder.ladder_table(d)
        assert table.rows[1]["step"] == shown
        below = table.rows[2]["vs the rung below"]
        assert "no measurable difference" in below and f"vs {shown} " in below, below
        if shown != "+linear scaling":
            assert "+linear scaling" not in below, below
        # a pace that drifted: the reading's list of unreliable rungs names them as the table does too
        drifted = {"before": 100.0, "after": 70.0, "rate": 85.0}
        ladder.save_ladder_result("+linear scaling", runs[0], seeds=[runs[1]], pace=drifted, directory=d)
        ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 30.0), pace={"before": 85.0, "after": 85.0,
                                                                                   "rate": 85.0}, directory=d)
        assert f"paced seconds are unreliable for {shown} (" in ladder.ladder_reading(d)


def test_the_rung_below_is_named_as_the_table_shows_it_at_the_figures_pacing_allows(tmp_path):
    """#37 (full run 2026-12-01): "0.67x: slower than '+linear scaling'" under a row printed "+sqrt scaling", and
    "6.27x" beside "6x (±18%)". Opposite results: a pace that moved (one figure), one that held (three), none."""
    def sqrt_run(batch, ttt):
        r = fake_result(batch, 8e-3, ttt)
        r.config.update(lr_scaling="sqrt", base_batch_size=256)
        return r

    for pace, cell in (({"before": 100.0, "after": 85.0, "rate": 92.5}, "0.7x (±30%)"),
                       ({"before": 100.0, "after": 100.0, "rate": 100.0}, "0.667x"), (None, "0.67x")):
        d = tmp_path / str(cell)
        ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 30.0), pace=pace, directory=d)
        ladder.save_ladder_result("+linear scaling", sqrt_run(16384, 4.0), pace=pace, directory=d)
        ladder.save_ladder_result("+warmup", sqrt_run(65536, 6.0), pace=pace, directory=d)
        below = ladder.ladder_table(d).rows[2]["vs the rung below"]
        assert below.startswith(f"{cell}: slower than '+sqrt scaling'"), below
        assert f"+warmup was slower than '+sqrt scaling' ({cell})" in ladder.ladder_reading(d)


def test_a_rung_its_lesson_decided_by_pace_on_the_same_steps_is_built_on(tmp_path):
    """#37 (fourth full run): bf16 took the same 285 steps as fp32 at 1.30x its pace (lesson 05's interleaved
    throughput runs, tolerance 4%), while two seeds' seconds (6.37 s vs 6.51 s) decided nothing, and lesson 06 built
    on fp32. A rung saved with ``decided_by`` (l05_mixed_precision.rung_decision) over the rung below it helped: the
    next lesson starts from its carry; without it (the opposite) the rung is level and passed over."""
    pace = {"before": 100.0, "after": 100.0, "rate": 100.0}
    ladder.save_ladder_result("baseline", fake_result(256, 1e-3, 54.4), pace=pace, directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", fake_result(16384, 8e-3, 7.0), seeds=[fake_result(16384, 8e-3, 8.0)],
                              pace=pace, directory=tmp_path)
    default = TrainConfig(global_batch_size=256, base_lr=1e-3, optimizer="adam")
    below_cfg = ladder.start_from("+mixed precision", default, directory=tmp_path)[0]

    def save(decided_by):
        ladder.save_ladder_result("+mixed precision", fake_result(16384, 8e-3, 7.4, precision="bf16"),
                                  seeds=[fake_result(16384, 8e-3, 6.9, precision="bf16")], pace=pace,
                                  carry=below_cfg.replace(precision="bf16" if decided_by else "fp32"),
                                  decided_by=decided_by, directory=tmp_path)

    save(None)
    rows = {r["step"]: r for r in ladder.ladder_rows(tmp_path)}
    assert rows["+mixed precision"]["vs_noise"] and not rows["+mixed precision"]["helped"]
    cfg, rung, _ = ladder.start_from("+data parallel", default, directory=tmp_path)
    assert rung["step"] == "+linear scaling" and cfg.precision == "fp32"

    text = "the same 285 steps at 1.30x fp32's pace in lesson 05's interleaved throughput runs (tolerance 4%): helped"
    save({"over": "+linear scaling", "by": "pace", "ratio": 1.30, "tolerance": 0.04, "text": text})
    rows = {r["step"]: r for r in ladder.ladder_rows(tmp_path)}
    assert rows["+mixed precision"]["helped"] and rows["+mixed precision"]["vs_noise"] is None
    cfg, rung, note = ladder.start_from("+data parallel", default, directory=tmp_path)
    assert rung["step"] == "+mixed precision" and cfg.precision == "bf16", note
    md = ladder.ladder_table(tmp_path).to_markdown()
    assert f"in paced seconds; decided by {text}" in md or f"in its own lesson, both at one pace, by {text}" in md
    reading = ladder.ladder_reading(tmp_path)
    assert "faster than the rung below: +sqrt scaling" not in reading  # the fake rows ran no sqrt rule
    assert "(by its pace on the same steps, measured in its lesson)" in reading
    assert "no measurable difference from the rung below" not in reading.split("+bf16")[0][-60:]
    # decided by the seeds' time to target in the lesson, the reading says that, not pace
    save({"over": "+linear scaling", "by": "time to target", "text": "bf16 against fp32 on the same setting in its "
          "lesson: bf16 lower on every seed"})
    reading = ladder.ladder_reading(tmp_path)
    assert "(by its time to target against the same setting, measured in its lesson)" in reading
    assert "by its pace" not in reading
    # a decision over another rung than the one it is compared with now does not carry over
    save({"over": "+warmup", "by": "pace", "ratio": 1.30, "tolerance": 0.04, "text": text})
    assert not {r["step"]: r for r in ladder.ladder_rows(tmp_path)}["+mixed precision"]["helped"]
