"""Lesson 05's measurements of precision: the gradients on fp16's number line and what an fp16 backward flushes to
zero, a static loss scale chosen from them, fp16 trained with no, a static and the dynamic loss scale, and LARS's
trust ratio with the gradients unscaled first and still scaled. Throughput and the fifth rung: :mod:`.l05_speed`."""

from __future__ import annotations

import copy
import itertools
import math
import statistics

import numpy as np
import torch
import torch.nn.functional as F

from ..diagrams import fp16_fractions
from ..hardware import default_device, sixteen_bit_units
from ..optim import lars_trust_ratio
from ..compare import HR_EFFECT, Comparison, difference, quantity_ratio
from ..metrics import hr_standard_error
from ..precision import Precision, fp16_fates
from ..tables import Table
from ..train.engine import RunHooks
from ..train.ncf import build_model, make_batches, make_optimizer, steps_per_epoch, train_to_target

REFERENCE_SCALE = 2.0 ** 16  # GradScaler's start: the scale at which "zero anyway" is measured


def _probe_batches(model: torch.nn.Module, data, cfg, batches: int, seed: int) -> list:
    """The first ``batches`` training batches (into the next epoch when one has fewer: a large batch, a small set)."""
    device = next(model.parameters()).device
    source, out = make_batches(data.to(device), cfg.replace(seed=seed)), []
    while len(out) < batches:
        out += list(itertools.islice(iter(source), batches - len(out)))
    return out


def gradient_log2_magnitudes(model: torch.nn.Module, data, cfg, *, batches: int = 4, seed: int = 1) -> dict:
    """``{"log2": log2|g| of every nonzero fp32 parameter gradient element over a few batches, "count",
    "fates": {loss scale: fp16_fates}}``: the fractions fp16's cast flushes to 0 or overflows at scales 1 to 2^24."""
    probe = _probe_batches(model, data, cfg, batches, seed)
    g = torch.cat([x.flatten().float() for b in probe for x in _backward(model, b, fp16=False, scale=1.0)[0]]).abs()
    g = g[g > 0]
    return {"log2": torch.log2(g).cpu().numpy(), "count": int(g.numel()),
            "fates": {s: fp16_fates(g * s) for s in (1.0, 2.0 ** 8, 2.0 ** 16, 2.0 ** 24)}}


def _elements(fraction: float, count: int) -> str:
    """``fraction`` of ``count`` as a count and its share: a few dozen of millions never print as "0.0%"."""
    n = round(fraction * count)
    return "0" if n == 0 else f"{n:,} ({n / count:.1%})" if n / count >= 0.001 else f"{n:,} (<0.1%)"


def fp16_underflow_table(mags: dict) -> Table:
    """Per loss scale, the gradient elements (of :func:`gradient_log2_magnitudes`) fp16 flushes to 0 or overflows:
    one overflowing element makes the step inf and skips it."""
    t = Table(["loss scale", "become 0", "overflow"])
    for s, fates in mags["fates"].items():
        over = _elements(fates["inf"], mags["count"])
        t.add(**{"loss scale": f"2^{math.log2(s):.0f}", "become 0": _elements(fates["zero"], mags["count"]),
                 "overflow": over + (": skips the step" if over != "0" else "")})
    return t


def _backward(model: torch.nn.Module, batch, *, fp16: bool, scale: float) -> tuple[list, dict]:
    """One training-mode backward of the mean BCE (times ``scale``), fp16 autocast or fp32: ``(parameter gradients,
    {Linear: the gradient of its output as backward stored it})``, read by a tensor hook on each Linear's output."""
    users, items, labels = batch
    names, seen = {m: n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}, {}

    def forward_hook(module, args, out):  # returns None: a forward hook's return value would replace the output
        out.register_hook(lambda g: seen.__setitem__(names[module], g.detach().clone()))

    handles = [m.register_forward_hook(forward_hook) for m in names]
    was_training = model.training
    model.train()
    model.zero_grad(set_to_none=True)
    try:
        with torch.autocast(users.device.type, torch.float16, enabled=fp16):
            logits = model(users, items)
        # as the engine's loss: logits in fp32, the mean over the batch
        (F.binary_cross_entropy_with_logits(logits.float(), labels.float()) * scale).backward()
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads, seen


