"""Lesson 01's step study: sparse gradients equal dense ones, lazy Adam is Adam where every row is present,
Adam's implementations agree, the new settings' defaults change nothing, compile falls back cleanly,
and every reading says what its rows show."""

from types import SimpleNamespace

import pytest
import torch

from course_lib.lessons import l01_baseline as S
from course_lib.metrics import paired_speedup, speedup_text
from course_lib.models.ncf import NeuMF
from course_lib.optim import SparseEmbeddingAdam, adam_kwargs, param_groups, resolved_adam_impl, sparse_tables
from course_lib.train import RunHooks, TrainConfig, build_model, make_optimizer, train_to_target
from course_lib.train.ncf import bce_sum, make_batches

CFG = TrainConfig(global_batch_size=256, optimizer="adam", base_lr=5e-3, factors=8, layers=(16, 8),
                  eval_every_epochs=0.25, max_epochs=1.0)


def _grads(model, batch):
    model.zero_grad(set_to_none=True)
    (bce_sum(model, batch) / batch[0].numel()).backward()
    return {n: p.grad for n, p in model.named_parameters()}


def test_sparse_embedding_gradients_are_the_dense_gradients_on_the_rows_the_batch_used():
    torch.manual_seed(0)
    dense = NeuMF(30, 20, factors=4, layers=(8, 4))
    torch.manual_seed(0)
    sparse = NeuMF(30, 20, factors=4, layers=(8, 4), sparse=True)
    assert all(torch.equal(a, b) for a, b in zip(dense.parameters(), sparse.parameters()))  # same init
    users = torch.tensor([0, 3, 3, 7, 29, 3])  # repeats: a row's gradient is the sum over its lookups
    items = torch.tensor([1, 1, 5, 19, 0, 2])
    batch = (users, items, torch.tensor([1.0, 0, 1, 0, 0, 1]))
    g_dense, g_sparse = _grads(dense, batch), _grads(sparse, batch)
    for name, g in g_sparse.items():
        if name.endswith(("_user.weight", "_item.weight")):
            assert g.is_sparse
            rows = set(g.coalesce().indices()[0].tolist())
            assert rows == set((users if "_user" in name else items).tolist())  # only the rows looked up
            torch.testing.assert_close(g.to_dense(), g_dense[name], rtol=1e-6, atol=1e-9)
        else:
            assert not g.is_sparse
            torch.testing.assert_close(g, g_dense[name], rtol=1e-6, atol=1e-9)


def _two_models(lr=1e-2, eps=1e-8):
    torch.manual_seed(1)
    dense = NeuMF(6, 5, factors=4, layers=(8, 4))
    torch.manual_seed(1)
    lazy = NeuMF(6, 5, factors=4, layers=(8, 4), sparse=True)
    opt_dense = torch.optim.Adam(param_groups(dense, 0.0), lr=lr, eps=eps)
    opt_lazy = SparseEmbeddingAdam(sparse_tables(lazy), param_groups(lazy, 0.0), lr=lr, eps=eps)
    return dense, lazy, opt_dense, opt_lazy


def _step(model, opt, batch):
    opt.zero_grad(set_to_none=True)
    (bce_sum(model, batch) / batch[0].numel()).backward()
    opt.step()


def test_lazy_adam_is_adam_when_every_row_is_in_every_batch():
    """Up to eps: SparseAdam adds eps to sqrt(v) before the bias correction, Adam after it (torch 2.13),
    so SparseAdam's eps acts like eps / sqrt(1 - beta2^t) in Adam's terms -- 32x at the first step. It
    shows where a row's gradient nearly cancels (here: 2e-6, from opposite samples); eps -> 0 removes it."""
    dense, lazy, opt_dense, opt_lazy = _two_models(eps=1e-20)
    users, items = torch.arange(6).repeat(2), torch.arange(12) % 5  # every user and every item, each step
    for step in range(5):
        batch = (users, items.roll(step), (torch.arange(12) % 3 == 0).float())
        _step(dense, opt_dense, batch)
        _step(lazy, opt_lazy, batch)
    for a, b in zip(dense.parameters(), lazy.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_lazy_adam_leaves_an_absent_row_where_dense_adam_moves_it():
    dense, lazy, opt_dense, opt_lazy = _two_models()
    first = (torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2]), torch.tensor([1.0, 0, 1]))
    later = (torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([1.0, 0]))  # user 2 and item 2 absent
    for model, opt in ((dense, opt_dense), (lazy, opt_lazy)):
        _step(model, opt, first)
    row_dense, row_lazy = dense.gmf_user.weight[2].clone(), lazy.gmf_user.weight[2].clone()
    for model, opt in ((dense, opt_dense), (lazy, opt_lazy)):
        _step(model, opt, later)
    assert torch.equal(lazy.gmf_user.weight[2], row_lazy)  # not looked up: not updated, moments not decayed
    assert not torch.allclose(dense.gmf_user.weight[2], row_dense)  # Adam's momentum keeps moving it


