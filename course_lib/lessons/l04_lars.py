"""Lesson 04's measurement: why one learning rate cannot serve NeuMF's layers.

With a mean-reduced loss every gradient is a mean over the B samples of the batch. A mean keeps
the part of the per-sample gradients they share (the *signal*, the expected gradient) and shrinks
the part in which they differ (the *noise*) by sqrt(B): a layer whose one-batch gradient is mostly
noise sees ||g|| fall as 1/sqrt(B), a layer whose gradient is mostly signal sees it unchanged. So
the batch size does *not* divide every layer's gradient alike, and :func:`layer_scaling` reads which
regime each layer is in from the measured norms (exponent ~0.5: noise, ~0: signal).

An embedding row receives gradient only from the samples that contain its user or item: its
expected gradient is its *frequency* (count / B) times its mean per-sample gradient, and most rows
are rare; the MLP's weights see every sample. :func:`layer_gradient_norms` measures it on one batch
per size from the same initial model: per weight matrix ``||g|| / ||w||`` (the inverse of LARS's
trust ratio, up to its coefficient), and per item-embedding row its gradient norm against its
frequency in the batch. On one batch the per-sample gradients of a row partly cancel, so the
measured log-log slope sits between 0.5 (random directions) and 1 (aligned).

:func:`dead_layers` reads a LARS run's trust ratios for layers whose gradient vanished: the trust
ratio's zero-norm fallback is exactly 1, so a flat line at 1 is a layer with no gradient at all
(in NeuMF, a ReLU tower whose units all stopped firing), not a layer LARS left alone.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import torch

from ..budget import Runs, SizedPlan, size_plan
from ..metrics import hr_standard_error, line_fit, slope_standard_error
from ..tables import Table, cell_text
from ..sweeps import BLOW_UP_LOSS, blew_up, fastest
from ..train.ncf import TrainConfig, bce_sum, build_model, epochs_to_steps, make_batches, steps_per_epoch, throughput


def layer_gradient_norms(data, cfg: TrainConfig, batch_sizes, *, device="cpu") -> dict:
    """Gradient and weight norms of a freshly initialised NeuMF (``cfg.seed``) on one batch per size.

    Returns ``{"layers": [row, ...], "rows": {B: (frequency, row_grad_norm)}}``: a row per
    (batch size, weight matrix) with ``weight_norm``, ``grad_norm`` and ``grad_to_weight``;
    and, per batch size, the touched rows of the MLP's item embedding as tensors of their
    frequency in the batch (count / B) and their gradient norm.
    """
    data = data.to(device)
    out = {"layers": [], "rows": {}}
    for b in batch_sizes:
        torch.manual_seed(cfg.seed)
        model = build_model(data, cfg).to(device)
        batch = next(iter(make_batches(data, cfg.replace(global_batch_size=b))))
        n = batch[0].numel()
        (bce_sum(model, batch) / n).backward()  # the mean loss, as every run trains it
        for name, p in model.named_parameters():
            if p.ndim < 2:
                continue
            w, g = p.detach().norm().item(), p.grad.norm().item()
            out["layers"].append({"batch": n, "layer": name, "weight_norm": w, "grad_norm": g,
                                  "grad_to_weight": g / w if w else float("nan")})
        counts = torch.bincount(batch[1], minlength=data.num_items)
        touched = counts > 0
        out["rows"][n] = ((counts[touched].float() / n).cpu(), model.mlp_item.weight.grad[touched].norm(dim=1).cpu())
    return out


def layer_norms_table(measured: dict) -> Table:
    """One row per weight matrix, ``||g|| / ||w||`` at each batch size side by side."""
    sizes = sorted({r["batch"] for r in measured["layers"]})
    t = Table(["layer"] + [f"||g||/||w|| at B={b}" for b in sizes],
              title="Gradient over weight norm per layer (one batch, same initial model)")
    for layer in dict.fromkeys(r["layer"] for r in measured["layers"]):
        by_b = {r["batch"]: r["grad_to_weight"] for r in measured["layers"] if r["layer"] == layer}
        t.add(layer=layer, **{f"||g||/||w|| at B={b}": f"{by_b[b]:.2e}" for b in sizes})
    return t


def _log_rows(measured: dict):
    """Per batch size, the touched rows' log frequency and log gradient norm (rows with a gradient)."""
    for b, (freq, norm) in measured["rows"].items():
        keep = norm > 0
        yield b, freq[keep].log().tolist(), norm[keep].log().tolist()


