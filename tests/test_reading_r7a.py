"""Readings of lessons 00-04 fixed after the seventh full-profile run (2026-12-02, /tmp/course12, main 8cbfa9e; read
by r7a, /work/notes/read-full-run-7-r7a.md): each test feeds the reading that run's numbers and the opposite results."""

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

from course_lib.lessons import l01_baseline as L01  # noqa: E402
from test_reading_agreement import disagreements  # noqa: E402

# lesson 01 cell 14 of the run: the bursts around the baseline run, their mean, and the run's own samples/s
RUN_PACE = {"before": 47_605.0, "after": 36_143.0, "rate": 41_874.0, "run": 54_681.0}


def test_the_pace_line_says_its_bursts_bracket_the_baseline_run_not_the_lessons_runs(monkeypatch, tmp_path):
    """r7a 01-1: "yardstick pace 47,605 samples/s before this lesson's runs, 36,143 after (-24%)" and "moved -24%
    during this lesson (47,605 samples/s before its runs, ...)": lesson 01 times the bursts after its lr sweep had run
    five runs (cell 12), right before and after the baseline run (cell 14), and before the cells that follow it."""
    from course_lib import ladder
    from course_lib.train.ncf import TrainConfig

    said = L01.pace_drift_reading(RUN_PACE)
    assert said.startswith("the yardstick's pace moved -24% across the baseline run (47,605 samples/s in the bursts "
                           "before it, 36,143 after); later lessons put their times at the mean, 41,874 samples/s")
    assert "before its runs" not in said and "during this lesson" not in said
    # the line Pace prints: a pace finished with the run it bracketed says so
    bursts = iter([47_605.0, 36_143.0, 37_196.0, 16_409.0])
    monkeypatch.setattr(ladder, "yardstick_pace", lambda **kw: next(bursts))
    pace = ladder.Pace(None, TrainConfig(global_batch_size=256), directory=tmp_path, quiet=True)
    rec = pace.finish(run=SimpleNamespace(config={"global_batch_size": 256}, samples_per_s=54_681.0))
    assert set(rec) == {"before", "after", "rate", "run"}
    assert pace.describe() == "yardstick pace 47,605 samples/s before the run, 36,143 after (-24%)"
    # opposite: a later lesson's bursts around its own runs (lesson 02: 37,196 -> 16,409), finished without a run
    later = ladder.Pace(None, TrainConfig(global_batch_size=256), directory=tmp_path, quiet=True)
    later.finish()
    assert later.describe() == "yardstick pace 37,196 samples/s before this lesson's runs, 16,409 after (-56%)"
    old = L01.pace_drift_reading({k: v for k, v in RUN_PACE.items() if k != "run"})
    assert "moved -24% during this lesson (47,605 samples/s before its runs, 36,143 after)" in old


def test_the_pace_drift_reading_says_the_ladder_writes_large_speedups_as_whole_numbers():
    """r7a 02-1: lesson 01 said "the ladder shows such speedups to 1 significant figure" (±31 %), and lesson 02's
    ladder showed '+sqrt scaling' at "11x (±86%)": ``speedup_cell`` writes a speedup of ten or more (at one figure)
    as a whole number rather than "1e+01x"; the reading says so."""
    from course_lib.ladder import speedup_cell
    from course_lib.tables import Table

    said = L01.pace_drift_reading(RUN_PACE)
    assert "uncertain by at least ±31% from this lesson alone" in said
    assert "the ladder shows such speedups to 1 significant figure, or as a whole number from ten up," in said
    assert speedup_cell(81.49 / (11.29 * 26_802 / 41_874), 0.86) == "11x (±86%)"  # lesson 02 cell 18's cell
    assert speedup_cell(6.17, 0.34) == "6x (±34%)"  # below ten: one figure
    pace = Table(["before", "after", "rate", "run"], rows=[RUN_PACE])
    off = RUN_PACE["run"] / RUN_PACE["rate"] - 1
    assert disagreements(said, pace, extra=[off, RUN_PACE["after"] / RUN_PACE["before"] - 1, 1]) == [], said
    # opposite: a drift of a few percent: two figures, whole numbers from a hundred up (123x, not 1.2e+02x)
    small = L01.pace_drift_reading({"before": 100_000.0, "after": 103_000.0})
    assert "to 2 significant figures, or as a whole number from a hundred up," in small
    assert speedup_cell(123.4, 0.03) == "123x (±3%)" and speedup_cell(12.34, 0.03) == "12x (±3%)"


