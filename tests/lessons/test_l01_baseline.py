"""Lesson 01: sparse gradients equal dense ones, lazy Adam is Adam where every row is present, Adam's
implementations agree, the new settings' defaults change nothing, compile falls back cleanly; each rung of the
data-loading ladder produces the same epoch and no worker outlives its loader; and each of the lesson's
comparisons decides a clear case and leaves an unclear one unresolved."""

import math
import statistics
import multiprocessing
import time
from types import SimpleNamespace

import pytest
import torch

from course_lib import compare
from course_lib.data import make_dataloader
from course_lib.lessons import l01_baseline as S
from course_lib.lessons import l01_step as T
from course_lib.models.ncf import NeuMF
from course_lib.optim import SparseEmbeddingAdam, adam_kwargs, param_groups, resolved_adam_impl, sparse_tables
from course_lib.tables import Table
from course_lib.train import RunHooks, TrainConfig, build_model, make_optimizer, train_to_target
from course_lib.train.ncf import TrainResult, bce_sum, make_batches
from _timing import scaled
import _procs

# the loader tests check that no worker outlives its loader: count only the children each test starts
pytestmark = pytest.mark.usefixtures("children_before_test")

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


def test_another_optimizer_keeps_adams_implementation_unused(data):
    """A LARS or SGD rung keeps the baseline's adam_impl (the ladder carries it on to later Adam rungs) and runs
    its own optimizer."""
    lars = CFG.replace(adam_impl="fused").replace(optimizer="lars", base_lr=1.0)
    assert lars.adam_impl == "fused" and type(make_optimizer(build_model(data, lars), lars)).__name__ == "LARS"


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
    comp = T.compile_comparison(data, CFG, (256,), samples_per_point=512, repeats=1)
    assert comp["rows"] == [] and "No working C++ compiler" in comp["error"]
    assert T.compile_comparisons(comp) == []


def _workers_gone():
    deadline = time.monotonic() + scaled(30)
    while _procs.stray_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _procs.stray_children()


def test_the_batched_dataset_gives_the_per_sample_epochs_positives_in_the_same_order():
    users, items = torch.arange(40) % 7, torch.arange(40) % 11
    per_sample = make_dataloader(users, items, 11, batch_size=16, seed=3)
    batched = make_dataloader(users, items, 11, batch_size=16, seed=3, batched=True)
    assert len(per_sample) == len(batched) == -(-200 // 16)
    for (u1, i1, y1), (u2, i2, y2) in zip(per_sample, batched):
        assert torch.equal(u1, u2) and torch.equal(y1.float(), y2)  # the same shuffled samples
        assert torch.equal(i1[y1 == 1], i2[y2 == 1])  # the same positives; negatives drawn anew
        assert ((i2 >= 0) & (i2 < 11)).all() and u2.dtype == i2.dtype == torch.int64


def test_each_worker_draws_its_own_negatives():
    """A worker starts with a copy of the dataset's numpy generator; unseeded, two workers would draw the
    same negatives for their batches (torch's "Randomness in multi-process data loading" note)."""
    users, items = torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long)
    with make_dataloader(users, items, 10_000, batch_size=500, neg_per_pos=499, seed=0, num_workers=2,
                         batched=True) as loader:
        batches = [i for _, i, _ in loader]  # almost all negatives: 4 positives in 2000 samples
    # batch k comes from worker k % 2: with copied generators batches 0 and 1 would draw the same numbers
    # (checked: without the per-worker seed every position agrees)
    assert (batches[0] == batches[1]).float().mean() < 0.1
    assert _workers_gone()


@pytest.mark.parametrize("persistent", [False, True])
def test_closing_a_loader_stops_its_workers(persistent):
    users, items = torch.arange(200) % 13, torch.arange(200) % 17
    loader = make_dataloader(users, items, 17, batch_size=32, num_workers=1, persistent_workers=persistent)
    it = iter(loader)
    next(it)  # mid-epoch, the iterator still referenced: its worker is alive
    assert multiprocessing.active_children()
    loader.close()
    assert _workers_gone()
    del it


