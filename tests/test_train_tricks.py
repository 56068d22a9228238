"""The large-batch tricks inside the one loop (lessons 02-05): schedule, LARS groups, loss scaling, records."""

import math

import pytest

import course_lib.train.ncf as train
from course_lib.optim import lr_at
from course_lib.train import (
    RunHooks,
    TrainConfig,
    evaluate,
    evaluate_train,
    last_train_items,
    make_optimizer,
    train_to_target,
)



TINY = TrainConfig(
    global_batch_size=512, base_lr=5e-3, optimizer="adam", factors=8, layers=(16, 8), eval_every_epochs=1.0
)


def run(data, cfg, **kw):
    budget = {"max_epochs": float(kw.pop("max_epochs", 1)), "max_steps": kw.pop("max_steps", None)}
    return train_to_target(data, cfg.replace(**budget), device="cpu", progress="none", **kw,
                           hooks=RunHooks(record_every=1))


@pytest.mark.parametrize("warmup,decay,warmup_steps", [("linear", "cosine", 5), ("exponential", "none", 6),
                                                       ("linear", "polynomial", 0)])
def test_lr_in_the_loop_follows_lr_at(data, warmup, decay, warmup_steps):
    cfg = TINY.replace(optimizer="sgd", base_lr=0.5, warmup_steps=warmup_steps, warmup=warmup, decay=decay)
    r = run(data, cfg, max_epochs=2, max_steps=12)  # planned over 2 epochs, cut at 12 steps
    planned = math.ceil(2 * r.steps_per_epoch)
    h = r.history
    assert h["step"] == list(range(12))
    expected = [lr_at(s, peak_lr=0.5, warmup_steps=warmup_steps, total_steps=planned, warmup=warmup,
                      decay="constant" if decay == "none" else decay) for s in h["step"]]
    assert h["lr"] == pytest.approx(expected, rel=1e-12)
    assert h["lr"][0] < 0.5 if warmup_steps else h["lr"][0] == pytest.approx(0.5)


def test_lars_adapts_weights_and_excludes_biases(data):
    model = train.build_model(data, TINY)
    opt = make_optimizer(model, TINY.replace(optimizer="lars", base_lr=1.0, weight_decay=0.0))
    names = {p: n for n, p in model.named_parameters()}
    for g in opt.param_groups:
        kinds = {names[p].rsplit(".", 1)[-1] for p in g["params"]}
        if g["always_adapt"]:
            assert kinds == {"weight"} and all(p.ndim > 1 for p in g["params"])
        else:
            assert kinds == {"bias"} and g["weight_decay"] == 0.0
    # one step through the loop: weights get a real trust ratio, zero-initialized biases move
    r = run(data, TINY.replace(optimizer="lars", base_lr=1.0), max_steps=2)
    ratios = r.history["trust_ratio"]
    assert set(ratios) == {n for n, p in model.named_parameters() if p.ndim > 1}
    assert all(v[0] != pytest.approx(1.0) for v in ratios.values())
    m = train_to_target(data, TINY.replace(optimizer="lars", base_lr=1.0, max_steps=2), device="cpu", progress="none",
                        hooks=RunHooks(keep_model=True)).model
    assert m.out.bias.abs().sum() > 0  # excluded from the trust ratio, so it is not frozen at 0


@pytest.mark.parametrize("scaling", ["dynamic", "static"])
def test_trust_ratio_is_the_same_with_and_without_loss_scaling(data, scaling):
    """fp16 through the loop: gradients are unscaled before LARS reads their norm (apex#1030)."""
    cfg = TINY.replace(optimizer="lars", base_lr=1.0, precision="fp16", weight_decay=1e-4, loss_scaling=scaling)
    ratios = {}
    for scale in (2.0 ** 4, 2.0 ** 14):  # the settings' loss_scale: dynamic's start, or the static S
        r = run(data, cfg.replace(loss_scale=scale), max_steps=3)
        assert r.precision["mode"] == "fp16" and r.precision["skipped_steps"] == 0
        assert r.history["loss_scale"][0] == scale
        ratios[scale] = r.history["trust_ratio"]
    small, large = ratios.values()
    for name in small:
        # the scales differ 1024x; unscaled ratios agree up to fp16 rounding of the forward/backward
        assert large[name] == pytest.approx(small[name], rel=2e-2), name


