"""Lesson 11, the adaptive batch: a batch chosen from the noise scale as the run goes, against a fixed batch and
a batch grown at milestones.

The three runs are compared on steps and samples to the target, each count known to its last evaluation
interval; each switch of the adaptive batch is compared with the power of two it crossed, at the standard
error of the estimate that made it.
"""

from __future__ import annotations

import math

from .. import batch_science as bs
from .. import compare
from ..tables import Table
from .l11_critical_batch import samples_resolution, samples_to_target
from .l11_noise_scale import at_its_error, sig
from .l11_sharpness import batch_at

STEPS_EFFECT = 0.05  # a schedule that saves under 5% of the steps (or costs under 5% more samples) changes no choice
# what a run must share with the adaptive run's setting for its probe to stand beside the adaptive run's first one
SAME_SETTING = ("global_batch_size", "peak_lr", "optimizer", "warmup", "warmup_steps", "decay", "seed", "precision")


def _with_error(e: dict) -> str:
    if not math.isfinite(e["b_simple"]):
        return "n/a"
    if not math.isfinite(e.get("stderr", math.nan)):
        return f"{e['b_simple']:,.0f}"
    return f"{at_its_error(e['b_simple'], e['stderr']):,.0f} +/- {sig(e['stderr']):,.0f}"

def adaptive_batch_policy(base_lr: float, base_batch: int, b_min: int, b_max: int, rule: str = "sqrt",
                          window: int = 3):
    """``adapt_batch`` for the training loop: from the noise-scale records, the batch ``B = B_simple`` rounded
    down to a power of two and kept within ``[b_min, b_max]``, and the lr the lesson's rule gives at that batch
    (``rule``: "sqrt" or "linear", from ``base_lr`` at ``base_batch``). ``B_simple`` is the current one over the
    last ``window`` records, ``sum tr(Sigma) / sum |G|^2`` (numerator and denominator averaged apart, as
    McCandlish et al. do: one record's ratio is noisy, and its ``|G|^2`` can come out negative); an estimate
    that is not a positive number keeps the current batch. ``policy.chosen`` lists ``(step, B_simple, batch,
    lr)`` at every record; ``policy.estimates`` the same with the estimate's standard error (the jackknife over
    all the pool's gradient pairs, :func:`_pooled_stderr`) and its pairs: a few pairs' estimate is noisy, and
    :func:`switch_comparisons` reads each switch against that error."""
    from ..optim.schedules import LR_RULES

    if rule not in LR_RULES:
        raise ValueError(f"adaptive_batch_policy(rule={rule!r}); choose one of {sorted(LR_RULES)}")
    if not 0 < b_min <= b_max:
        raise ValueError(f"adaptive_batch_policy: need 0 < b_min <= b_max, got b_min={b_min}, b_max={b_max}")
    if window < 1:
        raise ValueError(f"adaptive_batch_policy(window={window}): need at least one record")
    state = {"batch": b_min, "records": []}

    def policy(record: dict):
        state["records"] = (state["records"] + [record])[-window:]
        g2 = sum(r["grad_sq_norm"] for r in state["records"])
        b_simple = sum(r["trace_cov"] for r in state["records"]) / g2 if g2 > 0 else math.inf
        batch = state["batch"]
        if math.isfinite(b_simple) and b_simple > 0:
            batch = int(min(b_max, max(b_min, 2 ** math.floor(math.log2(b_simple)))))
        lr = LR_RULES[rule](base_lr, batch, base_batch)
        policy.chosen.append((record["step"], b_simple, batch, lr))
        policy.estimates.append({"step": record["step"], "b_simple": b_simple,
                                 "stderr": _pooled_stderr(state["records"], g2), "before": state["batch"],
                                 "batch": batch, "pairs": sum(r.get("repeats") or 0 for r in state["records"]),
                                 "records": len(state["records"])})
        changed = batch != state["batch"]
        state["batch"] = batch
        return (batch, lr) if changed else None

    policy.chosen = []
    policy.estimates = []
    return policy


def _pooled_stderr(records: list[dict], g2: float) -> float:
    """The standard error of ``sum tr(Sigma) / sum |G|^2`` over ``records``: the jackknife over every gradient pair
    of the pool (:func:`course_lib.batch_science.pooled_noise_scale`, from each record's ``pairs_g2`` and
    ``pairs_trace``); nan where a record does not carry its pairs or the pooled ``|G|^2`` is not positive."""
    if not g2 > 0 or any(not r.get("pairs_g2") for r in records):
        return math.nan
    return bs.pooled_noise_scale([(r["pairs_g2"], r["pairs_trace"]) for r in records])[1]


