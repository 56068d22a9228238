"""Small readings fixed after the eighth full-profile read (#37, points its readers saw but did not count)."""

import json
import re
from pathlib import Path

from course_lib.lessons import l11_batch_size_science as l11

REPO = Path(__file__).resolve().parents[1]


def test_a_small_b_crit_is_printed_to_the_figures_its_ratio_was_taken_from():
    """r8d 11-S5: "B_crit = 26: B_simple is 3.37x it", the ratio taken over the unrounded 25.6 (26 gives 3.32x)."""
    rows = [{"batch size": 32, "steps to target": 18}, {"batch size": 256, "steps to target": 11}]
    b_crit = l11.two_point_critical_batch(rows)
    assert 20 < b_crit < 100
    text = l11.bert_noise_verdict(86.0, rows, stderr=10.0)
    shown = float(re.search(r"B_crit = ([\d.,]+):", text).group(1))
    ratio = float(re.search(r"B_simple is ([\d.]+)x it", text).group(1))
    assert abs(86.0 / shown - ratio) < 0.006  # the ratio follows from the B_crit printed, to its 2 decimals
    large = [{"batch size": 32, "steps to target": 400}, {"batch size": 256, "steps to target": 60}]
    assert re.search(r"B_crit = [\d,]+:", l11.bert_noise_verdict(5000.0, large, stderr=100.0))  # no decimals


def test_lesson_06_says_a_compression_hook_that_did_not_run_did_not_run():
    """r8b 06-S: "bf16: half the bytes (or not run, for the reason printed above): True" for a row that never ran."""
    nb = json.loads((REPO / "notebooks" / "06_data_parallel.ipynb").read_text())
    cell = "".join(next(c for c in nb["cells"] if c.get("id") == "l06-compression-check")["source"])
    assert "(or not run" not in cell and "not run (the reason is printed above)" in cell
