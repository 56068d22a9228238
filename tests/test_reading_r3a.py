"""Readings of lessons 00-06 fixed after the third full-profile run (2026-12-01, /tmp/mc3; read by r3a,
/work/notes/read-full-run-3-r3a.md): each test feeds the reading that run's numbers and the opposite results."""

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

from course_lib.lessons import l01_baseline as L01  # noqa: E402
from course_lib.train.ncf import TrainResult  # noqa: E402
from test_reading_agreement import disagreements  # noqa: E402


def _result(phases, train_time_s, steps=17406):
    return TrainResult(config={"optimizer": "adam"}, dataset="d", data_source="", synthetic=True, device="cpu",
                       world_size=1, target_hr=None, time_to_target_s=None, steps_to_target=None,
                       epochs_to_target=None, epochs=0.9, steps=steps, samples=steps * 256, train_time_s=train_time_s,
                       eval_time_s=2.774, samples_per_s=93_772.0, phase_time_s=phases)


# the run's baseline (lesson 01 cell 15): 46.16 s of timed phases in a 47.5 s training clock
RUN = {"sampling": 0.8348, "forward_backward": 20.86, "optimizer": 24.47, "evaluation": 2.774}


def test_phase_shares_are_of_the_training_clock_and_the_rest_of_the_loop_is_a_row():
    """r3a 01-1: the table's "share of the training clock" was each phase over the phases' sum (optimizer 53 %),
    where 24.47 s of the 47.5 s clock is 52 %, and the 1.3 s outside the phases was in no row."""
    r = _result(RUN, 47.5)
    table = r.table()
    rows = {row["phase"]: row for row in table.rows}
    assert rows["optimizer"]["share of the training clock"] == "52%"
    rest = rows[TrainResult.REST_OF_THE_LOOP]
    assert abs(rest["seconds"] - (47.5 - 0.8348 - 20.86 - 24.47)) < 1e-9 and rest["share of the training clock"] == "3%"
    assert r.phase_reading() == ("the largest phase of the training clock is optimizer (52%); it is the next thing "
                                 "to make faster")
    assert disagreements(r.phase_reading(), table) == []
    # opposite: phases that cover the whole clock: no extra row, the shares as before (5 of 8 s: 62 %)
    whole = _result({"sampling": 1.0, "forward_backward": 2.0, "optimizer": 5.0, "evaluation": 0.7}, 8.0)
    assert [row["phase"] for row in whole.table().rows] == ["sampling", "forward_backward", "optimizer", "evaluation"]
    assert "(62%)" in whole.phase_reading()


def test_the_bottleneck_reading_says_what_its_profile_shares_are_of():
    """r3a 01-2: "in the 50 profiled steps the optimizer took 52% and sampling 13%" under a profile whose own
    optimizer row says 50.18 % (of all its self time): the 52 % is of the three phase rows' time."""
    from course_lib.train import TrainConfig, build_model

    model = build_model(SimpleNamespace(num_users=50, num_items=80), TrainConfig(factors=4, layers=(8, 4)))
    r = _result({k: v for k, v in RUN.items()}, 47.5)
    r.steps_per_epoch = 19337
    prof = SimpleNamespace(phase_s={"optimizer": 0.111293, "forward_backward": 0.074505, "sampling": 0.026764},
                           steps=50)
    said = L01.bottleneck_reading(r, model, prof)
    assert "is optimizer (52%), 1.41 ms per step, sampling 2%" in said  # r10a 01-S1: the share said once
    assert "the optimizer took 52% and sampling 13% of the phase rows' time" in said
    assert "of all its self time" in said
    extra = [*L01.profile_phase_shares(prof.phase_s).values(), 1000 * 24.47 / r.steps, 19337, 50,
             L01.embedding_share(model)]
    assert disagreements(said, r.table(), extra=extra) == []


def test_the_pace_reading_names_no_cause_it_did_not_measure():
    """r3a 01-3 (H): "The step did not change; the machine's load did" under a 1.30x spread between evaluation
    intervals: no cell measured the machine's load. The run's intervals (2.33-3.04 ms per step), and a steady run."""
    def run(ms_per_step, n=4834):
        steps, times = [0], [0.0]
        for ms in ms_per_step:
            steps.append(steps[-1] + n)
            times.append(times[-1] + n * ms / 1000)
        r = _result({}, times[-1])
        r.curve = {"step": steps, "time_s": times, "hr": [0.1] * len(steps)}
        return r

    said = L01.pace_reading(run([2.33, 3.04, 2.6]))
    assert "the slowest 1.30x the fastest" in said
    assert "the machine's load did" not in said and "no cell here measured which" in said
    assert L01.pace_reading(run([2.33, 2.40, 2.35])).endswith(": a steady pace")