def test_an_interrupted_run_leaves_no_worker_behind(data):
    """A cell interrupted mid-epoch keeps the run's frames in its traceback (and so the DataLoader's
    iterator): the loop shuts the workers down however it ends."""
    def interrupt(model, point):
        if point["step"]:
            raise KeyboardInterrupt

    cfg = CFG.replace(loader="dataloader", num_workers=1, persistent_workers=True, prefetch_factor=2,
                      eval_every_epochs=0.05)
    with pytest.raises(KeyboardInterrupt) as caught:
        train_to_target(data, cfg, device="cpu", progress="none", hooks=RunHooks(on_eval=interrupt))
    assert caught.traceback  # the frames (and the loader) are still referenced here
    assert _workers_gone()


def test_every_rung_of_the_ladder_trains_through_the_same_loop(data):
    rungs = S.loader_rungs(1)
    assert [name for name, _ in rungs][:2] == ["per-sample DataLoader", "+ num_workers=1"]
    assert rungs[-1] == ("device sampler", {"loader": "device"})
    assert rungs[5][1] == {"loader": "dataloader-batched", "num_workers": 1, "pin_memory": True,
                           "prefetch_factor": 4, "persistent_workers": True}  # cumulative
    comp = S.loader_comparison(data, CFG, device="cpu", load_samples=2048, train_steps=4, workers=1)
    measured = [r for r in comp["rows"] if r["measured"]]
    assert len(comp["rows"]) == len(rungs) and len(measured) == len(rungs) - 1  # pin_memory: a CPU has no copy
    # a rung whose two passes both hit a load spike (its 1-step run outlasting its many-step run) is "not measured"
    # (nan), not a rate; on a shared 2-core machine that happens now and then at these tiny sizes
    assert all(r["load_sps"] > 0 and not r["train_sps"] <= 0 and r["first_batch_s"] >= 0 for r in measured)
    assert comp["ratio_loading"] == comp["rows"][-1]["load_sps"] / comp["rows"][0]["load_sps"]
    assert "n/a on CPU" in str(S.comparison_table(comp))
    assert all(c.low <= c.estimate <= c.high for c in S.loader_comparisons(comp))
    assert _workers_gone()



def constructed_comparison(second=None):
    """A ladder as loader_comparison returns it; ``second`` scales a rung's second pass ({rung index: factor})."""
    names = [name for name, _ in S.loader_rungs(1)]
    values = {  # rung index: (first batch s, loading samples/s, training samples/s)
        0: (0.005, 400_000, 100_000), 1: (0.030, 130_000, 70_000), 3: (0.025, 125_000, 69_000),
        4: (0.012, 128_000, 71_000), 5: (0.011, 200_000, 72_000), 6: (0.006, 2_000_000, 160_000),
        7: (0.010, 15_000_000, 165_000)}
    rows = []
    for i, name in enumerate(names):
        if i not in values:
            rows.append({"rung": name, "measured": False, "passes": [{}, {}]})
            continue
        one = dict(zip(("first_batch_s", "load_sps", "train_sps"), values[i]))
        f = (second or {}).get(i, 1.02)  # the second pass 2 % faster everywhere, unless told
        two = {"first_batch_s": one["first_batch_s"] / f, "load_sps": one["load_sps"] * f,
               "train_sps": one["train_sps"] * f}
        rows.append({"rung": name, "measured": True, "passes": [one, two], "first_batch_s": two["first_batch_s"],
                     "load_sps": two["load_sps"], "train_sps": two["train_sps"]})
    first, last = rows[0], rows[-1]
    return {"batch_size": 256, "device": "cpu", "rows": rows, "ratio_loading": last["load_sps"] / first["load_sps"],
            "ratio_training": last["train_sps"] / first["train_sps"]}


def test_the_ladder_figure_renders():
    import matplotlib

    matplotlib.use("Agg")
    from course_lib.plots import plot_loader_comparison

    fig = plot_loader_comparison(constructed_comparison())
    labels = {t.get_text() for t in fig.axes[0].get_yticklabels()}
    assert "device sampler" in labels and "+ pin_memory" not in labels  # a CPU run: not measured


def test_compile_comparison_measures_its_rows(data):
    comp = T.compile_comparison(data, CFG, (256,), backend="aot_eager", samples_per_point=1024, repeats=2)
    (row,) = comp["rows"]
    assert row["eager_ms"] > 0 and row["compiled_ms"] > 0 and row["compile_s"] >= 0 and len(row["ratios"]) == 2
    assert [c.n for c in T.compile_comparisons(comp)] == ["2 pairs"]
    assert "capture only" in str(T.compile_table(comp))


