"""Readings fixed after read f12b of the twelfth full-profile run (runs/20261204-012210, lessons 02, 03 and 04).
Each test feeds the reading the run's own numbers (which printed a statement its outputs contradict or hide) and the
opposite."""

from test_ladder import fake_result
from test_reading_agreement import disagreements
from test_reading_agreement_more import _warm_run
from test_reading_r6a import WARMUP_COLUMNS, WARMUP_LABELS

from course_lib.lessons import l03_warmup as L03
from course_lib.lessons import l04_lars as L04
from course_lib.sweeps import Confirmed, sweep_table
from course_lib.train import TrainConfig
from course_lib.train.ncf import TrainResult


def _seed_run(ttt, steps, seed, loss1=0.6):
    """One run of a deciding comparison (``sweeps.Confirmed``): its time and steps to the target at one seed."""
    cfg = TrainConfig(global_batch_size=65536, base_lr=1e-3, seed=seed)
    return TrainResult(config=cfg.to_dict(), dataset="d", data_source="", synthetic=True, device="cpu", world_size=1,
                       target_hr=0.75, time_to_target_s=ttt, steps_to_target=steps, epochs_to_target=1.0, epochs=1.0,
                       steps=steps, samples=1, train_time_s=ttt, eval_time_s=1.0, samples_per_s=1.0,
                       phase_time_s={}, final_hr=0.752, curve={"loss": [0.693, loss1]}, precision={"mode": "fp32"})


def _decide(settings: dict) -> Confirmed:
    """``{label: [(time, steps), ...]}``, one pair per seed, the sweep's own run first."""
    runs = [[_seed_run(t, n, seed) for seed, (t, n) in enumerate(pairs)] for pairs in settings.values()]
    return Confirmed(list(settings), runs, 0, "")


def _means_and_ranges(decide):
    times = [[r.time_to_target_s for r in rs] for rs in decide.runs]
    return [sum(ts) / len(ts) for ts in times] + [max(ts) - min(ts) for ts in times]


# --------------------------------------------------------------------------- lesson 02 (and 04's confirm)

# cell 17's table: batch 16384 took 285 steps on both seeds, batch 4096 1020 on both
RUN_02 = {"batch 16384, sqrt rule": [(7.082, 285), (5.762, 285)],
          "batch 4096, sqrt rule": [(7.927, 1020), (7.213, 1020)]}
# lesson 04 cell 14's: LAMB 392 and 380 steps in 20.15 and 31.51 s (the seed with fewer steps the slower), Adam 176
RUN_04 = {"b32768 lamb lr 0.0226": [(20.15, 392), (31.51, 380)], "b32768 adam lr 0.0113": [(8.641, 176), (12.68, 176)]}


