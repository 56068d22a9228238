"""#37 item 1 for the readings of lessons 02, 03, 05 and 06 that had no table-agreement test: each number a
reading quotes is a cell of the table printed with it, the ratio of two cells of one column, or derived by
the rule the test names (``extra``). The opposite-results tests of item 2 for the same readings sit beside
them (and in the lessons' own test files). Constructed inputs only: a fraction of a second."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from test_reading_agreement import _columns, disagreements  # noqa: E402

from course_lib.lessons import l06_data_parallel as L06  # noqa: E402


def _cells(table) -> list[float]:
    return [v for col in _columns(table) for v in col]


def _differences(table) -> list[float]:
    cells = _cells(table)
    return [a - b for a in cells for b in cells]


# --------------------------------------------------------------------------- lesson 06


def test_lesson_06s_overlap_reading_quotes_the_bucket_table():
    from test_data_parallel_study import cpu_tier, eight_gpu_tier

    for result in (cpu_tier(), eight_gpu_tier()):
        table = result.table()
        # derived: differences of two step cells (ms saved), their share of the larger (the %), the step's
        # communication share ((step - floor) / step), each as a difference or ratio of cells
        cells = _cells(table)
        shares = [(a - b) / a for a in cells for b in cells if a]
        extra = _differences(table) + shares + [1]
        assert disagreements(L06.overlap_reading(result), table, extra=extra) == []


def test_lesson_06s_compression_reading_quotes_the_compression_table():
    from test_data_parallel_study import cpu_tier

    result = cpu_tier()
    table = result.compression_table()
    # derived: differences of the step cells and their share of the uncompressed step, the loss difference's
    # share of what the uncompressed run gained, 2^-11 (fp16's rounding), 16 (bits); the final losses at one
    # more decimal than the table's "first -> last" (the difference between them is smaller than the table's
    # last digit: 0.90243 against 0.90252 in the full run)
    losses = [r["final_loss"] for r in result.compression_rows if r.get("final_loss") is not None]
    ref = result.compression_rows[0]
    gained = ref["first_loss"] - ref["final_loss"]
    steps = [r["step_ms"] for r in result.compression_rows if r.get("step_ms") is not None]
    extra = ([a - b for a in steps for b in steps] + [(a - ref["step_ms"]) / ref["step_ms"] for a in steps]
             + [abs(x - ref["final_loss"]) / gained for x in losses] + [gained, 16, 2, 11] + losses
             # the timed steps (the rows' own count); the update in units of 2^-11; torch's quoted refusal
             + [ref["steps"]] + [r["update_rel_diff"] * 2 ** 11 for r in result.compression_rows
                                 if r.get("update_rel_diff") is not None] + [11, 2.10])
    assert disagreements(L06.compression_reading(result), table, extra=extra) == []
