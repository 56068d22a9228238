"""#37 items 1 and 2 for lessons 01-06's remaining readings, lessons 12-13, the ladder and the noise verdict.

Item 1 (agreement): each number a reading quotes is a cell of the table its notebook prints with it, or derived
from its cells by a rule named here (``extra``, each with where it comes from), checked with
:func:`test_reading_agreement.disagreements`. Item 2 (opposite): the reading fed opposite results says the
opposite. Constructed inputs only: no training, a fraction of a second each.
"""

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

from course_lib.lessons import l01_baseline as L01  # noqa: E402
from course_lib.lessons import l04_lars as L04  # noqa: E402
from course_lib.lessons import l05_mixed_precision as L05  # noqa: E402
from course_lib.lessons import l06_data_parallel as L06  # noqa: E402
from course_lib.lessons import l13_multi_node as L13  # noqa: E402
from course_lib.train.ncf import TrainResult  # noqa: E402
from test_reading_agreement import _numbers, disagreements  # noqa: E402


def _result(phases, steps=100):
    return TrainResult(config={"optimizer": "adam"}, dataset="d", data_source="", synthetic=True, device="cpu",
                       world_size=1, target_hr=None, time_to_target_s=None, steps_to_target=None,
                       epochs_to_target=None, epochs=1.0, steps=steps, samples=100, train_time_s=8.0, eval_time_s=2.0,
                       samples_per_s=12.5, phase_time_s=phases)


# --------------------------------------------------------------------------- lesson 01


def test_the_phase_reading_follows_the_phases():
    """Opposite results: one phase with most of the clock (the next thing to make faster), then three about equal."""
    dominated = _result({"sampling": 1.0, "forward_backward": 2.0, "optimizer": 5.0, "evaluation": 0.7})
    assert dominated.phase_reading() == ("the largest phase of the training clock is optimizer (62%); it is the "
                                         "next thing to make faster")
    even = _result({"sampling": 2.6, "forward_backward": 2.7, "optimizer": 2.7, "evaluation": 0.7})
    said = even.phase_reading()
    assert "no single phase dominates" in said and "next thing to make faster" not in said
    assert disagreements(said, even.table()) == []


def test_the_bottleneck_reading_quotes_the_phase_table_and_the_profile():
    """Cell 18 prints the profile (the profiler's operator table with the loop's phase rows, in seconds) and the
    reading; the run's shares are cells of the phase table of cell 14 (``result.table()``)."""
    from course_lib.train import TrainConfig, build_model

    model = build_model(SimpleNamespace(num_users=50, num_items=80), TrainConfig(factors=4, layers=(8, 4)))
    r = _result({"sampling": 0.5, "forward_backward": 2.5, "optimizer": 5.0, "evaluation": 2.0})
    r.steps_per_epoch = 1000
    for sampling in (0.03, 0.3):  # the profile's sampling like the run's, then 23 %: the epoch's shuffle
        prof = SimpleNamespace(phase_s={"sampling": sampling, "forward_backward": 0.3, "optimizer": 0.67}, steps=20)
        said = L01.bottleneck_reading(r, model, prof)
        shares = L01.profile_phase_shares(prof.phase_s)
        extra = [
            *shares.values(),  # each phase's share of the profiled steps: its row of the profile / their sum
            1000 * 5.0 / r.steps,  # ms per step: the optimizer's seconds in the phase table / the run's steps
            r.steps_per_epoch, prof.steps,  # the run's steps per epoch (its summary), the steps profiled
            L01.embedding_share(model),  # the share of the parameters, from the model's counts (cell 7)
        ]
        assert disagreements(said, r.table(), extra=extra) == []


