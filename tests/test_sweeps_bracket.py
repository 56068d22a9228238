"""The race's grids with cut sweep runs (course_lib.sweeps.race with ``sweep_steps``): the grid brackets its best lr
on cut runs, then that lr alone runs the full length."""

from types import SimpleNamespace

from course_lib import sweeps as search
from course_lib.train.ncf import TrainConfig


def _fake(calls):
    def fake_train(data, cfg, **kw):
        calls.append((cfg.optimizer, cfg.base_lr, cfg.max_steps))
        if cfg.optimizer == "adam":  # reaches the target inside the cut run at its best lr
            t = {0.5e-3: None, 1e-3: 5.0, 2e-3: None}[cfg.base_lr]
            return SimpleNamespace(time_to_target_s=t, best_hr=0.8 if t else 0.7, final_hr=0.7,
                                   config={"peak_lr": cfg.base_lr, "max_steps": cfg.max_steps})
        hr = {2.0: 0.40, 4.0: 0.45, 8.0: 0.50, 16.0: 0.48, 32.0: 0.3}[cfg.base_lr]
        return SimpleNamespace(time_to_target_s=None, best_hr=hr + (0.2 if cfg.max_steps is None else 0.0),
                               final_hr=hr, config={"peak_lr": cfg.base_lr, "max_steps": cfg.max_steps})
    return fake_train


def test_a_cut_sweep_extends_until_bracketed_then_runs_the_best_lr_at_full_length(monkeypatch):
    calls = []
    monkeypatch.setattr(search, "train_to_target", _fake(calls))
    base = TrainConfig(global_batch_size=1024, optimizer="lars", base_lr=4.0, lr_scaling="none")
    results, labels = search.race(None, {"lars": base}, (0.5, 1.0, 2.0), max_extensions=2, sweep_steps=50)
    # 2, 4, 8: best at the edge; 16 brackets it; then 8 again, uncut
    assert calls == [("lars", 2.0, 50), ("lars", 4.0, 50), ("lars", 8.0, 50), ("lars", 16.0, 50), ("lars", 8.0, None)]
    assert labels[-1] == "b1024 lars lr 8" and all(label.endswith(" sweep") for label in labels[:-1])
    assert results[-1].config["max_steps"] is None


def test_a_cut_run_that_reached_the_target_is_not_run_again(monkeypatch):
    calls = []
    monkeypatch.setattr(search, "train_to_target", _fake(calls))
    base = TrainConfig(global_batch_size=1024, optimizer="adam", base_lr=1e-3, lr_scaling="none")
    search.race(None, {"adam": base}, (0.5, 1.0, 2.0), max_extensions=2, sweep_steps=50)
    assert len(calls) == 3 and all(steps == 50 for *_, steps in calls)


def test_without_sweep_steps_every_run_is_full_length_as_before(monkeypatch):
    calls = []
    monkeypatch.setattr(search, "train_to_target", _fake(calls))
    base = TrainConfig(global_batch_size=1024, optimizer="lars", base_lr=4.0, lr_scaling="none", max_steps=70)
    _, labels = search.race(None, {"lars": base}, (0.5, 1.0, 2.0), max_extensions=1)
    assert [c[2] for c in calls] == [70] * 4 and not any("sweep" in label for label in labels)
