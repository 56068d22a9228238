"""How many lines each cell of an executed lesson prints (at most ~40 per cell).

    python ci/output_length.py runs/latest/notebooks            # a full run's executed lessons
    python ci/output_length.py --max 40 ci/executed/notebooks a.ipynb

Prints every cell over the limit as ``lesson, cell index (id): lines`` and exits 1 when there is one.
A line is a non-blank line of text the cell shows: its stdout/stderr streams (a carriage return
rewrites its line, as a terminal shows a tqdm bar: one line, not one per update), its plain-text
results, and an error's traceback. A result that also has an image or HTML form is shown as that
(a figure, a table), so its text form is not counted. tests/test_output_length.py runs this on the
smoke copies ``make test`` executes into ci/executed/notebooks/.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MAX_LINES = 40


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def shown_lines(text: str) -> int:
    """Non-blank lines of ``text`` as a terminal shows it: each ``\\r`` starts its line over."""
    return sum(1 for line in text.split("\n") if line.rstrip("\r").split("\r")[-1].strip())


def output_lines(output: dict) -> int:
    """Lines one cell output shows (see the module's docstring)."""
    kind = output.get("output_type")
    if kind == "stream":
        return shown_lines(_text(output.get("text")))
    if kind in ("execute_result", "display_data"):
        data = output.get("data", {})
        if "image/png" in data or "image/svg+xml" in data or "text/html" in data:
            return 0
        return shown_lines(_text(data.get("text/plain")))
    if kind == "error":
        return sum(shown_lines(line) for line in output.get("traceback", []))
    return 0


def cell_lines(notebook: dict) -> list[tuple[int, str, int]]:
    """``(cell index, cell id, lines printed)`` for every code cell of an executed notebook."""
    return [(i, c.get("id", ""), sum(output_lines(o) for o in c.get("outputs", [])))
            for i, c in enumerate(notebook["cells"]) if c["cell_type"] == "code"]


def long_cells(path: Path, max_lines: int = MAX_LINES) -> list[tuple[int, str, int]]:
    """The cells of the executed notebook at ``path`` that print more than ``max_lines`` lines."""
    return [row for row in cell_lines(json.loads(Path(path).read_text())) if row[2] > max_lines]


def notebooks(paths) -> list[Path]:
    """Executed lessons under ``paths`` (folders: their ``NN_*.ipynb``), in lesson order."""
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(q for q in p.glob("[0-9][0-9]_*.ipynb"))
        elif p.suffix == ".ipynb" and p.exists():
            found.append(p)
        else:
            raise SystemExit(f"output_length: {p} is neither an executed notebook nor a folder of them")
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="executed notebooks, or folders of them")
    parser.add_argument("--max", type=int, default=MAX_LINES, help=f"lines a cell may print (default {MAX_LINES})")
    args = parser.parse_args(argv)
    over = 0
    for nb in notebooks(args.paths):
        for index, cid, n in long_cells(nb, args.max):
            over += 1
            print(f"{nb.name}: cell {index} ({cid}) prints {n} lines")
    print(f"{over} cell(s) over {args.max} lines")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