def test_the_pace_readings_read_no_table():
    """pace_reading reads the run's curve (the figure of cell 14), pace_drift_reading the yardstick's two timings
    (printed under the summary of cell 13): what they quote is what those give, and nothing else."""
    steps, ms = [0, 100, 200, 300], [10.0, 10.0, 25.0]
    times = [0.0]
    for m in ms:
        times.append(times[-1] + 100 * m / 1000)
    r = _result({})
    r.curve = {"step": steps, "time_s": times, "hr": [0.1] * 4}
    said = L01.pace_reading(r)
    from course_lib.tables import Table

    curve = Table(["first step", "steps", "ms per step"], rows=[
        {"first step": s, "steps": n, "ms per step": m} for s, n, m in L01.pace_intervals(r)])
    # 3: the intervals counted; 3.0 s: the steps at the fastest pace; 4.5 s: the curve's last time
    assert disagreements(said, curve, extra=[3, 3.0, times[-1]]) == []
    drift = {"before": 152_264.0, "after": 135_505.0, "rate": 143_884.6}
    said = L01.pace_drift_reading(drift)
    pace = Table(["before", "after", "rate"], rows=[drift])
    # the drift (after / before - 1) as the ± of the speedups; 1: the significant figures it leaves
    assert disagreements(said, pace, extra=[drift["after"] / drift["before"] - 1, 1]) == []


# --------------------------------------------------------------------------- lesson 04


def test_the_dead_layers_reading_quotes_the_trust_ratio_table():
    """Cell 11 prints the reading over ``trust_ratio_table`` (first, median, last, and the step the ratio sat at
    the zero-gradient fallback from: before #37 the table had no such column and the step was in no cell)."""
    history = {"step": list(range(0, 40, 2)),
               "trust_ratio": {"mlp.0.weight": [14.2, 43.7, 394, 1490] + [1.0] * 16,
                               "gmf_user.weight": [394 - i for i in range(20)]}}
    said = L04.dead_layers_reading(history, lr=7.0)
    table = L04.trust_ratio_table(history)
    assert [r["exactly 1 (no gradient) from step"] for r in table.rows] == ["—", 8]
    # 7: the LARS lr, in the figure's title above ("LARS lr 7, batch ..."); 0: "outputs 0", the ReLU's zero
    assert disagreements(said, table, extra=[7.0, 0]) == []
    alive = {"step": history["step"], "trust_ratio": {"mlp.0.weight": [14.2 + i for i in range(20)]}}
    said = L04.dead_layers_reading(alive)
    assert disagreements(said, L04.trust_ratio_table(alive), extra=[1]) == []  # "exactly 1": the fallback's value


def test_the_race_reading_quotes_the_race_table():
    """Cell 9 reads the runs of the sweep table of cell 8 (its rule column names each run's batch, optimizer, lr)."""
    from course_lib.sweeps import BLOW_UP_LOSS, sweep_table
    from test_ladder import fake_result

    runs = [fake_result(16384, 1e-2, 12.0), fake_result(16384, 2e-2, None, hr=0.70),
            fake_result(16384, 8.0, None, hr=0.10, optimizer="sgd"),
            fake_result(16384, 32.0, None, hr=0.05, optimizer="sgd"), fake_result(16384, 5.0, 30.0, optimizer="lars")]
    runs[3].diverged = True
    for r in runs:
        r.best_hr = r.final_hr
    labels = [f"b16384 {r.config['optimizer']} lr {r.config['peak_lr']:.3g}" for r in runs]
    table = sweep_table(runs, labels, title="Batch 16384, warmup 0 steps: time to HR@10 >= 0.75",
                        columns=("rule", "time to target (s)", "steps to target", "epochs to target", "final HR@10",
                                 "best HR@10", "epochs run", "samples/s"))
    said = L04.race_reading(runs, target_hr=0.75, floor_hr=0.39)
    assert "best at lr 8" in said and "lr 32 blew up" in said
    # 0.39: the popularity ranking's HR@10, lesson 01's floor (evaluate_popularity, passed in by cell 9)
    assert disagreements(said, table, extra=[0.39]) == []
    runs[2].diverged = True
    said = L04.race_reading(runs, target_hr=0.75, floor_hr=0.39)
    assert "every lr tried blew up" in said
    assert disagreements(said, table, extra=[0.39, BLOW_UP_LOSS]) == []  # the blow-up loss the reading states


# --------------------------------------------------------------------------- lesson 05


