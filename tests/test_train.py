"""The training loop: reaches a target, reports "not reached", keeps evaluation off the clock."""

import json
import math
import pickle
import time

import pytest
import torch

import course_lib.train.ncf as train
from course_lib.results import save_result
from course_lib.train import RunHooks, TrainConfig, evaluate_popularity, train_to_target



CFG = TrainConfig(
    global_batch_size=512, base_lr=5e-3, optimizer="adam", factors=16, layers=(32, 16), eval_every_epochs=0.5
)


def test_reaches_target_and_beats_popularity(data):
    pop_hr, _ = evaluate_popularity(data)
    target = pop_hr + 0.05
    r = train_to_target(data, CFG.replace(target_hr=target, max_epochs=15.0), device="cpu", progress="none",
                        hooks=RunHooks(time_phases=True))
    assert r.reached and r.time_to_target_s > 0 and r.steps_to_target == r.steps
    assert r.best_hr >= target and r.final_hr >= target
    assert r.time_to_target_s <= r.train_time_s + 1e-9
    assert set(r.phase_time_s) == {"sampling", "forward_backward", "optimizer", "evaluation"}
    restored = pickle.loads(pickle.dumps(r))
    assert restored.to_dict() == r.to_dict() and "time to HR@10" in r.summary()


def test_phase_clock_on_cuda_never_synchronizes_a_step_and_always_marks_nvtx(monkeypatch):
    """Timing phases used to synchronize the GPU six times per step (no CPU/GPU overlap),
    and NVTX ranges were emitted only when timing. Simulated CUDA: events and NVTX are fakes."""
    from course_lib.train.engine import PHASES, PhaseClock

    calls = {"sync": 0, "push": 0, "pop": 0}

    class Event:
        clock = 0.0

        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            Event.clock += 0.25
            self.t = Event.clock

        def synchronize(self):
            calls["sync"] += 1

        def elapsed_time(self, end):
            return 1000.0 * (end.t - self.t)  # ms, as CUDA reports

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.__setitem__("sync", calls["sync"] + 1))
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: calls.__setitem__("push", calls["push"] + 1))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: calls.__setitem__("pop", calls["pop"] + 1))
    for enabled in (False, True):
        clock = PhaseClock(torch.device("cuda"), enabled=enabled)
        for _ in range(10):  # ten steps
            for name in PHASES:
                with clock.phase(name):
                    pass
        assert calls["sync"] == 0  # nothing waited for the GPU during the steps
        assert calls["push"] == calls["pop"] == 30 * (1 + enabled)
        seconds = clock.seconds  # read off the clock: now it waits for the events
        assert seconds == ({p: 0.0 for p in PHASES} if not enabled else {p: pytest.approx(2.5) for p in PHASES})
    assert calls["sync"] == 30


@pytest.mark.parametrize(
    "layers,dropout,items", [((128, 64, 32), 0.0, 7), ((64, 32, 16), 0.2, 7), ((32, 16), 0.0, 500)]
)
def test_neumf_scores_candidates_as_its_forward_does(layers, dropout, items):
    """Evaluation ranks each user's candidates with NeuMF.score (first layer split per user and per
    item): the numbers must be forward's, with the item table (few items) and per pair (many)."""
    from course_lib.models.ncf import NeuMF

    torch.manual_seed(0)
    model = NeuMF(30, items, factors=8, layers=layers, dropout=dropout).eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.5)  # away from the init's near-zero logits, where every score looks alike
    users = torch.arange(5, 13)
    cands = torch.randint(0, items, (8, 11))
    with torch.no_grad():
        want = model(users[:, None].expand_as(cands).reshape(-1), cands.reshape(-1)).view(cands.shape)
        got = model.score(users, cands)
    assert got.shape == (8, 11)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    assert torch.equal(got.argsort(dim=1), want.argsort(dim=1))


def test_evaluation_ranks_with_score_and_agrees_with_the_generic_path(data):
    """score_candidates takes NeuMF.score when the model has one, else calls the model on every pair."""
    model = train.build_model(data, CFG)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)

    class PairsOnly(torch.nn.Module):  # the same model without .score
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, users, items):
            return self.inner(users, items)

    fast, generic = train.score_candidates(model, data), train.score_candidates(PairsOnly(model), data)
    torch.testing.assert_close(fast, generic, rtol=1e-5, atol=1e-5 * float(generic.abs().max()))
    assert train.evaluate(model, data) == train.evaluate(PairsOnly(model), data)


