"""Readings of the ninth full run (#37), lessons 08-10 (r9c)."""
from course_lib.parallel import staleness as S


def _rec(mode, straggler, ups, loss, ttt, curve=None):
    return {"mode": mode, "straggler_rank": 2 if straggler else 0, "delay_s": 0.02, "updates_per_s": ups,
            "max_staleness": 39 if mode == "async" else 0, "mean_staleness": 2.0 if mode == "async" else 0,
            "final_loss": loss, "time_to_target_s": ttt, "curve": {"loss": curve or [loss]}}


def test_the_server_reading_says_when_the_asynchronous_loss_rose_after_the_target():
    """Run 20261202-203201, lesson 08 cell 34: "reached the target loss 16.5x sooner (0.0669 s against 1.11 s),
    and only its final loss is worse: ... 1.767 against 0.928" with a target of 1.07 it had reached."""
    records = [_rec("sync", False, 444.2, 1.149, 0.111), _rec("async", False, 1073, 1.639, 0.05567),
               _rec("sync", True, 45.36, 0.9283, 1.105), _rec("async", True, 1141, 1.767, 0.06695,
                                                             curve=[2.3, 1.05, 1.2, 1.767])]
    text = S.server_reading(records)
    assert "its loss rose again after it reached the target (best 1.050, final 1.767)" in text
    records[3]["curve"]["loss"] = [2.3, 1.9, 1.767]  # opposite: still at its best when the budget ran out
    assert "rose again" not in S.server_reading(records)