def epoch_budget(max_epochs: float):
    """``stop_early`` for the adaptive run: stop at the first evaluation point past ``max_epochs`` epochs of
    samples (the loop's steps budget assumes the first batch throughout, so alone it would train longer)."""
    return lambda point: point["epoch"] >= max_epochs


def adaptive_rows(runs: dict, policy=None, reference=None) -> list[dict]:
    """One row per run (label -> TrainResult; the adaptive one last, with its ``policy``): steps and samples to
    the target, each with its resolution (the last evaluation interval before it), and the batches it used (the
    adaptive run's in the order the policy chose them). ``reference``: a run whose noise-scale probes were measured
    with more pairs (section 1's); where it started in the adaptive run's setting, its probe at the adaptive run's
    first estimate (same weights: no switch yet) is kept beside that estimate (:func:`reference_comparison`)."""
    from ..sweeps import target_resolution

    ref = None
    if policy is not None and reference is not None and runs and getattr(policy, "estimates", None):
        first, ada_cfg = policy.estimates[0], list(runs.values())[-1].config
        same = all(reference.config.get(k) == ada_cfg.get(k) for k in SAME_SETTING if k in ada_cfg)
        ref = next((p for p in reference.probes if p["step"] == first["step"]), None) if same else None
    rows = []
    for n, (label, r) in enumerate(runs.items()):
        if policy is not None and n == len(runs) - 1:
            batches = [r.config["global_batch_size"]]
            for _, _, b, _ in policy.chosen:
                if b != batches[-1]:
                    batches.append(b)
        elif any("batch" in p for p in r.probes):  # grown by hooks (:func:`grow_at`): the batch of each evaluation
            batches = list(dict.fromkeys(p["batch"] for p in r.probes))
        else:
            batches = sorted({batch_at(r.config, e) for e in range(int(math.ceil(r.epochs or 1)))})
        rows.append({"run": label, "reached": r.reached, "steps_to_target": r.steps_to_target,
                     "samples_to_target": samples_to_target(r), "batches": batches, "final_hr": r.final_hr,
                     "steps": r.steps, "samples": r.samples, "steps_resolution": target_resolution(r),
                     "samples_resolution": samples_resolution(r),
                     **({"estimates": list(getattr(policy, "estimates", [])), "reference": ref}
                        if policy is not None and n == len(runs) - 1 else {})})
    return rows


def _resolved(rows: list[dict]) -> bool:
    """Every run that reached the target carries its resolutions (rows from :func:`adaptive_rows`)."""
    return all(r.get("steps_resolution") and r.get("samples_resolution") for r in rows if r["reached"])


def adaptive_table(rows: list[dict]) -> Table:
    """The three runs to the target; with the adaptive run's estimates (:func:`adaptive_rows`), the B_simple it
    followed at each evaluation with its standard error."""
    res = any(r["reached"] for r in rows) and _resolved(rows)
    est = any(r.get("estimates") for r in rows)
    col = "B_simple it followed, by step (+/- stderr)"
    t = Table(["run", "batches used"] + ([col] if est else []) + ["steps to target"]
              + (["resolution (steps)"] if res else [])
              + ["samples to target"] + (["resolution (samples)"] if res else []) + ["final HR@10"],
              title="to the target: a fixed batch, the batch grown at milestones, the batch from the noise scale"
              + (" (each count known to its last evaluation interval, the resolution)" if res else ""))
    for r in rows:
        t.add(**{"run": r["run"], "batches used": " -> ".join(f"{b:,}" for b in r["batches"]),
                 **({col: "; ".join(f"{e['step']:,}: {_with_error(e)}" for e in r.get("estimates") or []) or "-"}
                    if est else {}),
                 "steps to target": r["steps_to_target"] if r["reached"] else f"not reached ({r['steps']})",
                 **({"resolution (steps)": f"{r['steps_resolution']:,}" if r["reached"] else "-"} if res else {}),
                 "samples to target": f"{r['samples_to_target']:,}" if r["reached"] else "not reached",
                 **({"resolution (samples)": f"{r['samples_resolution']:,}" if r["reached"] else "-"} if res else {}),
                 "final HR@10": r["final_hr"]})
    return t


def milestones_before(fixed, fractions=(0.5,)) -> tuple:
    """The grown run's milestones, in epochs: ``fractions`` of the epochs the ``fixed`` run (a TrainResult at the
    first batch) took to the target, or of the epochs it ran where it missed it, so the batch grows before the
    target is reached and the grown run is not the fixed one again."""
    if not all(0 < f < 1 for f in fractions):
        raise ValueError(f"milestones_before(fractions={fractions}): each must be in (0, 1)")
    span = fixed.epochs_to_target if fixed.reached else fixed.epochs
    return tuple(round(f * span, 3) for f in sorted(fractions))


