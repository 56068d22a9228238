"""What an exercise notebook must show when a learner runs it untouched (stubs still in place).

Shared by tests/test_exercises.py (papermill) and tests/test_browser.py (JupyterLab): every check
cell reports NOT IMPLEMENTED YET -- not PASS, not FAIL, not a traceback.
"""

from __future__ import annotations


def outputs_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        parts.append("".join(out.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


def untouched_exercise_problems(name: str, nb: dict) -> list[str]:
    """Why the executed, untouched exercise ``nb`` is not what a learner should see (empty: it is)."""
    check_cells = [c for c in nb["cells"] if c["cell_type"] == "code" and "checks.check_" in "".join(c["source"])]
    if not check_cells:
        return [f"{name} has no check cell"]
    problems = []
    for cell in check_cells:
        text = outputs_text(cell)
        if "NOT IMPLEMENTED YET" not in text:
            problems.append(f"{name}: a check cell shows {text[:300]!r}, not NOT IMPLEMENTED YET")
        elif "PASS" in text or ": FAIL" in text:
            problems.append(f"{name}: a check cell on a stub shows {text[:300]!r}")
    return problems
