"""Lesson 03, warmup: warmup against none, read against the seeds' noise.
"""

from __future__ import annotations
from ..sweeps import race_score, target_resolution


def _fewer_steps_clause(best, warm) -> str:
    """When another warmup run reached the target in fewer steps than the one the clock ranks first, what that means
    (read r6a 03-1, sixth full run: "best warmup: linear warmup, 38 steps, reached the target in 6.5 s (96 steps)"
    over the 19-step warmup's 95 steps in 7.877 s; the runs' steps took 0.067 and 0.083 s): at one batch and peak lr a
    step costs the same whatever the warmup, so the clock ranked the pace the runs ran at (the kind of read r5a 04-1,
    fixed for lesson 04's lrs). The pace is quoted as s per step, time to target / steps to target (two cells of the
    sweep table)."""
    if best.steps_to_target is None or best.time_to_target_s is None:
        return ""
    fewer = [(r, lab) for r, lab in warm if r.steps_to_target is not None and r.time_to_target_s is not None
             and r.steps_to_target < best.steps_to_target]
    if not fewer:
        return ""
    least, label = min(fewer, key=lambda rl: (rl[0].steps_to_target, rl[0].time_to_target_s))
    pace = lambda r: r.time_to_target_s / r.steps_to_target  # noqa: E731 (s per step: two cells of one row)
    return (f"; but {label} reached it in fewer steps ({least.steps_to_target}, in {least.time_to_target_s:.1f} s): "
            "at one batch and peak lr a step costs the same whatever the warmup, so the clock ranked these runs by the "
            f"pace their steps ran at ({pace(best):.3f} against {pace(least):.3f} s per step), not by their warmup: "
            "which warmup is best is not resolved here")


def _steps_verdict(best, base) -> str:
    """Warmup against none in steps to target, as far as the evaluations resolve it (r7a, seventh full run, seen in 03
    cell 11: "On this seed warmup took fewer steps" for 95 against 100 steps, 1.3 near-target evaluation intervals; a
    5 % margin alone would say so of 38 against 40 steps an interval of 4 apart). A run's steps to target lie between
    the evaluation before the one that reached it and that one (:func:`course_lib.sweeps.target_resolution`): one run
    took fewer only where its window ends before the other's begins. A run whose curve does not hold its evaluation
    points is read with a 5 % margin."""
    def window(r):
        steps = (getattr(r, "curve", None) or {}).get("step", [])
        return target_resolution(r) if r.steps_to_target in steps[1:] else None

    w_best, w_base = window(best), window(base)
    if w_best is None or w_base is None:
        ratio = base.steps_to_target / max(best.steps_to_target, 1)
        return ("warmup took fewer steps" if ratio > 1.05 else "warmup cost steps" if ratio < 0.95
                else "no difference in steps to target")
    if best.steps_to_target <= base.steps_to_target - w_base:
        return "warmup took fewer steps"
    if base.steps_to_target <= best.steps_to_target - w_best:
        return "warmup cost steps"
    return "no difference in steps to target that the evaluations resolve"


def _pace_clause(best, base) -> str:
    """Where the time ratio is not the steps' (by more than 10 %), what the rest of it is (read r8a 03-1, eighth full
    run: "without it 1.05x the steps and 1.49x the time" over 14.51 s / 100 steps and 9.764 s / 95): at one batch and
    peak lr a step costs the same whatever the warmup, so the rest is the pace the runs' steps ran at, in s per step
    (time to target / steps to target: two cells of each row of the sweep table)."""
    per_best, per_base = best.time_to_target_s / best.steps_to_target, base.time_to_target_s / base.steps_to_target
    if max(per_best, per_base) <= 1.1 * min(per_best, per_base):
        return ""
    return (f"; a step costs the same with or without warmup at one batch and peak lr, so the time beyond the steps' "
            f"is the pace the runs' steps ran at ({per_base:.3f} s per step without warmup, {per_best:.3f} with it), "
            "not warmup's")


