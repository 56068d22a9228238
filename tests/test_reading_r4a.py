"""Readings of lessons 00-04 fixed after the fourth full-profile run (2026-12-01, /tmp/course9; read by r4a,
/work/notes/read-full-run-4-r4a.md): each test feeds the reading that run's numbers and the opposite results."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from course_lib.lessons import l01_baseline as L01  # noqa: E402
from test_reading_agreement import disagreements  # noqa: E402


def _opt_row(b, variant, opt_ms, step_ms, ratios_opt, ratios_step, baseline=False):
    return {"batch size": b, "variant": variant, "steps": 10, "optimizer_ms": opt_ms, "step_ms": step_ms,
            "baseline": baseline, "optimizer_ratios": ratios_opt, "step_ratios": ratios_step}


def _run_opt_comp(fused_step_at_16384=20.96):
    """Lesson 01 cell 23 of the run (median ms per step; paired ratios consistent with its "within noise" marks)."""
    return {"baseline_impl": "for-loop", "device": "cpu", "repeats": 3, "rows": [
        _opt_row(256, "dense Adam, for-loop", 1.97, 3.427, [1, 1, 1], [1, 1, 1], True),
        _opt_row(256, "dense Adam, foreach", 1.611, 2.998, [1.3, 0.98, 1.2], [1.2, 0.97, 1.14]),
        _opt_row(256, "dense Adam, fused", 0.397, 1.383, [4.9, 5.0, 4.97], [2.4, 2.5, 2.48]),
        _opt_row(256, "SparseAdam tables + Adam", 1.064, 2.011, [1.8, 1.85, 1.9], [1.7, 1.68, 1.72]),
        _opt_row(16384, "dense Adam, for-loop", 1.907, 21.15, [1, 1, 1], [1, 1, 1], True),
        _opt_row(16384, "dense Adam, foreach", 2.226, 22.45, [0.8, 1.1, 0.86], [0.9, 1.02, 0.94]),
        _opt_row(16384, "dense Adam, fused", 1.161, fused_step_at_16384, [1.6, 1.65, 1.64],
                 [0.98, 1.03, 1.01] if fused_step_at_16384 > 15 else [2.4, 2.5, 2.45]),
        _opt_row(16384, "SparseAdam tables + Adam", 14.76, 31.38, [0.13, 0.13, 0.13], [0.67, 0.66, 0.68])]}


def test_the_optimizer_reading_says_how_a_faster_adam_would_move_the_ladder():
    """r4a 01-1: "although fused made the whole step measurably faster above: every rung pays the same optimizer
    step, so the ladder's ratios are not moved by it", over a table where fused made the whole step 2.48x faster
    at batch 256 (the baseline's: the optimizer is 58 % of its step) and 1.01x at 16384 (9 %): on fused Adam the
    baseline would gain about 2.5x more than a large-batch rung, so the ladder's speedups would shrink."""
    text = L01.optimizer_reading(_run_opt_comp())
    assert "the ladder's ratios are not moved by it" not in text
    assert ("Every such rung pays about the same dense optimizer step whatever its batch (in these paired runs 1.97 "
            "ms at batch 256, 1.91 at 16384), but it is 57% of a step at batch 256 and 9% at 16384: fused made the "
            "whole step 2.48x faster at batch 256 and "
            "1.01x at 16384 (within the repeats' noise), so on it the baseline would gain more than a rung at batch "
            "16384, and the ladder's "
            "speedups of such rungs would be about 2.5x smaller") in text
    assert text.count("TrainConfig.adam_impl would change it for all of them") == 1
    # every number is a cell of the table, or the ratio of two ratios of its step column (2.48x / 1.01x = 2.5x)
    comp = _run_opt_comp()
    ms = {(r["batch size"], r["variant"]): r["step_ms"] for r in comp["rows"]}
    moved = (ms[256, "dense Adam, for-loop"] / ms[256, "dense Adam, fused"]) / (
        ms[16384, "dense Adam, for-loop"] / ms[16384, "dense Adam, fused"])
    from test_reading_r10a import optimizer_derived  # r10a 01-C1: what each phase accounts for

    assert disagreements(text, L01.optimizer_table(comp), extra=(moved, *optimizer_derived(comp))) == []
    # opposite: a fused step as much faster at the large batch as at the small one: the ratios barely move
    alike = L01.optimizer_reading(_run_opt_comp(fused_step_at_16384=8.5))
    assert "2.49x at 16384, about alike, so the ladder's ratios would barely move" in alike
    # (r10a 01-C1: a step 2.49x faster at 16384 from an optimizer phase of 9% of it is not the optimizer's alone, and
    # the reading gives the factor from that phase's saving too)
    assert "smaller" not in alike.split("; from its optimizer phase's saving alone")[0]


def _rows(slopes, intercepts):
    """Per batch, rows whose log gradient norm is ``intercept + slope * log frequency`` (lesson 04's row cloud)."""
    import torch

    out = {}
    for b, s in slopes.items():
        freq = torch.tensor([1.0, 2.0, 3.0, 5.0, 8.0]) / b
        out[b] = (freq, torch.exp(intercepts[b] + s * freq.log()))
    return {"layers": [], "rows": out}


def test_the_row_gradient_figure_is_titled_by_its_slopes():
    """r4a 04-2: lesson 04 cell 5's figure was titled "the gradient follows frequency, not the batch size" over
    slopes 0.73 (B=256) and 0.64 (B=32768), fits (-3.34 + 0.73 ln f, -5.50 + 0.64 ln f) that put the large batch's
    rows 5.4x below the small batch's at the same frequency (1/256): the batch size moves them too."""
    from course_lib.lessons import l04_lars as L04

    run = _rows({256: 0.7302, 32768: 0.6446}, {256: -3.342, 32768: -5.497})
    title = L04.row_gradients_title(run)
    assert "not the batch size" not in title
    assert title == ("Embedding rows: the gradient grows with the row's frequency in the batch\n"
                     "(log-log slope 0.73 at B=256, 0.64 at B=32768)")
    fig = L04.plot_row_gradients(run)
    assert fig.axes[0].get_title() == title
    # opposite: rows whose gradient does not grow with their frequency are not said to grow
    flat = L04.row_gradients_title(_rows({256: 0.05, 32768: 0.1}, {256: -3.0, 32768: -3.0}))
    assert "grows" not in flat and "slope 0.05 at B=256, 0.10 at B=32768" in flat
