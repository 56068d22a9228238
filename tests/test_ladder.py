"""The trick ladder: rows saved by lessons 01-05, its table, its figure, and the run summary's PNG."""

import importlib
from pathlib import Path

import pytest

from course_lib import ladder, results, summary
from course_lib.hardware import detect
from course_lib.search import scaled_config, scaling_table, sweep_table
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
    assert "4.0x" in md and "not reached" in md
    ladder.save_ladder_result("+LARS", fake_result(16384, 0.01, 20.0, optimizer="lamb"), setting="b16384 lamb",
                               directory=tmp_path)
    rows = ladder.ladder_rows(tmp_path)  # +LARS is compared with +linear scaling (+warmup never reached)
    assert rows[3]["vs_previous"] == pytest.approx(0.5) and rows[3]["previous_step"] == "+linear scaling"
    assert "slower than '+linear scaling', this trick did not help here" in ladder.ladder_table(tmp_path).to_markdown()
    # lesson 04 takes lesson 03's batch from its rung, not a number typed in
    assert ladder.rung_batch("+warmup", 999, directory=tmp_path)[0] == 16384
    assert ladder.rung_batch("+warmup", 999, dataset="ml-1m", directory=tmp_path) == (
        999, "the default 999: no '+warmup' rung saved for ml-1m yet")
    with pytest.raises(ValueError):
        ladder.save_ladder_row("+magic", time_to_target_s=1.0, final_hr=0.8, target_hr=0.75, dataset="synthetic-tiny",
                               directory=tmp_path)
    with pytest.raises(ValueError, match="dataset"):
        ladder.save_ladder_row("+LARS", time_to_target_s=1.0, final_hr=0.8, target_hr=0.75, dataset="",
                               directory=tmp_path)


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
    assert row["ran"] == "lamb, linear warmup 40 steps, bf16" and row["dataset"] == "synthetic-tiny"
    assert row["tier"] == detect().tier and row["world_size"] == 1 and row["seed"] == 0
    assert "| lamb, linear warmup 40 steps, bf16 |" in ladder.ladder_table(tmp_path).to_markdown()
    assert ladder.what_ran({"optimizer": "adam", "lr_scaling": "sqrt", "precision": "fp32"}, 2) == \
        "adam, sqrt rule, fp32, 2 ranks"


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


def test_pick_degraded_batch():
    from course_lib.search import pick_degraded_batch

    rows = [{"rule": "linear", "batch size": b, "time to target (s)": t, "epochs to target": e}
            for b, t, e in ((1024, 5.0, 1.0), (4096, 4.0, 2.0), (16384, None, None), (65536, None, None))]
    assert pick_degraded_batch(rows, (4096, 16384, 65536)) == 16384
    assert pick_degraded_batch(rows[:2], (1024, 4096)) == 4096
    assert pick_degraded_batch([], (16384, 65536)) == 16384


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
    from course_lib.search import at_batch

    ruled = scaled_config(TrainConfig(global_batch_size=256, base_lr=1e-3), 4096, "sqrt")
    assert at_batch(ruled, 1024).peak_lr == pytest.approx(1e-3 * 2)  # sqrt(1024 / 256), from its own base
    given = TrainConfig(global_batch_size=4096, base_lr=4e-3)
    assert at_batch(given, 1024, "linear").peak_lr == pytest.approx(1e-3)  # 4e-3 x 1024 / 4096
    assert at_batch(given, 16384).peak_lr == pytest.approx(8e-3)  # sqrt by default


def test_race_reading_states_each_optimizers_best_from_the_records():
    from course_lib.search import race_reading

    runs = [fake_result(16384, 1e-2, 12.0), fake_result(16384, 2e-2, None, hr=0.70),
            fake_result(16384, 8.0, None, hr=0.10, optimizer="sgd"), fake_result(16384, 32.0, None, hr=0.05, optimizer="sgd"),
            fake_result(16384, 5.0, 30.0, optimizer="lars")]
    text = race_reading(runs, target_hr=0.75, floor_hr=0.39)
    assert "adam (lr 0.01, 0.02): best at lr 0.01 (the edge of its grid" in text and "in 12.0 s (100 steps)" in text
    assert "sgd (lr 8, 32): best at lr 8 (the edge" in text and "best HR@10 0.100, below the popularity ranking's 0.390" in text
    assert "lars (lr 5): best at lr 5, reached" in text and text.endswith("fastest to the target: adam at lr 0.01")