def test_precision_modes_and_records(data):
    r = run(data, TINY.replace(precision="auto"), max_steps=2)
    assert r.precision["requested"] == "auto" and r.precision["mode"] in ("fp32", "bf16")
    r = run(data, TINY.replace(precision="bf16"), max_steps=2)
    assert r.precision["mode"] == "bf16" and r.history["loss_scale"] == [1.0, 1.0]
    with pytest.raises(ValueError):
        TINY.replace(precision="fp8")


def test_divergence_stops_the_run_and_scores_as_a_miss(data):
    r = run(data, TINY.replace(optimizer="sgd", base_lr=1e12, momentum=0.0), max_epochs=3)
    assert r.diverged and r.epochs < 3
    assert r.final_hr == 0.0  # NaN scores are a miss, not a hit (HR@10 = 1.0 before the fix)


def test_train_side_hr_uses_latest_training_item(data):
    last = last_train_items(data)
    for u in (0, 7, data.num_users - 1):
        assert last[u] == data.train_items[data.train_users == u][-1]
    r = run(data, TINY, max_epochs=2)
    assert r.final_train_hr is not None and 0.0 <= r.final_train_hr <= 1.0
    assert r.generalization_gap == pytest.approx(r.final_train_hr - r.final_hr)
    m = train_to_target(data, TINY.replace(max_steps=1), device="cpu", progress="none",
                        hooks=RunHooks(keep_model=True)).model
    assert evaluate_train(m, data) != evaluate(m, data)


def test_confirm_reruns_the_deciding_runs_at_more_seeds_and_reads_them_against_their_spread(data):
    """The choice that makes a ladder rung is run again at a second seed; the winner reached the
    target on the most seeds, then in the least mean time; the reference a verdict needs comes along."""
    from course_lib.sweeps import confirm, fastest, run_sweep

    pop = train.evaluate_popularity(data)[0]
    base = TINY.replace(target_hr=pop + 0.02, max_epochs=4.0, eval_every_epochs=0.5)
    cfgs = [base.replace(base_lr=lr) for lr in (5e-3, 1e-2, 1e-5)]
    labels = ["lr 5e-3", "lr 1e-2", "lr 1e-5"]
    results = run_sweep(data, cfgs, device="cpu", progress="none", labels=labels)
    assert results[2].time_to_target_s is None  # far too small an lr: the reference that never gets there
    c = confirm(data, results, labels, seeds=(1,), top=1, include=("lr 1e-5",), device="cpu", progress="none")
    assert c.labels[1] == "lr 1e-5" and [len(r) for r in c.runs] == [2, 2]
    assert [r.config["seed"] for r in c.runs[0]] == [0, 1] and c.runs[0][0] is fastest(results)
    assert c.best_label == c.labels[0]
    assert c.winner(c.labels[0], "lr 1e-5") == c.labels[0] and c.best_of(["lr 1e-5"]) == "lr 1e-5"
    again = train_to_target(data, TrainConfig.from_dict(c.runs[0][0].config).replace(seed=1), device="cpu",
                            progress="none")
    assert again.curve["hr"] == c.runs[0][1].curve["hr"]  # nothing but the seed changed
    table = c.table().to_markdown()
    assert "(chosen)" in table and "not reached" in table
    only = confirm(data, results, labels, seeds=(), top=1, device="cpu", progress="none")
    assert only.labels == [c.labels[0]] and only.comparisons() == []
    from course_lib.lessons.l03_warmup import deciding_table  # lessons read a real Confirmed

    assert c.comparisons(c.labels[0]) == []  # the reference never reached the target: nothing to set against
    assert len(deciding_table(c, c.labels[0]).rows) == 4


