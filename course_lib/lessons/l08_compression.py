"""Lesson 08's last section: communication-efficient data parallelism, measured and priced.

PowerSGD, top-k with and without error feedback, local SGD and delayed averaging, each plugged into the
course's one training step (the mechanics are :mod:`course_lib.comm.compression`, the step the course's
Engine), on NeuMF and BERT at 2 ranks for a fixed number of steps from a warm start past each model's floor:
bytes per step, step times, losses and the steps each method lost against the fp32 all-reduce. The prices at
other links and ranks come from the alpha-beta-gamma model, with lesson 09's step model on the GPU links
(:mod:`.l08_prices`); the questions are decided as :class:`course_lib.compare.Comparison` rows,
a model's only where its fp32 run cleared its floor (:func:`floor_comparisons`)."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import numpy as np

from .. import compare
from ..config import pick
from ..tables import Table

REFERENCE = "fp32 all-reduce"  # the method every other is compared with


COMPRESSION_METHODS = (  # (label, method name, its settings); "seeds": runs repeated with other seeds
    ("fp32 all-reduce", "fp32", {}),
    ("PowerSGD rank 1", "powersgd", {"rank": 1}),
    ("PowerSGD rank 4", "powersgd", {"rank": 4}),
    ("top-0.1% + error feedback", "topk", {"density": 0.001, "error_feedback": True}),
    ("top-0.1%, no error feedback", "topk", {"density": 0.001, "error_feedback": False}),
    ("local SGD H=1", "local_sgd", {"period": 1}),
    ("local SGD H=4", "local_sgd", {"period": 4}),
    ("local SGD H=16", "local_sgd", {"period": 16}),
    ("delayed averaging", "delayed", {}),
)


SEEDED = ("fp32 all-reduce", "top-0.1% + error feedback", "top-0.1%, no error feedback")  # run at every seed


def compression_spec(profile: str, dataset: str = "ml-1m") -> dict:
    """What the section measures at 2 ranks, per model: a warm start (``warm``: fp32 data-parallel steps that take
    the model past its floor, the popularity ranking or the token frequencies, so the methods are compared where
    the model learns more than the floor), then a fixed number of steps (a multiple of 16, so local SGD's H = 16
    averages a whole number of times) of every method from it, the seeded ones at every seed."""
    return {
        "profile": profile, "dataset": dataset,
        "neumf": {"warm": {"batch": pick(profile, full=8192, smoke=512), "steps": pick(profile, full=160, smoke=4),
                           "lr": 1e-2, "seed": 100},
                  "batch": pick(profile, full=4096, smoke=256), "steps": pick(profile, full=64, smoke=16),
                  "lr": 1e-2, "seeds": pick(profile, full=[0, 1, 2], smoke=[0, 1])},
        # BERT-tiny: the 2-layer preset passes the token frequencies' loss in ~40 steps of batch 32 on a CPU
        "bert": {"preset": "tiny", "seq_len": 32, "vocab_size": pick(profile, full=4096, smoke=1024),
                 "warm": {"batch": pick(profile, full=32, smoke=8), "steps": pick(profile, full=40, smoke=4),
                          "lr": 2e-2, "seed": 100},
                 # a quarter of the warm start's lr: at 2e-2 the held-out loss of one seed jumped by more than
                 # the 32 steps gain, so the seed spread hid every method's steps lost
                 "batch": pick(profile, full=32, smoke=4), "steps": pick(profile, full=32, smoke=16), "lr": 5e-3,
                 "seeds": pick(profile, full=[0, 1, 2], smoke=[0]),
                 "max_tokens": pick(profile, full=None, smoke=200_000)},
        "methods": [list(m) for m in COMPRESSION_METHODS], "seeded": list(SEEDED), "models": ["neumf", "bert"],
    }


def _warm_state(engine, next_batch, steps: int) -> dict:
    """``steps`` fp32 data-parallel steps of ``engine``; the weights and optimizer state every method starts from."""
    import copy

    for _ in range(steps):
        engine.step(*next_batch())
    return copy.deepcopy({"model": engine.model.state_dict(), "optimizer": engine.optimizer.state_dict()})


def _start_from(engine, warm: dict, lr: float) -> None:
    """The warm start copied into ``engine`` in place (DDP and the method keep their references), at ``lr``."""
    engine.model.load_state_dict(warm["model"])
    engine.optimizer.load_state_dict(warm["optimizer"])
    engine.set_lr(lr)


def _run_fixed_steps(engine, next_batch, steps: int, method, evaluate, curve_every: int = 0) -> dict:
    """``steps`` steps of the course's engine; bytes (steady state: from the method's warm-up on), step times,
    the training loss of every step (the global batch's mean), the final held-out metric (rank 0) and, with
    ``curve_every``, the metric every that many steps (the reference's curve that steps lost are read on)."""
    import time

    from ..train.engine import sync

    import torch.distributed as dist

    losses, times, curve = [], [], []
    for step in range(1, steps + 1):
        batch, count = next_batch()
        t0 = time.perf_counter()
        loss, _ = engine.step(batch, count)
        sync(engine.device)
        times.append(time.perf_counter() - t0)
        # each rank's share is W x its part of the global mean (DDP then averages over the W ranks), so the
        # mean of the shares is the global batch's mean loss (an all-reduce outside the recorder: not training)
        dist.all_reduce(loss)
        losses.append(float(loss) / dist.get_world_size())
        if curve_every and step % curve_every == 0 and step < steps and engine.parallel.rank == 0:
            curve.append((step, evaluate(engine)))
    rec = engine.parallel.recorder
    metric = evaluate(engine) if engine.parallel.rank == 0 else None
    since = method.warmup_steps
    return {"bytes_per_step": rec.bytes_per_step(since), "messages": rec.messages(since),
            "steady_steps": steps - since, "step_s": statistics.median(times[since:]), "step_times": times[since:],
            "losses": losses,
            "metric": metric, "curve": curve + [(steps, metric)]}


def _cycle(batches):
    """``next_batch()`` over ``batches``, epoch after epoch: ``(batch, None)``."""
    it = None

    def next_batch():
        nonlocal it
        b = next(it, None) if it is not None else None
        if b is None:
            it = iter(batches)
            b = next(it)
        return b, None
    return next_batch


def _method_runs(spec: dict, key: str, methods, build, batches, evaluate, floor: dict) -> list[dict]:
    """Every method of ``methods`` from the warm start of ``spec[key]`` (``build(seed, lr, batch, method)`` -> an
    engine, ``batches(cfg_seed, engine)`` -> ``next_batch``): one row per (method, seed), with the floor."""
    from ..comm.compression import make_method

    s, w = spec[key], spec[key]["warm"]
    warm_engine = build(w["seed"], w["lr"], w["batch"], None)
    warm = _warm_state(warm_engine, batches(w["seed"], warm_engine), w["steps"])
    rank0 = warm_engine.parallel.rank == 0
    floor = {**floor, "start": evaluate(warm_engine) if rank0 else None}
    rows = []
    for label, name, kw in methods:
        for seed in (s["seeds"] if label in spec["seeded"] else s["seeds"][:1]):
            method = make_method(name, **kw)
            engine = build(seed, s["lr"], s["batch"], method)
            _start_from(engine, warm, s["lr"])
            every = s["steps"] // (4 if key == "neumf" else 8) if name == "fp32" else 0
            out = _run_fixed_steps(engine, batches(seed, engine), s["steps"], method, evaluate, every)
            if every and rank0:  # the reference's curve starts where every method did
                out["curve"] = [(0, floor["start"])] + out["curve"]
            rows.append({"method": label, "seed": seed, **floor, **out})
    return rows


def _neumf_runs(spec: dict, methods) -> list[dict]:
    import torch

    from ..data import load_implicit
    from ..parallel.data_parallel import DataParallel
    from ..train import ncf

    data = load_implicit(spec["dataset"], profile=spec["profile"])
    dev = torch.device("cpu")

    def cfg(seed, lr, batch):
        return ncf.TrainConfig(global_batch_size=batch, optimizer="adam", base_lr=lr, seed=seed)

    def build(seed, lr, batch, method):  # method None: DDP's own fp32 all-reduce
        c = cfg(seed, lr, batch)
        return ncf.build_engine(data, c, dev, parallel=DataParallel(batch, None, dev, comm=method))

    floor = {"model": "NeuMF", "metric_name": "HR@10", "higher_is_better": True, "floor_name": "popularity ranking",
             "floor": ncf.evaluate_popularity(data)[0]}
    def batches(seed, engine):
        return _cycle(ncf.make_batches(data, cfg(seed, 1.0, engine.parallel.batch.global_batch_size)))

    return _method_runs(spec, "neumf", methods, build, batches, lambda e: ncf.evaluate(e.model, data)[0], floor)


def bert_data(s: dict):
    import torch

    from ..data.text import build_mlm_data, load_corpus

    return build_mlm_data(load_corpus("pydoc"), vocab_size=s["vocab_size"], seq_len=s["seq_len"],
                          device=torch.device("cpu"), max_tokens=s["max_tokens"])


def bert_cfg(s: dict, seed: int, lr: float, batch: int):
    from ..train import mlm

    return mlm.MLMTrainConfig(model=s["preset"], global_batch_size=batch, micro_batch_size=None, optimizer="lamb",
                              base_lr=lr, base_batch_size=batch, seed=seed, warmup_steps=0, max_steps=s["steps"],
                              dropout=0.0)


def _bert_runs(spec: dict, methods) -> list[dict]:
    import torch

    from ..parallel.data_parallel import DataParallel
    from ..precision import Precision
    from ..train import mlm
    from ..train.engine import Engine

    s = spec["bert"]
    dev = torch.device("cpu")
    data = bert_data(s)
    prec = Precision("fp32", dev)

    def build(seed, lr, batch, method):
        cfg = bert_cfg(s, seed, lr, batch)
        torch.manual_seed(seed)
        model = mlm.build_model(cfg, data.vocab_size, data.seq_len)
        return Engine(model, mlm.make_optimizer(model, cfg), precision=prec,
                      parallel=DataParallel(batch, None, dev, comm=method), loss_sum=mlm._mlm_loss_sum)

    def batches(seed, engine):
        cfg, gen = bert_cfg(s, seed, 1.0, engine.parallel.batch.global_batch_size), torch.Generator().manual_seed(seed)
        return lambda: mlm._global_batch(data, cfg, gen, dev)

    floor = {"model": f"BERT-{s['preset']}", "metric_name": "held-out MLM loss", "higher_is_better": False,
             "floor_name": "token frequencies", "floor": data.unigram_loss()}
    return _method_runs(spec, "bert", methods, build, batches, lambda e: mlm.evaluate(e.model, data, prec), floor)


def compression_worker(rank: int, world_size: int, spec: dict) -> list[dict]:
    """Every method of ``spec`` on NeuMF and BERT-tiny at ``world_size`` ranks (a worker for ``launch``):
    one row per (model, method, seed) with bytes per step, step time, losses and the final metric."""
    methods = [tuple(m) for m in spec["methods"]]
    runs = {"neumf": _neumf_runs, "bert": _bert_runs}
    return [row for model in spec["models"] for row in runs[model](spec, methods)]


def final_loss(losses: list[float]) -> float:
    """The training loss a run ended at: the mean over its last quarter of steps (one step is noisy)."""
    if not losses:
        raise ValueError("final_loss: the run has no steps")
    tail = losses[-max(1, len(losses) // 4):]
    return sum(tail) / len(tail)


def smoothed(losses: list[float]) -> list[float]:
    """Trailing mean over a quarter of the run, step by step (what :func:`final_loss` reads at each step)."""
    w = max(1, len(losses) // 4)
    return [sum(losses[max(0, i + 1 - w):i + 1]) / (i + 1 - max(0, i + 1 - w)) for i in range(len(losses))]


def steps_lost(reference_curve, metric: float, *, higher_is_better: bool, tolerance: float = 0.0) -> int:
    """How many of its steps the reference run could have skipped and still reach ``metric``: ``N`` (its last
    evaluated step) minus the first step at which it was as good, read on the straight line between two evaluations
    (rounded up to a whole step). 0 when ``metric`` is within ``tolerance`` of the reference's end (the seed spread:
    noise) or better than every point of its curve.

    Read between evaluations: a method that ended between the reference's last two evaluations lost the
    steps the line between them says, not none.

    ``reference_curve``: ``[(step, metric), ...]`` in step order, the last at ``N``.
    """
    if not reference_curve:
        raise ValueError("steps_lost: the reference run has no evaluated steps")
    sign = 1.0 if higher_is_better else -1.0
    n, end = reference_curve[-1]
    if sign * (metric - end) >= -tolerance:
        return 0
    prev = None
    for step, value in reference_curve:
        if sign * (value - metric) >= 0:
            if prev is None or value == prev[1]:
                return int(n - step)
            # between the evaluation before (worse than metric) and this one: the step where the line reaches it
            at = prev[0] + (step - prev[0]) * (metric - prev[1]) / (value - prev[1])
            return int(n - math.ceil(at - 1e-9))
        prev = (step, value)
    return 0


def compression_summary(rows: list[dict], reference: str = "fp32 all-reduce") -> list[dict]:
    """One row per (model, method): bytes per step and the ratio to the reference's, step time, final loss
    per seed, the final held-out metric per seed, and the steps lost: read on the held-out curve of the
    reference run of the same seed, differences within the reference's seed spread counted as none."""
    ref = {(r["model"], r["seed"]): r for r in rows if r["method"] == reference}
    out, keys = [], []
    for r in rows:
        if (r["model"], r["method"]) not in keys:
            keys.append((r["model"], r["method"]))
    for model, method in keys:
        runs = [r for r in rows if r["model"] == model and r["method"] == method]
        ref_bytes = [ref[(model, r["seed"])]["bytes_per_step"] for r in runs if (model, r["seed"]) in ref]
        if not ref_bytes:
            raise ValueError(f"compression_summary: no {reference!r} run of {model} to compare {method!r} with")
        ref_metrics = [x["metric"] for (m, _), x in ref.items() if m == model]
        tolerance = max(ref_metrics) - min(ref_metrics)  # the reference's seed spread: differences below are noise
        lost = [steps_lost(ref[(model, r["seed"])]["curve"], r["metric"], higher_is_better=r["higher_is_better"],
                           tolerance=tolerance) for r in runs if (model, r["seed"]) in ref]
        out.append({"model": model, "method": method, "seeds": [r["seed"] for r in runs],
                    "bytes_per_step": runs[0]["bytes_per_step"],
                    "bytes_ratio": ref_bytes[0] / runs[0]["bytes_per_step"] if runs[0]["bytes_per_step"] else math.inf,
                    "step_s": float(np.median([r["step_s"] for r in runs])),
                    "final_losses": [final_loss(r["losses"]) for r in runs],
                    "metric_name": runs[0]["metric_name"], "metrics": [r["metric"] for r in runs],
                    "steps": len(runs[0]["losses"]), "steps_lost": max(lost),
                    "messages": runs[0]["messages"], "steady_steps": runs[0]["steady_steps"],
                    "step_times": [t for r in runs for t in r["step_times"]],
                    "higher_is_better": runs[0]["higher_is_better"], "eval_every": _eval_every(ref, model),
                    **{k: runs[0].get(k) for k in ("floor", "floor_name", "start")}})
    return out


def _eval_every(ref: dict, model: str) -> int:
    """Steps between the reference's evaluations of ``model``: the resolution of a method's steps lost."""
    curve = next(r["curve"] for (m, _), r in ref.items() if m == model)
    steps = [s for s, _ in curve]
    return max([b - a for a, b in zip([0] + steps, steps)] or [1])


def _span(values) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    return f"{min(vals):.4g}" if len(vals) == 1 or min(vals) == max(vals) else f"{min(vals):.4g}..{max(vals):.4g}"


def compression_table(summary: list[dict]) -> Table:
    """The measured methods side by side (ranges are over the seeds run), each model's warm start and floor below
    its methods."""
    t = Table(["model", "method", "bytes/step", "fp32/this", "step (ms)", "final train loss", "held-out",
               "steps lost"], title="communication-efficient data parallelism, 2 ranks, a fixed number of steps from "
                                    "a warm start (final train loss: one per seed; held-out: the seeds' range)")
    for i, r in enumerate(summary):
        t.add(**{"model": r["model"], "method": r["method"], "bytes/step": f"{r['bytes_per_step']:,.0f}",
                 "fp32/this": f"{r['bytes_ratio']:.1f}x", "step (ms)": r["step_s"] * 1e3,
                 # each seed's loss in seed order: the error-feedback comparison pairs them by seed
                 "final train loss": " / ".join(f"{x:.4g}" for x in r["final_losses"]),
                 "held-out": f"{r['metric_name']} {_span(r['metrics'])}",
                 "steps lost": f"{r['steps_lost']} of {r['steps']}"})
        if r.get("floor") is not None and (i + 1 == len(summary) or summary[i + 1]["model"] != r["model"]):
            for name, value in (("warm start (fp32)", r["start"]), (r["floor_name"] + " (floor)", r["floor"])):
                t.add(**{"model": r["model"], "method": name, "bytes/step": "-", "fp32/this": "-", "step (ms)": "-",
                         "final train loss": "-", "held-out": f"{r['metric_name']} {_span([value])}",
                         "steps lost": "-"})
    return t


def method_row(summary: list[dict], model: str, method: str) -> dict | None:
    return next((r for r in summary if r["model"] == model and r["method"] == method), None)


def plot_compression(summary: list[dict], rows: list[dict]):
    """Bytes per step (log) per method, and each method's smoothed training loss over the steps, per model."""
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in summary))
    fig, axes = plt.subplots(2, len(models), figsize=(6 * len(models), 7), squeeze=False)
    for j, model in enumerate(models):
        mine = [r for r in summary if r["model"] == model]
        ax = axes[0][j]
        ax.barh([r["method"] for r in mine], [r["bytes_per_step"] for r in mine], color="tab:blue")
        ax.set_xscale("log")
        ax.invert_yaxis()
        ax.set_xlabel("bytes sent per step per rank (counted)")
        ax.set_title(model)
        ax = axes[1][j]
        for r in [r for r in rows if r["model"] == model and r["seed"] == rows[0]["seed"]]:
            ax.plot(range(1, len(r["losses"]) + 1), smoothed(r["losses"]), label=r["method"])
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (trailing mean)")
    axes[1][-1].legend(fontsize=7)
    fig.tight_layout()
    return fig, axes

# --------------------------------------------------------------------------- the section's questions, decided
EF_NO, EF_YES = "top-0.1%, no error feedback", "top-0.1% + error feedback"
LOSS_RATIO_EFFECT = 0.02  # final training losses 2% apart: less would not change which method one picks
STALE_AGREE = 0.1  # a tenth of a run: steps lost that agree within this are the same cost of staleness


NOT_PAST_FLOOR = "fp32 not past its floor"  # why a model's method rows are left unresolved


def _shown(values) -> float:
    """Half the last of the 4 significant figures the tables show: the resolution of a value read from them."""
    top = max(abs(v) for v in values) or 1.0
    return 0.5 * 10 ** (math.floor(math.log10(top)) - 3)


def floor_comparisons(summary: list[dict], reference: str = REFERENCE) -> list[compare.Comparison]:
    """Per model, how far the reference's held-out metric ended past the model's floor (the popularity ranking's
    HR@10, the token frequencies' loss), over its seeds: **higher** is past it, and only then are the methods
    judged (:func:`past_floor`)."""
    out = []
    for model in dict.fromkeys(r["model"] for r in summary):
        ref = method_row(summary, model, reference)
        if ref is None or ref.get("floor") is None:
            continue
        sign = 1.0 if ref["higher_is_better"] else -1.0
        past = [sign * (m - ref["floor"]) for m in ref["metrics"]]
        n = len(past)
        se = statistics.stdev(past) / math.sqrt(n) if n > 1 else 0.0
        out.append(compare.quantity(f"{model}: {ref['metric_name']} past the {ref['floor_name']}, {reference}",
                                    statistics.mean(past), se, df=n - 1 if n > 1 else None,
                                    needed=compare.HR_EFFECT if ref["higher_is_better"] else compare.LOSS_EFFECT,
                                    resolution=_shown(ref["metrics"] + [ref["floor"]]), n=f"{n}/{n}",
                                    basis=f"seeds of {reference}; 4 figures"))
    return out


def past_floor(summary: list[dict]) -> set[str]:
    """The models whose reference run ended past their floor (:func:`floor_comparisons` decided **higher**); a model
    run without a floor counts as past it."""
    decided = {c.question.split(":")[0]: c.outcome == compare.HIGHER for c in floor_comparisons(summary)}
    return {r["model"] for r in summary if decided.get(r["model"], True)}


def _gated(c: compare.Comparison, model: str, cleared: set[str]) -> compare.Comparison:
    """``c``, or, where ``model``'s reference did not clear its floor, ``c`` unresolved for :data:`NOT_PAST_FLOOR`."""
    if model in cleared:
        return c
    return replace(c, low=0.0 if c.relative else -math.inf, high=math.inf, basis=NOT_PAST_FLOOR)


def _paired_difference(question: str, a: list[float], b: list[float], needed: float, unit: str = ""):
    """``b - a`` paired by seed (the same seed: the same initial weights and batches, so the runs differ only by
    the method): the mean difference with its standard error, n - 1 degrees of freedom. None with fewer than two
    pairs: one seed has no spread to tell noise from effect."""
    d = [y - x for x, y in zip(a, b)]
    if len(d) < 2:
        return None
    return compare.quantity(question, statistics.mean(d), statistics.stdev(d) / math.sqrt(len(d)), needed=needed,
                            df=len(d) - 1, resolution=_shown(a + b), unit=unit, n=f"{len(d)} pairs",
                            basis=f"{len(d)} seeds, paired; 4 figures")


def error_feedback_comparisons(summary: list[dict]) -> list[compare.Comparison]:
    """Per model, does top-k without error feedback end worse than with it? The final training loss (without /
    with, paired by seed) and the held-out metric (without - with, paired by seed; HR@10 judged by
    :data:`course_lib.compare.HR_EFFECT`, a held-out loss by ``LOSS_EFFECT``). Models run at one seed get none;
    a model whose fp32 run did not clear its floor, rows left unresolved (:func:`past_floor`)."""
    out, cleared = [], past_floor(summary)
    for model in dict.fromkeys(r["model"] for r in summary):
        a, b = method_row(summary, model, EF_NO), method_row(summary, model, EF_YES)
        if a is None or b is None or len(a["seeds"]) < 2:
            continue
        loss = compare.paired_ratio(f"{model}: final training loss, no error feedback / with",
                                    b["final_losses"], a["final_losses"], needed=LOSS_RATIO_EFFECT,
                                    basis=f"{len(a['seeds'])} seeds, paired")
        needed = compare.HR_EFFECT if a["higher_is_better"] else compare.LOSS_EFFECT
        held = _paired_difference(f"{model}: {a['metric_name']}, no error feedback - with", b["metrics"], a["metrics"],
                                  needed)
        out += [_gated(c, model, cleared) for c in (loss, held) if c is not None]
    return out


def staleness_comparisons(summary: list[dict], stale_rows: list[dict], sim_eval_every: int,
                          method: str = "delayed averaging") -> list[compare.Comparison]:
    """Did a real model pay for one step of staleness what the simulated study paid? Per model, the share of the
    run delayed averaging lost (:func:`steps_lost`) less the simulation's extra steps to its target at tau = 1
    (a share of tau = 0's). Each is read on evaluations: their spacing, as a share, is the resolution."""
    by_tau = {str(row["tau"]): row.get("steps to target") for row in stale_rows}
    t0, t1 = by_tau.get("0"), by_tau.get("1")
    if not (t0 and t1):
        return []
    out, cleared = [], past_floor(summary)
    for model in dict.fromkeys(r["model"] for r in summary):
        r = method_row(summary, model, method)
        if r is None:
            continue
        spacing = r["eval_every"] / r["steps"] + sim_eval_every / t0
        out.append(_gated(compare.difference(f"{model}: steps lost to one step of staleness, share: real - simulated",
                                             (t1 - t0) / t0, 0.0, r["steps_lost"] / r["steps"], 0.0,
                                             needed=STALE_AGREE, resolution=spacing,
                                             basis="evaluation spacing of both"), model, cleared))
    return out


def speedup_comparisons(summary: list[dict], reference: str = REFERENCE) -> list[compare.Comparison]:
    """Per model and method, measured on the runs' own 2 ranks: the speedup to the quality the method reached,
    (fp32's steps to that quality x fp32's step) / (the method's steps x its step), from every measured step time
    of each arm; a method that lost steps is read on fp32's evaluations, whose spacing widens the interval. A model
    whose fp32 run did not clear its floor: rows left unresolved (:func:`past_floor`)."""
    out, cleared = [], past_floor(summary)
    for model in dict.fromkeys(r["model"] for r in summary):
        ref = method_row(summary, model, reference)
        for r in summary:
            if r["model"] != model or r["method"] == reference or ref is None:
                continue
            scale = r["steps"] / max(1, r["steps"] - r["steps_lost"])
            c = compare.ratio(f"{model}: {r['method']}, speedup to its quality at 2 ranks (measured)",
                              [t * scale for t in r["step_times"]], ref["step_times"], needed=compare.TIME_EFFECT,
                              basis=f"{len(r['step_times'])} and {len(ref['step_times'])} step times")
            c = compare.widen(c, r["eval_every"] / r["steps"], "fp32's evaluation spacing") if r["steps_lost"] else c
            out.append(_gated(c, model, cleared))
    return out
