"""Lesson 05's speed section: throughput per precision in steady state, repeated and interleaved, with the step's
phases (:func:`precision_throughput`); each 16-bit mode against fp32 (:func:`speed_comparisons`); what could make
it faster on this hardware (:func:`speed_causes_table`, :func:`matmul_share_table`); and what the fifth rung of
the ladder builds on (:func:`rung_comparisons`, :func:`rung_decision`).
"""

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
    """One precision's steady-state throughput (:func:`course_lib.train.ncf.throughput`): the fields the
    lesson reads, named as on a ``TrainResult`` where they mean the same."""

    mode: str
    samples_per_s: float
    step_s: float
    phase_s: dict  # per-step seconds: sampling, forward_backward, optimizer
    precision: dict
    timed_steps: int
    warmup_steps: int
    scale_history: list = field(default_factory=list)

    @property
    def steps(self) -> int:
        """Steps the precision state covers (warmup included)."""
        return self.warmup_steps + self.timed_steps

    @property
    def history(self) -> dict:
        return {"step": list(range(len(self.scale_history))), "loss_scale": list(self.scale_history)}


class PrecisionSpeed(dict):
    """``{mode: SpeedRun}`` (the fastest repeat of each mode) with ``.repeats`` ``{mode: [samples/s, ...]}``."""

    def __init__(self, runs: dict, repeats: dict, steps: int):
        super().__init__(runs)
        self.repeats = repeats
        self.steps = steps

    @property
    def spreads(self) -> dict[str, float]:
        """Per mode with two repeats or more: how far the fastest repeat is from the next fastest,
        (first - second) / first."""
        out = {}
        for mode, v in self.repeats.items():
            if len(v) > 1:
                first, second = sorted(v, reverse=True)[:2]
                out[mode] = (first - second) / first
        return out

    @property
    def spread(self) -> float:
        """The noise of the fastest-repeat estimate: the largest of :attr:`spreads` over the modes. NaN with one
        repeat. A repeat slowed by other work on the machine does not count against it, as long as two repeats
        were not."""
        return max(self.spreads.values()) if self.spreads else math.nan

    def ratio(self, mode: str) -> float:
        return self[mode].samples_per_s / self["fp32"].samples_per_s

    def round_ratios(self, mode: str) -> list[float]:
        """``mode``'s samples/s over fp32's, round by round: :func:`precision_throughput` runs the modes interleaved,
        so repeat i of every mode ran in round i, back to back. Empty with fewer than two rounds each."""
        a, b = self.repeats.get(mode) or [], self.repeats.get("fp32") or []
        return [x / y for x, y in zip(a, b)] if len(a) == len(b) >= 2 else []


def precision_throughput(data, cfg, modes=("fp32", "bf16", "fp16"), *, steps: int = 30, device=None,
                         repeats: int = 3, warmup_steps: int = 3) -> PrecisionSpeed:
    """Training samples/s of ``cfg`` in each precision (lesson 05): ``steps`` timed steps after
    ``warmup_steps`` untimed ones on the same model (:func:`course_lib.train.ncf.throughput`: steady
    state, the phases timed), ``repeats`` times with the modes interleaved (fp32, bf16, fp16, fp32, ...)
    so a change of load on the machine hits every mode alike. Each mode keeps its fastest repeat (the
    least disturbed); ``.spread``, how reproducible that fastest repeat is, is saved with the result."""
    device = torch.device(device) if device is not None else default_device()
    data = data.to(device)  # once: each run below would otherwise copy the dataset again
    if "fp32" not in modes:
        modes = ("fp32",) + tuple(modes)
    best, rates = {}, {m: [] for m in modes}
    for _ in range(max(1, repeats)):
        for m in modes:
            r = throughput(data, cfg.replace(precision=m), device=device, steps=steps, warmup_steps=warmup_steps)
            rates[m].append(r["samples_per_s"])
            if m not in best or r["samples_per_s"] > best[m].samples_per_s:
                best[m] = SpeedRun(m, r["samples_per_s"], r["step_s"], r["phase_s"], r["precision"], steps,
                                   warmup_steps, r["scale_history"])
    return PrecisionSpeed(best, rates, steps)


def speed_table(speed: PrecisionSpeed, batch: int, device) -> Table:
    t = Table(["precision", "samples/s", "vs fp32", "sampling (ms/step)", "forward+backward (ms/step)",
               "optimizer (ms/step)", "repeats (samples/s)"],
              title=f"Throughput at batch {batch} on {device}: {speed.steps} timed steps, fastest of "
                    f"{len(next(iter(speed.repeats.values())))} interleaved repeats")
    for m, r in speed.items():
        t.add(precision=m, **{"samples/s": r.samples_per_s, "vs fp32": f"{speed.ratio(m):.2f}x",
                              "sampling (ms/step)": 1e3 * r.phase_s.get("sampling", math.nan),
                              "forward+backward (ms/step)": 1e3 * r.phase_s.get("forward_backward", math.nan),
                              "optimizer (ms/step)": 1e3 * r.phase_s.get("optimizer", math.nan),
                              "repeats (samples/s)": ", ".join(f"{v:.3g}" for v in speed.repeats[m])})
    return t


