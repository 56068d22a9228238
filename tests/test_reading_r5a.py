"""Readings of lessons 00-04 fixed after the fifth full-profile run (2026-12-02, /tmp/course10; read by r5a,
/work/notes/read-full-run-5-r5a.md): each test feeds the reading that run's numbers and the opposite results."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from course_lib.lessons import l01_baseline as L01  # noqa: E402
from test_reading_agreement import disagreements  # noqa: E402


def _compile_comp(rows):
    return {"mode": "default", "backend": "inductor", "device": "cpu", "repeats": 3, "error": None,
            "epoch_samples": 4_950_135,
            "rows": [{"batch size": b, "steps": 50, "eager_ms": e, "compiled_ms": c, "compile_s": s, "ratios": q,
                      "cache_hits": 2, "cache_misses": 0} for b, e, c, s, q in rows]}


def test_the_compile_reading_quotes_the_ms_cells_its_table_prints():
    """r5a 01-2: "at batch 16384: compiled steps 1.33x slower (25.71 -> 34.08 ms per step)" over a table whose cells
    read 25.7 and 34.09 (the reading rounded the raw times to 2 decimals, the table rounds them to 3 and prints 4
    significant figures)."""
    comp = _compile_comp([(256, 4.5601, 5.4189, 12.56, [0.9, 0.8, 0.85]),
                          (16384, 25.70504, 34.08549, 5.98, [0.75, 0.76, 0.74])])
    text, table = L01.compile_reading(comp), L01.compile_table(comp)
    assert "25.71" not in text and "34.08 " not in text
    assert "(25.7 -> 34.09 ms per step)" in text and "(4.56 -> 5.419 ms per step)" in text
    assert "16384 | 25.7 | 34.09" in table.to_markdown()
    assert disagreements(text, table) == []
    # opposite: a compiled step measurably faster, its payback read from the same cells
    faster = _compile_comp([(256, 4.5601, 3.0204, 6.0, [1.5, 1.52, 1.49])])
    text = L01.compile_reading(faster)
    assert "(4.56 -> 3.02 ms per step)" in text and "pays back after" in text
    n = L01.payback_steps(faster["rows"][0])
    assert disagreements(text, L01.compile_table(faster), extra=(n * 256 / 4_950_135,)) == []


def _ladder_result(batch, ttt, steps, sps):
    from course_lib.train.ncf import TrainConfig, TrainResult

    cfg = TrainConfig(global_batch_size=batch, base_lr=1e-3, optimizer="adam",
                      **({"base_batch_size": 256, "lr_scaling": "sqrt"} if batch != 256 else {}))
    return TrainResult(config=cfg.to_dict(), dataset="synthetic-ml-1m", data_source="test", synthetic=True,
                       device="cpu", world_size=1, target_hr=0.75, time_to_target_s=ttt, steps_to_target=steps,
                       epochs_to_target=0.9, epochs=0.9, steps=steps, samples=batch * steps, train_time_s=ttt,
                       eval_time_s=3.2, samples_per_s=sps, phase_time_s={}, final_hr=0.7563,
                       precision={"mode": "fp32"})


# lesson 01 cell 14 of the run: the bursts before and after the baseline, and the baseline run's own samples/s
RUN_PACE = {"before": 92_466.77, "after": 93_573.13, "rate": 93_019.95}
RUN_SPS = 49_591.6


def test_the_pace_drift_reading_counts_the_baseline_runs_own_pace():
    """r5a 01-1: "the yardstick's pace moved +1% ... every speedup over this baseline is uncertain by at least ±1%
    ...: the ladder shows such speedups to 2 significant figures", printed under a baseline that trained at 49,592
    samples/s on the yardstick's own step, -47% from the bursts' 93,020 (its evaluation intervals 3.00x apart, cell
    15): lesson 02's ladder then showed '+sqrt scaling' at 17x (±34%) over its 89.9 s."""
    text = L01.pace_drift_reading({**RUN_PACE, "run": RUN_SPS})
    assert "±1%" not in text and "2 significant figures" not in text
    assert ("But the baseline run itself trained at 49,592 samples/s, -47% from that pace: the same step ran slower "
            "during the run than in the bursts around it" in text)
    assert "Pacing cannot correct a pace that differed during the run" in text
    assert "no cell here measured which" in text  # a cause is named only as a possibility (r3a 01-3)
    assert "uncertain by at least ±47% from this lesson alone" in text and "to 1 significant figure," in text
    from course_lib.tables import Table

    pace = Table(["before", "after", "rate", "run"], rows=[{**RUN_PACE, "run": RUN_SPS}])
    # the ± is run / rate - 1 (ladder.run_off_pace); 1: the significant figures it leaves
    off = RUN_SPS / RUN_PACE["rate"] - 1
    assert disagreements(text, pace, extra=[off, RUN_PACE["after"] / RUN_PACE["before"] - 1, 1]) == []
    # opposite: a run at the bursts' pace (the fourth run: 105,704 against 101,529, +4%, inside their 21% movement)
    quiet = L01.pace_drift_reading({"before": 113_599.0, "after": 89_459.0, "rate": 101_529.0, "run": 105_704.0})
    assert "But the baseline run" not in quiet and "at least ±21%" in quiet and "a movement within a lesson" in quiet
    # and a record without the run (older results) reads as before
    assert L01.pace_drift_reading(RUN_PACE).count("±1%") == 1


