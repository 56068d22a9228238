"""Lesson 11, section 1: the gradient noise scale (:mod:`course_lib.batch_science`'s estimators) measured while
NeuMF and lesson 07's BERT train: a loss, a sampler and an ``on_eval`` probe per model, the probes' tables."""

from __future__ import annotations

import math

import torch

from .. import batch_science as bs, compare
from ..tables import Table

def ncf_loss(model: torch.nn.Module, batch: tuple) -> torch.Tensor:
    """NeuMF's training loss, the *mean* BCE over a (users, items, labels) batch (the estimators' convention)."""
    users, items, labels = batch
    return torch.nn.functional.binary_cross_entropy_with_logits(model(users, items).float(), labels.float())


def ncf_sampler(data, neg_per_pos: int = 4, seed: int = 0):
    """``sample(b)``: ``b`` training examples drawn as the loop draws them, from a generator of its own."""
    device = data.train_users.device
    gen = torch.Generator(device=device).manual_seed(seed)

    def sample(b: int) -> tuple:
        idx = torch.randint(0, data.train_users.numel(), (b,), generator=gen, device=device)
        labels = (torch.rand(b, generator=gen, device=device) < 1.0 / (1 + neg_per_pos)).float()
        negatives = torch.randint(0, data.num_items, (b,), generator=gen, device=device)
        return data.train_users[idx], torch.where(labels.bool(), data.train_items[idx], negatives), labels

    return sample


mlm_loss = lambda model, batch: model(*batch)  # BERT's mean cross-entropy over an (inputs, labels) batch's masks


def mlm_sampler(data, seed: int = 0):
    """``sample(b)``: ``b`` training sequences masked as the loop masks them, from a generator of its own."""
    gen = torch.Generator(device=data.device).manual_seed(seed)
    return lambda b: data.masked_batch(b, gen)


def noise_probe(loss, sample, b_small: int, b_big: int, *, at_steps=None, **estimator):
    """An ``on_eval`` probe: :func:`batch_science.noise_scale` at each evaluation in ``at_steps`` (all when None) but
    step 0's (the untrained model's says nothing), dropout off (the noise a larger batch averages is the data's)."""
    def probe(model, point):
        if point["step"] == 0 or (at_steps is not None and point["step"] not in at_steps):
            return None
        was_training = model.training
        model.eval()
        try:
            est = bs.noise_scale(model, loss, sample, b_small, b_big, **estimator)
        finally:
            model.train(was_training)
        return {"b_simple": est.b_simple, "stderr": est.stderr, "trace_cov": est.trace_cov,
                "grad_sq_norm": est.grad_sq_norm, "repeats": est.repeats, "b_small": b_small, "b_big": b_big,
                "pairs_g2": list(est.g2s), "pairs_trace": list(est.traces)}

    return probe


def probe_steps(cfg, points: int) -> set[int]:
    """``points`` of a BERT run's evaluations, evenly spread, the last included (all would outcost the training)."""
    evals = sorted({*range(cfg.eval_every_steps, cfg.max_steps + 1, cfg.eval_every_steps), cfg.max_steps})
    if points <= 1:
        return {evals[-1]}
    if points >= len(evals):
        return set(evals)
    return {evals[round(i * (len(evals) - 1) / (points - 1))] for i in range(points)}


