"""What lesson 05 measures about mixed precision, and its readings.

* gradients on fp16's number line: the fp32 parameter gradients (:func:`gradient_log2_magnitudes`) and
  the activation gradients an fp16 autocast backward actually stores (:func:`autocast_gradients`),
  with what fp16 flushed to zero measured against fp32 on the same weights;
* fp16 with no loss scaling, a static scale and the dynamic one, trained for the same steps
  (:func:`loss_scaling_runs`), the static scale chosen from the measured gradients
  (:func:`static_loss_scale`);
* LARS's trust ratio with the gradients unscaled first (what :class:`course_lib.precision.Precision`
  does) and on loss-scaled gradients (the apex#1030 pitfall): :func:`lars_unscale_rows`;
* throughput per precision in steady state, repeated, with the step's phases
  (:func:`precision_throughput`), and why it is what it is on this hardware (:func:`speedup_reading`).

The autocast and loss-scaling machinery itself is :class:`course_lib.precision.Precision`,
used by the training engine.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..diagrams import fp16_fractions
from ..hardware import default_device, sixteen_bit_units
from ..optim import lars_trust_ratio
from ..metrics import hr_standard_error, paired_speedup
from ..precision import Precision, fp16_fates
from ..tables import Table
from ..train import mlm
from ..train.engine import RunHooks
from ..train.ncf import make_batches, make_optimizer, steps_per_epoch, throughput, train_to_target


# --------------------------------------------------------------------------- gradients on fp16's number line


def gradient_log2_magnitudes(model: torch.nn.Module, data, cfg, *, batches: int = 4, seed: int = 1) -> dict:
    """log2 |g| of every nonzero fp32 gradient element of ``model`` over a few training batches (lesson 05).

    Returns ``{"log2": 1-D numpy array, "zero_in_fp16": fraction of the nonzero gradients that
    become 0 when cast to fp16, "overflow_in_fp16": the fraction that becomes inf, "zero_in_fp16_scaled" and
    "overflow_in_fp16_scaled": {scale: fraction}}``; the scales are
    2^8, 2^16 (GradScaler's start) and 2^24, and a scaled value counts as lost when
    ``(g * scale).half()`` is 0 (underflow), or as overflow when it is inf.
    """
    was_training = model.training
    model.train()
    chunks = []
    for users, items, labels in _probe_batches(model, data, cfg, batches, seed):
        model.zero_grad(set_to_none=True)
        F.binary_cross_entropy_with_logits(model(users, items), labels).backward()
        chunks += [p.grad.detach().flatten().float() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    g = torch.cat(chunks).abs()
    g = g[g > 0]
    fates = fp16_fates(g)
    out = {"log2": torch.log2(g).cpu().numpy(), "count": int(g.numel()), "zero_in_fp16": fates["zero"],
           "overflow_in_fp16": fates["inf"]}
    out["zero_in_fp16_scaled"] = {}
    out["overflow_in_fp16_scaled"] = {}
    for scale in (2.0 ** 8, 2.0 ** 16, 2.0 ** 24):
        fates = fp16_fates(g * scale)
        out["zero_in_fp16_scaled"][scale] = fates["zero"]
        out["overflow_in_fp16_scaled"][scale] = fates["inf"]
    out["log2_scaled"] = (out["log2"] + 16.0).astype(np.float64)  # the same values times 2^16
    return out


def _elements(fraction: float, count: int) -> str:
    """``fraction`` of ``count`` elements as a count, with its share where a share at 0.1% shows it (read f12c 05-H2,
    twelfth full run: "2^24 ... overflow (inf) 0.0%" where a few dozen of 3,214,521 elements passed 65504)."""
    n = round(fraction * count)
    if n == 0:
        return "0"
    share = n / count
    return f"{n:,} ({share:.1%})" if share >= 0.001 else f"{n:,} (<0.1%)"


def fp16_underflow_table(mags: dict) -> Table:
    """How many of the (nonzero) gradient elements fp16 loses, without and with loss scaling: element counts (read
    f12c 05-H2, twelfth full run: printed at 0.1%, "2^24 ... overflow (inf) 0.0%" hid a few dozen overflowing
    elements, and the lesson's rule is that one overflowing element makes the step inf and skips it)."""
    count = mags["count"]
    t = Table(["loss scale", "lost to underflow (become 0)", "overflow (inf)"],
              title=f"{count:,} nonzero gradient elements cast to fp16: elements (share)")
    rows = [("1 (no scaling)", mags["zero_in_fp16"], mags.get("overflow_in_fp16", 0.0))]
    rows += [(f"2^{int(math.log2(s))}", z, mags["overflow_in_fp16_scaled"][s])
             for s, z in mags["zero_in_fp16_scaled"].items()]
    for scale, zero, over in rows:
        t.add(**{"loss scale": scale, "lost to underflow (become 0)": _elements(zero, count),
                 "overflow (inf)": _elements(over, count) + (": skips the step" if round(over * count) else "")})
    return t


def _probe_batches(model: torch.nn.Module, data, cfg, batches: int, seed: int) -> list:
    """The first ``batches`` training batches of ``cfg`` (into the next epoch when one has fewer: a carried
    large batch on a small set, issue 36)."""
    device = next(model.parameters()).device
    source, out = make_batches(data.to(device), cfg.replace(seed=seed)), []
    while len(out) < batches:
        out += list(itertools.islice(iter(source), batches - len(out)))
    return out


def _backward_with_hooks(model: torch.nn.Module, batch, *, fp16: bool, scale: float):
    """One backward of NeuMF's mean BCE on ``batch`` (times ``scale``), under fp16 autocast or in fp32.
    Returns ``(parameter gradients, {Linear module name: the gradient of its output, in the dtype
    backward produced it})``: a tensor hook on each Linear's output sees what flows between layers."""
    users, items, labels = batch
    device = next(model.parameters()).device
    seen, handles = {}, []

    def watch(name):
        def forward_hook(module, args, out):
            out.register_hook(lambda g: seen.__setitem__(name, g.detach().clone()))
        return forward_hook

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            handles.append(module.register_forward_hook(watch(name)))
    model.zero_grad(set_to_none=True)
    try:
        autocast = torch.autocast(device.type, torch.float16) if fp16 else torch.autocast(device.type, enabled=False)
        with autocast:
            logits = model(users, items)
        # as the engine's loss (train.ncf.bce_sum / B): logits in fp32, the mean over the batch
        loss = F.binary_cross_entropy_with_logits(logits.float(), labels.float())
        (loss * scale).backward()
    finally:
        for h in handles:
            h.remove()
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads, seen


def _fates_against(reference: list[torch.Tensor], run: list[torch.Tensor]) -> dict:
    """Of the elements nonzero in ``reference`` (fp32): the fraction ``run`` (an fp16 backward) made
    exactly 0, and the fraction it overflowed (inf/nan)."""
    nonzero = zero = overflow = 0
    for ref, got in zip(reference, run):
        nz = ref != 0
        nonzero += int(nz.sum())
        got = got.float()
        zero += int((nz & (got == 0)).sum())
        overflow += int((nz & ~torch.isfinite(got)).sum())
    return {"count": nonzero, "zero": zero / nonzero if nonzero else 0.0,
            "overflow": overflow / nonzero if nonzero else 0.0}


REFERENCE_SCALE = 2.0 ** 16  # GradScaler's start: the scale at which "zero anyway" is measured


def autocast_gradients(model: torch.nn.Module, data, cfg, *, scales=(1.0, REFERENCE_SCALE), batches: int = 2,
                       seed: int = 1) -> dict:
    """The gradients an fp16 autocast backward produces, against fp32 on the same weights and batches (lesson 05).

    Per batch, one backward in fp32 and one under ``torch.autocast(float16)`` per loss scale in
    ``scales``. Tensor hooks on every ``nn.Linear``'s output collect the **activation gradients** (what
    flows between layers, in the dtype backward stored them: float16 under autocast); the parameter
    gradients are read after each pass.

    Returns ``{"scales", "batches", "batch_size", "dtypes": {layer: dtype}, "count": {kind: elements
    nonzero in fp32}, "zero": {scale: {kind: fraction}}, "overflow": {scale: {kind: fraction}},
    "underflow": {scale: {kind: fraction}}, "log2"}`` for kind "activation" and "parameter". ``zero`` is
    the fraction of the fp32-nonzero elements the fp16 backward made exactly 0 (measured, not predicted
    from a histogram). Not all of it is underflow: a 16-bit forward rounds a few pre-activations across
    zero, and NeuMF's ReLUs then zero their gradients at any scale; ``underflow`` is what loss scaling
    removes, ``zero[scale] - zero[largest scale]``. ``log2``: log2 of the true magnitude (fp16 value /
    scale) of every nonzero activation-gradient element of the pass at the largest scale, for fp16's
    number line.
    """
    scales = tuple(sorted({float(x) for x in scales}))
    top = scales[-1]
    was_training = model.training
    model.train()
    ref = {"activation": [], "parameter": []}
    run = {sc: {"activation": [], "parameter": []} for sc in scales}
    log2, dtypes = [], {}
    for batch in _probe_batches(model, data, cfg, batches, seed):
        g32, a32 = _backward_with_hooks(model, batch, fp16=False, scale=1.0)
        ref["parameter"] += g32
        ref["activation"] += [a32[n] for n in a32]
        for sc in scales:
            g16, a16 = _backward_with_hooks(model, batch, fp16=True, scale=sc)
            run[sc]["parameter"] += g16
            run[sc]["activation"] += [a16[n] for n in a32]
            if sc == top:
                for name in a32:
                    dtypes[name] = str(a16[name].dtype).replace("torch.", "")
                    v = a16[name].float().abs()
                    v = v[(v > 0) & torch.isfinite(v)]
                    log2.append((torch.log2(v.double()) - math.log2(sc)).cpu().numpy())
    model.train(was_training)
    fates = {sc: {k: _fates_against(ref[k], run[sc][k]) for k in ref} for sc in scales}
    kinds = ("activation", "parameter")
    return {"scales": scales, "batches": batches, "batch_size": cfg.global_batch_size, "dtypes": dtypes,
            "count": {k: fates[top][k]["count"] for k in kinds},
            "zero": {sc: {k: fates[sc][k]["zero"] for k in kinds} for sc in scales},
            "overflow": {sc: {k: fates[sc][k]["overflow"] for k in kinds} for sc in scales},
            "underflow": {sc: {k: max(0.0, fates[sc][k]["zero"] - fates[top][k]["zero"]) for k in kinds}
                          for sc in scales},
            "log2": np.concatenate(log2) if log2 else np.zeros(0)}


def _loss_scale_name(x: float) -> str:
    return "no loss scaling" if x == 1 else f"the loss scaled by 2^{math.log2(x):.0f}"


def activation_rows(mags: dict, grads: dict) -> list[dict]:
    """The numbers :func:`activation_reading` quotes, one row per kind of gradient, formatted at the precision it
    quotes them (lesson 05): measured zeros at the two scales of ``grads`` (:func:`autocast_gradients`) and
    their difference (underflow), and what the histograms predict at the smaller scale (the activation
    gradients' of ``grads``, the fp32 parameter gradients' of ``mags``, :func:`gradient_log2_magnitudes`)."""
    lo, hi = grads["scales"][0], grads["scales"][-1]
    z, u = grads["zero"], grads["underflow"][lo]
    rows = []
    for kind, log2, zero in (("activation", grads["log2"], None), ("parameter", mags["log2"], mags["zero_in_fp16"])):
        predicted = fp16_fractions(log2, lo)
        median = float(np.median(log2)) if np.size(log2) else math.nan
        rows.append({"gradients": kind, "elements (nonzero in fp32)": f"{grads['count'][kind]:,}",
                     f"zero at {lo:g} (measured)": f"{z[lo][kind]:.3%}",
                     f"zero at 2^{math.log2(hi):.0f} (measured)": f"{z[hi][kind]:.3%}",
                     "underflow (the difference)": f"{u[kind]:.3%}",
                     f"predicted zero at {lo:g}": f"{predicted['zero'] if zero is None else zero:.2%}",
                     f"predicted subnormal at {lo:g}": f"{predicted['subnormal']:.1%}",
                     "median log2|g|": f"{median:.1f}", "_predicted_zero": predicted["zero"] if zero is None else zero})
    return rows


def activation_table(mags: dict, grads: dict) -> Table:
    """The rows :func:`activation_reading` reads (#37 item 1: it quotes these cells)."""
    rows = activation_rows(mags, grads)
    lo, hi = grads["scales"][0], grads["scales"][-1]
    t = Table([c for c in rows[0] if not c.startswith("_")],
              title=f"Gradients of {grads['batches']} batches of {grads['batch_size']} under fp16 autocast, loss "
                    f"scale {lo:g} and 2^{math.log2(hi):.0f}: zeros measured against fp32 on the same weights, "
                    "and predicted from the histograms")
    for r in rows:
        t.add(**{c: v for c, v in r.items() if not c.startswith("_")})
    return t


def activation_reading(mags: dict, grads: dict) -> str:
    """Which gradients loss scaling protects, read from the two measurements (lesson 05): ``mags`` from
    :func:`gradient_log2_magnitudes` (fp32 parameter gradients), ``grads`` from :func:`autocast_gradients`
    (measured at scale 1 and at a larger one). Its numbers are the cells of :func:`activation_table`."""
    lo, hi = grads["scales"][0], grads["scales"][-1]
    kinds = " and ".join(sorted(set(grads["dtypes"].values())))
    act, par = activation_rows(mags, grads)
    z_lo, z_hi = f"zero at {lo:g} (measured)", f"zero at 2^{math.log2(hi):.0f} (measured)"
    pz, ps = f"predicted zero at {lo:g}", f"predicted subnormal at {lo:g}"
    text = (f"During an fp16 autocast backward the gradients between NeuMF's layers were {kinds} tensors "
            f"({act['elements (nonzero in fp32)']} elements nonzero in fp32, {grads['batches']} batches of "
            f"{grads['batch_size']}). Measured against fp32 on the same weights, fp16 made {act[z_lo]} "
            f"of them exactly zero with {_loss_scale_name(lo)} and {act[z_hi]} with {_loss_scale_name(hi)}: the "
            f"difference, {act['underflow (the difference)']}, is underflow; what stays zero at "
            f"2^{math.log2(hi):.0f} is not (a 16-bit forward rounds a few pre-activations across zero, and a ReLU "
            f"zeroes their gradient). The parameter gradients came out {par[z_lo]} and {par[z_hi]} zero. "
            # read r7b 05-3: "below fp16's smallest subnormal" for the fraction the cast flushes, at or below half of it
            f"The histograms predict, with {_loss_scale_name(lo)}, {act[pz]} of the activation gradients flushed to "
            f"zero (at most half fp16's smallest subnormal) and {act[ps]} among its subnormals (fewer significant "
            f"bits; median 2^{act['median log2|g|']}), and {par[pz]} of the parameter gradients flushed (median "
            f"2^{par['median log2|g|']}). Loss scaling protects the activation gradients: they are what backward "
            "stores in fp16. The parameter gradients end in fp32 beside the fp32 weights (an embedding row's "
            "gradient adds up fp16 activation gradients in fp32), so their histogram is a proxy, and here it ")
    gap = par["_predicted_zero"] - act["_predicted_zero"]
    if abs(gap) < 0.001:
        return text + "predicts about the same loss as the activation gradients'."
    return text + ("overstates" if gap > 0 else "understates") + " what fp16 would lose."


def start_gradient_log2(data, cfg, *, batches: int = 4, device=None) -> np.ndarray:
    """log2 |g| of the parameter gradients of a freshly initialized NeuMF (seeded with ``cfg.seed``), the
    weights the loss-scaling runs start from (lesson 05). #37 (full run 2026-12-01): a static scale chosen
    only from a model trained a quarter epoch (2^19-2^22 lossless) overflowed on 303 of 303 steps, because
    the gradients at initialization are the largest a run meets (2^-1.7 here against 2^-4 after training);
    with every step skipped the weights never leave initialization. A few batches: about a second on a CPU."""
    from ..train.ncf import build_model

    device = torch.device(device) if device is not None else default_device()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = build_model(data, cfg).to(device)
    return gradient_log2_magnitudes(model, data, cfg, batches=batches)["log2"]


def lossless_scale_exponents(*log2_arrays) -> tuple[int, int] | None:
    """The powers of two ``(lo, hi)`` such that every scale 2^lo..2^hi moves all the given magnitudes
    (log2 |g|) into fp16 with none flushed to zero and none overflowing (subnormals allowed); None when
    they span more than fp16 can hold. Decided by fp16's own cast of the smallest and largest value."""
    v = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in log2_arrays]) if log2_arrays else np.zeros(0)
    v = v[np.isfinite(v)]
    if not v.size:
        return None
    ends = torch.tensor([2.0 ** v.min(), 2.0 ** v.max()], dtype=torch.float64)

    def lossless(k):
        fates = fp16_fates(ends * 2.0 ** k)
        return fates["zero"] == 0 and fates["inf"] == 0

    ok = [k for k in range(-80, 81) if lossless(k)]
    return (ok[0], ok[-1]) if ok else None