def _edge_clause(best, base, lengths, others) -> str:
    """Whether the best warmup's length sits at an edge of the lengths of its kind that ran, the run without warmup
    counted as length 0 (read f12b 03-H2, twelfth full run: "best warmup: linear warmup, 19 steps (the edge of the
    lengths tried: a better one may lie beyond)" where the shortest warmup's "beyond" was measured: no warmup, 0
    steps, 9.955 s / 100 steps against 19 steps' 9.371 s / 95 and 38 steps' 9.579 s / 96). Only the longest length is
    an edge then; the shortest is bracketed by no warmup and the next length when both did worse, and where no
    warmup did better, shorter was better still: the edge is no warmup's, which the rest of the line reads."""
    n = best.config["warmup_steps"]
    if len(lengths) < 2:
        return ""
    if n == lengths[-1]:
        return " (the edge of the lengths tried: a better one may lie beyond)"
    if n != lengths[0]:
        return ""
    if race_score(base) < race_score(best):
        return " (the shortest tried; no warmup, shorter still, did better on this seed)"
    nxt = next(r for r in others if r.config["warmup_steps"] == lengths[1])
    worse = race_score(base) > race_score(best) and race_score(nxt) > race_score(best)
    return f" (between no warmup and {lengths[1]} steps, {'both worse' if worse else 'neither better'} on this seed)"


def warmup_reading(results, labels, *, baseline_label: str = "no warmup") -> str:
    """Warmup against none, read from the runs (lesson 03): the best warmup run (by ``race_score``),
    its length (flagged at the edge of the lengths tried, no warmup counted as 0: :func:`_edge_clause`), and what
    it changed against the run without warmup: time to target, or reaching it at all."""
    base = next(r for r, lab in zip(results, labels) if lab == baseline_label)
    warm = [(r, lab) for r, lab in zip(results, labels) if lab != baseline_label]
    if not warm:
        return "no warmup run to compare"
    best, label = min(warm, key=lambda rl: race_score(rl[0]))
    kind = [r for r, _ in warm if r.config["warmup"] == best.config["warmup"]]  # the best's kind of warmup
    edge = _edge_clause(best, base, sorted({r.config["warmup_steps"] for r in kind}), kind)

    def did(r):
        if r.time_to_target_s is not None:
            return f"reached the target in {r.time_to_target_s:.1f} s ({r.steps_to_target} steps)"
        if r.diverged:
            return "diverged"
        return f"did not reach the target (best HR@10 {r.best_hr or 0.0:.3f})"

    fewer = _fewer_steps_clause(best, warm)  # read r6a 03-1: the clock's best is not the fewest steps
    line = f"best warmup: {label}{edge}, {did(best)}{fewer}; without warmup the run {did(base)}"
    if best.time_to_target_s is not None and base.time_to_target_s is not None:
        ratio = base.time_to_target_s / best.time_to_target_s
        steps = base.steps_to_target / max(best.steps_to_target, 1)
        verdict = _steps_verdict(best, base)
        line += (f". On this seed {verdict}: without it {steps:.2f}x the steps and {ratio:.2f}x the time"
                 + _pace_clause(best, base) + " (one seed: the comparison at two seeds decides)")
    elif best.time_to_target_s is not None:
        line += ". Warmup is what made this batch reach the target at all."
    elif base.time_to_target_s is not None:
        line += ". Warmup did not help at this batch: the run without it reached the target."
    else:
        line += ". Neither reached the target: this batch needs more than warmup (lesson 04)."
    return line


def first_eval_loss(r) -> float | None:
    """The training loss at a run's first evaluation (``curve["loss"][1]``; index 0 is before training), or None."""
    loss = (getattr(r, "curve", None) or {}).get("loss", [])
    return loss[1] if len(loss) > 1 else None


def _first_losses(runs) -> list[float]:
    return [x for x in map(first_eval_loss, runs) if x is not None]