def test_the_lars_unscale_reading_says_when_the_ratios_were_not_unscaled():
    """Opposite results: Precision.step's ratios equal fp32's (unscaled first), then S times smaller (LARS read the
    scaled gradients): before #37 the reading opened "Precision.step unscaled before LARS" over both."""
    def rows(scaled):
        return [{"layer": f"l{i}", "||w||": 2.0 + i, "||g||": 1e-3 * (i + 1), "trust ratio, fp32": 1.0 + i,
                 "trust ratio, Precision.step": (1.0 + i) / (65536 if scaled else 1),
                 "trust ratio on S x g": (1.0 + i) / 65536, "on S x g / true": 1 / 65536} for i in range(3)]

    good = L05.lars_unscale_reading(rows(False), 2.0 ** 16)
    assert good.startswith("Precision.step unscaled before LARS read the gradients: its trust ratios equal")
    bad = L05.lars_unscale_reading(rows(True), 2.0 ** 16)
    assert "did NOT read the unscaled gradients" in bad and "unscaled before LARS" not in bad
    assert "by up to 1.0e+00 (relative)" in bad
    # 1.0 and 0: "1.0e+00" as the checker splits it; 1e-3 as "1e-03" (1, 3): the tolerance; 1.526e-05 (1.526, 5);
    # 16: S's exponent; 1030: apex#1030
    assert disagreements(bad, L05.lars_unscale_table(rows(True), 2.0 ** 16),
                         extra=[1.0, 0, 3, 1e5 / 65536, 5, 16, 1030]) == []


# --------------------------------------------------------------------------- lesson 06


def test_the_allreduce_reading_follows_the_sweep():
    """Opposite results: small messages flat within their noise (no bandwidth regime), then a sweep that reaches
    the bandwidth regime."""
    from test_data_parallel_study import _sweep

    flat = L06.allreduce_reading(_sweep([100, 104, 98], [20, 20, 20]))
    sizes = [4**k for k in range(1, 14)]
    steep = L06.allreduce_reading(_sweep([(50e-6 + n / 2e9) * 1e6 for n in sizes], [1.0] * len(sizes), p=4,
                                         sizes=sizes))
    assert "a flat line within the noise" in flat and "No size measured here is large enough" in flat
    assert "Bandwidth regime above it" in steep and "Bandwidth regime" not in flat
    assert "No size measured here is large enough" not in steep


def test_the_overlap_reading_follows_the_buckets():
    """Opposite results: the CPU tier, where overlap bought nothing measurable; eight GPUs, where it saved time;
    and overlap that cost time."""
    from test_data_parallel_study import _result, _row, cpu_tier, eight_gpu_tier

    cpu, gpus = L06.overlap_reading(cpu_tier()), L06.overlap_reading(eight_gpu_tier())
    costly = L06.overlap_reading(_result(2, "gloo", [_row("DDP buckets", 1.0, True, "none", [12.0, 12.5], n=5),
                                                     _row("one all-reduce after backward", 4.0, False, "none",
                                                          [9.0, 9.5])]))
    assert "What overlap saved: the fastest bucket setting made one bucket" in cpu  # r10c 06-H1: it cannot overlap
    assert "What overlap saved: the best bucket setting took 2.62 ms per step, 0.98 ms less" in gpus
    assert "What overlap saved: nothing — one all-reduce after backward took 9" in costly
    assert len({cpu.split("What overlap saved")[1][:40], gpus.split("What overlap saved")[1][:40],
                costly.split("What overlap saved")[1][:40]}) == 3


def test_the_compression_reading_follows_the_step_times():
    """Opposite results: fp16 compression slower than uncompressed on the CPU tier, faster on eight GPUs."""
    from test_data_parallel_study import cpu_tier, eight_gpu_tier

    cpu, gpus = L06.compression_reading(cpu_tier()), L06.compression_reading(eight_gpu_tier())
    assert "fp16 took 10.1 ms per step, 0.8 ms more than uncompressed" in cpu and "less than uncompressed" not in cpu
    assert "fp16 took 2.31 ms per step, 0.31 ms less than uncompressed" in gpus and "more than uncompressed" not in gpus


# --------------------------------------------------------------------------- lesson 13


