"""#37 items 1 and 2 for lessons 09, 10 and 11, the hardware probe's bands and lesson 08's parameter server.

Item 1: each number a reading quotes is a cell of the table printed above it in its notebook (or, for the probe's
bands, beside it in the same row), or derived from its cells by the rule named at each ``extra``
(:func:`test_reading_agreement.disagreements`). Item 2: readings fed opposite results, where no other test does.
Constructed inputs only: no training, no launch.
"""

import math
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

from course_lib.lessons import l09_performance_model as L09  # noqa: E402
from course_lib.lessons import l10_model_parallelism as L10  # noqa: E402
from course_lib.lessons import l11_batch_size_science as L11  # noqa: E402
from course_lib.parallel import pipeline  # noqa: E402
from course_lib.perf import paleo as P  # noqa: E402
from course_lib.tables import Table  # noqa: E402
from test_reading_agreement import _columns, _numbers, disagreements  # noqa: E402


def _disagree(reading, first, *more, extra=()):
    """:func:`disagreements` over several tables printed together: cells (and the ratios of a column) of the
    first, cells of the others, and the stated ``extra``."""
    cells = [v for t in more for col in _columns(t) for v in col]
    return disagreements(reading, first, extra=[*cells, *extra])


# --------------------------------------------------------------------------- lesson 09


def _l09_rows(errors_by_rank):
    """Rows of :func:`L09.predictions` (the fields the table and the verdict read): measured 10 ms each."""
    rows = []
    for (p, batch), err in errors_by_rank.items():
        measured = 10.0 * batch / 256
        pred = measured * (1 + err)
        rows.append({"model": "neumf", "batch": batch, "ranks": p, "predicted (ms)": pred, "measured (ms)": measured,
                     "error": (pred - measured) / measured,
                     "prediction": SimpleNamespace(parts=lambda: {"compute": 1.0, "overhead": 0.5})})
    return rows


def test_lesson09s_verdict_quotes_the_comparison_table():
    """Cell 17 prints the verdict under cell 16's comparison table (its error column, at the same 0 decimals)."""
    tiny = L09.TINY_BATCH
    rows = _l09_rows({(1, 256): 0.10, (1, 1024): -0.30, (2, 512): 0.45, (2, 2048): 0.20, (1, tiny): -0.02})
    table = L09.comparison_table(rows)
    said = L09.verdict(rows, goal=0.25)
    held = [r for r in rows if not L09.calibration_step(r)]
    printed = {id(r): abs(float(t["error"].rstrip("%"))) / 100 for r, t in zip(rows, table.rows)}  # as printed

    def median(p=None):  # the median of the |error| cells, as printed, of the steps counted (on p ranks)
        return statistics.median(printed[id(r)] for r in held if p in (None, r["ranks"]))
    derived = [len(held), len(rows) - len(held), 0.25,  # the steps counted, the calibration ones left out; the goal
               median(), median(1), median(2),  # the medians: over all the steps counted, and by ranks
               sum(r["error"] > 0 for r in held), sum(r["error"] <= 0 for r in held)]  # over / under, counted
    assert disagreements(said, table, extra=derived) == [], said


def test_lesson09s_verdict_follows_the_errors():
    """Opposite results: within the goal and outside it; more over- than under-predicted and the reverse; the
    2-rank steps worse (the shared cores named) and better (not named)."""
    good = L09.verdict(_l09_rows({(1, 256): 0.05, (1, 1024): 0.10, (2, 512): -0.15}), goal=0.25)
    bad = L09.verdict(_l09_rows({(1, 256): -0.50, (1, 1024): -0.40, (2, 512): 0.10}), goal=0.25)
    assert "10% (within the course's goal of 25%)" in good and "(outside the course's goal of 25%)" in bad
    assert "over-predicted 2 of 3 steps and under-predicted 1" in good
    assert "over-predicted 1 of 3 steps and under-predicted 2" in bad
    assert "parts priced from other measurements" in good and "parts priced from other measurements" not in bad
    assert "sharing the cores" not in good + bad  # #37 (read r6c): a cause lesson 09 does not measure
    assert "Largest miss: neumf at batch 512 on 2 rank(s)" in good and "Largest miss: neumf at batch 256 on 1" in bad


def test_lesson09s_by_ranks_line_names_no_unmeasured_cause():
    """#37 (sixth full run, read r6c): cell 18's errors, 1 rank 13% (6, 12, 13, 15, 39) against 2 ranks 17% (4, 14,
    17, 23, 24), read "and two processes sharing the cores", which no cell of lesson 09 measures; the opposite
    (2 ranks the better) names no part at all."""
    run = {(1, 1024): 0.13, (2, 1024): -0.14, (1, 4096): -0.12, (2, 4096): -0.23, (1, 16384): -0.39,
           (2, 16384): -0.24, (1, 24): -0.06, (2, 64): 0.17, (1, 32): -0.15, (2, 128): 0.04}
    said = L09.verdict(_l09_rows(run), goal=0.25)
    line = said.splitlines()[-1]
    assert line.startswith("Median error by ranks: 1: 13%, 2: 17% -- the 2-rank predictions add parts priced"), line
    assert "cores" not in said
    swapped = L09.verdict(_l09_rows({(3 - p, b): e for (p, b), e in run.items()}), goal=0.25)
    assert swapped.splitlines()[-1] == "Median error by ranks: 1: 17%, 2: 13%"


