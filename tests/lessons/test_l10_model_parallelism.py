"""Lesson 10: its tables and comparisons fed recorded-shape rows (the bubble per depth, the stash's drift, the
step times against DDP and lesson 09's model), lesson 09's overhead in that model, DDP with accumulation, the
decision and node tables, and the checks table."""

import pytest

from course_lib import compare
from course_lib.lessons import l10_choice as choice
from course_lib.lessons import l10_model_parallelism as study
from course_lib.lessons import l10_pipelines as pipes
from course_lib.parallel import pipeline as P
from course_lib.lessons import l09_performance_model as performance_study
from course_lib.models.bert import bert_config
from course_lib.perf import model as M
from course_lib.perf import schemes
from course_lib.perf.probe import DeviceCurves
from course_lib.perf.schemes import ACCUMULATION, SchemePrediction, fastest_that_fits

GIB = 2**30


def _row(measured, replayed, *, p=2, m=8, cpu=1.0, schedule="GPipe"):
    return {"schedule": schedule, "p": p, "m": m, "predicted": P.bubble_fraction(p, m), "measured": measured,
            "replayed": replayed, "cpu_share": cpu, "forward_ms": 10.0, "runs": 5, "grad_diff": 0.0,
            "native_grad_diff": 0.0}


# --------------------------------------------------------------------------- the pipeline bubble


def test_a_bubble_near_the_formula_at_every_m_is_the_same_and_a_far_one_is_higher():
    near = [_row(P.bubble_fraction(2, m) + d, 0.0, m=m, schedule=s)
            for m, d in ((1, 0.01), (2, 0.02), (4, 0.0), (8, 0.015)) for s in ("GPipe", "1F1B")]
    (c,) = pipes.bubble_comparisons(near)
    assert c.outcome == compare.SAME and c.unit == "points" and c.n == "8"
    far = [_row(P.bubble_fraction(3, m) + d, 0.0, p=3, m=m) for m, d in ((1, 0.3), (4, 0.35), (8, 0.32))]
    assert [c.outcome for c in pipes.bubble_comparisons(near + far)] == [compare.SAME, compare.HIGHER]


def test_a_bubble_that_scatters_across_m_is_unresolved_and_one_row_gives_no_verdict():
    scatter = [_row(P.bubble_fraction(2, m) + d, 0.0, m=m) for m, d in ((1, -0.2), (2, 0.3), (4, -0.1), (8, 0.25))]
    assert pipes.bubble_comparisons(scatter)[0].outcome == compare.UNRESOLVED
    assert pipes.bubble_comparisons([_row(0.4, 0.3)]) == []


def test_the_bubble_tables_pipelining_column_says_why_it_is_empty():
    rows = [{**_row(0.4, 0.3, p=3, m=m, schedule=sched), "native_grad_diff": None}
            for sched in ("GPipe", "1F1B") for m in (1, 8)] + [_row(0.15, 0.12)]
    col = [r["torch"] for r in pipes.bubble_table(rows).rows]
    assert col == ["not run", "not run", "n/a (m < p)", "not run", "yes"]
    assert pipes.bubble_table([_row(0.2, 0.1, cpu=None)]).rows[0]["CPU"] == "n/a"


# --------------------------------------------------------------------------- the asynchronous pipeline


def test_the_stash_drift_is_resolved_only_above_the_replays_resolution():
    comps = pipes.stash_comparisons({2: 6.6e-7, 3: 3.1e-6, 4: 3.1e-6})
    assert [c.outcome for c in comps] == [compare.UNRESOLVED, compare.HIGHER, compare.HIGHER]
    assert [c.question[-5:] for c in comps] == ["p = 2", "p = 3", "p = 4"]


def test_the_checked_cell_prints_whether_the_deepest_drift_is_resolved():
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).parents[2] / "notebooks" / "10_model_parallelism.ipynb").read_text())
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "stash_comps[-1].outcome == compare.HIGHER" in code and "grows with depth" not in code


def test_the_staleness_table_gives_each_run_against_synchronous_and_stashed():
    conv = [{"p": 1, "mode": "synchronous", "held_out_loss": 1.0},
            {"p": 2, "mode": "stashed", "held_out_loss": 1.05},
            {"p": 2, "mode": "not stashed", "held_out_loss": 1.155}]
    rows = pipes.staleness_table(conv).rows
    assert [r["vs sync"] for r in rows] == ["+0.0%", "+5.0%", "+15.5%"]
    assert [r["vs stashed"] for r in rows] == ["-", "-", "+10.0%"]