def test_lesson_13s_link_verdict_quotes_the_link_table():
    """Cell 8 prints ``link_table`` (before #37 built in the notebook) and the verdict of its 'the links' row."""
    from test_l13_multi_node import VIRTUAL_LINK, rows_of

    far = L13.link_rate(rows_of(VIRTUAL_LINK))
    near = L13.assumed_link("8gbit", alpha_s=20e-6)
    table = L13.link_table(near, far, 2, measured=True)
    for set_rate in (100e6, 1e9):  # recovered, then not (opposite results: test_l13_multi_node)
        said = L13.link_verdict(far, set_rate, "virtual")
        # the rate the link was set to (LINK_RATE, the settings cell); the fit over it; the tolerance (35 %)
        extra = [set_rate / 1e6, set_rate / 1e9, far["rate_bits_per_s"] / set_rate, L13.LINK_TOLERANCE]
        assert disagreements(said, table, extra=extra) == []
    said = L13.link_verdict(far, None, "slurm")
    assert disagreements(said, table) == []


def test_lesson_13s_layout_verdict_quotes_the_layout_table():
    """Cell 10 prints ``layout_table`` (measured rows, then the model's) and a verdict of each: each ratio is two
    cells of its samples/s column (W nodes x 1 over 1 node x W, at one k)."""
    from test_l13_multi_node import VIRTUAL_LAYOUTS, layout_rows

    rows = layout_rows(VIRTUAL_LAYOUTS, "virtual")
    heavy = L13.predicted_layouts(1.5e-3, 617_604, 64, near=(20e-6, 1e-9), far=(100e-6, 8 / 100e6))
    table = L13.layout_table(rows, heavy)
    for said, these in ((L13.layout_verdict(rows), rows), (L13.layout_verdict(heavy), heavy)):
        # HIDDEN_AT (80 %): the share of one node's throughput that counts as hidden; 1 - it (20 %); r11 13-H: how
        # much more to accumulate, from a line through each layout's step times (extrapolated_k)
        extra = [L13.HIDDEN_AT, 1 - L13.HIDDEN_AT, *(L13.extrapolated_k(these) or ())]
        assert disagreements(said, table, extra=extra) == []


def test_lesson_13s_ttt_verdict_quotes_the_time_to_target_table():
    """Cell 12 prints ``ttt_table`` (measured and the model side by side) and the verdict."""
    from test_l13_multi_node import POINTS, VIRTUAL_LAYOUTS, _model, layout_rows

    measured = L13.ttt_rows(layout_rows(VIRTUAL_LAYOUTS, "virtual"), POINTS)
    model = L13.ttt_rows(_model(), POINTS)
    said = L13.ttt_verdict(measured, model)
    # TTT_MARGIN (25 %) and TTT_NOISE (10 %): the verdict's stated margin and noise band; 9: "lesson 09's model";
    # 6: "lesson 06" (compress the gradients)
    extra = [L13.TTT_MARGIN, L13.TTT_NOISE, 9, 6]
    # r11 13-H: how much more to accumulate, from a line through each layout's step times (extrapolated_k)
    extra += [x for rows in (measured, model) for x in (L13.extrapolated_k(rows, 1 / (1 + L13.TTT_MARGIN)) or ())]
    assert disagreements(said, L13.ttt_table(measured, model, POINTS), extra=extra) == []


def test_lesson_13s_hierarchy_verdict_quotes_the_hierarchy_table():
    """Cell 14 prints ``hierarchy_table`` (before #37 built in the notebook) and the verdict at the largest message."""
    from test_l13_multi_node import HIERARCHY, hierarchy_rows

    for recorded in (HIERARCHY, [(n, a, t * (2.0 if a == "two-level" else 1.0)) for n, a, t in HIERARCHY]):
        rows = hierarchy_rows(recorded)
        said = L13.hierarchy_verdict(rows)
        # the bytes each node's link carries, flat over two-level (hierarchy_bytes_ratio of 2 nodes x 2 ranks)
        assert disagreements(said, L13.hierarchy_table(rows), extra=[L13.hierarchy_bytes_ratio(2, 2), 0.15]) == []


