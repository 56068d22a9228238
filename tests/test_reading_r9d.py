"""Readings fixed after the ninth full run's read (#37), lessons 11 and 12 (r9d)."""

from test_reading_agreement import disagreements
from test_reading_r8d import EIGHTH_BN, _bn_rows

from course_lib.lessons import l11_batch_size_science as L11


def test_the_bn_verdict_says_sync_cost_only_when_its_step_was_slower():
    """r9d 11-S1: "Synchronizing the statistics cost x{extra} the local step time ... (its all-reduces ...)" was printed
    whatever the ratio. The run's 12.3 vs 4.0 ms/step at 256 per rank (x3.1) keeps it; an equal step time must not."""
    said = L11.bn_verdict(_bn_rows())
    assert "Synchronizing the statistics cost x3.1 the local step time at 256 per rank" in said, said
    extra = (0.88 - 0.858, 0.967 - 0.938, 0.01, 4, 256, 12.3 / 4.0)
    assert disagreements(said, L11.bn_table(_bn_rows()), extra=extra) == [], said

    even = {**EIGHTH_BN, "synchronized BN": (EIGHTH_BN["synchronized BN"][0], (3.4, 3.9, 3.5, 4.0))}
    other = L11.bn_verdict(_bn_rows(even))
    assert "cost x" not in other, other
    assert "Synchronizing the statistics did not slow the step at 256 per rank here (x1.0" in other, other