SCHEMES = P.JSON_SCHEMES + ("ring_all_reduce",)  # what study.case computes: Paleo's three and the ring


def _paleo_rows(speedups, comm, compute=100.0, batch=8, weak=False):
    return [{"workers": w, "batch_per_worker": batch, "forward_ms": compute / 3, "backward_ms": 2 * compute / 3,
             "update_ms": 0.0, "compute_ms": compute, "comm_ms": {s: c * (1 - 0.2 * i) for i, s in enumerate(SCHEMES)},
             "speedup": {s: v * (1 + 0.1 * i) for i, s in enumerate(SCHEMES)}}
            for w, v, c in zip([2**i for i in range(len(speedups))] if not weak else [1, 2, 4, 8, 16, 50, 100],
                               speedups, comm)]


def test_lesson09s_alexnet_reading_quotes_the_scaling_table():
    """Cell 26: the reading under AlexNet's scaling table (each scheme's speedup and ms columns). The full run of
    2026-12-01 read "ring_all_reduce: best 14.5x at 128 workers" under a table of Paleo's three schemes only: the
    table now shows every scheme the reading reads (``study.READ_SCHEMES``), as the notebook displays it."""
    import json

    nb = json.loads((Path(__file__).parent.parent / "notebooks" / "09_performance_model.ipynb").read_text())
    cell = next("".join(c["source"]) for c in nb["cells"] if "study.alexnet_reading(alex)" in "".join(c["source"]))
    assert "schemes=study.READ_SCHEMES" in cell and set(SCHEMES) == set(L09.READ_SCHEMES)
    for speedups, comm in (([1, 1.8, 3.0, 4.5, 5.0, 5.1], [0, 10, 50, 150, 300, 400]),
                           ([1, 2, 4, 8, 16, 32], [0] * 6)):
        rows = _paleo_rows(speedups, comm)
        table = L09.paleo_scaling_table(rows, schemes=L09.READ_SCHEMES)
        said = L09.alexnet_reading(rows)
        # the talk's "about 5x at 32 workers" (quoted literature, TALK) and the 25 % it is read within
        assert disagreements(said, table, extra=(L09.TALK["alexnet_butterfly_speedup_at_32"], 0.25)) == [], said
        assert "does not hold" in said if speedups[-1] == 32 else " holds" in said


def test_lesson09s_inception_reading_quotes_the_scaling_table():
    """Cell 32: the reading under Inception's scaling table (the speedups of its last row)."""
    quoted = L09.TALK["tf_inception_speedup_100_gpus"]  # the TensorFlow team's speedup (quoted literature)
    said = []
    for last, one_to_all in ((quoted + 30, None), (quoted / 4, None), (quoted + 30, 16.25)):
        rows = _paleo_rows([1, 2, 4, 8, 16, 40, last], [0] * 7, weak=True)
        if one_to_all:  # the full run's: one-to-all below the quoted speedup, the all-reduces above it
            rows[-1]["speedup"]["one_to_all"] = one_to_all
        said.append(L09.inception_reading(rows))
        assert disagreements(said[-1], L09.paleo_scaling_table(rows), extra=(quoted,)) == [], said[-1]
    assert "every scheme predicts more" in said[0] and "less" in said[1] and "lies between one_to_all" in said[2]


def test_lesson09s_weak_reading_follows_the_rows():
    """Cell 30 prints it under a figure (no table): opposite rows, near-linear and flat, give their own
    efficiency, and the global batch follows the rows."""
    linear = L09.weak_reading(_paleo_rows([1, 2, 4, 8, 15.2], [0] * 5, batch=32))
    flat = L09.weak_reading(_paleo_rows([1, 1.1, 1.2, 1.2, 0.32], [0] * 5, batch=16))
    b = "butterfly_all_reduce"
    linear_x = 15.2 * (1 + 0.1 * P.JSON_SCHEMES.index(b))
    assert f"{linear_x:.1f}x the throughput on 16 workers ({linear_x / 16:.0%} of linear)" in linear
    assert "at a global batch of 512 -- 16 times the one-worker batch of 32" in linear
    flat_x = 0.32 * (1 + 0.1 * P.JSON_SCHEMES.index(b))
    assert f"({flat_x / 16:.0%} of linear)" in flat and "global batch of 256" in flat
    # the fourth read: the talk's "pretty close to linear" beside the model's 7 %, untested; now read
    assert "this model's is too" in linear and "this model's is not (below 80% of linear)" in flat
    assert f"give {L09.paleo_own_weak_speedup(16, 32):.1f}x" in linear
    assert "this model near linear, Paleo's not" in linear
    assert "neither is near linear" in flat


def test_lesson09s_weak_reading_sets_the_talks_words_beside_paleos_own_numbers():
    """The full run: 9.0x on 128 workers at 32 per worker (7 % of linear); Paleo's own compute at 32 per worker
    (its 64-worker strong row, 55.6 ms) and butterfly all-reduce at 128 (563.4 ms) give 128 x 55.6 / 619.0."""
    rows = _paleo_rows([1, 2, 4, 8, 16, 32, 64, 128], [0] * 8, batch=32)
    own = L09.paleo_own_weak_speedup(128, 32)
    assert math.isclose(own, 128 * 55.6 / (55.6 + 563.4))
    assert L09.paleo_own_weak_speedup(128, 48) is None and L09.paleo_own_weak_speedup(3, 32) is None
    b = "butterfly_all_reduce"
    rows[-1]["speedup"][b] = 9.0
    said = L09.weak_reading(rows)
    assert f"give {own:.1f}x ({own / 128:.0%} of linear): neither is near linear" in said
    rows[-1]["speedup"][b] = 120.0  # opposite: this model near linear, Paleo's own not
    assert "this model near linear, Paleo's not" in L09.weak_reading(rows)


