"""Small readings fixed after the eighth full-profile read (#37, points its readers saw but did not count)."""

import json
import re
from pathlib import Path

from course_lib.lessons import l11_batch_size_science as l11

REPO = Path(__file__).resolve().parents[1]


def test_a_small_b_crit_is_printed_to_the_figures_its_ratio_was_taken_from():
    """r8d 11-S5: "B_crit = 26: B_simple is 3.37x it", the ratio taken over the unrounded 25.6 (26 gives 3.32x)."""
    rows = [{"batch size": 32, "steps to target": 18}, {"batch size": 256, "steps to target": 11}]
    b_crit = l11.two_point_critical_batch(rows)
    assert 20 < b_crit < 100
    text = l11.bert_noise_verdict(86.0, rows, stderr=10.0)
    shown = float(re.search(r"B_crit = ([\d.,]+):", text).group(1))
    ratio = float(re.search(r"B_simple is ([\d.]+)x it", text).group(1))
    assert abs(86.0 / shown - ratio) < 0.006  # the ratio follows from the B_crit printed, to its 2 decimals
    large = [{"batch size": 32, "steps to target": 400}, {"batch size": 256, "steps to target": 60}]
    assert re.search(r"B_crit = [\d,]+:", l11.bert_noise_verdict(5000.0, large, stderr=100.0))  # no decimals


def test_lesson_06_says_a_compression_hook_that_did_not_run_did_not_run():
    """r8b 06-S: "bf16: half the bytes (or not run, for the reason printed above): True" for a row that never ran."""
    nb = json.loads((REPO / "notebooks" / "06_data_parallel.ipynb").read_text())
    cell = "".join(next(c for c in nb["cells"] if c.get("id") == "l06-compression-check")["source"])
    assert "(or not run" not in cell and "not run (the reason is printed above)" in cell


def test_a_floor_at_the_edge_of_its_search_is_said():
    """r8d 11-S9: both of lesson 11's laws printed "+ 0.000" (the floor's search starts at 0), and nothing read it."""
    sizes = (3125, 6250, 12500, 25000, 50000)

    def pred(floor):
        rows = [{"fraction": n / 1e5, "size": n, "metric": 0, "error": 2 * n ** -0.35 + floor} for n in sizes]
        held = 2 * 1e5 ** -0.35 + floor
        return l11.scaling_prediction(rows, {"fraction": 1.0, "size": 100_000, "metric": 1 - held, "error": held})

    none, some = pred(0.0), pred(0.05)
    assert f"{none['fit']['c']:.3f}" == "0.000" and f"{some['fit']['c']:.3f}" == "0.050"
    assert "lower edge of its search" in l11.scaling_verdict(none)
    assert "lower edge of its search" not in l11.scaling_verdict(some)


def test_a_held_out_size_that_did_not_improve_is_not_given_a_cause_nothing_measured():
    """Seventh and eighth reads: "the runs are limited by their training (too few steps for the larger sets), not
    by the data" over NeuMF's 0.3588 at 990,027 interactions against 0.3551 at 498,056, at the same steps and model.
    The lesson varies neither the steps nor the model at a fixed size, so the reading names both and decides none."""
    neumf = [{"fraction": f, "size": n, "metric": 1 - e, "error": e}
             for f, n, e in ((1 / 32, 36_803, 0.6258), (1 / 16, 67_566, 0.6182), (1 / 8, 129_075, 0.5719),
                             (1 / 4, 252_086, 0.4083), (1 / 2, 498_056, 0.3551))]
    for measured in (0.3588, 0.3500):  # no lower than half the data's; 1.4 % below it
        held = {"fraction": 1.0, "size": 990_027, "metric": 1 - measured, "error": measured}
        said = l11.scaling_verdict(l11.scaling_prediction(neumf, held))
        assert "Something other than the data limits these runs" in said, said
        assert "limited by their training" not in said and "not by the data" not in said


