"""#37 item 1 for the readings of lessons 02, 03, 05 and 06 that had no table-agreement test: each number a
reading quotes is a cell of the table printed with it, the ratio of two cells of one column, or derived by
the rule the test names (``extra``). The opposite-results tests of item 2 for the same readings sit beside
them (and in the lessons' own test files). Constructed inputs only: a fraction of a second."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from test_reading_agreement import _columns, disagreements  # noqa: E402

from course_lib.lessons import l06_data_parallel as L06  # noqa: E402


def _cells(table) -> list[float]:
    return [v for col in _columns(table) for v in col]


def _differences(table) -> list[float]:
    cells = _cells(table)
    return [a - b for a in cells for b in cells]


# --------------------------------------------------------------------------- lesson 06


def test_lesson_06s_overlap_reading_quotes_the_bucket_table():
    from test_data_parallel_study import cpu_tier, eight_gpu_tier

    for result in (cpu_tier(), eight_gpu_tier()):
        table = result.table()
        # derived: differences of two step cells (ms saved), their share of the larger (the %), the step's
        # communication share ((step - floor) / step), each as a difference or ratio of cells
        cells = _cells(table)
        shares = [(a - b) / a for a in cells for b in cells if a]
        extra = _differences(table) + shares + [1]
        assert disagreements(L06.overlap_reading(result), table, extra=extra) == []


def test_lesson_06s_compression_reading_quotes_the_compression_table():
    from test_data_parallel_study import cpu_tier

    result = cpu_tier()
    table = result.compression_table()
    # derived: differences of the step cells and their share of the uncompressed step, the loss difference's
    # share of what the uncompressed run gained, 2^-11 (fp16's rounding), 16 (bits); the final losses at one
    # more decimal than the table's "first -> last" (the difference between them is smaller than the table's
    # last digit: 0.90243 against 0.90252 in the full run)
    losses = [r["final_loss"] for r in result.compression_rows if r.get("final_loss") is not None]
    ref = result.compression_rows[0]
    gained = ref["first_loss"] - ref["final_loss"]
    steps = [r["step_ms"] for r in result.compression_rows if r.get("step_ms") is not None]
    extra = ([a - b for a in steps for b in steps] + [(a - ref["step_ms"]) / ref["step_ms"] for a in steps]
             + [abs(x - ref["final_loss"]) / gained for x in losses] + [gained, 16, 2, 11] + losses
             # the timed steps (the rows' own count); the update in units of 2^-11; torch's quoted refusal
             + [ref["steps"]] + [r["update_rel_diff"] * 2 ** 11 for r in result.compression_rows
                                 if r.get("update_rel_diff") is not None] + [11, 2.10])
    assert disagreements(L06.compression_reading(result), table, extra=extra) == []


# --------------------------------------------------------------------------- lesson 02


def _run(batch, test_hr, train_hr, epochs=1.0):
    from test_train_tricks import gap_run

    return gap_run(batch, test_hr, train_hr, epochs)


def test_lesson_02s_gap_reading_quotes_the_gap_table():
    """The gap reading and the table under it come from the same runs (``gap_table``); the reading's change is
    the difference of two gap cells, its noise twice the combined binomial error of the four HR@10 cells.
    Opposite results: a gap that grows beyond the noise, and one that does not."""
    import math

    from course_lib.lessons import l02_linear_scaling as L02
    from course_lib.metrics import hr_standard_error

    base = _run(256, 0.7563, 0.7997, 0.90)
    for big in (_run(65536, 0.757, 0.8046, 1.32), _run(65536, 0.70, 0.86, 3.0)):
        results, labels = [base, base, big], ["linear", "sqrt", "sqrt"]
        table = L02.gap_table(results[1:], labels[1:], baseline=base)
        text = L02.gap_reading(results, labels, users=6040)
        se = lambda r: math.hypot(hr_standard_error(r.final_hr, 6040), hr_standard_error(r.final_train_hr, 6040))  # noqa: E731
        extra = _differences(table) + [2 * math.hypot(se(base), se(big))]
        assert disagreements(text, table, extra=extra) == [], text
    assert "it grew by 0.1166" in text  # the second: 0.16 - 0.0434


# --------------------------------------------------------------------------- lesson 03


def _warm_run(ttt, steps, warmup_steps, kind="linear", hr=0.752, diverged=False):
    from course_lib.train import TrainConfig
    from course_lib.train.ncf import TrainResult

    cfg = TrainConfig(global_batch_size=65536, base_lr=1e-3, warmup_steps=warmup_steps, warmup=kind)
    return TrainResult(config=cfg.to_dict(), dataset="d", data_source="", synthetic=True, device="cpu", world_size=1,
                       target_hr=0.75, time_to_target_s=ttt, steps_to_target=steps,
                       epochs_to_target=None if steps is None else steps / 76, epochs=1.5, steps=steps or 228,
                       samples=1, train_time_s=ttt or 20.0, eval_time_s=1.0, samples_per_s=9e5, phase_time_s={},
                       final_hr=hr, best_hr=hr, diverged=diverged, precision={"mode": "fp32"})


def test_lesson_03s_warmup_reading_quotes_the_sweep_table():
    """The warmup reading quotes the sweep table's time and steps cells (the time at one decimal), and the
    ratios of two cells of one column ("1.04x the steps and 1.14x the time"). Opposite results: the full run's
    (no difference in steps), a warmup that saved steps, a no-warmup run that missed the target."""
    from course_lib.lessons import l03_warmup as L03
    from course_lib.sweeps import sweep_table

    labels = ["no warmup", "linear warmup, 19 steps", "linear warmup, 38 steps", "linear warmup, 76 steps",
              "exponential warmup, 38 steps"]
    cols = ("rule", "time to target (s)", "steps to target", "epochs to target", "final HR@10", "best HR@10",
            "epochs run")
    full_run = [_warm_run(7.754, 100, 0, hr=0.757), _warm_run(7.58, 95, 19), _warm_run(6.778, 96, 38, hr=0.75),
                _warm_run(7.544, 108, 76), _warm_run(7.152, 108, 38, "exponential")]
    saved = [_warm_run(12.0, 160, 0)] + full_run[1:]
    missed = [_warm_run(None, None, 0, hr=0.70)] + full_run[1:]
    texts = []
    for results in (full_run, saved, missed):
        text = L03.warmup_reading(results, labels)
        texts.append(text)
        # 19, 38, 76: the warmup lengths in the labels (the "rule" column); 10: HR@10's name; s per step: time to
        # target / steps to target, two cells of one row (read r6a 03-1: the clock ranked the runs' pace)
        paces = [r.time_to_target_s / r.steps_to_target for r in results if r.steps_to_target]
        table = sweep_table(results, labels, columns=cols)
        assert disagreements(text, table, extra=(19, 38, 76, 10, *paces)) == [], text
    assert "no difference in steps to target" in texts[0] and "warmup took fewer steps" in texts[1]
    assert "Warmup is what made this batch reach the target at all" in texts[2]


# --------------------------------------------------------------------------- lesson 05


def test_lesson_05s_speedup_reading_quotes_the_speed_table():
    """The speed reading quotes the throughput table's ratios and ms-per-step phases; derived by stated rules: the
    tolerance (the repeats' spread), the forward+backward share of fp32's step and the bound it sets (1 / (1 -
    share)), the optimizer's share, the matmul share of the parameters given to it. Opposite results: bf16
    faster (the full run's numbers) and slower."""
    from test_mixed_precision import AMX_SERVER, _speed

    from course_lib.lessons import l05_mixed_precision as L05

    phases = {"fp32": {"sampling": 3.12e-4, "forward_backward": 14.19e-3, "optimizer": 1.496e-3},
              "bf16": {"sampling": 3.19e-4, "forward_backward": 9.3e-3, "optimizer": 1.542e-3}}
    for bf16 in (1.456e6, 0.9e6):
        speed = _speed({"fp32": 1.019e6, "bf16": bf16}, phases, repeats={"fp32": [1.019e6, 0.995e6],
                                                                       "bf16": [bf16, 0.97 * bf16]})
        text = L05.speedup_reading(speed, AMX_SERVER, "cpu", neumf_share=0.011, bert=("mini", 0.99))
        f32 = phases["fp32"]
        total = sum(f32.values())
        share, op_share = f32["forward_backward"] / total, f32["optimizer"] / total
        fb = [f32["forward_backward"] / p["forward_backward"] for p in phases.values()]
        extra = [speed.spread, 1 / (1 - share), share, op_share, 0.011, 0.99, 16, 7] + fb  # 7: lesson 07
        assert disagreements(text, L05.speed_table(speed, 16384, "cpu"), extra=extra) == [], text


def test_lesson_06s_allreduce_reading_quotes_the_sweep_table():
    """The latency/bandwidth reading quotes the sweep table's sizes and times (at three figures) and its busbw;
    derived by stated rules: the fit (alpha in us, its asymptote 2(p-1)/p / beta in GB/s, the size where
    n x beta = alpha in KiB), the median and the fastest-to-slowest ratio of the latency sizes, the largest busbw's
    share of the asymptote. Opposite results: a crooked small-message line (the review's) and a flat one that
    reaches bandwidth."""
    import statistics

    from test_data_parallel_study import _sweep

    sizes = [4**k for k in range(1, 14)]
    alpha, beta = 50e-6, 1 / 2e9
    flat = _sweep([(alpha + beta * n) * 1e6 for n in sizes], [1.0] * len(sizes), p=4, sizes=sizes)
    crooked = _sweep([554.7, 314.2, 875.0, 219.2], [30, 30, 30, 30], sizes=[4, 16, 256, 65536])
    for bench in (flat, crooked):
        a, b = bench.fit()
        p = bench.world_size
        rows = bench.rows
        lat = [r["time_s"] * 1e6 for r in rows if r["size_bytes"] * b <= a] or [r["time_s"] * 1e6 for r in rows]
        extra = [a * 1e6, statistics.median(lat), max(lat) / min(lat), len(lat), 2]
        if b > 0:  # a fit with a bandwidth term: its asymptote, the crossover size, the busbw's share of it
            asymptote = 2 * (p - 1) / p / b / 1e9
            extra += [asymptote, a / b / 1024, max(r["busbw_GBps"] for r in rows) / asymptote]
        extra += [r["time_s"] * 1e6 for r in rows] + [r["size_bytes"] for r in rows]
        assert disagreements(L06.allreduce_reading(bench), bench.table(), extra=extra) == [], \
            L06.allreduce_reading(bench)


def test_lesson_05s_lars_unscale_reading_quotes_its_table():
    """Numbers: the layers counted, the scale's exponent, the "on S x g / true" column and 1/S. Opposite results:
    ratios that match exactly and ratios that differ (a relative difference quoted)."""
    from course_lib.lessons import l05_mixed_precision as L05

    def rows(off):
        return [{"layer": f"l{i}", "||w||": 2.0 + i, "||g||": 1e-3 * (i + 1), "trust ratio, fp32": 1.0 + i,
                 "trust ratio, Precision.step": (1.0 + i) * (1 + off), "trust ratio on S x g": (1.0 + i) / 65536,
                 "on S x g / true": 1 / 65536} for i in range(3)]

    for off in (0.0, 1e-6):
        text = L05.lars_unscale_reading(rows(off), 2.0 ** 16)
        assert ("equal the fp32" in text) == (off == 0.0) and ("match to 1.0e-06" in text) == (off > 0)
        # 1.526 and 5, 1.0 and 6: "1.526e-05", "1.0e-06" as the checker splits them (it reads no exponents); 1030: apex#
        assert disagreements(text, L05.lars_unscale_table(rows(off), 2.0 ** 16),
                             extra=[3, 2, 16, 1e-6, 1030, 65536 / 2 ** 32 * 1e5, 5, 6]) == []


def test_lesson_06s_optimization_reading_quotes_the_scaling_table():
    """Lesson 06's epochs and time to target, read from the rows its scaling table is printed from (the table
    follows it in the same cell), for each outcome: no change within the interval, a change, a slower run, a
    ratio within one run's resolution."""
    from test_data_parallel_study import _record

    from course_lib.lessons.l06_data_parallel import ONE_RUN_RESOLUTION, optimization_reading, scaling_rows

    cases = [  # (strong, weak): the review's equal epochs and a slower 2 ranks; weak needing more; a tie
        ({1: _record(1, 4096, 13.23, 0.9992, 3e5), 2: _record(2, 4096, 22.12, 0.9992, 1.8e5)},
         {1: _record(1, 2048, 12.0, 0.9992, 2.5e5), 2: _record(2, 4096, 22.12, 0.9992, 1.8e5)}),
        ({w: _record(w, 65536, 100.0 / w ** 0.8, 1.5, 1e6 * w ** 0.8) for w in (1, 2, 4)},
         {w: _record(w, 8192 * w, 80.0, 1.5 + 0.5 * (w > 2), 1e6 * w ** 0.9) for w in (1, 2, 4)}),
        ({1: _record(1, 4096, 10.0, 1.0, 3e5), 2: _record(2, 4096, 9.5, 1.0, 3.2e5)}, {}),
    ]
    texts = set()
    for strong, weak in cases:
        rows = scaling_rows(strong, weak)
        text = optimization_reading(rows, eval_every_epochs=0.25)
        texts.add(text)
        # the evaluation interval the runs had (the resolution it states), one run's resolution (a constant of
        # the lesson), "one rank": the world size 1 of the table's ranks column
        extra = [0.25, ONE_RUN_RESOLUTION, 1]
        assert disagreements(text, L06.scaling_table(rows), extra=extra) == [], text
    assert len(texts) == len(cases)