def linear_share(model: torch.nn.Module) -> float:
    """The fraction of ``model``'s parameters that an ``nn.Linear`` uses: the matmuls autocast runs in 16
    bits (embedding lookups, the loss and the optimizer's update of every parameter stay fp32)."""
    params = {id(p): p.numel() for p in model.parameters()}
    used = {id(p) for m in model.modules() if isinstance(m, torch.nn.Linear) for p in m.parameters(recurse=False)}
    total = sum(params.values())  # a weight shared by a Linear and an Embedding (BERT's tied decoder) counts once
    return sum(params[i] for i in used if i in params) / total if total else 0.0


def bert_linear_share(plan) -> tuple[str, float]:
    """``(preset, linear_share)`` of the BERT lesson 07 trains on this tier (built on the CPU, not trained)."""
    cfg = mlm.MLMTrainConfig(model=plan.bert_model)
    return plan.bert_model, linear_share(mlm.build_model(cfg, plan.bert_vocab_size, plan.bert_seq_len))


def saved_bert_ratio(record: dict | None, profile: str, device) -> float | None:
    """bf16 / fp32 throughput of lesson 07's BERT from its saved result, when that result is of the same
    profile and device as this run; else None (a number from another run is not this run's)."""
    if not record or record.get("profile") != profile or record.get("device") != str(device):
        return None
    tp = record.get("throughput") or {}
    if "bf16" not in tp or "fp32" not in tp:
        return None
    return tp["bf16"]["seqs_per_s"] / tp["fp32"]["seqs_per_s"]




def _same_steps(decide, mode: str) -> int | None:
    """The steps every run of ``mode`` and fp32 took to the target, when all took the same; else None."""
    steps = {r.steps_to_target for label in (mode, "fp32") for r in decide.runs_of(label)}
    return steps.pop() if len(steps) == 1 and None not in steps else None




ONE_RUN_PACE = 0.10  # with one repeat no spread is measured: a run's pace on a shared machine is not known closer
MIN_PACE_RESOLUTION = 0.03  # two runs back to back on a shared machine differ by a few % with nothing else changed


def round_spread(speed: PrecisionSpeed, mode: str) -> float:
    """How far ``mode``'s samples/s over fp32's moved between the interleaved rounds (the largest over the smallest,
    less 1), at least :data:`MIN_PACE_RESOLUTION`; :data:`ONE_RUN_PACE` with fewer than two rounds."""
    rounds = speed.round_ratios(mode)
    return max(MIN_PACE_RESOLUTION, max(rounds) / min(rounds) - 1) if rounds else ONE_RUN_PACE


def rounds_comparison(speed: PrecisionSpeed, mode: str) -> Comparison:
    """``mode``'s samples/s over fp32's in the interleaved rounds of :func:`precision_throughput`: a paired ratio,
    round i of every mode ran back to back; with one round, the fastest runs' ratio known to :data:`ONE_RUN_PACE`."""
    a, b = speed.repeats.get("fp32") or [], speed.repeats.get(mode) or []
    if len(a) == len(b) >= 2:
        return paired_ratio(f"samples/s, {mode} / fp32 (interleaved rounds)", a, b, needed=SPEED_EFFECT)
    return ratio(f"samples/s, {mode} / fp32 (one round)", [speed["fp32"].samples_per_s], [speed[mode].samples_per_s],
                 needed=SPEED_EFFECT, resolution=ONE_RUN_PACE, basis="one round: no spread measured")


def speed_comparisons(speed: PrecisionSpeed, runs=()) -> list[Comparison]:
    """Each 16-bit mode's samples/s over fp32's: from the interleaved rounds of :func:`precision_throughput` (a
    paired ratio: round i of every mode ran back to back), and, for the modes trained to the target (``runs``), from
    that pair of long runs, one run per arm, so their interval is how far one pair's ratio moved between the rounds
    (:func:`round_spread`)."""
    out = [rounds_comparison(speed, m) for m in speed if m != "fp32"]
    long = {r.precision["mode"]: r for r in runs if r.precision["mode"] in speed}
    for m, r in long.items():
        if m != "fp32" and "fp32" in long:
            out.append(ratio(f"samples/s, {m} / fp32 (time-to-target runs)", [long["fp32"].samples_per_s],
                             [r.samples_per_s], needed=SPEED_EFFECT, resolution=round_spread(speed, m),
                             basis="one pair of runs; resolution: the rounds' spread"))
    return out


def amdahl_bound(share: float) -> float:
    """The most a step can speed up when a ``share`` of it becomes free: ``1 / (1 - share)``."""
    return 1 / max(1 - share, 1e-9)