def test_lesson_13s_placement_verdict_quotes_the_placement_table():
    """Cell 16 prints ``placement_table`` and the verdict; the ratios are two cells of one column."""
    from test_l13_multi_node import PLACED, placement_result

    for placed in (PLACED, {p: [(b, 0.05) for b, _ in reads] for p, reads in PLACED.items()}):
        result = placement_result(placed)
        said = L13.placement_verdict(result)
        assert disagreements(said, L13.placement_table(result), extra=[0.25]) == []  # the 25 % margin


# --------------------------------------------------------------------------- helpers shared by the numbers


def test_the_number_reader_reads_exponents_as_the_readings_write_them():
    """The checker reads "1.0e+00" as 1.0 and 0 (it reads no exponents): the extras above list them so."""
    assert [n for n, _ in _numbers("1.0e+00 and 2^16")] == [1.0, 0.0, 2.0, 16.0]



# --------------------------------------------------------------------------- lesson 12


def test_lesson_12s_strategy_verdict_quotes_the_strategy_table():
    """``verdict`` reads the rows of ``strategy_table`` (cell 11; the verdict is saved with the lesson's result)."""
    from course_lib.lessons import l12_hyperparameter_search as L12
    from test_search_study import _rows

    for reach in (((8, 8, 8), (2, 3, 9)), ((4, 4, 4), (3, 3, 3)), ((None, None, None), (2, 2, None)),
                  ((2, 2, 2), (None, None, 2)), ((None,) * 3, (None,) * 3)):
        rows = _rows(*reach)
        said = L12.verdict(rows, 0.5)
        assert disagreements(said, L12.strategy_table(rows, 0.5), extra=[0.5]) == []  # the goal: at most 0.5x


def test_lesson_12s_parallel_reading_quotes_the_parallel_table():
    from course_lib.lessons import l12_hyperparameter_search as L12
    from test_search_study import _parallel

    for t in (_parallel(9.4, 7.1, 10.2, reach=(1.0, 2.0)), _parallel(20.0, 9.0, 10.0), _parallel(10.0, 9.0, 10.5)):
        assert disagreements(L12.parallel_reading(t), t) == []


def test_lesson_12s_pruning_reading_quotes_the_pruning_table():
    from course_lib.lessons import l12_hyperparameter_search as L12
    from test_search_study import _record, _trial

    recs = [_record("random", 0, [_trial(2, [0.1, 0.2], optimizer="adam", speed=1000.0),
                                  _trial(2, [0.1, 0.2], optimizer="lamb", speed=500.0)])]
    for predicted in ({"adam": 2.2, "lamb": 3.9}, {"adam": 3.5, "lamb": 3.9}):  # right, then wrong side
        t = L12.pruning_table(recs, predicted, samples_per_epoch=1000, max_epochs=2.0, time_limit_s=3.0)
        assert disagreements(L12.pruning_reading(t), t) == []


def test_lesson_12s_bert_verdict_quotes_the_bert_table():
    from course_lib.lessons import l12_hyperparameter_search as L12
    from test_search_study import BSPEC, _bert_record, _lr

    rand = _lr(_bert_record("random", 0, [[7.0, 6.5, 6.0, 5.8], [7.0, 6.6, 6.2, 6.1]]), 1e-3, 2e-3)
    hb = _lr(_bert_record("hyperband", 0, [[7.0, 6.9], [7.0, 6.0, 4.9, 4.5], [7.0, 6.95]],
                          ["PRUNED", "COMPLETE", "PRUNED"]), 1e-3, 5e-3, 3e-3)
    tied = _lr(_bert_record("hyperband", 0, [[7.0, 6.5, 6.0, 5.801]]), 4e-3)
    for recs in ([rand, hb], [rand, tied]):
        rows = L12.bert_rows(recs, BSPEC)
        said = L12.bert_verdict(rows, BSPEC)
        # the gap of the two bests (a difference of two cells); the steps per search (budget x eval_every, stated
        # in the cell above); the target loss (lesson 07's); the tie (0.005)
        gap = abs(rows[0]["best held-out loss"] - rows[1]["best held-out loss"])
        extra = [gap, BSPEC["budget"] * BSPEC["eval_every"], BSPEC["target_loss"], 0.005]
        assert disagreements(said, L12.bert_table(rows, BSPEC), extra=extra) == []


