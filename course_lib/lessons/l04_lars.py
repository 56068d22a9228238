"""Lesson 04's measurement: why one learning rate cannot serve NeuMF's layers.

With a mean-reduced loss every gradient is a mean over the B samples of the batch. A mean keeps
the part of the per-sample gradients they share (the *signal*, the expected gradient) and shrinks
the part in which they differ (the *noise*) by sqrt(B): a layer whose one-batch gradient is mostly
noise sees ||g|| fall as 1/sqrt(B), a layer whose gradient is mostly signal sees it unchanged. So
the batch size does *not* divide every layer's gradient alike, and :func:`layer_scaling` shows which
regime each layer is in from the measured norms (exponent ~0.5: noise, ~0: signal).

An embedding row receives gradient only from the samples that contain its user or item: its
expected gradient is its *frequency* (count / B) times its mean per-sample gradient, and most rows
are rare; the MLP's weights see every sample. :func:`layer_gradient_norms` measures it on one batch
per size from the same initial model: per weight matrix ``||g|| / ||w||`` (the inverse of LARS's
trust ratio, up to its coefficient), and per item-embedding row its gradient norm against its
frequency in the batch. On one batch the per-sample gradients of a row partly cancel, so the
measured log-log slope sits between 0.5 (random directions) and 1 (aligned): :func:`frequency_comparisons`.

:func:`dead_layers` finds in a LARS run's trust ratios for layers whose gradient vanished: the trust
ratio's zero-norm fallback is exactly 1, so a flat line at 1 is a layer with no gradient at all
(in NeuMF, a ReLU tower whose units all stopped firing), not a layer LARS left alone.

The race is a table per optimizer (:func:`race_table`: its lr grid, bracketed or not); its verdicts are
:class:`course_lib.compare.Comparison` rows: LARS against the plain SGD it wraps (:func:`rescue_comparison`) and the
layer-wise optimizer against Adam (:meth:`course_lib.sweeps.Confirmed.time_comparison`), both over every seed, and a
run that missed the target against the popularity ranking (:func:`race_comparisons`). :func:`sweep_plan` sizes the
SGD and LARS sweeps' cut runs to what the budget leaves after the full-length runs.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import torch

from ..compare import HR_EFFECT, Comparison, Estimate, difference, difference_of_means, estimate, slope
from ..metrics import hr_standard_error
from ..tables import Table
from ..sweeps import blew_up, race_rank
from ..train.ncf import TrainConfig, bce_sum, build_model, make_batches


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
    """:func:`layer_scaling` as a table, with the signal's share of ``||g||²`` at the larger batch
    (:func:`signal_share`): a layer mostly noise at the small batch can be mostly signal at the large one."""
    sizes = sorted({r["batch"] for r in measured["layers"]})
    lo, hi = sizes[0], sizes[-1]
    share = f"signal's share of ||g||² at B={hi}"
    t = Table(["layer", f"||g||/||w|| at B={lo}", f"||g||/||w|| at B={hi}", "fell by", "exponent", "mostly", share],
              title=f"How each layer's gradient changed with {hi // lo}x the batch (sqrt: {math.sqrt(hi / lo):.1f}x; "
                    "exponent 0.5: falls as 1/sqrt(B), noise; 0: unchanged, signal)")
    for r in layer_scaling(measured):
        t.add(**{"layer": r["layer"], f"||g||/||w|| at B={lo}": f"{r['small']:.2e}",
                 f"||g||/||w|| at B={hi}": f"{r['large']:.2e}", "fell by": f"{r['change']:.2f}x",
                 "exponent": round(r["exponent"], 2), "mostly": r["regime"],
                 share: f"{signal_share(r['change'], hi / lo):.0%}" if 0 < r["change"] < math.inf else "n/a"})
    return t


def layer_spread(measured: dict) -> list[Estimate]:
    """Per batch size, how far apart the layers' ``||g|| / ||w||`` are (the largest over the smallest): the range
    one global lr would have to serve. One batch each: no standard error."""
    out = []
    for b in sorted({r["batch"] for r in measured["layers"]}):
        v = [r["grad_to_weight"] for r in measured["layers"] if r["batch"] == b]
        out.append(estimate(f"||g||/||w||, largest layer / smallest, B={b}", max(v) / min(v), math.nan, unit="x",
                            basis="one batch"))
    return out


GROWS_SLOPE = 0.5  # the log-log slope of per-sample gradients in random directions: above it a row's gradient grows
# with its frequency at least as a sum of independent samples does


def frequency_comparisons(measured: dict) -> list[Comparison]:
    """Per batch size, the least-squares slope of log(row gradient norm) on log(row frequency), against 0 with
    :data:`GROWS_SLOPE` as the effect that counts: ``higher`` is a row gradient that grows with the row's frequency
    (about 1 when proportional to it). Batch sizes with fewer than three distinct frequencies are left out."""
    out = []
    for b, (freq, norm) in sorted(measured["rows"].items()):
        keep = norm > 0
        xs, ys = freq[keep].log().tolist(), norm[keep].log().tolist()
        if len(set(xs)) >= 3:
            out.append(slope(f"log row gradient on log row frequency, B={b}", xs, ys, needed=GROWS_SLOPE,
                             basis=f"{len(xs)} item rows, one batch"))
    return out


def signal_share(change: float, k: float) -> float:
    """The signal's share of ``||g||²`` at the larger of two batch sizes ``k`` times apart, from ``||g||² = S + N / B``
    (signal S, per-sample noise N) at both and the measured fall ``change`` of ``||g||`` between them:
    ``(k - change²) / (k - 1)``, clipped to [0, 1] (a fall of sqrt(k) or more: all noise; none: all signal). At the
    smaller batch the share is this over ``change²``."""
    return min(1.0, max(0.0, (k - change ** 2) / (k - 1))) if k > 1 else math.nan


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


def trust_ratio_table(history: dict, rows: dict[str, int] | None = None) -> Table:
    """Each adapted layer's trust ratio over a LARS/LAMB run (its ``history``): how many rows share it (``rows``:
    ``{layer: rows}``, e.g. an embedding table's items, each at its own frequency), first, median, peak (over the
    median: the ratio is ||w|| / ||g||, so a peak far above it is a stretch where the gradient nearly vanished) and
    last sample, and the step from which it sat at the zero-gradient fallback (:func:`dead_layers`)."""
    dead, steps, rows = dead_layers(history), history.get("step", []), rows or {}
    t = Table(["layer", "rows sharing the ratio", "first", "median", "peak", "peak / median", "peak at step", "last",
               "exactly 1 (no gradient) from step"],
              title="trust ratio over the run")
    for name, v in sorted(history.get("trust_ratio", {}).items()):
        if v:
            i, median = max(range(len(v)), key=v.__getitem__), sorted(v)[len(v) // 2]
            t.add(layer=name, **{"rows sharing the ratio": rows.get(name, "—")}, first=v[0], median=median, peak=v[i],
                  **{"peak / median": f"{v[i] / median:.3g}x" if median > 0 else "n/a"},
                  **{"peak at step": steps[i] if i < len(steps) else i}, last=v[-1],
                  **{"exactly 1 (no gradient) from step": dead.get(name, "—")})
    return t


def plot_row_gradients(measured: dict, ax=None):
    """Each touched item-embedding row: gradient norm vs its frequency in the batch, per batch size."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4))
    for b, (freq, norm) in sorted(measured["rows"].items()):
        ax.loglog(freq.numpy(), norm.numpy(), ".", ms=3, alpha=0.5, label=f"batch {b}")
    ax.set(xlabel="row frequency in the batch (count / B)", ylabel="row gradient norm",
           title="Embedding rows: gradient norm against the row's frequency in the batch")
    ax.legend(fontsize=8, markerscale=3)
    return ax.figure