def test_impossible_target_is_not_reached(data):
    r = train_to_target(data, CFG.replace(target_hr=1.01, max_epochs=1.0), device="cpu", progress="none")
    assert r.time_to_target_s is None and r.steps_to_target is None and not r.reached
    assert r.epochs == pytest.approx(1.0) and "not reached" in r.summary()


def test_evaluation_is_off_the_clock(data, monkeypatch):
    real = train.evaluate
    spans = []  # (enter, exit) of each evaluation, on the same clock the loop uses

    def slow_evaluate(*a, **k):
        enter = time.perf_counter()
        time.sleep(0.2)
        out = real(*a, **k)
        spans.append((enter, time.perf_counter()))
        return out

    monkeypatch.setattr(train, "evaluate", slow_evaluate)
    t0 = time.perf_counter()
    r = train_to_target(data, CFG.replace(eval_every_epochs=0.25, max_epochs=1.0), device="cpu", progress="none")
    wall = time.perf_counter() - t0
    points = len(r.curve["hr"])  # step 0, 4 quarter-epoch points, maybe one at the epoch's last step
    assert points in (5, 6)
    assert r.eval_time_s >= 0.2 * points
    assert r.train_time_s < wall - 0.2 * points + 0.05
    assert r.curve["time_s"][-1] == pytest.approx(r.train_time_s)
    # Between two evaluation points the training clock advanced by at most the wall time between the
    # end of one evaluation and the start of the next: none of the 0.2 s inside an evaluation counts.
    # (A one-sided bound: no margin for the machine's speed is needed.)
    assert len(spans) >= points
    times = r.curve["time_s"]
    for i in range(1, points):
        assert times[i] - times[i - 1] <= spans[i][0] - spans[i - 1][1], (i, times, spans)


def test_dataloader_path_runs_same_loop(data):
    r = train_to_target(data, CFG.replace(loader="dataloader", global_batch_size=256, max_steps=10), device="cpu",
                        progress="none", hooks=RunHooks(evaluate_points=False))
    assert r.steps == 10 and r.samples == 10 * 256
    assert r.train_time_s > 0 and r.samples_per_s == pytest.approx(r.samples / r.train_time_s)


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


@pytest.mark.parametrize("batch", [1000, 1024, 4096])
def test_steps_per_epoch_is_what_the_loop_iterates(batch):
    from course_lib.data import load_implicit
    from course_lib.train import epochs_to_steps, make_batches, steps_per_epoch

    data = load_implicit("synthetic", profile="smoke")
    cfg = TrainConfig(global_batch_size=batch)
    assert steps_per_epoch(data, cfg) == len(make_batches(data, cfg)) == sum(1 for _ in make_batches(data, cfg))
    assert epochs_to_steps(0.5, data, cfg) == max(1, round(0.5 * steps_per_epoch(data, cfg)))
    assert epochs_to_steps(1e-9, data, cfg) == 1  # a warmup is at least one step


def test_milestones_grow_the_batch_or_divide_the_lr(data):
    """Lesson 11 (Smith et al. 2017): the same epochs, the batch x2 at each milestone, in fewer steps;
    or the lr / 2 at each milestone at the same batch. Both record HR at their evaluation points."""
    base = CFG.replace(max_epochs=3.0, milestones=(1, 2), milestone_factor=2.0, stop_at_target=False)
    grow = train_to_target(data, base.replace(at_milestone="grow_batch"), device="cpu", progress="none")
    decay = train_to_target(data, base, device="cpu", progress="none")
    spe = train.steps_per_epoch(data, CFG)
    assert decay.steps == 3 * spe and decay.epochs == pytest.approx(3.0)
    assert grow.steps == train.planned_steps(data, base.replace(at_milestone="grow_batch")) < decay.steps
    assert grow.epochs == pytest.approx(3.0) and grow.curve["epoch"][-1] == pytest.approx(3.0)
    assert grow.samples == decay.samples  # the same epochs of data
    assert base.lr_factor_at_epoch(2) == 0.25 and base.batch_at_epoch(2) == 512
    assert base.replace(at_milestone="grow_batch").batch_at_epoch(2) == 2048
    with pytest.raises(ValueError, match="whole epochs"):
        CFG.replace(milestones=(2, 1))
    with pytest.raises(ValueError, match="replaces the lr schedule"):
        CFG.replace(milestones=(1,), at_milestone="grow_batch", decay="cosine")

