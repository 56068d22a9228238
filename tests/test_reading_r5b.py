"""Readings fixed after the fifth full-profile read (#37, helper r5b: lessons 05, 06 and 07 of the run of
2026-12-02 in a fresh clone of 8495753; /work/notes/read-full-run-5-r5b.md). Each test feeds the reading that
run's own numbers, which printed a statement its outputs contradict, and the opposite results."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from course_lib import ladder  # noqa: E402
from course_lib.train.ncf import TrainConfig  # noqa: E402

SQRT = dict(base_lr=1e-3, base_batch_size=256, lr_scaling="sqrt", optimizer="adam")
# the run's saved rungs (runs/20261202-025919/results/ladder_*.json): time to target, the seeds', the yardstick
RUNGS = {  # step: (time to target s, seed times, pace before, pace after, config changes, decided_by)
    "baseline": (89.85, [89.85], 92_467, 93_573, dict(global_batch_size=256, base_lr=1e-3, optimizer="adam"), None),
    "+linear scaling": (6.143, [5.812, 6.475], 96_587, 65_128, dict(global_batch_size=16384, **SQRT), None),
    "+warmup": (7.791, [8.346, 7.236], 59_950, 110_024, dict(global_batch_size=65536, warmup_steps=19, **SQRT), None),
    "+LARS": (16.71, [19.35, 14.07], 107_059, 86_376,
              dict(global_batch_size=32768, warmup_steps=76, **{**SQRT, "base_lr": 2e-3, "optimizer": "lamb"}), None),
    "+mixed precision": (5.124, [4.671, 5.577], 91_282, 97_319, dict(global_batch_size=16384, precision="bf16", **SQRT),
                         {"by": "pace", "over": "+linear scaling", "ratio": 1.65, "tolerance": 0.23,
                          "text": "the same 285 steps at 1.65x fp32's pace in lesson 05's interleaved throughput runs "
                                  "(tolerance 23%): helped"}),
}


def _save(d, step, ttt, seeds, before, after, changes, decided_by):
    cfg = TrainConfig(**changes).to_dict()
    ladder.save_ladder_row(step, time_to_target_s=ttt, final_hr=0.752, target_hr=0.75, dataset="synthetic-ml-1m",
                           # the seeds' steps unrecorded: this test reads the yardstick's drift alone, not the spread of
                           # the seeds' step times (ladder.seeds_pace_spread, read r8a 02-1), which 285 steps each gave
                           seed_runs=[{"seed": i, "time_to_target_s": t, "steps_to_target": None}
                                      for i, t in enumerate(seeds)],
                           pace={"before": before, "after": after, "rate": (before + after) / 2}, config=cfg,
                           carry=cfg, steps_to_target=285, decided_by=decided_by, directory=d)


def _figure_labels(d):
    fig = ladder.ladder_figure(d)
    return [t.get_text() for t in fig.axes[0].texts]


def test_the_ladder_figure_shows_each_speedup_as_the_table_does(tmp_path):
    """Read r5b 05-1 (lesson 05 cell 24): the ladder figure labelled the bars "16.8x", "12.6x", "5.2x", "17.3x" beside
    the table's "17x (±34%)", "13x (±85%)", "5x (±21%)", "17x (±8%)", ranking +bf16 above +sqrt scaling where the
    reading says the pace drift ranks neither (plots.plot_ladder formatted the speedup itself). Opposite results:
    a steady pace keeps three figures and no ±, in the figure as in the table."""
    for step, args in RUNGS.items():
        _save(tmp_path, step, *args)
    table = {r["step"]: r["speedup (paced)"] for r in ladder.ladder_table(tmp_path).rows}
    assert table["+sqrt scaling"] == "17x (±34%)" and table["+warmup"] == "13x (±85%)", table
    assert table["+bf16 (the mixed-precision rung)"] == "17x (±8%)", table
    labels = _figure_labels(tmp_path)
    for shown in table.values():  # every disagreement between the figure and the table fails here
        assert any(f"({shown})" in label for label in labels), (shown, labels)
    assert not any("16.8x" in label or "17.3x" in label for label in labels), labels
    # opposite: the yardstick held still in every lesson: three figures, in both
    steady = tmp_path / "steady"
    for step, (ttt, seeds, _, _, changes, decided) in RUNGS.items():
        _save(steady, step, ttt, seeds, 93_000, 93_000, changes, decided)
    table = {r["step"]: r["speedup (paced)"] for r in ladder.ladder_table(steady).rows}
    assert table["+sqrt scaling"] == "14.6x" and table["+bf16 (the mixed-precision rung)"] == "17.5x", table
    labels = _figure_labels(steady)
    assert any("(14.6x)" in label for label in labels) and any("(17.5x)" in label for label in labels), labels


def test_a_passed_over_rung_is_named_as_the_table_shows_it(tmp_path):
    """Read r5b 05-2 (lesson 05 cell 3): "the '+LARS' rung was slower than the '+sqrt scaling' rung (0.3x (±52%))"
    over a ladder whose row for that slot is "+LAMB" (it ran LAMB), while the rung built on was "shown as '+sqrt
    scaling': what ran" (ladder.start_from named only the chosen rung by what ran). Opposite results: a slot whose
    name is what ran (+warmup) gets no "shown as"."""
    for step, args in list(RUNGS.items())[:4]:
        _save(tmp_path, step, *args)
    cfg, best, note = ladder.start_from("+mixed precision", TrainConfig(), dataset="synthetic-ml-1m",
                                        directory=tmp_path)
    assert best["step"] == "+linear scaling" and cfg.global_batch_size == 16384
    assert "the '+LARS' rung (shown as '+LAMB': what ran) was slower than the '+sqrt scaling' rung (0.3x (±52%))" \
        in note, note
    assert "the '+warmup' rung did not help beyond the noise (no measurable difference" in note, note
    assert "(shown as '+warmup'" not in note
    assert note.endswith("so this lesson starts from the '+linear scaling' rung's setting (shown as '+sqrt scaling': "
                         "what ran), the best so far: batch 16384, adam lr 0.008 (sqrt rule), fp32"), note
    # the +LAMB row's ratio is the one the note quotes
    lamb = {r["step"]: r for r in ladder.ladder_rows(tmp_path)}["+LARS"]
    assert lamb["name"] == "+LAMB" and lamb["vs_previous"] == pytest.approx(0.307, abs=0.005)


def test_the_step_pace_that_sizes_lesson_07_is_the_fastest_of_interleaved_repeats(monkeypatch):
    """Read r5b 07-1 (lesson 07 cell 9): "measured pace batch 32 0.518 s/step, batch 256 1.01 s/step; the full plan
    takes 2785 s here": one repeat after one untimed step, while every batch-32 run of the lesson then took 80 steps
    in 10.1-18.3 s (0.126-0.229 s/step). The pace is now the fastest of interleaved repeats after two untimed steps.
    Fed this run's first measurement (0.518 s at batch 32, 1.01 s at 256) and then the runs' pace: 0.15 s is kept;
    opposite results: where the first repeat was the fast one, it is kept; one repeat keeps what it measured."""
    from course_lib.lessons import l07_bert_lamb as study
    from course_lib.train import mlm

    s = study.Study(small_batch=32, large_batch=256, micro_batch=64, small_seqs=2560, large_seqs=10240)
    calls = []

    def fake(paces):
        it = iter(paces)

        def throughput(cfg, data, *, device, steps, warmup_steps):
            calls.append((cfg.global_batch_size, steps, warmup_steps))
            return {"step_s": next(it)}
        return throughput

    monkeypatch.setattr(mlm, "throughput", fake([0.518, 1.01, 0.15, 1.04]))
    assert study.measure_step_s(s, None, device="cpu") == {32: 0.15, 256: 1.01}
    assert calls == [(32, 3, 2), (256, 3, 2), (32, 3, 2), (256, 3, 2)]  # interleaved, two untimed steps each
    monkeypatch.setattr(mlm, "throughput", fake([0.15, 1.01, 0.518, 1.3]))
    assert study.measure_step_s(s, None, device="cpu") == {32: 0.15, 256: 1.01}
    monkeypatch.setattr(mlm, "throughput", fake([0.518, 1.01]))
    assert study.measure_step_s(s, None, device="cpu", repeats=1) == {32: 0.518, 256: 1.01}