def _spread(losses: list[float]) -> str:
    """One run's loss, or the seeds' lowest to highest."""
    lo, hi = f"{min(losses):.3f}", f"{max(losses):.3f}"
    return lo if lo == hi else f"{lo} to {hi} over {len(losses)} seeds"


def deciding_table(decide, rung: str):
    """The deciding comparison seed by seed (:meth:`course_lib.sweeps.Confirmed.table`, ``rung`` marked), with
    the loss at each run's first evaluation: the takeaway quotes it as the evidence that nothing blew up (#37
    item 1: a reading quotes the table printed under it)."""
    t = decide.table(chosen=rung)
    t.columns = t.columns + ["loss at the first evaluation"]
    runs = [r for label in decide.labels for r in decide.runs_of(label)]  # the order Confirmed.table adds them
    for row, r in zip(t.rows, runs):
        row["loss at the first evaluation"] = first_eval_loss(r)
    return t


def _fewer_steps_on_every_seed(warm, base) -> bool:
    """Whether the warmup runs reached the target in fewer steps than the runs without, seed by seed (the runs of
    :meth:`course_lib.sweeps.Confirmed.runs_of` come in the order of the seeds)."""
    pairs = list(zip(warm, base))
    return bool(pairs) and all(w.steps_to_target is not None and b.steps_to_target is not None
                               and w.steps_to_target < b.steps_to_target for w, b in pairs)


def takeaway(decide, rung: str, baseline_label: str = "no warmup") -> str:
    """Lesson 03's takeaway on what warmup did, generated from the lesson's one verdict (#37 item 6):
    ``decide`` is the deciding comparison (:func:`course_lib.sweeps.confirm`), ``rung`` the chosen warmup
    run. Where the effect the literature reports did not show here, it says what the literature reports
    (quoted) and what this machine's runs showed instead. Its numbers are cells of :func:`deciding_table`
    (the first evaluation's loss: every seed's, lowest to highest), the verdict's means of them, or the
    quoted paper's."""
    won = decide.winner(rung, baseline_label)
    verdict = decide.compare(rung, baseline_label)
    base, warm = decide.runs_of(baseline_label), decide.runs_of(rung)
    blew_up = [r for r in base if r.diverged]
    # what the paper reports, not a quote of it: the linear scaling rule breaks down in the first epochs, while the
    # network changes rapidly, and a gradual warmup fixed that (a reader found "because the scaled lr blew up the
    # first steps" here, which the paper does not say)
    quoted = ("Goyal et al. (2017) report a 5-epoch gradual warmup for ResNet-50 at batch 8192: without it the linear "
              "scaling rule broke down in the first epochs, while the network changes rapidly")
    if won == rung and blew_up:
        return (f"Here warmup stopped a blow-up: without it the run diverged on {len(blew_up)} of {len(base)} seeds, "
                f"with it ({rung}) it did not ({verdict}). {quoted}; here the early steps without it diverged.")
    steps_known = all(getattr(r, "steps_to_target", None) is not None for r in [*warm, *base])
    if won == rung and steps_known and not _fewer_steps_on_every_seed(warm, base):
        # read r3a 03-1 (full run 2026-12-01, /tmp/mc3): faster on the clock on both seeds (9.87 / 9.16 s vs 11.72 /
        # 10.80 s) in 95 / 96 steps against 100 / 92: the time it saved was the pace its steps ran at, not warmup's
        def steps(runs):
            return ", ".join(str(r.steps_to_target) for r in runs)

        def pace(runs):
            return ", ".join(f"{r.time_to_target_s / r.steps_to_target:.3f}" for r in runs)

        return (f"Here warmup was faster on the clock on every seed ({verdict}), but not in steps: {steps(warm)} "
                f"steps to the target with it, {steps(base)} without. A warmup does not make a step cheaper, so the "
                f"seconds it saved are the pace its steps ran at (s per step: {pace(warm)} with it, {pace(base)} "
                f"without), not its effect on training; nothing blew up without it. {quoted}; here warmup showed no "
                "effect on the steps to the target.")
    if won == rung:
        return (f"Here warmup helped beyond the seeds' noise ({verdict}); nothing blew up without it, so what it "
                f"bought was a faster start, not stability. {quoted}.")
    if won == baseline_label:
        return (f"Here warmup cost time ({verdict}): the run without it did not blow up, and a warmup only spends "
                f"steps at a small lr. {quoted}; at this batch and lr the scaled step was already safe, so the "
                "next lessons build on the best rung below instead.")
    lb, lw = _first_losses(base), _first_losses(warm)
    # every seed's, as the table under it prints them (read r9a 03-C1, ninth full run: "0.505 without warmup, 0.611
    # with it" quoted the lower seed of 0.5081 / 0.5054 and 0.6203 / 0.6114 without saying so)
    start = (f" (loss at the first evaluation: {_spread(lb)} without warmup, {_spread(lw)} with it)"
             if lb and lw else "")
    # the verdict's own words, not said twice: noise_verdict words it "no measurable difference: the seeds disagree
    # (...)" or "no measurable difference (..., within the seed range ...)" (read r8a 03-2, eighth full run: "Here
    # warmup made no measurable difference (no measurable difference (time to target: ...)): without it ...")
    # read r10b 03-S1 (tenth full run): "no measurable difference (the seeds disagree (time to target: ...)): without
    # it": the seeds' words follow a colon, as the verdict says them, not a second pair of parentheses
    said = verdict.removeprefix("no measurable difference: ").removeprefix("no measurable difference ")
    said = (f"{said}:" if said.startswith("(") and said.endswith(")") else
            f": {said};" if verdict.startswith("no measurable difference: ") else f"({said}):")
    said = said if said.startswith(":") else f" {said}"
    return (f"Here warmup made no measurable difference{said} without it nothing blew up{start}. {quoted}; "
            "with Adam at this batch and lr the scaled step was already safe on this machine, so warmup keeps its "
            "rung as measured, and the next lessons build on the best rung below it.")


