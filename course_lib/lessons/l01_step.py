"""Lesson 01's optimizer step and torch.compile, measured in paired repeats on the course's engine, as tables and
:class:`~course_lib.compare.Comparison` rows.

* :func:`optimizer_comparison` -- the optimizer phase and the whole step for dense Adam's three implementations
  (for-loop, foreach, fused) and SparseAdam tables (:mod:`course_lib.optim.adam`); :func:`optimizer_comparisons`;
  :func:`fastest_adam`, the implementation the baseline (and so every rung) trains with.
* :func:`lazy_adam_accuracy` -- SparseAdam ("lazy" Adam) is a different optimizer: its HR@10 against dense Adam's
  after the same budget; :func:`accuracy_comparisons` (the same steps, and the same seconds).
* :func:`compile_comparison` -- eager against ``torch.compile`` steps, the one-off compile time apart;
  :func:`compile_comparisons`, and :func:`payback_steps` where the saving is resolved.

Every run is :func:`course_lib.train.train_to_target`'s loop with one setting changed (``TrainConfig.adam_impl``,
``sparse_embeddings``, ``compile``).
"""

from __future__ import annotations

import math
import statistics

import torch

from .. import compare
from ..data.movielens import ImplicitData
from ..hardware import default_device
from ..metrics import hr_standard_error
from ..optim import resolved_adam_impl
from ..tables import Table
from ..train.engine import RunHooks
from ..train.ncf import TrainConfig, TrainResult, build_model, make_optimizer, samples_per_epoch, train_to_target

OPTIMIZER_VARIANTS = (
    ("dense Adam, for-loop", {"adam_impl": "for-loop"}),
    ("dense Adam, foreach", {"adam_impl": "foreach"}),
    ("dense Adam, fused", {"adam_impl": "fused"}),
    ("SparseAdam tables + Adam", {"sparse_embeddings": True}),
)


def _device(device) -> torch.device:
    return torch.device(device) if device is not None else default_device()


def _timed_run(data: ImplicitData, cfg: TrainConfig, device, steps: int) -> TrainResult:
    return train_to_target(data, cfg.replace(max_steps=steps), device=device, progress="none",
                           hooks=RunHooks(evaluate_points=False, time_phases=True))


# --------------------------------------------------------------------------- the optimizer step