def test_a_range_over_runs_of_identical_steps_is_the_machines_pace_not_the_seeds():
    """read f12b 02-H1 (twelfth full run): "chosen: batch 16384, sqrt rule; no measurable difference (time to target:
    batch 16384, sqrt rule 6.42 s vs batch 4096, sqrt rule 7.57 s, within the seed range 1.3 s)" where each setting
    took the same steps on both seeds (285, 285; 1020, 1020): the 1.3 s was the pace of two runs of identical steps,
    not anything a seed did; the same words in lesson 04 cell 14 ("seed range 11 s") over LAMB's 392 and 380 steps.
    Opposite: seeds whose steps account for the range keep "the seed range"."""
    decide = _decide(RUN_02)
    text = decide.compare("batch 16384, sqrt rule", "batch 4096, sqrt rule")
    assert text == ("no measurable difference (time to target: batch 16384, sqrt rule 6.42 s vs batch 4096, sqrt rule "
                    "7.57 s, within the run-to-run range 1.3 s: each setting took the same steps on every seed, 285 "
                    "and 1020 in that order, so that range is the machine's pace between runs, not the seed's)"), text
    assert decide.winner("batch 16384, sqrt rule", "batch 4096, sqrt rule") is None  # the verdict itself stands
    assert disagreements(text, decide.table(), extra=_means_and_ranges(decide)) == [], text
    lamb = _decide(RUN_04)
    text = lamb.compare("b32768 lamb lr 0.0226", "b32768 adam lr 0.0113")
    assert text.startswith("b32768 adam lr 0.0113 lower on every seed (time to target: b32768 lamb lr 0.0226 25.8 s "
                           "vs b32768 adam lr 0.0113 10.7 s; run-to-run range 11 s: b32768 lamb lr 0.0226's seeds "
                           "took 392 and 380 steps, 12 apart, about 0.81 s of it at its mean 0.067 s per step; the "
                           "rest is the machine's pace between runs"), text
    per_step = (20.15 / 392 + 31.51 / 380) / 2
    assert disagreements(text, lamb.table(), extra=[*_means_and_ranges(lamb), 12, 12 * per_step, per_step]) == []
    # opposite: the seeds' steps differ as their times do (one pace): the range is the seeds', as before
    seeds = _decide({"a": [(7.082, 285), (5.762, 232)], "b": [(7.927, 1020), (7.213, 928)]})
    kept = seeds.compare("a", "b")
    assert "within the seed range 1.3 s)" in kept and "pace" not in kept and "run-to-run" not in kept, kept


def test_the_warmup_takeaway_says_a_pace_range_once_in_one_pair_of_parentheses():
    """The takeaway of lesson 03 quotes the verdict without its first words (read r8a 03-2, r10b 03-S1); a verdict
    whose range is the pace's (f12b 02-H1) still ends in its one closing parenthesis and is said once."""
    decide = _decide({"linear warmup, 38 steps": [(9.0, 96), (9.5, 96)], "no warmup": [(9.3, 100), (9.7, 100)]})
    text = L03.takeaway(decide, "linear warmup, 38 steps")
    assert text.startswith("Here warmup made no measurable difference (time to target: linear warmup, 38 steps 9.25 s "
                           "vs no warmup 9.5 s, within the run-to-run range 0.5 s: each setting took the same steps on "
                           "every seed, 96 and 100 in that order, so that range is the machine's pace between runs, "
                           "not the seed's): without it nothing blew up"), text
    assert text.count("no measurable difference") == 1 and "((" not in text


# --------------------------------------------------------------------------- lesson 03

# cell 15's deciding table: the 19-step warmup in 95 and 96 steps, the 38-step one in 96 and 100; no warmup's second
# seed 8.665 s / 92 steps (its line: "train 8.7s", "step 92"; the verdict's mean 9.31 s)
RUN_03 = {"linear warmup, 19 steps": [(9.371, 95), (9.914, 96)], "linear warmup, 38 steps": [(9.579, 96), (9.547, 100)],
          "no warmup": [(9.955, 100), (8.665, 92)]}