def chosen_verdict(decide, rung: str, baseline_label: str = "no warmup") -> str:
    """The ``chosen:`` line over the deciding comparison (notebook 03): the chosen warmup ``rung`` against no warmup,
    and, where another warmup was compared at every seed too, whether the choice among the warmups is resolved.

    Read f12b 03-H1 (twelfth full run): "chosen: linear warmup, 38 steps; no measurable difference: the seeds
    disagree (... vs no warmup ...)" over the 19-step warmup at 9.371 s / 95 steps and 9.914 s / 96 against the
    38-step one's 9.579 s / 96 and 9.547 s / 100: means 0.08 s apart, the seeds disagreeing on which was faster, and
    the 19-step warmup in fewer steps on both seeds. The line compared the chosen warmup with none only, while the
    ladder recorded "linear warmup 38 steps" as if measured the better length. Where the runner-up warmup
    (:meth:`course_lib.sweeps.Confirmed.best_of` of the others) is level with it
    (:meth:`~course_lib.sweeps.Confirmed.winner` is None), a second line says so: the rung records the faster mean,
    and the runner-up's steps when they were fewer on every seed."""
    line = f"chosen: {rung}; {decide.compare(rung, baseline_label)}"
    others = [label for label in decide.labels if label not in (rung, baseline_label)]
    if not others:
        return line
    other = decide.best_of(others)
    if decide.winner(rung, other) is not None:
        return line
    line += (f"\nover {other}: {decide.compare(rung, other)}; the rung records the faster mean time, not a warmup "
             "measured better")
    mine, theirs = decide.runs_of(rung), decide.runs_of(other)
    if _fewer_steps_on_every_seed(theirs, mine):
        line += (f", and {other} took fewer steps to the target on every seed, "
                 f"{' and '.join(str(r.steps_to_target) for r in theirs)} against "
                 f"{' and '.join(str(r.steps_to_target) for r in mine)}: which warmup length is best is not resolved "
                 "here")
    return line
