"""Lesson 08's last section: PowerSGD, top-k with and without error feedback (EF), local SGD and delayed averaging
on NeuMF and BERT-tiny at 2 ranks from a warm start past each model's floor, against the fp32 all-reduce."""

from __future__ import annotations

import copy
import itertools
import math
import statistics
import time
from dataclasses import replace

import numpy as np
import torch
import torch.distributed as dist

from .. import compare
from ..comm.compression import make_method
from ..config import pick
from ..data import load_implicit
from ..data.text import build_mlm_data, load_corpus
from ..parallel.data_parallel import DataParallel
from ..precision import Precision
from ..tables import Table
from ..train import mlm, ncf
from ..train.engine import Engine, sync

REFERENCE = "fp32 all-reduce"  # the method every other is compared with
EF_YES, EF_NO = "top-0.1% + EF", "top-0.1%, no EF"
COMPRESSION_METHODS = (  # (label, method name, its settings)
    (REFERENCE, "fp32", {}), *((f"PowerSGD rank {r}", "powersgd", {"rank": r}) for r in (1, 4)),
    (EF_YES, "topk", {"density": 0.001, "error_feedback": True}),
    (EF_NO, "topk", {"density": 0.001, "error_feedback": False}),
    *((f"local SGD H={h}", "local_sgd", {"period": h}) for h in (1, 4, 16)), ("delayed averaging", "delayed", {}))
SEEDED = (REFERENCE, EF_YES, EF_NO)  # run at every seed; the others at the first


def compression_spec(profile: str, dataset: str = "ml-1m") -> dict:
    """Per model, a warm start past its floor, then the same steps (H = 16 divides them) of every method."""
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
                 # a quarter of the warm start's lr: at 2e-2 one seed's jumps hid every method's steps lost
                 "batch": pick(profile, full=32, smoke=4), "steps": pick(profile, full=32, smoke=16), "lr": 5e-3,
                 "seeds": pick(profile, full=[0, 1, 2], smoke=[0]),
                 "max_tokens": pick(profile, full=None, smoke=200_000)},
        "methods": [list(m) for m in COMPRESSION_METHODS], "seeded": list(SEEDED), "models": ["neumf", "bert"],
    }


def _run_fixed_steps(engine, next_batch, steps: int, method, evaluate, curve_every: int = 0) -> dict:
    """Bytes and step times past the method's warm-up, losses, and the held-out metric every ``curve_every`` steps."""
    losses, times, curve = [], [], []
    for step in range(1, steps + 1):
        batch, count = next_batch()
        t0 = time.perf_counter()
        loss, _ = engine.step(batch, count)
        sync(engine.device)
        times.append(time.perf_counter() - t0)
        # the mean of the ranks' shares is the global batch's loss (outside the recorder: not training)
        dist.all_reduce(loss)
        losses.append(float(loss) / dist.get_world_size())
        if curve_every and step % curve_every == 0 and step < steps and engine.parallel.rank == 0:
            curve.append((step, evaluate(engine)))
    rec, since = engine.parallel.recorder, method.warmup_steps
    metric = evaluate(engine) if engine.parallel.rank == 0 else None
    return {"bytes_per_step": rec.bytes_per_step(since), "messages": rec.messages(since),
            "steady_steps": steps - since, "step_s": statistics.median(times[since:]), "step_times": times[since:],
            "losses": losses, "metric": metric, "curve": curve + [(steps, metric)]}


def _neumf(spec: dict):
    """``(name, build(seed, lr, batch, method), batches(seed, engine), evaluate(engine), floor())``."""
    data, dev = load_implicit(spec["dataset"], profile=spec["profile"]), torch.device("cpu")

    def cfg(seed, lr, batch):
        return ncf.TrainConfig(global_batch_size=batch, optimizer="adam", base_lr=lr, seed=seed)

    def build(seed, lr, batch, method):  # method None: DDP's own fp32 all-reduce
        return ncf.build_engine(data, cfg(seed, lr, batch), dev, parallel=DataParallel(batch, None, dev, comm=method))

    def batches(seed, engine):  # next_batch() -> (batch, None), epoch after epoch
        epoch = ncf.make_batches(data, cfg(seed, 1.0, engine.parallel.batch.global_batch_size))
        it = itertools.chain.from_iterable(itertools.repeat(epoch))
        return lambda: (next(it), None)

    def floor():
        return {"metric_name": "HR@10", "higher_is_better": True, "floor_name": "popularity ranking",
                "floor": ncf.evaluate_popularity(data)[0]}
    return "NeuMF", build, batches, lambda e: ncf.evaluate(e.model, data)[0], floor


