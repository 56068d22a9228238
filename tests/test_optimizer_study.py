"""Lesson 07's study helpers (course_lib.optimizer_study) and the edge-extending sweep (course_lib.search)."""

import math

import pytest

from course_lib import optimizer_study as st
from course_lib.search import sweep_with_edge_extension


def record(evals, *, best=None, diverged=False, label="run", batch=256, steps=None):
    """A train_mlm-shaped record with held-out losses ``evals`` at steps 10, 20, ... (1 s apart)."""
    steps_ = [10 * (i + 1) for i in range(len(evals))]
    finite = [x for x in evals if math.isfinite(x)]
    return {"label": label, "config": {"global_batch_size": batch, "peak_lr": 1e-3}, "diverged": diverged,
            "best_eval_loss": best if best is not None else (min(finite) if finite else None),
            "final_eval_loss": evals[-1], "steps": steps or steps_[-1], "seqs_per_s": 100.0,
            "curves": {"eval_step": steps_, "eval_loss": list(evals), "eval_time_s": [float(i + 1) for i in range(len(evals))]}}


def test_time_to_loss_is_the_first_evaluation_at_or_below_the_target():
    r = record([5.0, 4.5, 4.2, 4.3, 4.1])
    assert st.time_to_loss(r, 4.2) == (3.0, 30)
    assert st.time_to_loss(r, 4.0) == (None, None)
    assert st.time_to_loss(record([math.nan, 4.0]), 4.5) == (2.0, 20)  # NaN never counts as reached


def test_verdict_each_case():
    target = 4.2
    both_never = st.verdict(record([4.6, 4.5]), record([4.4, 4.3]), target)
    assert both_never[0] == "lamb" and "neither reached" in both_never[1]
    assert st.verdict(record([4.6]), record([4.1]), target) == ("lamb", "LAMB reached the target where Adam did not")
    assert st.verdict(record([4.1]), record([4.6]), target) == ("adam", "Adam reached the target where LAMB did not")
    fewer = st.verdict(record([4.5, 4.1]), record([4.15, 4.0]), target)  # lamb at step 10, adam at 20
    assert fewer[0] == "lamb" and "step 20" in fewer[1] and "step 10" in fewer[1]
    tie = st.verdict(record([4.1], best=4.0), record([4.15], best=4.1), target)  # same evaluation: lower loss
    assert tie[0] == "adam" and "same evaluation" in tie[1]
    diverged = st.verdict(record([4.5], best=4.5), record([4.4], best=4.4, diverged=True), target)
    assert diverged[0] == "adam"  # a diverged run never wins on its best loss


def test_seeds_agree_sentence():
    assert st.seeds_agree(["lamb", "lamb"], 256).startswith("Both seeds agree: lamb")
    assert "within the noise" in st.seeds_agree(["lamb", "adam"], 256)


def test_study_config_states_the_settings_once():
    study = st.Study(small_batch=32, large_batch=256, micro_batch=64, small_seqs=7680, large_seqs=30720,
                     common=dict(model="tiny", dropout=0.0))
    small, large = study.config("adam", 32), study.config("lamb", 256, lr_factor=0.5, seed=1)
    assert (small.max_steps, small.warmup_steps, small.micro_batch_size) == (240, 24, 32)
    assert (large.max_steps, large.warmup_steps, large.micro_batch_size, large.seed) == (120, 24, 64, 1)
    assert large.batch(1).grad_accum_steps == 4 and large.eval_every_steps == 6
    assert large.peak_lr == pytest.approx(1e-2 * 0.5 * math.sqrt(256 / 32))  # sqrt rule from the small batch
    assert small.peak_lr == pytest.approx(1e-3) and small.model == "tiny"


def test_summary_and_best_of():
    a, b = record([4.5, 4.1], label="lamb x1"), record([4.4, 4.3], label="lamb x2")
    assert st.best_of({"lamb x1": a, "lamb x2": b, "adam x1": record([3.0])}, "lamb") is a
    s = st.summary(a, 4.2)
    assert (s["steps_to_loss"], s["time_to_loss_s"], s["eval_loss_curve"]) == (20, 2.0, [(10, 4.5), (20, 4.1)])


