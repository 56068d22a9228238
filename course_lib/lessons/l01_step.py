"""Lesson 01's optimizer step and torch.compile in paired repeats (Adam implementations, SparseAdam tables, lazy
Adam's HR@10, compiled steps); every run is :func:`course_lib.train.train_to_target`'s loop, one setting changed."""

import math
import statistics

import numpy as np
import torch

from .. import compare
from ..data.movielens import ImplicitData
from ..hardware import default_device
from ..metrics import hr_standard_error
from ..optim import resolved_adam_impl
from ..tables import Table
from ..train.engine import RunHooks
from ..train.ncf import TrainConfig, TrainResult, build_model, make_optimizer, samples_per_epoch, train_to_target

LAZY = "SparseAdam tables + Adam"


def on_device(data: ImplicitData, device) -> tuple[ImplicitData, torch.device]:
    """``data`` on ``device`` (default: :func:`course_lib.hardware.default_device`), once for all of a cell's runs."""
    device = torch.device(device) if device is not None else default_device()
    return data.to(device), device


def timed_run(data: ImplicitData, cfg: TrainConfig, device, steps: int, phases: bool = True) -> TrainResult:
    return train_to_target(data, cfg.replace(max_steps=steps), device=device, progress="none",
                           hooks=RunHooks(evaluate_points=False, time_phases=phases))


def alternating(points: list, repeats: int, measure) -> list[list]:
    """Per point, ``measure(point)`` in each of ``repeats`` passes, every other one reversed: drift favours none."""
    out = [[] for _ in points]
    order = list(enumerate(points))
    for rep in range(repeats):
        for i, p in order if rep % 2 == 0 else order[::-1]:
            out[i].append(measure(p))
    return out