def frequency_slope(measured: dict) -> dict[int, float]:
    """Per batch size, the least-squares slope of log(row gradient norm) on log(row frequency):
    about 1 when a row's gradient is proportional to how often it appears."""
    slopes = {}
    for b, xs, ys in _log_rows(measured):
        fit = line_fit(xs, ys)
        if fit is not None:
            slopes[b] = fit[1]
    return slopes


def frequency_slope_errors(measured: dict) -> dict[int, float]:
    """Per batch size, the standard error of :func:`frequency_slope`'s slope (read r10b 04-H2, tenth full run: "log-log
    slope 0.73 at B=256" where every touched row was seen once or twice: a slope from two frequencies, whose error
    the reading did not give)."""
    errors = {}
    for b, xs, ys in _log_rows(measured):
        se = slope_standard_error(xs, ys)
        if se is not None:
            errors[b] = se
    return errors


NOISE_EXPONENT, SIGNAL_EXPONENT = 0.35, 0.15  # between them: a mix of both


def layer_scaling(measured: dict) -> list[dict]:
    """Per weight matrix, how ``||g|| / ||w||`` changed from the smallest to the largest batch measured:
    ``change`` (small batch's over large batch's), its ``exponent`` (change = (B_hi / B_lo) ** exponent:
    0.5 is the 1/sqrt(B) fall of a gradient that is mostly noise, 0 one that is mostly signal) and its
    ``regime`` ("noise", "signal" or "mixed", at :data:`NOISE_EXPONENT` / :data:`SIGNAL_EXPONENT`)."""
    sizes = sorted({r["batch"] for r in measured["layers"]})
    lo, hi = sizes[0], sizes[-1]
    by = {(r["batch"], r["layer"]): r["grad_to_weight"] for r in measured["layers"]}
    rows = []
    for layer in dict.fromkeys(r["layer"] for r in measured["layers"]):
        a, b = by[(lo, layer)], by[(hi, layer)]
        change = a / b if b else math.inf
        exponent = math.log(change) / math.log(hi / lo) if hi > lo and 0 < change < math.inf else math.nan
        regime = ("noise" if exponent >= NOISE_EXPONENT else "signal" if exponent <= SIGNAL_EXPONENT else "mixed")
        rows.append({"layer": layer, "small": a, "large": b, "change": change, "exponent": exponent,
                     "regime": regime if exponent == exponent else "n/a"})
    return rows


def layer_scaling_table(measured: dict) -> Table:
    """:func:`layer_scaling` as a table: the rows :func:`reading` quotes."""
    sizes = sorted({r["batch"] for r in measured["layers"]})
    lo, hi = sizes[0], sizes[-1]
    t = Table(["layer", f"||g||/||w|| at B={lo}", f"||g||/||w|| at B={hi}", "fell by", "exponent", "mostly"],
              title=f"How each layer's gradient changed with {hi // lo}x the batch (sqrt: {math.sqrt(hi / lo):.1f}x; "
                    "exponent 0.5: falls as 1/sqrt(B), noise; 0: unchanged, signal)")
    for r in layer_scaling(measured):
        t.add(**{"layer": r["layer"], f"||g||/||w|| at B={lo}": f"{r['small']:.2e}",
                 f"||g||/||w|| at B={hi}": f"{r['large']:.2e}", "fell by": f"{r['change']:.2f}x",
                 "exponent": round(r["exponent"], 2), "mostly": r["regime"]})
    return t