def test_trust_ratio_spread():
    r = {"trust_ratios": {"w1": [0.02, 0.04], "w2": [0.01, 0.04]}}
    out = st.trust_ratio_spread(r)
    assert (out["first_min"], out["first_max"]) == pytest.approx((0.01, 0.02))
    assert out["spread"].tolist() == pytest.approx([2.0, 1.0]) and out["spread_max"] == pytest.approx(2.0)


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


def test_budget_never_passes_over_a_small_corpus_more_than_the_cap():
    """#12.10: lesson 07 on one GPU with the pydoc corpus trained ~100 epochs of ~950 sequences."""
    small, large, note = st.budget(256, 950, large_batches=100)
    assert large <= st.MAX_EPOCHS * 950 and small * 4 == large and "capped" in note and "950" in note
    assert st.budget(256, 100_000, large_batches=30) == (7680, 30720, "")  # a large corpus: uncapped
    assert st.budget(256, 10, large_batches=30)[0] == 256  # never less than one large batch
    with pytest.raises(ValueError, match="num_train=0"):
        st.budget(256, 0, large_batches=30)


def test_race_gives_each_optimizer_its_own_best_lr_and_extends_an_edge(monkeypatch):
    """Each optimizer is swept around its own starting lr; a best at the grid's edge gets one
    more point beyond it. Fake runs: Adam reaches the target fastest at its starting lr, SGD
    only gets better with a larger lr and never reaches it."""
    from types import SimpleNamespace

    from course_lib import search
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


def test_warmup_reading_compares_the_best_warmup_with_none():
    from types import SimpleNamespace

    from course_lib.search import warmup_reading

    def run(t, steps, warm, kind="linear", diverged=False, hr=0.8):
        return SimpleNamespace(time_to_target_s=t, steps_to_target=steps, diverged=diverged, best_hr=hr, final_hr=hr,
                               config={"warmup_steps": warm, "warmup": kind})

    labels = ["no warmup", "linear 10", "linear 20", "linear 40", "exponential 20"]
    results = [run(None, None, 0, diverged=True, hr=None), run(9.0, 90, 10), run(6.0, 60, 20), run(8.0, 80, 40),
               run(7.0, 70, 20, "exponential")]
    text = warmup_reading(results, labels)
    assert text.startswith("best warmup: linear 20, reached the target in 6.0 s (60 steps)")
    assert "without warmup the run diverged" in text and "made this batch reach the target at all" in text
    results[0] = run(12.0, 120, 0)
    results[3] = run(5.0, 50, 40)  # the longest warmup wins: flagged
    text = warmup_reading(results, labels)
    assert "linear 40 (the edge of the lengths tried" in text
    assert "On this seed warmup took fewer steps: without it 2.40x the steps" in text and "two seeds decides" in text
    results[0] = run(5.1, 50, 0)
    assert "On this seed no difference in steps to target" in warmup_reading(results, labels)


def test_lr_sweep_extends_a_best_at_the_edge(monkeypatch):
    """Lesson 01's sweep: the best of (1e-3, 2e-3, 5e-3) was 1e-3, the grid's edge; with
    ``max_extensions`` the sweep tries 5e-4 (and 2.5e-4) before it settles."""
    from types import SimpleNamespace

    from course_lib import search
    from course_lib.train.ncf import TrainConfig

    def fake_train(data, cfg, **kw):
        hr = {2.5e-4: 0.60, 5e-4: 0.70, 1e-3: 0.65, 2e-3: 0.6, 5e-3: 0.5}.get(cfg.base_lr, 0.4)
        return SimpleNamespace(final_hr=hr, final_ndcg=hr / 2, epochs=0.5, curve={"loss": [0.3]},
                               config={"optimizer": cfg.optimizer, "peak_lr": cfg.base_lr, "base_lr": cfg.base_lr})

    monkeypatch.setattr(search, "train_to_target", fake_train)
    cfg = TrainConfig(global_batch_size=256, optimizer="adam", base_lr=1e-3)
    _, best, runs = search.lr_sweep(None, cfg, (1e-3, 2e-3, 5e-3), max_extensions=2)
    assert best == 5e-4 and [r.config["base_lr"] for r in runs] == [2.5e-4, 5e-4, 1e-3, 2e-3, 5e-3]
    _, best, runs = search.lr_sweep(None, cfg, (1e-3, 2e-3, 5e-3))
    assert best == 1e-3 and len(runs) == 3