def test_the_ladder_counts_the_baseline_runs_own_pace_in_its_speedups(tmp_path):
    """r5a 01-1, the ladder of lesson 02 cell 18: '+sqrt scaling' 17x (±34%): 89.9 s / (6.14 s x 0.87), where the ±
    added the two lessons' burst movements (+1%, -33%) but not the baseline run's own -47% from its bursts."""
    from course_lib import ladder

    base = _ladder_result(256, 89.85, 17406, RUN_SPS)
    ladder.save_ladder_result("baseline", base, pace={**RUN_PACE, "run": RUN_SPS}, directory=tmp_path)
    sqrt = _ladder_result(16384, 5.812, 285, 803_400)
    seed1 = _ladder_result(16384, 6.475, 285, 720_000)
    ladder.save_ladder_result("+linear scaling", sqrt, seeds=[seed1], directory=tmp_path,
                              pace={"before": 96_587.0, "after": 65_128.0, "rate": 80_857.5})
    rows = {r["step"]: r for r in ladder.ladder_rows(tmp_path)}
    assert abs(rows["+linear scaling"]["speedup_uncertainty"] - (0.3257 + 0.4669)) < 1e-3
    table = ladder.ladder_table(tmp_path).to_markdown()
    assert "17x (±79%)" in table and "(±34%)" not in table
    assert "the run itself trained at -47% vs the yardstick's pace around it: compare steps, not seconds" in table
    assert "paced seconds are unreliable for baseline, +sqrt scaling" in ladder.ladder_reading(tmp_path)
    # opposite: the same rungs with a baseline at its bursts' pace: the ± is the bursts' movements, as before
    other = tmp_path / "quiet"
    ladder.save_ladder_result("baseline", base, pace={**RUN_PACE, "run": 93_500.0}, directory=other)
    ladder.save_ladder_result("+linear scaling", sqrt, seeds=[seed1], directory=other,
                              pace={"before": 96_587.0, "after": 65_128.0, "rate": 80_857.5})
    table = ladder.ladder_table(other).to_markdown()
    assert "17x (±34%)" in table and "the run itself" not in table


def test_pace_finish_refuses_a_run_of_another_setting():
    import pytest

    from course_lib import ladder
    from course_lib.train.ncf import TrainConfig

    pace = ladder.Pace.__new__(ladder.Pace)  # no bursts timed: only the check before them is under test
    pace._args = {"cfg": TrainConfig(global_batch_size=256)}
    with pytest.raises(ValueError, match=r"the run's batch \(16384\) is not the yardstick's \(256\)"):
        pace.finish(run=_ladder_result(16384, 5.8, 285, 8e5))


