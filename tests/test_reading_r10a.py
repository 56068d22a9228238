"""Readings of lessons 00-01 fixed after the tenth full-profile run (head 30428d3, /tmp/course15/runs/20261203-073331;
read by r10a, /work/notes/read-full-run-10-r10a.md): each test feeds the reading that run's numbers and an opposite
case."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from course_lib.lessons import l01_baseline as L01  # noqa: E402
from test_reading_agreement import disagreements  # noqa: E402
from test_reading_r4a import _opt_row  # noqa: E402

# lesson 01 cell 23 of the run: median ms per step; paired ratios consistent with the table's "within noise" marks
RUN_OPTIMIZER = (
    (256, "dense Adam, for-loop", 2.983, 5.482, [1, 1, 1], [1, 1, 1]),
    (256, "dense Adam, foreach", 3.333, 5.941, [0.85, 0.97, 0.9], [0.88, 1.0, 0.92]),
    (256, "dense Adam, fused", 0.918, 2.746, [3.2, 3.25, 3.3], [1.95, 2.0, 2.05]),
    (256, "SparseAdam tables + Adam", 1.794, 3.263, [1.6, 1.66, 1.7], [1.6, 1.68, 1.7]),
    (16384, "dense Adam, for-loop", 2.986, 39.21, [1, 1, 1], [1, 1, 1]),
    (16384, "dense Adam, foreach", 3.13, 34.52, [0.9, 1.0, 0.95], [1.1, 1.14, 1.2]),
    (16384, "dense Adam, fused", 1.458, 31.03, [2.0, 2.05, 2.1], [1.2, 1.26, 1.3]),
    (16384, "SparseAdam tables + Adam", 17.43, 40.97, [0.17, 0.17, 0.18], [0.9, 0.96, 1.0]),
)


def _opt_comp(rows=RUN_OPTIMIZER):
    return {"baseline_impl": "for-loop", "device": "cpu", "repeats": 3,
            "rows": [_opt_row(*r, baseline=r[1] == "dense Adam, for-loop") for r in rows]}


def optimizer_derived(comp) -> list[float]:
    """The numbers the optimizer reading derives from two rows of its table beyond their ratios: per dense variant, the
    whole-step speedup its optimizer phase accounts for and the ms its step moved beyond that phase's (5 %: the
    threshold), and the ladder factor of the fused row's optimizer-phase speedups."""
    ref = {r["batch size"]: r for r in comp["rows"] if r["baseline"]}
    out = [0.05]
    for r in comp["rows"]:
        b = ref[r["batch size"]]
        out += [L01._optimizer_explained(b, r), (b["step_ms"] - r["step_ms"]) - (b["optimizer_ms"] - r["optimizer_ms"])]
    fused = {r["batch size"]: L01._optimizer_explained(ref[r["batch size"]], r) for r in comp["rows"]
             if r["variant"] == "dense Adam, fused"}
    if len(fused) == 2:
        lo, hi = sorted(fused)
        out.append(fused[lo] / fused[hi])
    return out