def speed_causes_table(speed: PrecisionSpeed, hw, device) -> Table:
    """Per 16-bit mode, what could make it faster here: the 16-bit units this device has for it
    (:func:`course_lib.hardware.sixteen_bit_units`; none: autocast converts and computes without them), its
    forward+backward and optimizer phases against fp32's, and the most free 16-bit math could gain (Amdahl's bound
    over forward+backward's share of fp32's step: the rest stays fp32)."""
    units = sixteen_bit_units(hw, str(device))
    f32 = speed["fp32"].phase_s
    total = sum(f32.values()) or math.nan
    fb32, op32 = f32.get("forward_backward", math.nan), f32.get("optimizer", math.nan)
    t = Table(["precision", "16-bit units here", "forward+backward (ms)", "vs fp32's", "optimizer (ms)",
               "vs fp32's ", "forward+backward share of fp32's step", "at most (free 16-bit math)"],
              title=f"Why a precision is as fast as it is on {device}: the step's phases against fp32's")
    for m in (k for k in speed if k != "fp32"):
        fb, op = speed[m].phase_s.get("forward_backward", math.nan), speed[m].phase_s.get("optimizer", math.nan)
        t.add(precision=m, **{"16-bit units here": units.get(m) or "none (emulated)",
                              "forward+backward (ms)": 1e3 * fb, "vs fp32's": f"{fb32 / fb:.2f}x",
                              "optimizer (ms)": 1e3 * op, "vs fp32's ": f"{op32 / op:.2f}x",
                              "forward+backward share of fp32's step": f"{fb32 / total:.0%}",
                              "at most (free 16-bit math)": f"{amdahl_bound(fb32 / total):.3g}x"})
    return t


BERT_NOT_SAVED = "not saved here (lesson 07 measures it)"


def matmul_share_table(neumf_share: float, bert: tuple[str, float] | None, speed: PrecisionSpeed,
                       bert_ratio: float | None) -> Table:
    """The share of each model's parameters that autocast runs in 16 bits (:func:`linear_share`) beside its measured
    bf16 / fp32 throughput: NeuMF's from ``speed``, BERT's from lesson 07's saved result (:func:`saved_bert_ratio`;
    :data:`BERT_NOT_SAVED` where none of this profile and device is saved)."""
    t = Table(["model", "parameters in nn.Linear", "bf16 / fp32 samples/s here"],
              title="Autocast runs only the matmuls in 16 bits: the share of the parameters they use")
    t.add(model="NeuMF (this lesson)", **{"parameters in nn.Linear": f"{neumf_share:.1%}",
                                          "bf16 / fp32 samples/s here": f"{speed.ratio('bf16'):.2f}x" if "bf16" in speed
                                          else "not measured"})
    if bert is not None:
        t.add(model=f"BERT {bert[0]} (lesson 07)", **{"parameters in nn.Linear": f"{bert[1]:.1%}",
                                                      "bf16 / fp32 samples/s here": BERT_NOT_SAVED if bert_ratio is None
                                                      else f"{bert_ratio:.2f}x"})
    return t


def rung_comparisons(decide, mode: str, speed: PrecisionSpeed) -> list[Comparison]:
    """What decides the fifth rung: ``mode``'s time to target over fp32's at every seed (``decide``:
    :func:`course_lib.sweeps.confirm`; absent where a run missed the target), and, where every run of both took the
    same steps, so that their seconds differ only by the pace of those steps, ``mode``'s samples/s over fp32's in the
    interleaved rounds (the measurement built for a pace)."""
    out = [c for c in [decide.time_comparison("fp32", mode)] if c is not None]
    if _same_steps(decide, mode) is not None:
        out.append(rounds_comparison(speed, mode))
    return out


def rung_decision(decide, mode: str, comparisons: list[Comparison], *, below: str | None = None
                  ) -> tuple[str, dict | None]:
    """What the fifth rung builds on, from :func:`rung_comparisons`: ``(precision, decided_by)``. ``mode`` where its
    time to target is lower than fp32's, or, where that is not resolved, where its pace on the same steps is
    higher; where a run missed the target, the precision that reached it on more seeds. ``decided_by`` (None: fp32)
    tells the ladder (:func:`course_lib.ladder.ladder_rows`) that the rung helped over ``below``, the rung it built
    on, and how."""
    by_time = next((c for c in comparisons if c.question.startswith("time to target")), None)
    pace = next((c for c in comparisons if c.question.startswith("samples/s")), None)
    how = None
    if by_time is None and decide.winner(mode, "fp32") == mode:
        how = "time to target"
    elif by_time is not None and by_time.outcome == LOWER:
        how = "time to target"
    elif by_time is not None and by_time.outcome != HIGHER and pace is not None and pace.outcome == HIGHER:
        how = "pace"
    if how is None:
        return "fp32", None
    return mode, {"over": below, "by": how, "text": outcomes_line(comparisons),
                  "comparisons": [c.to_dict() for c in comparisons]}