def _bert(spec: dict):
    s, dev = spec["bert"], torch.device("cpu")
    data = build_mlm_data(load_corpus("pydoc"), vocab_size=s["vocab_size"], seq_len=s["seq_len"], device=dev,
                          max_tokens=s["max_tokens"])
    prec = Precision("fp32", dev)

    def cfg(seed, lr, batch):
        return mlm.MLMTrainConfig(model=s["preset"], global_batch_size=batch, micro_batch_size=None,
                                  optimizer="lamb", base_lr=lr, base_batch_size=batch, seed=seed, warmup_steps=0,
                                  max_steps=s["steps"], dropout=0.0)

    def build(seed, lr, batch, method):
        torch.manual_seed(seed)
        model = mlm.build_model(cfg(seed, lr, batch), data.vocab_size, data.seq_len)
        return Engine(model, mlm.make_optimizer(model, cfg(seed, lr, batch)), precision=prec,
                      parallel=DataParallel(batch, None, dev, comm=method), loss_sum=mlm._mlm_loss_sum)

    def batches(seed, engine):
        c, gen = cfg(seed, 1.0, engine.parallel.batch.global_batch_size), torch.Generator().manual_seed(seed)
        return lambda: mlm._global_batch(data, c, gen, dev)

    def floor():
        return {"metric_name": "MLM loss", "higher_is_better": False, "floor_name": "token frequencies",
                "floor": data.unigram_loss()}
    return f"BERT-{s['preset']}", build, batches, lambda e: mlm.evaluate(e.model, data, prec), floor


MODELS = {"neumf": _neumf, "bert": _bert}


def compression_worker(rank: int, world_size: int, spec: dict) -> list[dict]:
    """One row per (model, method, seed), every method from the model's one warm start, loaded in place (DDP and the
    method keep references)."""
    rows = []
    for key in spec["models"]:
        name, build, batches, evaluate, floor_of = MODELS[key](spec)
        s, w = spec[key], spec[key]["warm"]
        warm_engine = build(w["seed"], w["lr"], w["batch"], None)
        next_batch = batches(w["seed"], warm_engine)
        for _ in range(w["steps"]):
            warm_engine.step(*next_batch())
        warm = copy.deepcopy({"model": warm_engine.model.state_dict(),
                              "optimizer": warm_engine.optimizer.state_dict()})
        floor = {"model": name, **floor_of(), "start": evaluate(warm_engine) if rank == 0 else None}
        for label, method_name, kw in spec["methods"]:
            for seed in (s["seeds"] if label in spec["seeded"] else s["seeds"][:1]):
                method = make_method(method_name, **kw)
                engine = build(seed, s["lr"], s["batch"], method)
                engine.model.load_state_dict(warm["model"])
                engine.optimizer.load_state_dict(warm["optimizer"])
                engine.set_lr(s["lr"])
                every = s["steps"] // (4 if key == "neumf" else 8) if method_name == "fp32" else 0
                out = _run_fixed_steps(engine, batches(seed, engine), s["steps"], method, evaluate, every)
                if every and rank == 0:  # the reference's curve starts where every method did
                    out["curve"] = [(0, floor["start"])] + out["curve"]
                rows.append({"method": label, "seed": seed, **floor, **out})
    return rows