def autocast_gradients(model: torch.nn.Module, data, cfg, *, scales=(1.0, REFERENCE_SCALE), batches: int = 2,
                       seed: int = 1) -> dict:
    """``{"scales", "dtypes", "count", "zero", "underflow", "log2"}``: of the gradients nonzero in fp32 (``count``) on
    the same weights, the share an fp16 autocast backward made exactly 0, per scale and kind ("activation": what flows
    between the Linears, stored in fp16; "parameter"). A 16-bit forward rounds a few pre-activations across 0, whose
    ReLUs zero their gradient at any scale: ``underflow`` is the zeros less those at the largest scale. ``log2``: the
    activation gradients' true magnitudes (fp16 value / scale) at the largest scale."""
    scales = tuple(sorted({float(x) for x in scales}))
    top = scales[-1]
    count = {"activation": 0, "parameter": 0}
    zeros = {sc: dict(count) for sc in scales}
    log2, dtypes = [], {}
    for batch in _probe_batches(model, data, cfg, batches, seed):
        g32, a32 = _backward(model, batch, fp16=False, scale=1.0)
        for sc in scales:
            g16, a16 = _backward(model, batch, fp16=True, scale=sc)
            pairs = {"parameter": list(zip(g32, g16)), "activation": [(a32[n], a16[n]) for n in a32]}
            for kind, ps in pairs.items():
                zeros[sc][kind] += sum(int(((ref != 0) & (got.float() == 0)).sum()) for ref, got in ps)
                count[kind] += sum(int((ref != 0).sum()) for ref, _ in ps) if sc == top else 0
            if sc == top:
                for name in a32:
                    dtypes[name] = str(a16[name].dtype).replace("torch.", "")
                    v = a16[name].float().abs()
                    v = v[(v > 0) & torch.isfinite(v)]
                    log2.append((torch.log2(v.double()) - math.log2(sc)).cpu().numpy())
    zero = {sc: {k: z / count[k] if count[k] else 0.0 for k, z in zeros[sc].items()} for sc in scales}
    return {"scales": scales, "dtypes": dtypes, "count": count, "zero": zero,
            "underflow": {sc: {k: max(0.0, zero[sc][k] - zero[top][k]) for k in count} for sc in scales},
            "log2": np.concatenate(log2) if log2 else np.zeros(0)}


def activation_table(mags: dict, grads: dict) -> Table:
    """Per kind of gradient: the zeros :func:`autocast_gradients` measured at its two scales and their difference
    (underflow), and what fp16's cast predicts from the histograms at the smaller scale."""
    lo, hi = grads["scales"][0], grads["scales"][-1]
    t = Table(["gradients", "nonzero in fp32", f"zero at {lo:g}", f"zero at 2^{math.log2(hi):.0f}", "underflow",
               f"predicted zero at {lo:g}", f"predicted subnormal at {lo:g}", "median log2|g|"])
    for kind, log2 in (("activation", grads["log2"]), ("parameter", mags["log2"])):
        predicted = fp16_fractions(log2, lo)
        t.add(gradients=kind, **{"nonzero in fp32": f"{grads['count'][kind]:,}",
                                 f"zero at {lo:g}": f"{grads['zero'][lo][kind]:.3%}",
                                 f"zero at 2^{math.log2(hi):.0f}": f"{grads['zero'][hi][kind]:.3%}",
                                 "underflow": f"{grads['underflow'][lo][kind]:.3%}",
                                 f"predicted zero at {lo:g}": f"{predicted['zero']:.2%}",
                                 f"predicted subnormal at {lo:g}": f"{predicted['subnormal']:.1%}",
                                 "median log2|g|": f"{np.median(log2):.1f}" if np.size(log2) else "n/a"})
    return t