def label_entropy(neg_per_pos: int) -> float:
    """The BCE of a constant predictor on NeuMF's training labels (1 positive in ``neg_per_pos + 1``): the loss of a
    model that learned only the share of positives."""
    p = 1 / (neg_per_pos + 1)
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


COLLAPSE_TOLERANCE = 0.005  # |final training loss - label entropy| of a run that predicts one constant


def collapsed(r) -> bool:
    """A run that ended as a constant predictor: not blown up, its last training loss within
    :data:`COLLAPSE_TOLERANCE` of :func:`label_entropy`: nothing learned but the share of positives."""
    loss = ((r.curve or {}).get("loss") or [None])[-1]
    return (not blew_up(r) and loss is not None
            and abs(loss - label_entropy(r.config.get("neg_per_pos", 4))) <= COLLAPSE_TOLERANCE)


def still_rising(r) -> bool:
    """A run whose best HR@10 is its last evaluation, above the one before: the race's epochs ended it while it
    was still improving, so where it would level off is not measured."""
    hrs = [x for x in (getattr(r, "curve", None) or {}).get("hr", []) if x is not None]
    return len(hrs) >= 2 and not getattr(r, "diverged", False) and hrs[-1] > hrs[-2] and hrs[-1] >= max(hrs)


def _best_hr(r) -> float:
    return r.best_hr if r.best_hr is not None else (r.final_hr or 0.0)


