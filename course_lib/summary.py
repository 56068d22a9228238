"""The run summary: the ladder and every saved scalar, as Markdown and as FIGURE lines (make course, gpu-check).

    python -m course_lib.summary --figures RESULTS_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from .compare import RESULT_PREFIX, summary_table, table
from .ladder import LADDER_STEPS, LESSON_RUNGS, ladder_comparisons, ladder_table, mark_failed_lesson, started_below
from .ladder_view import TALK_SOURCE, talk_table
from .results import load_results, save_result
from .tables import Table

FAILURES = "course_failures"  # the record of the lessons that failed in this run


def record_failure(notebook: str, cell: int | None, error: str, *, directory: Path | None = None,
                   since: float | None = None) -> str:
    """What ``make course`` (ci/run_notebooks.py) does when a lesson fails: the failure is recorded in
    the results (lesson, cell, the error's first line), the lesson's rung is marked "not run: lesson NN
    failed at cell K" (:func:`course_lib.ladder.mark_failed_lesson`), and the one line to print is
    returned."""
    name = Path(notebook).stem
    lesson = name[:2]
    step = mark_failed_lesson(lesson, cell, directory=directory, since=since)
    failures = (load_results(directory).get(FAILURES) or {}).get("failed", [])
    first = (error or "").strip().splitlines()[0] if (error or "").strip() else ""
    failures = [f for f in failures if f["notebook"] != name] + [
        {"notebook": name, "lesson": lesson, "cell": cell, "error": first, "rung": step}]
    save_result(FAILURES, {"failed": failures}, directory)
    return (f"lesson {lesson} ({name}) failed at " + (f"cell {cell}" if cell is not None else "its start")
            + (f": {first}" if first else "") + (f"; its rung {step!r} is marked not run" if step else ""))


def failures_markdown(directory: Path | None = None) -> str:
    """The failed lessons, each with its cell and error, and the later rungs that therefore started
    from an earlier rung than their lesson's plan (empty when every lesson ran)."""
    failures = (load_results(directory).get(FAILURES) or {}).get("failed", [])
    if not failures:
        return ""
    lines = ["## Lessons that failed", ""]
    results = load_results(directory)
    for f in failures:
        where = f"cell {f['cell']}" if f.get("cell") is not None else "its start"
        lines.append(f"- lesson {f['lesson']} ({f['notebook']}) failed at {where}"
                     + (f": {f['error']}" if f["error"] else ""))
        if not f.get("rung"):
            continue
        lines.append(f"  - its rung {f['rung']!r} is marked \"not run\" in the ladder")
        for lesson, step in LESSON_RUNGS.items():  # the later rungs saved in this run, and what they built on
            rec = results.get(f"ladder_{LADDER_STEPS.index(step)}")
            if lesson <= f["lesson"] or rec is None or rec.get("failed"):
                continue
            below = started_below(step, directory)
            if below is None or LADDER_STEPS.index(below) < LADDER_STEPS.index(f["rung"]):
                lines.append(f"  - {step!r} (lesson {lesson}) therefore started from "
                             + (f"the {below!r} rung" if below else "its lesson's defaults"))
    return "\n".join(lines) + "\n"


def summary_markdown(directory: Path | None = None) -> str:
    """Markdown for a run summary: the ladder (if any rows) with the talk's ladder beside it
    (:func:`course_lib.ladder_view.talk_table`), and every saved result's scalars."""
    results = load_results(directory)
    if not results:
        return "_No lesson saved results in this run._"
    parts = [failures_markdown(directory)] if FAILURES in results else []
    if any(n.startswith("ladder_") for n in results):
        parts += [ladder_table(directory).to_markdown(), "", talk_table(directory).to_markdown(), "",
                  f"The talk: {TALK_SOURCE}.", ""]
        comparisons = ladder_comparisons(directory)
        if comparisons:
            parts += [table(comparisons, title="The ladder's rungs, at lesson 01's pace").to_markdown(), ""]
    verdicts = summary_table(directory)
    if verdicts is not None:
        parts += [verdicts.to_markdown(), ""]
    for name, rec in results.items():
        if name.startswith(("ladder_", RESULT_PREFIX)) or name == FAILURES:
            continue
        scalars = {k: v for k, v in rec.items() if isinstance(v, (int, float, str, bool)) or v is None}
        t = Table(["quantity", "value"], title=name)
        for k, v in scalars.items():
            t.add(quantity=k, value=v)
        parts += [t.to_markdown(), ""]
    return "\n".join(parts)


def figure_lines(directory: Path | None = None) -> list[str]:
    """One ``FIGURE <lesson>.<quantity> = <value>`` line per measured scalar (for ci/gpu-check.sh)."""
    lines = []
    for name, rec in load_results(directory).items():
        for key, value in sorted(rec.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                lines.append(f"FIGURE {name}.{key} = {value:.6g}")
            elif value is None and (key.endswith("_s") or "to_target" in key):  # a time or a step count
                lines.append(f"FIGURE {name}.{key} = not reached")
    return lines


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--figures":
        raise SystemExit("usage: python -m course_lib.summary --figures RESULTS_DIR")
    print("\n".join(figure_lines(Path(sys.argv[2]))) or "(no results saved)")
