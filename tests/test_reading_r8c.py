"""Readings fixed after the eighth full-profile read (#37, helper r8c: lessons 08, 09 and 10 of the run of
2026-12-02 in /tmp/course13; /work/notes/read-full-run-8-r8c.md). Each test feeds the reading that run's own numbers,
which printed a statement its outputs contradict, and the opposite results."""

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

from course_lib.lessons import l08_collectives as L08  # noqa: E402
from course_lib.lessons import l09_performance_model as L09  # noqa: E402
from course_lib.lessons import l10_model_parallelism as L10  # noqa: E402
from course_lib.perf import model as M  # noqa: E402
from test_reading_agreement_i37h import (_bubble, _halo, _memory_outs, _mesh, _model_case,  # noqa: E402
                                         _tensor_outs)


# --------------------------------------------------------------------------- lesson 08


def _verdict_row(model, link, p, method, step_ms, ref_ms, lost, steps, speedup, compute_ms, bytes_ratio=40.9):
    return {"model": model, "link": link, "p": p, "method": method, "bytes_ratio": bytes_ratio, "steps_lost": lost,
            "steps": steps, "step_s": step_ms / 1e3, "reference_step_s": ref_ms / 1e3, "compute_s": compute_ms / 1e3,
            "speedup": speedup}


def test_nothing_pays_says_why_from_the_best_methods_row():
    """r8c 08-1: cell 40 "BERT-mini on NVLink ..., p = 64: nothing pays: ... and the bytes saved do not buy back the
    steps lost (best: PowerSGD rank 4, 0.96x)" for a method that lost 0 of 32 steps and whose step was predicted at
    77.26 against fp32's 74.44 ms; and "NeuMF on NVLink ..., p = 2: ... (best: delayed averaging, 1.00x)", 0 of 128
    lost, 7.461 against 7.492 ms. Opposite: a best that saves per step but loses steps."""
    rows = [_verdict_row("BERT-mini", "NVLink", 64, "PowerSGD rank 4", 77.26, 74.44, 0, 32, 0.9635, 72.95),
            _verdict_row("BERT-mini", "NVLink", 64, "local SGD H=4", 77.66, 74.44, 3, 32, 0.85, 72.95, 4.0),
            _verdict_row("NeuMF", "NVLink", 2, "delayed averaging", 7.461, 7.492, 0, 128, 1.004, 7.461, 1.0)]
    text = L08.compression_verdict(rows)
    assert "do not buy back the steps lost" not in text, text
    bert, neumf = text.splitlines()
    assert ("the best, PowerSGD rank 4 (0.96x): its step is predicted at 77.26 ms against fp32's 74.44, though it "
            "lost no steps") in bert, bert
    assert ("the best, delayed averaging (1.00x): it lost no steps, but its step (7.461 against 7.492 ms) is faster "
            "by less than the 5% the model can tell") in neumf, neumf
    # opposite: the best saves per step and loses steps
    lossy = [_verdict_row("BERT-mini", "InfiniBand", 64, "local SGD H=4", 70.0, 75.26, 5, 32, 0.91, 70.0, 4.0)]
    said = L08.compression_verdict(lossy)
    assert "its step is faster (70 against 75.26 ms) but it lost 5 of 32 steps" in said, said
    # and one that pays is still read as paying
    assert "pays most" in L08.compression_verdict([_verdict_row("NeuMF", "x", 64, "local SGD H=16", 8.093, 25.13, 0,
                                                                128, 3.105, 7.461, 16.0)])


def _summary(model, lost, steps, metric_name="held-out MLM loss"):
    return [{"model": model, "method": "delayed averaging", "metric_name": metric_name, "metrics": [5.676],
             "steps_lost": lost, "steps": steps},
            {"model": model, "method": "fp32 all-reduce", "metric_name": metric_name, "metrics": [5.139, 5.168],
             "steps_lost": 0, "steps": steps}]