def smoothed(losses: list[float]) -> list[float]:
    """Trailing mean over a quarter of the run, step by step; its last is the run's final loss (one step is noisy)."""
    w = max(1, len(losses) // 4)
    return [sum(losses[max(0, i + 1 - w):i + 1]) / (i + 1 - max(0, i + 1 - w)) for i in range(len(losses))]


def steps_lost(reference_curve, metric: float, *, higher_is_better: bool, tolerance: float = 0.0) -> int:
    """The steps the reference could have skipped and still reach ``metric``, interpolated between evaluations of
    its curve ``[(step, metric), ...]``; 0 within ``tolerance`` (the seed spread) of its end or better than it."""
    if not reference_curve:
        raise ValueError("no evaluated steps")
    sign = 1.0 if higher_is_better else -1.0
    n, end = reference_curve[-1]
    if sign * (metric - end) >= -tolerance:
        return 0
    prev = None
    for step, value in reference_curve:
        if sign * (value - metric) >= 0:
            if prev is None or value == prev[1]:
                return int(n - step)
            at = prev[0] + (step - prev[0]) * (metric - prev[1]) / (value - prev[1])
            return int(n - math.ceil(at - 1e-9))
        prev = (step, value)
    return 0


def compression_summary(rows: list[dict]) -> list[dict]:
    """One row per (model, method); steps lost are read on fp32's curve of the same seed."""
    ref = {(r["model"], r["seed"]): r for r in rows if r["method"] == REFERENCE}
    out = []
    for model, method in dict.fromkeys((r["model"], r["method"]) for r in rows):
        runs = [r for r in rows if r["model"] == model and r["method"] == method and (model, r["seed"]) in ref]
        if not runs:
            raise ValueError(f"no {REFERENCE} run of {model} for {method}")
        ref_metrics = [x["metric"] for (m, _), x in ref.items() if m == model]
        lost = [steps_lost(ref[(model, r["seed"])]["curve"], r["metric"], higher_is_better=r["higher_is_better"],
                           tolerance=max(ref_metrics) - min(ref_metrics)) for r in runs]
        ref_bytes, r0 = ref[(model, runs[0]["seed"])]["bytes_per_step"], runs[0]
        evals = [s for s, _ in next(r["curve"] for (m, _), r in ref.items() if m == model)]
        out.append({"model": model, "method": method, "seeds": [r["seed"] for r in runs],
                    "bytes_per_step": r0["bytes_per_step"],
                    "bytes_ratio": ref_bytes / r0["bytes_per_step"] if r0["bytes_per_step"] else math.inf,
                    "step_s": float(np.median([r["step_s"] for r in runs])),
                    "final_losses": [smoothed(r["losses"])[-1] for r in runs], "metrics": [r["metric"] for r in runs],
                    "steps": len(r0["losses"]), "steps_lost": max(lost),
                    "step_times": [t for r in runs for t in r["step_times"]],
                    # steps between fp32's evaluations: the resolution of a method's steps lost
                    "eval_every": max([b - a for a, b in zip([0] + evals, evals)] or [1]),
                    **{k: r0.get(k) for k in ("metric_name", "messages", "steady_steps", "higher_is_better", "floor",
                                              "floor_name", "start")}})
    return out


def _span(values) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    return f"{min(vals):.4g}" if min(vals) == max(vals) else f"{min(vals):.4g}..{max(vals):.4g}"


def compression_table(summary: list[dict]) -> Table:
    """The methods side by side, each model's warm start and floor below its methods."""
    rows = []
    for i, r in enumerate(summary):
        rows.append({"model": r["model"], "method": r["method"], "bytes/step": f"{r['bytes_per_step']:,.0f}",
                     "fp32/this": f"{r['bytes_ratio']:.1f}x", "step (ms)": r["step_s"] * 1e3,
                     "train loss": " / ".join(f"{x:.4g}" for x in r["final_losses"]),  # in seed order
                     "held-out": f"{r['metric_name']} {_span(r['metrics'])}",
                     "steps lost": f"{r['steps_lost']}/{r['steps']}"})
        if r.get("floor") is not None and (i + 1 == len(summary) or summary[i + 1]["model"] != r["model"]):
            rows += [{"model": r["model"], "method": name, "held-out": f"{r['metric_name']} {_span([value])}"}
                     for name, value in (("warm start (fp32)", r["start"]), (f"{r['floor_name']} (floor)", r["floor"]))]
    return Table(list(rows[0]) if rows else [], rows)


def method_row(summary: list[dict], model: str, method: str) -> dict | None:
    return next((r for r in summary if r["model"] == model and r["method"] == method), None)


def _models(summary: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["model"] for r in summary))


def plot_compression(summary: list[dict], rows: list[dict]):
    """Bytes per step (log) per method, and each method's smoothed training loss over the steps, per model."""
    import matplotlib.pyplot as plt

    models = _models(summary)
    fig, axes = plt.subplots(2, len(models), figsize=(6 * len(models), 7), squeeze=False)
    for (top, bottom), model in zip(axes.T, models):
        mine = [r for r in summary if r["model"] == model]
        top.barh([r["method"] for r in mine], [r["bytes_per_step"] for r in mine], color="tab:blue")
        top.set(xscale="log", xlabel="bytes/step/rank (counted)", title=model)
        top.invert_yaxis()
        for r in rows:
            if r["model"] == model and r["seed"] == rows[0]["seed"]:
                bottom.plot(range(1, len(r["losses"]) + 1), smoothed(r["losses"]), label=r["method"])
        bottom.set(xlabel="step", ylabel="train loss (smoothed)")
    axes[1][-1].legend(fontsize=7)
    fig.tight_layout()
    return fig, axes


LOSS_RATIO_EFFECT = 0.02  # final training losses 2% apart: less would not change which method one picks
STALE_AGREE = 0.1  # a tenth of a run: steps lost that agree within this are the same cost of staleness
NOT_PAST_FLOOR = "fp32 below floor"  # the basis of a method row left unresolved


