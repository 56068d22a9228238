"""The training loop: reaches a target, reports "not reached", keeps evaluation off the clock."""

import json
import math
import pickle
import time

import pytest

import course_lib.train.ncf as train
from course_lib.results import save_result
from course_lib.train import TrainConfig, evaluate_popularity, train_to_target



CFG = TrainConfig(global_batch_size=512, base_lr=5e-3, optimizer="adam", factors=16, layers=(32, 16), eval_every_epochs=0.5)


def test_reaches_target_and_beats_popularity(data):
    pop_hr, _ = evaluate_popularity(data)
    target = pop_hr + 0.05
    r = train_to_target(data, CFG.replace(target_hr=target, max_epochs=15.0), device="cpu", progress="none")
    assert r.reached and r.time_to_target_s > 0 and r.steps_to_target == r.steps
    assert r.best_hr >= target and r.final_hr >= target
    assert r.time_to_target_s <= r.train_time_s + 1e-9
    assert set(r.phase_time_s) == {"sampling", "forward_backward", "optimizer", "evaluation"}
    restored = pickle.loads(pickle.dumps(r))
    assert restored.to_dict() == r.to_dict() and "time to HR@10" in r.summary()


def test_impossible_target_is_not_reached(data):
    r = train_to_target(data, CFG.replace(target_hr=1.01, max_epochs=1.0), device="cpu", progress="none")
    assert r.time_to_target_s is None and r.steps_to_target is None and not r.reached
    assert r.epochs == pytest.approx(1.0) and "not reached" in r.summary()


def test_evaluation_is_off_the_clock(data, monkeypatch):
    real = train.evaluate

    def slow_evaluate(*a, **k):
        time.sleep(0.2)
        return real(*a, **k)

    monkeypatch.setattr(train, "evaluate", slow_evaluate)
    t0 = time.perf_counter()
    r = train_to_target(data, CFG.replace(eval_every_epochs=0.25, max_epochs=1.0), device="cpu", progress="none")
    wall = time.perf_counter() - t0
    points = len(r.curve["hr"])  # step 0, 4 quarter-epoch points, maybe one at the epoch's last step
    assert points in (5, 6)
    assert r.eval_time_s >= 0.2 * points
    assert r.train_time_s < wall - 0.2 * points + 0.05
    assert r.curve["time_s"][-1] == pytest.approx(r.train_time_s)


def test_dataloader_path_runs_same_loop(data):
    r = train_to_target(data, CFG.replace(loader="dataloader", global_batch_size=256, max_steps=10), device="cpu",
                        progress="none", evaluate_points=False)
    assert r.steps == 10 and r.samples == 10 * 256 and r.samples_per_s > 0


def test_config_is_checked():
    with pytest.raises(ValueError, match="optimizer"):
        TrainConfig(optimizer="rmsprop")
    with pytest.raises(ValueError, match="loader"):
        TrainConfig(loader="magic")


def test_save_result_atomic_json(tmp_path, monkeypatch, data):
    monkeypatch.setenv("COURSE_RESULTS_DIR", str(tmp_path / "results"))
    r = train_to_target(data, CFG.replace(max_steps=5), device="cpu", progress="none")
    path = save_result("01_baseline", r, lesson="01")
    loaded = json.loads(path.read_text())
    assert loaded["lesson"] == "01" and loaded["steps"] == 5 and loaded["time_to_target_s"] is None
    assert [p.name for p in path.parent.iterdir()] == ["01_baseline.json"]
    assert not math.isnan(loaded["train_time_s"]) and loaded["curve"]["loss"][0] is None