def test_the_chosen_warmup_says_when_it_is_level_with_the_runner_up():
    """read f12b 03-H1 (twelfth full run): "chosen: linear warmup, 38 steps; no measurable difference: the seeds
    disagree (... vs no warmup ...)" over the 19-step warmup 0.08 s slower on average, the seeds disagreeing on which
    was faster, and in fewer steps on both seeds (95, 96 against 96, 100): the choice between the warmups, which
    names the ladder's rung, was the clock's, and nothing said so. Opposite: a runner-up slower on every seed beyond
    the range, and the smoke profile's comparison of one warmup with none, keep the one line."""
    decide = _decide(RUN_03)
    rung = decide.best_of([label for label in decide.labels if label != "no warmup"])
    assert rung == "linear warmup, 38 steps"
    line = L03.chosen_verdict(decide, rung)
    first, second = line.split("\n")
    assert first == f"chosen: {rung}; {decide.compare(rung, 'no warmup')}"
    assert second == ("over linear warmup, 19 steps: no measurable difference: the seeds disagree (time to target: "
                      "linear warmup, 38 steps 9.56 s vs linear warmup, 19 steps 9.64 s on average); the rung records "
                      "the faster mean time, not a warmup measured better, and linear warmup, 19 steps took fewer "
                      "steps to the target on every seed, 95 and 96 against 96 and 100: which warmup length is best "
                      "is not resolved here"), second
    assert disagreements(line, L03.deciding_table(decide, rung), extra=_means_and_ranges(decide)) == [], line
    # level, but the runner-up did not take fewer steps on every seed: no steps clause
    level = _decide({**RUN_03, "linear warmup, 19 steps": [(9.371, 97), (9.914, 101)]})
    said = L03.chosen_verdict(level, rung)
    assert said.endswith("the rung records the faster mean time, not a warmup measured better"), said
    # opposite: the runner-up slower on every seed beyond the range: the choice is measured, one line
    apart = _decide({**RUN_03, "linear warmup, 19 steps": [(11.0, 110), (11.2, 112)]})
    assert L03.chosen_verdict(apart, rung) == f"chosen: {rung}; {apart.compare(rung, 'no warmup')}"
    # the smoke profile: one warmup against none, nothing to choose among
    smoke = _decide({k: RUN_03[k] for k in ("linear warmup, 38 steps", "no warmup")})
    assert "\n" not in L03.chosen_verdict(smoke, rung)


# cell 10's sweep table (seed 0)
RUN_03_SWEEP = [_warm_run(9.955, 100, 0, hr=0.757), _warm_run(9.371, 95, 19, hr=0.7522),
                _warm_run(9.579, 96, 38, hr=0.75), _warm_run(10.55, 108, 76, hr=0.7536),
                _warm_run(12.23, 108, 38, "exponential", hr=0.7502)]


def test_the_shortest_warmup_is_no_edge_when_no_warmup_ran_too():
    """read f12b 03-H2 (twelfth full run): "best warmup: linear warmup, 19 steps (the edge of the lengths tried: a
    better one may lie beyond)" where beyond the shortest length lies 0 steps, the run without warmup, measured in the
    same sweep and worse (9.955 s / 100 steps against 9.371 s / 95): 19 steps is bracketed by 0 and 38. Opposite: no
    warmup better (shorter was better still), and the longest length best (still an edge)."""
    text = L03.warmup_reading(RUN_03_SWEEP, WARMUP_LABELS)
    assert text.startswith("best warmup: linear warmup, 19 steps (between no warmup and 38 steps, both worse on this "
                           "seed), reached the target in 9.4 s (95 steps)"), text
    assert "edge" not in text and "may lie beyond" not in text
    paces = [r.time_to_target_s / r.steps_to_target for r in RUN_03_SWEEP]
    table = sweep_table(RUN_03_SWEEP, WARMUP_LABELS, columns=WARMUP_COLUMNS)
    assert disagreements(text, table, extra=(19, 38, 76, 10, *paces)) == [], text
    # opposite: no warmup faster on this seed than every warmup
    faster = [_warm_run(9.0, 92, 0, hr=0.757)] + RUN_03_SWEEP[1:]
    said = L03.warmup_reading(faster, WARMUP_LABELS)
    assert said.startswith("best warmup: linear warmup, 19 steps (the shortest tried; no warmup, shorter still, did "
                           "better on this seed), reached"), said
    # opposite: the longest length best: an edge, as before
    longest = RUN_03_SWEEP[:3] + [_warm_run(9.0, 90, 76, hr=0.7536)] + RUN_03_SWEEP[4:]
    assert ("best warmup: linear warmup, 76 steps (the edge of the lengths tried: a better one may lie beyond)"
            in L03.warmup_reading(longest, WARMUP_LABELS))


# --------------------------------------------------------------------------- lesson 04

RACE_COLUMNS = ("rule", "time to target (s)", "steps to target", "epochs to target", "final HR@10", "best HR@10",
                "epochs run", "samples/s")