def _compile_comp(eager_ms, compiled_ms, ratios, compile_s=6.0, backend="inductor"):
    return {"mode": "default", "backend": backend, "device": "cpu", "repeats": len(ratios), "error": None,
            "epoch_samples": 256_000,
            "rows": [{"batch size": 256, "steps": 50, "eager_ms": eager_ms, "compiled_ms": compiled_ms,
                      "compile_s": compile_s, "ratios": ratios, "cache_hits": 0, "cache_misses": 2}]}


def test_compiling_pays_back_only_a_resolved_saving():
    pays = _compile_comp(4.0, 3.0, [1.3, 1.35, 1.32])
    assert T.compile_comparisons(pays)[0].outcome == compare.HIGHER
    assert T.payback_steps(pays["rows"][0]) == 6000  # 6 s / 1 ms
    row = T.compile_table(pays).rows[0]
    assert row["payback steps"] == 6000 and row["payback epochs"] == 6.0
    noisy = _compile_comp(4.0, 3.8, [1.2, 0.9, 1.1])
    assert T.compile_comparisons(noisy)[0].outcome == compare.UNRESOLVED and T.payback_steps(noisy["rows"][0]) is None
    slower = _compile_comp(4.0, 5.0, [0.8, 0.78, 0.81])
    assert T.compile_comparisons(slower)[0].outcome == compare.LOWER
    assert T.compile_table(slower).rows[0]["payback steps"] == "never"


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


def test_the_optimizer_comparisons_decide_each_variant_at_each_batch():
    comps = {c.question: c for c in T.optimizer_comparisons(_opt_comp())}
    assert len(comps) == 8  # two variants, two batches, the optimizer phase and the whole step
    assert comps["whole step, dense Adam, fused / for-loop, batch 256"].outcome == compare.HIGHER
    assert comps["optimizer, dense Adam, fused / for-loop, batch 16384"].outcome == compare.HIGHER
    assert comps["whole step, dense Adam, fused / for-loop, batch 16384"].outcome == compare.UNRESOLVED
    assert comps["whole step, SparseAdam tables + Adam / for-loop, batch 16384"].outcome == compare.LOWER
    table = T.optimizer_table(_opt_comp())
    assert table.rows[1]["optimizer x"] == 3.12 and table.rows[0]["Adam"].endswith("(default)")


def _impl_rows(fused_256, fused_16384, foreach_256=(1.0, 1.0, 1.0), foreach_16384=(1.0, 1.0, 1.0)):
    """optimizer_comparison's rows with the whole step's paired ratios over the default (for-loop) given."""
    def row(b, variant, ratios, baseline=False):
        return {"batch size": b, "variant": variant, "baseline": baseline, "step_ratios": list(ratios),
                "optimizer_ratios": list(ratios), "step_ms": 10.0 / statistics.median(ratios), "optimizer_ms": 1.0}

    return [row(b, f"dense Adam, {impl}", r, impl == "for-loop")
            for b, fused, foreach in ((256, fused_256, foreach_256), (16384, fused_16384, foreach_16384))
            for impl, r in (("for-loop", (1.0, 1.0, 1.0)), ("foreach", foreach), ("fused", fused))]


def test_the_baseline_takes_the_fastest_adam_not_decided_slower_anywhere():
    clear = (2.4, 2.5, 2.45)
    assert T.fastest_adam(_impl_rows(clear, (1.5, 1.55, 1.52))) == "fused"
    # decided at the baseline's batch, undecided at the rungs' larger one: still the fastest there
    assert T.fastest_adam(_impl_rows(clear, (1.1, 0.95, 1.04))) == "fused"
    # ... but decided slower at a larger batch: the default
    assert T.fastest_adam(_impl_rows(clear, (0.8, 0.81, 0.8))) == "auto"
    # an undecided lead at the baseline's batch is still the best estimate; slower everywhere: the default
    assert T.fastest_adam(_impl_rows((4.0, 1.0, 2.5), clear)) == "fused"
    assert T.fastest_adam(_impl_rows((1.2, 0.7, 0.98), clear)) == "auto"  # median below 1
    assert T.fastest_adam(_impl_rows((0.5, 0.52, 0.51), (0.6, 0.61, 0.6))) == "auto"
    # two leads: the larger median at the baseline's batch, decided or not
    assert T.fastest_adam(_impl_rows(clear, (1.5, 1.55, 1.52), (1.3, 1.32, 1.31), (1.3, 1.32, 1.31))) == "fused"
    assert T.fastest_adam(_impl_rows((1.2, 1.22, 1.21), (1.2, 1.22, 1.21), clear, clear)) == "foreach"
    assert T.fastest_adam(_impl_rows((1.2, 1.22, 1.21), (1.2, 1.22, 1.21), (4.0, 1.0, 2.5), clear)) == "foreach"
    # the baseline's batch named: the choice is read there
    assert T.fastest_adam(_impl_rows((1.0, 1.01, 1.0), clear), batch=16384) == "fused"
    # the rows of the default implementation's own (ratios of 1) are never a candidate
    assert T.fastest_adam([r for r in _impl_rows(clear, clear) if r["baseline"]]) == "auto"