def test_the_optimizer_reading_does_not_credit_an_implementation_with_time_saved_outside_its_phase():
    """r10a 01-C1: "dense Adam, foreach: optimizer no measurable difference (0.95x), whole step 1.14x faster" and
    "although foreach and fused made the whole step measurably faster above", where foreach's optimizer phase took
    3.13 against 2.986 ms and the step fell 4.69 ms; fused's step fell 8.18 ms at batch 16384 while its optimizer
    phase saved 1.53 ms (the optimizer is 8% of the step: 1.08x at most, at zero cost)."""
    comp = _opt_comp()
    text = L01.optimizer_reading(comp)
    assert "although foreach and fused" not in text and "although fused made the whole step measurably faster" in text
    assert ("dense Adam, foreach: optimizer no measurable difference (0.95x), whole step 1.14x faster (its optimizer "
            "phase accounts for 1.00x)") in text, text
    assert ("dense Adam, fused: optimizer 2.05x faster, whole step 1.26x faster (its optimizer phase accounts for "
            "1.04x)") in text
    assert ("(dense Adam, fused at batch 256: 0.67 ms more saved; dense Adam, foreach at batch 16384: 4.83 ms more "
            "saved; dense Adam, fused at batch 16384: 6.65 ms more saved)") in text, text
    assert ("about 1.6x smaller; from its optimizer phase's saving alone (1.60x at batch 256, 1.04x at 16384) about "
            "1.5x smaller") in text, text
    ref = {r["batch size"]: r for r in comp["rows"] if r["baseline"]}
    gain = {b: ref[b]["step_ms"] / next(r["step_ms"] for r in comp["rows"] if r["batch size"] == b
                                        and r["variant"] == "dense Adam, fused") for b in ref}
    extra = (*optimizer_derived(comp), gain[256] / gain[16384])
    assert disagreements(text, L01.optimizer_table(comp), extra=extra) == []
    # opposite: dense steps that moved by their optimizer phase's saving only: no such clause, foreach not counted
    # where its optimizer phase was not faster, and fused's whole-step gain said as before
    alike = [list(r) for r in RUN_OPTIMIZER]
    alike[2][3] = 5.482 - (2.983 - 0.918)  # 3.417
    alike[5][3], alike[5][5] = 39.21 + (3.13 - 2.986), [0.97, 0.99, 1.0]
    alike[6][3], alike[6][5] = 39.21 - (2.986 - 1.458), [1.03, 1.04, 1.05]
    plain = L01.optimizer_reading(_opt_comp(alike))
    assert "accounts for" not in plain and "run the same sampling" not in plain and "alone" not in plain, plain
    assert "dense Adam, fused: optimizer 3.25x faster, whole step 1.60x faster;" in plain


def _lazy_rows(lazy_hr=(0.5755, 0.5682)):
    """Lesson 01 cell 25 of the run: HR@10 at 0, 4834 and 9668 steps; the baseline's curve (dense, seed 0) from the
    run's 01_baseline.json, the other runs' evaluation at 4834 steps read off the figure (0.40, 0.39)."""
    def row(opt, seed, hrs, src):
        return {"optimizer": opt, "seed": seed, "steps": 9668, "epochs": 0.5, "users": 6040, "hr": hrs[-1],
                "ndcg": 0.35, "train_s": 40.0, "from": src, "curve": {"step": [0, 4834, 9668], "hr": list(hrs),
                                                                       "time_s": [0.0, 20.0, 40.0]}}
    return [row("dense Adam", 0, (0.0954, 0.4139, 0.6247), "the baseline run"),
            row("SparseAdam tables + Adam", 0, (0.0954, 0.39, lazy_hr[0]), "trained here"),
            row("dense Adam", 1, (0.0990, 0.4023, 0.5998), "trained here"),
            row("SparseAdam tables + Adam", 1, (0.0990, 0.39, lazy_hr[1]), "trained here")]


def test_the_lazy_adam_reading_answers_the_same_seconds_question():
    """r10a 01-H1: the markdown asks "after the same number of steps? And after the same number of seconds?"; the
    reading answered the first and gave only "the budget costs 53.0 s of training with dense Adam and 31.5 s with lazy
    Adam", while its figure's right panel has lazy Adam at 0.57 at 31.5 s and dense Adam near 0.45 there."""
    ms = {"dense Adam": 5.482, "SparseAdam tables + Adam": 3.263}
    rows = _lazy_rows()
    text = L01.accuracy_reading(rows, ms, resolved=True)
    assert "lazy Adam is behind by more than the noise, step for step" in text
    at = 9668 * 3.263 / 5.482
    share = (at - 4834) / 4834
    dense_at = ((0.4139 + (0.6247 - 0.4139) * share) + (0.4023 + (0.5998 - 0.4023) * share)) / 2
    assert (f"In the same 31.5 s dense Adam runs 5,755 steps, where its curves read HR@10 {dense_at:.4f} (mean of 2 "
            "seeds, on a straight line between their evaluations at steps 4834 and 9668) against lazy Adam's 0.5718: "
            f"a difference of +{0.57185 - dense_at:.4f} against the same noise (0.0249): lazy Adam is ahead by more "
            "than the noise on the training clock") in text, text
    # derived as test_reading_agreement's accuracy test derives them, and the same-seconds clause's numbers
    from course_lib.metrics import hr_standard_error

    derived = (0.61225, 0.57185, 0.57185 - 0.61225, 0.6247 - 0.5998, 2 * hr_standard_error(0.59205, 6040), 10, 2,
               6040, 5.482, 3.263, 9668 * 5.482 / 1000, 9668 * 3.263 / 1000, at, dense_at, 0.57185 - dense_at, 4834)
    assert disagreements(text, L01.accuracy_table(rows), extra=derived) == []
    # opposite: lazy Adam at its budget where dense Adam's curves are at the same seconds: no measurable difference
    level = L01.accuracy_reading(_lazy_rows((0.4500, 0.4460)), ms, resolved=True)
    assert "no measurable difference on the training clock" in level and "ahead" not in level
    # and a lazy step dearer than dense's: dense Adam is the cheaper one, read at lazy Adam's curves
    dear = L01.accuracy_reading(rows, {"dense Adam": 3.263, "SparseAdam tables + Adam": 5.482}, resolved=True)
    assert "lazy Adam runs 5,755 steps" in dear and "against dense Adam's 0.6122" in dear, dear
    # a step difference the repeats did not resolve: no clock verdict beyond "neither is measurably cheaper"
    assert "In the same" not in L01.accuracy_reading(rows, ms, resolved=False)