def _race_run(lr, ttt, steps, sps, hr=0.7591, optimizer="adam"):
    r = _ladder_result(32768, ttt, steps, sps)
    r.config.update(optimizer=optimizer, peak_lr=lr, base_lr=lr, lr_scaling="none")
    r.best_hr = r.final_hr = hr
    r.curve = {"step": [0, steps], "time_s": [0.0, ttt], "hr": [0.1, hr], "loss": [0.69, 0.33]}
    return r


def test_the_race_reading_says_when_the_clock_ranked_an_lr_by_its_pace():
    """r5a 04-1: "adam (lr 0.00283, 0.00566, 0.0113, 0.0226): best at lr 0.00566, reached HR@10 0.75 in 9.2 s (216
    steps)" over a table where lr 0.0113 reached it in 176 steps and 9.354 s: the two runs ran the same step at
    7.677e+05 and 6.133e+05 samples/s, so the 0.17 s between them is the machine's pace, not the lr."""
    from course_lib.lessons import l04_lars as L04
    from course_lib.sweeps import sweep_table

    runs = [_race_run(0.00283, 18.84, 328, 567_200.0), _race_run(0.00566, 9.18, 216, 767_700.0),
            _race_run(0.0113, 9.354, 176, 613_300.0), _race_run(0.0226, 12.32, 184, 486_900.0),
            _race_run(0.0226, 19.35, 392, 660_800.0, hr=0.7513, optimizer="lamb")]
    text = L04.race_reading(runs, target_hr=0.75, floor_hr=0.3929)
    adam = text.splitlines()[0]
    assert adam.startswith("adam (lr 0.00283, 0.00566, 0.0113, 0.0226): best at lr 0.00566, reached HR@10 0.75 in "
                           "9.2 s (216 steps); but lr 0.0113 reached it in fewer steps (176, in 9.35 s)")
    assert "(samples/s 7.677e+05 against 6.133e+05)" in adam and "which lr is best is not resolved here" in adam
    labels = [f"b32768 {r.config['optimizer']} lr {r.config['peak_lr']:.3g}" for r in runs]
    table = sweep_table(runs, labels, title="Batch 32768, warmup 76 steps: time to HR@10 >= 0.75",
                        columns=("rule", "time to target (s)", "steps to target", "final HR@10", "samples/s"))
    assert "7.677e+05" in table.to_markdown() and "6.133e+05" in table.to_markdown()  # the cells, as quoted
    # 0.3929: the popularity floor (cell 10 passes it in); 7.677, 6.133 and 5: the samples/s cells' mantissas and
    # exponent, as the table prints them (the checker splits "7.677e+05" in two)
    assert disagreements(text, table, extra=[0.3929, 7.677, 6.133, 5]) == []
    # opposite: the fastest run by the clock also took the fewest steps: nothing to add; LAMB alone: nothing either
    runs[2], runs[3] = _race_run(0.0113, 9.354, 230, 613_300.0), _race_run(0.0226, 12.32, 240, 486_900.0)
    text = L04.race_reading(runs, target_hr=0.75, floor_hr=0.3929)
    assert "fewer steps" not in text and "best at lr 0.00566, reached HR@10 0.75 in 9.2 s (216 steps)\n" in text