def optimizer_comparison(data: ImplicitData, cfg: TrainConfig, batch_sizes, *, samples_per_point: int = 25_600,
                         min_steps: int = 8, repeats: int = 3, device=None) -> dict:
    """Per batch and Adam variant, after an untimed run: median ``optimizer_ms`` and ``step_ms``, and per
    :func:`alternating` repeat the default's time (``baseline_impl``, rows ``baseline``) over the variant's."""
    data, device = on_device(data, device)
    base = cfg.replace(optimizer="adam", adam_impl="auto", sparse_embeddings=False, compile="none")
    baseline_impl = resolved_adam_impl(make_optimizer(build_model(data, base).to(device), base))
    baseline_name = f"dense Adam, {baseline_impl}"  # one of the variants
    variants = [(f"dense Adam, {impl}", {"adam_impl": impl}) for impl in ("for-loop", "foreach", "fused")]
    points = [(b, name, base.replace(global_batch_size=b, **changes))
              for b in batch_sizes for name, changes in variants + [(LAZY, {"sparse_embeddings": True})]]
    steps = {b: max(min_steps, samples_per_point // b) for b in batch_sizes}
    for b, _, c in points:
        timed_run(data, c, device, 2)

    def measure(point):
        r = timed_run(data, point[2], device, steps[point[0]])
        return r.phase_time_s["optimizer"] / r.steps, r.train_time_s / r.steps

    runs = {(b, name): times for (b, name, _), times in zip(points, alternating(points, repeats, measure))}
    rows = []
    for b, name, _ in points:
        (opt, step), (ref_opt, ref_step) = zip(*runs[(b, name)]), zip(*runs[(b, baseline_name)])
        rows.append({"batch size": b, "variant": name, "steps": steps[b], "optimizer_ms": 1000 * statistics.median(opt),
                     "step_ms": 1000 * statistics.median(step), "baseline": name == baseline_name,
                     "optimizer_ratios": [r / x for r, x in zip(ref_opt, opt)],
                     "step_ratios": [r / x for r, x in zip(ref_step, step)]})
    return {"rows": rows, "baseline_impl": baseline_impl, "device": str(device), "repeats": repeats}


def paired_speedup(question: str, ratios: list[float]) -> compare.Comparison:
    """A speedup from paired repeats (``ratios``: the reference's time over the other's, per repeat)."""
    return compare.paired_ratio(question, [1.0] * len(ratios), ratios, needed=compare.SPEED_EFFECT,
                                basis=f"{len(ratios)} paired repeats")


def _row(comp: dict, batch: int, variant: str) -> dict:
    """The row of ``variant`` at ``batch``; "auto": the default's, an implementation's name: dense Adam's."""
    if variant != LAZY:
        variant = f"dense Adam, {comp['baseline_impl'] if variant == 'auto' else variant}"
    return next(r for r in comp["rows"] if r["batch size"] == batch and r["variant"] == variant)


def optimizer_table(comp: dict) -> Table:
    def speedup(r: dict, key: str) -> float | None:
        return None if r["baseline"] else round(_row(comp, r["batch size"], "auto")[key] / r[key], 2)

    return Table(["batch size", "Adam", "optimizer ms", "step ms", "optimizer share", "optimizer x", "step x"],
                 [{"batch size": r["batch size"], "Adam": r["variant"] + (" (default)" if r["baseline"] else ""),
                   "optimizer ms": round(r["optimizer_ms"], 3), "step ms": round(r["step_ms"], 3),
                   "optimizer share": f"{r['optimizer_ms'] / r['step_ms']:.0%}",
                   "optimizer x": speedup(r, "optimizer_ms"), "step x": speedup(r, "step_ms")} for r in comp["rows"]],
                 f"{comp['device']}, median of {comp['repeats']} paired runs")


def optimizer_comparisons(comp: dict) -> list[compare.Comparison]:
    """Each variant over the default at each batch: the optimizer phase's speedup, then the whole step's."""
    return [paired_speedup(f"{what}, {r['variant']} / {comp['baseline_impl']}, batch {r['batch size']}", r[key])
            for r in comp["rows"] if not r["baseline"]
            for what, key in (("optimizer", "optimizer_ratios"), ("whole step", "step_ratios"))]


def fastest_adam(rows: list[dict], batch: int | None = None) -> str:
    """The dense Adam the baseline trains with: of "foreach" and "fused" decided slower at no batch (rungs train at
    larger ones), the largest median speedup above 1 at ``batch`` (default: the smallest), else "auto". An undecided
    lead counts: the default, slowest by the best estimate, would slow every rung's reference."""
    batch = min(r["batch size"] for r in rows) if batch is None else batch

    def lead(impl: str) -> float:
        mine = {r["batch size"]: r for r in rows if r["variant"] == f"dense Adam, {impl}" and not r["baseline"]}
        slower = any(paired_speedup("", r["step_ratios"]).outcome == compare.LOWER for r in mine.values())
        return 0.0 if batch not in mine or slower else statistics.median(mine[batch]["step_ratios"])

    best = max(("foreach", "fused"), key=lead)  # the first of equal leads
    return best if lead(best) > 1.0 else "auto"


def lazy_adam_accuracy(data: ImplicitData, reference: TrainResult, *, budget_epochs: float, seeds=(0, 1),
                       device=None) -> list[dict]:
    """HR@10 and NDCG@10 of dense and lazy Adam per seed after ``budget_epochs`` in the ``reference`` run's setting;
    dense Adam at its seed *is* the reference (tested), read from its curve where it evaluated at the budget."""
    data, device = on_device(data, device)
    ref_cfg = TrainConfig.from_dict(reference.config)
    steps = max(1, round(budget_epochs * reference.steps_per_epoch))
    base = ref_cfg.replace(optimizer="adam", sparse_embeddings=False, compile="none",  # the reference's Adam
                           stop_at_target=False, max_steps=steps)
    curve, rows = reference.curve, []
    for seed in seeds:
        # the lazy arm's dense layers run the default Adam, as optimizer_comparison timed it
        for name, changes in (("dense Adam", {}), (LAZY, {"sparse_embeddings": True, "adam_impl": "auto"})):
            c = base.replace(seed=seed, **changes)
            if c == ref_cfg.replace(stop_at_target=False, max_steps=steps) and steps in curve["step"]:
                i = curve["step"].index(steps)
                row = {"hr": curve["hr"][i], "ndcg": curve["ndcg"][i], "train_s": curve["time_s"][i],
                       "from": "the baseline run", "curve": {k: curve[k][:i + 1] for k in ("step", "time_s", "hr")}}
            else:
                r = train_to_target(data, c, device=device, progress="none")
                row = {"hr": r.final_hr, "ndcg": r.final_ndcg, "train_s": r.train_time_s, "from": "trained here",
                       "curve": {k: r.curve[k] for k in ("step", "time_s", "hr")}}
            rows.append({"optimizer": name, "seed": seed, "steps": steps, "epochs": steps / reference.steps_per_epoch,
                         "users": data.num_users, **row})
    return rows


def accuracy_table(rows: list[dict]) -> Table:
    """:func:`lazy_adam_accuracy`'s rows, HR@10 to four decimals (a point of HR@10 is 0.01)."""
    return Table(["optimizer", "seed", "steps", "epochs", "HR@10", "NDCG@10", "train s", "run"],
                 [{**r, "epochs": round(r["epochs"], 3), "HR@10": round(r["hr"], 4), "NDCG@10": round(r["ndcg"], 4),
                   "train s": round(r["train_s"], 2), "run": r["from"]} for r in rows])


def step_times(comp: dict, batch: int, impl: str = "auto") -> dict[str, float]:
    """ms per step of dense Adam's ``impl`` and of SparseAdam tables at ``batch``, under the accuracy rows' names."""
    return {"dense Adam": _row(comp, batch, impl)["step_ms"], LAZY: _row(comp, batch, LAZY)["step_ms"]}


def _hr_estimate(hrs: list[float], users: int) -> tuple[float, float]:
    """The seeds' mean HR@10 and standard error: their spread, at least one evaluation's sampling error."""
    spread = statistics.stdev(hrs) if len(hrs) > 1 else 0.0
    return statistics.mean(hrs), max(spread, hr_standard_error(statistics.mean(hrs), users)) / math.sqrt(len(hrs))


def accuracy_comparisons(rows: list[dict], comp: dict | None = None, batch: int | None = None, impl: str = "auto"
                         ) -> list[compare.Comparison]:
    """Lazy against dense Adam's HR@10 after the same steps; with ``comp`` and ``batch`` also the step's speedup (over
    dense Adam's ``impl``) and HR@10 after the same seconds, the cheaper at the budget against the other's curves."""
    by = {name: [r for r in rows if r["optimizer"] == name] for name in ("dense Adam", LAZY)}
    (dense_name, dense), (lazy_name, lazy) = by.items()
    users, df, n = rows[0]["users"], len(dense) + len(lazy) - 2 or None, f"{len(dense)}/{len(lazy)} seeds"
    d, l_ = _hr_estimate([r["hr"] for r in dense], users), _hr_estimate([r["hr"] for r in lazy], users)
    out = [compare.difference(f"HR@10 at {rows[0]['steps']} steps, lazy - dense", *d, *l_, needed=compare.HR_EFFECT,
                              df=df, n=n)]
    if comp is None or batch is None:
        return out
    lazy_row, dense_row = _row(comp, batch, LAZY), _row(comp, batch, impl)
    # both ratios are over the default's run of the same repeat: their quotient is lazy over dense, still paired
    out.append(paired_speedup(f"whole step, {LAZY} / dense Adam, batch {batch}",
                              [lz / d for lz, d in zip(lazy_row["step_ratios"], dense_row["step_ratios"])]))
    step_ms = step_times(comp, batch, impl)
    cheap, dear = (lazy_name, dense_name) if step_ms[lazy_name] < step_ms[dense_name] else (dense_name, lazy_name)
    at = rows[0]["steps"] * step_ms[cheap] / step_ms[dear]  # the steps the dearer one runs in the same seconds
    curves = [r["curve"] for r in by[dear] if r.get("curve")]
    if curves and all(c["step"] and c["step"][0] <= at <= c["step"][-1] for c in curves):  # interpolated, not extended
        points = [float(np.interp(at, c["step"], c["hr"])) for c in curves]
        out.append(compare.difference(f"HR@10, {cheap} - {dear}, same seconds", *_hr_estimate(points, users),
                                      *(d if cheap == dense_name else l_), needed=compare.HR_EFFECT, df=df, n=n,
                                      basis="paired step times"))
    return out


def compile_comparison(data: ImplicitData, cfg: TrainConfig, batch_sizes, *, mode: str = "default",
                       backend: str = "inductor", samples_per_point: int = 25_600, min_steps: int = 8,
                       repeats: int = 3, device=None) -> dict:
    """Per batch, the compile time (a compiled 1-step run less a step), then :func:`alternating` eager and compiled
    runs. Compile caches are cleared (inductor's disk cache may serve graphs: ``cache_hits``); a failure: ``error``."""
    from torch._dynamo.utils import counters

    cache = counters["inductor"]
    data, device = on_device(data, device)
    eager = cfg.replace(compile="none", sparse_embeddings=False)
    compiled = eager.replace(compile=mode, compile_backend=backend)
    torch.compiler.reset()
    out = {"mode": mode, "backend": backend, "device": str(device), "repeats": repeats, "rows": [], "error": None,
           "epoch_samples": samples_per_epoch(data, cfg)}
    for b in batch_sizes:
        steps = max(min_steps, samples_per_point // b)
        pair = [eager.replace(global_batch_size=b), compiled.replace(global_batch_size=b)]
        timed_run(data, pair[0], device, 2)  # eager warm-up at this shape
        before = cache["fxgraph_cache_hit"], cache["fxgraph_cache_miss"]
        try:
            first = timed_run(data, pair[1], device, 1, phases=False)
        except Exception as err:  # noqa: BLE001 -- any compiler failure: report it, stay eager
            out["error"] = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"[:300]
            break
        hits, misses = cache["fxgraph_cache_hit"] - before[0], cache["fxgraph_cache_miss"] - before[1]
        runs = alternating(pair, repeats, lambda c: timed_run(data, c, device, steps, phases=False))
        times = [[r.train_time_s / r.steps for r in rs] for rs in runs]
        eager_s, compiled_s = (statistics.median(t) for t in times)
        out["rows"].append({"batch size": b, "steps": steps, "eager_ms": 1000 * eager_s,
                            "compiled_ms": 1000 * compiled_s, "compile_s": max(0.0, first.train_time_s - compiled_s),
                            "ratios": [a / x for a, x in zip(*times)],
                            "cache_hits": hits, "cache_misses": misses})
    return out


def payback_steps(row: dict) -> int | None:
    """Steps after which the faster compiled steps earn the compile time back; None where no saving was resolved."""
    saving_s = (row["eager_ms"] - row["compiled_ms"]) / 1000
    if paired_speedup("", row["ratios"]).outcome != compare.HIGHER or saving_s <= 0:
        return None
    return math.ceil(row["compile_s"] / saving_s)


def compile_table(comp: dict) -> Table:
    mode = comp["mode"] if comp["backend"] == "inductor" else f"{comp['backend']}: capture only"
    t = Table(["batch size", "eager ms", "compiled ms", "step x", "compile s", "cached graphs", "payback steps",
               "payback epochs"], title=f"torch.compile ({mode}) on {comp['device']}, median of {comp['repeats']}")
    for r in comp["rows"]:
        n = payback_steps(r)
        t.add(**{"batch size": r["batch size"], "eager ms": round(r["eager_ms"], 3),
                 "compiled ms": round(r["compiled_ms"], 3), "step x": round(r["eager_ms"] / r["compiled_ms"], 2),
                 "compile s": round(r["compile_s"], 2), "payback steps": "never" if n is None else n,
                 "cached graphs": f"{r['cache_hits']}/{r['cache_hits'] + r['cache_misses']}"
                 if comp["backend"] == "inductor" else None,
                 "payback epochs": None if n is None else round(n * r["batch size"] / comp["epoch_samples"], 3)})
    return t


def compile_comparisons(comp: dict) -> list[compare.Comparison]:
    """The compiled step against eager at each batch compiled (none where the compiler failed first)."""
    return [paired_speedup(f"compiled / eager step, batch {r['batch size']}", r["ratios"]) for r in comp["rows"]]