def signal_share(change: float, k: float) -> float:
    """The signal's share of ``||g||²`` at the larger of two batch sizes ``k`` times apart, from ``||g||² = S + N / B``
    (signal S, per-sample noise N) at both and the measured fall ``change`` of ``||g||`` between them:
    ``(k - change²) / (k - 1)``, clipped to [0, 1] (a fall of sqrt(k) or more: all noise; none: all signal). At the
    smaller batch the share is this over ``change²``."""
    return min(1.0, max(0.0, (k - change ** 2) / (k - 1))) if k > 1 else math.nan


def _span(values: list[float], fmt: str = ".2f") -> str:
    lo, hi = min(values), max(values)
    return f"{lo:{fmt}}x" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}-{hi:{fmt}}x"


def reading(measured: dict) -> str:
    """What the learner's own measurement shows, in short sentences (every number from ``measured``:
    the ``||g||/||w||`` spread between layers, :func:`layer_scaling`'s regimes, the frequency slopes)."""
    sizes = sorted({r["batch"] for r in measured["layers"]})
    lo, hi = sizes[0], sizes[-1]
    by = {(r["batch"], r["layer"]): r["grad_to_weight"] for r in measured["layers"]}
    layers = list(dict.fromkeys(r["layer"] for r in measured["layers"]))
    spread = {b: max(by[(b, x)] for x in layers) / min(by[(b, x)] for x in layers) for b in sizes}
    one_lr = ("so one global lr is too large for some layers or too small for others" if max(spread.values()) >= 10
              else "within an order of magnitude: one lr could serve them")
    lines = [f"||g||/||w|| differs between NeuMF's layers by {spread[lo]:.0f}x at batch {lo} and {spread[hi]:.0f}x "
             f"at batch {hi}, {one_lr}."]
    scaling = layer_scaling(measured)
    by_regime = {k: [r for r in scaling if r["regime"] == k] for k in ("noise", "signal", "mixed")}
    root = math.sqrt(hi / lo)
    parts = []
    if by_regime["noise"]:
        parts.append(f"{', '.join(r['layer'] for r in by_regime['noise'])} fell "
                     f"{_span([r['change'] for r in by_regime['noise']])} (sqrt({hi // lo}) = {root:.1f}): "
                     f"mostly noise at B={lo}, "
                     "which a mean over B samples divides by sqrt(B)")
    if by_regime["signal"]:
        parts.append(f"{', '.join(r['layer'] for r in by_regime['signal'])} changed "
                     f"{_span([r['change'] for r in by_regime['signal']])}: mostly signal, which a mean keeps")
    if by_regime["mixed"]:
        parts.append(f"{', '.join(r['layer'] for r in by_regime['mixed'])} fell "
                     f"{_span([r['change'] for r in by_regime['mixed']])}: between the two")
    alike = len({r["regime"] for r in scaling}) == 1
    lines.append(f"With {hi // lo}x the batch, " + "; ".join(parts) + ". "
                 + ("Every layer is in the same regime here, so the batch moved them alike."
                    if alike else "The batch size does not divide every gradient alike: it shrinks the noise, "
                    "not the signal."))
    # read r10b 04-H3 (tenth full run): "mlp_user.weight, mlp_item.weight fell 6.72-7.24x (sqrt(128) = 11.3): mostly
    # noise" while by the same arithmetic their signal is 60-65 % of ||g||² at B=32768, the race's batch (mlp.0.weight,
    # "between the two", 96 %): a layer whose noise fell below its signal inside the range is said to have crossed
    k = hi / lo
    crossed = [(r, signal_share(r["change"], k)) for r in scaling if r["regime"] in ("noise", "mixed")
               and math.isfinite(r["change"]) and r["change"] > 0]
    crossed = [(r, sh) for r, sh in crossed if sh >= 0.5 and sh / r["change"] ** 2 < 0.5]
    if crossed:
        shares = ", ".join(f"{sh:.0%} for {r['layer']}" for r, sh in sorted(crossed, key=lambda x: x[1]))
        lines.append(f"Read as ||g||² = signal + noise / B (one batch at each size), a fall short of sqrt({hi // lo}) "
                     f"puts the signal's share of ||g||² at B={hi} at {shares}: mostly noise at B={lo}, these "
                     f"layers' gradients are mostly signal at B={hi}.")
    slopes, errors = frequency_slope(measured), frequency_slope_errors(measured)
    grows = {b: 0.5 <= s_ <= 1.2 for b, s_ in slopes.items()}
    said = ", ".join(f"{s_:.2f}" + (f" ± {errors[b]:.2f}" if b in errors else "") + f" at B={b}"
                     for b, s_ in sorted(slopes.items()))
    said += "; ± is one standard error of the fit" if errors else ""
    # read r7a 04-1 (seventh full run): "rare users and items get small steps" under slopes measured on the MLP item
    # table's rows alone (layer_gradient_norms), and on gradients, not steps: the sentences name what was measured
    row = "An item embedding row's gradient (the MLP's item table: the rows measured)"
    if slopes and all(grows.values()):
        lines.append(f"{row} grows with its frequency in the batch (log-log slope {said}; "
                     "0.5-1 means it grows): rare items get small gradients, so small SGD steps.")
    elif slopes:
        yes = [b for b, g in sorted(grows.items()) if g]
        # why a large batch's slope falls, said only where it is the large batch's that fell (the smoke run, read r7a:
        # "it grows at B=8192 only: at a large batch most rows appear many times" over 0.49 at B=256, 0.62 at B=8192)
        why = (": at a large batch most rows appear many times, and their gradient is mostly signal"
               if not grows[max(grows)] else "")
        lines.append(f"{row} against its frequency in the batch: log-log slope {said} "
                     "(0.5-1 means it grows with frequency); "
                     + (f"it grows at B={', '.join(str(b) for b in yes)} only" if yes else "it does not grow here")
                     + why + ".")
    return "\n".join(lines)


