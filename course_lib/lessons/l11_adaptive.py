"""Lesson 11, the adaptive batch: a batch chosen from the noise scale as the run goes, against a fixed batch and
a batch grown at milestones; each switch is compared with the power of two it crossed, at its estimate's error."""

from __future__ import annotations

import math
from itertools import groupby

from .. import batch_science as bs, compare
from ..tables import Table
from .l11_critical_batch import samples_to_target
from .l11_noise_scale import at_its_error

STEPS_EFFECT = 0.05  # a schedule that saves under 5% of the steps (or costs under 5% more samples) changes no choice
SAME_SETTING = ("global_batch_size", "peak_lr", "optimizer", "warmup", "warmup_steps", "decay", "seed", "precision")


def adaptive_batch_policy(base_lr: float, base_batch: int, b_min: int, b_max: int, rule: str = "sqrt",
                          window: int = 3):
    """``adapt_batch``: B_simple over the last ``window`` records (``sum tr(Sigma) / sum |G|^2``: one record's is noisy)
    rounded down to a power of two in ``[b_min, b_max]``, at ``rule``'s lr; ``policy.chosen``/``.estimates`` log it."""
    from ..optim.schedules import LR_RULES

    if rule not in LR_RULES:
        raise ValueError(f"adaptive_batch_policy(rule={rule!r}); choose one of {sorted(LR_RULES)}")
    if not (0 < b_min <= b_max and window >= 1):
        raise ValueError(f"adaptive_batch_policy: need 0 < b_min <= b_max, window >= 1, got {b_min, b_max, window}")
    state = {"batch": b_min, "records": []}

    def policy(record: dict):
        pool = state["records"] = (state["records"] + [record])[-window:]
        g2 = sum(r["grad_sq_norm"] for r in pool)
        b_simple = sum(r["trace_cov"] for r in pool) / g2 if g2 > 0 else math.inf
        batch = state["batch"]
        if math.isfinite(b_simple) and b_simple > 0:
            batch = int(min(b_max, max(b_min, 2 ** math.floor(math.log2(b_simple)))))
        lr = LR_RULES[rule](base_lr, batch, base_batch)
        stderr = (bs.pooled_noise_scale([(r["pairs_g2"], r["pairs_trace"]) for r in pool])[1]
                  if g2 > 0 and all(r.get("pairs_g2") for r in pool) else math.nan)
        policy.chosen.append((record["step"], b_simple, batch, lr))
        policy.estimates.append({"step": record["step"], "b_simple": b_simple, "stderr": stderr,
                                 "before": state["batch"], "batch": batch, "records": len(pool),
                                 "pairs": sum(r.get("repeats") or 0 for r in pool)})
        if batch == state["batch"]:
            return None
        state["batch"] = batch
        return batch, lr

    policy.chosen, policy.estimates = [], []
    return policy


def epoch_budget(max_epochs: float):
    """``stop_early`` after ``max_epochs`` epochs of samples (the loop's steps budget assumes the first batch)."""
    return lambda point: point["epoch"] >= max_epochs


def adaptive_rows(runs: dict, policy, reference=None) -> list[dict]:
    """One row per run (label -> TrainResult, the adaptive one last): steps and samples to the target with their
    resolutions (the last evaluation interval), the batches used; the adaptive row carries the policy's estimates
    and ``reference``'s probe (more pairs) at the first estimate's step where it shares :data:`SAME_SETTING`."""
    from ..sweeps import target_resolution

    ada = list(runs.values())[-1]
    first = policy.estimates[0]["step"] if policy.estimates else None
    same = reference is not None and all(reference.config.get(k) == ada.config.get(k) for k in SAME_SETTING
                                         if k in ada.config)
    ref = next((p for p in reference.probes if p["step"] == first), None) if same else None
    rows = []
    for label, r in runs.items():  # a run grown by :func:`grow_at` records each evaluation's batch
        seq = [c[2] for c in policy.chosen] if r is ada else [p["batch"] for p in r.probes if "batch" in p]
        batches = [b for b, _ in groupby([r.config["global_batch_size"]] + seq)]
        samples, resolution = samples_to_target(r)
        rows.append({"run": label, "reached": r.reached, "steps_to_target": r.steps_to_target, "steps": r.steps,
                     "steps_resolution": target_resolution(r), "samples_to_target": samples, "samples": r.samples,
                     "samples_resolution": resolution, "batches": batches, "final_hr": r.final_hr,
                     **({"estimates": list(policy.estimates), "reference": ref} if r is ada else {})})
    return rows


def _with_error(e: dict) -> str:
    b, se = e["b_simple"], e.get("stderr", math.nan)
    if not math.isfinite(se):  # nan wherever B_simple is inf (|G|^2 <= 0)
        return f"{b:,.0f}" if math.isfinite(b) else "n/a"
    return f"{at_its_error(b, se):,.0f} +/- {at_its_error(se, se):,.0f}"


