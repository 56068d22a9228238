"""#37 item 1: a reading quotes the very rows its table is printed from.

For every reading function of lessons 01-06 that sits under a table, each number the reading quotes
must be a cell of that table (at the reading's precision), or derived from its cells by the one rule
the readings use: the ratio of two cells of one column (a speedup, "x the first rung"), or a cell's
inverse ("x slower"). Numbers the reading takes from elsewhere are listed by the test (``extra``) with
the reason. Constructed inputs: no training, a fraction of a second.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from course_lib.lessons import l01_baseline as L01  # noqa: E402
from course_lib.train.ncf import TrainResult  # noqa: E402

NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?%?")


def _numbers(text: str) -> list[tuple[float, int]]:
    """Each number in ``text`` with its count of decimals (thousands separators dropped; "95%" is 0.95 at two
    decimals, as a table's "95%" cell parses)."""
    out = []
    for m in NUMBER.finditer(text):
        s = m.group().replace(",", "")
        pct = s.endswith("%")
        s = s.rstrip("%")
        d = len(s.split(".")[1]) if "." in s else 0
        out.append((float(s) / 100, d + 2) if pct else (float(s), d))
    return out


def _columns(table) -> list[list[float]]:
    cols = []
    for c in table.columns:
        vals = []
        for row in table.rows:
            v = row.get(c)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                vals.append(float(v))
            elif isinstance(v, str):
                vals += [x for x, _ in _numbers(v)]
        cols.append(vals)
    return cols


def disagreements(reading: str, table, extra=()) -> list[str]:
    """The numbers of ``reading`` that are neither a cell of ``table`` nor the ratio of two cells of one column."""
    cols = _columns(table)
    cells = [v for col in cols for v in col] + [x for x, _ in _numbers(table.title)] + list(extra)
    ratios = [a / b for col in cols for a in col for b in col if b]
    cells += [1 / v for v in cells if v]  # "1.25x slower" is a cell of 0.80x read the other way
    bad = []
    for n, d in _numbers(reading):
        tol = 0.5 * 10 ** -d + 1e-9
        if not any(abs(abs(v) - abs(n)) <= tol for v in cells + ratios):
            bad.append(f"{n:.{d}f}")
    return bad


# --------------------------------------------------------------------------- lesson 01


def test_the_phase_reading_quotes_the_phase_table():
    r = TrainResult(config={}, dataset="d", data_source="", synthetic=True, device="cpu", world_size=1,
                    target_hr=None, time_to_target_s=None, steps_to_target=None, epochs_to_target=None, epochs=1.0,
                    steps=10, samples=100, train_time_s=8.0, eval_time_s=2.0, samples_per_s=12.5,
                    phase_time_s={"sampling": 1.0, "forward_backward": 2.0, "optimizer": 5.0, "evaluation": 0.7})
    # the review's case: the table's share had evaluation in its denominator (55 %), the line not (58 %)
    assert disagreements(r.phase_reading(), r.table()) == []
    assert "62%" in str(r.table()) and "off the clock" in str(r.table())


def _pass_ratios(comp) -> list[float]:
    """The rule by which a loader verdict's resolution is derived (read r4a, #37 item 3): a "no measurable
    difference" states its pass-by-pass ratios (rung over rung, each pass against the same pass) and the 5 %
    threshold (0.05) they are read against."""
    out = [0.05]
    for a in comp["rows"]:
        for b in comp["rows"]:
            for key in ("load_sps", "train_sps"):
                out += [pa[key] / pb[key] for pa, pb in zip(a["passes"], b["passes"]) if pa.get(key) and pb.get(key)]
    return out


def test_the_loader_reading_quotes_the_loader_table():
    from test_loader_ladder import constructed_comparison

    for comp in (constructed_comparison(), constructed_comparison(second={1: 3.0}), constructed_comparison(cores=8)):
        # 2: the cores; 0.06 %: the first batch's share of an epoch (epoch_samples / loading rate)
        from test_reading_r10a import loader_derived  # r10a 01-H3: what loading alone accounts for

        assert disagreements(L01.loader_reading(comp), L01.comparison_table(comp),
                             extra=(1, 2, 0.0006, 6, *_pass_ratios(comp), *loader_derived(comp))) == []
    # a rung's best pass against another's: 4.31x in the table is 4.31x in the line, not a paired median
    comp = constructed_comparison()
    comp["rows"][-1]["passes"][0]["load_sps"] *= 0.9  # the passes move apart; the kept (better) pass stays
    text = L01.loader_reading(comp)
    assert f"({comp['rows'][-1]['load_sps'] / comp['rows'][0]['load_sps']:.2f}x)" in text


def test_the_optimizer_reading_and_its_speedups_quote_the_ms_columns():
    from test_step_study import _opt_comp

    comp = _opt_comp()
    table, text = L01.optimizer_table(comp), L01.optimizer_reading(comp)
    assert disagreements(text, table) == []
    # the speedup column is the ratio of the ms columns it sits next to (foreach 1.387 vs 1.448 ms: 1.04x)
    comp["rows"][1].update(optimizer_ms=1.387, step_ms=1.448, optimizer_ratios=[1.02, 1.01, 1.03],
                           step_ratios=[1.5, 1.5, 1.5])
    row = L01.optimizer_table(comp).rows[1]
    assert row["step speedup"] == f"{7.0 / 1.448:.2f}x"
    assert row["optimizer speedup"] == f"{5.0 / 1.387:.2f}x (within noise)"


def test_the_compile_reading_quotes_the_compile_table():
    from test_step_study import _compile_comp

    for comp in (_compile_comp(4.0, 3.0, [1.3, 1.35, 1.32]), _compile_comp(4.0, 3.8, [1.2, 0.9, 1.1]),
                 _compile_comp(4.0, 5.0, [0.8, 0.78, 0.81])):
        n = L01.payback_steps(comp["rows"][0])
        epochs = () if n is None else (n * 256 / comp["epoch_samples"],)  # payback in epochs: steps x batch / epoch
        assert disagreements(L01.compile_reading(comp), L01.compile_table(comp), extra=epochs) == []


def test_the_throughput_reading_quotes_its_table():
    from course_lib.tables import Table

    t = Table(["batch size", "steps", "samples/s", "ms/step"])
    for b, sps in ((256, 40_000), (1024, 120_000), (4096, 130_000)):
        t.add(**{"batch size": b, "steps": 10, "samples/s": sps, "ms/step": 1.0})
    assert disagreements(L01.throughput_reading(t), t, extra=(20,)) == []  # 20 %: the flattening threshold
    t.add(**{"batch size": 16384, "steps": 10, "samples/s": 110_000, "ms/step": 1.0})  # past the peak
    assert disagreements(L01.throughput_reading(t), t, extra=(20,)) == []


def test_the_checker_catches_a_reading_that_recomputes():
    from course_lib.tables import Table

    t = Table(["x"])
    t.add(x=1.387)
    t.add(x=1.448)
    assert disagreements("1.387 and 1.448: 1.04x", t) == []
    assert disagreements("1.387 and 1.448: 1.02x", t) == ["1.02"]


# --------------------------------------------------------------------------- lesson 04


def test_lesson_04s_reading_quotes_its_layer_tables():
    from test_layerwise import _measured

    from course_lib.lessons import l04_lars as L04

    for changes in ({"gmf_user.weight": 22.6, "gmf_item.weight": 22.9, "mlp.2.weight": 0.92, "out.weight": 0.93},
                    {"gmf_user.weight": 3.0, "gmf_item.weight": 22.6, "mlp.2.weight": 1.0, "out.weight": 8.0}):
        measured = _measured(changes)
        text = L04.reading(measured)
        # the spread between layers is the ratio of two cells of one column of layer_norms_table (x at B);
        # the frequency slopes are frequency_slope's, quoted with the batch they belong to
        slopes = [round(s, 2) for s in L04.frequency_slope(measured).values()]
        slopes += [round(e, 2) for e in L04.frequency_slope_errors(measured).values()]  # each slope's "±" (r10b)
        # each signal share: signal_share of a "fell by" cell (r10b)
        slopes += [L04.signal_share(r["change"], 131072 / 256) for r in L04.layer_scaling(measured)]
        table = L04.layer_scaling_table(measured)
        raw = {f"g{i}": [r["grad_to_weight"] for r in measured["layers"] if r["batch"] == b]
               for i, b in enumerate((256, 131072))}
        from course_lib.tables import Table

        spreads = Table(list(raw))
        for i in range(len(raw["g0"])):
            spreads.add(**{k: v[i] for k, v in raw.items()})
        cells = [v for t in (table, spreads) for col in _columns(t) for v in col]
        extra = slopes + cells + [max(a / b for a in col for b in col if b) for col in _columns(spreads)]
        assert disagreements(text, table, extra=extra + [0.5, 1, 512, 256, 131072]) == []


def test_a_loader_pass_that_measured_nothing_is_not_the_best_rung():
    """The smoke run of 2026-12-01: a pass whose 1-step run outlasted its 100-step run gave 4.9e12 samples/s
    (a floored difference) and became "the best DataLoader rung"; such a pass is None, the other pass counts."""
    from test_loader_ladder import constructed_comparison

    comp = constructed_comparison()
    rung = comp["rows"][4]
    rung["passes"][1]["train_sps"] = None
    rung["train_sps"] = rung["passes"][0]["train_sps"]
    text = L01.loader_reading(comp)
    from test_reading_r10a import loader_derived  # r10a 01-H3: what loading alone accounts for

    assert disagreements(text, L01.comparison_table(comp),
                         extra=(1, 2, 0.0006, 6, *_pass_ratios(comp), *loader_derived(comp))) == []
    both = constructed_comparison()
    both["rows"][4]["passes"] = [{**p, "train_sps": None} for p in both["rows"][4]["passes"]]
    both["rows"][4]["train_sps"] = float("nan")
    assert "not measured" in str(L01.comparison_table(both)) and "persistent" not in \
        L01.loader_reading(both).split("the device sampler")[0]


def test_the_accuracy_reading_quotes_the_accuracy_table():
    from test_step_study import _acc_rows

    rows = _acc_rows((0.62, 0.63), (0.57, 0.58))
    text = L01.accuracy_reading(rows, {"dense Adam": 2.0, "SparseAdam tables + Adam": 1.0})
    # derived, by the rules the docstring states: means and differences of the HR@10 column, the noise
    # (twice the binomial standard error over the users), the budget's seconds (steps x the paired ms)
    from course_lib.metrics import hr_standard_error

    hr = [r["hr"] for r in rows]
    dense, lazy = (0.62 + 0.63) / 2, (0.57 + 0.58) / 2
    extra = [dense, lazy, lazy - dense, 2 * hr_standard_error((dense + lazy) / 2, 6040), max(hr) - min(hr), 0.01,
             2.0, 1.0, 4834 * 2.0 / 1000, 4834 * 1.0 / 1000, 10, 2, 6040]
    assert disagreements(text, L01.accuracy_table(rows), extra=extra) == []


# --------------------------------------------------------------------------- lessons 02 and 06


def test_lesson_02s_regime_reading_quotes_the_regime_rows():
    from course_lib.lessons import l02_linear_scaling as L02
    from course_lib.tables import Table

    rows = [{"batch size": 256, "rule": "baseline", "steps to target": 19200, "resolution (steps)": 100},
            {"batch size": 1024, "rule": "sqrt", "steps to target": 4800, "resolution (steps)": 30},
            {"batch size": 4096, "rule": "sqrt", "steps to target": 2400, "resolution (steps)": 10},
            {"batch size": 16384, "rule": "sqrt", "steps to target": None}]
    regimes = L02.scaling_regimes(rows)
    table = Table(["batch size", "from batch", "steps to target", "slope"])
    for r in regimes:
        table.add(**{k: r[k] for k in table.columns})
    assert disagreements(L02.regime_reading(regimes), table) == []


def test_lesson_06s_scaling_reading_quotes_the_scaling_table():
    from test_scaling import rows_for

    from course_lib.lessons import l06_data_parallel as L06

    rows = rows_for(4e-3, 1e-7)
    fixed, per_sample = L06.step_time_fit(rows)
    # the fit (ms fixed, us per sample), the share of the top run's step it is, the suggested batch (a power of
    # two, and x the ranks), the compute share asked for, the quoted reference and its ratio to the suggestion
    step = rows[3]["global_batch"] / rows[3]["samples_per_s"]
    extra = [1e3 * fixed, 1e6 * per_sample, fixed / step, 160_000, 262_144, 262_144 * 8, 0.8, 131_072, 8, 2, 20, 4,
             160_000 / 131_072]  # the fit's batch (2 figures) and its ratio to the reference
    assert disagreements(L06.scaling_reading(rows), L06.scaling_table(rows), extra=extra) == []


# --------------------------------------------------------------------------- lesson 03


def _decided(warm_s, base_s, warm_loss=(0.611, 0.62), base_loss=(0.505, 0.51)):
    """Lesson 03's deciding comparison (``sweeps.Confirmed``) on constructed runs: two seeds each, a time of None
    a diverged run."""
    from types import SimpleNamespace

    from course_lib.sweeps import Confirmed

    def run(seed, t, loss1):
        return SimpleNamespace(config={"seed": seed}, time_to_target_s=t, steps_to_target=None if t is None else
                               round(14 * t), final_hr=0.75 if t else 0.1, diverged=t is None,
                               curve={"loss": [0.693, loss1]})

    runs = [[run(s, t, x) for s, (t, x) in enumerate(zip(ts, losses))]
            for ts, losses in ((warm_s, warm_loss), (base_s, base_loss))]
    return Confirmed(["linear warmup, 38 steps", "no warmup"], runs, 0, "")


def test_lesson_03s_takeaway_quotes_the_deciding_table():
    """#37 item 1: the takeaway (notebook 03, printed over the deciding comparison's table) quoted the loss at
    the first evaluation, which that table did not show ("0.505 without warmup, 0.611 with it", full run
    2026-12-01): lesson 03's deciding_table has the column. Opposite results: warmup faster, slower, and the run
    without it diverging, each a different takeaway."""
    from course_lib.lessons import l03_warmup as L03

    rung = "linear warmup, 38 steps"
    # the quoted paper (Goyal et al. 2017: a 5-epoch warmup, ResNet-50, batch 8192)
    quoted = [2017, 5, 50, 8192]
    texts = set()
    for decide in (_decided([6.778, 7.489], [7.754, 6.616]),  # the review's run: the seeds disagree
                   _decided([6.0, 6.1], [9.0, 9.2]),  # warmup faster beyond the seeds' range
                   _decided([9.0, 9.2], [6.0, 6.1]),  # warmup slower
                   _decided([6.0, 6.1], [None, None])):  # no warmup diverged on both seeds
        text = L03.takeaway(decide, rung)
        texts.add(text.split(" (")[0])
        table = L03.deciding_table(decide, rung)
        times = [[r.time_to_target_s for r in decide.runs_of(label)] for label in decide.labels]
        reached = [[t for t in ts if t is not None] for ts in times]
        # the verdict's means over the seeds and its seed range (the largest max - min of one setting's times),
        # and "diverged on k of n seeds" / "reached the target on k of n seeds": counts of the table's rows
        extra = ([sum(ts) / len(ts) for ts in reached if ts] + [max(ts) - min(ts) for ts in reached if ts]
                 + [len(ts) for ts in reached] + [len(ts) for ts in times] + quoted)
        assert disagreements(text, table, extra=extra) == [], text
    assert len(texts) == 4  # each verdict its own takeaway
    level = L03.takeaway(_decided([6.778, 7.489], [7.754, 6.616]), rung)
    # every seed's, lowest to highest: cells of the new column (read r9a 03-C1: the lowest alone went unsaid)
    assert "0.505 to 0.510 over 2 seeds without warmup, 0.611 to 0.620 over 2 seeds with it" in level
    assert "no measurable difference (no measurable difference" not in level  # the verdict is not said twice
    assert "loss at the first evaluation" in L03.deciding_table(_decided([6.778, 7.489], [7.754, 6.616]), rung).columns
    # the sixth read: "because the scaled lr blew up the first steps", "(2017, quoted)", is not what the paper says
    assert "blew up the first steps" not in level and "2017, quoted" not in level
    assert "the linear scaling rule broke down in the first epochs" in level


# --------------------------------------------------------------------------- lesson 06: the ring and the timeline


def test_lesson_06s_timeline_reading_quotes_the_timeline_table():
    """#37 item 1: notebook 06 printed the timeline reading under the bucket benchmark's table, whose step column
    is the median over repeats of the slowest rank, while the reading reads the one step drawn (rank 0's median
    step): "pending 20.5 ms of a 24.7 ms step" over a table saying 20.09 and 26.71 (full run 2026-12-01). The
    reading now has its own table (timeline_table), printed under the figure. Opposite results: every
    all-reduce after backward (nothing hidden) against one under it."""
    from test_data_parallel_study import _result, _row, cpu_tier

    from course_lib.lessons import l06_data_parallel as L06

    tier = cpu_tier()
    text = L06.timeline_reading(tier)
    assert disagreements(text, L06.timeline_table(tier)) == [], text
    assert disagreements(text, tier.table()) != []  # the bucket table holds other numbers: hence a table of its own
    assert "hid the largest share" in text
    after = _row("one all-reduce after backward", 4.0, False, "none", [6.0, 6.1])
    after["timeline"] = {"backward_start_ms": 1.0, "backward_end_ms": 5.0, "step_ms": 8.0,
                         "allreduces_ms": [[5.2, 7.0, 4e6]]}  # ready only once backward returned
    waited = _result(2, "gloo", [after])
    text = L06.timeline_reading(waited)
    assert disagreements(text, L06.timeline_table(waited)) == [], text
    assert "None of the all-reduces lay under backward's compute" in text and "hid the largest" not in text
    hidden = _row("DDP buckets", 1.0, True, "none", [5.0, 5.1], n=2)  # [2, 4.5], [3, 5.5]: the last ready at 3
    text = L06.timeline_reading(_result(2, "gloo", [hidden, after]))
    assert "1 MiB buckets hid the largest share (29%)" in text
    assert disagreements(text, L06.timeline_table(_result(2, "gloo", [hidden, after]))) == [], text


def test_lesson_06s_ring_reading_quotes_the_schedule_it_draws():
    """notebook 06 prints the ring reading under plot_ring_steps' figure, not a table: the figure is the schedule
    round by round (a panel per round, "reduce-scatter k/p-1"), so the table here is that schedule, a row per
    round. Opposite input: one rank, no rounds."""
    from course_lib.comm.collectives import ring_allreduce_schedule
    from course_lib.tables import Table

    for p in (2, 3, 4, 8):
        n = 1000 * p  # the reading's tensor (ring_reading's default), named in the table's title
        s = ring_allreduce_schedule(p, n)
        table = Table(["round", "phase", "messages", "elements each rank sends"],
                      title=f"ring all-reduce on {p} ranks, a tensor of {n:,} elements")
        for k, rnd in enumerate(s.rounds):
            table.add(round=k + 1, phase="reduce-scatter" if k < p - 1 else "all-gather", messages=len(rnd),
                      **{"elements each rank sends": max(t.hi - t.lo for t in rnd)})
        sent = max(s.elements_sent_by(r) for r in range(p))
        # sums of the messages and elements columns, their share of the tensor, and the formula 2(p-1)/p's
        # constants (2 and 1; "below 2": its limit); the last round's number is the count of rounds
        extra = [sum(r["messages"] for r in table.rows), sent, sent / n, 2, 1]
        assert disagreements(_ring_reading(p), table, extra=extra) == [], _ring_reading(p)
    assert disagreements(_ring_reading(1), Table(["round"])) == []  # "one rank": no numbers to quote


def _ring_reading(p):
    from course_lib.lessons import l06_data_parallel as L06

    return L06.ring_reading(p)


# --------------------------------------------------------------------------- lesson 05


def test_lesson_05s_activation_reading_quotes_the_activation_table():
    """#37 item 1: the activation reading (notebook 05, under the two histograms) quoted ten measured and
    predicted fractions that no table showed (the table above it, fp16_underflow_table, gives the parameter
    gradients' prediction at one decimal: "4.0%" against the reading's "4.02%"); activation_table, printed
    under it, holds them. Opposite results: a histogram proxy that overstates, understates, and matches."""
    import numpy as np

    from course_lib.lessons import l05_mixed_precision as MP

    rng = np.random.default_rng(0)
    verdicts = set()
    for par_zero, act_center in ((0.0402, -19.4), (0.0001, -27.0), (None, -19.4)):
        act = rng.normal(act_center, 2.0, 4000)
        mags = {"log2": rng.normal(-19.3, 3.0, 4000)}
        mags["zero_in_fp16"] = par_zero if par_zero is not None else MP.fp16_fractions(act, 1.0)["zero"]
        grads = {"scales": (1.0, 2.0 ** 16), "batches": 2, "batch_size": 16384, "dtypes": {"out": "float16"},
                 "count": {"activation": 1_546_587, "parameter": 3_214_521}, "log2": act,
                 "zero": {1.0: {"activation": 0.01864, "parameter": 0.00693},
                          2.0 ** 16: {"activation": 0.00002, "parameter": 0.00001}},
                 "underflow": {1.0: {"activation": 0.01863, "parameter": 0.00692},
                               2.0 ** 16: {"activation": 0.0, "parameter": 0.0}}}
        text = MP.activation_reading(mags, grads)
        verdicts.add(text.rsplit("here it ", 1)[1])
        old = MP.fp16_underflow_table({**mags, "count": 3_214_521, "zero_in_fp16_scaled": {},
                                       "overflow_in_fp16_scaled": {}})
        assert disagreements(text, old) != []  # what the learner had to compare it with before
        assert disagreements(text, MP.activation_table(mags, grads)) == [], text  # 2, 16384, 2^16: its title
    assert verdicts == {"overstates what fp16 would lose.", "understates what fp16 would lose.",
                        "predicts about the same loss as the activation gradients'."}


def test_lesson_05s_loss_scale_reading_quotes_its_figure():
    """notebook 05 prints the loss-scale reading under plot_loss_scale's figure, titled "fp16 loss scale; {skipped}
    skipped steps in {steps}", whose curve runs from the start scale to the end one (log2 axis): that title and
    those two points are the table here. Opposite records: nothing dynamic, halved, grown, both, static, none."""
    import math

    from course_lib.lessons import l05_mixed_precision as MP
    from course_lib.tables import Table

    records = [(0, 65536.0, 1200, 2000, "Nothing dynamic"), (3, 2.0 ** 15, 5000, 2000, "halved it"),
               (0, 2.0 ** 17, 2248, 2000, "doubled it"), (2, 2.0 ** 14, 900, 2000, "never doubled"),
               (1, 1024.0, 10, None, "A static scale")]
    for skipped, final, steps, interval, said in records:
        state = {"mode": "fp16", "loss_scaling": "static" if interval is None else "dynamic", "loss_scale": final,
                 "skipped_steps": skipped, "growth_interval": interval}
        start = final if interval is None else 65536.0
        text = MP.loss_scale_reading(state, steps, start)
        assert said in text, text
        table = Table(["optimizer step", "loss scale"], title=f"fp16 loss scale; {skipped} skipped steps in {steps}")
        table.add(**{"optimizer step": 0, "loss scale": f"2^{math.log2(start):.0f}"})
        table.add(**{"optimizer step": steps, "loss scale": f"2^{math.log2(final):.0f}"})
        # the GradScaler's growth_interval (a setting in the run's record, not drawn), and the doublings the
        # reading infers by its stated rule: log2(end / start) + the halvings (one per skipped step)
        extra = [] if interval is None else [interval, round(math.log2(final / start)) + skipped]
        assert disagreements(text, table, extra=extra) == [], text
    none = MP.loss_scale_reading({"mode": "fp16", "loss_scaling": "none"}, 5, 1.0)
    assert disagreements(none, Table(["x"]), extra=[1]) == []  # "the scale is 1": no scaling multiplies by 1