def test_lesson_04s_cut_race_is_said_in_the_steps_its_runs_take():
    """r8a 04-3: "every run of the race: at most 2.7 epochs" over runs of ceil(2.7 x 152) = 411 steps (2.704)."""
    from course_lib.lessons import l04_lars as l04

    line = l04.race_line(2.7, 152)
    assert line.startswith("every run of the race: at most 411 steps (2.7 epochs at 152 steps per epoch")
    assert "2.704 epochs" in line and l04.race_steps(2.7, 152) == 411
    assert "rounded" not in l04.race_line(2.5, 152)  # 380 steps exactly
    nb = json.loads((REPO / "notebooks" / "04_lars.ipynb").read_text())
    assert "study.race_line(MAX_EPOCHS" in "".join("".join(c["source"]) for c in nb["cells"])


def test_the_loss_scale_reading_names_the_run_it_reads():
    """r8b 05-S: "Nothing dynamic happened in these 33 steps" read fp16's short throughput run (fp16 had not trained),
    and only the markdown said that the plot could be either run."""
    from course_lib.lessons import l05_mixed_precision as l05

    state = {"mode": "fp16", "loss_scaling": "dynamic", "loss_scale": 65536.0, "skipped_steps": 0,
             "growth_interval": 2000}
    short = l05.loss_scale_reading(state, 33, 65536.0, run="fp16's short throughput run")
    assert short.startswith("Nothing dynamic happened in these 33 steps (fp16's short throughput run): ")
    grew = l05.loss_scale_reading({**state, "loss_scale": 2.0 ** 17}, 2248, 65536.0, run="fp16's training run")
    assert grew.startswith("The scale went from 2^16 to 2^17 in 2248 steps (fp16's training run): ")
    assert l05.loss_scale_reading(state, 33, 65536.0).startswith("Nothing dynamic happened in these 33 steps: ")


def test_lesson_12_says_when_tpe_drew_only_its_random_startup_trials():
    """r8d 12-S4: tpe_hyperband ran only its 4 random startup trials, and nothing said its model drew none."""
    from course_lib.lessons import l12_hyperparameter_search as l12

    def rows(n):
        return [{"strategy": "random", "seeds": 2, "trials (median)": 9},
                {"strategy": "tpe_hyperband", "seeds": 2, "trials (median)": n}]

    assert "no more than TPE's 4 random startup trials" in l12.tpe_reading(rows(4))
    assert "no more than" in l12.tpe_reading(rows(3.5))
    drew = l12.tpe_reading(rows(7))
    assert "its model drew the other 3" in drew and "nothing" not in drew
    assert l12.tpe_reading(rows(7)[:1]) == ""
    one = [{**r, "seeds": 1} for r in rows(2)]  # the smoke profile: "median over 1 seeds", "at least half the seeds"
    assert l12.tpe_reading(one).startswith("tpe_hyperband ran 2 trials (one seed), no more than TPE's 4 random "
                                           "startup trials: its model drew no configuration")


def test_lesson_12s_tpe_reading_quotes_the_strategy_table():
    """The agreement half: every number tpe_reading quotes is a cell of the strategy table it sits under, or TPE's
    startup count, or the trials past it (the table's median less that count)."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from course_lib.lessons import l12_hyperparameter_search as l12
    from test_reading_agreement import disagreements
    from test_search_study import _record, _trial

    for n in (3, 4, 7):
        recs = [_record(name, seed, [_trial(2, [0.0, 0.1, 0.9])] * (n if name == "tpe_hyperband" else 5))
                for seed in range(2) for name in ("random", "tpe_hyperband")]
        rows = l12.strategy_rows(recs, 0.5, per_point=1.0)
        said = l12.tpe_reading(rows)
        assert said and disagreements(said, l12.strategy_table(rows, 0.5),
                                      extra=[l12.TPE_STARTUP_TRIALS, n - l12.TPE_STARTUP_TRIALS]) == [], said