def test_lesson_12s_replay_verdict_and_confirm_reading_quote_their_tables():
    from course_lib.lessons import l12_hyperparameter_search as L12
    from test_tabular_search import _pool, _reading

    for curves in (_pool(), _pool(n_bad=10, late_bloomer=True)):
        table, said = _reading(curves)
        assert disagreements(said, table, extra=[0.90]) == []  # "90% interval": the interval's stated level
    win = {"pool_hr": 0.7}
    for runs in ([{"seed": 1, "best HR@10": 0.71, "epochs to target": 3.0}],
                 [{"seed": 1, "best HR@10": 0.71, "epochs to target": 3.0},
                  {"seed": 2, "best HR@10": 0.6, "epochs to target": None}]):
        t = L12.confirm_table(win, runs, 0.68)
        said = L12.confirm_reading(t, 0.68)
        # the fresh seeds counted (the table's rows but the pool's), and those that reached the target
        extra = [len(runs), sum(r["epochs to target"] is not None for r in runs)]
        assert disagreements(said, t, extra=extra) == []


# --------------------------------------------------------------------------- the ladder and the noise verdict


def test_the_ladder_reading_quotes_the_ladder_table(tmp_path):
    """Lesson 06's last cell prints ``ladder_reading()`` over ``ladder_table()``; opposite rungs: one faster, one
    slower, one within the noise of the rung below, one not run."""
    from course_lib import ladder
    from test_ladder import fake_result

    pace = {"before": 100.0, "after": 100.0, "rate": 100.0}
    save = lambda step, r, **kw: ladder.save_ladder_result(step, r, pace=pace, directory=tmp_path, **kw)  # noqa: E731
    save("baseline", fake_result(256, 1e-3, 100.0))
    save("+linear scaling", fake_result(4096, 4e-3, 20.0))
    save("+warmup", fake_result(16384, 8e-3, 30.0), reason="warmup cost time here")
    save("+LARS", fake_result(32768, 1e-2, 10.0, optimizer="lamb"))
    said = ladder.ladder_reading(tmp_path)
    assert "slower than" in said and "faster than the rung below" in said
    assert disagreements(said, ladder.ladder_table(tmp_path)) == []
    pace2 = {"before": 100.0, "after": 70.0, "rate": 85.0}  # a lesson whose pace moved: its figures carry a ±
    ladder.save_ladder_result("+mixed precision", fake_result(32768, 1e-2, 9.5, optimizer="lamb", precision="bf16"),
                              pace=pace2, directory=tmp_path)
    said = ladder.ladder_reading(tmp_path)
    # PACE_DRIFT_LIMIT: the drift beyond which paced seconds are flagged unreliable (the reading states it)
    assert disagreements(said, ladder.ladder_table(tmp_path), extra=[ladder.PACE_DRIFT_LIMIT]) == []


def test_the_noise_verdict_quotes_the_deciding_table():
    """``noise_verdict`` is read under the deciding comparison's table (``Confirmed.table``, lessons 02-06): its
    means are each setting's mean over its seeds' rows, its range the larger max - min (the rules it states)."""
    from course_lib.metrics import noise_verdict
    from course_lib.sweeps import Confirmed
    from test_ladder import fake_result

    for a, b in (([10.0, 11.0], [14.0, 15.0]), ([10.0, 13.0], [12.0, 14.0]), ([10.0, 20.0], [12.0, 11.0]),
                 ([30.0], [20.0])):
        runs = [[fake_result(256, 1e-3, t) for t in a], [fake_result(256, 2e-3, t) for t in b]]
        decided = Confirmed(["A", "B"], runs, 0, "")
        _, said = noise_verdict(a, b, names=("A", "B"))
        means = [sum(a) / len(a), sum(b) / len(b)]
        spread = max(max(a) - min(a), max(b) - min(b))
        assert disagreements(said, decided.table(), extra=[*means, spread]) == []