# --------------------------------------------------------------------------- the probe's bands (lessons 00, 09)


def test_the_band_verdicts_quote_the_probe_table_row_they_sit_in():
    """The verdict is the last column of the probe's table (lesson 09 cell 5): the numbers it
    quotes are the row's fraction and the band's lower edge (peaks.BANDS, quoted from nccl-tests and vendor
    figures, named in the band's text)."""
    from course_lib.perf import peaks
    from course_lib.perf.probe import DeviceCurves, HardwareProbe

    curves = DeviceCurves("cuda", [(2e9, 500e12), (2e12, 800e12)], [(1e6, 1e12), (1e9, 1.2e12)], 5e-6)
    probe = HardwareProbe("NVIDIA H100 80GB HBM3", curves, {"bf16": (800e12, 8192), "fp32": (20e12, 8192)},
                          h2d_Bps=20e9)
    table = probe.table()
    plain = Table([c for c in table.columns if c != "verdict"], title=table.title)
    for row in table.rows:
        plain.add(**{c: row[c] for c in plain.columns})
    # each band's lower edge, and the figures of the sources it quotes inline (e.g. "~70-90 % ... on A100/H100")
    bands = [x for low, where, causes in peaks.BANDS.values() for x in (low, *(n for n, _ in _numbers(where + causes)))]
    said = [row["verdict"] for row in table.rows]
    assert any(v.startswith("check this node") for v in said) and any(v.startswith("within") for v in said)
    for v in said:
        assert disagreements(v, plain, extra=bands) == [], v


# --------------------------------------------------------------------------- lesson 08's parameter server


def test_the_server_reading_quotes_the_server_table():
    """Lesson 08 cell 33 prints the reading with the server table displayed right under it."""
    from course_lib.parallel import staleness

    def rec(mode, straggler, ups, loss, ttt):
        return {"label": mode + (", rank 2 +20 ms" if straggler else ""), "mode": mode,
                "straggler_rank": 2 if straggler else 0, "delay_s": 0.02, "updates": int(ups * 2),
                "updates_per_s": ups, "gradients_from": {1: 10, 2: 3 if straggler else 10},
                "max_staleness": 37 if mode == "async" else 0, "mean_staleness": 2.0 if mode == "async" else 0,
                "final_loss": loss, "final_accuracy": 0.9, "time_to_target_s": ttt}
    for async_ttt in (0.07198, 2.0, None):
        records = [rec("sync", False, 524.7, 1.225, 0.1081), rec("async", False, 1127, 1.709, 0.0631),
                   rec("sync", True, 43.88, 0.930, 1.136), rec("async", True, 1122, 1.727, async_ttt)]
        said = staleness.server_reading(records)
        # +20 ms: the straggler's delay (the run's label, "rank 2 +20 ms", a cell as text: 20 and 2 parse from it)
        assert disagreements(said, staleness.server_table(records), extra=(20,)) == [], said


def test_the_server_reading_follows_the_asynchronous_pace_with_the_straggler():
    """Opposite results for the straggler's clause (the other test of it varies the time to target): asynchronous
    updates faster with the straggler, about as fast, and slowed down with the others."""
    from course_lib.parallel import staleness

    def records(async_straggler_ups):
        def rec(mode, straggler, ups):
            return {"mode": mode, "straggler_rank": 2 if straggler else 0, "delay_s": 0.02, "updates_per_s": ups,
                    "max_staleness": 9 if mode == "async" else 0, "mean_staleness": 2.0 if mode == "async" else 0,
                    "final_loss": 1.0, "time_to_target_s": None}
        return [rec("sync", False, 500), rec("async", False, 1000), rec("sync", True, 46),
                rec("async", True, async_straggler_ups)]
    assert "1000 to 1300/s, even faster: nobody waits" in staleness.server_reading(records(1300))
    assert "1000 to 900/s: nobody waits for the straggler" in staleness.server_reading(records(900))
    slowed = staleness.server_reading(records(400))
    assert "1000 to 400/s (on this machine the others slowed down too)" in slowed and "nobody waits" not in slowed
    assert "synchronous rounds fell from 500 to 46 updates/s (10.9x slower" in slowed
    assert "not enough runs" in staleness.server_reading(records(400)[:3])


# --------------------------------------------------------------------------- lesson 10


def _bubble(p, m, measured, replayed, cpu=1.0, forward_ms=10.0, schedule="GPipe"):
    return {"schedule": schedule, "p": p, "m": m, "predicted": pipeline.bubble_fraction(p, m), "measured": measured,
            "replayed": replayed, "cpu_share": cpu, "forward_ms": forward_ms, "runs": 5, "grad_diff": 0.0,
            "native_grad_diff": 0.0}