def _opt_row(batch, variant, opt_ms, step_ms, step_ratios, baseline=False):
    return {"batch size": batch, "variant": variant, "steps": 10, "optimizer_ms": opt_ms, "step_ms": step_ms,
            "baseline": baseline, "optimizer_ratios": [1.0, 1.0, 1.0], "step_ratios": step_ratios}


def test_the_optimizer_reading_names_the_fastest_step_the_table_shows():
    """r3a 01-4: at batch 16384 "the fastest whole step: dense Adam, foreach" (24.79 ms, 1.10x, measurable) over a
    table whose fused row ran 23.73 ms (1.15x, within noise): the run's rows, and the same with fused measurable."""
    base = _opt_row(16384, "dense Adam, for-loop", 2.203, 27.37, [1.0, 1.0, 1.0], baseline=True)
    foreach = _opt_row(16384, "dense Adam, foreach", 2.378, 24.79, [1.08, 1.12, 1.10])
    fused = _opt_row(16384, "dense Adam, fused", 1.25, 23.73, [0.97, 1.15, 1.3])
    comp = {"rows": [base, foreach, fused], "baseline_impl": "for-loop", "device": "cpu", "repeats": 3}
    said = L01.optimizer_reading(comp)
    assert "the fastest whole step: dense Adam, foreach" not in said
    assert ("the largest measurable whole-step gain: dense Adam, foreach (1.10x; dense Adam, fused's 1.15x is "
            "larger, but within the repeats' noise)") in said
    from test_reading_r10a import optimizer_derived  # r10a 01-C1: what each phase accounts for

    assert disagreements(said, L01.optimizer_table(comp), extra=[27.37 / 24.79, 27.37 / 23.73,
                                                                  *optimizer_derived(comp)]) == []
    fused["step_ratios"] = [1.12, 1.15, 1.18]  # opposite: fused measurably faster too
    assert "the fastest whole step: dense Adam, fused" in L01.optimizer_reading(comp)


def test_lesson_03s_takeaway_reads_the_steps_before_crediting_warmup_with_the_seconds():
    """r3a 03-1: "Here warmup helped beyond the seeds' noise ...: what it bought was a faster start" for runs that
    were faster on the clock on both seeds (9.867 / 9.164 s vs 11.72 / 10.8 s) but took 95 / 96 steps against
    100 / 92: the seconds were the pace the steps ran at. The run's rows, and the opposite (fewer steps too)."""
    from course_lib.lessons import l03_warmup as L03
    from course_lib.sweeps import Confirmed

    def run(seed, t, steps, loss1):
        return SimpleNamespace(config={"seed": seed}, time_to_target_s=t, steps_to_target=steps, final_hr=0.7525,
                               diverged=False, curve={"loss": [0.693, loss1]})

    rung = "linear warmup, 19 steps"

    def decided(warm_steps, base_steps):
        warm = [run(0, 9.867, warm_steps[0], 0.5878), run(1, 9.164, warm_steps[1], 0.5801)]
        base = [run(0, 11.72, base_steps[0], 0.5081), run(1, 10.8, base_steps[1], 0.5054)]
        return Confirmed([rung, "no warmup"], [warm, base], 0, "")

    decide = decided((95, 96), (100, 92))
    said = L03.takeaway(decide, rung)
    assert "faster start" not in said and "helped beyond" not in said
    assert "but not in steps: 95, 96 steps to the target with it, 100, 92 without" in said
    assert "s per step: 0.104, 0.095 with it, 0.117, 0.117 without" in said
    extra = [9.867 / 95, 9.164 / 96, 11.72 / 100, 10.8 / 92, (9.867 + 9.164) / 2, (11.72 + 10.8) / 2,
             11.72 - 10.8, 2017, 5, 50, 8192]
    assert disagreements(said, L03.deciding_table(decide, rung), extra=extra) == [], said
    fewer = L03.takeaway(decided((80, 78), (100, 92)), rung)  # opposite: fewer steps on both seeds as well
    assert "helped beyond the seeds' noise" in fewer and "but not in steps" not in fewer