RUN_THROUGHPUT = ((256, 2343, 34172, 7.492), (1024, 585, 166161, 6.163), (4096, 146, 408298, 10.03),
                  (16384, 36, 546119, 30.0), (65536, 9, 466982, 140.3))


def _throughput(rows=RUN_THROUGHPUT):
    from course_lib.tables import Table

    t = Table(["batch size", "steps", "samples/s", "ms/step"], title="Training throughput vs batch size")
    for b, n, sps, ms in rows:
        t.add(**{"batch size": b, "steps": n, "samples/s": sps, "ms/step": ms})
    return t


def test_the_throughput_reading_says_when_a_larger_batch_stepped_faster_than_a_smaller_one():
    """r10a 01-H2: "from batch 256 to 65536 (256x) samples/s went from 34,172 to 466,982 (13.7x)" over a table whose
    batch 256 ran 7.492 ms per step and batch 1024 6.163: four times the samples in less time, the machine's pace
    moving between the single runs, unsaid, under a ratio that rests on that first point."""
    t = _throughput()
    text = L01.throughput_reading(t)
    assert ("; but batch 256's step took 7.492 ms and batch 1024's 6.163, 4x the samples in less time, which no step "
            "does by itself (the same optimizer step, more of everything else): the machine's pace moved between "
            "these runs, one per batch, so every ratio here is uncertain by at least 1.22x") in text, text
    assert disagreements(text, t, extra=(20,)) == []
    # opposite: steps that grow with the batch (batch 256 at the paired runs' 5.48 ms): nothing to say
    steady = list(RUN_THROUGHPUT)
    steady[0] = (256, 2343, 46715, 5.48)
    assert "less time" not in L01.throughput_reading(_throughput(steady))


def test_the_bottleneck_reading_says_the_optimizers_share_once_and_whose_share_the_shuffle_raised():
    """r10a 01-S1: "the largest phase of the baseline's training clock is optimizer (54%); the optimizer phase took 54%
    (2.92 ms per step), sampling 1%; ... the optimizer took 55% and sampling 11% ... — more, because the profiled run
    starts an epoch": one share twice, and "more" of the optimizer's 55% too, which the shuffle does not raise."""
    from types import SimpleNamespace

    from course_lib.train import TrainConfig, build_model
    from test_reading_r3a import _result

    model = build_model(SimpleNamespace(num_users=50, num_items=80), TrainConfig(factors=4, layers=(8, 4)))
    phases = {"sampling": 1.371, "forward_backward": 39.88, "optimizer": 50.81, "evaluation": 3.535}
    r = _result(phases, 94.4)
    r.steps, r.steps_per_epoch = 17406, 19337
    prof = SimpleNamespace(phase_s={"optimizer": 0.178961, "forward_backward": 0.112356, "sampling": 0.035426},
                           steps=50)
    said = L01.bottleneck_reading(r, model, prof)
    assert "is optimizer (54%), 2.92 ms per step, sampling 1%;" in said and "the optimizer phase took" not in said
    assert "— sampling's share is larger, because the profiled run starts an epoch" in said
    # opposite: forward and backward the largest phase: the optimizer's own share follows
    other = _result({**phases, "forward_backward": 60.0}, 114.5)
    other.steps, other.steps_per_epoch = 17406, 19337
    assert "is forward_backward (52%); the optimizer phase took 44% (2.92 ms per step)" in L01.bottleneck_reading(
        other, model)


