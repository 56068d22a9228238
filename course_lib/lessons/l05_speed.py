"""Lesson 05's speed section: throughput per precision in interleaved rounds, each 16-bit mode against fp32, what
could make it faster here, and what the fifth rung builds on (:func:`rung_decision`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..compare import HIGHER, LOWER, SPEED_EFFECT, Comparison, outcomes_line, paired_ratio, ratio
from ..hardware import default_device, sixteen_bit_units
from ..tables import Table
from ..train import mlm
from ..train.ncf import throughput


@dataclass
class SpeedRun:
    """One precision's steady-state throughput, its fields named as on a ``TrainResult``."""

    mode: str
    samples_per_s: float
    phase_s: dict  # per-step seconds: sampling, forward_backward, optimizer
    precision: dict
    steps: int  # warmup included: the steps the loss scale's history covers
    history: dict = field(default_factory=dict)  # {"step": [...], "loss_scale": [...]}, as a TrainResult's


class PrecisionSpeed(dict):
    """``{mode: SpeedRun}`` (each mode's fastest round) with ``.repeats``: ``{mode: [samples/s per round]}``."""

    def __init__(self, runs: dict, repeats: dict):
        super().__init__(runs)
        self.repeats = repeats

    @property
    def spread(self) -> float:
        """The largest (fastest - next fastest) / fastest over the modes (NaN with one repeat)."""
        tops = [sorted(v, reverse=True)[:2] for v in self.repeats.values() if len(v) > 1]
        return max((a - b) / a for a, b in tops) if tops else math.nan

    def ratio(self, mode: str) -> float:
        return self[mode].samples_per_s / self["fp32"].samples_per_s


def precision_throughput(data, cfg, modes=("fp32", "bf16", "fp16"), *, steps: int = 30, device=None,
                         repeats: int = 3, warmup_steps: int = 3) -> PrecisionSpeed:
    """Samples/s of ``cfg`` per precision in steady state, in ``repeats`` rounds with the modes interleaved so that a
    change of load hits every mode alike; each keeps its fastest."""
    device = torch.device(device) if device is not None else default_device()
    data = data.to(device)  # once: each run would otherwise copy the dataset again
    modes = modes if "fp32" in modes else ("fp32",) + tuple(modes)
    runs = {m: [] for m in modes}
    for _ in range(max(1, repeats)):
        for m in modes:
            runs[m].append(throughput(data, cfg.replace(precision=m), device=device, steps=steps,
                                      warmup_steps=warmup_steps))
    best = {m: max(rs, key=lambda r: r["samples_per_s"]) for m, rs in runs.items()}
    fastest = {m: SpeedRun(m, r["samples_per_s"], r["phase_s"], r["precision"], warmup_steps + steps,
                           {"step": list(range(len(r["scale_history"]))), "loss_scale": list(r["scale_history"])})
               for m, r in best.items()}
    return PrecisionSpeed(fastest, {m: [r["samples_per_s"] for r in rs] for m, rs in runs.items()})


def _ms(run: SpeedRun, phase: str) -> float:
    return 1e3 * run.phase_s.get(phase, math.nan)


def speed_table(speed: PrecisionSpeed) -> Table:
    t = Table(["precision", "samples/s", "vs fp32", "sampling ms", "fwd+bwd ms", "optimizer ms", "rounds"])
    for m, r in speed.items():
        t.add(precision=m, **{"samples/s": r.samples_per_s, "vs fp32": f"{speed.ratio(m):.2f}x",
                              "sampling ms": _ms(r, "sampling"), "fwd+bwd ms": _ms(r, "forward_backward"),
                              "optimizer ms": _ms(r, "optimizer"),
                              "rounds": ", ".join(f"{v:.3g}" for v in speed.repeats[m])})
    return t


def linear_share(model: torch.nn.Module) -> float:
    """The share of ``model``'s parameters an ``nn.Linear`` uses: what autocast runs in 16 bits (lookups, the loss
    and the optimizer stay fp32). A weight shared with an Embedding (BERT's tied decoder) counts once."""
    params = {id(p): p.numel() for p in model.parameters()}
    used = {id(p) for m in model.modules() if isinstance(m, torch.nn.Linear) for p in m.parameters(recurse=False)}
    total = sum(params.values())
    return sum(params[i] for i in used if i in params) / total if total else 0.0


def bert_linear_share(plan) -> tuple[str, float]:
    """``(preset, linear_share)`` of the BERT lesson 07 trains on this tier (built, not trained)."""
    cfg = mlm.MLMTrainConfig(model=plan.bert_model)
    return plan.bert_model, linear_share(mlm.build_model(cfg, plan.bert_vocab_size, plan.bert_seq_len))


def saved_bert_ratio(record: dict | None, profile: str, device) -> float | None:
    """bf16 / fp32 throughput of lesson 07's BERT from its saved result of this profile and device, else None."""
    same = bool(record) and record.get("profile") == profile and record.get("device") == str(device)
    tp = (record or {}).get("throughput") or {}
    return tp["bf16"]["seqs_per_s"] / tp["fp32"]["seqs_per_s"] if same and "bf16" in tp and "fp32" in tp else None


