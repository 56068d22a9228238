"""The run summary: the ladder and every saved scalar, as Markdown and as FIGURE lines (make course, gpu-check).

    python -m course_lib.summary --figures RESULTS_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from .ladder import ladder_reading, ladder_table
from .results import load_results
from .tables import Table


def summary_markdown(directory: Path | None = None) -> str:
    """Markdown for a run summary: the ladder (if any rows) and every saved result's scalars."""
    results = load_results(directory)
    if not results:
        return "_No lesson saved results in this run._"
    parts = []
    if any(n.startswith("ladder_") for n in results):
        reading = ladder_reading(directory).splitlines()
        parts += [ladder_table(directory).to_markdown(), "", *[f"- {line}" for line in reading], ""]
    for name, rec in results.items():
        if name.startswith("ladder_"):
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
