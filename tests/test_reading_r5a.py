"""Readings of lessons 00-04 fixed after the fifth full-profile run (2026-12-02, /tmp/course10; read by r5a,
/work/notes/read-full-run-5-r5a.md): each test feeds the reading that run's numbers and the opposite results."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from course_lib.lessons import l01_baseline as L01  # noqa: E402
from test_reading_agreement import disagreements  # noqa: E402


def _compile_comp(rows):
    return {"mode": "default", "backend": "inductor", "device": "cpu", "repeats": 3, "error": None,
            "epoch_samples": 4_950_135,
            "rows": [{"batch size": b, "steps": 50, "eager_ms": e, "compiled_ms": c, "compile_s": s, "ratios": q,
                      "cache_hits": 2, "cache_misses": 0} for b, e, c, s, q in rows]}


def test_the_compile_reading_quotes_the_ms_cells_its_table_prints():
    """r5a 01-2: "at batch 16384: compiled steps 1.33x slower (25.71 -> 34.08 ms per step)" over a table whose cells
    read 25.7 and 34.09 (the reading rounded the raw times to 2 decimals, the table rounds them to 3 and prints 4
    significant figures)."""
    comp = _compile_comp([(256, 4.5601, 5.4189, 12.56, [0.9, 0.8, 0.85]),
                          (16384, 25.70504, 34.08549, 5.98, [0.75, 0.76, 0.74])])
    text, table = L01.compile_reading(comp), L01.compile_table(comp)
    assert "25.71" not in text and "34.08 " not in text
    assert "(25.7 -> 34.09 ms per step)" in text and "(4.56 -> 5.419 ms per step)" in text
    assert "16384 | 25.7 | 34.09" in table.to_markdown()
    assert disagreements(text, table) == []
    # opposite: a compiled step measurably faster, its payback read from the same cells
    faster = _compile_comp([(256, 4.5601, 3.0204, 6.0, [1.5, 1.52, 1.49])])
    text = L01.compile_reading(faster)
    assert "(4.56 -> 3.02 ms per step)" in text and "pays back after" in text
    n = L01.payback_steps(faster["rows"][0])
    assert disagreements(text, L01.compile_table(faster), extra=(n * 256 / 4_950_135,)) == []
