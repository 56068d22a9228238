"""Lesson 11, section 1: the gradient noise scale measured while NeuMF (and lesson 07's BERT) trains.

The estimators are :mod:`course_lib.batch_science`; this module adapts NeuMF and BERT to them (a loss, a
sampler, an ``on_eval`` probe), and turns the probes into tables: B_simple at each evaluation with its
standard error, what the probes cost, and whether B_simple moved during training (a weighted line's slope,
a :class:`~course_lib.compare.Comparison`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import batch_science as bs
from .. import compare
from ..tables import Table

# --------------------------------------------------------------------------- NeuMF for the estimators


def ncf_loss(model: torch.nn.Module, batch: tuple) -> torch.Tensor:
    """NeuMF's training loss, the *mean* BCE over a (users, items, labels) batch (the estimators' convention)."""
    users, items, labels = batch
    return F.binary_cross_entropy_with_logits(model(users, items).float(), labels.float())


def ncf_sampler(data, neg_per_pos: int = 4, seed: int = 0):
    """``sample(b)``: ``b`` training examples drawn as the loop draws them (a random positive, or
    one of its ``neg_per_pos`` uniform negatives), independently of the training batches."""
    gen = torch.Generator(device=data.train_users.device).manual_seed(seed)
    device = data.train_users.device

    def sample(b: int) -> tuple:
        idx = torch.randint(0, data.train_users.numel(), (b,), generator=gen, device=device)
        labels = (torch.rand(b, generator=gen, device=device) < 1.0 / (1 + neg_per_pos)).float()
        negatives = torch.randint(0, data.num_items, (b,), generator=gen, device=device)
        items = torch.where(labels.bool(), data.train_items[idx], negatives)
        return data.train_users[idx], items, labels

    return sample


def noise_probe(data, b_small: int, b_big: int, repeats: int, seed: int = 0, *, rel_error: float | None = None,
                max_repeats: int | None = None):
    """An ``on_eval`` probe for the training loop: the noise scale at each evaluation point after
    the first (at step 0 the untrained model's noise scale says nothing about training). With
    ``rel_error``, each measurement takes as many gradient pairs as its standard error needs to fall
    to that fraction of B_simple (from ``repeats``, doubling, at most ``max_repeats``:
    :func:`course_lib.batch_science.noise_scale`); its ``repeats`` are recorded."""
    sample = ncf_sampler(data, seed=seed)

    def probe(model, point):
        if point["step"] == 0:
            return None
        est = bs.noise_scale(model, ncf_loss, sample, b_small, b_big, repeats=repeats, rel_error=rel_error,
                             max_repeats=max_repeats)
        return {"b_simple": est.b_simple, "stderr": est.stderr, "trace_cov": est.trace_cov,
                "grad_sq_norm": est.grad_sq_norm, "repeats": est.repeats, "b_small": b_small, "b_big": b_big,
                "pairs_g2": list(est.g2s), "pairs_trace": list(est.traces)}

    return probe


# --------------------------------------------------------------------------- lesson 07's BERT for the estimators


def mlm_loss(model: torch.nn.Module, batch: tuple) -> torch.Tensor:
    """BERT's MLM loss, the mean cross-entropy over the masked positions of an ``(inputs, labels)`` batch."""
    inputs, labels = batch
    return model(inputs, labels)


def mlm_sampler(data, seed: int = 0):
    """``sample(b)``: ``b`` training sequences masked as the loop masks them, from a generator of its own."""
    gen = torch.Generator(device=data.device).manual_seed(seed)
    return lambda b: data.masked_batch(b, gen)


def probe_steps(cfg, points: int) -> set[int]:
    """``points`` of a BERT run's evaluation steps, evenly spread, the last one included: where a
    probe measures (every evaluation would cost more than the training on a CPU)."""
    evals = sorted({*range(cfg.eval_every_steps, cfg.max_steps + 1, cfg.eval_every_steps), cfg.max_steps})
    if points >= len(evals):
        return set(evals)
    return ({evals[round(i * (len(evals) - 1) / max(points - 1, 1))] for i in range(points)} if points > 1
            else {evals[-1]})


def mlm_noise_probe(data, b_small: int, b_big: int, repeats: int, at_steps=None, seed: int = 0):
    """An ``on_eval`` probe for :func:`course_lib.train.mlm.train_mlm`: B_simple in sequences at the
    evaluation steps in ``at_steps`` (every one after step 0 when None), with dropout off (the noise
    a larger batch averages away is the data's; dropout would add its own)."""
    sample = mlm_sampler(data, seed=seed)

    def probe(model, point):
        if point["step"] == 0 or (at_steps is not None and point["step"] not in at_steps):
            return None
        was_training = model.training
        model.eval()
        try:
            est = bs.noise_scale(model, mlm_loss, sample, b_small, b_big, repeats=repeats)
        finally:
            model.train(was_training)
        return {"b_simple": est.b_simple, "stderr": est.stderr, "trace_cov": est.trace_cov,
                "grad_sq_norm": est.grad_sq_norm, "repeats": est.repeats, "b_small": b_small, "b_big": b_big}

    return probe


def bert_setting(saved07: dict | None, profile: str, plan, *, steps: int | None = None) -> dict:
    """Lesson 07's small-batch Adam run as lesson 11 repeats it with the probe: its model, sequence length, both
    batches (the figure draws them), the run's steps, peak lr and precision (:func:`lesson07_precision`), and the
    target loss. Without lesson 07's result in this profile: its defaults. ``steps`` overrides the run's length."""
    from .l07_bert_lamb import saved_setting
    from ..train.mlm import MLMTrainConfig

    lesson07 = saved_setting(saved07, profile, plan)
    ok = bool(saved07 and saved07.get("runs") and saved07.get("profile") == profile)
    smoke = profile == "smoke"
    small = min(r["global_batch_size"] for r in saved07["runs"]) if ok else (8 if smoke else 32)
    large = max(r["global_batch_size"] for r in saved07["runs"]) if ok else small * plan.bert_large_batch_factor
    base = {r["label"]: r for r in saved07["runs"]}.get(f"adam b={small}") if ok else None
    n = steps or (base["steps"] if base else (8 if smoke else 240))
    # lesson 07 tunes its small-batch lr (a sweep): its chosen peak lr, else Adam's default
    lr = base["peak_lr"] if base and base.get("peak_lr") else 1e-3
    cfg = MLMTrainConfig(optimizer="adam", global_batch_size=small, micro_batch_size=small, base_lr=lr,
                         base_batch_size=small, max_steps=n, warmup_steps=round(0.1 * n),
                         eval_every_steps=max(1, n // 20), model=lesson07["model"],
                         precision=lesson07_precision(base, saved07 if ok else None), dropout=0.0, seed=0,
                         label=f"adam b={small} (noise probe)")
    source = ("lesson 07's small-batch Adam run" if base else
              "lesson 07's defaults (run lesson 07 first to compare with its measurements)")
    return {"config": cfg, "seq_len": lesson07["seq_len"], "vocab_size": lesson07["vocab_size"], "small_batch": small,
            "large_batch": large, "target_loss": lesson07["target_loss"], "source": source}


LESSON07_PRECISION = "auto"  # lesson 07's notebook trains in "auto": bf16 where the hardware has it natively


def lesson07_precision(run: dict | None, saved07: dict | None) -> str:
    """The precision lesson 07 trained its runs in: the saved run's (a mode, or the loop's precision record), else
    its saved result's, else lesson 07's own setting (:data:`LESSON07_PRECISION`), so the rerun here is
    lesson 07's run."""
    for where in (run or {}, saved07 or {}):
        p = where.get("precision")
        if isinstance(p, dict):
            p = p.get("mode")
        if p:
            return str(p)
    return LESSON07_PRECISION


def mlm_b_simple_at_target(record: dict, target_loss: float | None) -> dict:
    """The BERT probe to compare with lesson 07: the first at or below its target loss, else the last."""
    probes = record.get("probes") or []
    if not probes:
        raise ValueError("the run recorded no noise-scale probe: pass on_eval=mlm_noise_probe(...) to train_mlm")
    for p in probes:
        if target_loss is not None and p["eval_loss"] <= target_loss:
            return {**p, "at": "the first probe at lesson 07's target loss"}
    return {**probes[-1], "at": "the last probe (the run did not reach lesson 07's target)" if target_loss is not None
            else "the last probe"}


def mlm_noise_table(record: dict) -> Table:
    """B_simple (in sequences) at each probe of a BERT run, with the held-out loss there."""
    t = Table(["step", "sequences", "held-out loss", "B_simple (seqs)", "+/- (stderr)", "tr(Sigma)", "|G|^2"],
              title="BERT: the simple noise scale during training")
    for p in record["probes"]:
        t.add(**{"step": p["step"], "sequences": p["sequences"], "held-out loss": round(p["eval_loss"], 3),
                 "B_simple (seqs)": count(p["b_simple"]), "+/- (stderr)": count(p["stderr"]),
                 "tr(Sigma)": f"{p['trace_cov']:.3g}", "|G|^2": f"{p['grad_sq_norm']:.3g}"})
    return t


def plot_mlm_noise(record: dict, setting: dict):
    """BERT's B_simple during training, with lesson 07's two batches drawn as lines."""
    import matplotlib.pyplot as plt

    pts = [p for p in record["probes"] if math.isfinite(p["b_simple"])]
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    if pts:
        ax.errorbar([p["step"] for p in pts], [p["b_simple"] for p in pts],
                    yerr=[p["stderr"] if math.isfinite(p["stderr"]) else 0 for p in pts], fmt="o-", capsize=3,
                    label="B_simple (sequences)")
    for b, style in ((setting["small_batch"], ":"), (setting["large_batch"], "--")):
        ax.axhline(b, color="gray", ls=style, label=f"lesson 07's batch {b}")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("sequences")
    ax.set_title("BERT: the simple noise scale during training")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def sig(x: float, digits: int = 2) -> float:
    """``x`` to ``digits`` significant digits: how an error (or a value known to a few percent) is quoted."""
    if not math.isfinite(x) or x == 0:
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def at_its_error(x: float, err: float) -> float:
    """``x`` rounded where its error's second significant digit sits: 11,506 +/- 2,243 is 11,500 +/- 2,200."""
    if not (math.isfinite(x) and math.isfinite(err)) or err <= 0:
        return x
    step = 10.0 ** (math.floor(math.log10(err)) - 1)
    return round(x / step) * step


def count(x: float) -> str | int:
    """A noise scale or its error for a table: rounded, or why there is no number."""
    return round(x) if math.isfinite(x) else ("n/a" if math.isnan(x) else "inf (|G|^2 <= 0: noise only)")


def noise_table(result) -> Table:
    """B_simple at each evaluation point of a run, with HR@10 there."""
    repeats = any("repeats" in p for p in result.probes)
    t = Table(["epoch", "step", "HR@10", "B_simple", "+/- (stderr)", "stderr / B_simple"]
              + (["repeats"] if repeats else []) + ["tr(Sigma)", "|G|^2"],
              title="the simple noise scale during training (McCandlish et al. 2018)")
    for p in result.probes:
        rel = p["stderr"] / p["b_simple"] if math.isfinite(p["b_simple"]) and p["b_simple"] > 0 else math.nan
        t.add(**{"epoch": round(p["epoch"], 2), "step": p["step"], "HR@10": p["hr"],
                 "B_simple": count(at_its_error(p["b_simple"], p["stderr"])),
                 "+/- (stderr)": count(sig(p["stderr"])),
                 "stderr / B_simple": f"{rel:.0%}" if math.isfinite(rel) else "n/a",
                 **({"repeats": p.get("repeats", "n/a")} if repeats else {}),
                 "tr(Sigma)": f"{p['trace_cov']:.3g}", "|G|^2": f"{p['grad_sq_norm']:.3g}"})
    return t


def b_simple_at_target(result) -> dict:
    """The probe to compare with the critical batch: the first one at or past the target (the noise
    scale grows during training, and the critical batch is *for that target*), else the last."""
    if not result.probes:
        raise ValueError("the run recorded no noise-scale probe: pass on_eval=noise_probe(...) to train_to_target")
    target = result.target_hr
    for p in result.probes:
        if target is not None and p["hr"] is not None and p["hr"] >= target:
            return {**p, "at": "the first evaluation point at the target"}
    return {**result.probes[-1], "at": "the last evaluation point (the run did not reach the target)"}


def probe_cost_table(results: dict) -> Table:
    """What tracking B_simple cost each run (``results``: label -> a NeuMF result or a BERT record), from its own
    clocks and the probes' records: measurements, gradient pairs per measurement (one backward pass at each of
    the two batches per pair), the probes' seconds against the training clock (the probes run off it)."""
    t = Table(["run", "measurements", "gradient pairs each", "backward passes each", "probe time (s)",
               "training time (s)", "probes / training"], title="what measuring B_simple cost")
    for label, r in results.items():
        get = r.get if isinstance(r, dict) else (lambda key, r=r: getattr(r, key))
        probes, probe_s, train_s = get("probes"), get("probe_time_s"), get("train_time_s")
        pairs = [p["repeats"] for p in probes if p.get("repeats")]
        span = "-" if not pairs else (f"{min(pairs):,}" if min(pairs) == max(pairs) else
                                      f"{min(pairs):,}-{max(pairs):,}")
        passes = "-" if not pairs else (f"{2 * min(pairs):,}" if min(pairs) == max(pairs) else
                                        f"{2 * min(pairs):,}-{2 * max(pairs):,}")
        t.add(**{"run": label, "measurements": len(probes), "gradient pairs each": span,
                 "backward passes each": passes, "probe time (s)": round(probe_s, 1),
                 "training time (s)": round(train_s, 1), "probes / training": f"{probe_s / max(train_s, 1e-9):.0%}"})
    return t


def trend_comparison(probes: list[dict]) -> compare.Comparison | None:
    """Did B_simple change during training beyond its standard errors? The slope per epoch of a line through
    the probes' B_simple, weighted by each one's stated error (``1 / stderr^2``, :func:`compare.line_fit`), its
    standard error the larger of the stated errors' and the scatter about the line's (the stated errors bound
    it from below: a few points can lie closer to a line than their errors say). None with fewer than two
    finite measurements that carry an error."""
    pts = [p for p in probes if math.isfinite(p["b_simple"]) and math.isfinite(p.get("stderr", math.nan))
           and p["stderr"] > 0]
    if len({p["epoch"] for p in pts}) < 2:
        return None
    xs, ys, ws = [p["epoch"] for p in pts], [p["b_simple"] for p in pts], [1 / p["stderr"] ** 2 for p in pts]
    fit = compare.line_fit(xs, ys, ws)
    mx = sum(w * x for w, x in zip(ws, xs)) / sum(ws)
    stated = 1 / math.sqrt(sum(w * (x - mx) ** 2 for w, x in zip(ws, xs)))
    se = stated if math.isnan(fit.slope_se) else max(stated, fit.slope_se)
    return compare.quantity("B_simple's change per epoch during training", fit.slope, se, needed=compare.EXACT,
                            df=fit.df if fit.df > 0 else None, unit="examples/epoch", n=str(len(pts)),
                            basis=f"line through {len(pts)} probes weighted by their standard errors")


def b_simple_estimate(name: str, probe: dict, unit: str = "examples") -> compare.Estimate:
    """A probe's B_simple as a row of :func:`compare.estimates_table`, with its standard error (normal interval:
    the jackknife over the probe's gradient pairs)."""
    pairs = probe.get("repeats")
    se = probe.get("stderr", math.nan) if math.isfinite(probe["b_simple"]) else math.nan  # inf: |G|^2 <= 0
    return compare.estimate(name, probe["b_simple"], se, unit=unit,
                            basis=f"{pairs:,} gradient pairs" if pairs else "the probe's gradient pairs")