# --------------------------------------------------------------------------- sharded steps


def _pred(scheme, step_s, memory, *, w=8, sent=0.0, exposed=0.0, activations=0.0):
    return SchemePrediction(scheme, w, 8 * w, 8, step_s - exposed, exposed, exposed, 0.0, memory - activations, 0.0,
                            0.0, activations, sent)


def _outs(steps, spread=0.0):
    """Two ranks' sharded results with the given step per scheme, the second rank ``spread`` slower."""
    return [{name: {"step_s": s * (1 + spread * r)} for name, s in steps.items()} for r in (0, 1)]


def test_fsdp_twice_ddps_step_is_higher_and_a_model_within_a_few_percent_is_the_same():
    outs = _outs({"DDP": 0.1, "ZeRO-1": 0.1, "FSDP2": 0.2})
    model = {name: _pred(s, 0.1 * (1.02 if name != "FSDP2" else 2.0), 40) for name, s in
             study.MEASURED_SCHEMES.items()}
    comps = {c.question: c.outcome for c in study.step_comparisons(outs, model)}
    assert comps["step, FSDP2 / DDP"] == compare.HIGHER
    assert comps["step, model / measured: DDP"] == compare.SAME
    assert comps["step, model / measured: FSDP2"] == compare.SAME  # 0.2 predicted, 0.2 measured


def test_steps_within_the_timing_resolution_are_not_a_difference():
    outs = _outs({"DDP": 0.1, "ZeRO-1": 0.1, "FSDP2": 0.104})
    (c,) = study.step_comparisons(outs, None)
    assert c.outcome == compare.UNRESOLVED and c.low < 1 < c.high
    under = {name: _pred(s, 0.04, 40) for name, s in study.MEASURED_SCHEMES.items()}
    assert study.step_comparisons(outs, under)[1].outcome == compare.LOWER


# --------------------------------------------------------------------------- choosing a scheme


def test_decision_reasons_for_each_outcome():
    fits_all = [_pred("DDP", 1.0, 2 * GIB), _pred("ZeRO-1", 0.97, GIB), _pred("tensor", 3.0, GIB / 2)]
    best = fastest_that_fits(fits_all, 4 * GIB)
    assert best.scheme == "DDP"
    assert choice.decision_reason(fits_all, best, 4 * GIB, 8) == "DDP, simplest"
    faster = [_pred("DDP", 1.0, 2 * GIB), _pred("ZeRO-1", 0.5, GIB)]
    assert choice.decision_reason(faster, fastest_that_fits(faster, 4 * GIB), 4 * GIB, 8) == "faster than DDP"
    big = [_pred("DDP", 1.0, 8 * GIB, activations=6 * GIB), _pred("FSDP", 1.0, 3 * GIB)]
    assert choice.decision_reason(big, fastest_that_fits(big, 4 * GIB), 4 * GIB, 8) == "DDP too big"
    assert choice.decision_reason(big[:1], None, 4 * GIB, 8) == "nothing fits"
    assert choice.decision_reason(big[:1], big[0], 9 * GIB, 1) == "one device"


def test_the_node_choice_table_names_the_choice_what_tensor_costs_and_what_does_not_fit():
    fast = {"BERT-x": [_pred("DDP", 0.10, 30e9), _pred("FSDP", 0.095, 20e9),
                       _pred("tensor", 0.30, 5e9, sent=2**30, exposed=0.15), _pred("pipeline", 0.2, 90e9)]}
    slow = {"BERT-x": [_pred("DDP", 0.12, 30e9), _pred("FSDP", 0.11, 20e9), _pred("tensor", 1.2, 5e9),
                       _pred("pipeline", 0.25, 90e9)]}
    (row,) = choice.node_choice_table({"NVLink": fast, "InfiniBand": slow}, 80e9).rows
    assert (row["choice"], row["as fast"]) == ("DDP", "FSDP")
    assert (row["TP / choice, NVLink"], row["TP / choice, InfiniBand"]) == ("3.00x", "10.00x")
    assert row["TP excess ms"] == pytest.approx(200) and row["TP exposed ms"] == pytest.approx(150)
    assert row["too big"] == "pipeline x8 (1F1B, m = 8)"
    assert choice.node_choice_table({"NVLink": fast}, 1e9).rows[0]["choice"] == "nothing fits"