# lesson 01 cell 23 of the run: batch, Adam, optimizer and step ms per step (medians), and paired ratios consistent with
# the table's "within noise" marks (optimizer, step); the fused row at 16384 is the one r7a 01-2 is about
RUN_OPTIMIZER = (
    (256, "dense Adam, for-loop", 3.686, 7.481, [1, 1, 1], [1, 1, 1]),
    (256, "dense Adam, foreach", 4.227, 7.644, [0.8, 0.97, 0.87], [0.9, 1.02, 0.98]),
    (256, "dense Adam, fused", 1.334, 4.139, [2.7, 2.8, 2.76], [1.78, 1.81, 1.85]),
    (256, "SparseAdam tables + Adam", 3.362, 6.355, [1.2, 0.98, 1.1], [1.3, 1.01, 1.18]),
    (16384, "dense Adam, for-loop", 3.922, 47.62, [1, 1, 1], [1, 1, 1]),
    (16384, "dense Adam, foreach", 3.682, 42.52, [1.1, 0.97, 1.07], [1.2, 0.99, 1.12]),
    (16384, "dense Adam, fused", 2.087, 39.43, [1.8, 1.9, 1.88], [1.3, 1.02, 1.25]),
    (16384, "SparseAdam tables + Adam", 33.67, 67.57, [0.12, 0.11, 0.12], [0.7, 0.69, 0.71]),
)


def _run_opt_comp(fused_step_ratios_at_16384=None):
    from test_reading_r4a import _opt_row

    rows = [_opt_row(*r, baseline=r[1] == "dense Adam, for-loop") for r in RUN_OPTIMIZER]
    if fused_step_ratios_at_16384 is not None:
        rows[6]["step_ratios"] = fused_step_ratios_at_16384
    return {"baseline_impl": "for-loop", "device": "cpu", "repeats": 3, "rows": rows}


def test_the_optimizer_reading_does_not_count_a_gain_within_the_repeats_noise_toward_the_ladder():
    """r7a 01-2: "...fused made the whole step 1.81x faster at batch 256 and 1.21x at 16384, so ... the ladder's
    speedups of such rungs would be about 1.5x smaller", over a table whose 16384 fused step speedup reads "1.21x
    (within noise)", in a reading that said "whole step no measurable difference (1.21x)" of the same cell."""
    comp = _run_opt_comp()
    text = L01.optimizer_reading(comp)
    assert "dense Adam, fused: optimizer 1.88x faster, whole step no measurable difference (1.21x)" in text
    assert ("fused made the whole step 1.81x faster at batch 256 and 1.21x at 16384 (within the repeats' noise), so on "
            "it the baseline would gain more than a rung at batch 16384, and the ladder's speedups of such rungs would "
            "be about 1.5x smaller; about 1.8x smaller if the gain at batch 16384 is none"
            ) in text
    ms = {(r["batch size"], r["variant"]): r["step_ms"] for r in comp["rows"]}
    gain = {b: ms[b, "dense Adam, for-loop"] / ms[b, "dense Adam, fused"] for b in (256, 16384)}
    ratios = [r for row in comp["rows"] for r in row["optimizer_ratios"] + row["step_ratios"]]
    from test_reading_r10a import optimizer_derived  # r10a 01-C1: what each phase accounts for

    assert disagreements(text, L01.optimizer_table(comp),
                         extra=(gain[256] / gain[16384], gain[256], *ratios, *optimizer_derived(comp))) == []
    # opposite: the fused step measurably faster at 16384 too (every repeat above 1.05): no qualifier, one factor
    resolved = L01.optimizer_reading(_run_opt_comp([1.19, 1.21, 1.23]))
    assert "whole step 1.21x faster" in resolved and "within the repeats' noise" not in resolved
    assert "1.21x at 16384, so on it the baseline would gain more" in resolved and "is none" not in resolved