def _full_length(runs) -> list:
    """The runs of an optimizer that ran the race's full length (a cut sweep's runs carry ``max_steps``)."""
    return [r for r in runs if r.config.get("max_steps") is None] or list(runs)


def full_length(results, labels) -> tuple[list, list]:
    """The race's runs and labels without the sweeps' cut runs (:func:`_full_length`, optimizer by optimizer: one
    whose cut run reached the target keeps its grid)."""
    keep = {id(r) for opt in {r.config["optimizer"] for r in results}
            for r in _full_length([x for x in results if x.config["optimizer"] == opt])}
    pairs = [(r, label) for r, label in zip(results, labels) if id(r) in keep]
    return [r for r, _ in pairs], [label for _, label in pairs]


def _grid(runs) -> list:
    """The runs of an optimizer's lr grid: its cut sweep runs where it had some, else all its runs."""
    return [r for r in runs if r.config.get("max_steps") is not None] or list(runs)


def best_runs(results) -> dict:
    """Per optimizer, its best full-length run of the race: the fastest to the target, else the highest HR@10 among
    the runs that did not blow up; None where every lr tried blew up (ranking those would rank chance-level noise)."""
    by_opt: dict[str, list] = {}
    for r in results:
        by_opt.setdefault(r.config["optimizer"], []).append(r)
    out = {}
    for opt, runs in by_opt.items():
        runs = _full_length(runs)
        reached = [r for r in runs if r.time_to_target_s is not None]
        trained = [r for r in runs if not blew_up(r)]
        out[opt] = (min(reached, key=lambda r: r.time_to_target_s) if reached
                    else max(trained, key=_best_hr) if trained else None)
    return out


def race_table(results, *, caps: dict[str, int]) -> Table:
    """One row per optimizer of the race: the lrs its grid tried (and the steps of a cut sweep's runs), the grid's
    best lr and whether it is bracketed (inside the grid) or still at its edge after its cap of extensions
    (``caps``: ``{optimizer: cap}``), its best full-length run's time to target or best HR@10, whether it was still
    rising when the race's epochs ran out, and the lrs that blew up or collapsed to a constant predictor."""
    t = Table(["optimizer", "lrs tried", "sweep run (steps)", "best lr", "bracketed", "time to target (s)",
               "best HR@10", "still rising at the end", "blew up at lr", "constant predictor at lr"],
              title="The race per optimizer: its lr grid and its best run")
    fmt = lambda rs: ", ".join(f"{r.config['peak_lr']:.3g}" for r in sorted(rs, key=lambda r: r.config["peak_lr"])) \
        or "—"  # noqa: E731
    for opt, best in best_runs(results).items():
        grid = _grid([r for r in results if r.config["optimizer"] == opt])
        lrs = sorted(r.config["peak_lr"] for r in grid)
        top = min(grid, key=race_rank).config["peak_lr"]
        edge = top in (lrs[0], lrs[-1])
        t.add(optimizer=opt, **{"lrs tried": fmt(grid), "sweep run (steps)": grid[0].config.get("max_steps") or "full",
                                "best lr": "—" if best is None else f"{top:.3g}",
                                "bracketed": "one lr" if len(lrs) < 2 else
                                f"no: at the edge, cap of {caps.get(opt, 0)} reached" if edge else "yes",
                                "time to target (s)": (best.time_to_target_s if best and best.time_to_target_s
                                                       is not None else "not reached"),
                                "best HR@10": _best_hr(best) if best else "—",
                                "still rising at the end": bool(best) and best.time_to_target_s is None
                                and still_rising(best),
                                "blew up at lr": fmt([r for r in grid if blew_up(r)]),
                                "constant predictor at lr": fmt([r for r in grid if collapsed(r)])})
    return t


def race_comparisons(results, *, floor_hr: float, users: int) -> list[Comparison]:
    """Per optimizer whose best run missed the target: its best HR@10 against the popularity ranking's (``floor_hr``),
    each known to the evaluation's sampling error over ``users`` users: ``lower`` or ``same`` is a model that
    learned no more than item popularity."""
    out = []
    for opt, best in best_runs(results).items():
        if best is None or best.time_to_target_s is not None:
            continue
        out.append(_hr_difference(f"best HR@10, {opt} lr {best.config['peak_lr']:.3g} - popularity ranking",
                                  floor_hr, _best_hr(best), users))
    return out