def grow_at(milestones, factor: float, batch: int, lr: float, max_epochs: float):
    """RunHooks for a batch multiplied by ``factor`` at each milestone (epochs, fractions allowed: the config's
    ``milestones`` take whole epochs only, and a target reached within the first epoch needs them earlier), at the
    first evaluation at or past it, the lr kept (``lr``); each evaluation's record carries the batch it trained at.
    The run ends after ``max_epochs`` epochs of samples (:func:`epoch_budget`)."""
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


def milestone_comparisons(rows: list[dict]) -> list[compare.Comparison]:
    """The batch grown at milestones (the second row) against the fixed batch (the first): its steps and samples
    to the target over the fixed run's, each known to its last evaluation interval ("lower": growing the batch
    reached the target in fewer steps, or samples, by more than :data:`STEPS_EFFECT`). Empty where either missed
    the target."""
    fixed, grown = rows[0], rows[1]
    if not (fixed["reached"] and grown["reached"] and _resolved(rows[:2])):
        return []
    return [_count_ratio(f"{key} to target, {grown['run']} / {fixed['run']}", grown, fixed, key)
            for key in ("steps", "samples")]


def _same_run(r: dict, q: dict) -> bool:
    """Two rows that are one run up to the target: a grown batch that reached it before its first milestone."""
    return all(r[k] == q[k] for k in ("batches", "steps_to_target", "samples_to_target"))


def _count_ratio(question: str, ada: dict, r: dict, key: str) -> compare.Comparison:
    """The adaptive run's count over ``r``'s, each known to its last evaluation interval (the target was crossed in
    ``(count - resolution, count]``): both intervals' relative widths as the ratio's resolution."""
    res = sum((x[f"{key}_resolution"] or 0) / x[f"{key}_to_target"] for x in (ada, r))
    return compare.ratio(question, [r[f"{key}_to_target"]], [ada[f"{key}_to_target"]], needed=STEPS_EFFECT,
                         resolution=res, basis="one run each; each count known to its last evaluation interval")


def switch_comparisons(estimates: list[dict]) -> list[compare.Comparison]:
    """Each switch of the adaptive batch against the power of two it crossed: up to ``batch``, the estimate had to
    reach ``batch``; down, to fall below twice ``batch``. "higher" (up) or "lower" (down): the switch followed
    B_simple beyond its standard error; "unresolved": it followed the estimator's noise."""
    out = []
    for e in estimates:
        if e["batch"] == e["before"] or not (math.isfinite(e["b_simple"]) and math.isfinite(e["stderr"])):
            continue
        edge = e["batch"] if e["batch"] > e["before"] else 2 * e["batch"]
        out.append(compare.quantity(f"switch {e['before']:,} -> {e['batch']:,} at step {e['step']:,}: B_simple "
                                    f"against {edge:,}", e["b_simple"], e["stderr"], reference=edge,
                                    needed=compare.EXACT, unit="examples", n=f"{e.get('pairs', 0)} pairs",
                                    basis="jackknife over the pooled gradient pairs"))
    return out


def reference_comparison(estimates: list[dict], ref: dict | None) -> compare.Comparison | None:
    """The adaptive run's first estimate against the reference probe at the same step and weights (section 1's,
    more pairs), any resolved difference counting: "higher"/"lower" says the few pairs' standard error understates
    their scatter, and the switches' comparisons cannot be read at their stated errors."""
    if not estimates or not ref:
        return None
    e = estimates[0]
    if not all(math.isfinite(x) for x in (e["b_simple"], e["stderr"], ref["b_simple"], ref["stderr"])):
        return None
    return compare.difference(f"B_simple at step {e['step']:,}: adaptive run's estimate - section 1's",
                              ref["b_simple"], ref["stderr"], e["b_simple"], e["stderr"], needed=compare.EXACT,
                              unit="examples", n=f"{e.get('pairs', 0)}/{ref.get('repeats', 0)} pairs",
                              basis="both probes' standard errors")


def adaptive_comparisons(rows: list[dict]) -> list[compare.Comparison]:
    """The adaptive run (the last row) against each other run that reached the target and is not the same run as
    an earlier one: its steps and its samples to the target, each ratio with the evaluation spacing's interval;
    then its first estimate against the reference and each switch against the power of two it crossed."""
    ada = rows[-1]
    if not (ada["reached"] and _resolved(rows)):
        return []
    out, seen = [], []
    for r in rows[:-1]:
        if not r["reached"] or any(_same_run(r, q) for q in seen):
            continue
        seen.append(r)
        out += [_count_ratio(f"{key} to target, adaptive / {r['run']}", ada, r, key) for key in ("steps", "samples")]
    ref = reference_comparison(ada.get("estimates") or [], ada.get("reference"))
    return out + ([ref] if ref else []) + switch_comparisons(ada.get("estimates") or [])