def test_the_lazy_comparison_pairs_lazy_adam_with_the_baselines_implementation():
    comp = _opt_comp()
    comps = T.accuracy_comparisons(_acc_rows((0.62, 0.63), (0.62, 0.63)), comp, 256, impl="fused")
    # SparseAdam over fused, per repeat: its ratio over for-loop divided by fused's (both over the same run)
    assert comps[1].estimate == pytest.approx(statistics.mean([1.7 / 1.8, 1.8 / 1.9, 1.75 / 1.85]), rel=0.01)
    assert T.step_times(comp, 256, "fused") == {"dense Adam": 3.8, "SparseAdam tables + Adam": 4.0}


def test_the_chosen_adam_travels_up_the_ladder_through_a_lars_rung(tmp_path):
    from course_lib import ladder
    import _histories as H

    def save(step, cfg):  # each rung twice as fast as the one below: each helped, so each is built on
        row = {k: v for k, v in H.rung(step, cfg).items() if k != "step"}
        time_s = 80.0 / 2 ** ladder.LADDER_STEPS.index(step)
        row.update(time_to_target_s=time_s, seed_runs=[{"seed": 0, "time_to_target_s": time_s, "steps_to_target": 40}])
        ladder.save_ladder_row(step, directory=tmp_path, **row)

    save("baseline", H.setting(256, rule="none", adam_impl="fused"))
    default = TrainConfig(target_hr=H.TARGET_HR, **H.FULL)
    for step, change in (("+linear scaling", dict(global_batch_size=16384, lr_scaling="sqrt", base_batch_size=256)),
                         ("+warmup", dict(warmup_steps=40)), ("+LARS", dict(optimizer="lars", lr_scaling="none"))):
        cfg, _, _ = ladder.start_from(step, default, directory=tmp_path)
        assert cfg.adam_impl == "fused"
        save(step, cfg.replace(**change))
    cfg, row, _ = ladder.start_from("+mixed precision", default, directory=tmp_path)
    assert row["step"] == "+LARS" and cfg.optimizer == "lars" and cfg.adam_impl == "fused"
    assert cfg.replace(optimizer="adam").adam_impl == "fused"  # a later Adam rung runs the baseline's choice
    settings = [r["setting"] for r in ladder.ladder_table(tmp_path).rows]
    assert settings[0] == "batch 256, adam (fused) lr 0.001, fp32" and "(fused)" not in settings[-1]


def test_a_baseline_saved_before_the_choice_loads_as_the_default(tmp_path):
    from course_lib import ladder
    import _histories as H

    old = H.rung("baseline", H.setting(256, rule="none"))
    old["config"].pop("adam_impl")
    old["ran"] = "batch 256, adam lr 0.001, fp32"  # what the record says it ran, unchanged
    ladder.save_ladder_row(old.pop("step"), directory=tmp_path, **old)
    cfg, _, _ = ladder.start_from("+linear scaling", TrainConfig(), directory=tmp_path)
    assert cfg.adam_impl == "auto" and ladder.ladder_table(tmp_path).rows[0]["setting"] == old["ran"]
    auto = {"optimizer": "adam", "global_batch_size": 256}  # "auto" names what it is on the run's device
    assert ladder.what_ran(auto, device="cpu") == "batch 256, adam (for-loop), fp32"


