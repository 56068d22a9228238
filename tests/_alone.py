"""Every lesson runs alone, in a fresh results folder: which lessons read an earlier lesson's saved
results, and the lines each prints when they are missing.

Run alone, in a fresh results folder, a lesson falls back to its own defaults for every earlier result and says
so. Two tests check it, the same way: tests/test_browser.py, which empties its JupyterLab's results folder before
each lesson, and, where the browser tests cannot run (no Chromium or no Playwright: ``_lab.browser_missing``),
tests/test_notebooks.py::test_lesson_runs_alone_in_a_fresh_results_folder with papermill. tests/conftest.py skips
the second wherever the first runs that lesson. The lessons' chain with carried results is
tests/test_notebooks.py::test_notebook_executes_in_smoke_profile (and nbval after it).
"""

from __future__ import annotations

# The lessons that read an earlier lesson's saved results, and the lines each prints when they are missing.
# (The others read none: test_the_lessons_that_run_alone_are_those_that_read_earlier_results.)
ALONE = {
    "02_linear_scaling.ipynb": ["lesson 01 has not saved an lr", "lesson 01's baseline run is not saved here"],
    "03_warmup.ipynb": ["lesson 01 has not saved an lr", "rung is saved: this lesson's default setting",
                        "lesson 02's linear rule missed nowhere saved"],
    "04_lars.ipynb": ["lesson 01 has not saved an lr", "rung is saved: this lesson's default setting"],
    "05_mixed_precision.ipynb": ["lesson 01 has not saved an lr", "rung is saved: this lesson's default setting",
                                 "not saved here (lesson 07 measures it)"],
    "06_data_parallel.ipynb": ["rung is saved: this lesson's default setting"],
    "07_bert_lamb.ipynb": ["lesson 05's NeuMF ratio is not saved here"],
    "08_collectives.ipynb": ["lesson 06 has not saved an all-reduce fit here"],
    "09_performance_model.ipynb": ["lesson 06 has not saved its strong/weak scaling runs here",
                                   "lesson 02's steps to target are not here"],
    "10_model_parallelism.ipynb": ["lesson 09 has not saved its per-step overhead here"],
    "11_batch_size_science.ipynb": ["lesson 01 has not saved an lr", "lesson 02's result is missing",
                                    "lesson 07's defaults"],
    "12_hyperparameter_search.ipynb": ["lesson 07 has not saved a smoke-profile run here"],
    "13_multi_node.ipynb": ["lesson 02 has not run here"],
}
READS_RESULTS = ("load_results(", "start_from(", "load_baseline(", "baseline_lr(")


def output_text(nb: dict) -> str:
    """The text a notebook's saved outputs show: streams and ``text/plain``."""
    return "\n".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                     for c in nb["cells"] for o in c.get("outputs", []))


def missing_fallbacks(name: str, text: str) -> list[str]:
    """The lines lesson ``name`` prints when run alone that ``text`` lacks (none for a lesson not in ALONE)."""
    return [line for line in ALONE.get(name, []) if line not in text]
