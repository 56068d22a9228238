"""What lesson 05 measures about mixed precision, and its verdicts.

* gradients on fp16's number line: the fp32 parameter gradients (:func:`gradient_log2_magnitudes`) and
  the activation gradients an fp16 autocast backward actually stores (:func:`autocast_gradients`),
  with what fp16 flushed to zero measured against fp32 on the same weights;
* fp16 with no loss scaling, a static scale and the dynamic one, trained for the same steps
  (:func:`loss_scaling_runs`), the static scale chosen from the measured gradients
  (:func:`static_loss_scale`);
* LARS's trust ratio with the gradients unscaled first (what :class:`course_lib.precision.Precision`
  does) and on loss-scaled gradients (the apex#1030 pitfall): :func:`lars_unscale_rows`;
* what the loss scale did over a run (:func:`loss_scale_table`).

Throughput per precision, its causes and the fifth rung are the speed section, :mod:`.l05_speed`. Each
question is decided by a :class:`course_lib.compare.Comparison` (``*_comparisons``); the rest are tables.

The autocast and loss-scaling machinery itself is :class:`course_lib.precision.Precision`,
used by the training engine.
"""

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
from ..train.ncf import make_batches, make_optimizer, steps_per_epoch, train_to_target


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
    """``fraction`` of ``count`` elements as a count, with its share where a share at 0.1% shows it: a few dozen
    overflowing elements of millions print as a count, never as "0.0%"."""
    n = round(fraction * count)
    if n == 0:
        return "0"
    share = n / count
    return f"{n:,} ({share:.1%})" if share >= 0.001 else f"{n:,} (<0.1%)"


def fp16_underflow_table(mags: dict) -> Table:
    """How many of the (nonzero) gradient elements fp16 loses, without and with loss scaling, as element counts:
    one overflowing element makes the step inf and skips it."""
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
    large batch on a small set)."""
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


def activation_rows(mags: dict, grads: dict) -> list[dict]:
    """One row per kind of gradient (lesson 05): measured zeros at the two scales of ``grads``
    (:func:`autocast_gradients`) and their difference (underflow), and what the histograms predict at the
    smaller scale (the activation gradients' of ``grads``, the fp32 parameter gradients' of ``mags``,
    :func:`gradient_log2_magnitudes`)."""
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
                     "median log2|g|": f"{median:.1f}"})
    return rows


def activation_table(mags: dict, grads: dict) -> Table:
    """:func:`activation_rows` as a table."""
    rows = activation_rows(mags, grads)
    lo, hi = grads["scales"][0], grads["scales"][-1]
    t = Table(list(rows[0]),
              title=f"Gradients of {grads['batches']} batches of {grads['batch_size']} under fp16 autocast, loss "
                    f"scale {lo:g} and 2^{math.log2(hi):.0f}: zeros measured against fp32 on the same weights, "
                    "and predicted from the histograms")
    for r in rows:
        t.add(**r)
    return t


def start_gradient_log2(data, cfg, *, batches: int = 4, device=None) -> np.ndarray:
    """log2 |g| of the parameter gradients of a freshly initialized NeuMF (seeded with ``cfg.seed``), the
    weights the loss-scaling runs start from (lesson 05). A static scale chosen only from a trained model
    can overflow on every step, because the gradients at initialization are the largest a run meets; with every
    step skipped the weights never leave initialization. A few batches: about a second on a CPU."""
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
    One overflowing element makes the step inf and skips it, so overflow is never traded for underflow."""
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


def scaling_epochs(hw, device, *, full: float, emulated: float) -> float:
    """How long each run of :func:`loss_scaling_runs` trains on ``device``: ``full`` epochs where it has fp16 units
    (:func:`course_lib.hardware.sixteen_bit_units`, the lesson's one test of them), at most ``emulated`` where autocast
    converts fp16 in software: the numbers are fp16's either way, only many times slower to compute there."""
    return full if sixteen_bit_units(hw, str(device))["fp16"] else min(full, emulated)


SCALING_RUNS = (("fp32", "fp32", "none"), ("fp16, no loss scaling", "fp16", "none"),
                ("fp16, static scale", "fp16", "static"), ("fp16, dynamic scale", "fp16", "dynamic"))


def loss_scaling_runs(data, cfg, *, steps: int, static_scale: float, device=None, probe_batches: int = 2) -> list[dict]:
    """The same setting for ``steps`` steps in fp32 and in fp16 with no loss scaling, a static scale
    ``static_scale`` and the dynamic one (lesson 05). Each run evaluates HR@10 halfway and at the end;
    at the end its model is probed by :func:`autocast_gradients` at the run's own final scale (1 without
    scaling) and at 2^16: ``activation grads zero`` is what that run's fp16 backward made exactly zero,
    ``... underflow`` the part of it loss scaling removes (measured on the run's own weights): its zeros less those
    at 2^16, so None for a run whose scale is 2^16 or more, where no larger scale was probed and the difference
    would be zero by construction. One dict per run."""
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