ONE_RUN_PACE = 0.10  # with one repeat no spread is measured: a run's pace on a shared machine is not known closer
MIN_PACE_RESOLUTION = 0.03  # two runs back to back on a shared machine differ by a few % with nothing else changed


def rounds_comparison(speed: PrecisionSpeed, mode: str) -> Comparison:
    """``mode``'s samples/s over fp32's, paired round by round; with one round, known to :data:`ONE_RUN_PACE`."""
    a, b = speed.repeats.get("fp32") or [], speed.repeats.get(mode) or []
    if len(a) == len(b) >= 2:
        return paired_ratio(f"samples/s, {mode} / fp32 (interleaved rounds)", a, b, needed=SPEED_EFFECT)
    return ratio(f"samples/s, {mode} / fp32 (one round)", [speed["fp32"].samples_per_s], [speed[mode].samples_per_s],
                 needed=SPEED_EFFECT, resolution=ONE_RUN_PACE, basis="one round: no spread measured")


def speed_comparisons(speed: PrecisionSpeed, runs=()) -> list[Comparison]:
    """Each 16-bit mode against fp32 in the rounds and in the time-to-target ``runs`` (known to the rounds' spread)."""
    out = [rounds_comparison(speed, m) for m in speed if m != "fp32"]
    long = {r.precision["mode"]: r.samples_per_s for r in runs if r.precision["mode"] in speed}
    for m in (m for m in long if m != "fp32" and "fp32" in long):
        rounds = [x / y for x, y in zip(speed.repeats[m], speed.repeats["fp32"])]
        pace = max(MIN_PACE_RESOLUTION, max(rounds) / min(rounds) - 1) if len(rounds) >= 2 else ONE_RUN_PACE
        out.append(ratio(f"samples/s, {m} / fp32 (time-to-target runs)", [long["fp32"]], [long[m]],
                         needed=SPEED_EFFECT, resolution=pace, basis="one pair of runs; the rounds' spread"))
    return out


def speed_causes_table(speed: PrecisionSpeed, hw, device) -> Table:
    """Per 16-bit mode: its 16-bit units on this device (none: autocast emulates), its phases' speedup over fp32's
    (their ms are :func:`speed_table`'s), and Amdahl's bound were fp32's forward+backward free (the rest stays fp32)."""
    units, f32 = sixteen_bit_units(hw, str(device)), speed["fp32"]
    share = _ms(f32, "forward_backward") / (1e3 * sum(f32.phase_s.values()) or math.nan)
    t = Table(["precision", "16-bit units", "fwd+bwd vs fp32", "optimizer vs fp32", "fwd+bwd share", "at most"])
    for m in (k for k in speed if k != "fp32"):
        vs = {f"{k} vs fp32": f"{_ms(f32, p) / _ms(speed[m], p):.2f}x"
              for k, p in (("fwd+bwd", "forward_backward"), ("optimizer", "optimizer"))}
        t.add(precision=m, **{"16-bit units": units.get(m) or "none (emulated)", **vs, "fwd+bwd share": f"{share:.0%}",
                              "at most": f"{1 / max(1 - share, 1e-9):.3g}x"})
    return t


def matmul_share_table(neumf_share: float, bert: tuple[str, float] | None, speed: PrecisionSpeed,
                       bert_ratio: float | None) -> Table:
    """Each model's :func:`linear_share` beside its measured bf16 / fp32 throughput (BERT's from lesson 07's saved
    result, :func:`saved_bert_ratio`; "—" where none was measured or saved)."""
    rows = [("NeuMF", neumf_share, speed.ratio("bf16") if "bf16" in speed else None)]
    rows += [(f"BERT {bert[0]}", bert[1], bert_ratio)] if bert is not None else []
    t = Table(["model", "in nn.Linear", "bf16 / fp32"])
    for model, share, r in rows:
        t.add(model=model, **{"in nn.Linear": f"{share:.1%}", "bf16 / fp32": "—" if r is None else f"{r:.2f}x"})
    return t


def rung_decision(decide, mode: str, speed: PrecisionSpeed, *, below: str | None = None
                  ) -> tuple[list[Comparison], str, dict | None]:
    """``(comparisons, precision, decided_by)`` for the fifth rung: ``mode``'s time to target over fp32's at every
    seed (none where a run missed) and, where every run took the same steps (seconds differ only by pace), the
    rounds' pace. ``mode`` wins where its time is lower or, unresolved, its pace higher; where a run missed, the one
    that reached the target on more seeds. ``decided_by`` (None: fp32) is what the ladder reads."""
    by_time = decide.time_comparison("fp32", mode)
    steps = {r.steps_to_target for label in (mode, "fp32") for r in decide.runs_of(label)}
    pace = rounds_comparison(speed, mode) if len(steps) == 1 and None not in steps else None
    comps = [c for c in (by_time, pace) if c is not None]
    how = None
    if (by_time is None and decide.winner(mode, "fp32") == mode) or (by_time is not None and by_time.outcome == LOWER):
        how = "time to target"
    elif by_time is not None and by_time.outcome != HIGHER and pace is not None and pace.outcome == HIGHER:
        how = "pace"
    decided_by = None if how is None else {"over": below, "by": how, "text": outcomes_line(comps),
                                           "comparisons": [c.to_dict() for c in comps]}
    return comps, "fp32" if how is None else mode, decided_by
