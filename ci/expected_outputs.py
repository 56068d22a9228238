"""Expected outputs of the cells marked ``# NBVAL_CHECK_OUTPUT``, stored in the repository.

nbval compares those cells with the papermill run of the *same* CI job: that proves an output
is reproducible, not that it is right (a wrong schedule table is reproduced identically).
This module holds the other half: the smoke-profile CPU output of every marked cell, in
``tests/expected_outputs.json``, keyed by notebook and cell id. ``tests/test_notebooks.py``
compares each executed notebook with it, so a change that alters a checked output fails until
the file is updated on purpose:

    python ci/expected_outputs.py --update     # after `make test` (reads ci/executed/); review the diff

Cells whose numbers come from float32 arithmetic on generated data (whose last bits may differ
between CPUs) are stored with a relative tolerance (``rtol``): their text must match exactly
once numbers are taken out, and each number within ``rtol`` of the stored one.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXPECTED = REPO / "tests" / "expected_outputs.json"
EXECUTED = REPO / "ci" / "executed"
MARK = "NBVAL_CHECK_OUTPUT"
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def cell_text(cell: dict) -> str:
    """What nbval compares for a cell: its streams and plain-text results, in order."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out.get("text", "")))
        elif out.get("output_type") in ("execute_result", "display_data"):
            parts.append("".join(out.get("data", {}).get("text/plain", "")))
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return _ANSI.sub("", "".join(parts))


def is_marked(cell: dict) -> bool:
    return cell["cell_type"] == "code" and MARK in "".join(cell["source"])


def marked_cells(nb: dict) -> dict[str, dict]:
    return {c["id"]: c for c in nb["cells"] if is_marked(c)}


def checked_prefix(nb: dict) -> dict | None:
    """The notebook up to and including its last marked cell, or None when no cell is marked: what nbval needs to
    re-execute. A cell cannot change the output of one that ran before it, so the prefix checks the marked outputs
    exactly as the whole notebook would, and the training cells after them (most of a lesson's time) are not run a
    second time; that every cell runs is papermill's check."""
    last = max((i for i, c in enumerate(nb["cells"]) if is_marked(c)), default=None)
    return None if last is None else {**nb, "cells": nb["cells"][:last + 1]}


def write_prefixes(executed_dir: Path, out: Path) -> list[Path]:
    """:func:`checked_prefix` of each executed lesson (``executed_dir/notebooks/*.ipynb``), written to
    ``out/notebooks/``; the paths written, in order. Lessons with no marked cell are left out."""
    written = []
    for nb_path in sorted((executed_dir / "notebooks").glob("*.ipynb")):
        prefix = checked_prefix(json.loads(nb_path.read_text()))
        if prefix is not None:
            dest = out / "notebooks" / nb_path.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(json.dumps(prefix, indent=1, ensure_ascii=False) + "\n")
            written.append(dest)
    return written


def key(notebook: Path) -> str:
    """'notebooks/01_baseline.ipynb' for a lesson or its executed copy."""
    return f"{notebook.parent.name}/{notebook.name}"


def load(path: Path = EXPECTED) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{path}: not valid JSON ({exc}); restore it from git or run "
                         "`python ci/expected_outputs.py --update`")


def _numbers_close(got: str, want: str, rtol: float) -> str | None:
    if _NUMBER.sub("#", got) != _NUMBER.sub("#", want):
        return "the text around the numbers differs"
    for g, w in zip(_NUMBER.findall(got), _NUMBER.findall(want)):
        if not math.isclose(float(g), float(w), rel_tol=rtol, abs_tol=0.0):
            return f"{g} is not within {rtol:.0%} of the expected {w}"
    return None


def compare(executed: Path, expected: dict | None = None) -> list[str]:
    """Differences between an executed notebook's marked cells and the stored outputs ([] = all agree)."""
    expected = load() if expected is None else expected
    nb = json.loads(executed.read_text())
    stored = expected.get(key(executed), {})
    cells = marked_cells(nb)
    problems = []
    for cell_id, cell in cells.items():
        if cell_id not in stored:
            problems.append(f"cell {cell_id}: marked {MARK} but has no expected output in {EXPECTED.relative_to(REPO)} "
                            "(run `python ci/expected_outputs.py --update` and review the diff)")
            continue
        want, rtol = stored[cell_id]["text"], stored[cell_id].get("rtol")
        got = cell_text(cell)
        why = (None if got == want else "differs") if rtol is None else _numbers_close(got, want, rtol)
        if why:
            problems.append(f"cell {cell_id}: output {why}\n--- expected\n{want}\n--- got\n{got}")
    for cell_id in stored.keys() - cells.keys():
        problems.append(f"cell {cell_id}: has an expected output but is no longer marked {MARK} (or was removed)")
    return problems


def update(executed_dir: Path = EXECUTED, path: Path = EXPECTED) -> dict:
    """Rewrite the stored outputs of the notebooks executed (keeping each cell's ``rtol``); the other notebooks'
    stored outputs stay, so a smoke run of one lesson (``pytest tests/test_notebooks.py -k notebooks/10``) updates
    that lesson alone instead of dropping the other thirteen."""
    old = load(path)
    new = {k: v for k, v in old.items() if (REPO / k).exists()}
    notebooks = sorted(executed_dir.glob("*/*.ipynb"))
    if not notebooks:
        raise SystemExit(f"{executed_dir} has no executed notebooks: run `make test` first")
    for nb_path in notebooks:
        cells = marked_cells(json.loads(nb_path.read_text()))
        if not cells:
            new.pop(key(nb_path), None)
            continue
        entries = {}
        for cell_id, cell in cells.items():
            entry = {"text": cell_text(cell)}
            rtol = old.get(key(nb_path), {}).get(cell_id, {}).get("rtol")
            if rtol is not None:
                entry["rtol"] = rtol
            entries[cell_id] = entry
        new[key(nb_path)] = entries
    sys.path.insert(0, str(REPO))
    from course_lib.fileio import atomic_write_text

    atomic_write_text(path, json.dumps(new, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    return new


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--update", action="store_true", help="rewrite the stored outputs from ci/executed/")
    parser.add_argument("--executed", type=Path, default=EXECUTED)
    parser.add_argument("--prefixes", type=Path, metavar="OUT",
                        help="write each executed lesson up to its last marked cell to OUT/notebooks/ (for nbval)")
    opts = parser.parse_args(argv)
    if opts.prefixes:
        for path in write_prefixes(opts.executed, opts.prefixes):
            print(path)
        return 0
    if opts.update:
        new = update(opts.executed)
        print(f"{EXPECTED.relative_to(REPO)}: {sum(map(len, new.values()))} cells in {len(new)} notebooks")
        return 0
    bad = 0
    for nb_path in sorted(opts.executed.glob("*/*.ipynb")):
        for problem in compare(nb_path):
            bad += 1
            print(f"{key(nb_path)}: {problem}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