def static_loss_scale(*log2_arrays) -> float:
    """A static loss scale chosen from measured gradients (lesson 05): the power of two in the middle of
    :func:`lossless_scale_exponents` (as far from flushing the smallest as from overflowing the largest);
    when no scale loses nothing, of the scales that overflow none, the one that flushes the fewest elements.
    One overflowing element makes the step inf and skips it, so overflow is never traded for underflow: the
    full run of 2026-12-01 (#37) picked 2^20 by counting elements alike, and it skipped 303 of 303 steps."""
    span = lossless_scale_exponents(*log2_arrays)
    if span is not None:
        return 2.0 ** ((span[0] + span[1]) // 2)
    v = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in log2_arrays])
    flushed = {}
    for k in range(-16, 48):
        fates = fp16_fractions(v, 2.0 ** k)
        if fates["inf"] == 0:
            flushed[k] = fates["zero"]
    if not flushed:  # every scale from 2^-16 overflows something: the smallest tried
        return 2.0 ** -16
    return 2.0 ** min(flushed, key=lambda k: (flushed[k], abs(k - 16)))  # ties: nearest GradScaler's 2^16


# --------------------------------------------------------------------------- fp16 with no, static, dynamic scaling


SCALING_RUNS = (("fp32", "fp32", "none"), ("fp16, no loss scaling", "fp16", "none"),
                ("fp16, static scale", "fp16", "static"), ("fp16, dynamic scale", "fp16", "dynamic"))