def start_gradient_log2(data, cfg, *, batches: int = 4, device=None) -> np.ndarray:
    """log2|g| of a fresh NeuMF's (``cfg.seed``) parameter gradients: the largest a run meets, so a static scale
    chosen from a trained model alone can overflow every step and leave the weights at initialization."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = build_model(data, cfg).to(device or default_device())
    return gradient_log2_magnitudes(model, data, cfg, batches=batches)["log2"]


def lossless_scale_exponents(*log2_arrays) -> tuple[int, int] | None:
    """``(lo, hi)``: every scale 2^lo..2^hi casts all the given magnitudes (log2|g|) to fp16 with none flushed to 0
    nor overflowing (fp16's own cast of the smallest and largest decides); None when they span more than fp16."""
    v = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in log2_arrays]) if log2_arrays else np.zeros(0)
    v = v[np.isfinite(v)]
    if not v.size:
        return None
    ends = torch.tensor([2.0 ** v.min(), 2.0 ** v.max()], dtype=torch.float64)
    ok = [k for k in range(-80, 81) if not any(fp16_fates(ends * 2.0 ** k)[f] for f in ("zero", "inf"))]
    return (ok[0], ok[-1]) if ok else None


def static_loss_scale(*log2_arrays) -> float:
    """The power of two in the middle of :func:`lossless_scale_exponents`; where none loses nothing, of the scales
    that overflow nothing (one inf skips the step) the one that flushes fewest, ties nearest GradScaler's 2^16."""
    span = lossless_scale_exponents(*log2_arrays)
    if span is not None:
        return 2.0 ** ((span[0] + span[1]) // 2)
    v = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in log2_arrays])
    fates = {k: fp16_fractions(v, 2.0 ** k) for k in range(-16, 48)}
    flushed = {k: f["zero"] for k, f in fates.items() if f["inf"] == 0}
    return 2.0 ** min(flushed, key=lambda k: (flushed[k], abs(k - 16))) if flushed else 2.0 ** -16


def scaling_epochs(hw, device, *, full: float, emulated: float) -> float:
    """``full`` epochs where ``device`` has fp16 units, at most ``emulated`` where autocast converts fp16 in software:
    the numbers are fp16's either way, only many times slower to compute."""
    return full if sixteen_bit_units(hw, str(device))["fp16"] else min(full, emulated)


SCALING_RUNS = (("fp32", "fp32", "none"), ("fp16, no scaling", "fp16", "none"),
                ("fp16, static scale", "fp16", "static"), ("fp16, dynamic scale", "fp16", "dynamic"))


def loss_scaling_runs(data, cfg, *, steps: int, static_scale: float, device=None, probe_batches: int = 2) -> list[dict]:
    """One row per run of ``steps`` steps: fp32, and fp16 with no, a static (``static_scale``) and the dynamic loss
    scale, each evaluated halfway and at the end, then probed (:func:`autocast_gradients`) on its own weights at its
    final scale and at 2^16. "... underflow" is None where that scale is 2^16 or more: nothing larger was probed."""
    device = torch.device(device) if device is not None else default_device()
    epochs = steps / steps_per_epoch(data, cfg)
    rows = []
    for label, precision, scaling in SCALING_RUNS:
        c = cfg.replace(precision=precision, loss_scaling=scaling, stop_at_target=False, max_steps=steps,
                        max_epochs=max(cfg.max_epochs, epochs), eval_every_epochs=epochs / 2,
                        dense_eval_margin=0.0,  # a fixed number of steps: no steps to target to resolve
                        loss_scale=static_scale if scaling == "static" else cfg.loss_scale)
        label = f"fp16, static scale 2^{math.log2(static_scale):.0f}" if scaling == "static" else label
        r = train_to_target(data, c, device=device, progress="none", label=label, hooks=RunHooks(keep_model=True))
        scale = r.precision["loss_scale"]
        probe = (autocast_gradients(r.model, data, cfg, scales=(scale, REFERENCE_SCALE), batches=probe_batches)
                 if precision == "fp16" else None)
        del r.model
        got = lambda key, kind: probe[key][scale][kind] if probe else None
        rows.append({"run": label, "precision": precision, "loss scaling": scaling,
                     "final scale": scale if probe else None, "skipped steps": r.precision["skipped_steps"],
                     "steps": r.steps, "activation grads zero": got("zero", "activation"),
                     "activation grads underflow": got("underflow", "activation") if scale < REFERENCE_SCALE else None,
                     "parameter grads zero": got("zero", "parameter"), "train loss": r.curve["loss"][-1],
                     "HR@10": r.final_hr, "diverged": r.diverged})
    return rows