def test_the_compile_reading_says_no_measurable_difference_as_a_sentence():
    """r10a 01-S2: "at batch 256: compiled steps no measurable difference (0.83x) (7.207 -> 8.692 ms per step)"."""
    from test_reading_r5a import _compile_comp

    comp = _compile_comp([(256, 7.207, 8.692, 16.08, [0.8, 1.02, 0.83]), (16384, 44.78, 40.83, 6.3, [1.2, 0.98, 1.1])])
    text = L01.compile_reading(comp)
    assert ("at batch 256: no measurable difference between eager and compiled steps (0.83x: 7.207 -> 8.692 ms per "
            "step), so the 16.1 s of compiling never pays back") in text, text
    assert "(1.10x: 44.78 -> 40.83 ms per step)" in text
    assert disagreements(text, L01.compile_table(comp)) == []
    # opposite: a measurable slowdown keeps its verb
    slower = L01.compile_reading(_compile_comp([(256, 7.207, 8.692, 16.08, [0.8, 0.82, 0.83])]))
    assert "at batch 256: compiled steps 1.21x slower (7.207 -> 8.692 ms per step), so the 16.1 s" in slower


def test_the_lr_sweep_table_prints_each_lr_and_metric_alike(monkeypatch):
    """r10a 01-S3: the lr sweep's table printed "5.000e-04" over "0.001" and HR@10 "0.519" and "0.625" over "0.6028"
    (and train loss "0.409"), while the SGD line under it quotes the best run's HR@10 as "0.6250"."""
    from types import SimpleNamespace

    from course_lib import sweeps as search
    from course_lib.train.ncf import TrainConfig

    run = {5e-4: (0.5190, 0.3118, 0.4345), 1e-3: (0.6250, 0.3943, 0.4090), 2e-3: (0.6028, 0.3743, 0.4075),
           5e-3: (0.5374, 0.3268, 0.4062)}

    def fake_train(data, cfg, **kw):
        hr, ndcg, loss = run.get(cfg.base_lr, (0.3907, 0.2263, 0.4686))
        return SimpleNamespace(final_hr=hr, final_ndcg=ndcg, epochs=0.5, steps=9669, curve={"loss": [loss]},
                               config={"optimizer": cfg.optimizer, "peak_lr": cfg.base_lr, "base_lr": cfg.base_lr})

    monkeypatch.setattr(search, "train_to_target", fake_train)
    cfg = TrainConfig(global_batch_size=256, optimizer="adam", base_lr=1e-3)
    table, best, _ = search.lr_sweep(None, cfg, (1e-3, 2e-3, 5e-3), max_epochs=0.5, max_extensions=2,
                                     extra=(cfg.replace(optimizer="sgd", base_lr=0.1),))
    text = str(table)
    assert best == 1e-3 and "e-04" not in text
    assert "adam       0.0005  9669   0.5     0.5190  0.3118   0.4345" in text, text
    assert "adam       0.001   9669   0.5     0.6250  0.3943   0.4090" in text
    # opposite: an lr of two significant figures and a metric of four keep their digits
    assert "sgd        0.1     9669   0.5     0.3907  0.2263   0.4686" in text


# lesson 01 cell 21 of the run: rung index -> (first batch s, loading samples/s, training samples/s), the kept pass
RUN_LOADER = {0: (0.3977, 298_743, 37_264), 1: (0.4987, 49_485, 23_719), 3: (0.4093, 56_263, 19_838),
              4: (0.5468, 63_265, 18_874), 5: (0.4552, 102_041, 28_890), 6: (0.3283, 1_486_491, 55_351),
              7: (0.0262, 14_804_749, 61_364)}