def test_a_growing_run_keeps_the_evaluation_due_at_its_milestone(data):
    """Until the milestone a growing run is the fixed-batch run, so it evaluates at the same steps, the first one
    past the milestone included (an epoch that is no whole number of intervals puts that one just after it)."""
    spe = train.steps_per_epoch(data, CFG)
    every = (spe // 4 + 1) / spe  # an interval that does not divide the epoch: the 4th point falls past its end
    interval = max(1, round(every * spe))
    assert spe % interval != 0, "the data must give an epoch that is no whole number of intervals"
    base = CFG.replace(max_epochs=2.0, milestones=(1,), milestone_factor=2.0, stop_at_target=False,
                       eval_every_epochs=every)
    grow = train_to_target(data, base.replace(at_milestone="grow_batch"), device="cpu", progress="none")
    fixed = train_to_target(data, base, device="cpu", progress="none")

    def up_to_first_past(r):
        steps = r.curve["step"]
        return steps[:next(i for i, s in enumerate(steps) if s >= spe) + 1]

    assert up_to_first_past(grow) == up_to_first_past(fixed)


def test_on_eval_probes_run_off_the_clock_at_every_point(data):
    seen = []

    def probe(model, point):
        seen.append(point["step"])
        time.sleep(0.05)
        return {"weights": sum(p.numel() for p in model.parameters())} if point["step"] else None

    r = train_to_target(data, CFG.replace(max_epochs=1.0, stop_at_target=False), device="cpu", progress="none",
                        hooks=RunHooks(on_eval=probe))
    assert seen == r.curve["step"] and len(r.probes) == len(seen) - 1  # step 0 returned None
    assert r.probes[0]["weights"] > 0 and {"step", "epoch", "samples", "hr"} <= set(r.probes[0])
    assert r.probe_time_s >= 0.05 * len(seen)


def test_evaluations_grow_dense_near_the_target_and_nowhere_else(data):
    """With evaluations every half epoch, every batch size "reached" the target at a multiple of
    half an epoch; near the target they come every dense_eval_every_epochs, so steps to target is
    resolved to that — and a run without the margin evaluates exactly as before."""
    cfg = CFG.replace(eval_every_epochs=0.5, max_epochs=4.0, stop_at_target=False)
    plain = train_to_target(data, cfg.replace(target_hr=0.99), device="cpu", progress="none")
    spe = plain.steps_per_epoch
    assert all(s % round(0.5 * spe) == 0 or s == plain.steps for s in plain.curve["step"])
    target = plain.curve["hr"][3]  # reached at the third regular point by this run
    dense = train_to_target(data, cfg.replace(target_hr=target, dense_eval_margin=1.0, dense_eval_every_epochs=0.1,
                                              stop_at_target=True), device="cpu", progress="none")
    fine, coarse = round(0.1 * spe), round(0.5 * spe)  # a margin of 1: dense from the first point on
    assert all(s % fine == 0 or s % coarse == 0 for s in dense.curve["step"])
    assert max(b - a for a, b in zip(dense.curve["step"], dense.curve["step"][1:])) <= fine
    assert dense.steps_to_target <= plain.curve["step"][3]
    at = dict(zip(dense.curve["step"], dense.curve["hr"]))  # the extra evaluations change nothing in the training
    shared = [s for s in plain.curve["step"] if s in at]
    assert [at[s] for s in shared] == plain.curve["hr"][:len(shared)]
    untouched = train_to_target(data, cfg.replace(target_hr=target, dense_eval_margin=0.0), device="cpu",
                                progress="none")
    assert untouched.curve["step"] == plain.curve["step"]
    with pytest.raises(ValueError, match="dense_eval_every_epochs"):
        TrainConfig(eval_every_epochs=0.25, dense_eval_margin=0.05, dense_eval_every_epochs=0.5)
    TrainConfig(eval_every_epochs=0.01)  # with no margin the dense interval is not used, so not checked
    with pytest.raises(ValueError, match="grow_batch"):
        TrainConfig(dense_eval_margin=0.02, milestones=(1,), at_milestone="grow_batch")