def test_the_race_reading_says_which_lrs_collapsed_to_a_constant_predictor():
    """r3a 04-1: SGD at lr 2, 4, 8 ended at training loss 0.5006-0.5008 (the labels' entropy at 1 positive in 5,
    0.5004) and HR@10 0.1066 / 0.1066 / 0.1061 (chance), lr 1 at popularity (0.3925); the reading named lr 1 the best
    and said nothing of the others, under markdown that expects the large lrs to blow up. The run's SGD rows, and
    the opposite (every lr learning something)."""
    from course_lib.lessons import l04_lars as L04
    from course_lib.sweeps import BLOW_UP_LOSS, sweep_table
    from test_ladder import fake_result

    def sgd(lr, hr, loss):
        r = fake_result(32768, lr, None, hr=hr, optimizer="sgd")
        r.best_hr, r.curve = hr, {"loss": [0.693, loss]}
        return r

    runs = [sgd(1.0, 0.3916, 0.4650), sgd(2.0, 0.1066, 0.5006), sgd(4.0, 0.1066, 0.5006), sgd(8.0, 0.1061, 0.5008)]
    runs[0].best_hr = 0.3925
    assert abs(L04.label_entropy(4) - 0.5004) < 1e-4
    said = L04.race_reading(runs, target_hr=0.75, floor_hr=0.3929)
    assert ("lr 2, 4, 8 collapsed to a constant predictor (final HR@10 0.1066, 0.1066, 0.1061, about chance; "
            "training loss at the labels' entropy, 0.5004)") in said
    labels = [f"b32768 sgd lr {r.config['peak_lr']:.3g}" for r in runs]
    table = sweep_table(runs, labels, title="Batch 32768: time to HR@10 >= 0.75",
                        columns=("rule", "time to target (s)", "final HR@10", "best HR@10", "epochs run"))
    assert disagreements(said, table, extra=[0.3929, L04.label_entropy(4), BLOW_UP_LOSS]) == []
    learned = [sgd(1.0, 0.3916, 0.4650), sgd(2.0, 0.45, 0.44)]  # opposite: no run at the constant predictor's loss
    assert "collapsed" not in L04.race_reading(learned, target_hr=0.75, floor_hr=0.3929)


def test_the_overlap_reading_calls_the_best_bucket_setting_what_it_is():
    """r3a 06-1: "Communication share: with the fastest setting, 25 MiB buckets ..., a step took 21.9 ms" over a
    bucket table whose one all-reduce after backward ran 20.26 ms. The run's rows, and the opposite (buckets faster)."""
    from course_lib.lessons import l06_data_parallel as L06
    from test_data_parallel_study import _result, _row

    def rows(serial_reps):
        return [_row("DDP buckets", 0.25, True, "none", [39.5, 39.0, 31.9], n=17, comm_ms=33.37),
                _row("DDP buckets", 1.0, True, "none", [22.7, 27.6, 21.5], n=5, comm_ms=14.16),
                _row("DDP buckets", 25.0, True, "none", [21.9, 23.5, 18.1], n=1, comm_ms=8.757),
                _row("one all-reduce after backward", 4.276, False, "none", serial_reps, comm_ms=8.18),
                _row("no communication (floor)", 0.0, None, None, [11.3, 10.2, 12.2], comm_ms=0.0, nbytes=0, n=0)]

    said = L06.overlap_reading(_result(2, "gloo", rows([20.3, 22.2, 16.6])))
    assert "with the fastest bucket setting, 25 MiB buckets (1 all-reduce per step), a step took 21.9 ms" in said
    assert "with the fastest setting," not in said
    slower = L06.overlap_reading(_result(2, "gloo", rows([24.3, 25.2, 26.6])))
    assert "with the fastest setting, 25 MiB buckets" in slower


def _rung(step, name, speedup, u, vs=None, vs_noise=False, ran=""):
    return {"step": step, "name": name, "speedup": speedup, "speedup_uncertainty": u, "vs_previous": vs,
            "vs_noise": vs_noise, "flags": [], "time_to_target_s": 1.0, "ran": ran, "previous_name": "baseline",
            "previous_step": "baseline"}


def test_the_ladder_reading_names_no_fastest_rung_within_its_pace_drift(monkeypatch):
    """r3a 06-2: "the fastest rung is '+data parallel': 13x (±93%) the baseline" over rungs at 8x (±23%), 6x (±30%),
    3.4x (±8%), 6x (±22%), in a reading that says two rungs overlapping within their drift are not ranked. The
    run's speedups, and the opposite (a top rung clear of the others)."""
    from course_lib import ladder

    run = [_rung("baseline", "baseline", 1.0, None), _rung("+linear scaling", "+sqrt scaling", 8.2, 0.23, 8.2),
           _rung("+warmup", "+warmup", 6.16, 0.30, 0.75, True), _rung("+LARS", "+LAMB", 3.40, 0.08, 0.41),
           _rung("+mixed precision", "+bf16", 5.86, 0.22, 0.71, True),
           _rung("+data parallel", "+data parallel", 12.9, 0.93, 1.57, True, ran="2 ranks")]
    monkeypatch.setattr(ladder, "ladder_rows", lambda directory=None: run)
    said = ladder.ladder_reading()
    assert "the fastest rung is" not in said
    assert said.startswith("the highest paced speedup is '+data parallel': 13x (±93%) the baseline")
    assert "'+sqrt scaling' (8x (±23%))" in said and "these paces do not say which rung is the fastest" in said
    clear = [_rung("baseline", "baseline", 1.0, None), _rung("+linear scaling", "+sqrt scaling", 8.2, 0.05, 8.2),
             _rung("+warmup", "+warmup", 3.0, 0.05, 0.37)]
    monkeypatch.setattr(ladder, "ladder_rows", lambda directory=None: clear)
    assert ladder.ladder_reading().startswith("the fastest rung is '+sqrt scaling': 8.2x (±5%)")


