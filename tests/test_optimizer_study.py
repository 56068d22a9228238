"""The edge-extending sweep (course_lib.sweeps) and the optimizer races and lr sweeps built on it."""

import math

import pytest

from course_lib.sweeps import sweep_with_edge_extension


@pytest.mark.parametrize("best, expected_grid", [
    (0.45, [0.25, 0.5, 1.0]),  # inside the grid: no extension
    (0.05, [0.0625, 0.125, 0.25, 0.5, 1.0]),  # below the grid: halve twice (max_extensions=2)
    (3.0, [0.25, 0.5, 1.0, 2.0, 4.0]),  # above: double until the best is inside
])
def test_sweep_with_edge_extension(best, expected_grid):
    calls = []

    def run(f):
        calls.append(f)
        return {"loss": abs(math.log(f / best))}

    done = sweep_with_edge_extension(run, (1.0, 0.25, 0.5), lambda r: r["loss"], max_extensions=2)
    assert sorted(calls) == expected_grid and list(done) == expected_grid  # each factor runs once, in order


def test_race_gives_each_optimizer_its_own_best_lr_and_extends_an_edge(monkeypatch):
    """Each optimizer is swept around its own starting lr; a best at the grid's edge gets one
    more point beyond it. Fake runs: Adam reaches the target fastest at its starting lr, SGD
    only gets better with a larger lr and never reaches it."""
    from types import SimpleNamespace

    from course_lib import sweeps as search
    from course_lib.train.ncf import TrainConfig

    def fake_train(data, cfg, **kw):
        lr = cfg.base_lr
        if cfg.optimizer == "adam":
            t = {0.5e-3: 9.0, 1e-3: 5.0, 2e-3: 7.0}[lr]
            return SimpleNamespace(time_to_target_s=t, best_hr=0.8, final_hr=0.8, config={"peak_lr": lr})
        return SimpleNamespace(time_to_target_s=None, best_hr=min(0.7, lr / 100), final_hr=0.1,
                               config={"peak_lr": lr})

    monkeypatch.setattr(search, "train_to_target", fake_train)
    base = TrainConfig(global_batch_size=1024, optimizer="adam", base_lr=1e-3, lr_scaling="none")
    starts = {"adam": base, "sgd": base.replace(optimizer="sgd", base_lr=8.0)}
    results, labels = search.race(None, starts, (0.5, 1.0, 2.0), max_extensions=1)
    assert labels == ["b1024 adam lr 0.0005", "b1024 adam lr 0.001", "b1024 adam lr 0.002",
                      "b1024 sgd lr 4", "b1024 sgd lr 8", "b1024 sgd lr 16", "b1024 sgd lr 32"]
    assert search.race_score(results[1]) == (0, 5.0) and search.race_score(results[-1]) == (1, -0.32)
    assert min(results[:3], key=search.race_score).config["peak_lr"] == 1e-3


def test_lr_sweep_extends_a_best_at_the_edge(monkeypatch):
    """Lesson 01's sweep: the best of (1e-3, 2e-3, 5e-3) was 1e-3, the grid's edge; with
    ``max_extensions`` the sweep tries 5e-4 (and 2.5e-4) before it settles."""
    from types import SimpleNamespace

    from course_lib import sweeps as search
    from course_lib.train.ncf import TrainConfig

    def fake_train(data, cfg, **kw):
        hr = {2.5e-4: 0.60, 5e-4: 0.70, 1e-3: 0.65, 2e-3: 0.6, 5e-3: 0.5}.get(cfg.base_lr, 0.4)
        return SimpleNamespace(final_hr=hr, final_ndcg=hr / 2, epochs=0.5, steps=10, curve={"loss": [0.3]},
                               config={"optimizer": cfg.optimizer, "peak_lr": cfg.base_lr, "base_lr": cfg.base_lr})

    monkeypatch.setattr(search, "train_to_target", fake_train)
    cfg = TrainConfig(global_batch_size=256, optimizer="adam", base_lr=1e-3)
    _, best, runs = search.lr_sweep(None, cfg, (1e-3, 2e-3, 5e-3), max_extensions=2)
    assert best == 5e-4 and [r.config["base_lr"] for r in runs] == [2.5e-4, 5e-4, 1e-3, 2e-3, 5e-3]
    _, best, runs = search.lr_sweep(None, cfg, (1e-3, 2e-3, 5e-3))
    assert best == 1e-3 and len(runs) == 3


def test_lr_sweep_says_each_run_as_it_ends(data, capsys, monkeypatch):
    """A sweep's runs each print a line as they end (papermill streams it to make course's
    output), not nothing until the table; one line per run, not one per evaluation."""
    from course_lib import sweeps as search
    from course_lib.train.ncf import TrainConfig

    monkeypatch.delenv("COURSE_PROGRESS", raising=False)
    cfg = TrainConfig(global_batch_size=1024, optimizer="adam", base_lr=1e-3, eval_every_epochs=0.05)
    _, _, runs = search.lr_sweep(data, cfg, (1e-3, 4e-3), max_epochs=0.1,
                                 extra=(cfg.replace(optimizer="sgd", base_lr=0.1),))
    # each run's end: its settings and where it got (outside a notebook a line as it begins comes first)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[") and " -> " in line]
    assert len(runs) == 3 and len(lines) == 3, lines
    assert [line.split("]")[0] for line in lines] == ["[adam lr 0.001", "[adam lr 0.004", "[sgd lr 0.1"]