def dead_layers(history: dict, *, tail: float = 0.5) -> dict[str, int]:
    """The adapted layers of a LARS/LAMB run whose gradient vanished: ``{layer: first step}`` for each
    layer whose recorded trust ratio is exactly 1 (:func:`course_lib.optim.lars_trust_ratio`'s fallback
    for a zero gradient norm: a weight matrix's norm is never 0 here) at every sample of the last
    ``tail`` of the run. In NeuMF the MLP tower's layers die together: once the last ReLU layer outputs
    0 for every sample, no gradient reaches any layer below it."""
    steps = history.get("step", [])
    out = {}
    for name, ratios in history.get("trust_ratio", {}).items():
        if not ratios:
            continue
        start = int(len(ratios) * (1 - tail))
        if all(r == 1.0 for r in ratios[start:]):
            first = len(ratios)
            while first > 0 and ratios[first - 1] == 1.0:
                first -= 1
            out[name] = steps[first] if first < len(steps) else first
    return out


SPIKE_FACTOR = 100  # a trust ratio this many times its run's median: ||g|| / ||w|| fell that far, for a while


def spikes(history: dict, *, factor: float = SPIKE_FACTOR) -> dict[str, tuple[float, int, float]]:
    """The adapted layers of a LARS/LAMB run whose trust ratio rose to ``factor`` times its median or more, and were
    not left dead (:func:`dead_layers`): ``{layer: (peak, its step, median)}``. The ratio is ``eta ||w|| / ||g||``, so
    a peak is a stretch where the layer's gradient nearly vanished and came back (read r10b 04-H1, tenth full run:
    the plot showed mlp.0.weight's ratio near 4e4 at step 32 over a median of 36.98, and neither the table's first,
    median, last nor the reading said so)."""
    steps, dead, out = history.get("step", []), dead_layers(history), {}
    for name, ratios in history.get("trust_ratio", {}).items():
        if not ratios or name in dead:
            continue
        median = sorted(ratios)[len(ratios) // 2]
        i = max(range(len(ratios)), key=ratios.__getitem__)
        if median > 0 and ratios[i] >= factor * median:
            out[name] = (ratios[i], steps[i] if i < len(steps) else i, median)
    return out


def dead_layers_reading(history: dict, *, lr: float | None = None) -> str:
    """What :func:`dead_layers` found, as a sentence the lesson prints under the trust-ratio table; where no layer died,
    the layers whose gradient nearly vanished for a while (:func:`spikes`), from the table's peak columns."""
    dead = dead_layers(history)
    if not dead:
        near = spikes(history)
        if not near:
            return ("no layer's trust ratio sat at exactly 1 (the zero-gradient fallback): every adapted layer kept a "
                    "gradient to the end")
        said = "; ".join(f"{name} {cell_text(peak)} at step {step} (median {cell_text(median)})"
                         for name, (peak, step, median) in sorted(near.items()))
        return ("no layer's trust ratio sat at exactly 1 (the zero-gradient fallback): every adapted layer kept a "
                f"gradient to the end. But the ratio peaked at {SPIKE_FACTOR}x its median or more for {said}: the "
                "ratio is ||w|| / ||g||, so there the layer's gradient nearly vanished, and came back")
    at = min(dead.values())
    lr_text = f" at lr {lr:g}" if lr is not None else ""
    return (f"{', '.join(sorted(dead))}: trust ratio exactly 1 from step {at} to the end. That is the fallback for a "
            "zero gradient norm, not a ratio LARS chose: these layers received no gradient at all. In NeuMF that is "
            f"the MLP tower dying{lr_text}: once its last ReLU layer outputs 0 for every sample, nothing flows back "
            "through it, and only the GMF branch keeps learning. The spikes before it are the tower's gradient "
            "shrinking toward 0 (the ratio is ||w|| / ||g||). A smaller lr keeps the tower alive (the sweep below).")


def trust_ratio_table(history: dict) -> Table:
    """Each adapted layer's trust ratio over a LARS/LAMB run (its ``history``): first, median and last sample,
    and the step from which it sat at the zero-gradient fallback (:func:`dead_layers`), the rows
    :func:`dead_layers_reading` reads."""
    dead, steps = dead_layers(history), history.get("step", [])
    t = Table(["layer", "first", "median", "peak", "peak at step", "last", "exactly 1 (no gradient) from step"],
              title="trust ratio over the run")
    for name, v in sorted(history.get("trust_ratio", {}).items()):
        if v:
            i = max(range(len(v)), key=v.__getitem__)  # the peak: spikes() reads it against the median
            t.add(layer=name, first=v[0], median=sorted(v)[len(v) // 2], peak=v[i],
                  **{"peak at step": steps[i] if i < len(steps) else i}, last=v[-1],
                  **{"exactly 1 (no gradient) from step": dead.get(name, "—")})
    return t


def row_gradients_title(measured: dict) -> str:
    """The title of :func:`plot_row_gradients`, read from :func:`frequency_slope` (read r4a 04-2: a fixed "the
    gradient follows frequency, not the batch size" over slopes 0.73 and 0.64, below 1: at the same frequency, 1/256,
    the B=32768 rows' fit lies 5.4x below the B=256 rows, so the batch size moves them too). It says only what the
    slopes say, with the same 0.5-1.2 "grows" band as :func:`reading`."""
    slopes = frequency_slope(measured)
    said = ", ".join(f"{s_:.2f} at B={b}" for b, s_ in sorted(slopes.items()))
    if slopes and all(0.5 <= s_ <= 1.2 for s_ in slopes.values()):
        return f"Embedding rows: the gradient grows with the row's frequency in the batch\n(log-log slope {said})"
    return ("Embedding rows: gradient norm against the row's frequency in the batch"
            + (f"\n(log-log slope {said})" if slopes else ""))


def plot_row_gradients(measured: dict, ax=None):
    """Each touched item-embedding row: gradient norm vs its frequency in the batch, per batch size."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4))
    for b, (freq, norm) in sorted(measured["rows"].items()):
        ax.loglog(freq.numpy(), norm.numpy(), ".", ms=3, alpha=0.5, label=f"batch {b}")
    ax.set(xlabel="row frequency in the batch (count / B)", ylabel="row gradient norm",
           title=row_gradients_title(measured))
    ax.legend(fontsize=8, markerscale=3)
    return ax.figure


def label_entropy(neg_per_pos: int) -> float:
    """The BCE of a constant predictor on NeuMF's training labels (1 positive in ``neg_per_pos + 1``): the loss of a
    model that learned only the share of positives."""
    p = 1 / (neg_per_pos + 1)
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


COLLAPSE_TOLERANCE = 0.005  # |final training loss - label entropy| of a run that predicts one constant


def _collapsed_clause(runs) -> str:
    """The runs that ended as a constant predictor (their last training loss within :data:`COLLAPSE_TOLERANCE` of
    :func:`label_entropy`), said as such: not a blow-up by :data:`course_lib.sweeps.BLOW_UP_LOSS`, but nothing learned
    (read r3a 04-1: SGD at lr 2, 4, 8 ended at loss 0.5006-0.5008 and HR@10 0.106-0.107, and the reading was silent)."""
    gone = []
    for r in runs:
        loss = (r.curve or {}).get("loss") or [None]
        h = label_entropy(r.config.get("neg_per_pos", 4))
        if loss[-1] is not None and abs(loss[-1] - h) <= COLLAPSE_TOLERANCE:
            gone.append(r)
    if not gone:
        return ""
    gone.sort(key=lambda r: r.config["peak_lr"])
    lrs = ", ".join(f"{r.config['peak_lr']:.3g}" for r in gone)
    hrs = ", ".join(f"{r.final_hr:.4f}" for r in gone)
    return (f"; lr {lrs} collapsed to a constant predictor (final HR@10 {hrs}, about chance; training loss at the "
            f"labels' entropy, {label_entropy(gone[0].config.get('neg_per_pos', 4)):.4f}): not a blow-up (a loss above "
            f"{BLOW_UP_LOSS:.2f}), but nothing learned")


def _fewer_steps_clause(best, reached) -> str:
    """When another run of the same optimizer at the same batch reached the target in fewer steps than the one the
    clock ranks first, what that means (read r5a 04-1, fifth full run: "adam ...: best at lr 0.00566, reached HR@10
    0.75 in 9.2 s (216 steps)" over lr 0.0113's 176 steps in 9.354 s, the two at 7.677e+05 and 6.133e+05 samples/s):
    at one batch and optimizer a step costs the same at every lr, so the clock ranked the pace the runs ran at."""
    batch = best.config["global_batch_size"]
    fewer = [r for r in reached if r.config["global_batch_size"] == batch and r.steps_to_target is not None
             and best.steps_to_target is not None and r.steps_to_target < best.steps_to_target]
    if not fewer:
        return ""
    least = min(fewer, key=lambda r: (r.steps_to_target, r.time_to_target_s))
    return (f"; but lr {least.config['peak_lr']:.3g} reached it in fewer steps ({least.steps_to_target}, in "
            f"{least.time_to_target_s:.2f} s): at one batch a step costs the same at every lr, so the clock ranked "
            f"these runs by the pace they ran at (samples/s {cell_text(best.samples_per_s)} against "
            f"{cell_text(least.samples_per_s)}), not by their lr: which lr is best is not resolved here")


def _still_rising_clause(r) -> str:
    """For a run that missed the target: where its best HR@10 is its last evaluation, above the one before, the
    race's epochs ended it while it was still improving (read f12b 04-H1, twelfth full run: "lars (lr 1, 2, 4, 8):
    best at lr 8 ..., did not reach 0.75: best HR@10 0.672" over a curve rising at every evaluation of its last epoch,
    about 0.545, 0.59, 0.63, 0.672, cut at 2.704 epochs by the budget, where LAMB at lr 0.0453 had levelled off, best
    0.6671 and final 0.6281). Its epochs are the table's "epochs run"; "" for a run that levelled off or fell."""
    hrs = [x for x in (getattr(r, "curve", None) or {}).get("hr", []) if x is not None]
    if len(hrs) < 2 or getattr(r, "diverged", False) or not hrs[-1] > hrs[-2] or hrs[-1] < max(hrs):
        return ""
    return (f", still rising at its last evaluation when the race's epochs ran out ({r.epochs:.3f} epochs): "
            "where it would level off is not measured")


def race_reading(results, *, target_hr: float, floor_hr: float | None = None, users: int | None = None) -> str:
    """Per optimizer, what its best run did (from the records only), then the fastest overall.

    A run's lr that sits at the edge of the grid it was swept over is flagged: the best may lie
    beyond it. ``floor_hr``: the popularity ranking's HR, for runs that ended near it; with ``users`` a run within
    twice the evaluation's sampling error of it is level with it, as lesson 01's :func:`sgd_reading` says.
    """
    best_hr = lambda r: r.best_hr if r.best_hr is not None else (r.final_hr or 0.0)  # noqa: E731
    lines = []
    by_opt: dict[str, list] = {}
    for r in results:
        by_opt.setdefault(r.config["optimizer"], []).append(r)
    for opt, runs in by_opt.items():
        lrs = sorted(r.config["peak_lr"] for r in runs)
        reached = [r for r in runs if r.time_to_target_s is not None]
        if not reached and all(blew_up(r) for r in runs):
            # #37 (review 04 #12): ranking blown-up runs by HR@10 ranks chance-level noise
            lines.append(f"{opt} (lr {', '.join(f'{x:.3g}' for x in lrs)}): every lr tried blew up (NaN, or a training "
                         f"loss above {BLOW_UP_LOSS:.2f}, worse than an untrained model): no lr trained here, down to "
                         f"{lrs[0]:.3g}, the smallest tried; a smaller one is the next to try")
            continue
        best = min(reached, key=lambda r: r.time_to_target_s) if reached else max(runs, key=best_hr)
        lr = best.config["peak_lr"]
        edge = " (the edge of its grid: a better lr may lie beyond)" if len(lrs) > 1 and lr in (lrs[0], lrs[-1]) else ""
        if reached:
            what = f"reached HR@10 {target_hr} in {best.time_to_target_s:.1f} s ({best.steps_to_target} steps)"
            what += _fewer_steps_clause(best, reached)
        else:
            hr = best_hr(best)
            if floor_hr is not None and hr < floor_hr:
                # #37 (full run 2026-12-01): "best HR@10 0.393, below the popularity ranking's 0.393": near the
                # floor both are quoted at the table's four decimals, and equal ones are said to be equal
                where = "at" if f"{hr:.4f}" == f"{floor_hr:.4f}" else "below"
                what = (f"did not reach {target_hr}: best HR@10 {hr:.4f}, {where} the popularity ranking's "
                        f"{floor_hr:.4f}")
                noise = 2 * hr_standard_error(floor_hr, users) if users else None
                if where == "below" and noise is not None and floor_hr - hr <= noise:
                    # read r9a 04-C1 (ninth full run): "best HR@10 0.3925, below the popularity ranking's 0.3929",
                    # 0.0004 apart, where lesson 01 calls 0.0022 apart "level with" (twice the error: 0.0126)
                    # read f12b 04-S1 (twelfth full run): "0.3925, level with ... 0.3929 (a difference of -0.0003":
                    # the exact 0.39255 - 0.39288; the difference of the two values as printed, which a reader takes
                    shown = float(f"{hr:.4f}") - float(f"{floor_hr:.4f}")
                    what = (f"did not reach {target_hr}: best HR@10 {hr:.4f}, level with the popularity ranking's "
                            f"{floor_hr:.4f} (a difference of {shown:+.4f} against twice the evaluation's "
                            f"sampling error, {noise:.4f})")
            else:
                what = f"did not reach {target_hr}: best HR@10 {hr:.3f}"
            what += _still_rising_clause(best)
        blown = [f"{r.config['peak_lr']:.3g}" for r in runs if blew_up(r)]
        what += f"; lr {', '.join(blown)} blew up" if blown else ""
        what += _collapsed_clause([r for r in runs if not blew_up(r) and r.time_to_target_s is None])
        lines.append(f"{opt} (lr {', '.join(f'{x:.3g}' for x in lrs)}): best at lr {lr:.3g}{edge}, {what}")
    win = fastest(results)
    lines.append(f"fastest to the target: {win.config['optimizer']} at lr {win.config['peak_lr']:.3g}" if win
                 else "no run reached the target")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the lesson's time budget

FLOOR_SCALE = 0.9  # the shortest race: 2.7 of its 3 epochs. LAMB first reached HR@10 0.75 at 2.50-2.58 epochs on the
# 2-core machine (2026-12-01, quiet), Adam at 1.2; at a floor of 2.5 epochs (tried on the busy machine, 18:05 UTC) LAMB
# ended at HR@10 0.749 on one seed: the cut, not the optimizer, decided. Shorter would measure the budget.
OVERHEAD_S = 4.0  # per run besides its steps: its evaluations (measured 2026-12-01: 306 s for 16 runs, 247 s training)


def race_epochs(max_epochs: float, scale: float) -> float:
    """Every race run's epochs in a plan cut to ``scale`` of the steps (:func:`size`), to two decimals."""
    return round(max_epochs * scale, 2)


def race_steps(epochs: float, per_epoch: int) -> int:
    """The steps a race run of ``epochs`` takes: the loop runs whole steps, ``ceil(epochs x per_epoch)``."""
    return max(1, math.ceil(epochs * per_epoch))


def race_line(epochs: float, per_epoch: int) -> str:
    """The cut race's length, in the steps every run takes (read r8a 04-3, eighth full run: "every run of the race:
    at most 2.7 epochs" over runs of ceil(2.7 x 152) = 411 steps, 2.704 epochs)."""
    n = race_steps(epochs, per_epoch)
    exact = "" if n == epochs * per_epoch else f", rounded up to a whole step: {n / per_epoch:.3f} epochs"
    return f"every run of the race: at most {n} steps ({epochs:g} epochs at {per_epoch} steps per epoch{exact})"


def size(data, cfg: TrainConfig, budget: float, *, device=None, optimizers: int, factors, max_extensions: int,
         confirm_runs: int, max_epochs: float, other_s: float = 20.0, steps: int = 10) -> SizedPlan:
    """The race sized to ``budget`` seconds: ``steps`` steps of NeuMF at the race's batch (``cfg``) timed now, then
    :func:`course_lib.budget.size_plan` over its worst case (every lr run for all its ``max_epochs``: a run stops
    at the target, but the plan must hold when none does; every sweep extended). The sweeps' edge extensions are
    kept (a best lr at the edge is unfound: issue 37 sweeps SGD down until it stops blowing up); every run's
    epochs are cut alike, down to :data:`FLOOR_SCALE`. ``other_s``: the lesson's other cells."""
    rate = throughput(data, cfg, device=device, steps=steps, warmup_steps=2)["samples_per_s"]
    step_s = cfg.global_batch_size / rate
    run_steps = epochs_to_steps(max_epochs, data, cfg)
    runs = [Runs("race", optimizers * len(factors), run_steps, step_s, sweeps=optimizers, extensions=max_extensions,
                 overhead_s=OVERHEAD_S),
            Runs("seeds", confirm_runs, run_steps, step_s, overhead_s=OVERHEAD_S)]
    # r7a (seventh full run, seen in 04 cell 3): "steps per run x0.90 (race 456 -> 410, ...)" while every cut run
    # ran 411 steps: the lesson cuts epochs (race_epochs: 2.7) and the loop runs ceil(2.7 x 152) = 411 of them
    per_epoch = steps_per_epoch(data, cfg)
    return size_plan(runs, budget, floor_scale=FLOOR_SCALE, other_s=other_s, min_extensions=max_extensions,
                     run_steps=lambda _, scale: race_steps(race_epochs(max_epochs, scale), per_epoch))