def test_lesson10s_bubble_reading_quotes_the_bubble_table():
    """Cell 13: the reading under the bubble table, at its rounding."""
    for rows in ([_bubble(2, 8, 0.15, 0.12), _bubble(2, 1, 0.52, 0.5)], [_bubble(2, 4, 0.40, 0.30, cpu=0.5)],
                 [_bubble(2, 4, 0.40, 0.15, forward_ms=0.1)], [_bubble(2, 4, 0.40, 0.15, cpu=None)]):
        said = L10.bubble_reading(rows)
        r = max(rows, key=lambda x: abs(x["measured"] - x["predicted"]))
        rel = (r["measured"] - r["predicted"]) / r["predicted"]  # the gap relative to the formula: cells' ratio - 1
        assert disagreements(said, L10.bubble_table(rows), extra=(L10.BUBBLE_GOAL_POINTS, rel)) == [], said


def _async(p, steady, mode="stashed", n=12):
    return {"p": p, "mode": mode, "n": n, "staleness": [p - 1 - s for s in range(p)], "held": [p - s for s in range(p)],
            "bubble_formula": pipeline.bubble_fraction(p, n), "bubble_measured": pipeline.bubble_fraction(p, n) + 0.02,
            "steady_simulated": 0.0, "steady_measured": steady, "forward_ms": 1.25, "replay_diff": 1e-8}


def test_lesson10s_async_bubble_reading_quotes_the_async_table():
    """Cell 22: the reading under the asynchronous pipeline's table."""
    for steady in (0.03, 0.6):
        rows = [_async(2, 0.01), _async(2, 0.01, "not stashed"), _async(4, steady), _async(4, 0.02, "not stashed")]
        said = L10.async_bubble_reading(rows)
        gap = 100 * steady  # the steady state's gap from none, in points: its cell x 100
        # the goal; the gap; "the 4 processes" of the launch and the cores they share (where they outnumber them)
        extra = (L10.BUBBLE_GOAL_POINTS, gap, 4, L10.usable_cores())
        assert disagreements(said, L10.async_table(rows), extra=extra) == [], said


def _memory_outs(fsdp_step, ddp_step):
    o = {"n_params": 1000, "largest_unit_bytes": 400, "ddp_moved_from_init": 1.0}
    for name, (params, state, sent, step) in {"DDP": (4000, 8000, 8000, ddp_step), "ZeRO-1": (4000, 4000, 8000, 0.05),
                                              "FSDP2": (2000, 4000, 12000, fsdp_step)}.items():
        o[name] = {"parameters": params, "gradients": params, "optimizer_state": state, "sent_bytes": sent,
                   "step_s": step, "max_diff_from_ddp": 0.0}
    return [o, dict(o)]  # two ranks alike


def _sharded_predicted(steps):
    return {name: SimpleNamespace(state_bytes=16000, sent_bytes=8000, step_s=s) for name, s in steps.items()}


def test_lesson10s_fsdp_step_reading_quotes_the_memory_table():
    """Cell 28: the reading under the memory table (its measured and predicted step columns)."""
    for fsdp, ddp, pf, pd in ((0.076, 0.040, 0.024, 0.024), (0.076, 0.040, 0.060, 0.030),
                              (0.065, 0.030, 0.021, 0.022)):
        outs = _memory_outs(fsdp, ddp)
        table = L10.memory_table(outs, _sharded_predicted({"DDP": pd, "ZeRO-1": pd, "FSDP2": pf}))
        said = L10.fsdp_step_reading(table)
        # the gaps FSDP2 - DDP, measured and predicted: differences of two cells of one column
        gaps = (1e3 * (fsdp - ddp), 1e3 * (pf - pd))
        assert disagreements(said, table, extra=gaps) == [], said
    # the check of r6c's fix: 23.8 against 24.6 ms printed "(-0.8 ms)", then "the model puts FSDP2 1 ms faster"
    table = L10.memory_table(_memory_outs(0.0703, 0.0466), _sharded_predicted({"DDP": 0.0246, "ZeRO-1": 0.0246,
                                                                               "FSDP2": 0.0238}))
    said = L10.fsdp_step_reading(table)
    assert "(-0.8 ms)" in said and "the model puts FSDP2 0.8 ms faster than DDP" in said, said


def _model_case(fsdp_step=0.0654, fsdp_pred=0.0275):
    """The full run of 2026-12-01 in small: FSDP2 measured 65 ms and predicted 28 in the memory table, while the
    reading said -58% (from the unrounded 65.4 and 27.5 ms)."""
    outs = _memory_outs(fsdp_step, 0.0391)
    o = outs[0]
    predicted = {name: SimpleNamespace(state_bytes=sum(o[name][k] for k in ("parameters", "gradients",
                                                                            "optimizer_state")),
                                       sent_bytes=o[name]["sent_bytes"], step_s=s)
                 for name, s in {"DDP": 0.0251, "ZeRO-1": 0.0242, "FSDP2": fsdp_pred}.items()}
    return outs, predicted


