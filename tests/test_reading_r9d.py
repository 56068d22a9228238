"""Readings fixed after the ninth full run's read (#37), lessons 11 and 12 (r9d)."""

from test_reading_agreement import disagreements
from test_reading_r8d import EIGHTH_BN, _bn_rows

from course_lib.lessons import l11_batch_size_science as L11


def test_the_bn_verdict_says_sync_cost_only_when_its_step_was_slower():
    """r9d 11-S1: "Synchronizing the statistics cost x{extra} the local step time ... (its all-reduces ...)" was printed
    whatever the ratio. The run's 12.3 vs 4.0 ms/step at 256 per rank (x3.1) keeps it; an equal step time must not."""
    said = L11.bn_verdict(_bn_rows())
    assert "Synchronizing the statistics cost x3.1 the local step time at 256 per rank" in said, said
    extra = (0.88 - 0.858, 0.967 - 0.938, 0.01, 4, 256, 12.3 / 4.0,
             0.938 - 0.921, 0.858 - 0.733)  # f12i 11-H4: weight norm's smallest and largest gap to local BN
    assert disagreements(said, L11.bn_table(_bn_rows()), extra=extra) == [], said

    even = {**EIGHTH_BN, "synchronized BN": (EIGHTH_BN["synchronized BN"][0], (3.4, 3.9, 3.5, 4.0))}
    other = L11.bn_verdict(_bn_rows(even))
    assert "cost x" not in other, other
    assert "Synchronizing the statistics did not slow the step at 256 per rank here (x1.0" in other, other


def test_lesson_02s_rows_count_samples_to_target_as_the_runs_here_do():
    """r9d 11-1: at batch 65,536 lesson 02's row printed 6,553,600 samples (100 steps x 65,536, every batch counted
    whole) beside this lesson's run at 6,522,999, both at 100 steps and 1.32 epochs. Both now count epochs x the
    samples per epoch, as samples_to_target does."""
    from types import SimpleNamespace

    data = SimpleNamespace(num_train=994_169)
    cfg = SimpleNamespace(neg_per_pos=4, global_batch_size=65_536)
    per_epoch = 994_169 * 5
    seen = {"steps to target": 100, "epochs to target": 6_522_999 / per_epoch}
    run_here = SimpleNamespace(reached=True, epochs=2.0, samples=2 * per_epoch,
                               epochs_to_target=seen["epochs to target"])
    assert L11._samples_seen(seen, data, cfg) == L11.samples_to_target(run_here) == 6_522_999
    # A saved row from before lesson 02 recorded its epochs still counts steps x batch.
    assert L11._samples_seen({"steps to target": 100}, data, cfg) == 6_553_600