def _shown(values) -> float:
    """Half the last of the 4 significant figures the tables show."""
    top = max(abs(v) for v in values) or 1.0
    return 0.5 * 10 ** (math.floor(math.log10(top)) - 3)


def _seed_mean(question: str, xs: list[float], row: dict, shown: list[float], n: str) -> compare.Comparison:
    """The mean of per-seed values of ``row``'s metric with its standard error, to :func:`_shown`'s resolution."""
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0
    return compare.quantity(question, statistics.mean(xs), se, df=len(xs) - 1 if len(xs) > 1 else None,
                            needed=compare.HR_EFFECT if row["higher_is_better"] else compare.LOSS_EFFECT,
                            resolution=_shown(shown), n=n, basis="seeds; 4 figures")


def _floor(summary: list[dict], model: str) -> compare.Comparison | None:
    """fp32's held-out metric past ``model``'s floor over its seeds (None: run without a floor)."""
    ref = method_row(summary, model, REFERENCE)
    if ref is None or ref.get("floor") is None:
        return None
    past = [(m - ref["floor"]) * (1 if ref["higher_is_better"] else -1) for m in ref["metrics"]]
    return _seed_mean(f"{model}: {ref['metric_name']} past floor", past, ref,
                      ref["metrics"] + [ref["floor"]], f"{len(past)}/{len(past)}")


def floor_comparisons(summary: list[dict]) -> list[compare.Comparison]:
    return [c for c in (_floor(summary, m) for m in _models(summary)) if c is not None]


def _gate(summary: list[dict], pairs) -> list[compare.Comparison]:
    """``pairs`` ``(model, c)``'s comparisons, unresolved where fp32 did not clear the model's floor (if it has one)."""
    cleared = {m for m in _models(summary) if (c := _floor(summary, m)) is None or c.outcome == compare.HIGHER}
    return [c if model in cleared else replace(c, low=0.0 if c.relative else -math.inf, high=math.inf,
                                               basis=NOT_PAST_FLOOR) for model, c in pairs]


def error_feedback_comparisons(summary: list[dict]) -> list[compare.Comparison]:
    """Per model run at 2+ seeds, top-k's final train loss and held-out metric without EF against with, by seed."""
    pairs = []
    for model in _models(summary):
        a, b = method_row(summary, model, EF_NO), method_row(summary, model, EF_YES)
        if a is None or b is None or len(a["seeds"]) < 2:
            continue
        d = [y - x for x, y in zip(b["metrics"], a["metrics"])]
        pairs += [(model, compare.paired_ratio(f"{model}: train loss, no EF/EF", b["final_losses"], a["final_losses"],
                                               needed=LOSS_RATIO_EFFECT, basis=f"{len(d)} seeds, paired")),
                  (model, _seed_mean(f"{model}: {a['metric_name']}, no EF - EF", d, a,
                                     a["metrics"] + b["metrics"], f"{len(d)} pairs"))]
    return _gate(summary, pairs)


def staleness_comparisons(summary: list[dict], stale_rows: list[dict], sim_eval_every: int) -> list[compare.Comparison]:
    """Per model, the share of the run delayed averaging lost less the simulation's at tau = 1."""
    by_tau = {str(row["tau"]): row.get("steps to target") for row in stale_rows}
    t0, t1 = by_tau.get("0"), by_tau.get("1")
    if not (t0 and t1):
        return []
    return _gate(summary, [(r["model"], compare.difference(
        f"{r['model']}: share lost to tau = 1, real - simulated", (t1 - t0) / t0, 0.0, r["steps_lost"] / r["steps"],
        0.0, needed=STALE_AGREE, resolution=r["eval_every"] / r["steps"] + sim_eval_every / t0,
        basis="evaluation spacing")) for r in summary if r["method"] == "delayed averaging"])


def speedup_comparisons(summary: list[dict]) -> list[compare.Comparison]:
    """Per model and method on the runs' 2 ranks: fp32's time to the method's quality over the method's."""
    refs, pairs = {r["model"]: r for r in summary if r["method"] == REFERENCE}, []
    for r in summary:
        if r["model"] in refs and r["method"] != REFERENCE:
            ref, scale = refs[r["model"]], r["steps"] / max(1, r["steps"] - r["steps_lost"])
            c = compare.ratio(f"{r['model']}: {r['method']}, speedup", [t * scale for t in r["step_times"]],
                              ref["step_times"], needed=compare.TIME_EFFECT,
                              basis=f"{len(r['step_times'])}/{len(ref['step_times'])} steps")
            pairs.append((r["model"], compare.widen(c, r["eval_every"] / r["steps"], "fp32's evaluations")
                          if r["steps_lost"] else c))
    return _gate(summary, pairs)