def test_lesson_05s_rung_verdict_says_when_the_seconds_only_measure_the_pace():
    """r3a 05-1: "bf16 against fp32 on the same setting: no measurable difference: the seeds disagree ...; lesson 06
    builds on fp32" for four runs of 285 steps, under a throughput reading of bf16 1.31x (tolerance 21 %). The run's
    rows (bf16 5.843 / 16.11 s, fp32 7.459 / 8.523 s), and the opposite (different steps: the line stays as it was)."""
    from course_lib.lessons import l05_mixed_precision as L05
    from course_lib.sweeps import Confirmed

    def run(seed, t, steps):
        return SimpleNamespace(config={"seed": seed}, time_to_target_s=t, steps_to_target=steps, final_hr=0.752,
                               diverged=False, curve={"loss": [0.693, 0.5]})

    def decided(bf16_steps):
        return Confirmed(["bf16", "fp32"], [[run(0, 5.843, bf16_steps), run(1, 16.11, bf16_steps)],
                                            [run(0, 7.459, 285), run(1, 8.523, 285)]], 0, "")

    ph = {"sampling": 0.0005, "forward_backward": 0.019, "optimizer": 0.0024}
    runs = {m: L05.SpeedRun(m, r, 0.022, ph, {"mode": m}, 30, 3) for m, r in (("fp32", 7.346e5), ("bf16", 9.629e5))}
    speed = L05.PrecisionSpeed(runs, {"fp32": [4.29e5, 7.346e5, 6.2e5], "bf16": [7.29e5, 9.629e5, 7.6e5]}, 30)
    decide = decided(285)
    builds_on, decided_by = L05.rung_decision(decide, "bf16", speed, below="+linear scaling")
    assert builds_on == "bf16" and decided_by["over"] == "+linear scaling"  # the pace decides (#37's rung rule)
    said = L05.rung_verdict_reading(decide, "bf16", speed, builds_on)
    assert said.startswith("bf16 against fp32 on the same setting: no measurable difference: the seeds disagree")
    assert ("every run took the same 285 steps, so the seconds differ only by the pace of the same steps, which the "
            "interleaved throughput runs above measured: bf16 1.31x fp32 (faster; tolerance 21%), and that decides "
            "the rung: bf16 is the faster setting") in said
    assert said.endswith("; lesson 06 builds on bf16")
    extra = [9.629e5 / 7.346e5, speed.spread, (5.843 + 16.11) / 2, (7.459 + 8.523) / 2, 6]
    assert disagreements(said, decide.table(chosen="bf16"), extra=extra) == [], said
    assert L05.rung_decision(decided(300), "bf16", speed) == ("fp32", None)  # opposite: the steps differ
    # the seeds decide in the lesson (bf16 lower on every seed): recorded for the ladder too, so lesson 06 follows it
    wins = Confirmed(["bf16", "fp32"], [[run(0, 4.6, 285), run(1, 4.9, 285)], [run(0, 6.4, 285), run(1, 6.7, 285)]],
                     0, "")
    builds_on, decided_by = L05.rung_decision(wins, "bf16", speed, below="+linear scaling")
    assert builds_on == "bf16" and decided_by["over"] == "+linear scaling" and decided_by["by"] == "time to target"
    assert decided_by["text"].startswith("bf16 against fp32 on the same setting in its lesson: bf16 lower on every")
    other = L05.rung_verdict_reading(decided(300), "bf16", speed, "fp32")
    assert "pace of the same steps" not in other and other.endswith("; lesson 06 builds on fp32")
    # opposite: the same steps at a pace within the tolerance decide nothing either
    level = {m: L05.SpeedRun(m, r, 0.022, ph, {"mode": m}, 30, 3) for m, r in (("fp32", 7.346e5), ("bf16", 7.5e5))}
    slow = L05.PrecisionSpeed(level, {"fp32": [7.3e5, 7.346e5, 7.2e5], "bf16": [7.4e5, 7.5e5, 7.45e5]}, 30)
    assert L05.rung_decision(decide, "bf16", slow) == ("fp32", None)
    said = L05.rung_verdict_reading(decide, "bf16", slow, "fp32")
    assert "no measurable difference; tolerance" in said and "neither measurement separates them" in said