def test_the_phase_table_puts_the_run_and_the_profile_side_by_side():
    r = TrainResult(config={}, dataset="d", data_source="", synthetic=True, device="cpu", world_size=1,
                    target_hr=None, time_to_target_s=None, steps_to_target=None, epochs_to_target=None, epochs=1.0,
                    steps=100, samples=100, train_time_s=8.0, eval_time_s=2.0, samples_per_s=12.5,
                    phase_time_s={"sampling": 0.5, "forward_backward": 2.5, "optimizer": 5.0, "evaluation": 2.0})
    prof = SimpleNamespace(phase_s={"sampling": 0.03, "forward_backward": 0.3, "optimizer": 0.67}, steps=20)
    rows = {row["phase"]: row for row in S.phase_table(r, prof).rows}
    assert rows["optimizer"]["clock"] == "62%" and rows["optimizer"]["ms/step"] == 50.0
    assert rows["optimizer"]["profile"] == "67%"
    assert list(rows)[0] == "optimizer" and "evaluation" not in rows  # largest first; evaluation is off the clock
    assert S.phase_table(r).rows[0]["profile"] is None


def test_embedding_share_is_most_of_neumf(data):
    assert S.embedding_share(build_model(data, CFG)) > 0.5


def _acc_rows(dense, lazy, users=6040):
    return [{"optimizer": name, "seed": seed, "steps": 4834, "epochs": 0.25, "users": users, "hr": hr, "ndcg": hr / 2,
             "train_s": 10.0 if name == "dense Adam" else 5.0, "from": "trained here",
             "curve": {"step": [0, 4834], "time_s": [0.0, 10.0], "hr": [0.1, hr]}}
            for seed in (0, 1) for name, hr in (("dense Adam", dense[seed]), ("SparseAdam tables + Adam", lazy[seed]))]


def test_the_accuracy_comparison_weighs_the_seeds_and_the_sampling_error():
    def outcome(dense, lazy):
        return T.accuracy_comparisons(_acc_rows(dense, lazy))[0].outcome

    assert outcome((0.62, 0.63), (0.57, 0.58)) == compare.LOWER  # lazy Adam behind, the seeds agree
    assert outcome((0.50, 0.51), (0.60, 0.60)) == compare.HIGHER
    assert outcome((0.55, 0.70), (0.57, 0.62)) == compare.UNRESOLVED  # seeds that disagree a lot
    # one seed per arm: the evaluation's sampling error over the users still gives an interval
    few = T.accuracy_comparisons([r for r in _acc_rows((0.6, 0.6), (0.601, 0.6), users=10**7) if r["seed"] == 0])
    assert few[0].outcome == compare.SAME


def test_the_accuracy_comparisons_add_the_step_and_the_same_seconds():
    rows = _acc_rows((0.62, 0.63), (0.62, 0.63))
    comps = T.accuracy_comparisons(rows, _opt_comp(), 256)
    assert [c.question for c in comps] == [
        "HR@10 at 4834 steps, lazy - dense", "whole step, SparseAdam tables + Adam / dense Adam, batch 256",
        "HR@10, SparseAdam tables + Adam - dense Adam, same seconds"]
    assert comps[1].outcome == compare.HIGHER
    # SparseAdam's step is 4.0 ms against 7.0: in its seconds dense Adam runs 4/7 of the steps, on its curve's
    # straight line 0.1 + (0.625 - 0.1) * 4/7 = 0.4: lazy Adam's 0.625 is ahead after the same seconds
    assert comps[2].estimate == pytest.approx(0.625 - (0.1 + 0.525 * 4 / 7)) and comps[2].outcome == compare.HIGHER


def test_lazy_adam_accuracy_reads_dense_adam_from_the_reference_it_reproduces(data):
    cfg = CFG.replace(max_epochs=0.5, stop_at_target=False)
    reference = train_to_target(data, cfg, device="cpu", progress="none")
    rows = T.lazy_adam_accuracy(data, reference, budget_epochs=0.25, seeds=(0, 1))
    assert [(r["optimizer"], r["seed"], r["from"]) for r in rows] == [
        ("dense Adam", 0, "the baseline run"), ("SparseAdam tables + Adam", 0, "trained here"),
        ("dense Adam", 1, "trained here"), ("SparseAdam tables + Adam", 1, "trained here")]
    steps = rows[0]["steps"]
    fresh = train_to_target(data, cfg.replace(max_steps=steps), device="cpu", progress="none")
    assert fresh.final_hr == rows[0]["hr"] and fresh.final_ndcg == rows[0]["ndcg"]  # the same run, cut there
    assert len(T.accuracy_comparisons(rows)) == 1 and "seed" in str(T.accuracy_table(rows))


