"""Lesson 03, warmup: warmup against none, read against the seeds' noise.
"""

from __future__ import annotations
from ..sweeps import race_score


def warmup_reading(results, labels, *, baseline_label: str = "no warmup") -> str:
    """Warmup against none, read from the runs (lesson 03): the best warmup run (by ``race_score``),
    its length (flagged at the edge of the lengths tried), and what it changed against the run
    without warmup: time to target, or reaching it at all."""
    base = next(r for r, lab in zip(results, labels) if lab == baseline_label)
    warm = [(r, lab) for r, lab in zip(results, labels) if lab != baseline_label]
    if not warm:
        return "no warmup run to compare"
    best, label = min(warm, key=lambda rl: race_score(rl[0]))
    lengths = sorted({r.config["warmup_steps"] for r, _ in warm if r.config["warmup"] == best.config["warmup"]})
    edge = (" (the edge of the lengths tried: a better one may lie beyond)"
            if len(lengths) > 1 and best.config["warmup_steps"] in (lengths[0], lengths[-1]) else "")

    def did(r):
        if r.time_to_target_s is not None:
            return f"reached the target in {r.time_to_target_s:.1f} s ({r.steps_to_target} steps)"
        if r.diverged:
            return "diverged"
        return f"did not reach the target (best HR@10 {r.best_hr or 0.0:.3f})"

    line = f"best warmup: {label}{edge}, {did(best)}; without warmup the run {did(base)}"
    if best.time_to_target_s is not None and base.time_to_target_s is not None:
        ratio = base.time_to_target_s / best.time_to_target_s
        steps = base.steps_to_target / max(best.steps_to_target, 1)
        verdict = ("warmup took fewer steps" if steps > 1.05 else "warmup cost steps" if steps < 0.95
                   else "no difference in steps to target")
        line += (f". On this seed {verdict}: without it {steps:.2f}x the steps and {ratio:.2f}x the time "
                 "(one seed: the comparison at two seeds decides)")
    elif best.time_to_target_s is not None:
        line += ". Warmup is what made this batch reach the target at all."
    elif base.time_to_target_s is not None:
        line += ". Warmup did not help at this batch: the run without it reached the target."
    else:
        line += ". Neither reached the target: this batch needs more than warmup (lesson 04)."
    return line