def loss_scaling_runs(data, cfg, *, steps: int, static_scale: float, device=None, probe_batches: int = 2) -> list[dict]:
    """The same setting for ``steps`` steps in fp32 and in fp16 with no loss scaling, a static scale
    ``static_scale`` and the dynamic one (lesson 05). Each run evaluates HR@10 halfway and at the end;
    at the end its model is probed by :func:`autocast_gradients` at the run's own final scale (1 without
    scaling) and at 2^16: ``activation grads zero`` is what that run's fp16 backward made exactly zero,
    ``... underflow`` the part of it loss scaling removes (measured on the run's own weights): its zeros less those
    at 2^16, so None for a run whose scale is 2^16 or more, where no larger scale was probed and the difference
    would be zero by construction (read r8b 05-2, eighth full run: "0.000% underflow" for the static 2^17 and the
    dynamic 2^16 runs, each measured against itself). One dict per run."""
    device = torch.device(device) if device is not None else default_device()
    epochs = steps / steps_per_epoch(data, cfg)
    rows = []
    for label, precision, scaling in SCALING_RUNS:
        c = cfg.replace(precision=precision, loss_scaling=scaling, stop_at_target=False, max_steps=steps,
                        max_epochs=max(cfg.max_epochs, epochs), eval_every_epochs=epochs / 2,
                        dense_eval_margin=0.0,  # a fixed number of steps: no steps to target to resolve
                        loss_scale=static_scale if scaling == "static" else cfg.loss_scale)
        if scaling == "static":
            label = f"fp16, static scale 2^{math.log2(static_scale):.0f}"
        r = train_to_target(data, c, device=device, progress="none", label=label, hooks=RunHooks(keep_model=True))
        scale = r.precision["loss_scale"]
        probe = (autocast_gradients(r.model, data, cfg, scales=(scale, REFERENCE_SCALE), batches=probe_batches)
                 if precision == "fp16" else None)
        del r.model
        measured = lambda table, kind: table[scale][kind] if probe else None
        separated = probe is not None and scale < REFERENCE_SCALE  # a larger scale to take the difference against
        rows.append({"run": label, "precision": precision, "loss scaling": scaling,
                     "loss scale at the end": scale if precision == "fp16" else None,
                     "skipped steps": r.precision["skipped_steps"], "steps": r.steps,
                     "activation grads zero": measured(probe and probe["zero"], "activation"),
                     "activation grads underflow": (measured(probe["underflow"], "activation") if separated
                                                    else None),
                     "parameter grads zero": measured(probe and probe["zero"], "parameter"),
                     "train loss": r.curve["loss"][-1], "HR@10": r.final_hr, "diverged": r.diverged})
    return rows


def loss_scaling_table(rows: list[dict]) -> Table:
    t = Table(["run", "loss scale at the end", "skipped steps", "activation grads zero", "of which underflow",
               "parameter grads zero", "train loss", "HR@10"],
              title=f"{rows[0]['steps']} steps each; zero: nonzero in fp32, exactly 0 in the run's fp16 backward; "
                    "underflow: the part loss scaling removes (measured at the end, on each run's weights)")
    pct = lambda v: None if v is None else f"{v:.3%}"
    for r in rows:
        t.add(run=r["run"] + (" (diverged)" if r["diverged"] else ""),
              **{"loss scale at the end": r["loss scale at the end"], "skipped steps": r["skipped steps"],
                 "activation grads zero": pct(r["activation grads zero"]),
                 "of which underflow": (pct(r["activation grads underflow"]) if r["activation grads underflow"]
                                        is not None or r["precision"] != "fp16" else
                                        f"— (at 2^{math.log2(r['loss scale at the end']):.0f}: not separated)"),
                 "parameter grads zero": pct(r["parameter grads zero"]), "train loss": r["train loss"],
                 "HR@10": r["HR@10"]})
    return t