def test_lesson10s_model_reading_quotes_the_memory_table():
    """The model's reading (in cell 44's verdict) sets the memory table's predicted step against its measured one:
    each error is ``predicted step (ms) / step (ms) - 1`` of one row of that table (cell 28), at its rounding."""
    for fsdp, pred in ((0.0654, 0.0275), (0.0654, 0.0700), (0.00213, 0.00051)):
        outs, predicted = _model_case(fsdp, pred)
        table = L10.memory_table(outs, predicted)
        said = L10.model_reading(outs, predicted)
        errors = [float(r["predicted step (ms)"]) / float(r["step (ms)"]) - 1 for r in table.rows]
        # read f12h 10-H1: the ms not predicted, step - predicted step of one row
        missed = [float(r["step (ms)"]) - float(r["predicted step (ms)"]) for r in table.rows]
        assert disagreements(said, table, extra=(*errors, *missed, 9)) == [], said  # 9: "Lesson 09's model"


def _node_pred(scheme, step_s, memory, *, w=8, sent=0.0, exposed=0.0):
    from course_lib.perf.schemes import SchemePrediction

    return SchemePrediction(scheme, w, 8 * w, 8, step_s - exposed, exposed, exposed, 0.0, memory, 0.0, 0.0, 0.0, sent)


def test_lesson10s_node_reading_quotes_the_node_table():
    """Cell 40: the reading under cell 38's node table (its step and exposed-communication columns)."""
    from course_lib.perf.schemes import SAME_SPEED

    fast = {"BERT-x": [_node_pred("DDP", 0.10, 30e9), _node_pred("FSDP", 0.095, 20e9),
                       _node_pred("tensor", 0.30, 5e9, sent=2**30, exposed=0.15), _node_pred("pipeline", 0.2, 90e9)]}
    slow = {"BERT-x": [_node_pred("DDP", 0.12, 30e9), _node_pred("FSDP", 0.11, 20e9), _node_pred("tensor", 1.2, 5e9),
                       _node_pred("pipeline", 0.25, 90e9)]}
    by_link = {"NVLink": fast, "InfiniBand": slow}
    said = L10.node_reading(by_link, 80e9)
    # 80 GB: the device's memory (the notebook's NODE_GPU_MEMORY_GB); SAME_SPEED: "as fast" within 10 %; tensor
    # parallelism's excess over the choice (200 ms), and its part not on the link (50 ms): differences of cells
    # 0.10 / 0.095: the slowest "as fast" step over the fastest, the ratio the 10 % rule compared
    extra = (80, SAME_SPEED, 200, 50, 8, 0.10 / 0.095)  # 8: the pipeline's m = 8, part of the scheme's name
    assert disagreements(said, L10.node_table(by_link), extra=extra) == [], said


def test_lesson10s_node_reading_follows_the_predictions():
    """Opposite results: tensor parallelism the fastest (then no cost is read), and every scheme fitting."""
    fast = {"BERT-x": [_node_pred("DDP", 0.30, 30e9), _node_pred("tensor", 0.10, 5e9, sent=2**30, exposed=0.01)]}
    said = L10.node_reading({"NVLink": fast}, 80e9)
    assert said.startswith("BERT-x: on NVLink, tensor parallel x8 (100 ms per step") and "slower" not in said
    assert said.endswith("Every scheme fits in 80 GB per device.")


def _tensor_outs(diff):
    t = {"mlp_out": diff, "mlp_input_grad": 0.0, "mlp_weight_grads": 0.0}
    d = {"dtensor_out": 0.0, "dtensor_input_grad": 0.0, "dtensor_weight_grad": 0.0, "dtensor_vs_ours": 0.0}
    return [{"tensor": t, "dtensor": d}, {"tensor": t, "dtensor": d}]


def _halo(diff):
    return [{"out": diff, "input_grad": 0.0, "halo_bytes_per_exchange": 512, "strip_bytes": 4096}] * 2