def test_optimizer_comparison_runs_every_variant_and_pairs_its_repeats(data):
    comp = T.optimizer_comparison(data, CFG, (256, 1024), samples_per_point=1024, min_steps=2, repeats=2)
    assert comp["baseline_impl"] == "for-loop" and len(comp["rows"]) == 8
    for r in comp["rows"]:
        assert r["optimizer_ms"] > 0 and r["step_ms"] >= r["optimizer_ms"] and len(r["step_ratios"]) == 2
        if r["baseline"]:
            assert r["step_ratios"] == [1.0, 1.0]
    assert len(T.optimizer_comparisons(comp)) == 12


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
    assert T.step_times(_opt_comp(), 256) == {"dense Adam": 7.0, "SparseAdam tables + Adam": 4.0}


def _curve_result(times, steps=(0, 100, 200, 300, 350)):
    steps = list(steps)
    return TrainResult(config={}, dataset="d", data_source="", synthetic=True, device="cpu", world_size=1,
                       target_hr=None, time_to_target_s=None, steps_to_target=None, epochs_to_target=None,
                       epochs=1.0, steps=350, samples=1, train_time_s=times[-1], eval_time_s=0.0, samples_per_s=1.0,
                       phase_time_s={}, curve={"step": steps, "time_s": times, "hr": [0.1] * len(steps)})


def test_the_pace_table_shows_each_comparable_interval_at_its_own_length():
    rows = S.pace_table(_curve_result([0.0, 1.0, 2.0, 4.5, 5.75])).rows  # 50 steps at 25 ms: its own length
    assert [r["steps"] for r in rows] == [100, 100, 100, 50] and rows[3]["vs fastest"] == 2.5
    # lesson 01's curve: 3 intervals of 4834 steps, one of 967 near the target, a duplicate evaluation 3 steps
    # later; the 3-step interval is mostly the clock's jitter, not a pace: it is left out
    steps = (0, 4834, 9668, 14502, 14505, 15472)
    times = [0.0]
    for n, m in zip([b - a for a, b in zip(steps, steps[1:])], (3.08, 3.33, 3.15, 6.13, 2.71)):
        times.append(times[-1] + n * m / 1000)
    assert [r["steps"] for r in S.pace_table(_curve_result(times, steps=steps)).rows] == [4834, 4834, 4834, 967]
    assert S.pace_table(_curve_result([0.0, 1.0], steps=(0, 100))).rows[0]["vs fastest"] == 1.0


def test_the_pace_drift_table_states_both_ends_and_the_least_uncertainty():
    (big,) = S.pace_drift_table({"before": 152_264.0, "after": 135_505.0, "rate": 143_884.6}).rows
    assert big["moved"] == "-11%" and big["±"] == "11%" and big["mean"] == 143_885
    (run,) = S.pace_drift_table({"before": 100_000.0, "after": 101_000.0, "rate": 100_500.0, "run": 53_265.0}).rows
    assert run["run/mean"] == "-47%" and run["±"] == "47%"
    (once,) = S.pace_drift_table({"before": 100_000.0, "after": None}).rows
    assert "moved" not in once and once["±"] == "0%"


def _throughput(points):
    t = Table(["batch size", "steps", "samples/s", "ms/step"])
    for b, sps in points:
        t.add(**{"batch size": b, "steps": 10, "samples/s": sps, "ms/step": 1000 * b / sps})
    return t


def test_the_throughput_comparisons_decide_growth_and_leave_a_small_step_unresolved():
    grown, last = S.throughput_comparisons(_throughput([(256, 40_000), (1024, 120_000), (4096, 130_000)]))
    assert grown.question == "samples/s, batch 4096 / batch 256" and grown.outcome == compare.HIGHER
    assert last.estimate == pytest.approx(130 / 120) and last.outcome == compare.UNRESOLVED  # 8% within 5% + 5%
    peaked = S.throughput_comparisons(_throughput([(256, 40_000), (1024, 130_000), (4096, 100_000)]))[1]
    assert peaked.outcome == compare.LOWER
    # the yardstick moved 30% in this lesson: the same 1.3x gain is no longer resolved
    drifted = S.throughput_comparisons(_throughput([(256, 100_000), (1024, 130_000)]), noise=0.3)
    assert len(drifted) == 1 and drifted[0].outcome == compare.UNRESOLVED
    assert S.throughput_comparisons(_throughput([(256, 1.0)])) == []