def test_bert_sizes_from_the_model_code():
    import torch

    from course_lib.models.bert import BertForMLM

    with torch.device("meta"):
        base, large = (BertForMLM(choice.bert_shape(n)).num_parameters() for n in ("BERT-base", "BERT-large"))
    assert 105e6 < base < 115e6  # BERT-base: 110M
    assert 330e6 < large < 345e6  # BERT-large: 340M


def test_decision_rows_grow_with_the_model_on_this_machine():
    from course_lib.perf.probe import DeviceCurves

    curves = DeviceCurves("test", [(1.0, 1e14), (1e15, 1e14)], [(1.0, 1e12), (1e15, 1e12)], 5e-6)
    rows = choice.decision_rows(["BERT-base", "BERT-large"], world_size=8, device_bytes=16 * GIB, micro_batch=8,
                               seq_len=128, curves=curves, link=(5e-6, 1 / 100e9), precision="mixed")
    base, large = rows
    need = lambda r: next(p for p in r["predictions"] if p.scheme == "DDP").memory_bytes  # noqa: E731
    assert need(large) > 2 * need(base) and base["choice"] is not None
    assert choice.decision_table(rows, 16 * GIB, 8).rows[0]["model"] == "BERT-base"
    one = choice.decision_rows(["BERT-base"], world_size=1, device_bytes=GIB / 4, micro_batch=8, seq_len=128,
                              curves=curves, link=(0.0, 0.0), precision="mixed")[0]
    assert [p.scheme for p in one["predictions"]] == ["DDP", ACCUMULATION] and one["choice"] is None
    assert one["smaller"] is None or one["smaller"][0] < 8
    assert choice.decision_table([one], GIB / 4, 1).rows[0]["why"] == "nothing fits"


# --------------------------------------------------------------------------- lesson 09's overhead, and accumulation


TINY = bert_config("tiny", vocab_size=200, max_position=16, dropout=0.0, attention_dropout=0.0)
CURVES = DeviceCurves("test", [(1.0, 1e12), (1e15, 1e12)], [(1.0, 1e11), (1e15, 1e11)], 3e-6)
NO_OVERHEAD = DeviceCurves("test", CURVES.matmul, CURVES.copy, 0.0)
LINK = (2e-5, 1 / 1e9)


@pytest.fixture(scope="module")
def tiny_counts():
    return performance_study.bert_step_counts(TINY, (2, 4), 16, gpu=False)


def _ddp(counts, curves, *, w=2, global_batch=8, micro=4, overhead=None, scheme="DDP", link=LINK):
    return schemes.predict(*counts, curves, link, scheme=scheme, world_size=w, global_batch=global_batch,
                           micro_batch=micro, values_per_sample=16 * TINY.hidden_size, precision="fp32",
                           op_overhead_s=overhead)


def test_lesson09s_overhead_is_spread_over_its_operations_and_read_only_where_it_was_measured():
    assert study.lesson09_overhead(None, 2, "cpu")[0] is None
    saved = {"step_overhead": {"bert": {"1": {"overhead_s": 2e-3, "operations": 400},
                                        "2": {"overhead_s": 3e-3, "operations": 400}}}}
    assert study.lesson09_overhead(saved, 2, "cpu")[0] == pytest.approx(7.5e-6)  # the data-parallel step's
    assert study.lesson09_overhead(saved, 1, "cpu")[0] == pytest.approx(5e-6)
    assert study.lesson09_overhead(saved, 2, "cuda")[0] is None


