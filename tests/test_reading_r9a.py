"""Readings fixed after the full run of 2026-12-02 (#37, read by r9a): each test feeds that run's numbers."""

from course_lib.lessons import l02_linear_scaling as L02


def _rows(steps_by_batch, resolution_by_batch):
    return [{"batch size": b, "rule": "sqrt", "steps to target": s, "resolution (steps)": resolution_by_batch[b]}
            for b, s in steps_by_batch.items()]


def test_lesson_02s_tendency_names_the_regime_it_lies_near():
    # the run: "batch 16384 -> 65536: slope -0.76, diminishing returns (within one evaluation interval of the
    # next regime: a tendency)"; -0.76 lies near perfect scaling's -0.8, and the next regime (maximal) is far
    steps = {256: 17406, 1024: 4356, 4096: 1020, 16384: 285, 65536: 100}
    res = {256: 967, 1024: 242, 4096: 60, 16384: 15, 65536: 4}
    regimes = L02.scaling_regimes(_rows(steps, res))
    last = regimes[-1]
    assert last["regime"] == "diminishing returns" and not last["resolved"]
    text = L02.regime_reading(regimes)
    assert "slope -0.76, diminishing returns (within one evaluation interval of perfect scaling: a tendency)" in text
    assert "next regime" not in text


def test_lesson_02s_tendency_near_the_flat_end_names_maximal_data_parallelism():
    # the opposite case: a diminishing slope (-0.25) just short of maximal's -0.2, coarse evaluations
    steps = {4096: 1000, 16384: 707}
    res = {4096: 200, 16384: 200}
    regimes = L02.scaling_regimes(_rows(steps, res))
    assert regimes[-1]["regime"] == "diminishing returns" and not regimes[-1]["resolved"]
    assert "within one evaluation interval of maximal data parallelism: a tendency" in L02.regime_reading(regimes)


def test_lesson_02s_tendency_inside_perfect_scaling_names_diminishing_returns():
    steps = {4096: 1000, 16384: 320}  # slope -0.82: perfect, near -0.8
    res = {4096: 100, 16384: 100}
    regimes = L02.scaling_regimes(_rows(steps, res))
    assert regimes[-1]["regime"] == "perfect scaling" and not regimes[-1]["resolved"]
    assert "within one evaluation interval of diminishing returns: a tendency" in L02.regime_reading(regimes)


def test_lesson_03s_takeaway_quotes_every_seeds_first_loss_as_its_table_prints_them():
    # the run: "(loss at the first evaluation: 0.505 without warmup, 0.611 with it)" over the table's
    # no warmup 0.5081 / 0.5054 and 38-step warmup 0.6203 / 0.6114 (the lower seed's, unsaid)
    from course_lib.lessons import l03_warmup as L03
    from test_reading_agreement import _decided

    text = L03.takeaway(_decided([9.69, 12.05], [11.16, 11.21], (0.6203, 0.6114), (0.5081, 0.5054)),
                        "linear warmup, 38 steps")
    assert ("(loss at the first evaluation: 0.505 to 0.508 over 2 seeds without warmup, 0.611 to 0.620 over 2 "
            "seeds with it)") in text, text
    # opposite: seeds that agree to three places quote one number
    same = L03.takeaway(_decided([9.69, 12.05], [11.16, 11.21], (0.6110, 0.6112), (0.5051, 0.5054)),
                        "linear warmup, 38 steps")
    assert "(loss at the first evaluation: 0.505 without warmup, 0.611 with it)" in same, same


def test_lesson_04s_race_reading_calls_a_run_within_the_noise_level_with_the_floor():
    # the run: "sgd (lr 1, 2, 4, 8): best at lr 1 ..., did not reach 0.75: best HR@10 0.3925, below the popularity
    # ranking's 0.3929" over 6040 users (twice the error 0.0126), where lesson 01 said "level with" 0.0022 apart
    from course_lib.lessons.l04_lars import race_reading
    from test_ladder import fake_result

    runs = [fake_result(32768, 1.0, None, hr=0.3925, optimizer="sgd"), fake_result(32768, 2.0, None, hr=0.3546,
                                                                                  optimizer="sgd")]
    text = race_reading(runs, target_hr=0.75, floor_hr=0.3929, users=6040)
    assert "best HR@10 0.3925, level with the popularity ranking's 0.3929 (a difference of -0.0004" in text, text
    assert "below" not in text.split("\n")[0]
    # opposite: far below the floor stays "below"
    far = race_reading([fake_result(32768, 8.0, None, hr=0.10, optimizer="sgd")], target_hr=0.75, floor_hr=0.3929,
                       users=6040)
    assert "best HR@10 0.1000, below the popularity ranking's 0.3929" in far


def test_lesson_01s_optimizer_reading_gives_each_batch_and_the_ladder_a_line():
    # the run: one line of about 1,500 characters, "... the fastest whole step: dense Adam, fused. at batch 16384 ..."
    from course_lib.lessons import l01_baseline as L01
    from test_reading_r4a import _run_opt_comp

    lines = L01.optimizer_reading(_run_opt_comp()).split("\n")
    assert len(lines) >= 2 and lines[0].startswith("at batch ") and lines[1].startswith("at batch "), lines
    assert not any(". at batch" in line for line in lines)