def test_two_rungs_are_ranked_by_their_own_pace_drifts_not_the_baselines_they_share(tmp_path):
    """r5a 01-1's consequence: with the baseline's -47 % in both speedups' ±, '+LAMB' 5x (±66%) would "lie within the
    pace drift" of '+sqrt scaling''s 17x (±79%), in the reading that also says '+LAMB' was measurably slower than
    '+sqrt scaling' (0.3x (±52%)): both divide the same baseline time, so its part cancels between them."""
    from course_lib import ladder

    base = _ladder_result(256, 89.85, 17406, RUN_SPS)
    ladder.save_ladder_result("baseline", base, pace={**RUN_PACE, "run": RUN_SPS}, directory=tmp_path)
    ladder.save_ladder_result("+linear scaling", _ladder_result(16384, 5.812, 285, 803_400.0),
                              seeds=[_ladder_result(16384, 6.475, 285, 720_000.0)], directory=tmp_path,
                              pace={"before": 96_587.0, "after": 65_128.0, "rate": 80_857.5})
    lamb, lamb1 = _ladder_result(32768, 19.35, 392, 660_800.0), _ladder_result(32768, 14.07, 380, 700_000.0)
    for r in (lamb, lamb1):
        r.config["optimizer"] = "lamb"
    ladder.save_ladder_result("+LARS", lamb, seeds=[lamb1], directory=tmp_path,
                              pace={"before": 107_059.0, "after": 86_376.0, "rate": 96_717.5})
    said = ladder.ladder_reading(tmp_path)
    assert said.startswith("the fastest rung is '+sqrt scaling': 17x (±79%) the baseline")
    assert "+LAMB was slower than '+sqrt scaling' (0.3x (±52%))" in said
    assert "5x (±66%)" in ladder.ladder_table(tmp_path).to_markdown()
    # opposite: a '+LAMB' within '+sqrt scaling''s own drift (a lesson whose pace moved 90 %) is not ranked below it
    ladder.save_ladder_result("+LARS", lamb, seeds=[lamb1], directory=tmp_path,
                              pace={"before": 140_000.0, "after": 14_000.0, "rate": 77_000.0})
    said = ladder.ladder_reading(tmp_path)
    assert said.startswith("the highest paced speedup is '+sqrt scaling'") and "'+LAMB' (" in said.splitlines()[0]


def test_a_race_of_more_runs_than_colours_draws_no_two_runs_alike():
    """Lesson 04's race figure (fifth full run): 16 runs in matplotlib's 10 colours, "b32768 adam lr 0.0226" and
    "b32768 lars lr 2" both solid red, so the legend could not tell which red curve reached the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.plots import plot_loss_curves

    runs = [_race_run(0.001 * i, 9.0, 100, 1e5) for i in range(1, 17)]
    for r in runs:
        r.curve["epoch"] = [0.0, 1.0]
    fig = plot_loss_curves(runs, y="hr")
    looks = [(line.get_color(), line.get_linestyle()) for line in fig.axes[0].lines]
    plt.close(fig)
    assert len(set(looks)) == len(runs) == 16
    fig = plot_loss_curves(runs[:5], y="hr")  # a few runs: solid lines, as before
    assert {line.get_linestyle() for line in fig.axes[0].lines} == {"-"}
    plt.close(fig)


def test_lesson_01s_cell_records_the_baseline_runs_own_pace_and_reads_it(data, tmp_path):
    """Lesson 01 cell 14's calls on the tiny data set: ``Pace(...)``, the run, ``pace.finish(run=result)`` and the
    drift reading of what it recorded (a few steps: the path, not the numbers)."""
    from course_lib import ladder
    from course_lib.train import train_to_target
    from course_lib.train.ncf import TrainConfig

    cfg = TrainConfig(global_batch_size=64, base_lr=1e-3, optimizer="adam", max_steps=5)
    pace = ladder.Pace(data, cfg, steps=5, repeats=1, directory=tmp_path, quiet=True)
    result = train_to_target(data, cfg, device="cpu", progress="none")
    rec = pace.finish(run=result)
    assert rec["run"] == result.samples_per_s and set(rec) == {"before", "after", "rate", "run"}
    said = L01.pace_drift_reading(rec)
    assert "the yardstick's pace moved" in said
    assert ("But the baseline run itself" in said) == (abs(rec["run"] / rec["rate"] - 1) > abs(rec["after"] /
                                                                                              rec["before"] - 1))