def test_the_overhead_is_added_exactly_once(tiny_counts):
    """Each operation a rank runs pays lesson 09's overhead once, in place of the probe's (not on top of it);
    on lesson 09's own step, that is lesson 09's model with its per-step overhead."""
    per_op, n_ops, free = 1e-5, len(tiny_counts[1].ops), (0.0, 0.0)
    n_opt = sum(o.phase == "optimizer" for o in tiny_counts[1].ops)
    # on a free link nothing hides behind the ops; tensor parallelism: every rank the whole batch of 8, in two
    # micro-batches of 4 (forward and backward twice, the optimizer once)
    for scheme, micro_batches in (("DDP", 1), ("ZeRO-1", 1), ("ZeRO-2", 1), ("FSDP", 1), ("tensor", 2)):
        with_it = _ddp(tiny_counts, CURVES, overhead=per_op, scheme=scheme, link=free).step_s
        assert with_it - _ddp(tiny_counts, NO_OVERHEAD, scheme=scheme, link=free).step_s == pytest.approx(
            per_op * (micro_batches * (n_ops - n_opt) + n_opt))
    one = _ddp(tiny_counts, NO_OVERHEAD, w=1, global_batch=4, micro=4, overhead=per_op).step_s
    assert one - _ddp(tiny_counts, NO_OVERHEAD, w=1, global_batch=4, micro=4).step_s == pytest.approx(per_op * n_ops)
    lesson09 = M.predict_step(tiny_counts[1], CURVES, step_overhead_s=per_op * n_ops).step_s
    assert one == pytest.approx(lesson09)


@pytest.mark.parametrize("overhead", [None, 1e-5])
def test_accumulations_row_is_the_models_closed_form(tiny_counts, overhead):
    """k micro-batches: forward and backward k times, the optimizer, and DDP's all-reduce once behind the last
    backward (with its bucket copies); the memory DDP's state and one micro-batch's activations."""
    big = _ddp(tiny_counts, CURVES, global_batch=16, micro=8, overhead=overhead)
    acts = lambda c: sum(c.activation_by_module.values())  # noqa: E731
    state = big.memory_bytes - big.activations
    micro = M.interpolate(*tiny_counts, 2)
    pred = schemes.predict_accumulated(*tiny_counts, CURVES, LINK, world_size=2, global_batch=16,
                                       device_bytes=state + acts(micro) * 1.01, values_per_sample=16 * TINY.hidden_size,
                                       precision="fp32", op_overhead_s=overhead)
    assert (pred.scheme, pred.micro_batch) == (ACCUMULATION, 2)  # 4 micro-batches: 2, then 4, do not fit
    one = M.predict_step(micro, M.with_op_overhead(CURVES, overhead), world_size=2, link=LINK)
    closed = 4 * (one.forward_s + one.backward_s) + one.optimizer_s + one.exposed_comm_s + one.ddp_copy_s
    assert pred.step_s == pytest.approx(closed)
    assert pred.memory_bytes == pytest.approx(state + acts(micro))
    assert pred.sent_bytes == big.sent_bytes  # one all-reduce per step, whatever k
    assert schemes.predict_accumulated(*tiny_counts, CURVES, LINK, world_size=2, global_batch=2, device_bytes=1e12,
                                       values_per_sample=1, precision="fp32") is None


def test_decision_reasons_when_ddp_fits_only_by_accumulating():
    acc = SchemePrediction(ACCUMULATION, 8, 64, 2, 1.2, 0.0, 0.0, 0.0, GIB, 0.0, 0.0, 0.5 * GIB, 0.0)
    big = [_pred("DDP", 1.0, 8 * GIB, activations=6 * GIB), acc, _pred("FSDP", 1.15, 3 * GIB)]
    best = fastest_that_fits(big, 4 * GIB)
    assert best is acc and choice.decision_reason(big, best, 4 * GIB, 8) == "DDP accumulating, simplest"
    assert choice._priced(acc) == "DDP, 4 micro-batches of 2 (1.50 GiB, 1.2 s)"
    fast = big[:2] + [_pred("FSDP", 0.5, 3 * GIB)]
    assert choice.decision_reason(fast, fastest_that_fits(fast, 4 * GIB), 4 * GIB, 8) == "faster than accumulating"


def test_the_model_rows_say_whether_lesson_09s_overhead_is_in_them():
    outs = _outs({"DDP": 0.1, "ZeRO-1": 0.1, "FSDP2": 0.2})
    model = {name: _pred(s, 0.1, 40) for name, s in study.MEASURED_SCHEMES.items()}
    with_it, without = study.step_comparisons(outs, model), study.step_comparisons(outs, model, with_overhead=False)
    assert all("with lesson 09's overhead" in c.basis for c in with_it[1:]) and "overhead" not in with_it[0].basis
    assert all("without lesson 09's overhead" in c.basis for c in without[1:])


def test_an_unknown_bert_is_named_with_the_choices():
    with pytest.raises(ValueError, match="BERT-base"):
        choice.bert_shape("BERT-xl")