def _hr_difference(question: str, a: float, b: float, users: int) -> Comparison:
    return difference(question, a, hr_standard_error(a, users), b, hr_standard_error(b, users), needed=HR_EFFECT,
                      n="1/1", basis=f"evaluation's sampling error, {users:,} users")


def rescue_comparison(plain_runs, layerwise_runs, *, users: int) -> Comparison | None:
    """The question the lesson's SGD and LARS runs answer: at the same batch, does the trust ratio let momentum SGD
    reach a higher HR@10? The mean best HR@10 of ``layerwise_runs`` (LARS at its best lr, a run per seed) minus that
    of ``plain_runs`` (plain SGD at its best lr, the same seeds): :func:`course_lib.compare.difference_of_means`,
    the seeds' spread widened by the evaluation's sampling error over ``users`` users (the same users at every
    seed, so the seeds' spread does not hold it). ``higher``: LARS learned more. None where either arm's race run
    blew up (every lr of it did)."""
    if not plain_runs or not layerwise_runs or blew_up(plain_runs[0]) or blew_up(layerwise_runs[0]):
        return None
    a, b = [_best_hr(r) for r in plain_runs], [_best_hr(r) for r in layerwise_runs]
    plain, layerwise = plain_runs[0].config, layerwise_runs[0].config
    question = (f"best HR@10, {layerwise['optimizer']} lr {layerwise['peak_lr']:.3g} - {plain['optimizer']} lr "
                f"{plain['peak_lr']:.3g}")
    sampling = _hr_difference(question, sum(a) / len(a), sum(b) / len(b), users)
    seeds = f"{len(a)} and {len(b)} seeds" if min(len(a), len(b)) > 1 else "an arm ran once: no seeds' spread"
    return difference_of_means(question, a, b, needed=HR_EFFECT, resolution=sampling.high - sampling.estimate,
                           basis=f"{seeds}; evaluation's sampling error, {users:,} users")


# ----------------------------------------------------------------------------- the lesson's time budget

OVERHEAD_S = 4.0  # per run besides its steps: its evaluations (about 4 s a run on a 2-core machine)


def sweep_plan(left_s: float, step_s: float, per_epoch: int, *, full_runs: int, max_epochs: float,
               sweep_epochs: float, max_extensions: int, optimizers: int = 2, grid: int = 3) -> dict:
    """How many lr points the cut sweeps of :func:`course_lib.sweeps.race` can afford in the ``left_s`` seconds the
    lesson has left, after ``full_runs`` runs of ``max_epochs`` (the final runs and the seeds, never cut), at
    ``step_s`` a step: each of the ``optimizers`` grids runs ``grid`` lrs of ``sweep_epochs`` and may extend at its
    edge up to the returned cap (``extensions``, at most ``max_extensions``, down to 0 where the worst case does not
    fit: fewer lr points, never shorter runs). Returns the plan's numbers: ``steps`` of a sweep run, ``extensions``,
    ``reserved_s`` (the full-length runs) and ``planned_s`` (all of it, at the cap)."""
    run_s = lambda epochs: race_steps(epochs, per_epoch) * step_s + OVERHEAD_S  # noqa: E731
    reserved = full_runs * run_s(max_epochs)
    planned = lambda ext: reserved + optimizers * (grid + ext) * run_s(sweep_epochs)  # noqa: E731
    ext = next((e for e in range(max_extensions, 0, -1) if planned(e) <= left_s), 0)
    return {"left_s": left_s, "reserved_s": reserved, "epochs": sweep_epochs,
            "steps": race_steps(sweep_epochs, per_epoch), "extensions": ext, "planned_s": planned(ext)}


def sweep_plan_table(plan: dict) -> Table:
    """:func:`sweep_plan` as a table row."""
    t = Table(["seconds left", "kept for the full-length runs (s)", "sweep run (epochs)", "sweep run (steps)",
               "cap on edge extensions", "planned (s)"], title="The SGD and LARS sweeps, sized to what the budget left")
    t.add(**{"seconds left": round(plan["left_s"]), "kept for the full-length runs (s)": round(plan["reserved_s"]),
             "sweep run (epochs)": plan["epochs"], "sweep run (steps)": plan["steps"],
             "cap on edge extensions": plan["extensions"], "planned (s)": round(plan["planned_s"])})
    return t


def race_steps(epochs: float, per_epoch: int) -> int:
    """The steps a run of ``epochs`` takes: the loop runs whole steps, ``ceil(epochs x per_epoch)``."""
    return max(1, math.ceil(epochs * per_epoch))