def _loader_comp(values=RUN_LOADER):
    """The run's ladder in loader_comparison's shape (test_loader_ladder's constructed comparison, its rates replaced):
    the other pass 2% slower everywhere, so every kept ratio is also each pass's."""
    from test_loader_ladder import constructed_comparison

    comp = constructed_comparison()
    for i, (first, load, train) in values.items():
        kept = {"first_batch_s": first, "load_sps": load, "train_sps": train}
        other = {"first_batch_s": first * 1.02, "load_sps": load / 1.02, "train_sps": train / 1.02}
        comp["rows"][i].update(kept, passes=[other, kept])
    comp["epoch_samples"] = 4_950_135
    return comp


def loader_derived(comp) -> list[float]:
    """The training speedups the loader reading says loading alone accounts for: per pair of rungs without workers,
    the reference's training time per sample less the loading time the other saves."""
    out = []
    for a in comp["rows"]:
        for b in comp["rows"]:
            if a is not b and a.get("measured") and b.get("measured"):
                acc = L01._loading_accounts(a, b)
                out += [] if acc is None else [acc]
    return out


def test_the_loader_reading_says_how_much_of_a_training_gain_loading_alone_accounts_for():
    """r10a 01-H3: "training went from 37,264 samples/s to 55,351 at the best DataLoader rung (batched Dataset, no
    workers: 1.49x)" and "the device sampler trained at 61,364: against the best DataLoader, 1.11x", where these
    rungs load in the training process: the per-sample rung's loading is 1/298,743 s = 3.35 us of its 26.84 us a
    sample, the batched one's 0.67 us, so loading alone accounts for 1.11x of the 1.49x (and 1.03x of the 1.11x)."""
    comp = _loader_comp()
    text = L01.loader_reading(comp)
    per = {i: (1 / v[2], 1 / v[1]) for i, v in RUN_LOADER.items()}  # training and loading seconds per sample
    first = per[0][0] / (per[0][0] - (per[0][1] - per[6][1]))
    second = per[6][0] / (per[6][0] - (per[6][1] - per[7][1]))
    assert f"(batched Dataset, no workers: 1.49x, of which loading alone accounts for {first:.2f}x)" in text, text
    assert f"against the best DataLoader, 1.11x, of which loading alone accounts for {second:.2f}x;" in text
    assert "a training gain beyond that came off the work every rung shares" in text
    from test_reading_agreement import _pass_ratios

    assert disagreements(text, L01.comparison_table(comp), extra=(1, 2, 0.0047, *_pass_ratios(comp), first,
                                                                   second)) == []
    # opposite: training rates that loading accounts for (each rung's training time per sample is its loading time
    # plus the same 15.4 us of model step): no such clause
    additive = {i: (f, load, round(1 / (1 / load + 15.4e-6))) for i, (f, load, _) in RUN_LOADER.items()}
    plain = L01.loader_reading(_loader_comp(additive))
    assert "accounts for" not in plain and "every rung shares" not in plain, plain


def test_the_compile_reading_says_when_inductors_cache_served_every_graph():
    """r10a 01-S4: "so the 16.1 s of compiling never pays back", under a markdown that calls inductor's first compile
    "code generation and a build, timed in the full profile's table", over a table whose graphs came "2 of 2" from
    inductor's on-disk cache: no code was generated or built in those 16.1 s."""
    from test_reading_r5a import _compile_comp

    comp = _compile_comp([(256, 7.207, 8.692, 16.08, [0.8, 1.02, 0.83]), (16384, 44.78, 40.83, 6.3, [1.2, 0.98, 1.1])])
    text = L01.compile_reading(comp)
    assert ("inductor's on-disk cache served every graph at batch 256 and 16384: those compile times hold no code "
            "generation or build, which a first compile on a fresh machine pays") in text, text
    assert disagreements(text, L01.compile_table(comp)) == []
    # opposite: a compile that generated its graphs (cache misses) says nothing of the cache
    for r in comp["rows"]:
        r["cache_hits"], r["cache_misses"] = 0, 2
    assert "on-disk cache" not in L01.compile_reading(comp)