def loss_scaling_table(rows: list[dict]) -> Table:
    """:func:`loss_scaling_runs`' rows; zeros as shares of the elements nonzero in fp32."""
    t = Table(["run", "final scale", "skipped steps", "activation zero", "of which underflow", "parameter zero",
               "train loss", "HR@10"])
    pct = lambda v: None if v is None else f"{v:.3%}"
    for r in rows:
        under = r["activation grads underflow"]
        t.add(run=r["run"] + (" (diverged)" if r["diverged"] else ""), **{
            "final scale": r["final scale"], "skipped steps": r["skipped steps"],
            "activation zero": pct(r["activation grads zero"]), "parameter zero": pct(r["parameter grads zero"]),
            "of which underflow": f"— (at 2^{math.log2(r['final scale']):.0f})" if under is None and r["final scale"]
            else pct(under), "train loss": r["train loss"], "HR@10": r["HR@10"]})
    return t


def scaling_record(grads: dict, rows: list[dict], speed, static_scale: float) -> dict:
    """The loss-scaling and speed (:func:`.l05_speed.precision_throughput`) measurements, as saved scalars."""
    lo, hi = grads["scales"][0], grads["scales"][-1]
    rec = {"static_scale": static_scale, "steps": rows[0]["steps"], "speed_spread": speed.spread,
           "activation_grads_zero_unscaled": grads["zero"][lo]["activation"],
           "activation_grads_zero_2_16": grads["zero"][hi]["activation"],
           "activation_grads_underflow_unscaled": grads["underflow"][lo]["activation"]}
    for r in rows:
        name = r["loss scaling"] if r["precision"] == "fp16" else "fp32"
        rec.update({f"{name}_hr": r["HR@10"], f"{name}_diverged": r["diverged"]})
        if r["precision"] == "fp16":
            rec.update({f"{name}_skipped_steps": r["skipped steps"],
                        f"{name}_activation_zero": r["activation grads zero"],
                        f"{name}_activation_underflow": r["activation grads underflow"],
                        f"{name}_parameter_zero": r["parameter grads zero"]})
    rec.update({f"{m}_vs_fp32": speed.ratio(m) for m in speed if m != "fp32"})
    return rec


def lars_unscale_rows(model: torch.nn.Module, data, cfg, *, scale: float = 2.0 ** 16, seed: int = 1) -> list[dict]:
    """Per adapted layer, LARS's trust ratio on one batch in fp32 arithmetic: unscaled ("fp32"), through
    :meth:`Precision.step` with the loss scaled by ``scale`` (it unscales first), and on the still-scaled gradients."""
    lcfg = cfg.replace(optimizer="lars")
    users, items, labels = _probe_batches(model, data, cfg, 1, seed)[0]
    loss_of = lambda net: F.binary_cross_entropy_with_logits(net(users, items).float(), labels.float())
    ref, run = copy.deepcopy(model), copy.deepcopy(model)
    ref.train(), run.train()
    loss_of(ref).backward()
    norms = {n: (float(p.detach().norm()), float(p.grad.norm())) for n, p in ref.named_parameters()}
    ref_opt, run_opt = make_optimizer(ref, lcfg), make_optimizer(run, lcfg)
    ref_opt.step()
    prec = Precision("fp16", next(model.parameters()).device, loss_scaling="static", init_scale=scale)  # no autocast
    prec.backward(loss_of(run))
    prec.step(run_opt)
    groups = {p: g for g in ref_opt.param_groups for p in g["params"]}
    rows = []
    for (name, p_ref), p_run in zip(ref.named_parameters(), run.parameters()):
        g = groups[p_ref]
        if g.get("always_adapt") or g["weight_decay"]:  # biases: LARS leaves them out of the trust ratio
            w_norm, g_norm = norms[name]
            true = float(ref_opt.state[p_ref]["trust_ratio"])
            scaled = lars_trust_ratio(w_norm, scale * g_norm, trust_coefficient=g["trust_coefficient"], lr=g["lr"],
                                      weight_decay=g["weight_decay"], eps=g["eps"], trust_clip=g["trust_clip"])
            rows.append({"layer": name, "||w||": w_norm, "||g||": g_norm, "fp32": true,
                         "Precision.step": float(run_opt.state[p_run]["trust_ratio"]), "on S x g": scaled,
                         "on S x g / fp32": scaled / true})
    return rows