def loss_scaling_reading(rows: list[dict], users: int) -> str:
    """What no / static / dynamic loss scaling did, read from :func:`loss_scaling_runs` (lesson 05). A
    difference in HR@10 within twice the evaluation's standard error is "no measurable difference"."""
    by = {r["loss scaling"] if r["precision"] == "fp16" else "fp32": r for r in rows}
    ref, none, stat, dyn = by["fp32"], by["none"], by["static"], by["dynamic"]
    tol = 2 * hr_standard_error(ref["HR@10"], users)
    steps = ref["steps"]
    ref_scale = f"2^{math.log2(REFERENCE_SCALE):.0f}"

    def pct(r):
        if r["activation grads underflow"] is None:  # its scale is at least the reference: nothing to subtract
            return (f"{r['activation grads zero']:.3%} zero (no underflow separated: its scale is at least "
                    f"{ref_scale}, the scale the underflow is measured against)")
        return f"{r['activation grads zero']:.3%} zero ({r['activation grads underflow']:.3%} underflow)"
    text = (f"Measured at the end of each run (its fp16 backward against fp32, same weights), of the activation-"
            f"gradient elements nonzero in fp32: without loss scaling {pct(none)}; with the static scale "
            f"2^{math.log2(stat['loss scale at the end']):.0f}, {pct(stat)}; with the dynamic one (at "
            f"2^{math.log2(dyn['loss scale at the end']):.0f} by the end), {pct(dyn)}. The parameter gradients came "
            f"out {none['parameter grads zero']:.3%}, {stat['parameter grads zero']:.3%} and "
            f"{dyn['parameter grads zero']:.3%} zero. Overflow skipped {stat['skipped steps']} of {steps} steps "
            f"with the static scale and {dyn['skipped steps']} with the dynamic one. After {steps} steps HR@10 was "
            f"{none['HR@10']:.3f} unscaled, {stat['HR@10']:.3f} static, {dyn['HR@10']:.3f} dynamic and "
            f"{ref['HR@10']:.3f} in fp32. ")
    if none["diverged"]:
        return text + "fp16 without loss scaling diverged here: loss scaling is what makes fp16 train this setting."
    noise = (f"twice the evaluation's standard error over its {users:,} users ({tol:.3f})")
    # #37 (full run 2026-12-01): a scale that overflowed at most steps skipped most updates; its HR@10 is then
    # a model that barely trained, whatever rounding does: say so before any gap is read as rounding or underflow
    skipped = {k: by[k]["skipped steps"] for k in ("static", "dynamic") if (by[k]["skipped steps"] or 0) > steps / 2}
    if skipped:
        k = next(iter(skipped))
        gap = by[k]["HR@10"] - ref["HR@10"]
        return text + (f"The {k} scale overflowed on {skipped[k]} of {steps} steps and each of them was skipped, so "
                       f"that run {'never updated its weights' if skipped[k] == steps else 'barely trained'}: its "
                       f"HR@10 ({by[k]['HR@10']:.3f}, {gap:+.3f} against fp32) is an overflow, not rounding and not "
                       "underflow. A static scale must fit the gradients the run starts with, the largest ones.")
    gaps = {k: by[k]["HR@10"] - ref["HR@10"] for k in ("none", "static", "dynamic")}
    if all(abs(g) <= tol for g in gaps.values()):
        verdict = f"Every run is within {noise} of fp32: no measurable difference in training. "
        if none["activation grads underflow"] < 0.01:
            verdict += (f"NeuMF's gradients mostly survive fp16 unscaled in this setting (underflow took "
                        f"{none['activation grads underflow']:.3%} of the activation gradients): here loss "
                        "scaling is insurance, not a rescue.")
        else:
            verdict += (f"Underflow took {none['activation grads underflow']:.1%} of the activation gradients "
                        f"without scaling, yet in {steps} steps that did not measurably change the outcome.")
        return text + verdict
    if gaps["none"] < -tol and abs(gaps["dynamic"]) <= tol:
        return text + (f"Without scaling HR@10 fell {-gaps['none']:.3f} below fp32, more than {noise}, while the "
                       "dynamic scale kept it within: loss scaling is what makes fp16 train this setting here.")
    worst = min(gaps, key=gaps.get)
    return text + (f"The largest gap to fp32 is {gaps[worst]:+.3f} ({worst} scaling), beyond {noise}; "
                   + ("no scaling did not fare worst here: a gap this size in a short run can also be the "
                      "rounding of 16-bit arithmetic taking another path, so run more steps or seeds before "
                      "reading it as underflow." if worst != "none" else
                      "the unscaled run fared worst, as its flushed gradients predict."))


def scaling_record(grads: dict, rows: list[dict], speed: "PrecisionSpeed", static_scale: float) -> dict:
    """Lesson 05's loss-scaling and speed measurements as flat scalars, for its saved result (and the
    FIGURE lines of ``course_lib.summary``)."""
    lo, hi = grads["scales"][0], grads["scales"][-1]
    rec = {"static_scale": static_scale, "steps": rows[0]["steps"], "speed_spread": speed.spread,
           "activation_grads_zero_unscaled": grads["zero"][lo]["activation"],
           "activation_grads_zero_2_16": grads["zero"][hi]["activation"],
           "activation_grads_underflow_unscaled": grads["underflow"][lo]["activation"]}
    for r in rows:
        name = r["loss scaling"] if r["precision"] == "fp16" else "fp32"
        rec[f"{name}_hr"] = r["HR@10"]
        rec[f"{name}_diverged"] = r["diverged"]
        if r["precision"] == "fp16":
            rec[f"{name}_skipped_steps"] = r["skipped steps"]
            rec[f"{name}_activation_zero"] = r["activation grads zero"]
            rec[f"{name}_activation_underflow"] = r["activation grads underflow"]
            rec[f"{name}_parameter_zero"] = r["parameter grads zero"]
    rec.update({f"{m}_vs_fp32": speed.ratio(m) for m in speed if m != "fp32"})
    return rec


# --------------------------------------------------------------------------- unscale before LARS


def lars_unscale_rows(model: torch.nn.Module, data, cfg, *, scale: float = 2.0 ** 16, seed: int = 1) -> list[dict]:
    """LARS's per-layer trust ratio on one batch three ways (lesson 05): in fp32 with no scaling; through
    :meth:`Precision.step` with the loss scaled by ``scale`` (it unscales before the optimizer reads the
    gradients); and computed on the gradients still scaled (apex#1030: a trust ratio taken before the
    unscale). fp32 arithmetic throughout, so scaling is the only difference. ``cfg``'s LARS settings
    (trust coefficient, weight decay); the model itself is not changed."""
    device = next(model.parameters()).device
    lcfg = cfg.replace(optimizer="lars")
    batch = _probe_batches(model, data, cfg, 1, seed)[0]
    users, items, labels = batch

    def loss_of(net):
        return F.binary_cross_entropy_with_logits(net(users, items).float(), labels.float())

    ref, run = copy.deepcopy(model), copy.deepcopy(model)
    ref.train(), run.train()
    loss_of(ref).backward()
    norms = {n: (float(p.detach().norm()), float(p.grad.norm())) for n, p in ref.named_parameters()}
    ref_opt = make_optimizer(ref, lcfg)
    ref_opt.step()
    prec = Precision("fp16", device, loss_scaling="static", init_scale=scale)  # the scaler only: no autocast here
    run_opt = make_optimizer(run, lcfg)
    prec.backward(loss_of(run))
    prec.step(run_opt)
    groups = {p: g for g in ref_opt.param_groups for p in g["params"]}
    rows = []
    for (name, p_ref), p_run in zip(ref.named_parameters(), run.parameters()):
        g = groups[p_ref]
        if not (g.get("always_adapt") or g["weight_decay"]):
            continue  # biases: LARS leaves them out of the trust ratio
        w_norm, g_norm = norms[name]
        true = float(ref_opt.state[p_ref]["trust_ratio"])
        on_scaled = lars_trust_ratio(
            w_norm,
            scale * g_norm,
            trust_coefficient=g["trust_coefficient"],
            weight_decay=g["weight_decay"],
            eps=g["eps"],
            lr=g["lr"],
            trust_clip=g["trust_clip"],
        )
        rows.append(
            {
                "layer": name,
                "||w||": w_norm,
                "||g||": g_norm,
                "trust ratio, fp32": true,
                "trust ratio, Precision.step": float(run_opt.state[p_run]["trust_ratio"]),
                "trust ratio on S x g": on_scaled,
                "on S x g / true": on_scaled / true,
            }
        )
    return rows


def lars_unscale_table(rows: list[dict], scale: float) -> Table:
    t = Table(list(rows[0]), title=f"LARS trust ratios, loss scale S = 2^{math.log2(scale):.0f}")
    for r in rows:
        t.add(**r)
    return t