def optimizer_comparison(data: ImplicitData, cfg: TrainConfig, batch_sizes, *, samples_per_point: int = 25_600,
                         min_steps: int = 8, repeats: int = 3, variants=OPTIMIZER_VARIANTS, device=None) -> dict:
    """The optimizer phase and the whole step, per batch size and Adam variant (``variants``: names and
    the ``TrainConfig`` changes). Each repeat runs every point once, back to back (every other repeat in
    reverse order), so each variant has a *paired* ratio to the default implementation (``adam_impl="auto"``, as
    resolved here: ``baseline_impl``, its rows ``baseline``) per repeat (:func:`paired_speedup`);
    every point also runs once untimed first (its shapes' allocations, the optimizer's state).

    Returns ``{"rows": [...], "baseline_impl": ..., "device": ..., "repeats": ...}``; a row has the
    batch, the variant, ``optimizer_ms`` and ``step_ms`` per step (medians over the repeats) and
    ``optimizer_ratios`` / ``step_ratios`` (the default's time over this variant's, per repeat)."""
    device = _device(device)
    data = data.to(device)
    base = cfg.replace(optimizer="adam", adam_impl="auto", sparse_embeddings=False, compile="none")
    baseline_impl = resolved_adam_impl(make_optimizer(build_model(data, base).to(device), base))
    baseline_name = f"dense Adam, {baseline_impl}"
    if baseline_name not in [name for name, _ in variants]:
        raise ValueError(f"the variants must include the default implementation, {baseline_name!r}")
    points = [(b, name, base.replace(global_batch_size=b, **changes))
              for b in batch_sizes for name, changes in variants]
    steps = {b: max(min_steps, samples_per_point // b) for b in batch_sizes}
    for b, _, c in points:
        _timed_run(data, c, device, 2)
    runs = {(b, name): [] for b, name, _ in points}  # per repeat: (optimizer s, step s) per step
    for rep in range(repeats):
        for b, name, c in points if rep % 2 == 0 else points[::-1]:  # alternate: a drifting load favours no point
            r = _timed_run(data, c, device, steps[b])
            runs[(b, name)].append((r.phase_time_s["optimizer"] / r.steps, r.train_time_s / r.steps))
    rows = []
    for b, name, _ in points:
        opt, step = zip(*runs[(b, name)])
        ref_opt, ref_step = zip(*runs[(b, baseline_name)])
        rows.append({"batch size": b, "variant": name, "steps": steps[b], "optimizer_ms": 1000 * statistics.median(opt),
                     "step_ms": 1000 * statistics.median(step), "baseline": name == baseline_name,
                     "optimizer_ratios": [r / x for r, x in zip(ref_opt, opt)],
                     "step_ratios": [r / x for r, x in zip(ref_step, step)]})
    return {"rows": rows, "baseline_impl": baseline_impl, "device": str(device), "repeats": repeats}


def paired_speedup(question: str, ratios: list[float], *, basis: str = "") -> compare.Comparison:
    """A speedup from paired repeats (``ratios``: the reference's time over the other's, one per repeat run back to
    back): :func:`course_lib.compare.paired_ratio`, above 1 where the other is faster."""
    return compare.paired_ratio(question, [1.0] * len(ratios), ratios, needed=compare.SPEED_EFFECT,
                                basis=basis or f"{len(ratios)} paired repeats")


def _ratio(ref_ms: float, ms: float) -> str:
    return f"{ref_ms / ms:.2f}x"


def optimizer_table(comp: dict) -> Table:
    t = Table(["batch size", "Adam", "optimizer (ms/step)", "step (ms/step)", "optimizer share",
               "optimizer speedup", "step speedup"],
              title=f"The optimizer step, median of {comp['repeats']} paired runs on {comp['device']} "
                    f"(speedup: over dense Adam, {comp['baseline_impl']}, torch's default here)")
    for r in comp["rows"]:
        ref = _baseline_row(comp, r["batch size"])
        t.add(**{"batch size": r["batch size"], "Adam": r["variant"] + (" (default)" if r["baseline"] else ""),
                 "optimizer (ms/step)": round(r["optimizer_ms"], 3), "step (ms/step)": round(r["step_ms"], 3),
                 "optimizer share": f"{r['optimizer_ms'] / r['step_ms']:.0%}",
                 "optimizer speedup": "—" if r["baseline"] else _ratio(ref["optimizer_ms"], r["optimizer_ms"]),
                 "step speedup": "—" if r["baseline"] else _ratio(ref["step_ms"], r["step_ms"])})
    return t


def _baseline_row(comp: dict, batch: int) -> dict:
    return next(r for r in comp["rows"] if r["batch size"] == batch and r["baseline"])


def optimizer_comparisons(comp: dict) -> list[compare.Comparison]:
    """Each variant against the default implementation (dense Adam, ``comp["baseline_impl"]``) at each batch, from
    :func:`optimizer_comparison`'s paired repeats: the optimizer phase's speedup, then the whole step's."""
    out = []
    for r in comp["rows"]:
        if r["baseline"]:
            continue
        for what, key in (("optimizer", "optimizer_ratios"), ("whole step", "step_ratios")):
            out.append(paired_speedup(f"{what}, {r['variant']} / {comp['baseline_impl']}, batch {r['batch size']}",
                                      r[key]))
    return out


def fastest_adam(rows: list[dict], batch: int | None = None) -> str:
    """The dense Adam implementation the baseline trains with, from :func:`optimizer_comparison`'s ``rows``: among
    "foreach" and "fused", those decided slower (*lower*, :func:`paired_speedup`) than the default at no batch (the
    rungs train at larger ones), the one with the largest median speedup at the baseline's ``batch`` (default: the
    smallest measured), if that is above 1; else "auto" (the default). An undecided lead still counts: it is the
    best estimate there is, and keeping the default, the slowest by that estimate, would slow the baseline every
    rung is measured against. A pure function of the rows."""
    batch = min(r["batch size"] for r in rows) if batch is None else batch
    best, lead = "auto", 1.0
    for impl in ("foreach", "fused"):
        mine = {r["batch size"]: r for r in rows if r["variant"] == f"dense Adam, {impl}" and not r["baseline"]}
        if batch not in mine or any(paired_speedup("", r["step_ratios"]).outcome == compare.LOWER
                                    for r in mine.values()):
            continue
        speedup = statistics.median(mine[batch]["step_ratios"])
        if speedup > lead:
            best, lead = impl, speedup
    return best


def adam_row(comp: dict, batch: int, impl: str) -> dict:
    """:func:`optimizer_comparison`'s row of dense Adam's ``impl`` at ``batch`` ("auto": the default's)."""
    name = f"dense Adam, {comp['baseline_impl'] if impl == 'auto' else impl}"
    return next(r for r in comp["rows"] if r["batch size"] == batch and r["variant"] == name)


# --------------------------------------------------------------------------- lazy Adam's accuracy


def lazy_adam_accuracy(data: ImplicitData, reference: TrainResult, *, budget_epochs: float, seeds=(0, 1),
                       device=None) -> list[dict]:
    """HR@10 and NDCG@10 after the same budget with dense Adam and with SparseAdam tables, per seed
    (the seed sets the initialization and the sampler), in the setting of the ``reference`` run (the
    baseline): its config with the budget of ``budget_epochs`` and no stop at the target.

    Dense Adam at the reference's own seed *is* the reference up to the budget — the same model,
    batches and steps, so the same numbers (tested) — and is read from its curve when it has an
    evaluation point there; every other run trains here. Each row keeps its curve (step, time, HR)."""
    device = _device(device)
    data = data.to(device)
    ref_cfg = TrainConfig.from_dict(reference.config)
    steps = max(1, round(budget_epochs * reference.steps_per_epoch))
    base = ref_cfg.replace(optimizer="adam", sparse_embeddings=False, compile="none",  # the reference's Adam
                           stop_at_target=False, max_steps=steps)
    rows = []
    for seed in seeds:
        # the lazy arm's dense layers run the default Adam, as optimizer_comparison timed it (the same arithmetic)
        for name, changes in (("dense Adam", {}), ("SparseAdam tables + Adam", {"sparse_embeddings": True,
                                                                                 "adam_impl": "auto"})):
            c = base.replace(seed=seed, **changes)
            curve = reference.curve
            if c == ref_cfg.replace(stop_at_target=False, max_steps=steps) and steps in curve["step"]:
                i = curve["step"].index(steps)  # the reference run, cut at the budget
                row = {"hr": curve["hr"][i], "ndcg": curve["ndcg"][i], "train_s": curve["time_s"][i],
                       "from": "the baseline run",
                       "curve": {k: curve[k][:i + 1] for k in ("step", "time_s", "hr")}}
            else:
                r = train_to_target(data, c, device=device, progress="none")
                row = {"hr": r.final_hr, "ndcg": r.final_ndcg, "train_s": r.train_time_s, "from": "trained here",
                       "curve": {k: r.curve[k] for k in ("step", "time_s", "hr")}}
            rows.append({"optimizer": name, "seed": seed, "steps": steps, "epochs": steps / reference.steps_per_epoch,
                         "users": data.num_users, **row})
    return rows


HR_DIGITS = 4  # the accuracy table's HR@10 and NDCG@10 decimals: a point of HR@10 is 0.01


def accuracy_table(rows: list[dict]) -> Table:
    t = Table(["optimizer", "seed", "steps", "epochs", "HR@10", "NDCG@10", "training (s, as run)", "run"],
              title="Lazy Adam (SparseAdam tables) against dense Adam: the same budget, two seeds")
    for r in rows:
        t.add(
            optimizer=r["optimizer"],
            seed=r["seed"],
            steps=r["steps"],
            epochs=round(r["epochs"], 3),
            run=r["from"],
            **{
                "HR@10": round(r["hr"], HR_DIGITS),
                "NDCG@10": round(r["ndcg"], HR_DIGITS),
                "training (s, as run)": round(r["train_s"], 2),
            },
        )
    return t


def _lazy_row(comp: dict, batch: int) -> dict:
    return next(r for r in comp["rows"] if r["batch size"] == batch and r["variant"].startswith("SparseAdam"))


def step_times(comp: dict, batch: int, impl: str = "auto") -> dict[str, float]:
    """ms per step of dense Adam (``impl``: the baseline's implementation, :func:`fastest_adam`) and of SparseAdam
    tables at ``batch``, from :func:`optimizer_comparison`'s paired runs: the names :func:`lazy_adam_accuracy` uses."""
    return {"dense Adam": adam_row(comp, batch, impl)["step_ms"],
            "SparseAdam tables + Adam": _lazy_row(comp, batch)["step_ms"]}


def _hr_estimate(hrs: list[float], users: int) -> tuple[float, float]:
    """The mean HR@10 of a few seeds and its standard error: the seeds' spread, and at least the evaluation's
    sampling error over ``users`` users (one evaluation's own noise, which two seeds can underestimate)."""
    mean = statistics.mean(hrs)
    spread = statistics.stdev(hrs) if len(hrs) > 1 else 0.0
    return mean, max(spread, hr_standard_error(mean, users)) / math.sqrt(len(hrs))


def accuracy_comparisons(rows: list[dict], comp: dict | None = None, batch: int | None = None, impl: str = "auto"
                         ) -> list[compare.Comparison]:
    """Lazy Adam (SparseAdam tables) against dense Adam (:func:`lazy_adam_accuracy`'s rows): HR@10 after the same
    steps; with ``comp`` (:func:`optimizer_comparison`) and ``batch``, also the whole step's speedup there (what the
    budget costs on the clock) and HR@10 after the same seconds: the cheaper optimizer at the budget against the
    other's curves at those seconds (:func:`step_times`); dense Adam is the implementation ``impl`` (the baseline's)."""
    by = {}
    for r in rows:
        by.setdefault(r["optimizer"], []).append(r)
    (dense_name, dense), (lazy_name, lazy) = by.items()
    users, df = rows[0]["users"], len(dense) + len(lazy) - 2
    d, l_ = _hr_estimate([r["hr"] for r in dense], users), _hr_estimate([r["hr"] for r in lazy], users)
    n = f"{len(dense)}/{len(lazy)} seeds"
    out = [compare.difference(f"HR@10, lazy - dense Adam, same {rows[0]['steps']} steps", *d, *l_,
                              needed=compare.HR_EFFECT, df=df or None, n=n)]
    if comp is None or batch is None:
        return out
    lazy_row, dense_row = _lazy_row(comp, batch), adam_row(comp, batch, impl)
    # both ratios are over the default's run of the same repeat: their quotient is lazy over dense, still paired
    out.append(paired_speedup(f"whole step, {lazy_row['variant']} / dense Adam, batch {batch}",
                              [lz / d for lz, d in zip(lazy_row["step_ratios"], dense_row["step_ratios"])]))
    step_ms = step_times(comp, batch, impl)
    cheap, dear = (lazy_name, dense_name) if step_ms[lazy_name] < step_ms[dense_name] else (dense_name, lazy_name)
    at = rows[0]["steps"] * step_ms[cheap] / step_ms[dear]  # the steps the dearer one runs in the same seconds
    points = [_hr_at_step(r["curve"], at) for r in by[dear] if r.get("curve")]
    if points and None not in points:
        other = _hr_estimate([p[0] for p in points], users)
        mine = d if cheap == dense_name else l_
        out.append(compare.difference(f"HR@10, {cheap} - {dear}, same seconds", *other, *mine,
                                      needed=compare.HR_EFFECT, df=df or None, n=n,
                                      basis="standard error; at the paired step times"))
    return out


def _hr_at_step(curve: dict, step: float) -> tuple[float, int, int] | None:
    """HR@10 on a run's curve at ``step``, on a straight line between the evaluations around it, with their steps;
    None where ``step`` is outside the curve."""
    pts = list(zip(curve["step"], curve["hr"]))
    for (s0, h0), (s1, h1) in zip(pts, pts[1:]):
        if s0 <= step <= s1 and s1 > s0:
            return h0 + (h1 - h0) * (step - s0) / (s1 - s0), s0, s1
    return None


# --------------------------------------------------------------------------- torch.compile


def _compile_counters() -> dict:
    from torch._dynamo.utils import counters

    return {"hit": counters["inductor"]["fxgraph_cache_hit"], "miss": counters["inductor"]["fxgraph_cache_miss"]}


def compile_comparison(data: ImplicitData, cfg: TrainConfig, batch_sizes, *, mode: str = "default",
                       backend: str = "inductor", samples_per_point: int = 25_600, min_steps: int = 8,
                       repeats: int = 3, device=None) -> dict:
    """Eager against compiled training steps per batch size (``cfg.compile = mode`` with ``backend``).

    Per batch: the one-off compile time (a compiled run of one step, minus one compiled step), then
    ``repeats`` pairs of eager and compiled runs, back to back, each pair in the other order than the last
    (medians, and the paired ratios). The
    compile caches of this process are cleared first (``torch.compiler.reset``), so the time is a
    real compile; inductor's on-disk cache may still serve its graphs (``cache_hits``: a first
    compile on a fresh machine takes longer). A compiler that fails (no C++ compiler for inductor,
    say) is reported in ``error`` and the comparison stops there: training stays eager."""
    device = _device(device)
    data = data.to(device)
    eager = cfg.replace(compile="none", sparse_embeddings=False)
    compiled = eager.replace(compile=mode, compile_backend=backend)
    torch.compiler.reset()
    out = {"mode": mode, "backend": backend, "device": str(device), "repeats": repeats, "rows": [], "error": None,
           "epoch_samples": samples_per_epoch(data, cfg)}
    for b in batch_sizes:
        steps = max(min_steps, samples_per_point // b)
        e, c = eager.replace(global_batch_size=b), compiled.replace(global_batch_size=b)
        _timed_run(data, e, device, 2)  # eager warm-up at this shape
        before = _compile_counters()
        try:
            first = train_to_target(data, c.replace(max_steps=1), device=device, progress="none",
                                    hooks=RunHooks(evaluate_points=False))
        except Exception as err:  # noqa: BLE001 -- any compiler failure: report it, stay eager
            lines = str(err).strip().splitlines()
            out["error"] = f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]
            break
        after = _compile_counters()
        times = {"eager": [], "compiled": []}
        for rep in range(repeats):
            pair = (("eager", e), ("compiled", c))
            for name, setting in pair if rep % 2 == 0 else pair[::-1]:  # alternate which runs first
                r = train_to_target(data, setting.replace(max_steps=steps), device=device, progress="none",
                                    hooks=RunHooks(evaluate_points=False))
                times[name].append(r.train_time_s / r.steps)
        eager_s, compiled_s = (statistics.median(times[k]) for k in ("eager", "compiled"))
        out["rows"].append({"batch size": b, "steps": steps, "eager_ms": 1000 * eager_s,
                            "compiled_ms": 1000 * compiled_s,
                            "compile_s": max(0.0, first.train_time_s - compiled_s),
                            "ratios": [a / x for a, x in zip(times["eager"], times["compiled"])],
                            "cache_hits": after["hit"] - before["hit"], "cache_misses": after["miss"] - before["miss"]})
    return out


def compile_speedup(row: dict) -> compare.Comparison:
    """The compiled step's speedup over eager at one batch (:func:`compile_comparison`'s paired repeats)."""
    return paired_speedup(f"step, compiled / eager, batch {row['batch size']}", row["ratios"])


def payback_steps(row: dict) -> int | None:
    """Steps after which the compile time is earned back by the faster steps (None: the paired repeats did not
    resolve a saving, :func:`compile_speedup`)."""
    saving_s = (row["eager_ms"] - row["compiled_ms"]) / 1000
    if compile_speedup(row).outcome != compare.HIGHER or saving_s <= 0:
        return None
    return math.ceil(row["compile_s"] / saving_s)


def compile_table(comp: dict) -> Table:
    mode = comp["mode"] if comp["backend"] == "inductor" else f"{comp['backend']}: capture only"
    t = Table(["batch size", "eager (ms/step)", "compiled (ms/step)", "step speedup", "compile (s, once)",
               "graphs from inductor's cache", "pays back after (steps)", "(epochs)"],
              title=f"torch.compile ({mode}) on {comp['device']}, median of {comp['repeats']} paired runs")
    for r in comp["rows"]:
        n = payback_steps(r)
        t.add(**{"batch size": r["batch size"], "eager (ms/step)": round(r["eager_ms"], 3),
                 "compiled (ms/step)": round(r["compiled_ms"], 3),
                 "step speedup": _ratio(r["eager_ms"], r["compiled_ms"]),
                 "compile (s, once)": round(r["compile_s"], 2),
                 "graphs from inductor's cache": f"{r['cache_hits']} of {r['cache_hits'] + r['cache_misses']}"
                 if comp["backend"] == "inductor" else "—",
                 "pays back after (steps)": "never" if n is None else n,
                 "(epochs)": "—" if n is None else round(n * r["batch size"] / comp["epoch_samples"], 3)})
    return t


def compile_comparisons(comp: dict) -> list[compare.Comparison]:
    """The compiled step against eager at each batch compiled (none where the compiler failed first)."""
    return [compile_speedup(r) for r in comp["rows"]]