def _layers(by_batch):
    return [{"batch": b, "layer": name, "weight_norm": 1.0, "grad_norm": g, "grad_to_weight": g}
            for b, row in by_batch.items() for name, g in row.items()]


def _rows(slopes, intercepts):
    import torch

    out = {}
    for b, s in slopes.items():
        freq = torch.tensor([1.0, 2.0, 3.0, 5.0, 8.0]) / b
        out[b] = (freq, torch.exp(intercepts[b] + s * freq.log()))
    return out


# lesson 04 cell 5 of the run: ||g||/||w|| per layer at B=256 and B=32768
RUN_NORMS = {256: {"gmf_user.weight": 5.73e-05, "gmf_item.weight": 7.38e-05, "mlp_user.weight": 1.62e-03,
                   "mlp_item.weight": 2.15e-03, "mlp.0.weight": 1.72e-04, "mlp.2.weight": 5.96e-04,
                   "out.weight": 6.42e-03},
             32768: {"gmf_user.weight": 5.09e-06, "gmf_item.weight": 6.48e-06, "mlp_user.weight": 2.41e-04,
                     "mlp_item.weight": 2.97e-04, "mlp.0.weight": 7.22e-05, "mlp.2.weight": 6.52e-04,
                     "out.weight": 7.00e-03}}


def test_the_row_gradient_reading_names_the_rows_it_measured():
    """r7a 04-1: "An embedding row's gradient grows with its frequency in the batch (log-log slope 0.73 at B=256,
    0.64 at B=32768 ...): rare users and items get small steps": the slopes are the MLP item table's rows only
    (``layer_gradient_norms``), and they are gradients, not steps (the race's Adam normalises each element's step)."""
    from course_lib.lessons import l04_lars as L04

    run = {"layers": _layers(RUN_NORMS), "rows": _rows({256: 0.7302, 32768: 0.6446}, {256: -3.342, 32768: -5.497})}
    text = L04.reading(run)
    assert text.startswith("||g||/||w|| differs between NeuMF's layers by 112x at batch 256 and 1375x at batch 32768")
    last = text.splitlines()[-1]
    assert last == ("An item embedding row's gradient (the MLP's item table: the rows measured) grows with its "
                    "frequency in the batch (log-log slope 0.73 ± 0.00 at B=256, 0.64 ± 0.00 at B=32768; ± is one "
                    "standard error of the fit; 0.5-1 means it grows): rare items get small gradients, so small SGD "
                    "steps."), last  # ± 0.00: _rows lie on their lines (r10b 04-H2 added the error)
    assert "users" not in last
    # opposite: a slope that does not grow at the large batch (the 2026-12-01 run's 0.09): no "small gradients" clause,
    # the rows still named
    flat = {"layers": _layers(RUN_NORMS), "rows": _rows({256: 0.73, 32768: 0.09}, {256: -3.3, 32768: -5.5})}
    last = L04.reading(flat).splitlines()[-1]
    assert last.startswith("An item embedding row's gradient (the MLP's item table: the rows measured) against its "
                           "frequency in the batch: log-log slope 0.73 ± 0.00 at B=256, 0.09 ± 0.00 at B=32768")
    assert "it grows at B=256 only" in last and "small gradients" not in last
    assert last.endswith("it grows at B=256 only: at a large batch most rows appear many times, and their gradient is "
                         "mostly signal.")


def test_the_row_gradient_reading_gives_the_large_batch_reason_only_where_the_large_batch_fell():
    """The smoke profile's lesson 04 (seen by r7a after its fix): "log-log slope 0.49 at B=256, 0.62 at B=8192 ...; it
    grows at B=8192 only: at a large batch most rows appear many times, and their gradient is mostly signal": the
    reason given is for a large batch's slope falling, where it is the small batch's that is below 0.5."""
    from course_lib.lessons import l04_lars as L04

    smoke = {"layers": _layers({256: RUN_NORMS[256], 8192: RUN_NORMS[32768]}),
             "rows": _rows({256: 0.49, 8192: 0.62}, {256: -3.3, 8192: -5.5})}
    last = L04.reading(smoke).splitlines()[-1]
    assert last.endswith("(0.5-1 means it grows with frequency); it grows at B=8192 only."), last
    assert "at a large batch" not in last
