"""Every path a learner's own measurements can send a lesson down.

Each lesson that starts from an earlier lesson's rung or result (02-07, 11, 12) is fed every recorded
history of ``tests/_histories.py`` in a fresh results folder, with the **full** profile's settings
(budgets, epochs, grids, histogram lengths) on the suite's tiny data: the shape of every run is the full
one, the time the smoke one. The settings are made by the lesson's **own lines** -- the code cells that
turn carried results into run settings are executed from the notebook, as papermill would run them, up
to the first cell line that trains for long -- and every run they make is then built and trained for a
step or two (the planning, the schedule, the batch arithmetic and the optimizer all run). A test fails
if any path raises.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import _histories as H
from course_lib import ladder
from course_lib.train import train_to_target

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"


def _code_cells(notebook: str) -> list[str]:
    nb = json.loads((NOTEBOOKS / notebook).read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def lesson_lines(notebook: str, containing: str, until: str | None = None, *, start: str | None = None) -> str:
    """The source of ``notebook``'s code cell that contains ``containing``, from its first line that starts
    with ``start`` (default: its first line) up to (not including) its first line that starts with
    ``until`` (default: its end)."""
    cells = [c for c in _code_cells(notebook) if containing in c]
    assert len(cells) == 1, f"{notebook}: {len(cells)} code cells contain {containing!r}; update this test's marker"
    lines = cells[0].splitlines()
    if start is not None:
        first = [i for i, line in enumerate(lines) if line.startswith(start)]
        assert first, f"{notebook}: no line starts with {start!r} in the cell with {containing!r}"
        lines = lines[first[0]:]
    if until is not None:
        stop = [i for i, line in enumerate(lines) if line.startswith(until)]
        assert stop, f"{notebook}: no line starts with {until!r} in the cell with {containing!r}"
        lines = lines[:stop[0]]
    return "\n".join(lines)


@pytest.fixture
def lesson(data, tmp_path, monkeypatch):
    """``run(notebook, *parts) -> namespace``: the lesson's parameters cell (its full profile) and then
    each part (a cell's source) executed in one namespace, on the tiny data, in the results folder
    ``tmp_path`` (fill it with a history first), with the yardstick's pace not timed."""
    monkeypatch.delenv("COURSE_PROFILE", raising=False)  # the full profile's settings
    monkeypatch.setenv("COURSE_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr("course_lib.lesson.load_implicit", lambda *a, **k: data)
    monkeypatch.setattr("course_lib.data.load_implicit", lambda *a, **k: data)
    monkeypatch.setattr(ladder, "yardstick_pace", lambda *a, **k: 1e5)

    def run(notebook: str, *parts: str, **parameters) -> dict:
        ns: dict = {"display": lambda *a, **k: None}
        exec(compile(_code_cells(notebook)[0], f"{notebook} parameters", "exec"), ns)
        assert ns["PROFILE"] == "full"
        ns.update({"TARGET_HR": H.TARGET_HR, **parameters})
        for i, part in enumerate(parts):
            exec(compile(part, f"{notebook} part {i}", "exec"), ns)
        return ns

    return run


def couple_of_steps(data, cfg, steps: int = 2):
    """Build and train ``cfg`` for ``steps`` steps: its full plan (budget, schedule) is what is planned."""
    r = train_to_target(data, cfg.replace(max_steps=steps), device="cpu", progress="none")
    assert 1 <= r.steps <= steps
    return r


@pytest.mark.parametrize("history", H.distinct_below("+warmup"))
def test_lesson03_warmup_from_every_carried_rung(history, lesson, data, tmp_path):
    H.write_ladder(history, tmp_path)
    ns = lesson("03_warmup.ipynb", lesson_lines("03_warmup.ipynb", "s = setup("),
                lesson_lines("03_warmup.ipynb", "cfgs = [cfg]", until="results = run_sweep("))
    for cfg in ns["cfgs"]:  # no warmup, the swept linear warmups, the exponential one
        couple_of_steps(data, cfg)
    # the explorer's run: the best warmup (here: the longest) at the warmup batch, for one epoch
    longest = max(n for _, _, n in ns["warmups"])
    couple_of_steps(data, ns["base_cfg"].replace(global_batch_size=ns["WARMUP_BATCH"], warmup_steps=longest,
                                                 max_epochs=1.0, stop_at_target=False))


@pytest.mark.parametrize("lesson02", list(H.LESSON02_RULES))
def test_lesson03_warmup_where_lesson02s_linear_rule_missed(lesson02, lesson, data, tmp_path):
    """The batch is the smallest where lesson 02's linear rule missed the target and that leaves 8 steps in an epoch
    of the suite's data (4096 here, not 16384), else the next batch up from the rung below."""
    H.write_ladder("baseline only", tmp_path)
    H.write_record("02_linear_scaling", H.LESSON02_RULES[lesson02], tmp_path)
    ns = lesson("03_warmup.ipynb", lesson_lines("03_warmup.ipynb", "s = setup("),
                lesson_lines("03_warmup.ipynb", "cfgs = [cfg]", until="results = run_sweep("))
    missed = ns["study"].linear_misses(H.LESSON02_RULES[lesson02], dataset=H.DATASET, target_hr=H.TARGET_HR,
                                       profile="full", max_batch=ns["samples_per_epoch"](data, ns["start"]) // 8)
    next_up = ns["grown_batch"](ns["start"].global_batch_size, ns["BATCH_GROWTH"], data, ns["start"])[0]
    assert (ns["WARMUP_BATCH"], ns["RULE"]) == ((missed[0], "linear") if missed else (next_up, "linear"))
    assert bool(missed) == (lesson02 == "02 linear rule diverged at 4096")
    for cfg in ns["cfgs"]:  # no warmup and the warmups, at that batch and rule
        assert cfg.lr_scaling == ns["RULE"] and cfg.global_batch_size == ns["WARMUP_BATCH"]
        couple_of_steps(data, cfg, steps=1)


@pytest.mark.parametrize("history", H.distinct_below("+LARS"))
def test_lesson04_lars_from_every_carried_rung(history, lesson, data, tmp_path):
    H.write_ladder(history, tmp_path)
    ns = lesson("04_lars.ipynb", lesson_lines("04_lars.ipynb", "s = setup("),
                lesson_lines("04_lars.ipynb", "adam_cfg = scaled_config(", until="results, labels = race("))
    for optimizer, cfg in ns["starts"].items():  # Adam, LAMB, SGD, LARS at the race's batch and warmup
        couple_of_steps(data, cfg, steps=1)  # (race() multiplies base_lr by LR_FACTORS: the same path)
    ns["study"].layer_gradient_norms(data, ns["base_cfg"], (ns["BASE_BATCH"], ns["BATCH"]), device="cpu")


@pytest.mark.parametrize("history", H.distinct_below("+mixed precision"))
def test_lesson05_mixed_precision_from_every_carried_rung(history, lesson, data, tmp_path):
    """The make course failure is the history "03 long warmup at 65536, 04 not reached"."""
    H.write_ladder(history, tmp_path)
    ns = lesson("05_mixed_precision.ipynb", lesson_lines("05_mixed_precision.ipynb", "s = setup("),
                # the histogram run, trained as the lesson trains it (HIST_EPOCHS of the carried setting)
                lesson_lines("05_mixed_precision.ipynb", "hist_cfg = cfg.replace(", until="fig, fractions"))
    cfg, warm = ns["cfg"], ns["warm"]
    assert warm.config["warmup_steps"] <= warm.steps  # shortened where the run was made, when it was longer
    study = ns["study"]  # the lesson's own module, as its notebook imports it
    # the time-to-target runs, one step each: fp32 at the carried batch; the 16-bit modes (emulated on
    # this CPU, ~20x slower) and the loss-scaling comparison at the carried setting with its batch cut
    # to 1024 (more steps per epoch: the planning at the carried batch is the fp32 run's)
    couple_of_steps(data, cfg.replace(precision="fp32"), steps=1)
    small = cfg.replace(global_batch_size=min(cfg.global_batch_size, 1024))
    for mode in ns["PRECISIONS"]:
        couple_of_steps(data, small.replace(precision=mode), steps=1)
    study.loss_scaling_runs(data, small, steps=1, static_scale=2.0 ** 12, device="cpu", probe_batches=1)
    study.lars_unscale_rows(warm.model, data, cfg)


@pytest.mark.parametrize("history", H.distinct_below("+data parallel"))
def test_lesson06_data_parallel_from_every_carried_rung(history, lesson, data, tmp_path):
    H.write_ladder(history, tmp_path)
    ns = lesson("06_data_parallel.ipynb", lesson_lines("06_data_parallel.ipynb", "s = setup("),
                lesson_lines("06_data_parallel.ipynb", 'start_from("+data parallel"', until="records = launch("),
                lesson_lines("06_data_parallel.ipynb", "check_cfg = cfg.replace(", until="check_dir ="))
    cfg, check_cfg, max_ranks = ns["cfg"], ns["check_cfg"], ns["max_ranks"]
    cfg.check_world_size(max_ranks)  # what launch() checks before it starts a process
    check_cfg.check_world_size(2)
    couple_of_steps(data, cfg)  # one process here; the ranks' own path is tests/test_ddp.py's
    couple_of_steps(data, check_cfg.replace(micro_batch_size=None))
    at_batch = ns["at_batch"]  # as the lesson imports it
    per_rank = cfg.global_batch_size // max_ranks  # cell "weak scaling", as the lesson derives it
    rule = "sqrt" if cfg.optimizer == "adam" else "linear"
    for w in ns["world_sizes"]:
        at_batch(cfg, per_rank * w, rule).check_world_size(w)



@pytest.fixture(scope="module")
def mlm_data(tmp_path_factory):
    """A tiny text set for the BERT runs lessons 11 and 12 make from lesson 07's record."""
    import os

    from course_lib.data.text import Corpus, build_mlm_data, pydoc_corpus

    old = os.environ.get("COURSE_DATA_DIR")
    os.environ["COURSE_DATA_DIR"] = str(tmp_path_factory.mktemp("text-cache"))
    try:
        return build_mlm_data(Corpus("t", "test", tuple(pydoc_corpus().documents[:15])), vocab_size=300, seq_len=16,
                              max_tokens=6000)
    finally:
        if old is None:
            os.environ.pop("COURSE_DATA_DIR")
        else:
            os.environ["COURSE_DATA_DIR"] = old


@pytest.mark.parametrize("history", list(H.BASELINES) + ["01 missing"])
def test_lesson02_linear_scaling_from_lesson01s_record(history, lesson, data, tmp_path):
    H.write_record("01_baseline", H.BASELINES.get(history), tmp_path)
    ns = lesson("02_linear_scaling.ipynb", lesson_lines("02_linear_scaling.ipynb", "s = setup("),
                lesson_lines("02_linear_scaling.ipynb", "baseline = load_baseline(", until="if baseline is None"),
                lesson_lines("02_linear_scaling.ipynb", "cfgs, labels = [], []", until="results = run_sweep("))
    assert ns["baseline"] is None  # a record without a run is not a baseline: the lesson trains its own
    assert ns["BASE_LR"] == (3e-3 if history == "lesson 01's lr" else 1e-3)
    if history == "lesson 01's lr":  # the grid's smallest and largest batch, each rule: the lr is the only change
        for cfg in ns["cfgs"][:: len(ns["BATCHES"]) - 1]:
            couple_of_steps(data, cfg, steps=1)


@pytest.mark.parametrize("history", list(H.LESSON07))
def test_lesson05_reads_lesson07s_bf16_ratio(history, tmp_path, monkeypatch):
    from course_lib.lessons.l05_speed import saved_bert_ratio
    from course_lib.results import load_results

    H.write_record("07_bert_lamb", H.LESSON07[history], tmp_path)
    ratio = saved_bert_ratio(load_results(tmp_path).get("07_bert_lamb"), "full", "cpu")
    assert ratio == (None if history in ("07 missing", "07 from the smoke profile") else 0.2)


@pytest.mark.parametrize("history", list(H.LESSON05))
def test_lesson07_reads_lesson05s_speeds(history, lesson, tmp_path):
    H.write_record("05_mixed_precision", H.LESSON05[history], tmp_path)
    from course_lib import results
    from course_lib.lessons import l07_bert_lamb

    lesson("07_bert_lamb.ipynb")  # the environment: this results folder
    ns = {"results": results, "study": l07_bert_lamb,  # as the notebook imports them
          "tp": {"fp32": {"seqs_per_s": 100.0}, "bf16": {"seqs_per_s": 50.0}},
          # the lesson's own runs, which the pace's drift is taken from: none here, so the stated resolution
          "small_sweep": {}, "sweep": {}, "runs": {}}
    exec(lesson_lines("07_bert_lamb.ipynb", "saved05 = ", start="saved05 = ", until="t"), ns)


@pytest.mark.parametrize("lesson02", list(H.LESSON02))
def test_lesson11_tunes_its_own_curve_and_shows_lesson02s_beside_it(lesson02, lesson, data, tmp_path, monkeypatch):
    from course_lib import train

    H.write_record("02_linear_scaling", H.LESSON02[lesson02], tmp_path)
    swept = []

    def one_step(data, cfg, **kw):  # the lesson's tuned sweep, each run a step long
        swept.append(cfg)
        return couple_of_steps(data, cfg, steps=1)

    ns = lesson("11_batch_size_science.ipynb", lesson_lines("11_batch_size_science.ipynb", "s = setup("))
    monkeypatch.setattr(train, "train_to_target", one_step)
    exec(lesson_lines("11_batch_size_science.ipynb", "study.tuned_sweep(", until="at_target ="), ns)
    # every batch at every lr of the grid (runs that miss the target: no edge to extend past)
    assert len(swept) >= len(ns["SWEEP_BATCHES"]) * len(ns["SWEEP_LR_FACTORS"])
    assert (ns["rule_rows"] is not None) == (lesson02 == "02 with three batches that reached")
    assert ns["fit"]["status"] in ("fit", "beyond range", "no bend", "too few points")


@pytest.mark.parametrize("lesson07", list(H.LESSON07))
def test_lessons11_and_12_make_their_bert_runs_from_lesson07s_record(lesson07, lesson, mlm_data, tmp_path):
    from course_lib.train.mlm import train_mlm

    H.write_record("07_bert_lamb", H.LESSON07[lesson07], tmp_path)
    ns = lesson("11_batch_size_science.ipynb", lesson_lines("11_batch_size_science.ipynb", "s = setup("),
                lesson_lines("11_batch_size_science.ipynb", "bert = study.bert_setting(", until="mlm_data ="))
    bert = ns["bert"]
    assert ("lesson 07's defaults" in bert["source"]) == (lesson07 in ("07 missing", "07 without runs",
                                                                       "07 from the smoke profile"))
    cfg = bert["config"]
    ns["study"].probe_steps(cfg, ns["BERT_PROBES"])
    assert cfg.warmup_steps <= cfg.max_steps  # the full budget is runnable as planned
    train_mlm(cfg.replace(max_steps=2, eval_every_steps=1), mlm_data, device="cpu", progress="none")
    ns = lesson("12_hyperparameter_search.ipynb",
                lesson_lines("12_hyperparameter_search.ipynb", "s = setup(", until="data = load_implicit("),
                lesson_lines("12_hyperparameter_search.ipynb", "bspec = bert_study.bert_spec(", until="mlm_data ="))
    base = ns["bert_study"].bert_base_config(ns["bspec"])  # every BERT trial's starting setting
    train_mlm(base.replace(max_steps=2, eval_every_steps=1), mlm_data, device="cpu", progress="none")