def _mesh(diff):
    return [{"tp_group": [2 * (r // 2), 2 * (r // 2) + 1], "dp_group": [r % 2, r % 2 + 2], "elements_tp": 64,
             "elements_dp": 32, "grad_diff": diff} for r in range(4)]


def test_lesson10s_verdict_quotes_the_tables_it_reads():
    """Cell 44, the lesson's verdict, printed alone at the end: its numbers are cells of the bubble table (cell 13)
    and the memory table (cell 28), or the lines cells 29, 32 and 35 print (FSDP2's bound, the halo's bytes, the
    mesh's groups and values), each named here."""
    outs, predicted = _model_case()
    bubbles = [_bubble(2, 8, 0.15, 0.12), _bubble(2, 1, 0.52, 0.5)]
    halo, mesh = _halo(0.0), _mesh(0.0)
    said = L10.verdict(_tensor_outs(0.0), bubbles, outs, halo, mesh, predicted)
    memory = L10.memory_table(outs, predicted)
    ok, fsdp, bound = L10.fsdp_within_goal(outs)
    ddp = sum(outs[0]["DDP"][k] for k in ("parameters", "gradients", "optimizer_state"))
    steps = {r["scheme"]: float(r["step (ms)"]) for r in memory.rows}
    errors = [float(r["predicted step (ms)"]) / float(r["step (ms)"]) - 1 for r in memory.rows]
    errors += [float(r["step (ms)"]) - float(r["predicted step (ms)"]) for r in memory.rows]  # f12h 10-H1: ms missed
    stated = [len(outs), 1, L10.BUBBLE_GOAL_POINTS,  # the ranks; "stage 1"; the bubble's goal
              bound / ddp,  # cell 29's bound (1/W of DDP's bytes plus the largest unit), over DDP's total
              steps["FSDP2"] / steps["DDP"],  # FSDP2's step over DDP's: two cells of the step column
              *errors, 9,  # the model's reading (test_lesson10s_model_reading_quotes_the_memory_table); lesson 09
              halo[0]["halo_bytes_per_exchange"], halo[0]["strip_bytes"],  # cell 32's line per rank
              *(x for m in mesh for x in (*m["tp_group"], *m["dp_group"], m["elements_tp"], m["elements_dp"])),
              len(mesh) // 2, 2]  # cell 35's lines: groups and values per rank; the mesh's dp x tp
    bubble = L10.bubble_table(bubbles)
    assert _disagree(said, memory, bubble, extra=stated) == [], said


def test_lesson10s_verdict_follows_the_runs():
    """Cell 44, the lesson's verdict: every run equal to one process and the bubble within the goal, against
    every check failing, the bubble outside the goal and FSDP2 above its bound; the model's reading added with
    the predictions."""
    outs = _memory_outs(0.076, 0.040)
    good = L10.verdict(_tensor_outs(0.0), [_bubble(2, 8, 0.15, 0.12)], outs, _halo(0.0), _mesh(0.0))
    fat = {"parameters": 4000, "gradients": 4000, "optimizer_state": 8000, "max_diff_from_ddp": 1.0}  # DDP's bytes
    heavy = [{**o, "FSDP2": {**o["FSDP2"], **fat}} for o in outs]
    bad = L10.verdict(_tensor_outs(1.0), [{**_bubble(2, 8, 0.45, 0.12), "grad_diff": 1.0}], heavy, _halo(1.0),
                      _mesh(1.0))
    assert "NOT" not in good and "does NOT equal one process" in bad
    assert "+3.9 points, within the goal of 10" in good and "+33.9 points, outside the goal of 10" in bad
    assert "gradients equal one process's" in good and "gradients differ from one process's" in bad
    assert "FSDP2 0.50x (within 1/W" in good and "FSDP2 1.00x (ABOVE 1/W" in bad
    assert "both end equal to DDP's weights" in good and "both end AWAY from DDP's weights" in bad
    assert "the split convolution equals the whole one" in good and "does NOT equal the whole one" in bad
    assert "Mesh 2 x 2" in good and "Lesson 09's model" not in good
    with_model = L10.verdict(_tensor_outs(0.0), [_bubble(2, 8, 0.15, 0.12)], outs, _halo(0.0), _mesh(0.0),
                             _sharded_predicted({"DDP": 0.02, "ZeRO-1": 0.02, "FSDP2": 0.03}))
    assert "Lesson 09's model predicted the bytes each scheme sent" in with_model and "(all under" in with_model


# --------------------------------------------------------------------------- lesson 11


def _fake_run(batch, lr, steps, epochs, reached, top, trace, gap, hr=0.6):
    return SimpleNamespace(config={"global_batch_size": batch, "peak_lr": lr}, steps=steps, epochs=epochs,
                           reached=reached, final_train_hr=hr + gap, final_hr=hr, generalization_gap=gap)


def test_lesson11s_sharpness_verdict_quotes_the_sharpness_table():
    """Cell 15: the verdict under cell 14's sharpness table (its eigenvalue, trace and gap columns)."""
    cases = [((1.0, 6.0, 0.01), (3.0, 9.0, 0.05)), ((1.0, 6.86, 0.01), (2.0, 5.54, 0.05)),
             ((1.0, 6.0, 0.05), (3.0, 9.0, 0.01)), ((3.0, 9.0, 0.05), (1.0, 6.0, 0.01))]
    for (t1, h1, g1), (t2, h2, g2) in cases:
        runs = {"small batch": _fake_run(4096, 1e-3, 500, 1.0, True, t1, h1, g1),
                "large batch": _fake_run(65536, 4e-3, 60, 2.0, True, t2, h2, g2)}
        measured = {"small batch": {"top_eigenvalue": t1, "hessian_trace": h1, "train_loss": 0.3},
                    "large batch": {"top_eigenvalue": t2, "hessian_trace": h2, "train_loss": 0.3}}
        rows = L11.sharpness_rows(runs, measured)
        said = L11.sharpness_verdict(*rows)
        # 2017: Keskar et al.'s and Dinh et al.'s year (quoted literature); 0.005: the verdict's gap_points, the
        # tolerance the gap is read within where the two measures of sharpness disagree (r10e 11-H2)
        assert disagreements(said, L11.sharpness_table(rows), extra=(2017, 0.005)) == [], said


def _growth_run(batch, lr, steps, reached, hr, ttt, at_milestone, factor=2.0):
    cfg = {"global_batch_size": batch, "peak_lr": lr, "max_epochs": 4.0, "milestones": (1.0, 2.0),
           "at_milestone": at_milestone, "milestone_factor": factor}
    return SimpleNamespace(config=cfg, steps=steps, reached=reached, final_hr=hr, time_to_target_s=ttt,
                           steps_to_target=steps // 2 if reached else None, train_time_s=10.0)


def test_lesson11s_growth_verdict_quotes_the_growth_table():
    """Cell 19: the verdict under the growth table (steps, final HR@10, time to target)."""
    for grow_steps, grow_hr in ((400, 0.605), (400, 0.50), (400, 0.70), (1000, 0.60)):
        runs = {"(a) lr / 2": _growth_run(8192, 1e-3, 1000, True, 0.60, 12.34, "divide_lr"),
                "(b) batch x 2": _growth_run(8192, 1e-3, grow_steps, True, grow_hr, 5.67, "grow_batch")}
        decay, grow = runs.values()
        said = L11.growth_verdict(decay, grow)
        # the difference of the two final HR@10 cells; the tolerance it is read within (the verdict's hr_tolerance)
        extra = (grow.final_hr - decay.final_hr, 0.01, 2017)  # 2017: Smith et al.'s year (quoted literature)
        assert disagreements(said, L11.growth_table(runs), extra=extra) == [], said


def test_lesson11s_bn_verdict_quotes_the_bn_table():
    """Cell 29: the verdict under the BatchNorm table (accuracy and ms/step per variant and per-rank batch)."""
    for small_local, small_sync, recomputed in ((0.70, 0.85, None), (0.85, 0.80, None), (0.857, 0.858, (0.90, 0.929)),
                                                (0.849, 0.85, None)):
        rows = []
        variants = {"local BN": (small_local, 0.9), "synchronized BN": (small_sync, 0.9)}
        if recomputed:
            variants["local BN, recomputed stats"] = recomputed
        for v, (a_small, a_large) in variants.items():
            for b, acc in ((4, a_small), (64, a_large)):
                rows.append({"per_rank_batch": b, "global_batch": 2 * b, "variant": v, "test_accuracy": acc,
                             "step_ms": 2.4 if v == "synchronized BN" else 1.2})
        said = L11.bn_verdict(rows)
        at = {r["variant"]: r["test_accuracy"] for r in rows if r["per_rank_batch"] == 4}
        big = {r["variant"]: r["test_accuracy"] for r in rows if r["per_rank_batch"] == 64}
        # differences of two accuracy cells (behind the best, recovered by sync, recomputed at both batches);
        # the margin read as noise (bn_verdict's 0.01)
        diffs = [max(at.values()) - at["local BN"], at["synchronized BN"] - at["local BN"], 0.01]
        if recomputed:
            diffs += [at["local BN, recomputed stats"] - at["local BN"],
                      big["local BN, recomputed stats"] - big["local BN"]]
        # the per-rank batches are in the column names ("b=4/rank: acc"), which the cells do not hold
        assert disagreements(said, L11.bn_table(rows), extra=(*diffs, 4, 64)) == [], said


def test_lesson11s_bn_verdict_reads_the_bn_table_at_its_rounding():
    """The smoke copy of 2026-12-01: "cost x2.6 the local step time" under a table of 17.8 and 6.7 ms (x2.66), the
    ratio taken from unrounded times. The verdict reads the table's rounding (3 decimals of accuracy, 0.1 ms)."""
    rows = []
    for v, (a4, a32, ms4, ms32) in {"local BN": (0.5624, 0.7421, 11.1, 6.74),
                                   "synchronized BN": (0.5231, 0.7404, 21.2, 17.76),
                                   "local BN, recomputed stats": (0.6126, 0.7444, 15.6, 4.2)}.items():
        rows += [{"per_rank_batch": 4, "global_batch": 8, "variant": v, "test_accuracy": a4, "step_ms": ms4},
                 {"per_rank_batch": 32, "global_batch": 64, "variant": v, "test_accuracy": a32, "step_ms": ms32}]
    said = L11.bn_verdict(rows)
    table = L11.bn_table(rows)
    cell = {r["variant"]: r for r in table.rows}
    behind = cell["local BN, recomputed stats"]["b=4/rank: acc"] - cell["local BN"]["b=4/rank: acc"]  # 0.051
    assert "x2.7 the local step time" in said and f"{behind:.3f} behind" in said, said
    assert disagreements(said, table, extra=(behind, 4, 32)) == [], said


def test_lesson11s_adaptive_verdict_quotes_the_adaptive_table():
    """Cell 22: the verdict under the adaptive-batch table (steps and samples to the target)."""
    def row(run, steps, samples, reached=True):
        return {"run": run, "reached": reached, "steps_to_target": steps, "samples_to_target": samples,
                "batches": [1024, 4096], "final_hr": 0.5, "steps": steps or 100, "samples": 0}
    for rows in ([row("fixed", 400, 400_000), row("grown", 300, 410_000), row("adaptive", 200, 405_000)],
                 [row("fixed", 400, 400_000), row("adaptive", 200, 900_000)],
                 [row("fixed", 100, 400_000), row("adaptive", None, None, False)],
                 [row("fixed", 1208, 4_947_968), row("grown", 1208, 4_947_968), row("adaptive", 906, 4_947_968)]):
        said = L11.adaptive_verdict(rows)
        # the adaptive run's steps and samples against another's: ratios of two cells of one column (the cells of
        # "samples to target" are text with thousands separators, parsed the same way)
        assert disagreements(said, L11.adaptive_table(rows)) == [], said


def test_lesson11s_scaling_verdict_quotes_the_scaling_table():
    """Cells 24 and 26: the verdict under the scaling table (its title holds the fit; its rows the sizes)."""
    sizes = (3125, 6250, 12500, 25000, 50000)
    rows = [{"fraction": n / 1e5, "size": n, "metric": 1 - (2 * n ** -0.35 + 0.05), "error": 2 * n ** -0.35 + 0.05}
            for n in sizes]
    for measured in (2 * 1e5 ** -0.35 + 0.05, 0.2, 0.01):
        held = {"fraction": 1.0, "size": 100_000, "metric": 1 - measured, "error": measured}
        pred = L11.scaling_prediction(rows, held)
        said = L11.scaling_verdict(pred)
        need = pred["size_for_measured"]
        # the goal (5 %) and the flat exponent (0.02) it reads against; the relative error of the held-out row
        # (its measured cell over its predicted one, less 1); the size the law needs for the measured error (the
        # fit of the title solved for it) and that over the held-out size
        derived = [L11.PREDICTION_GOAL, L11.FLAT_EXPONENT, pred["relative_error"]]
        derived += [need, need / pred["size"]] if need else []
        # "so is the error of <largest fitted size>" (r5c): its cell over the measured one's, less 1, and the sizes'
        # ratio
        derived += [L11.no_change_error(pred), pred["size"] / pred["largest_fitted"]]
        assert disagreements(said, L11.scaling_table(rows, pred, held), extra=derived) == [], said
    # the fifth full run's BERT case (read r5c): within 5 % of the law and of the largest fitted size's error
    bert = [{"fraction": f, "size": n, "metric": e, "error": e}
            for f, n, e in ((0.125, 232, 5.5973), (0.25, 465, 5.4132), (0.5, 930, 4.7451))]
    held = {"fraction": 1.0, "size": 1860, "metric": 4.6051, "error": 4.6051}
    pred = L11.scaling_prediction(bert, held)
    said = L11.scaling_verdict(pred, unit="sequences")
    assert "cannot tell" in said, said
    derived = [L11.PREDICTION_GOAL, L11.FLAT_EXPONENT, pred["relative_error"], pred["size_for_measured"],
               pred["size_for_measured"] / pred["size"], L11.no_change_error(pred),
               pred["size"] / pred["largest_fitted"]]
    table = L11.scaling_table(bert, pred, held, size="training sequences", metric="held-out MLM loss",
                              error="error (the loss)")
    assert disagreements(said, table, extra=derived) == [], said
    # the sixth full run's NeuMF case (read r6c): worse than the law by 11.9 %, within 5 % of the largest fitted size
    neumf = [{"fraction": f, "size": n, "metric": 1 - e, "error": e}
             for f, n, e in ((1 / 32, 36_803, 0.6258), (1 / 16, 67_566, 0.6182), (1 / 8, 129_075, 0.5719),
                             (1 / 4, 252_086, 0.4083), (1 / 2, 498_056, 0.3409))]
    held = {"fraction": 1.0, "size": 990_027, "metric": 1 - 0.3361, "error": 0.3361}
    pred = L11.scaling_prediction(neumf, held)
    said = L11.scaling_verdict(pred)
    assert "barely helped" in said, said
    derived = [L11.PREDICTION_GOAL, L11.FLAT_EXPONENT, pred["relative_error"], pred["size_for_measured"],
               pred["size_for_measured"] / pred["size"], L11.no_change_error(pred),
               pred["size"] / pred["largest_fitted"]]
    assert disagreements(said, L11.scaling_table(neumf, pred, held), extra=derived) == [], said


def test_lesson11s_bert_noise_verdict_quotes_the_bert_tables():
    """Cell 12: the verdict under lesson 07's two points (``bert_steps_table``, displayed above it since #37: the
    verdict quoted their ratio with no table of them in the lesson), the line printed above that (B_simple at the
    target with its error), and cell 11's BERT noise table."""
    probes = [{"step": s, "sequences": 32 * s, "eval_loss": 6.0 - s / 100, "b_simple": b, "stderr": e,
               "trace_cov": 1e3, "grad_sq_norm": 1.0} for s, b, e in ((50, 150.0, 60.0), (100, 300.0, 30.0))]
    noise = L11.mlm_noise_table({"probes": probes})
    for steps in ([{"batch size": 32, "steps to target": 725}, {"batch size": 256, "steps to target": 178}],
                  [{"batch size": 32, "steps to target": 800}, {"batch size": 256, "steps to target": 100}],
                  [{"batch size": 32, "steps to target": 100}, {"batch size": 256, "steps to target": 100}]):
        table = L11.bert_steps_table(steps, 4.2)
        b_crit = L11.two_point_critical_batch(steps)
        for b_simple, stderr in ((300.0, 30.0), (300.0, 400.0), (5000.0, 6000.0), (20.0, 5.0)):
            said = L11.bert_noise_verdict(b_simple, steps, stderr=stderr)
            rule = [(1 + b_simple / 32) / (1 + b_simple / 256),  # what S = S_min (1 + B_crit / B) predicts
                    b_simple, stderr, 1, 7, 3]  # the line above (B_simple +/- its error); "1/sqrt"; lesson 07; factor
            if b_crit is not None and math.isfinite(b_crit):
                lo, hi = L11._ratio_band(b_simple, stderr, b_crit)
                rule += [b_crit, b_simple / b_crit, lo, hi]  # the two points' B_crit; B_simple over it; its band
            assert _disagree(said, table, noise, extra=rule) == [], said
    assert "missing" in L11.bert_steps_table(None).title and not L11.bert_steps_table(None).rows
