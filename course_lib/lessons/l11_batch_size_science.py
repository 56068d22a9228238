"""Lesson 11's measurements and their reading: the noise scale against the bend, sharpness
against the gap, growing the batch instead of decaying the lr, BatchNorm with few samples per rank.

The estimators are :mod:`course_lib.batch_science`; the runs are the course's one NeuMF loop
(:func:`course_lib.train.train_to_target`, with its ``on_eval`` probe and ``milestones``); the
BatchNorm variants and their worker are :mod:`course_lib.parallel.sync_batchnorm`. This module
adapts NeuMF to the estimators, finds the critical batch in a steps-to-target curve, builds the
tables and figures, and writes every verdict from the learner's own numbers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import batch_science as bs
from ..parallel.sync_batchnorm import BN_VARIANTS
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


def noise_probe(data, b_small: int, b_big: int, repeats: int, seed: int = 0):
    """An ``on_eval`` probe for the training loop: the noise scale at each evaluation point after
    the first (at step 0 the untrained model's noise scale says nothing about training)."""
    sample = ncf_sampler(data, seed=seed)

    def probe(model, point):
        if point["step"] == 0:
            return None
        est = bs.noise_scale(model, ncf_loss, sample, b_small, b_big, repeats=repeats)
        return {"b_simple": est.b_simple, "stderr": est.stderr, "trace_cov": est.trace_cov,
                "grad_sq_norm": est.grad_sq_norm}

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
    return {evals[round(i * (len(evals) - 1) / max(points - 1, 1))] for i in range(points)} if points > 1 else {evals[-1]}


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
                "grad_sq_norm": est.grad_sq_norm}

    return probe


def bert_setting(saved07: dict | None, profile: str, plan, *, steps: int | None = None) -> dict:
    """Lesson 07's small-batch Adam run as lesson 11 repeats it with the probe, and what lesson 07
    measured to compare with: its model, sequence length, both batches, the run's steps and peak lr,
    the target loss and Adam's steps to it at each batch (``rows``, None when lesson 07 is missing, from
    another profile, or either run missed the target). Without lesson 07: its defaults for this
    profile and no rows. ``steps`` overrides the run's length."""
    from .l07_bert_lamb import saved_setting
    from ..train.mlm import MLMTrainConfig

    lesson07 = saved_setting(saved07, profile, plan)
    ok = bool(saved07 and saved07.get("runs") and saved07.get("profile") == profile)
    smoke = profile == "smoke"
    small = min(r["global_batch_size"] for r in saved07["runs"]) if ok else (8 if smoke else 32)
    large = max(r["global_batch_size"] for r in saved07["runs"]) if ok else small * plan.bert_large_batch_factor
    runs = {r["label"]: r for r in saved07["runs"]} if ok else {}
    base = runs.get(f"adam b={small}")
    n = steps or (base["steps"] if base else (8 if smoke else 240))
    cfg = MLMTrainConfig(optimizer="adam", global_batch_size=small, micro_batch_size=small, base_lr=1e-3,
                         base_batch_size=small, max_steps=n, warmup_steps=round(0.1 * n),
                         eval_every_steps=max(1, n // 20), model=lesson07["model"],
                         precision="fp32", dropout=0.0, seed=0, label=f"adam b={small} (noise probe)")
    rows = None
    # the large batch's Adam run at its best lr, seed 0: saved first (its label is the sweep's, "adam b=L, sqrt rule xF")
    top = next((r for r in saved07["runs"] if r["label"].startswith("adam") and r["global_batch_size"] == large), None) \
        if ok else None
    if base and top and base.get("steps_to_loss") and top.get("steps_to_loss"):
        rows = [{"batch size": small, "steps to target": base["steps_to_loss"]},
                {"batch size": large, "steps to target": top["steps_to_loss"]}]
    source = ("lesson 07's small-batch Adam run" if base else
              "lesson 07's defaults (run lesson 07 first to compare with its measurements)")
    return {"config": cfg, "seq_len": lesson07["seq_len"], "vocab_size": lesson07["vocab_size"], "small_batch": small,
            "large_batch": large, "target_loss": lesson07["target_loss"], "rows": rows, "source": source}


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
                 "B_simple (seqs)": _count(p["b_simple"]), "+/- (stderr)": _count(p["stderr"]),
                 "tr(Sigma)": f"{p['trace_cov']:.3g}", "|G|^2": f"{p['grad_sq_norm']:.3g}"})
    return t