def test_plain_sgd_is_compared_with_the_popularity_floor_within_the_sampling_error():
    def run(hr, optimizer="sgd"):
        return SimpleNamespace(config={"optimizer": optimizer, "peak_lr": 0.1}, final_hr=hr)

    below, above = S.sgd_comparisons([run(0.30), run(0.60), run(0.7, "adam")], 0.3929, users=6040)
    assert (below.outcome, above.outcome) == (compare.LOWER, compare.HIGHER)
    # 0.3907 against 0.3929: within a point of HR@10 over a million users, too close to tell over 6040
    assert S.sgd_comparisons([run(0.3907)], 0.3929, users=10**6)[0].outcome == compare.SAME
    assert S.sgd_comparisons([run(0.3907)], 0.3929, users=6040)[0].outcome == compare.UNRESOLVED


def test_loader_comparisons_pair_the_passes():
    comps = {c.question: c for c in S.loader_comparisons(constructed_comparison())}
    best = comps["loading, batched, no workers / per-sample DataLoader"]
    assert best.estimate == pytest.approx(5.0) and best.outcome == compare.HIGHER
    device = comps["training, device sampler / batched, no workers"]
    assert device.estimate == pytest.approx(165_000 / 160_000) and device.outcome == compare.SAME  # passes agree
    assert comps["loading, num_workers=1 / per-sample DataLoader"].outcome == compare.LOWER
    wait = comps["first-batch wait, persistent_workers / prefetch_factor=4"]
    assert wait.estimate == pytest.approx(0.025 / 0.012) and wait.outcome == compare.HIGHER  # shorter is higher
    # passes that disagree: the worker rung's second pass 3x its first
    noisy = {c.question: c for c in S.loader_comparisons(constructed_comparison(second={1: 3.0}))}
    assert noisy["training, num_workers=1 / per-sample DataLoader"].outcome == \
        compare.UNRESOLVED


def test_a_rung_whose_training_rate_was_not_measured_is_said_so_not_printed_as_nan():
    """Both passes of a rung can hit a load spike (its 1-step run outlasting its many-step run: train_sps nan); the
    table says the rate was not measured, and no comparison is made with it."""
    for i in (0, 6, 7):  # the first rung (every ratio's reference), a DataLoader rung, the device sampler
        comp = constructed_comparison()
        row = comp["rows"][i]
        row["train_sps"] = math.nan
        for p in row["passes"]:
            p["train_sps"] = None
        table = str(S.comparison_table(comp))
        assert "nan" not in table and "n/a" in table, (i, table)
        assert all(not math.isnan(c.estimate) for c in S.loader_comparisons(comp))


def test_later_lessons_start_from_the_adam_lesson_01_ran(tmp_path, monkeypatch):
    """lesson.setup's base setting (lessons 02-07) takes the baseline's adam_impl with its lr; a record saved
    before the choice, or on another dataset, gives the default."""
    from course_lib import lesson
    from course_lib.results import save_result

    data = SimpleNamespace(name="ml-1m")
    assert lesson.baseline_adam_impl(data, tmp_path) == "auto"  # nothing saved
    save_result("01_baseline", {"dataset": "ml-1m", "lr": 2e-3}, tmp_path)  # saved before the choice
    assert lesson.baseline_adam_impl(data, tmp_path) == "auto"
    save_result("01_baseline", {"dataset": "ml-20m", "config": {"adam_impl": "fused"}}, tmp_path)
    assert lesson.baseline_adam_impl(data, tmp_path) == "auto"
    monkeypatch.setenv("COURSE_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(lesson, "load_implicit", lambda name, profile: SimpleNamespace(name=name, source=name))
    monkeypatch.setattr(lesson, "default_target_hr", lambda data: 0.5)
    save_result("01_baseline", {"dataset": "ml-1m", "lr": 2e-3, "config": {"adam_impl": "fused"}}, tmp_path)
    s = lesson.setup("smoke", dataset="ml-1m", device="cpu", quiet=True)
    assert (s.base_cfg.adam_impl, s.base_lr) == ("fused", 2e-3) and "adam (fused) lr 0.002" in s.describe()