UNSCALE_TOLERANCE = 1e-3  # fp32 rounding of a norm is ~1e-7 relative: a gap above 1e-3 is a different gradient


def lars_unscale_reading(rows: list[dict], scale: float) -> str:
    """Unscale-before-LARS, read from :func:`lars_unscale_rows`."""
    rel = max(abs(r["trust ratio, Precision.step"] - r["trust ratio, fp32"]) / r["trust ratio, fp32"] for r in rows)
    factors = [r["on S x g / true"] for r in rows]
    # the table's four figures (read r10c 05-S2: "1.53e-05 times the true ones" beside the table's 1.526e-05)
    spread = (f"all {factors[0]:.4g}" if f"{min(factors):.4g}" == f"{max(factors):.4g}"
              else f"{min(factors):.4g} to {max(factors):.4g}")
    if rel > UNSCALE_TOLERANCE:
        # #37 item 2: the opening follows the rows; ratios that differ are not said to have been unscaled
        head = (f"Precision.step's trust ratios differ from the fp32 ones by up to {rel:.1e} (relative), more than "
                f"float rounding ({UNSCALE_TOLERANCE:.0e}): LARS did NOT read the unscaled gradients here. ")
    else:
        same = "equal" if rel == 0 else f"match to {rel:.1e} (relative)"
        head = (f"Precision.step unscaled before LARS read the gradients: its trust ratios {same} the fp32 ones in "
                f"all {len(rows)} adapted layers. ")
    return (head + f"Computed on the gradients still scaled by S = 2^{math.log2(scale):.0f}, "
            f"they are {spread} times the true ones (1/S = {1 / scale:.4g}): a LARS "
            "that took its ratio there and unscaled only afterwards (apex#1030) would shrink every adapted layer's "
            "step by that factor, and clipping or LAMB's gradient norm would compare a norm S times too large "
            "with its threshold.")


# --------------------------------------------------------------------------- throughput and why


@dataclass
class SpeedRun:
    """One precision's steady-state throughput (:func:`course_lib.train.ncf.throughput`): the fields the
    lesson reads, named as on a ``TrainResult`` where they mean the same."""

    mode: str
    samples_per_s: float
    step_s: float
    phase_s: dict  # per-step seconds: sampling, forward_backward, optimizer
    precision: dict
    timed_steps: int
    warmup_steps: int
    scale_history: list = field(default_factory=list)

    @property
    def steps(self) -> int:
        """Steps the precision state covers (warmup included)."""
        return self.warmup_steps + self.timed_steps

    @property
    def history(self) -> dict:
        return {"step": list(range(len(self.scale_history))), "loss_scale": list(self.scale_history)}


