"""Lesson 04: why one learning rate cannot serve NeuMF's layers (each layer's gradient against the batch size, an
embedding row's against its frequency), the trust ratios of a LARS run, and the race of optimizers at a large batch
with its verdicts; :func:`sweep_plan` sizes the SGD and LARS sweeps to the budget."""

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
    """``{"layers": [row per (batch, weight matrix)], "rows": {B: (frequency, row gradient norm)}}`` of a fresh NeuMF
    (``cfg.seed``) on one batch per size: ``grad_to_weight`` is ||g|| / ||w|| (the inverse of LARS's trust ratio, up
    to its coefficient); "rows" are the MLP item embedding's rows the batch touched."""
    data = data.to(device)
    out = {"layers": [], "rows": {}}
    for b in batch_sizes:
        torch.manual_seed(cfg.seed)
        model = build_model(data, cfg).to(device)
        batch = next(iter(make_batches(data, cfg.replace(global_batch_size=b))))
        n = batch[0].numel()
        (bce_sum(model, batch) / n).backward()  # the mean loss, as every run trains it
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                w, g = p.detach().norm().item(), p.grad.norm().item()
                out["layers"].append({"batch": n, "layer": name, "grad_to_weight": g / w if w else math.nan})
        counts = torch.bincount(batch[1], minlength=data.num_items)
        touched = counts > 0
        out["rows"][n] = ((counts[touched].float() / n).cpu(), model.mlp_item.weight.grad[touched].norm(dim=1).cpu())
    return out


NOISE_EXPONENT, SIGNAL_EXPONENT = 0.35, 0.15  # between them: a mix of both


def signal_share(change: float, k: float) -> float:
    """The signal's share of ``||g||²`` at the larger of two batches ``k`` times apart whose ``||g||`` fell by
    ``change``: from ``||g||² = S + N / B`` at both, ``(k - change²) / (k - 1)`` clipped to [0, 1]."""
    return min(1.0, max(0.0, (k - change ** 2) / (k - 1))) if k > 1 else math.nan


def layer_scaling(measured: dict) -> Table:
    """Per weight matrix, ``||g|| / ||w||`` at the smallest and largest batch, its fall and that fall's exponent in the
    batch ratio (0.5: 1/sqrt(B), mostly noise; 0: mostly signal), and the large batch's :func:`signal_share`."""
    sizes = sorted({r["batch"] for r in measured["layers"]})
    lo, hi = sizes[0], sizes[-1]
    by = {(r["batch"], r["layer"]): r["grad_to_weight"] for r in measured["layers"]}
    t = Table(["layer", f"B={lo}", f"B={hi}", "fell by", "exponent", "mostly", "signal share"])
    for layer in dict.fromkeys(r["layer"] for r in measured["layers"]):
        a, b = by[(lo, layer)], by[(hi, layer)]
        change = a / b if b else math.inf
        known = hi > lo and 0 < change < math.inf
        exponent = math.log(change) / math.log(hi / lo) if known else math.nan
        regime = "noise" if exponent >= NOISE_EXPONENT else "signal" if exponent <= SIGNAL_EXPONENT else "mixed"
        t.add(layer=layer, **{f"B={lo}": f"{a:.2e}", f"B={hi}": f"{b:.2e}", "fell by": f"{change:.2f}x",
                              "exponent": round(exponent, 2), "mostly": regime if known else "n/a",
                              "signal share": f"{signal_share(change, hi / lo):.0%}" if known else "n/a"})
    return t


def layer_spread(measured: dict) -> list[Estimate]:
    """Per batch size, the largest layer's ``||g|| / ||w||`` over the smallest's: the range one global lr would have
    to serve. One batch each: no standard error."""
    by_b = {}
    for r in measured["layers"]:
        by_b.setdefault(r["batch"], []).append(r["grad_to_weight"])
    return [estimate(f"||g||/||w||, largest layer / smallest, B={b}", max(v) / min(v), math.nan, unit="x",
                     basis="one batch") for b, v in sorted(by_b.items())]


GROWS_SLOPE = 0.5  # per-sample gradients in random directions: a row's gradient grows as a sum of independent ones


def frequency_comparisons(measured: dict) -> list[Comparison]:
    """Per batch size with three distinct frequencies or more, the slope of log(row gradient norm) on log(row
    frequency) against 0: ``higher`` is a row gradient that grows with its frequency (about 1: in proportion)."""
    out = []
    for b, (freq, norm) in sorted(measured["rows"].items()):
        keep = norm > 0
        xs, ys = freq[keep].log().tolist(), norm[keep].log().tolist()
        if len(set(xs)) >= 3:
            out.append(slope(f"log-log slope, row gradient on row frequency, B={b}", xs, ys, needed=GROWS_SLOPE,
                             basis=f"{len(xs)} rows, one batch"))
    return out