def test_sparse_embedding_adam_is_one_optimizer_for_the_engine():
    _, lazy, _, opt = _two_models()
    assert opt.param_groups[0] is opt.sparse.param_groups[0] and opt.param_groups[1] is opt.dense.param_groups[0]
    for g in opt.param_groups:
        g["lr"] = 0.5  # what Engine.set_lr does: reaches both inner optimizers
    assert opt.sparse.param_groups[0]["lr"] == opt.dense.param_groups[0]["lr"] == 0.5
    _step(lazy, opt, (torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([1.0, 0])))
    state = opt.state_dict()
    _, lazy2, _, opt2 = _two_models()
    opt2.load_state_dict(state)
    assert opt2.sparse.state_dict()["state"].keys() == opt.sparse.state_dict()["state"].keys()
    with pytest.raises(ValueError, match="sparse=True"):
        SparseEmbeddingAdam([], param_groups(lazy, 0.0), lr=1e-3)
    with pytest.raises(ValueError, match="weight_decay"):
        SparseEmbeddingAdam(sparse_tables(lazy), param_groups(lazy, 0.01), lr=1e-3)


def test_the_new_settings_default_to_every_earlier_run_bit_for_bit(data):
    """The defaults (adam_impl="auto", sparse_embeddings=False, compile="none", loader settings off)
    build exactly what every run built before they existed: the model with dense tables, and
    torch.optim.Adam(param_groups, fused=fused_on_gpu) -- on a CPU, torch's for-loop Adam."""
    cfg = CFG.replace(max_steps=6)
    assert adam_kwargs("auto", torch.nn.Linear(2, 2)) == {"fused": False}
    r = train_to_target(data, cfg, device="cpu", progress="none",
                        hooks=RunHooks(evaluate_points=False, keep_model=True))
    torch.manual_seed(cfg.seed)
    model = NeuMF(data.num_users, data.num_items, factors=cfg.factors, layers=cfg.layers)
    opt = torch.optim.Adam(param_groups(model, 0.0), lr=cfg.peak_lr, betas=cfg.betas, fused=False)
    assert resolved_adam_impl(opt) == "for-loop" and not any(m.sparse for m in model.modules()
                                                             if isinstance(m, torch.nn.Embedding))
    for batch, _ in zip(make_batches(data, cfg), range(6)):
        _step(model, opt, batch)
    for a, b in zip(model.parameters(), r.model.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_adams_implementations_compute_the_same_update(data, impl):
    runs = {i: train_to_target(data, CFG.replace(max_steps=5, adam_impl=i), device="cpu", progress="none",
                               hooks=RunHooks(evaluate_points=False, keep_model=True)) for i in ("for-loop", impl)}
    assert resolved_adam_impl(make_optimizer(build_model(data, CFG), CFG.replace(adam_impl=impl))) == impl
    for a, b in zip(runs["for-loop"].model.parameters(), runs[impl].model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_sparse_embeddings_train_through_the_engine(data):
    r = train_to_target(data, CFG.replace(max_steps=8, sparse_embeddings=True), device="cpu", progress="none",
                        hooks=RunHooks(time_phases=True, keep_model=True))
    assert r.steps == 8 and r.final_hr is not None and isinstance(make_optimizer(r.model, CFG.replace(
        sparse_embeddings=True)), SparseEmbeddingAdam)
    assert r.phase_time_s["optimizer"] > 0


@pytest.mark.parametrize("changes, words", [
    ({"optimizer": "sgd", "adam_impl": "fused"}, "adam_impl='fused'"),
    ({"optimizer": "lars", "sparse_embeddings": True}, "sparse_embeddings=True needs optimizer='adam'"),
    ({"sparse_embeddings": True, "weight_decay": 0.01}, "weight_decay=0"),
    ({"sparse_embeddings": True, "precision": "bf16"}, "fp32"),
    ({"num_workers": 2}, "num_workers=2 configure a torch DataLoader"),
    ({"loader": "dataloader", "persistent_workers": True}, "persistent_workers=True needs worker processes"),
    ({"loader": "dataloader", "num_workers": 1, "prefetch_factor": 0}, "prefetch_factor must be >= 1"),
    ({"compile": "reduce-overhead", "compile_backend": "aot_eager"}, "mode of the inductor backend"),
    ({"compile": "max"}, "compile='max'"),
    ({"adam_impl": "fastest"}, "adam_impl='fastest'"),
])
def test_lesson_01_settings_refuse_what_means_nothing(changes, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        CFG.replace(**changes)


def test_a_compiled_run_trains_the_same_model_as_eager(data):
    """aot_eager: dynamo's capture and AOTAutograd's backward without inductor's code generation (fast);
    the lesson compiles with inductor in the full profile."""
    cfg = CFG.replace(max_steps=4)
    runs = [train_to_target(data, c, device="cpu", progress="none",
                            hooks=RunHooks(evaluate_points=False, keep_model=True))
            for c in (cfg, cfg.replace(compile="default", compile_backend="aot_eager"))]
    assert cfg.replace(compile="default", compile_backend="aot_eager").compile_options == \
        {"backend": "aot_eager", "mode": None, "dynamic": False}
    for a, b in zip(runs[0].model.parameters(), runs[1].model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_a_compiler_that_fails_is_reported_and_training_stays_eager(data, monkeypatch):
    def broken(fn, **kwargs):
        def call(*a, **k):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")
        return call

    monkeypatch.setattr(torch, "compile", broken)
    comp = S.compile_comparison(data, CFG, (256,), samples_per_point=512, repeats=1)
    assert comp["rows"] == [] and "No working C++ compiler" in comp["error"]
    assert "failed here" in S.compile_reading(comp) and "stays eager" in S.compile_reading(comp)


def test_compile_comparison_measures_and_reads_its_rows(data):
    comp = S.compile_comparison(data, CFG, (256,), backend="aot_eager", samples_per_point=1024, repeats=2)
    (row,) = comp["rows"]
    assert row["eager_ms"] > 0 and row["compiled_ms"] > 0 and row["compile_s"] >= 0 and len(row["ratios"]) == 2
    assert "captures the graph" in S.compile_reading(comp) and "at batch 256" in S.compile_reading(comp)
    assert "capture only" in str(S.compile_table(comp))


def _compile_comp(eager_ms, compiled_ms, ratios, compile_s=6.0, backend="inductor"):
    return {"mode": "default", "backend": backend, "device": "cpu", "repeats": len(ratios), "error": None,
            "epoch_samples": 256_000,
            "rows": [{"batch size": 256, "steps": 50, "eager_ms": eager_ms, "compiled_ms": compiled_ms,
                      "compile_s": compile_s, "ratios": ratios, "cache_hits": 0, "cache_misses": 2}]}


def test_compile_reading_pays_back_only_a_measurable_saving():
    pays = _compile_comp(4.0, 3.0, [1.3, 1.35, 1.32])
    assert S.payback_steps(pays["rows"][0]) == 6000  # 6 s / 1 ms
    reached = SimpleNamespace(config={"global_batch_size": 256}, reached=True, steps_to_target=5000, steps=5000)
    assert "pays back after 6000 steps (6 epochs), beyond the baseline's 5000 steps to its target" in \
        S.compile_reading(pays, reached)
    missed = SimpleNamespace(config={"global_batch_size": 256}, reached=False, steps_to_target=None, steps=9000)
    assert "within the baseline's 9000 steps (it missed its target)" in S.compile_reading(pays, missed)
    other_batch = SimpleNamespace(config={"global_batch_size": 1024}, reached=True, steps_to_target=10, steps=10)
    assert "baseline" not in S.compile_reading(pays, other_batch)
    noisy = _compile_comp(4.0, 3.8, [1.2, 0.9, 1.1])
    assert S.payback_steps(noisy["rows"][0]) is None
    assert "no measurable difference" in S.compile_reading(noisy) and "never pays back" in S.compile_reading(noisy)
    slower = _compile_comp(4.0, 5.0, [0.8, 0.78, 0.81])
    assert "1.25x slower" in S.compile_reading(slower) and "never (no saving)" in str(S.compile_table(slower))
    assert "not inductor's kernels" in S.compile_reading(_compile_comp(4.0, 4.0, [1.0], backend="aot_eager"))


def test_paired_speedup_needs_every_repeat_on_one_side():
    assert paired_speedup([1.5, 1.4, 2.0]) == (1.5, True)
    assert paired_speedup([1.5, 0.9, 2.0]) == (1.5, False)
    assert speedup_text([0.5, 0.52]) == "1.96x slower" and speedup_text([1.02, 1.03]) == "no measurable difference"


def _opt_comp():
    def row(b, variant, opt_ms, step_ms, ratios_opt, ratios_step, baseline=False):
        return {"batch size": b, "variant": variant, "steps": 10, "optimizer_ms": opt_ms, "step_ms": step_ms,
                "baseline": baseline, "optimizer_ratios": ratios_opt, "step_ratios": ratios_step}

    return {"baseline_impl": "for-loop", "device": "cpu", "repeats": 3, "rows": [
        row(256, "dense Adam, for-loop", 5.0, 7.0, [1, 1, 1], [1, 1, 1], True),
        row(256, "dense Adam, fused", 1.6, 3.8, [3.1, 3.2, 3.3], [1.8, 1.9, 1.85]),
        row(256, "SparseAdam tables + Adam", 2.0, 4.0, [2.4, 2.5, 2.6], [1.7, 1.8, 1.75]),
        row(16384, "dense Adam, for-loop", 7.0, 80.0, [1, 1, 1], [1, 1, 1], True),
        row(16384, "dense Adam, fused", 3.5, 76.0, [2.0, 1.9, 2.1], [1.1, 0.95, 1.04]),
        row(16384, "SparseAdam tables + Adam", 30.0, 100.0, [0.23, 0.22, 0.24], [0.8, 0.78, 0.82])]}


def test_optimizer_reading_says_what_each_variant_did_at_each_batch():
    comp = _opt_comp()
    text = S.optimizer_reading(comp)
    assert "at batch 256 the baseline's optimizer (dense Adam, for-loop) took 5.00 of 7.00 ms per step (71%)" in text
    assert "dense Adam, fused: optimizer 3.12x faster, whole step 1.84x faster" in text  # the table's ms ratios
    assert "the fastest whole step: dense Adam, fused" in text
    assert "dense Adam, fused: optimizer 2.00x faster, whole step no measurable difference (1.05x)" in text
    assert "SparseAdam tables + Adam: optimizer 4.29x slower, whole step 1.25x slower" in text
    assert "no variant made the whole step measurably faster" in text
    assert "from 2.50x at batch 256 to 0.23x at batch 16384" in text
    # #37 (review 01 #4): fused Adam was measurably faster, and the course keeps for-loop Adam: said, not hidden
    assert "keep dense Adam, for-loop (torch's default here), although fused made the whole step measurably" in text
    for r in comp["rows"]:
        if r["variant"] == "dense Adam, fused":
            r["step_ratios"] = [1.0, 1.02, 0.99]
    assert "keep dense Adam" not in S.optimizer_reading(comp)
    table = str(S.optimizer_table(comp))
    assert "1.05x (within noise)" in table and "3.12x" in table and "(baseline)" in table


def test_bottleneck_reading_from_the_run_and_the_profile(data):
    from course_lib.train.ncf import TrainResult

    model = build_model(data, CFG)
    r = TrainResult(config={}, dataset="d", data_source="", synthetic=True, device="cpu", world_size=1,
                    target_hr=None, time_to_target_s=None, steps_to_target=None, epochs_to_target=None, epochs=1.0,
                    steps=100, samples=100, train_time_s=8.0, eval_time_s=2.0, samples_per_s=12.5,
                    phase_time_s={"sampling": 0.5, "forward_backward": 2.5, "optimizer": 5.0, "evaluation": 2.0})
    r.steps_per_epoch = 1000
    prof = SimpleNamespace(phase_s={"sampling": 0.03, "forward_backward": 0.3, "optimizer": 0.67}, steps=20)
    text = S.bottleneck_reading(r, model, prof)
    assert "largest phase of the baseline's training clock is optimizer (62%)" in text
    # r10a 01-S1: the optimizer's share said once
    assert ", 50.00 ms per step, sampling 6%" in text and "in the 20 profiled steps the optimizer took 67%" in text
    assert "starts an epoch" not in text
    prof.phase_s["sampling"] = 0.3  # 23 % of the profile against 6 % of the run: the epoch's shuffle
    assert "paid once per 1000 steps in a run, falls into 20 steps here" in S.bottleneck_reading(r, model, prof)
    assert f"{S.embedding_share(model):.0%} of the parameters" in text and S.embedding_share(model) > 0.5
    r.phase_time_s = {"evaluation": 1.0}
    assert "not timed" in S.bottleneck_reading(r, model)


def _acc_rows(dense, lazy, users=6040):
    return [{"optimizer": name, "seed": seed, "steps": 4834, "epochs": 0.25, "users": users, "hr": hr, "ndcg": hr / 2,
             "train_s": 10.0 if name == "dense Adam" else 5.0, "from": "trained here", "curve": {}}
            for seed in (0, 1) for name, hr in (("dense Adam", dense[seed]), ("SparseAdam tables + Adam", lazy[seed]))]


def test_accuracy_reading_compares_the_difference_with_seeds_and_sampling_error():
    same = S.accuracy_reading(_acc_rows((0.60, 0.61), (0.605, 0.595)), {"dense Adam": 2.0,
                                                                           "SparseAdam tables + Adam": 1.0})
    assert "no measurable difference at this budget" in same
    assert "(2.00 and 1.00 ms), the budget costs 9.7 s of training with dense Adam and 4.8 s with lazy Adam" in same
    behind = S.accuracy_reading(_acc_rows((0.62, 0.63), (0.57, 0.58)))
    assert "a difference of -0.0500" in behind and "behind by more than the noise" in behind
    ahead = S.accuracy_reading(_acc_rows((0.50, 0.51), (0.60, 0.60)))
    assert "ahead by more than the noise" in ahead
    # seeds that disagree a lot make a large noise: the same mean difference is then not measurable
    assert "no measurable difference" in S.accuracy_reading(_acc_rows((0.55, 0.70), (0.57, 0.62)))


def test_lazy_adam_accuracy_reads_dense_adam_from_the_reference_it_reproduces(data):
    cfg = CFG.replace(max_epochs=0.5, stop_at_target=False)
    reference = train_to_target(data, cfg, device="cpu", progress="none")
    rows = S.lazy_adam_accuracy(data, reference, budget_epochs=0.25, seeds=(0, 1))
    assert [(r["optimizer"], r["seed"], r["from"]) for r in rows] == [
        ("dense Adam", 0, "the baseline run"), ("SparseAdam tables + Adam", 0, "trained here"),
        ("dense Adam", 1, "trained here"), ("SparseAdam tables + Adam", 1, "trained here")]
    steps = rows[0]["steps"]
    fresh = train_to_target(data, cfg.replace(max_steps=steps), device="cpu", progress="none")
    assert fresh.final_hr == rows[0]["hr"] and fresh.final_ndcg == rows[0]["ndcg"]  # the same run, cut there
    assert "after" in S.accuracy_reading(rows) and "seed" in str(S.accuracy_table(rows))


def test_optimizer_comparison_runs_every_variant_and_pairs_its_repeats(data):
    comp = S.optimizer_comparison(data, CFG, (256, 1024), samples_per_point=1024, min_steps=2, repeats=2)
    assert comp["baseline_impl"] == "for-loop" and len(comp["rows"]) == 8
    for r in comp["rows"]:
        assert r["optimizer_ms"] > 0 and r["step_ms"] >= r["optimizer_ms"] and len(r["step_ratios"]) == 2
        if r["baseline"]:
            assert r["step_ratios"] == [1.0, 1.0]
    assert "at batch 1024" in S.optimizer_reading(comp)


def test_lesson_01_step_figures_render():
    import matplotlib

    matplotlib.use("Agg")
    from course_lib.plots import plot_lazy_adam, plot_optimizer_step

    assert plot_optimizer_step(_opt_comp()).axes
    rows = _acc_rows((0.6, 0.61), (0.58, 0.59))
    for r in rows:
        r["curve"] = {"step": [0, 100], "time_s": [0.0, r["train_s"]], "hr": [0.1, r["hr"]]}
    assert len(plot_lazy_adam(rows, step_ms={"dense Adam": 2.0, "SparseAdam tables + Adam": 1.0},
                              target_hr=0.7).axes) == 2
    assert len(plot_lazy_adam(rows).axes) == 1  # without paired step times, no time axis


def test_step_times_are_the_paired_comparisons_rows():
    assert S.step_times(_opt_comp(), 256) == {"dense Adam": 7.0, "SparseAdam tables + Adam": 4.0}


def test_pace_reading_says_when_equal_steps_took_unequal_time():
    from course_lib.train.ncf import TrainResult

    def result(times, steps=(0, 100, 200, 300, 350)):
        steps = list(steps)
        return TrainResult(config={}, dataset="d", data_source="", synthetic=True, device="cpu", world_size=1,
                           target_hr=None, time_to_target_s=None, steps_to_target=None, epochs_to_target=None,
                           epochs=1.0, steps=350, samples=1, train_time_s=times[-1], eval_time_s=0.0, samples_per_s=1.0,
                           phase_time_s={}, curve={"step": steps, "time_s": times, "hr": [0.1] * len(steps)})

    slow = S.pace_reading(result([0.0, 1.0, 2.0, 4.5, 5.75]))  # 50 steps at 25 ms: its own length, not 100
    assert "the 4 evaluation intervals of 50 to 100 steps ran at 10.00 to 25.00 ms per step (the slowest 2.50x" in slow
    assert "would have taken 3.5 s instead of 5.8 s" in slow
    assert "a steady pace" in S.pace_reading(result([0.0, 1.0, 2.05, 3.0, 3.5]))
    # #37: lesson 01's curve: 3 intervals of 4834 steps, one of 967 near the target, a duplicate evaluation 3
    # steps later; the 3-step interval is not an interval of 4834 steps (nor a pace: it is left out)
    steps = (0, 4834, 9668, 14502, 14505, 15472)
    ms = (3.08, 3.33, 3.15, 6.13, 2.71)
    times = [0.0]
    for n, m in zip([b - a for a, b in zip(steps, steps[1:])], ms):
        times.append(times[-1] + n * m / 1000)
    text = S.pace_reading(result(times, steps=steps))
    assert "the 4 evaluation intervals of 967 to 4834 steps ran at 2.71 to 3.33 ms per step (the slowest 1.23x" in text
    assert "a steady pace" in text and "6.13" not in text
    assert [n for _, n, _ in S.pace_intervals(result(times, steps=steps))] == [4834, 4834, 4834, 967]
    assert "no pace" in S.pace_reading(result([0.0, 1.0], steps=(0, 100)))


def test_pace_drift_reading_states_the_drift_and_what_it_means_for_the_speedups():
    """#37 (lesson 01's pace drift): the yardstick moved -11 % (and 39 % in another run) between its two
    measurements and lesson 01 did not say it; the reading quotes both ends, their mean (the ladder's reference)
    and the figures the ladder then keeps. Opposite results: a steady pace, a small drift, a single measurement."""
    from course_lib.ladder import speedup_cell

    big = S.pace_drift_reading({"before": 152_264.0, "after": 135_505.0, "rate": 143_884.6})
    assert "moved -11% during this lesson (152,264 samples/s before its runs, 135,505 after)" in big
    assert "the mean, 143,885 samples/s" in big and "at least ±11%" in big and "to 1 significant figure," in big
    assert speedup_cell(6.27, 0.11) == "6x (±11%)"  # the ladder's own rule, the one the line quotes
    small = S.pace_drift_reading({"before": 100_000.0, "after": 103_000.0})
    assert "moved +3%" in small and "to 2 significant figures" in small and "±3%" in small
    steady = S.pace_drift_reading({"before": 100_000.0, "after": 100_200.0})
    assert "held its pace" in steady and "±" not in steady
    assert "timed once only" in S.pace_drift_reading({"before": 100_000.0, "after": None})