def adaptive_table(rows: list[dict]) -> Table:
    """The runs to the target, each count with its resolution, and the B_simple estimates the adaptive run followed."""
    t = Table(["run", "batches used", "B_simple by step", "steps to target", "resolution (steps)", "samples to target",
               "resolution (samples)", "final HR@10"])
    for r in rows:
        ok = r["reached"]
        t.add(**{"run": r["run"], "batches used": " -> ".join(f"{b:,}" for b in r["batches"]),
                 "B_simple by step": "; ".join(f"{e['step']:,}: {_with_error(e)}" for e in r.get("estimates") or [])
                                     or "-",
                 "steps to target": r["steps_to_target"] if ok else f"not reached ({r['steps']})",
                 "resolution (steps)": f"{r['steps_resolution']:,}" if ok else "-",
                 "samples to target": f"{r['samples_to_target']:,}" if ok else "not reached",
                 "resolution (samples)": f"{r['samples_resolution']:,}" if ok else "-", "final HR@10": r["final_hr"]})
    return t


def milestones_before(fixed, fractions=(0.5,)) -> tuple:
    """``fractions`` of the epochs the ``fixed`` run took to the target (or ran): the batch grows before it."""
    if not all(0 < f < 1 for f in fractions):
        raise ValueError(f"milestones_before(fractions={fractions}): each must be in (0, 1)")
    span = fixed.epochs_to_target if fixed.reached else fixed.epochs
    return tuple(round(f * span, 3) for f in sorted(fractions))


def grow_at(milestones, factor: float, batch: int, lr: float, max_epochs: float):
    """RunHooks that multiply the batch by ``factor`` (lr kept) at the first evaluation past each milestone (epochs,
    fractions allowed, unlike the config's), record each evaluation's batch, and stop after ``max_epochs``."""
    from ..train import RunHooks

    state = {"batch": batch, "left": sorted(milestones)}

    def grow(record: dict):
        if not state["left"] or record["epoch"] < state["left"][0] - 1e-9:
            return None
        state["left"].pop(0)
        state["batch"] = int(round(state["batch"] * factor))
        return state["batch"], lr

    return RunHooks(on_eval=lambda model, point: {"batch": state["batch"]}, adapt_batch=grow,
                    stop_early=epoch_budget(max_epochs))


def switch_comparisons(estimates: list[dict]) -> list[compare.Comparison]:
    """Each switch of the adaptive batch against the power of two it crossed (up to ``batch``: B_simple had to
    reach it; down: fall below twice ``batch``): decided where it followed B_simple beyond its standard error."""
    out = []
    for e in estimates:
        if e["batch"] != e["before"] and math.isfinite(e["b_simple"]) and math.isfinite(e["stderr"]):
            edge = e["batch"] if e["batch"] > e["before"] else 2 * e["batch"]
            out.append(compare.quantity(f"switch {e['before']:,} -> {e['batch']:,} at step {e['step']:,}",
                                        e["b_simple"], e["stderr"], reference=edge, needed=compare.EXACT,
                                        unit="examples", n=f"{e.get('pairs', 0)} pairs", basis="jackknife"))
    return out


def adaptive_comparisons(rows: list[dict]) -> list[compare.Comparison]:
    """Rows ``fixed, grown, adaptive``: steps and samples, grown over fixed and adaptive over each other run (a grown
    run that reached the target before its milestone is the fixed run); where the adaptive run reached it, its first
    estimate against the reference probe at the same weights, and each switch."""
    fixed, grown, ada = rows
    same = all(grown[k] == fixed[k] for k in ("batches", "steps_to_target", "samples_to_target"))
    pairs = [(grown, fixed), (ada, fixed)] + ([] if same else [(ada, grown)])
    out = []
    for a, r, key in [(a, r, key) for a, r in pairs if a["reached"] and r["reached"] for key in ("steps", "samples")]:
        # each count crossed the target in (count - resolution, count]: both widths, relative, widen the ratio
        res = sum(x[f"{key}_resolution"] / x[f"{key}_to_target"] for x in (a, r))
        out.append(compare.ratio(f"{key} to target, {a['run']} / {r['run']}", [r[f"{key}_to_target"]],
                                 [a[f"{key}_to_target"]], needed=STEPS_EFFECT, resolution=res, basis="eval spacing"))
    if not ada["reached"]:
        return out
    e, ref = (ada.get("estimates") or [None])[0], ada.get("reference")
    if e and ref and all(math.isfinite(x) for x in (e["b_simple"], e["stderr"], ref["b_simple"], ref["stderr"])):
        out.append(compare.difference(f"B_simple at step {e['step']:,}, adaptive - section 1", ref["b_simple"],
                                      ref["stderr"], e["b_simple"], e["stderr"], needed=compare.EXACT,
                                      unit="examples", n=f"{e.get('pairs', 0)}/{ref.get('repeats', 0)} pairs"))
    return out + switch_comparisons(ada.get("estimates") or [])