def loss_scaling_comparisons(rows: list[dict], users: int) -> list[Comparison]:
    """Each fp16 run's HR@10 minus fp32's after the same steps, to the evaluation's sampling error over ``users``; a
    run with no HR@10 is left out."""
    ref = next(r for r in rows if r["precision"] == "fp32")
    se = lambda hr: hr_standard_error(hr, users)
    return [difference(f"HR@10 after {r['steps']} steps, {r['run']} - fp32", ref["HR@10"], se(ref["HR@10"]),
                       r["HR@10"], se(r["HR@10"]), needed=HR_EFFECT, n="1/1",
                       basis=f"evaluation's sampling error, {users:,} users")
            for r in rows if r is not ref and r["HR@10"] is not None and math.isfinite(r["HR@10"])]


UNSCALE_TOLERANCE = 1e-3  # fp32 rounding of a norm is ~1e-7 relative: a gap above 1e-3 is a different gradient
FLOAT_ROUNDING = 1e-6  # two fp32 norms of one gradient agree to ~1e-7 relative: what "the same ratio" can resolve


def lars_unscale_comparisons(rows: list[dict], scale: float) -> list[Comparison]:
    """Precision.step's trust ratios over fp32's (the layer furthest from 1: ``same`` where it unscaled first), and the
    ratios on scaled gradients over fp32's (geometric mean, interval their spread: ``lower``, by about 1/S)."""
    worst = max((r["Precision.step"] / r["fp32"] for r in rows), key=lambda x: abs(math.log(x)))
    scaled = [r["on S x g / fp32"] for r in rows]
    mean = math.exp(statistics.fmean(math.log(x) for x in scaled))
    spread = max(max(scaled) / mean, mean / min(scaled)) - 1
    n = f"{len(rows)} layers"
    return [quantity_ratio("trust ratio, Precision.step / fp32", worst, 0.0, needed=UNSCALE_TOLERANCE,
                           resolution=FLOAT_ROUNDING, basis="the layer furthest from 1", n=n),
            quantity_ratio(f"trust ratio, scaled by 2^{math.log2(scale):.0f} / fp32", mean, 0.0,
                           needed=UNSCALE_TOLERANCE, resolution=max(spread, FLOAT_ROUNDING),
                           basis="geometric mean over the layers", n=n)]


def loss_scale_table(precision_state: dict, steps: int, init_scale: float, run: str) -> Table:
    """What the loss scale did over a run (``result.precision``): start and end, the overflowing steps it skipped
    (each halved it) and the doublings (one per ``growth_interval`` overflow-free steps)."""
    kind = precision_state.get("loss_scaling", "dynamic") if precision_state.get("mode") == "fp16" else "none"
    scaled, dynamic = kind != "none", kind == "dynamic"
    final = precision_state.get("loss_scale", 1.0) if scaled else 1.0
    skipped = precision_state.get("skipped_steps", 0) if scaled else 0
    start = init_scale if dynamic else final
    t = Table(["run", "loss scaling", "steps", "start", "end", "skipped (halvings)", "doublings", "steps per doubling"])
    t.add(run=run, steps=steps, start=f"2^{math.log2(start):.0f}", end=f"2^{math.log2(final):.0f}",
          doublings=round(math.log2(final / start)) + skipped if dynamic else 0,
          **{"loss scaling": kind, "skipped (halvings)": skipped,
             "steps per doubling": (precision_state.get("growth_interval") or 2000) if dynamic else None})
    return t