def load_average() -> float | None:
    """This machine's 1-minute load average (runnable processes), or None where the OS does not say."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


class PrecisionSpeed(dict):
    """``{mode: SpeedRun}`` (the fastest repeat of each mode) with ``.repeats`` ``{mode: [samples/s, ...]}``
    and ``.load``, the 1-minute load average when the measurement ended (None: not known)."""

    def __init__(self, runs: dict, repeats: dict, steps: int, load: float | None = None):
        super().__init__(runs)
        self.repeats = repeats
        self.steps = steps
        self.load = load

    @property
    def spreads(self) -> dict[str, float]:
        """Per mode with two repeats or more: how far the fastest repeat is from the next fastest,
        (first - second) / first."""
        out = {}
        for mode, v in self.repeats.items():
            if len(v) > 1:
                first, second = sorted(v, reverse=True)[:2]
                out[mode] = (first - second) / first
        return out

    @property
    def spread(self) -> float:
        """The noise of the fastest-repeat estimate: the largest of :attr:`spreads` over the modes. NaN with one
        repeat. A repeat slowed by other work on the machine does not count against it, as long as two repeats
        were not."""
        return max(self.spreads.values()) if self.spreads else math.nan

    def ratio(self, mode: str) -> float:
        return self[mode].samples_per_s / self["fp32"].samples_per_s

    def round_ratios(self, mode: str) -> list[float]:
        """``mode``'s samples/s over fp32's, round by round: :func:`precision_throughput` runs the modes interleaved,
        so repeat i of every mode ran in round i, back to back. Empty with fewer than two rounds each."""
        a, b = self.repeats.get(mode) or [], self.repeats.get("fp32") or []
        return [x / y for x, y in zip(a, b)] if len(a) == len(b) >= 2 else []


def precision_throughput(data, cfg, modes=("fp32", "bf16", "fp16"), *, steps: int = 30, device=None,
                         repeats: int = 3, warmup_steps: int = 3) -> PrecisionSpeed:
    """Training samples/s of ``cfg`` in each precision (lesson 05): ``steps`` timed steps after
    ``warmup_steps`` untimed ones on the same model (:func:`course_lib.train.ncf.throughput`: steady
    state, the phases timed), ``repeats`` times with the modes interleaved (fp32, bf16, fp16, fp32, ...)
    so a change of load on the machine hits every mode alike. Each mode keeps its fastest repeat (the
    least disturbed); ``.spread``, how reproducible that fastest repeat is, is the noise the readings
    compare ratios with."""
    device = torch.device(device) if device is not None else default_device()
    data = data.to(device)  # once: each run below would otherwise copy the dataset again
    if "fp32" not in modes:
        modes = ("fp32",) + tuple(modes)
    best, rates = {}, {m: [] for m in modes}
    for _ in range(max(1, repeats)):
        for m in modes:
            r = throughput(data, cfg.replace(precision=m), device=device, steps=steps, warmup_steps=warmup_steps)
            rates[m].append(r["samples_per_s"])
            if m not in best or r["samples_per_s"] > best[m].samples_per_s:
                best[m] = SpeedRun(m, r["samples_per_s"], r["step_s"], r["phase_s"], r["precision"], steps,
                                   warmup_steps, r["scale_history"])
    return PrecisionSpeed(best, rates, steps, load_average())


def speed_table(speed: PrecisionSpeed, batch: int, device) -> Table:
    t = Table(["precision", "samples/s", "vs fp32", "sampling (ms/step)", "forward+backward (ms/step)",
               "optimizer (ms/step)", "repeats (samples/s)"],
              title=f"Throughput at batch {batch} on {device}: {speed.steps} timed steps, fastest of "
                    f"{len(next(iter(speed.repeats.values())))} interleaved repeats")
    for m, r in speed.items():
        t.add(precision=m, **{"samples/s": r.samples_per_s, "vs fp32": f"{speed.ratio(m):.2f}x",
                              "sampling (ms/step)": 1e3 * r.phase_s.get("sampling", math.nan),
                              "forward+backward (ms/step)": 1e3 * r.phase_s.get("forward_backward", math.nan),
                              "optimizer (ms/step)": 1e3 * r.phase_s.get("optimizer", math.nan),
                              "repeats (samples/s)": ", ".join(f"{v:.3g}" for v in speed.repeats[m])})
    return t


def linear_share(model: torch.nn.Module) -> float:
    """The fraction of ``model``'s parameters that an ``nn.Linear`` uses: the matmuls autocast runs in 16
    bits (embedding lookups, the loss and the optimizer's update of every parameter stay fp32)."""
    params = {id(p): p.numel() for p in model.parameters()}
    used = {id(p) for m in model.modules() if isinstance(m, torch.nn.Linear) for p in m.parameters(recurse=False)}
    total = sum(params.values())  # a weight shared by a Linear and an Embedding (BERT's tied decoder) counts once
    return sum(params[i] for i in used if i in params) / total if total else 0.0


def bert_linear_share(plan) -> tuple[str, float]:
    """``(preset, linear_share)`` of the BERT lesson 07 trains on this tier (built on the CPU, not trained)."""
    cfg = mlm.MLMTrainConfig(model=plan.bert_model)
    return plan.bert_model, linear_share(mlm.build_model(cfg, plan.bert_vocab_size, plan.bert_seq_len))


def saved_bert_ratio(record: dict | None, profile: str, device) -> float | None:
    """bf16 / fp32 throughput of lesson 07's BERT from its saved result, when that result is of the same
    profile and device as this run; else None (a number from another run is not this run's)."""
    if not record or record.get("profile") != profile or record.get("device") != str(device):
        return None
    tp = record.get("throughput") or {}
    if "bf16" not in tp or "fp32" not in tp:
        return None
    return tp["bf16"]["seqs_per_s"] / tp["fp32"]["seqs_per_s"]


def _compare(ratio: float, tol: float) -> str:
    if ratio > 1 + tol:
        return "faster"
    if ratio < 1 - tol:
        return "slower"
    return "no measurable difference"


def speed_verdict(speed: "PrecisionSpeed", mode: str, tol: float, min_tolerance: float = 0.03) -> tuple[str, str]:
    """``(verdict, rounds)``: ``mode`` against fp32 in the interleaved throughput runs (lesson 05). The fastest
    repeats' ratio against ``tol`` (the repeats' spread, :func:`_compare`); where that finds no difference, the
    rounds, each a ratio of two runs made back to back (lesson 01's paired rule, :func:`course_lib.metrics.
    paired_speedup`; lesson 06's ``measurably_different``): every round on one side of 1 by more than
    ``min_tolerance`` is a measured difference, and ``rounds`` (else "") says so with their ratios. Read r7b 05-1
    (seventh full run): "bf16 ran 1.23x fp32 here (no measurable difference; tolerance 59%...)" over rounds of
    1.23x, 1.10x and 1.12x, a 59% spread that every fp32 and bf16 repeat of rounds 2-3 shared."""
    verdict = _compare(speed.ratio(mode), tol)
    rounds = speed.round_ratios(mode)
    if verdict != "no measurable difference" or not rounds:
        return verdict, ""
    median, measured = paired_speedup(rounds, min_tolerance)
    if not measured:
        return verdict, ""
    verdict = "faster" if median > 1 else "slower"
    listed = ", ".join(f"{x:.2f}x" for x in rounds)
    return verdict, (f"{mode} {verdict} than fp32 in every one of the {len(rounds)} interleaved rounds by more than "
                     f"{min_tolerance:.0%} ({listed}), each round's ratio two runs made back to back")


def amdahl_bound_text(share: float, tol: float) -> str:
    """The most a step can speed up when a ``share`` of it becomes free, ``1 / (1 - share)``, at the figures the
    repeats' noise ``tol`` allows (the ladder's rule, :func:`course_lib.ladder.speedup_figures`): the bound
    amplifies the share's noise by ``share / (1 - share)``, so at a 13% tolerance and an 89% share it is known to
    about one figure (read r8b 05-1, eighth full run: "at most 9.19x faster" beside "tolerance 13%")."""
    from ..ladder import speedup_figures

    bound = 1 / max(1 - share, 1e-9)
    figures = speedup_figures(tol * max(1.0, share / max(1 - share, 1e-9)))
    text = f"{bound:.{figures}g}"
    return f"{float(text):.0f}x" if "e" in text else f"{text}x"


def speedup_reading(speed: PrecisionSpeed, hw, device, *, runs=(), neumf_share: float | None = None,
                    bert: tuple[str, float] | None = None, bert_ratio: float | None = None,
                    min_tolerance: float = 0.03, load_now: float | None = None) -> str:
    """The speedup of each 16-bit mode and its cause on this hardware, from the learner's measurements (lesson 05).

    ``speed``: :func:`precision_throughput`; ``hw``: a :class:`course_lib.hardware.Hardware` (what does
    16-bit math here: :func:`course_lib.hardware.sixteen_bit_units`); ``runs``: the time-to-target runs
    (a second measurement of the same ratios, findings 05.4); ``neumf_share``, ``bert``: the matmul share
    of the parameters (:func:`linear_share`, :func:`bert_linear_share`); ``bert_ratio``: lesson 07's saved
    bf16/fp32 (:func:`saved_bert_ratio`). A ratio within the repeats' noise (``speed.spread``, at least
    ``min_tolerance``) of 1 is "no measurable difference". The time-to-target runs are read against the rounds'
    range and each against its own mode's fastest repeat (:func:`_second_measurement`; above
    :data:`NOISY_TOLERANCE` neither measurement pins the ratio). When the two measurements disagree, or a run was
    slowed, the load average now (``load_now``, default: read now, after the time-to-target runs) is set beside
    ``speed.load``."""
    device = str(device)
    on_gpu = device.startswith("cuda")
    units = sixteen_bit_units(hw, device)
    spread = speed.spread
    tol = max(min_tolerance, 0.0 if math.isnan(spread) else spread)
    # whose repeats set the tolerance: the fourth read found "the fastest two repeats 4% apart" in fp16's line,
    # where fp16's own were 0.7 % apart and the 4 % was fp32's
    spreads = speed.spreads
    noisiest = max(spreads, key=spreads.get) if spreads else None
    noise = ("one repeat, no spread measured" if noisiest is None else
             f"the fastest two repeats {spread:.0%} apart" if len(spreads) == 1 else
             f"{noisiest}'s fastest two repeats {spread:.0%} apart, the most of the modes")
    where = "GPU" if on_gpu else "CPU"
    f32 = speed["fp32"].phase_s
    total32 = sum(f32.values()) or math.nan
    out = []
    verdicts = {m: speed_verdict(speed, m, tol, min_tolerance) for m in speed if m != "fp32"}
    for m in (k for k in speed if k != "fp32"):
        r = speed.ratio(m)
        verdict, rounds = verdicts[m]
        line = (f"{m} ran {r:.2f}x fp32 here ({verdict}: {rounds}; the fastest repeats' ratio alone lies within its "
                f"tolerance, {tol:.0%}, {noise})." if rounds else
                f"{m} ran {r:.2f}x fp32 here ({verdict}; tolerance {tol:.0%}, {noise}).")
        if units.get(m) is None:
            kind = "tensor cores" if on_gpu else "instructions"
            line += (f" This {where} has no {m} {kind}: autocast converts to {m} and back and the arithmetic runs "
                     "without 16-bit units, so it cannot be faster than fp32 for that reason alone.")
        else:
            line += f" This {where} has {units[m]}: {m} is not emulated here"
            line += "." if verdict == "faster" else ", so the reason it is not faster lies in the step itself."
        fb32, fbm = f32.get("forward_backward", math.nan), speed[m].phase_s.get("forward_backward", math.nan)
        op32, opm = f32.get("optimizer", math.nan), speed[m].phase_s.get("optimizer", math.nan)
        if fb32 == fb32 and fbm == fbm:
            share = fb32 / total32
            line += (
                f" Its forward+backward took {1e3 * fbm:.3g} ms per step against fp32's {1e3 * fb32:.3g} "
                f"({fb32 / fbm:.2f}x), its optimizer {1e3 * opm:.3g} against {1e3 * op32:.3g} ms; forward+backward "
                f"is {share:.0%} of fp32's step, so even free 16-bit math could make the step at most "
                f"{amdahl_bound_text(share, tol)} faster (the rest stays fp32)."
            )
            if units.get(m) is not None and fbm > fb32 * (1 + tol):
                line += (" On native units the forward+backward still got slower: at these matrix sizes the "
                         "conversions autocast adds around each matmul cost more than the 16-bit arithmetic saves.")
            if speed[m].precision.get("loss_scaling") in ("dynamic", "static"):
                line += " Its optimizer phase also unscales every gradient and checks it for inf/nan."
        out.append(line)
    if neumf_share is not None:
        text = (f"Autocast runs only the matmuls (nn.Linear) in 16 bits, and they use {neumf_share:.1%} of this "
                "NeuMF's parameters: the embedding lookups, the loss and the optimizer's update of every parameter "
                "stay fp32.")
        faster = [m for m in speed if m != "fp32" and verdicts[m][0] == "faster"]
        if faster:  # #37: measured faster here, so the step is not one 16-bit units cannot speed up
            op_share = f32.get("optimizer", math.nan) / total32
            text += (f" Yet {' and '.join(faster)} made this step measurably faster here: a share of the parameters "
                     "is not a share of the time, and at this batch the MLP's matmuls run over every sample"
                     + (f" (forward+backward is {f32['forward_backward'] / total32:.0%} of fp32's step, the "
                        f"optimizer {op_share:.0%})." if op_share == op_share else "."))
        if bert is not None:
            # read r10c 05-H1 (tenth full run): "a step made of matmuls, which 16-bit units can speed up further",
            # said as this machine's, while lesson 07 measured BERT's bf16 at 1.38x against NeuMF's 1.52x here: what
            # the matmul share suggests is an expectation, and lesson 07's measurement is what settles it
            text += (f" In lesson 07's BERT ({bert[0]}) they use {bert[1]:.0%} of its parameters, each for every token "
                     "of every sequence: a step made of matmuls, which 16-bit units could speed up"
                     + (" further" if faster else " where NeuMF's embedding-heavy step did not speed up here")
                     + " (an expectation from the share, not a measurement).")
        neumf = speed.ratio("bf16") if "bf16" in speed else None
        if bert_ratio is not None:
            text += f" Lesson 07 measured BERT's bf16 at {bert_ratio:.2f}x fp32 on this machine (its saved result)"
            if neumf is not None and bert is not None:
                text += (f", more than NeuMF's {neumf:.2f}x here, as expected" if bert_ratio > neumf * (1 + tol) else
                         f", less than NeuMF's {neumf:.2f}x here: not what the share suggested"
                         if bert_ratio < neumf * (1 - tol) else
                         f", within the {tol:.0%} tolerance of NeuMF's {neumf:.2f}x here")
            text += "."
        elif bert is not None:
            text += " Lesson 07 measures BERT's ratio on this machine (no result of this profile saved yet)."
        out.append(text)
    by_mode = {r.precision["mode"]: r for r in runs if r.precision["mode"] in speed}
    if "fp32" in by_mode and len(by_mode) > 1:
        out.append(_second_measurement(speed, by_mode, tol, noise, load_now))
    return " ".join(out)


# read f12c 05-H1 (twelfth full run): "The two agree." over a tolerance of 45%, the fastest two fp32 repeats 45% apart:
# above this the repeats' noise is too wide for two measurements that fall inside it to pin the ratio between them
NOISY_TOLERANCE = 0.20


def _second_measurement(speed: PrecisionSpeed, by_mode: dict, tol: float, noise: str,
                        load_now: float | None) -> str:
    """The time-to-target runs (``by_mode``: {mode: run}, fp32 among them) read as a second measurement of the
    interleaved runs' ratios, for :func:`speedup_reading`: each pair's ratio against the rounds' range, each run's
    samples/s against its own mode's fastest repeat, and the repeats' noise ``tol`` (``noise`` says whose)."""
    parts, agree = [], True
    for m, r in by_mode.items():
        if m == "fp32":
            continue
        long_ratio, short = r.samples_per_s / by_mode["fp32"].samples_per_s, speed.ratio(m)
        gap = abs(long_ratio - short)
        # the long runs are one pair of runs, as each interleaved round is: the rounds' ratios are how far one
        # pair's ratio moved here (read r10c 05-C1, tenth full run: "bf16 1.44x against 1.52x here, 0.07 apart,
        # beyond the tolerance. They disagree by more than the noise the repeats measured", over rounds of 1.45x,
        # 1.49x and 1.52x); within the tolerance of that range (and of the fastest repeats' ratio) they agree
        rounds = speed.round_ratios(m)
        lo, hi = min([short, *rounds]), max([short, *rounds])
        wide_lo, wide_hi = lo * (1 - tol), hi * (1 + tol)
        # read f12c 05-C1 (twelfth full run): "2.68x against 1.19x here (its 3 interleaved rounds ...: 1.19x, 1.95x,
        # 1.15x), 1.48 apart, within the rounds' range and the 45% tolerance": 2.68x lies outside 1.15x-1.95x and
        # inside only the range widened by the tolerance (0.64x-2.82x). The clause says where the ratio lies, as
        # printed
        in_range = round(lo, 2) <= round(long_ratio, 2) <= round(hi, 2)
        within = in_range or wide_lo <= long_ratio <= wide_hi
        agree = agree and within
        head = f"{m} {long_ratio:.2f}x against {short:.2f}x here"
        if not rounds:
            parts.append(head + (", within the tolerance" if within else f", {gap:.2f} apart, beyond the tolerance"))
            continue
        listed = (f" (its {len(rounds)} interleaved rounds, each one pair of runs back to back as these are: "
                  + ", ".join(f"{x:.2f}x" for x in rounds) + ")")
        span = f"{lo:.2f}x-{hi:.2f}x" if f"{lo:.2f}" != f"{hi:.2f}" else f"{lo:.2f}x"
        widened = f"the {tol:.0%} tolerance ({wide_lo:.2f}x-{wide_hi:.2f}x)"
        where = (f"within the rounds' range ({span})" if in_range else
                 f"outside the rounds' range ({span}), inside it only widened by {widened}" if within else
                 f"outside the rounds' range ({span}) even widened by {widened}")
        parts.append(f"{head}{listed}, {gap:.2f} apart, {where}")
    steps = ", ".join(f"{r.steps}" for r in by_mode.values())
    text = (f"The time-to-target runs ({steps} steps, evaluation off the clock) are a second measurement "
            f"of the same ratios: {'; '.join(parts)}. ")
    # read f12c 05-H1 (twelfth full run): "The two agree." where fp32's time-to-target run trained at 0.47x the
    # samples/s of its fastest repeat and bf16's at 1.05x of its own: one run of the pair was slowed, and the long
    # runs' 2.68x is no speedup. Each run is read against its own mode's fastest repeat, the least disturbed one
    slowed = {m: r.samples_per_s / speed[m].samples_per_s for m, r in by_mode.items()
              if r.samples_per_s < speed[m].samples_per_s * (1 - tol)}
    noisy = tol > NOISY_TOLERANCE
    now = load_average() if load_now is None else load_now
    if slowed:
        said = []
        for m, r in by_mode.items():
            if m == "fp32" or not ({"fp32", m} & set(slowed)):
                continue
            ratio = r.samples_per_s / by_mode["fp32"].samples_per_s
            pair = [x for x in ("fp32", m) if x in slowed]
            if len(pair) == 1:
                other = m if pair[0] == "fp32" else "fp32"
                pace = by_mode[other].samples_per_s / speed[other].samples_per_s
                said.append(f"{pair[0]}'s time-to-target run trained at {slowed[pair[0]]:.2f}x the samples/s of its "
                            f"fastest repeat, slower than that by more than the {tol:.0%} tolerance, while {other}'s "
                            f"ran at {pace:.2f}x its own: one run of the pair was slowed, so the long runs' "
                            f"{ratio:.2f}x is not {m}'s speedup")
            else:
                said.append(f"fp32's and {m}'s time-to-target runs trained at {slowed['fp32']:.2f}x and "
                            f"{slowed[m]:.2f}x the samples/s of their fastest repeats, both slower than that by more "
                            f"than the {tol:.0%} tolerance: the long runs' {ratio:.2f}x measures how evenly they were "
                            f"slowed as much as {m}'s speedup")
        text += ("But " if agree else "They disagree by more than the noise the repeats measured: ") + "; ".join(said)
        if now is not None and speed.load is not None and abs(now - speed.load) >= 0.5:
            text += (f" (the 1-minute load average was {speed.load:.1f} when the short runs ended and is {now:.1f} "
                     "now)")
        text += "."
        if noisy:
            text += (f" And the short runs' noise ({noise}) is over {NOISY_TOLERANCE:.0%}: too large for either "
                     "measurement to pin the ratio.")
    elif agree and noisy:
        text += (f"They lie within each other's tolerance only because it is wide: the noise ({noise}) is over "
                 f"{NOISY_TOLERANCE:.0%}, too large for either measurement to pin the ratio.")
    elif agree:
        text += "The two agree."
    else:
        text += "They disagree by more than the noise the repeats measured. "
        if now is None or speed.load is None:
            text += ("This system does not report its load, so the measurement cannot say why: rerun both "
                     "cells to see whether the gap stays.")
        elif abs(now - speed.load) >= 0.5:
            text += (f"The 1-minute load average was {speed.load:.1f} when the short runs ended and is "
                     f"{now:.1f} now: other work on this machine slowed the runs unevenly, and the "
                     "interleaved short runs are the fairer comparison of the two.")
        else:
            text += (f"The 1-minute load average hardly changed ({speed.load:.1f} then, {now:.1f} now), so "
                     "this measurement cannot say why: rerun both cells to see whether the gap stays.")
    return text.rstrip()


def loss_scale_reading(precision_state: dict, steps: int, init_scale: float, run: str = "") -> str:
    """What the loss scale did over a run, from its record (``result.precision``) (lesson 05). ``run`` names the run
    (read r8b 05-S, eighth full run: "Nothing dynamic happened in these 33 steps" was fp16's short throughput run,
    since fp16 had not trained to the target, and only the markdown above said which run the plot could be)."""
    kind = precision_state.get("loss_scaling", "dynamic")
    if precision_state.get("mode") != "fp16" or kind == "none":
        return "No loss scaling in this run: the scale is 1 throughout."
    final, skipped = precision_state["loss_scale"], precision_state["skipped_steps"]
    if kind == "static":
        return (f"A static scale: S stayed at 2^{math.log2(final):.0f} by construction; {skipped} of {steps} steps "
                "overflowed and were skipped.")
    interval = precision_state.get("growth_interval") or 2000
    growths = round(math.log2(final / init_scale)) + skipped
    if skipped == 0 and growths == 0:
        return (
            f"Nothing dynamic happened in these {steps} steps{f' ({run})' if run else ''}: no gradient overflowed at "
            f"2^{math.log2(init_scale):.0f} "
            f"(0 skipped steps), and {steps} steps "
            + ("are fewer than" if steps < interval else "did not reach")
            + f" the {interval} overflow-free steps it takes to double the scale, so the line is flat at its start."
        )
    went = (f"The scale went from 2^{math.log2(init_scale):.0f} to 2^{math.log2(final):.0f} in {steps} steps"
            f"{f' ({run})' if run else ''}: ")
    halved = (f"{skipped} overflow(s) halved it and skipped those steps" if skipped else "no gradient overflowed")
    grew = (f"{growths} run(s) of {interval} overflow-free steps doubled it" if growths else
            f"it never went {interval} steps without an overflow, so it never doubled")
    return went + halved + ", and " + grew + "."


def _same_steps(decide, mode: str) -> int | None:
    """The steps every run of ``mode`` and fp32 took to the target, when all took the same; else None."""
    steps = {r.steps_to_target for label in (mode, "fp32") for r in decide.runs_of(label)}
    return steps.pop() if len(steps) == 1 and None not in steps else None


def _pace_tolerance(speed: "PrecisionSpeed", min_tolerance: float) -> float:
    spread = speed.spread
    return max(min_tolerance, 0.0 if math.isnan(spread) else spread)


def rung_decision(decide, mode: str, speed: "PrecisionSpeed", *, below: str | None = None,
                  min_tolerance: float = 0.03) -> tuple[str, dict | None]:
    """What the fifth rung decides (notebook 05): ``(precision lesson 06 builds on, decided_by)``.

    By the time to target (``decide``: :func:`course_lib.sweeps.confirm`) where its seeds decide. Where they do not
    but every run of both precisions took the same steps, the seconds differ only by the pace of those steps, and the
    interleaved throughput runs (``speed``) are the measurement built for a pace: ``mode`` wins when it was faster
    beyond their tolerance (the repeats' spread, at least ``min_tolerance``), or faster in every interleaved round by
    more than ``min_tolerance`` (:func:`speed_verdict`). Where ``mode`` wins either way,
    ``decided_by`` records how (``by``: "time to target" or "pace") for the ladder
    (:func:`course_lib.ladder.ladder_rows`: the rung helped over ``below``, the rung it built on) — #37's
    rule, each rung starts from the best setting so far: the fourth full run measured bf16 1.30x fp32 on the same 285
    steps (tolerance 4%) and lesson 06 still built on fp32, because 6.37 s vs 6.51 s over two seeds decided nothing."""
    winner = decide.winner(mode, "fp32")
    if winner == mode:  # the seeds decided, in this lesson, on the same setting: the ladder follows it (a paced
        # comparison with an earlier lesson's rung read "no measurable difference" for bf16 4.77 s vs fp32 6.54 s,
        # lower on every seed, and lesson 06 built on fp32 after lesson 05 said it builds on bf16)
        return mode, {"over": below, "by": "time to target",
                      "text": f"{mode} against fp32 on the same setting in its lesson: {decide.compare(mode, 'fp32')}"}
    if winner is not None:
        return winner, None
    steps = _same_steps(decide, mode)
    if steps is None:
        return "fp32", None
    ratio, tol = speed.ratio(mode), _pace_tolerance(speed, min_tolerance)
    verdict, rounds = speed_verdict(speed, mode, tol, min_tolerance)  # read r7b 05-2: the rounds, where they decide
    if verdict == "faster":
        how = (f"faster in each of its {len(speed.round_ratios(mode))} rounds by more than {min_tolerance:.0%}"
               if rounds else f"tolerance {tol:.0%}")
        return mode, {"over": below, "by": "pace", "ratio": ratio, "tolerance": tol,
                      "text": f"the same {steps} steps at {ratio:.2f}x fp32's pace in lesson 05's interleaved "
                              f"throughput runs ({how}): helped"}
    return "fp32", None


def rung_verdict_reading(decide, mode: str, speed: "PrecisionSpeed", builds_on: str,
                         min_tolerance: float = 0.03) -> str:
    """The fifth rung's verdict line (notebook 05, under the deciding comparison): ``mode`` against fp32 in time to
    target (``decide``: :func:`course_lib.sweeps.confirm`), and what lesson 06 builds on (``builds_on``: from
    :func:`rung_decision`). Where the seconds decide nothing but every seed took the same steps in both precisions,
    the seconds differ only by the pace of the same steps: the line says so and quotes the interleaved throughput
    runs (``speed``), the measurement built for that, which then decide (read r3a 05-1, full run 2026-12-01: "no
    measurable difference: the seeds disagree" for four runs of 285 steps, under a throughput reading of bf16 1.31x,
    faster beyond its 21 % tolerance)."""
    versus = decide.compare(mode, "fp32")
    line = f"{mode} against fp32 on the same setting: {versus}"
    if decide.winner(mode, "fp32") is None:
        steps = _same_steps(decide, mode)
        if steps is not None:
            tol = _pace_tolerance(speed, min_tolerance)
            ratio = speed.ratio(mode)
            pace, rounds = speed_verdict(speed, mode, tol, min_tolerance)
            line += (f"; every run took the same {steps} steps, so the seconds differ only by the pace of the "
                     f"same steps, which the interleaved throughput runs above measured: {mode} {ratio:.2f}x fp32 "
                     + (f"({pace}: {rounds}; the fastest repeats alone within the tolerance, {tol:.0%})" if rounds
                        else f"({pace}; tolerance {tol:.0%})"))
            line += (f", and that decides the rung: {mode} is the faster setting" if pace == "faster" else
                     ": neither measurement separates them")
    return line + f"; lesson 06 builds on {builds_on}"