def test_the_delay_reading_says_whether_the_real_model_paid_what_the_simulation_did():
    """r8c 08-2: cell 38 "BERT-mini: ... 7 of 32 steps lost; the simulated study's tau = 1 needed 60 steps to its
    target against 60 for tau = 0 (+0%)", unread, under md 34's "tau = 1 is nearly free". Opposite: NeuMF, 0 of 128
    lost against the same +0%: the same cost."""
    stale = [{"tau": 0, "steps to target": 60}, {"tau": 1, "steps to target": 60}]
    bert = L08.staleness_reading(_summary("BERT-mini", 7, 32), "BERT-mini", stale)
    assert bert.endswith("(+0%): BERT-mini paid more than the simulation, 7 of 32 steps (22%) against +0%"), bert
    neumf = L08.staleness_reading(_summary("NeuMF", 0, 128, "HR@10"), "NeuMF", stale)
    assert neumf.endswith("(+0%): NeuMF paid about what the simulation did"), neumf
    costly = [{"tau": 0, "steps to target": 60}, {"tau": 1, "steps to target": 90}]
    assert "NeuMF paid less than the simulation, 0 of 128 steps (0%) against +50%" in L08.staleness_reading(
        _summary("NeuMF", 0, 128, "HR@10"), "NeuMF", costly)


# --------------------------------------------------------------------------- lesson 09


def _layers(n):
    return [{"layer": f"L{i}", "flops": 1e6, "bytes": 1e6, "ops": 1, "time_s": (n - i) * 1e-3, "bound": "memory"}
            for i in range(n)]


def test_the_layer_table_title_counts_the_rows_it_shows():
    """r8c 09-1: cell 11 "the step, layer by layer (batch 16384 per rank; top 12 by time)" over NeuMF's 11 layers.
    Opposite: a step of more layers than shown."""
    eleven = M.StepPrediction.layer_table(SimpleNamespace(batch=16384, layers=_layers(11)))
    assert eleven.title == "the step, layer by layer (batch 16384 per rank; all 11 layers, by time)"
    assert len(eleven.rows) == 11
    many = M.StepPrediction.layer_table(SimpleNamespace(batch=32, layers=_layers(40)))
    assert many.title.endswith("top 12 of 40 layers by time)") and len(many.rows) == 12


def _row(model, batch, ranks, pred, meas):
    return {"model": model, "batch": batch, "ranks": ranks, "predicted (ms)": pred, "measured (ms)": meas,
            "error": (pred - meas) / meas}


# the eighth run's comparison table (cell 16)
EIGHTH = [_row("neumf", 1024, 1, 6.059, 8.028), _row("neumf", 1024, 2, 18.73, 13.69),
          _row("neumf", 4096, 1, 8.745, 13.81), _row("neumf", 4096, 2, 21.11, 15.2),
          _row("neumf", 16384, 1, 19.44, 41.43), _row("neumf", 16384, 2, 30.64, 31.2),
          _row("bert-mini", 8, 1, 211.1, 196.3), _row("bert-mini", 8, 2, 232.9, 130.9),
          _row("bert-mini", 16, 1, 335.9, 348.8), _row("bert-mini", 16, 2, 347.5, 218),
          _row("bert-mini", 32, 1, 594.6, 692.2), _row("bert-mini", 32, 2, 564.4, 372.1)]


def test_the_verdict_reads_the_calibration_steps_as_repeatability():
    """r8c 09-2 (H): "(2 calibration step(s) left out: bert-mini at 8 on 1 rank(s), bert-mini at 16 on 2 rank(s),
    where the per-step overhead was measured)" over a table in which the second is +59%: the same step timed twice,
    59 % apart, left out unread. Opposite: calibration steps that agree say so with their own figures."""
    text = L09.verdict(EIGHTH, goal=0.25)
    assert ("where the per-step overhead was measured; each is the same step timed twice, and the two timings were "
            "+8% and +59% apart: the repeatability of bert-mini's steps; neumf has no calibration step here, so its "
            "repeatability is not measured): 37% (outside the course's goal of 25%)") in text, text
    quiet = [r if not L09.calibration_step(r) else _row(r["model"], r["batch"], r["ranks"], 100.0, 99.0)
             for r in EIGHTH]
    assert "the two timings were +1% and +1% apart" in L09.verdict(quiet, goal=0.25)


# --------------------------------------------------------------------------- lesson 10


def _deep():
    """Cell 17's deeper rows in small: the eighth run's largest gaps, +18.6 points at p = 3 and +22.7 at p = 4."""
    return [_bubble(3, 8, 0.386, 0.291, cpu=0.8, schedule="1F1B"), _bubble(3, 1, 0.673, 0.667, cpu=0.98),
            _bubble(4, 8, 0.500, 0.352, cpu=0.78), _bubble(4, 1, 0.760, 0.750, cpu=0.97)]