def _race_run(lr, optimizer, hrs, epochs=2.704):
    """A race run that missed the target: its HR@10 at each evaluation (the plot's curve), ``epochs`` run."""
    r = fake_result(32768, lr, None, hr=hrs[-1], optimizer=optimizer)
    r.curve = {"epoch": [epochs * i / (len(hrs) - 1) for i in range(len(hrs))], "hr": list(hrs)}
    r.best_hr, r.epochs = max(hrs), epochs
    return r


def test_a_run_still_rising_when_the_race_ended_says_so():
    """read f12b 04-H1 (twelfth full run): "lars (lr 1, 2, 4, 8): best at lr 8 (the edge of its grid: ...), did not
    reach 0.75: best HR@10 0.672" over a curve rising at every evaluation of its last epoch (about 0.545, 0.59, 0.63,
    0.672 at 2.0, 2.25, 2.5 and 2.704 epochs), cut by the race's budget: the budget stopped it while it improved.
    Opposite: LAMB at lr 0.0453, best 0.6671 and final 0.6281, which levelled off."""
    lars = [_race_run(1.0, "lars", [0.1, 0.35, 0.3982, 0.3912]), _race_run(2.0, "lars", [0.1, 0.36, 0.3987, 0.3902]),
            _race_run(4.0, "lars", [0.1, 0.3, 0.40, 0.4457]),
            _race_run(8.0, "lars", [0.1, 0.3, 0.42, 0.545, 0.59, 0.63, 0.6718543171882629])]
    labels = [f"b32768 lars lr {r.config['peak_lr']:.3g}" for r in lars]
    text = L04.race_reading(lars, target_hr=0.75, floor_hr=0.3929, users=6040)
    assert ("lars (lr 1, 2, 4, 8): best at lr 8 (the edge of its grid: a better lr may lie beyond), did not reach "
            "0.75: best HR@10 0.672, still rising at its last evaluation when the race's epochs ran out (2.704 "
            "epochs): where it would level off is not measured") in text, text
    table = sweep_table(lars, labels, columns=RACE_COLUMNS, title="Batch 32768, warmup 76 steps: time to HR@10 >= 0.75")
    assert disagreements(text, table, extra=[0.3929]) == [], text  # the floor: lesson 01's popularity ranking
    # opposite: the best of a grid that missed the target levelled off (best 0.6671, final 0.6281)
    lamb = [_race_run(0.0113, "lamb", [0.1, 0.4, 0.5, 0.5204]), _race_run(0.0453, "lamb", [0.1, 0.5, 0.6671, 0.6281])]
    said = L04.race_reading(lamb, target_hr=0.75, floor_hr=0.3929, users=6040)
    assert ("best at lr 0.0453 (the edge of its grid: a better lr may lie beyond), did not reach 0.75: best HR@10 "
            "0.667") in said and "still rising" not in said, said


def test_the_difference_from_the_floor_is_that_of_the_printed_values():
    """read f12b 04-S1 (twelfth full run): "best HR@10 0.3925, level with the popularity ranking's 0.3929 (a
    difference of -0.0003 ..." where the printed values differ by 0.0004 (the exact 2371/6040 and 2373/6040 differ by
    0.00033). Opposite: values whose printed difference is 0.0003 say 0.0003."""
    sgd = [fake_result(32768, 1.0, None, hr=0.39254966378211975, optimizer="sgd")]
    sgd[0].best_hr = 0.39254966378211975
    text = L04.race_reading(sgd, target_hr=0.75, floor_hr=2373 / 6040, users=6040)
    assert ("best HR@10 0.3925, level with the popularity ranking's 0.3929 (a difference of -0.0004 against twice "
            "the evaluation's sampling error, 0.0126)") in text, text
    sgd[0].best_hr = 0.39262
    assert "0.3926, level with the popularity ranking's 0.3929 (a difference of -0.0003" in L04.race_reading(
        sgd, target_hr=0.75, floor_hr=2373 / 6040, users=6040)