def trust_ratio_table(history: dict, rows: dict[str, int] | None = None) -> Table:
    """Each adapted layer's trust ratio over a run (``rows``: how many rows share it). A peak far above the median
    is a stretch where ||g|| nearly vanished; "dead from" is the step from which it sat at exactly 1, the zero-gradient
    fallback, through the run's second half: a layer no gradient reaches (NeuMF's MLP layers die together)."""
    steps, rows = history.get("step", []), rows or {}
    t = Table(["layer", "rows", "first", "median", "peak", "peak/median", "peak step", "last", "dead from"])
    for name, v in sorted(history.get("trust_ratio", {}).items()):
        if v:
            i, median = max(range(len(v)), key=v.__getitem__), sorted(v)[len(v) // 2]
            first = len(v)  # of the trailing run of exactly 1
            while first > 0 and v[first - 1] == 1.0:
                first -= 1
            dead = (steps[first] if first < len(steps) else first) if first <= len(v) // 2 else None
            t.add(layer=name, rows=rows.get(name), first=v[0], median=median, peak=v[i], last=v[-1],
                  **{"peak/median": f"{v[i] / median:.3g}x" if median > 0 else "n/a",
                     "peak step": steps[i] if i < len(steps) else i, "dead from": dead})
    return t


def plot_row_gradients(measured: dict, ax=None):
    """Each touched item-embedding row's gradient norm against its frequency in the batch, per batch size."""
    ax = ax or plt.subplots(figsize=(6.4, 4))[1]
    for b, (freq, norm) in sorted(measured["rows"].items()):
        ax.loglog(freq.numpy(), norm.numpy(), ".", ms=3, alpha=0.5, label=f"batch {b}")
    ax.set(xlabel="row frequency (count / B)", ylabel="row gradient norm", title="Item-embedding rows")
    ax.legend(fontsize=8, markerscale=3)
    return ax.figure


COLLAPSE_TOLERANCE = 0.005  # |final training loss - label entropy| of a run that predicts one constant


def collapsed(r) -> bool:
    """A run that did not blow up and ended within :data:`COLLAPSE_TOLERANCE` of the labels' entropy (1 positive in
    ``neg_per_pos + 1``): a constant predictor that learned only the share of positives."""
    loss = ((r.curve or {}).get("loss") or [None])[-1]
    p = 1 / (r.config.get("neg_per_pos", 4) + 1)
    entropy = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    return not blew_up(r) and loss is not None and abs(loss - entropy) <= COLLAPSE_TOLERANCE


def still_rising(r) -> bool:
    """Whether the run's last evaluation is its best and above the one before: the race ended it still improving."""
    hrs = [x for x in (getattr(r, "curve", None) or {}).get("hr", []) if x is not None]
    return len(hrs) >= 2 and not getattr(r, "diverged", False) and hrs[-1] > hrs[-2] and hrs[-1] >= max(hrs)


def _best_hr(r) -> float:
    return r.best_hr if r.best_hr is not None else (r.final_hr or 0.0)


def _by_optimizer(results) -> dict[str, tuple[list, list]]:
    """``{optimizer: (its lr grid: its cut runs, full-length runs)}``, each all its runs where it has none."""
    out = {}
    for r in results:
        out.setdefault(r.config["optimizer"], []).append(r)
    return {opt: ([r for r in runs if r.config.get("max_steps") is not None] or runs,
                  [r for r in runs if r.config.get("max_steps") is None] or runs) for opt, runs in out.items()}


def full_length(results, labels) -> tuple[list, list]:
    """The race's runs and labels without the sweeps' cut runs (an optimizer with none keeps them all)."""
    keep = {id(r) for _, full in _by_optimizer(results).values() for r in full}
    pairs = [(r, label) for r, label in zip(results, labels) if id(r) in keep]
    return [r for r, _ in pairs], [label for _, label in pairs]


def best_runs(results) -> dict:
    """Per optimizer, its full-length run fastest to the target, else its highest HR@10 that did not blow up; None
    where every lr blew up (ranking those would rank chance-level noise)."""
    out = {}
    for opt, (_, runs) in _by_optimizer(results).items():
        reached = [r for r in runs if r.time_to_target_s is not None]
        trained = [r for r in runs if not blew_up(r)]
        out[opt] = (min(reached, key=lambda r: r.time_to_target_s) if reached
                    else max(trained, key=_best_hr) if trained else None)
    return out


def _lrs(runs) -> str:
    return ", ".join(f"{r.config['peak_lr']:.3g}" for r in sorted(runs, key=lambda r: r.config["peak_lr"])) or "—"


def race_table(results, *, caps: dict[str, int]) -> Table:
    """Per optimizer: its grid's lrs (and cut steps), best lr, whether bracketed or at an edge after its cap of
    extensions (``caps``), its best full-length run's result, and the lrs that blew up or :func:`collapsed`."""
    grids = _by_optimizer(results)
    t = Table(["optimizer", "lrs", "sweep steps", "best lr", "bracketed", "to target (s)", "best HR@10", "rising",
               "blew up at", "collapsed at"])
    for opt, best in best_runs(results).items():
        grid = grids[opt][0]
        lrs = sorted(r.config["peak_lr"] for r in grid)
        top = min(grid, key=race_rank).config["peak_lr"]
        edge = top in (lrs[0], lrs[-1])
        bracketed = "one lr" if len(lrs) < 2 else f"no (edge, cap {caps.get(opt, 0)})" if edge else "yes"
        reached = best is not None and best.time_to_target_s is not None
        rising = not reached and best is not None and still_rising(best)
        t.add(optimizer=opt, lrs=_lrs(grid), bracketed=bracketed, rising=rising,
              **{"sweep steps": grid[0].config.get("max_steps") or "full", "best lr": best and f"{top:.3g}",
                 "to target (s)": best.time_to_target_s if reached else "not reached",
                 "best HR@10": best and _best_hr(best), "blew up at": _lrs([r for r in grid if blew_up(r)]),
                 "collapsed at": _lrs([r for r in grid if collapsed(r)])})
    return t


def _hr_difference(question: str, a: float, b: float, users: int) -> Comparison:
    return difference(question, a, hr_standard_error(a, users), b, hr_standard_error(b, users), needed=HR_EFFECT,
                      n="1/1", basis=f"evaluation's sampling error, {users:,} users")


def race_comparisons(results, *, floor_hr: float, users: int) -> list[Comparison]:
    """Per optimizer whose best run missed the target: its best HR@10 against the popularity ranking's (``floor_hr``),
    to the evaluation's sampling error; ``lower`` or ``same``: it learned no more than item popularity."""
    return [_hr_difference(f"best HR@10, {opt} lr {best.config['peak_lr']:.3g} - popularity ranking", floor_hr,
                           _best_hr(best), users)
            for opt, best in best_runs(results).items() if best is not None and best.time_to_target_s is None]


def rescue_comparison(plain_runs, layerwise_runs, *, users: int) -> Comparison | None:
    """Mean best HR@10 of ``layerwise_runs`` (a run per seed) minus ``plain_runs``': the seeds' spread widened by the
    evaluation's sampling error (the same users at every seed: their spread does not hold it). None if one blew up."""
    if not plain_runs or not layerwise_runs or blew_up(plain_runs[0]) or blew_up(layerwise_runs[0]):
        return None
    a, b = [_best_hr(r) for r in plain_runs], [_best_hr(r) for r in layerwise_runs]
    p, q = plain_runs[0].config, layerwise_runs[0].config
    question = f"best HR@10, {q['optimizer']} lr {q['peak_lr']:.3g} - {p['optimizer']} lr {p['peak_lr']:.3g}"
    sampling = _hr_difference(question, sum(a) / len(a), sum(b) / len(b), users)
    seeds = f"{len(a)} and {len(b)} seeds" if min(len(a), len(b)) > 1 else "one run per arm"
    return difference_of_means(question, a, b, needed=HR_EFFECT, resolution=sampling.high - sampling.estimate,
                               basis=f"{seeds}; evaluation's sampling error, {users:,} users")


OVERHEAD_S = 4.0  # per run besides its steps: its evaluations (about 4 s a run on a 2-core machine)


def sweep_plan(left_s: float, step_s: float, per_epoch: int, *, full_runs: int, max_epochs: float,
               sweep_epochs: float, max_extensions: int, optimizers: int = 2, grid: int = 3) -> dict:
    """How many lr points the cut sweeps can afford in ``left_s`` after ``full_runs`` uncut runs: each of the
    ``optimizers`` grids runs ``grid`` lrs of ``sweep_epochs`` plus up to ``extensions`` at its edge, the cap lowered
    (to 0) until the worst case fits: fewer lr points, never shorter runs."""
    steps = lambda epochs: max(1, math.ceil(epochs * per_epoch))  # the loop runs whole steps
    run_s = lambda epochs: steps(epochs) * step_s + OVERHEAD_S
    reserved = full_runs * run_s(max_epochs)
    planned = lambda ext: reserved + optimizers * (grid + ext) * run_s(sweep_epochs)
    ext = next((e for e in range(max_extensions, 0, -1) if planned(e) <= left_s), 0)
    return {"left (s)": round(left_s), "uncut runs (s)": round(reserved), "sweep epochs": sweep_epochs,
            "sweep steps": steps(sweep_epochs), "extension cap": ext, "planned (s)": round(planned(ext))}