def two_point_critical_batch(rows: list[dict]) -> float | None:
    """``B_crit`` of ``S = S_min (1 + B_crit / B)`` through two measured points, exactly:
    ``S1 - S2 = B_crit (S2 / B1 - S1 / B2)``. ``math.inf`` when the steps fell at least in proportion
    to the batch (no bend between them), None when they did not fall (both past the bend)."""
    (b1, s1), (b2, s2) = sorted((r["batch size"], r["steps to target"]) for r in rows)
    if s1 <= s2:
        return None
    den = s2 / b1 - s1 / b2
    return math.inf if den <= 0 else (s1 - s2) / den


def bert_noise_verdict(b_simple: float, rows: list[dict] | None, factor: float = 3.0, stderr: float = math.nan) -> str:
    """Does BERT's B_simple predict how many steps lesson 07's large batch saved? A ``stderr`` as large
    as ``b_simple`` itself is said first: then the estimate cannot decide anything."""
    if math.isfinite(b_simple) and math.isfinite(stderr) and stderr >= b_simple:
        return (f"BERT's B_simple = {b_simple:,.0f} +/- {stderr:,.0f} sequences: its standard error is as large as "
                "the estimate, so it predicts nothing yet. Raise BERT_NOISE_REPEATS (the error falls like "
                "1/sqrt of it) or the larger of BERT_NOISE_BATCHES, and measure again. "
                + bert_noise_verdict(b_simple, rows, factor))
    if not math.isfinite(b_simple):
        return ("BERT's |G|^2 estimate was not positive: at these two batch sizes its gradient is all noise as far "
                "as the repeats can tell. Raise BERT_NOISE_REPEATS or the larger batch and measure again.")
    if rows is None:
        return (f"BERT's B_simple = {b_simple:,.0f} sequences; lesson 07's steps to its target at two batches are "
                "missing here (run lesson 07 in this profile first, with both Adam runs reaching the target).")
    (b1, s1), (b2, s2) = sorted((r["batch size"], r["steps to target"]) for r in rows)
    predicted = (1 + b_simple / b1) / (1 + b_simple / b2)
    head = (f"From batch {b1} to {b2} (x{b2 / b1:g}) lesson 07's Adam needed x{s1 / s2:.2f} fewer steps to its target "
            f"(perfect scaling: x{b2 / b1:g}); with B_crit = B_simple = {b_simple:,.0f} sequences, "
            f"S = S_min (1 + B_crit / B) predicts x{predicted:.2f}. ")
    b_crit = two_point_critical_batch(rows)
    if b_crit is None:
        return head + ("The steps did not fall at all, so both batches are past the bend as measured; "
                       + ("B_simple agrees (it is near or below the small batch)." if b_simple <= factor * b1 else
                          "B_simple, well above the small batch, predicted a saving the runs did not show."))
    if math.isinf(b_crit):
        return head + ("The steps fell at least in proportion to the batch: no bend up to the large batch; "
                       + ("B_simple agrees (it is not far below the large batch)." if b_simple >= b2 / factor else
                          "B_simple, far below the large batch, predicted a bend the runs did not show."))
    ratio = b_simple / b_crit
    agree = 1 / factor <= ratio <= factor
    return head + (f"The two points give B_crit = {b_crit:,.0f}: B_simple is {ratio:.2f}x it, "
                   + (f"within the factor {factor:g} McCandlish et al. report." if agree else
                      f"outside the factor {factor:g} McCandlish et al. report (two points at the granularity of "
                      "lesson 07's evaluations, and a target set by the small-batch run, make this a rough check)."))


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


def _count(x: float) -> str | int:
    """A noise scale or its error for a table: rounded, or why there is no number."""
    return round(x) if math.isfinite(x) else ("n/a" if math.isnan(x) else "inf (|G|^2 <= 0: noise only)")