def test_the_verdict_reads_the_bubble_at_every_depth_measured():
    """r8c 10-1: cell 44 "the bubble's largest gap from the formula is +6.1 points, within the goal of 10" from the
    2-stage rows, where cell 17's depth reading found "+18.6 points (1F1B, m = 8), p = 4 +22.7 points (GPipe, m = 8);
    outside the goal of 10 points at p = 3, 4". Opposite: deeper rows within the goal."""
    outs, predicted = _model_case()
    two = [_bubble(2, 8, 0.172, 0.159), _bubble(2, 1, 0.502, 0.5)]
    text = L10.verdict(_tensor_outs(0.0), two, outs, _halo(0.0), _mesh(0.0), predicted, deep_rows=_deep())
    assert ("the bubble's largest gap from the formula (goal: 10 points), p = 2: +6.1 points, within; p = 3: +18.6 "
            "points, outside; p = 4: +22.7 points, outside") in text, text
    assert "for every schedule, m and p = 2, 3, 4" in text
    calm = [_bubble(3, 8, 0.25, 0.22), _bubble(4, 8, 0.30, 0.28)]
    said = L10.verdict(_tensor_outs(0.0), two, outs, _halo(0.0), _mesh(0.0), predicted, deep_rows=calm)
    assert "p = 3: +5.0 points, within; p = 4: +2.7 points, within" in said, said
    # without the deeper rows the verdict reads as before
    assert "is +6.1 points, within the goal of 10" in L10.verdict(_tensor_outs(0.0), two, outs, _halo(0.0),
                                                                 _mesh(0.0), predicted)


def test_the_model_reading_says_how_much_of_each_step_the_model_leaves_out():
    """r8c 10-2: "its step times were off by DDP -40%, ZeRO-1 -30%, FSDP2 -65% (all under: it leaves out the per-step
    overhead ..., which lesson 09 measures apart and which is most of a step this small)": most only of FSDP2's.
    Opposite: all three over half, and all under half."""
    def case(ddp, zero, fsdp, ddp_pred, zero_pred, fsdp_pred):
        outs = _memory_outs(fsdp, ddp)
        for o in outs:
            o["ZeRO-1"] = {**o["ZeRO-1"], "step_s": zero}
        o = outs[0]
        predicted = {name: SimpleNamespace(state_bytes=sum(o[name][k] for k in ("parameters", "gradients",
                                                                                "optimizer_state")),
                                           sent_bytes=o[name]["sent_bytes"], step_s=s)
                     for name, s in {"DDP": ddp_pred, "ZeRO-1": zero_pred, "FSDP2": fsdp_pred}.items()}
        return L10.model_reading(outs, predicted)

    eighth = case(0.0539, 0.0438, 0.0926, 0.0324, 0.0306, 0.0322)
    assert "DDP -40%, ZeRO-1 -30%, FSDP2 -65%" in eighth
    assert "most of a step this small" not in eighth
    # read f12h 10-H1 (twelfth full run): "most of FSDP2's step here and less than half of DDP's and ZeRO-1's" said
    # of the whole -error, which is the overhead and any under-pricing of the operations together: the ms not
    # predicted are given instead, and the split is said not to be measured (tests/test_reading_f12h.py)
    assert "make up together 21.5 of DDP's 53.9 ms, 13.2 of ZeRO-1's 43.8 ms and 60.4 of FSDP2's 92.6 ms" in eighth, \
        eighth
    assert "how much of that is which it does not say" in case(0.0539, 0.0438, 0.0926, 0.02, 0.02, 0.03)


def test_the_async_reading_names_shared_cores_only_where_the_processes_outnumber_them():
    """r8c 10-5 (S): "the time went between the ops (messages, and the 4 processes sharing this machine's cores)",
    said on any machine; and 10-4 (S): the async table printed "-0.000" for a simulated idle of float rounding."""
    from test_reading_agreement_i37h import _async

    rows = [_async(2, 0.187), _async(4, 0.499), _async(4, 0.494, "not stashed")]
    rows[0]["steady_simulated"] = -1e-17
    crowded = L10.async_bubble_reading(rows, cores=2)
    # read f12h 10-H2: without the per-op replay the reading no longer rules the schedule out ("not to the schedule")
    assert "(messages, and the launch's 4 processes sharing this machine's 2 cores) this run does not split" in crowded
    roomy = L10.async_bubble_reading(rows, cores=16)
    assert "(messages, and waking the stage that waits) this run does not split" in roomy and "cores" not in roomy
    assert "-0.000" not in str(L10.async_table(rows)) and "0.000" in str(L10.async_table(rows))