def bert_setting(saved07: dict | None, profile: str, plan) -> dict:
    """Lesson 07's small-batch Adam run (model, sequence length, batches, steps, tuned lr, precision, target loss),
    repeated here with the probe; without lesson 07's result in this profile, its defaults."""
    from ..bert_setting import saved_setting
    from ..train.mlm import MLMTrainConfig

    lesson07 = saved_setting(saved07, profile, plan)
    ok = bool(saved07 and saved07.get("runs") and saved07.get("profile") == profile)
    small = min(r["global_batch_size"] for r in saved07["runs"]) if ok else (8 if profile == "smoke" else 32)
    large = max(r["global_batch_size"] for r in saved07["runs"]) if ok else small * plan.bert_large_batch_factor
    base = {r["label"]: r for r in saved07["runs"]}.get(f"adam b={small}") if ok else None
    n = base["steps"] if base else (8 if profile == "smoke" else 240)
    cfg = MLMTrainConfig(optimizer="adam", global_batch_size=small, micro_batch_size=small, base_batch_size=small,
                         base_lr=(base or {}).get("peak_lr") or 1e-3, max_steps=n, warmup_steps=round(0.1 * n),
                         eval_every_steps=max(1, n // 20), model=lesson07["model"],
                         precision=lesson07_precision(base, saved07 if ok else None), dropout=0.0, seed=0,
                         label=f"adam b={small} (noise probe)")
    return {"config": cfg, "seq_len": lesson07["seq_len"], "vocab_size": lesson07["vocab_size"], "small_batch": small,
            "large_batch": large, "target_loss": lesson07["target_loss"],
            "source": "lesson 07's Adam run" if base else "lesson 07's defaults"}


def lesson07_precision(run: dict | None, saved07: dict | None) -> str:
    """The precision lesson 07 trained in: its run's (a mode or the loop's record), else its result's, else its own."""
    for p in ((run or {}).get("precision"), (saved07 or {}).get("precision")):
        p = p.get("mode") if isinstance(p, dict) else p
        if p:
            return str(p)
    return "auto"  # lesson 07's own setting: bf16 where the hardware has it natively


def b_simple_at_target(run, target_loss: float | None = None) -> dict:
    """The first probe at the target (B_simple grows during training, and a critical batch is for its target), else
    the last: a NeuMF result's at its target HR@10, a BERT record's at lesson 07's ``target_loss``."""
    if isinstance(run, dict):
        probes, hit = run.get("probes"), lambda p: target_loss is not None and p["eval_loss"] <= target_loss
    else:
        probes, hit = run.probes, lambda p: run.target_hr is not None and (p["hr"] or 0) >= run.target_hr
    if not probes:
        raise ValueError("no noise-scale probe recorded: pass on_eval=noise_probe(...) to the run")
    first = next((p for p in probes if hit(p)), None)
    return {**first, "at": "the target"} if first else {**probes[-1], "at": "the last probe (target missed)"}


def at_its_error(x: float, err: float) -> float:
    """``x`` rounded at its error's second significant digit: 11,506 +/- 2,243 is 11,500 +/- 2,200."""
    if not (math.isfinite(x) and math.isfinite(err)) or err <= 0:
        return x
    step = 10.0 ** (math.floor(math.log10(err)) - 1)
    return round(x / step) * step


def noise_table(probes: list[dict], where: dict | None = None) -> Table:
    """B_simple at each probe with its error; ``where``: column -> probe key placing it (default: NeuMF's)."""
    where = where or {"epoch": "epoch", "step": "step", "HR@10": "hr"}
    count = lambda x: round(x) if math.isfinite(x) else "n/a" if math.isnan(x) else "inf (|G|^2 <= 0: noise only)"
    t = Table(list(where) + ["B_simple", "+/- (stderr)", "stderr / B_simple", "repeats", "tr(Sigma)", "|G|^2"])
    for p in probes:
        b, se = p["b_simple"], p["stderr"]
        t.add(**{c: round(p[k], 3) if isinstance(p[k], float) else p[k] for c, k in where.items()}, **{
            "B_simple": count(at_its_error(b, se)), "+/- (stderr)": count(at_its_error(se, se)),
            "stderr / B_simple": f"{se / b:.0%}" if math.isfinite(b) and b > 0 else "n/a", "repeats": p.get("repeats"),
            "tr(Sigma)": f"{p['trace_cov']:.3g}", "|G|^2": f"{p['grad_sq_norm']:.3g}"})
    return t


def plot_b_simple(ax, probes: list[dict], x: str, label: str, **axes):
    ps = [p for p in probes if math.isfinite(p["b_simple"])]
    ax.errorbar([p[x] for p in ps], [p["b_simple"] for p in ps], capsize=3, marker="o",
                yerr=[p["stderr"] if math.isfinite(p["stderr"]) else 0 for p in ps])
    ax.set(xlabel=x, ylabel=label, **axes)


def plot_mlm_noise(record: dict, setting: dict):
    """BERT's B_simple during training, with lesson 07's two batches drawn as lines."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    for b, style in ((setting["small_batch"], ":"), (setting["large_batch"], "--")):
        ax.axhline(b, color="gray", ls=style, label=f"lesson 07's batch {b}")
    plot_b_simple(ax, record["probes"], "step", "B_simple (sequences)", yscale="log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def probe_cost_table(results: dict) -> Table:
    """What tracking B_simple cost each run (a NeuMF result or a BERT record); a pair is a backward pass per batch."""
    span = lambda xs: "-" if not xs else f"{min(xs):,}" if min(xs) == max(xs) else f"{min(xs):,}-{max(xs):,}"
    t = Table(["run", "measurements", "gradient pairs each", "backward passes each", "probe time (s)",
               "training time (s)", "probes / training"])
    for label, r in results.items():
        probes, probe_s, train_s = (r[k] if isinstance(r, dict) else getattr(r, k)
                                    for k in ("probes", "probe_time_s", "train_time_s"))
        pairs = [p["repeats"] for p in probes if p.get("repeats")]
        t.add(**{"run": label, "measurements": len(probes), "gradient pairs each": span(pairs),
                 "backward passes each": span([2 * n for n in pairs]), "probe time (s)": round(probe_s, 1),
                 "training time (s)": round(train_s, 1), "probes / training": f"{probe_s / max(train_s, 1e-9):.0%}"})
    return t


def trend_comparison(probes: list[dict]) -> compare.Comparison | None:
    """Did B_simple change during training? The slope of a line through the probes weighted by ``1 / stderr^2``, its
    error the larger of the stated errors' and the scatter's (a few points can lie closer than their errors say)."""
    pts = [p for p in probes if math.isfinite(p["b_simple"]) and math.isfinite(p.get("stderr", math.nan))
           and p["stderr"] > 0]
    if len({p["epoch"] for p in pts}) < 2:
        return None
    xs, ys, ws = [p["epoch"] for p in pts], [p["b_simple"] for p in pts], [1 / p["stderr"] ** 2 for p in pts]
    fit = compare.line_fit(xs, ys, ws)
    mx = sum(w * x for w, x in zip(ws, xs)) / sum(ws)
    stated = 1 / math.sqrt(sum(w * (x - mx) ** 2 for w, x in zip(ws, xs)))
    se = stated if math.isnan(fit.slope_se) else max(stated, fit.slope_se)
    return compare.quantity("B_simple trend (slope)", fit.slope, se, needed=compare.EXACT, unit="examples/epoch",
                            df=fit.df if fit.df > 0 else None, n=str(len(pts)), basis="weighted line")


def b_simple_estimate(name: str, probe: dict, unit: str = "examples") -> compare.Estimate:
    """A probe's B_simple with its standard error (the jackknife over its gradient pairs) as an estimate."""
    se = probe.get("stderr", math.nan) if math.isfinite(probe["b_simple"]) else math.nan  # inf: |G|^2 <= 0
    return compare.estimate(name, probe["b_simple"], se, unit=unit, basis=f"{probe.get('repeats') or 0:,} pairs")
