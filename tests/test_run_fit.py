"""Settings a run cannot take are changed where the run is made, in one place, and said.

``RunSettings.fit_to_run`` decides; every trainer (``train_to_target``, ``train_mlm``, the throughput
probes) calls it through ``course_lib.settings.fit_run`` before its first step. The case that failed a
learner's ``make course``: lesson 05 carried lesson 03's rung (batch 65536, a 38-step warmup) into its
0.25-epoch histogram run, 19 steps at that batch, and ``lr_at`` raised mid-lesson.
"""

import pytest

from course_lib.settings import fit_run
from course_lib.train import RunHooks, TrainConfig, train_to_target
from course_lib.train.mlm import MLMTrainConfig
from course_lib.train.ncf import fit_to_data, steps_per_epoch


class Ml1mAtFullSize:
    """What the planning reads of the full profile's data: ~990,000 training positives (synthetic-ml-1m)."""

    name = "synthetic-ml-1m"
    num_train = 990_000


CARRIED = dict(global_batch_size=65536, optimizer="adam", base_lr=1e-3, base_batch_size=256, lr_scaling="sqrt",
               warmup_steps=38, warmup="linear", max_epochs=3.0, eval_every_epochs=0.25, dense_eval_margin=0.05)


def test_lesson05s_histogram_run_plans_the_19_steps_that_failed_and_its_warmup_is_shortened_to_them(capsys):
    carried = TrainConfig(**CARRIED)
    hist = carried.replace(precision="fp32", max_epochs=0.25, stop_at_target=False)  # lesson 05, cell 6
    assert steps_per_epoch(Ml1mAtFullSize, hist) == 76
    fitted = fit_to_data(Ml1mAtFullSize, hist, label="histogram run")
    assert fitted.warmup_steps == 19 and fitted.replace(warmup_steps=38) == hist  # nothing else changed
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("note (histogram run): linear warmup shortened from 38 to 19 steps")
    # the carried setting itself, over its own 3 epochs (228 steps), is left as it is, and nothing is printed
    assert fit_to_data(Ml1mAtFullSize, carried) is carried and capsys.readouterr().out == ""


def test_lesson05s_failing_case_trains_on_tiny_data_and_records_the_warmup_it_ran(data, capsys):
    """The error a run stopped with before settings were fitted: ``warmup_steps=38 is more than total_steps=1``."""
    hist = TrainConfig(**CARRIED, target_hr=0.5).replace(precision="fp32", max_epochs=0.25, stop_at_target=False)
    r = train_to_target(data, hist, device="cpu", progress="none",
                        hooks=RunHooks(evaluate_points=False, keep_model=True))
    assert r.steps == 1 and r.config["warmup_steps"] == 1  # the record says what ran
    assert "warmup shortened from 38 to 1 step (the whole run)" in capsys.readouterr().out


def test_the_other_derived_quantities_milestones_evaluation_interval_micro_batch():
    cfg = TrainConfig(global_batch_size=1024, micro_batch_size=4096, max_epochs=1.5, milestones=(1, 2, 3),
                      eval_every_epochs=2.0)
    fitted, notes = cfg.fit_to_run(100)
    assert fitted.milestones == (1,) and fitted.eval_every_epochs == 1.5 and fitted.micro_batch_size == 1024
    assert len(notes) == 3 and "milestones at epoch 2, 3 dropped: this run ends at epoch 1.5" in notes[1]
    assert "micro batch 4096 is more than one rank's share of the batch (1024)" in notes[0]
    assert cfg.batch(2).micro_batch_size == 512  # the batch arithmetic agrees with what the run takes
    # per rank: a micro batch that fits one process can be too large for each of 4
    ok = TrainConfig(global_batch_size=1024, micro_batch_size=512)
    assert ok.fit_to_run(10)[0] is ok and ok.fit_to_run(10, world_size=4)[0].micro_batch_size == 256
    with pytest.raises(ValueError, match="planned_steps must be a positive integer"):
        ok.fit_to_run(0)


def test_bert_runs_fit_their_budget_too(capsys):
    m = MLMTrainConfig(max_steps=5, warmup_steps=10, eval_every_steps=20, global_batch_size=32, micro_batch_size=64)
    fitted = fit_run(m, m.max_steps, label=m.name())
    assert (fitted.warmup_steps, fitted.eval_every_steps, fitted.micro_batch_size) == (5, 5, 32)
    assert [fitted.lr_at(s) for s in range(6)][-1] == pytest.approx(fitted.peak_lr)  # warmup to the end, no error
    out = capsys.readouterr().out
    assert out.startswith("note (lamb b=32): linear warmup shortened from 10 to 5 steps") and out.count("\n") == 1
    fit_run(m, m.max_steps, quiet=True)  # ranks > 0 say nothing
    assert capsys.readouterr().out == ""