def noise_table(result) -> Table:
    """B_simple at each evaluation point of a run, with HR@10 there."""
    t = Table(["epoch", "step", "HR@10", "B_simple", "+/- (stderr)", "tr(Sigma)", "|G|^2"],
              title="the simple noise scale during training (McCandlish et al. 2018)")
    for p in result.probes:
        t.add(**{"epoch": round(p["epoch"], 2), "step": p["step"], "HR@10": p["hr"], "B_simple": _count(p["b_simple"]),
                 "+/- (stderr)": _count(p["stderr"]),
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


def probe_cost_sentence(result) -> str:
    """What tracking B_simple cost this run, from its own clocks (a NeuMF result or a BERT record)."""
    get = result.get if isinstance(result, dict) else lambda key: getattr(result, key)
    n, probe_s, train_s = len(get("probes")), get("probe_time_s"), get("train_time_s")
    share = probe_s / max(train_s, 1e-9)
    return (f"{n} noise-scale measurements took {probe_s:.1f} s, {share:.0%} of the "
            f"{train_s:.1f} s training clock (off the clock, like evaluation)")


# --------------------------------------------------------------------------- the critical batch


def steps_rows_from_lesson02(saved: dict | None, profile: str | None = None) -> list[dict] | None:
    """Lesson 02's steps-to-target per batch (its fastest rule at each batch), or None when its
    result is missing, from another profile (smoke and full train on different data), or has
    fewer than 3 batches that reached the target."""
    if not saved or not saved.get("rows") or (profile and saved.get("profile") != profile):
        return None
    best: dict[int, int] = {}
    for r in saved["rows"]:
        if r.get("steps to target") is not None:
            b = r["batch size"]
            best[b] = min(best.get(b, r["steps to target"]), r["steps to target"])
    rows = [{"batch size": b, "steps to target": s} for b, s in sorted(best.items())]
    return rows if len(rows) >= 3 else None


def best_steps_rows(rows: list[dict]) -> list[dict]:
    """The fewest steps to target at each batch size, from sweep rows (runs that missed are left out)."""
    return steps_rows_from_lesson02({"rows": rows}) or [
        {"batch size": r["batch size"], "steps to target": r["steps to target"]} for r in rows
        if r.get("steps to target") is not None]


def critical_batch(rows: list[dict]) -> dict:
    """McCandlish et al. (2018, eq. 2.11): ``S = S_min (1 + B_crit / B)`` — steps fall like 1/B
    below ``B_crit`` and level off at ``S_min`` above it. Linear in ``1 / B``, so a least-squares
    line through ``(1/B, S)`` gives ``S_min`` (intercept) and ``B_crit = slope / intercept``.
    ``status``: "fit", "beyond range" (a fit whose ``B_crit`` lies above the largest batch
    measured: an extrapolation, the bend itself was not seen), "no bend" (the intercept is not
    positive: perfect scaling over the whole range) or "too few points"."""
    pts = [(r["batch size"], r["steps to target"]) for r in rows if r.get("steps to target")]
    out = {"points": pts, "b_crit": None, "s_min": None, "largest_batch": max((b for b, _ in pts), default=None)}
    if len(pts) < 3:
        return {**out, "status": "too few points"}
    xs, ys = [1.0 / b for b, _ in pts], [float(s) for _, s in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    intercept = my - slope * mx
    if intercept <= 0 or slope <= 0:
        return {**out, "status": "no bend"}
    b_crit = slope / intercept
    return {**out, "status": "fit" if b_crit <= out["largest_batch"] else "beyond range", "b_crit": b_crit,
            "s_min": intercept}


def noise_verdict(b_simple: float, fit: dict, factor: float = 3.0) -> str:
    """Does the noise scale predict the bend? McCandlish et al. find ``B_crit ~ B_noise`` within
    a small factor (B_simple equals B_noise when the Hessian is a multiple of the identity)."""
    largest = fit.get("largest_batch")
    if not math.isfinite(b_simple):
        return ("The estimate of |G|^2 was not positive at this point: at these two batch sizes the gradient "
                "is all noise as far as the repeats can tell. Raise NOISE_REPEATS or b_big and measure again.")
    if fit["status"] == "too few points":
        return (f"B_simple = {b_simple:,.0f}, but fewer than 3 batch sizes reached the target, so there is no "
                "measured bend to compare it with: run lesson 02 (or more batch sizes here) first.")
    if fit["status"] in ("no bend", "beyond range"):
        agrees = b_simple >= largest / factor
        fitted = (f" (the fit extrapolates to B_crit = {fit['b_crit']:,.0f}, far from any measured point)"
                  if fit["status"] == "beyond range" else "")
        return (f"Steps to target fell about in proportion to the batch up to the largest batch measured "
                f"({largest:,}): no bend yet, so the critical batch is above {largest:,}{fitted}. "
                f"B_simple = {b_simple:,.0f} "
                + ("is consistent with that." if agrees else
                   f"predicted a bend near {b_simple:,.0f}, which the curve does not show: here the noise scale "
                   "underestimates the critical batch."))
    b_crit = fit["b_crit"]
    ratio = b_simple / b_crit
    if 1 / factor <= ratio <= factor:
        return (f"The noise scale predicts the bend on this model: B_simple = {b_simple:,.0f} against a critical "
                f"batch of {b_crit:,.0f} fitted to the steps-to-target curve (ratio {ratio:.2f}, within the "
                f"factor {factor:g} McCandlish et al. report).")
    side = "above" if ratio > 1 else "below"
    return (f"The noise scale does not predict the bend here: B_simple = {b_simple:,.0f} is {max(ratio, 1 / ratio):.1f}x "
            f"{side} the critical batch of {b_crit:,.0f} fitted to the steps-to-target curve. Possible reasons: "
            "B_simple ignores the curvature (B_noise weights the noise by the Hessian), it was measured at one point "
            "of training, and a lr rule that is not tuned per batch bends the curve earlier than the noise does.")


def plot_noise_and_bend(result, fit: dict, ax_pair=None):
    """Left: B_simple during training with its error bars. Right: steps to target against the
    batch, the perfect-scaling line, the fitted ``S_min (1 + B_crit / B)`` and B_simple marked."""
    import matplotlib.pyplot as plt

    if ax_pair is None:
        fig, ax_pair = plt.subplots(1, 2, figsize=(11, 3.8))
    else:
        fig = ax_pair[0].figure
    ax1, ax2 = ax_pair
    ps = [p for p in result.probes if math.isfinite(p["b_simple"])]
    ax1.errorbar([p["epoch"] for p in ps], [p["b_simple"] for p in ps],
                 yerr=[p["stderr"] if math.isfinite(p["stderr"]) else 0 for p in ps], marker="o", capsize=3)
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("B_simple (examples)")
    ax1.set_title("the noise scale grows as the loss falls", fontsize=10)
    pts = fit["points"]
    at = b_simple_at_target(result)["b_simple"]
    if pts:
        bsz, steps = zip(*pts)
        ax2.loglog(bsz, steps, "o", label="measured")
        b0, s0 = pts[0]
        grid = [bsz[0] * (bsz[-1] / bsz[0]) ** (i / 40) for i in range(41)]
        ax2.loglog(grid, [s0 * b0 / b for b in grid], "--", color="gray", label="perfect scaling")
        if fit["status"] in ("fit", "beyond range"):
            ax2.loglog(grid, [fit["s_min"] * (1 + fit["b_crit"] / b) for b in grid], "-", label="S_min (1 + B_crit/B)")
            if fit["status"] == "fit":
                ax2.axvline(fit["b_crit"], color="C1", ls=":", label=f"B_crit {fit['b_crit']:,.0f}")
    if math.isfinite(at):
        ax2.axvline(at, color="C3", ls="-.", label=f"B_simple {at:,.0f}")
    ax2.set_xlabel("global batch (samples)")
    ax2.set_ylabel("steps to target")
    ax2.set_title("where the steps stop halving", fontsize=10)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- sharpness and the gap


def sharpness(model: torch.nn.Module, data, *, batch_size: int, iters: int, trace_samples: int = 0,
              seed: int = 0) -> dict:
    """The top Hessian eigenvalue (and, with ``trace_samples``, Hutchinson's trace) of NeuMF's
    training loss on one fixed batch of ``batch_size`` examples (the same batch for every model
    compared: ``seed``)."""
    batch = ncf_sampler(data, seed=seed)(batch_size)
    was_training = model.training
    model.eval()  # NeuMF has no dropout or BatchNorm; eval() states that the landscape is read, not trained
    top = bs.top_hessian_eigenvalue(model, ncf_loss, batch, iters=iters, tol=1e-3, seed=seed)
    trace = bs.hutchinson_trace(model, ncf_loss, batch, samples=trace_samples, seed=seed) if trace_samples else None
    with torch.no_grad():
        loss = float(ncf_loss(model, batch))
    model.train(was_training)
    return {"top_eigenvalue": top, "hessian_trace": trace, "train_loss": loss}


def sharpness_rows(runs: dict, measured: dict) -> list[dict]:
    """One row per run (``runs``: label -> TrainResult, ``measured``: label -> :func:`sharpness`)."""
    rows = []
    for label, r in runs.items():
        m = measured[label]
        rows.append({"run": label, "batch": r.config["global_batch_size"], "lr": r.config["peak_lr"],
                     "steps": r.steps, "epochs": round(r.epochs, 2), "reached": r.reached,
                     "top eigenvalue": m["top_eigenvalue"], "Hessian trace": m["hessian_trace"],
                     "train loss": m["train_loss"], "train HR@10": r.final_train_hr, "test HR@10": r.final_hr,
                     "gap": r.generalization_gap})
    return rows


def sharpness_table(rows: list[dict]) -> Table:
    cols = ["run", "batch", "lr", "steps", "epochs", "reached", "top eigenvalue", "Hessian trace", "train loss",
            "train HR@10", "test HR@10", "gap"]
    t = Table(cols, title="sharpness at the end of each run, next to its generalization gap")
    for r in rows:
        t.add(**{c: ("n/a" if r[c] is None else r[c]) for c in cols})
    return t


def sharpness_verdict(small: dict, large: dict, rel: float = 0.1, gap_points: float = 0.005) -> str:
    """Keskar et al. (2017): the large batch ends sharper *and* generalizes worse. Read from two
    rows of :func:`sharpness_rows`; says so when sharpness and gap do not move together."""
    ratio = large["top eigenvalue"] / small["top eigenvalue"] if small["top eigenvalue"] else math.inf
    sharper = "sharper" if ratio > 1 + rel else ("flatter" if ratio < 1 - rel else "about as sharp")
    if small["gap"] is None or large["gap"] is None:
        gap_move, dgap = "unknown", 0.0
    else:
        dgap = large["gap"] - small["gap"]
        gap_move = "wider" if dgap > gap_points else ("narrower" if dgap < -gap_points else "the same")
    both = (f"batch {large['batch']:,} ended {sharper} than batch {small['batch']:,} (top eigenvalue "
            f"{large['top eigenvalue']:.3g} vs {small['top eigenvalue']:.3g}, x{ratio:.2f})")
    if gap_move == "unknown":
        return both + "; the gap was not measured (evaluation off), so there is nothing to set it against."
    gap = f"its generalization gap was {gap_move} ({large['gap']:+.3f} vs {small['gap']:+.3f})"
    if sharper == "sharper" and gap_move == "wider":
        return f"As Keskar et al. (2017) report: {both}, and {gap}."
    if sharper == "flatter" and gap_move == "narrower":
        return f"Both moved the other way from Keskar et al. (2017): {both}, and {gap}; they moved together."
    return (f"Sharpness and the gap did not move together here: {both}, while {gap}. One eigenvalue on one "
            "batch is a narrow view of a minimum (and it changes with a reparametrization, Dinh et al. 2017), "
            "and runs stopped at a target may not be at a minimum yet: this is a measurement, not a law.")


def landscape(model: torch.nn.Module, data, theta_small, theta_large, *, batch_size: int, points: int,
              seed: int = 0) -> dict:
    """The loss on one fixed batch along the line from the small-batch solution (0) to the
    large-batch one (1), a quarter beyond each end, and along one filter-normalized random
    direction around each (the same direction's seed for both)."""
    batch = ncf_sampler(data, seed=seed)(batch_size)
    line = [-0.25 + 1.5 * i / (points - 1) for i in range(points)]
    around = [-1.0 + 2.0 * i / (points - 1) for i in range(points)]
    return {"line_alphas": line,
            "line": bs.interpolation_slice(model, ncf_loss, batch, theta_small, theta_large, line),
            "around_alphas": around,
            "around_small": bs.random_direction_slice(model, ncf_loss, batch, around, theta=theta_small, seed=seed),
            "around_large": bs.random_direction_slice(model, ncf_loss, batch, around, theta=theta_large, seed=seed)}


def plot_landscape(slices: dict, small_label: str, large_label: str):
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    ax1.plot(slices["line_alphas"], slices["line"], "-o", ms=3)
    for x, lab in ((0, small_label), (1, large_label)):
        ax1.axvline(x, color="gray", ls=":")
        ax1.annotate(lab, (x, max(slices["line"])), fontsize=8, ha="center")
    ax1.set_xlabel("alpha: (1 - alpha) small-batch + alpha large-batch")
    ax1.set_ylabel("training loss (one fixed batch)")
    ax1.set_title("between the two solutions", fontsize=10)
    ax2.plot(slices["around_alphas"], slices["around_small"], label=small_label)
    ax2.plot(slices["around_alphas"], slices["around_large"], label=large_label)
    ax2.set_xlabel("step along a filter-normalized random direction")
    ax2.set_title("around each solution (Li et al. 2018)", fontsize=10)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- growing the batch


def growth_table(runs: dict) -> Table:
    """(a) lr decay at a fixed batch vs (b) the batch grown at the same milestones."""
    t = Table(["schedule", "batches", "lrs", "steps", "time to target (s)", "steps to target", "final HR@10",
               "train time (s)"], title="the same epochs: decay the lr, or grow the batch (Smith et al. 2017)")
    for label, r in runs.items():
        c = r.config
        epochs = range(int(math.ceil(c["max_epochs"])))
        bsz = sorted({_batch_at(c, e) for e in epochs})
        lrs = sorted({c["peak_lr"] * _lr_factor_at(c, e) for e in epochs}, reverse=True)
        t.add(**{"schedule": label, "batches": " -> ".join(f"{b:,}" for b in bsz),
                 "lrs": " -> ".join(f"{x:.3g}" for x in lrs), "steps": r.steps,
                 "time to target (s)": r.time_to_target_s if r.reached else "not reached",
                 "steps to target": r.steps_to_target if r.reached else "not reached",
                 "final HR@10": r.final_hr, "train time (s)": r.train_time_s})
    return t


def _passed(c: dict, epoch: int) -> int:
    return sum(m <= epoch for m in c.get("milestones", ()))


def _batch_at(c: dict, epoch: int) -> int:
    if c.get("at_milestone") != "grow_batch":
        return c["global_batch_size"]
    return int(round(c["global_batch_size"] * c["milestone_factor"] ** _passed(c, epoch)))


def _lr_factor_at(c: dict, epoch: int) -> float:
    return c["milestone_factor"] ** -_passed(c, epoch) if c.get("at_milestone") == "divide_lr" else 1.0


def growth_verdict(decay, grow, hr_tolerance: float = 0.01) -> str:
    """Did growing the batch match the lr decay's accuracy in fewer steps (Smith et al. 2017)?"""
    fewer = grow.steps < decay.steps
    dhr = (grow.final_hr or 0.0) - (decay.final_hr or 0.0)
    same = abs(dhr) <= hr_tolerance
    head = (f"Growing the batch took {grow.steps:,} steps against {decay.steps:,} for the lr decay "
            f"({grow.steps / decay.steps:.0%}), final HR@10 {grow.final_hr:.4f} vs {decay.final_hr:.4f} ({dhr:+.4f})")
    if grow.reached and decay.reached:
        head += f"; time to target {grow.time_to_target_s:.1f} s vs {decay.time_to_target_s:.1f} s"
    if fewer and same:
        return head + ": the same accuracy in fewer, larger steps, as Smith et al. (2017) found."
    if fewer and dhr > hr_tolerance:
        return head + ": fewer steps and a better final HR here."
    if fewer:
        return (head + f": fewer steps, but the accuracy fell by more than {hr_tolerance}: the larger batches are "
                "past what this model's noise scale allows, or the equivalence does not hold for this optimizer.")
    return head + ": no saving in steps (check the milestones: the batch grows only from the first one on)."


# --------------------------------------------------------------------------- BatchNorm per rank


def bn_spec(profile: str) -> dict:
    """What lesson 11's BatchNorm launch runs (smoke: two batches, few steps)."""
    from ..config import pick

    return {"per_rank_batches": pick(profile, full=[4, 16, 64, 256], smoke=[4, 32]),
            "steps": pick(profile, full=100, smoke=10), "lr": 1e-2, "hidden": 32, "in_features": 8,
            "n_train": pick(profile, full=8192, smoke=1024), "n_test": pick(profile, full=4096, smoke=512), "seed": 0}


def bn_table(rows: list[dict]) -> Table:
    """Test accuracy and time per step, per variant (rows) and per-rank batch (columns)."""
    batches = sorted({r["per_rank_batch"] for r in rows})
    cols = ["variant"] + [f"b={b}/rank: acc" for b in batches] + [f"b={b}/rank: ms/step" for b in batches]
    t = Table(cols, title=f"BatchNorm with few samples per rank ({_ranks(rows)} ranks): test accuracy and time per step")
    for v in [v for v in BN_VARIANTS if any(r["variant"] == v for r in rows)]:
        row = {"variant": v}
        for r in rows:
            if r["variant"] == v:
                row[f"b={r['per_rank_batch']}/rank: acc"] = round(r["test_accuracy"], 3)
                row[f"b={r['per_rank_batch']}/rank: ms/step"] = round(r["step_ms"], 1)
        t.add(**row)
    return t


def _ranks(rows):
    r = rows[0]
    return r["global_batch"] // r["per_rank_batch"]


def plot_bn(rows: list[dict]):
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    for v in BN_VARIANTS:
        rs = sorted((r for r in rows if r["variant"] == v), key=lambda r: r["per_rank_batch"])
        if rs:
            ax1.semilogx([r["per_rank_batch"] for r in rs], [r["test_accuracy"] for r in rs], "-o", label=v, base=2)
            ax2.semilogx([r["per_rank_batch"] for r in rs], [r["step_ms"] for r in rs], "-o", label=v, base=2)
    ax1.set_xlabel("samples per rank")
    ax1.set_ylabel("test accuracy")
    ax2.set_xlabel("samples per rank")
    ax2.set_ylabel("ms per step")
    ax1.legend(fontsize=8)
    fig.tight_layout()
    return fig


def bn_verdict(rows: list[dict], margin: float = 0.01) -> str:
    """At the smallest per-rank batch: which variant is most accurate, by how much local BN trails
    it, and what synchronization cost per step at the largest batch."""
    small = min(r["per_rank_batch"] for r in rows)
    large = max(r["per_rank_batch"] for r in rows)
    at = {r["variant"]: r for r in rows if r["per_rank_batch"] == small}
    best = max(at.values(), key=lambda r: r["test_accuracy"])
    local = at.get("local BN")
    out = [f"At {small} samples per rank the most accurate variant was {best['variant']} "
           f"({best['test_accuracy']:.3f})"]
    if local is not None and best["variant"] != "local BN":
        gap = best["test_accuracy"] - local["test_accuracy"]
        out.append(f"; local BatchNorm reached {local['test_accuracy']:.3f}"
                   + (f", {gap:.3f} behind: statistics of a few samples per rank hurt here."
                      if gap > margin else ", within the noise of this measurement: few samples per rank did not hurt here."))
    else:
        out.append("; local BatchNorm was not beaten at this batch size.")
    big = {r["variant"]: r for r in rows if r["per_rank_batch"] == large}
    if "synchronized BN" in big and "local BN" in big:
        extra = big["synchronized BN"]["step_ms"] / max(big["local BN"]["step_ms"], 1e-9)
        out.append(f" Synchronizing the statistics cost x{extra:.1f} the local step time at {large} per rank "
                   "(three extra all-reduces per BatchNorm layer per step).")
    return "".join(out)