def scaling_record(grads: dict, rows: list[dict], speed, static_scale: float) -> dict:
    """Lesson 05's loss-scaling and speed measurements (``speed``: :func:`.l05_speed.precision_throughput`) as flat
    scalars, for its saved result (and the
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
        on_scaled = lars_trust_ratio(w_norm, scale * g_norm, trust_coefficient=g["trust_coefficient"], lr=g["lr"],
                                     weight_decay=g["weight_decay"], eps=g["eps"], trust_clip=g["trust_clip"])
        rows.append({"layer": name, "||w||": w_norm, "||g||": g_norm, "trust ratio, fp32": true,
                     "trust ratio, Precision.step": float(run_opt.state[p_run]["trust_ratio"]),
                     "trust ratio on S x g": on_scaled, "on S x g / true": on_scaled / true})
    return rows


def lars_unscale_table(rows: list[dict], scale: float) -> Table:
    t = Table(list(rows[0]), title=f"LARS trust ratios, loss scale S = 2^{math.log2(scale):.0f}")
    for r in rows:
        t.add(**r)
    return t


UNSCALE_TOLERANCE = 1e-3  # fp32 rounding of a norm is ~1e-7 relative: a gap above 1e-3 is a different gradient


def loss_scaling_comparisons(rows: list[dict], users: int) -> list[Comparison]:
    """Each fp16 run of :func:`loss_scaling_runs` against fp32 after the same steps: the difference of their HR@10,
    each known to the evaluation's sampling error over ``users`` users. A run with no HR@10 is left out."""
    ref = next(r for r in rows if r["precision"] == "fp32")
    out = []
    for r in rows:
        hr = r["HR@10"]
        if r is ref or hr is None or not math.isfinite(hr):
            continue
        out.append(difference(f"HR@10 after {r['steps']} steps, {r['run']} - fp32", ref["HR@10"],
                              hr_standard_error(ref["HR@10"], users), hr, hr_standard_error(hr, users),
                              needed=HR_EFFECT, n="1/1", basis=f"evaluation's sampling error, {users:,} users"))
    return out


FLOAT_ROUNDING = 1e-6  # two fp32 norms of one gradient agree to ~1e-7 relative: what "the same ratio" can resolve


def lars_unscale_comparisons(rows: list[dict], scale: float) -> list[Comparison]:
    """Two verdicts on :func:`lars_unscale_rows`: Precision.step's trust ratios over the fp32 ones (the layer furthest
    from 1: ``same`` where it unscaled before LARS read the gradients), and the ratios taken on the gradients still
    scaled by ``scale`` over the fp32 ones (their geometric mean over the layers, the interval their spread:
    ``lower``, by about 1/S). No repeats: the arithmetic is exact up to :data:`FLOAT_ROUNDING`."""
    through = [r["trust ratio, Precision.step"] / r["trust ratio, fp32"] for r in rows]
    worst = max(through, key=lambda x: abs(math.log(x)))
    scaled = [r["on S x g / true"] for r in rows]
    mean = math.exp(statistics.fmean(math.log(x) for x in scaled))
    spread = max(max(scaled) / mean, mean / min(scaled)) - 1
    n = f"{len(rows)} layers"
    return [quantity_ratio("LARS trust ratio, through Precision.step / fp32", worst, 0.0, needed=UNSCALE_TOLERANCE,
                           resolution=FLOAT_ROUNDING, basis="the layer furthest from 1; fp32 rounding", n=n),
            quantity_ratio(f"LARS trust ratio, on gradients scaled by 2^{math.log2(scale):.0f} / fp32", mean, 0.0,
                           needed=UNSCALE_TOLERANCE, resolution=max(spread, FLOAT_ROUNDING),
                           basis="geometric mean over the layers; their spread", n=n)]


def loss_scale_table(precision_state: dict, steps: int, init_scale: float, run: str) -> Table:
    """What the loss scale did over a run (``result.precision``): its start and end, the overflowing steps it skipped
    (each halved it) and the doublings (one per ``growth_interval`` overflow-free steps)."""
    kind = precision_state.get("loss_scaling", "dynamic")
    scaled = precision_state.get("mode") == "fp16" and kind != "none"
    final = precision_state.get("loss_scale", 1.0) if scaled else 1.0
    skipped = precision_state.get("skipped_steps", 0) if scaled else 0
    start = init_scale if kind == "dynamic" else final
    t = Table(["run", "loss scaling", "steps", "scale at the start", "scale at the end", "skipped steps (halvings)",
               "doublings", "overflow-free steps per doubling"], title="The loss scale over the run")
    t.add(run=run, **{"loss scaling": kind if scaled else "none", "steps": steps,
                      "scale at the start": f"2^{math.log2(start):.0f}",
                      "scale at the end": f"2^{math.log2(final):.0f}",
                      "skipped steps (halvings)": skipped,
                      "doublings": round(math.log2(final / start)) + skipped if kind == "dynamic" else 0,
                      "overflow-free steps per doubling": (precision_state.get("growth_interval") or 2000)
                      if kind == "dynamic" else "—"})
    return t
