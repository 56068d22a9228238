"""Lesson 07: Adam vs LAMB at the largest batch the budget allows, each at its own swept lr (``train_mlm`` runs)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import torch

from .. import compare
from ..progress import resolve_progress
from ..sweeps import sweep_with_edge_extension
from ..tables import Table
from ..train.mlm import MLMTrainConfig, throughput, train_mlm

BASE_LRS = {"adam": 1e-3, "lamb": 1e-2}  # each optimizer's lr at the small batch


@dataclass(frozen=True)
class Study:
    """:meth:`config` gives every run its settings: the sqrt rule scales ``base_lrs`` from ``small_batch``; ``seqs``
    sequences at every batch (as the seed talk's rungs); 20% warmup at a large batch, 10% at the small."""

    small_batch: int
    large_batch: int
    micro_batch: int  # at most this many sequences per forward/backward on one rank
    seqs: int
    base_lrs: dict = field(default_factory=lambda: dict(BASE_LRS))
    common: dict = field(default_factory=dict)  # other MLMTrainConfig fields shared by every run

    def config(self, optimizer: str, batch: int, lr_factor: float = 1.0, **changes) -> MLMTrainConfig:
        large = batch > self.small_batch
        steps = max(2, self.seqs // batch)
        settings = dict(optimizer=optimizer, global_batch_size=batch, micro_batch_size=min(batch, self.micro_batch),
                        base_lr=self.base_lrs[optimizer] * lr_factor, base_batch_size=self.small_batch,
                        lr_scaling="sqrt", max_steps=steps, warmup_steps=round((0.2 if large else 0.1) * steps),
                        eval_every_steps=max(1, steps // 40))
        return MLMTrainConfig(**{**settings, **self.common, **changes})


MAX_EPOCHS = 20  # passes over the corpus a run may make: beyond, it measures memorization
MIN_LARGE_STEPS = 30  # the large batch's steps at the least: fewer, and neither optimizer leaves the early plateau
MIN_LARGE_FACTOR = 4  # the large batch is at least this x the small one, over budget if it must be
OVERHEAD_S = 3.0  # per run: 40 evaluations of the held-out set and the model's build
TALK_BATCH = 65_536  # the seed talk: BERT's batch of 256 "scaled it up to 64k or 96k" with LAMB


def n_runs(small_factors, large_factors, small_extensions: int, large_extensions: int) -> int:
    """The lesson's runs at worst: both lr sweeps at both batches, fully extended; a second seed each; two ablations."""
    return 2 * (len(small_factors) + small_extensions) + 2 * (len(large_factors) + large_extensions) + 2 + 2


def size_study(seq_s: float, budget: float, *, num_train: int, small_batch: int, runs: int, other_s: float = 40.0,
               large_batch: int | None = None, seqs: int | None = None) -> dict:
    """Every run's sequences (an equal share of the budget, at most ``MAX_EPOCHS``) and the large batch: the largest
    ``small_batch`` x 2^k that keeps ``MIN_LARGE_STEPS`` steps, at most half the corpus (more is full-batch descent)."""
    if min(seq_s, budget, num_train, small_batch, runs) <= 0:
        raise ValueError(f"size_study: {seq_s=}, {budget=}, {num_train=}, {small_batch=}, {runs=}")
    seqs = seqs or max(small_batch, min(int((budget - other_s - runs * OVERHEAD_S) / (runs * seq_s)),
                                        MAX_EPOCHS * num_train))
    if large_batch is None:
        large_batch = small_batch * MIN_LARGE_FACTOR
        while 2 * large_batch * MIN_LARGE_STEPS <= seqs and 2 * large_batch <= num_train // 2:
            large_batch *= 2
        seqs = max(seqs, large_batch * MIN_LARGE_STEPS)
    planned = other_s + runs * (OVERHEAD_S + seqs * seq_s)
    return {"seq_s": seq_s, "runs": runs, "seqs": seqs, "epochs": seqs / num_train, "large_batch": large_batch,
            "planned_s": planned, "budget_s": budget, "over_budget": planned > budget}


def sizing_table(sizing: dict, small_batch: int) -> Table:
    rows = {"s/seq": f"{sizing['seq_s']:.3g}", "runs": sizing["runs"], "seqs/run": sizing["seqs"],
            "epochs/run": round(sizing["epochs"], 2), f"steps at {small_batch}": sizing["seqs"] // small_batch,
            "large batch": sizing["large_batch"], "steps at large": sizing["seqs"] // sizing["large_batch"],
            "64k / large": TALK_BATCH // sizing["large_batch"], "planned s": round(sizing["planned_s"]),
            "budget s": sizing["budget_s"]}
    return Table(["quantity", "value"], [{"quantity": k, "value": v} for k, v in rows.items()])


def measure_seq_s(data, *, small_batch: int, max_micro_batch: int, common: dict, device, steps: int = 3,
                  repeats: int = 2) -> float:
    """Seconds per sequence: the slower of the small batch and one micro batch (what an accumulated large batch
    repeats), each the fastest of ``repeats`` (lesson 05's rule)."""
    probe = Study(small_batch=small_batch, large_batch=max_micro_batch, micro_batch=max_micro_batch,
                  seqs=max_micro_batch * (steps + 4), common=common)
    best: dict[int, float] = {}
    for _ in range(max(1, repeats)):
        for b in sorted({small_batch, max_micro_batch}):
            rate = throughput(probe.config("lamb", b), data, device=device, steps=steps, warmup_steps=2)["seqs_per_s"]
            best[b] = min(best.get(b, math.inf), 1 / rate)
    return max(best.values())


def target_loss(sweep: dict, margin: float) -> float:
    """The worse optimizer's best held-out loss at the large batch, plus ``margin`` (another seed ends apart)."""
    bests = [best_loss_key(best_of(sweep, o)) for o in ("adam", "lamb")]
    return max(b for b in bests if math.isfinite(b)) + margin


def best_loss_key(record: dict) -> float:
    """Best first: the lowest held-out loss; a diverged run last (the clock is too noisy to rank runs by time)."""
    loss = record["best_eval_loss"]
    return loss if loss is not None and not record["diverged"] else math.inf


def time_to_loss(record: dict, target: float) -> tuple[float | None, int | None]:
    """(training seconds, steps) until the held-out loss first reaches ``target``; (None, None) if never."""
    c = record["curves"]
    for step, loss, t in zip(c["eval_step"], c["eval_loss"], c["eval_time_s"]):
        if math.isfinite(loss) and loss <= target:
            return t, step
    return None, None


def train(cfg, data, *, device, progress: str = "auto") -> dict:
    """``train_mlm``, then one line; a bar only where a person watches (CI gets a line per run, not per evaluation)."""
    r = train_mlm(cfg, data, device=device, progress="bar" if resolve_progress(progress) == "bar" else "none")
    best = r["best_eval_loss"]
    at = next((s for s, v in zip(r["curves"]["eval_step"], r["curves"]["eval_loss"]) if v == best), None)
    print(f"[{r['label']}] diverged after {r['steps']} steps" if r["diverged"] else
          f"[{r['label']}] {r['steps']} steps, best loss {best:.3f} at step {at}, {r['train_time_s']:.1f} s, "
          f"{r['seqs_per_s']:.1f} seq/s", flush=True)
    return r


def sweep_lr(study: Study, optimizer: str, data, *, device, factors, max_extensions: int = 2,
             batch: int | None = None) -> dict[str, dict]:
    """``{label: record}`` at ``batch`` (default: the large one) per lr factor, extended past a best at the edge."""
    batch = batch or study.large_batch
    rule = "sqrt rule" if batch > study.small_batch else "base lr"

    def run(f: float) -> dict:
        return train(study.config(optimizer, batch, lr_factor=f, label=f"{optimizer} b={batch}, {rule} x{f:g}"), data,
                     device=device)

    done = sweep_with_edge_extension(run, factors, best_loss_key, max_extensions=max_extensions)
    return {r["label"]: r for r in done.values()}


def best_of(records: dict[str, dict], prefix: str) -> dict:
    return min((r for name, r in records.items() if name.startswith(prefix)), key=best_loss_key)


def results_table(records: dict[str, dict], target: float, title: str, num_train: int) -> Table:
    t = Table(["run", "steps", "epochs", "peak lr", "best loss", "final loss", "s to target", "steps to target",
               "seq/s"], title=title)
    for name, r in records.items():
        secs, steps = time_to_loss(r, target)
        t.add(**{"run": name, "steps": r["steps"], "peak lr": f"{r['config']['peak_lr']:.2e}",
                 "epochs": round(r["steps"] * r["config"]["global_batch_size"] / num_train, 1),
                 "best loss": None if r["best_eval_loss"] is None else round(r["best_eval_loss"], 3),
                 "final loss": "diverged" if r["diverged"] else round(r["final_eval_loss"], 3),
                 "s to target": "not reached" if secs is None else float(f"{secs:.3g}"),
                 "steps to target": "-" if steps is None else steps, "seq/s": round(r["seqs_per_s"], 1)})
    return t


def eval_interval(record: dict) -> int:
    """Steps between a run's evaluations: the resolution of its steps to the target."""
    steps = record["curves"]["eval_step"]
    return max((b - a for a, b in zip(steps, steps[1:])), default=1)


def throughput_table(tp: dict[str, dict], title: str) -> Table:
    return Table(["precision", "seq/s", "tokens/s", "vs fp32"],
                 [{"precision": mode, "seq/s": round(r["seqs_per_s"], 1), "tokens/s": round(r["tokens_per_s"]),
                   "vs fp32": round(r["seqs_per_s"] / tp["fp32"]["seqs_per_s"], 2)} for mode, r in tp.items()], title)


def trust_ratio_spread(record: dict) -> dict:
    """LAMB's trust ratios (``table``: weights x steps), per step the largest over the smallest; at the peak lr, the lr
    and the median ratio to the 3 figures printed (their product: LAMB's step per element)."""
    table = torch.tensor(list(record["trust_ratios"].values()))  # (weights, steps)
    spread = table.max(0).values / table.min(0).values
    lrs = record.get("curves", {}).get("lr") or [0.0]
    peak = lrs.index(max(lrs))
    return {"table": table, "first_min": float(table[:, 0].min()), "first_max": float(table[:, 0].max()),
            "spread": spread, "spread_median": float(spread.median()), "spread_max": float(spread.max()),
            "peak_step": peak + 1, "peak_lr": float(f"{lrs[peak]:.3g}"),
            "peak_ratio": float(f"{float(table[:, peak].median()):.3g}")}


def summary(record: dict, target: float, label: str | None = None) -> dict:
    """One run's saved scalars; ``label``: the lesson's name for it (``"adam b=32"``, whatever lr the sweep chose)."""
    secs, steps = time_to_loss(record, target)
    c = record["curves"]
    return {"label": label or record["label"], "run": record["label"], "steps": record["steps"],
            "global_batch_size": record["config"]["global_batch_size"], "peak_lr": record["config"]["peak_lr"],
            "final_eval_loss": record["final_eval_loss"], "diverged": record["diverged"], "time_to_loss_s": secs,
            "steps_to_loss": steps, "seqs_per_s": record["seqs_per_s"],
            "precision": (record.get("precision") or {}).get("mode"),  # lesson 11 reruns BERT in it
            "eval_loss_curve": list(zip(c["eval_step"], c["eval_loss"]))}


LOSS_SHOWN = 0.001  # held-out losses as the tables show them (3 decimals): the resolution of a single run's loss
LR_EFFECT = 0.5  # a tuned lr within 1.5x of the sqrt rule's: as close as a grid of factor-2 steps places it
THROUGHPUT_RESOLUTION = 0.1  # one short throughput run per mode, where no run of the lesson measured the pace's drift


def _steps(records: list[dict], target: float) -> list[int] | None:
    got = [time_to_loss(r, target)[1] for r in records]
    return None if not got or any(g is None for g in got) else got


def _steps_ratio(question: str, a: list[dict], b: list[dict], target: float) -> list[compare.Comparison]:
    """Steps to the target (not time: steps do not depend on how busy the machine was), to one evaluation interval."""
    sa, sb = _steps(a, target), _steps(b, target)
    if sa is None or sb is None:
        return []
    every = max(eval_interval(r) for r in a + b)
    return [compare.ratio(question, sa, sb, needed=compare.TIME_EFFECT, resolution=every / max(1, min(sa + sb)),
                          basis=f"{len(sa)}/{len(sb)} run(s); eval every {every}")]


def _rates(records: dict, batch: int) -> list[float]:
    return [r["seqs_per_s"] for r in records.values() if r["config"]["global_batch_size"] == batch]


def pace_drift(records: dict) -> float | None:
    """The machine's spread: highest / lowest sequences/s - 1 of runs at one batch (same work per step), at most."""
    rates = [_rates(records, b) for b in {r["config"]["global_batch_size"] for r in records.values()}]
    drifts = [max(v) / min(v) - 1 for v in rates if len(v) > 1 and min(v) > 0]
    return max(drifts) if drifts else None


def _seed_spread(records: list[dict]) -> float:
    losses = [x for x in map(best_loss_key, records) if math.isfinite(x)]
    return max(LOSS_SHOWN, max(losses) - min(losses)) if len(losses) > 1 else LOSS_SHOWN


def batch_comparisons(small: list[dict], large: list[dict], target: float, small_batch: int, large_batch: int,
                      optimizer: str, drift: float = 0.0) -> list[compare.Comparison]:
    """One optimizer's large batch (its seeds) over its small one: time to the target (to ``drift`` and the evaluation
    spacing), sequences to it, and the loss at equal sequences (the first evaluation past the small run's budget)."""
    ss, sl = _steps(small, target), _steps(large, target)
    out = []
    if ss is not None and sl is not None:
        spacing = max(eval_interval(r) / max(1, n) for r, n in zip(small + large, ss + sl))
        out += [compare.ratio(f"{optimizer}: time to target, b={large_batch} / b={small_batch}",
                              [time_to_loss(r, target)[0] for r in small], [time_to_loss(r, target)[0] for r in large],
                              needed=compare.TIME_EFFECT, resolution=drift + spacing,
                              basis=f"pace drift {drift:.0%}; eval spacing"),
                compare.ratio(f"{optimizer}: sequences to target, b={large_batch} / b={small_batch}",
                              [n * small_batch for n in ss], [n * large_batch for n in sl], needed=compare.TIME_EFFECT,
                              resolution=spacing, basis="eval spacing")]
    if not small or not large:
        return out
    sc, lc = small[0]["curves"], large[0]["curves"]
    budget, small_loss = sc["eval_step"][-1] * small_batch, sc["eval_loss"][-1]
    loss = next((v for st, v in zip(lc["eval_step"], lc["eval_loss"]) if st * large_batch >= budget), None)
    if loss is not None and math.isfinite(loss) and math.isfinite(small_loss):
        out.append(compare.difference(f"{optimizer}: equal-sequence loss, b={large_batch} - b={small_batch}",
                                      small_loss, 0.0, loss, 0.0, needed=compare.LOSS_EFFECT,
                                      resolution=_seed_spread(large), basis="seed range"))
    return out


def lr_comparisons(small_sweep: dict, sweep: dict, optimizer: str, small_batch: int, large_batch: int,
                   seeds: list[dict]) -> list[compare.Comparison]:
    """The tuned lr, large batch over small, against the sqrt rule; the runner-up lr's best loss less the best's."""
    def swept(records):
        mine = sorted((r for name, r in records.items() if name.startswith(f"{optimizer} b=")), key=best_loss_key)
        lrs = sorted({r["config"]["peak_lr"] for r in mine})
        return mine, max([b / a for a, b in zip(lrs, lrs[1:])] or [2.0])

    (small, s_step), (large, l_step) = swept(small_sweep), swept(sweep)
    out = []
    if small and large and math.isfinite(best_loss_key(small[0])) and math.isfinite(best_loss_key(large[0])):
        value = large[0]["config"]["peak_lr"] / small[0]["config"]["peak_lr"] / math.sqrt(large_batch / small_batch)
        out.append(compare.quantity_ratio(f"{optimizer}: tuned lr, b={large_batch} / b={small_batch}, / sqrt rule",
                                          value, 0.0, needed=LR_EFFECT, resolution=max(s_step, l_step) - 1,
                                          basis="lr grid step"))
    if len(large) > 1 and math.isfinite(best_loss_key(large[1])):
        tag = lambda r: r["label"].rsplit(" ", 1)[-1]  # the "x0.5" of "..., sqrt rule x0.5"
        out.append(compare.difference(f"{optimizer}: best loss, lr {tag(large[1])} - lr {tag(large[0])} (the best)",
                                      best_loss_key(large[0]), 0.0, best_loss_key(large[1]), 0.0,
                                      needed=compare.LOSS_EFFECT, resolution=_seed_spread(seeds), basis="seed range"))
    return out


def comparisons(runs: dict, small_sweep: dict, sweep: dict, target: float, small_batch: int, large_batch: int,
                seed_tags=("best lr",)) -> list[compare.Comparison]:
    """Section 3's questions: LAMB / Adam per batch; each optimizer's lrs and batches; sequences/s per batch."""
    def at(opt: str, batch: int) -> list[dict]:  # the tuned small-batch run, or the large batch's seeds
        keys = [f"{opt} b={batch}"] if batch == small_batch else [f"{opt} b={batch} ({t})" for t in seed_tags]
        return [runs[k] for k in keys if k in runs]

    every = {**small_sweep, **sweep, **runs}
    drift = pace_drift(every) or 0.0
    out = []
    for b in (small_batch, large_batch):
        out += _steps_ratio(f"steps to target, LAMB / Adam, b={b}", at("adam", b), at("lamb", b), target)
    for opt in ("adam", "lamb"):
        small, large = at(opt, small_batch), at(opt, large_batch)
        out += (lr_comparisons(small_sweep, sweep, opt, small_batch, large_batch, large)
                + batch_comparisons(small, large, target, small_batch, large_batch, opt, drift))
    rates = _rates(every, small_batch), _rates(every, large_batch)
    if min(map(len, rates)) >= 2:
        out.append(compare.ratio(f"seq/s, b={large_batch} / b={small_batch}", *rates, needed=compare.SPEED_EFFECT))
    return out


def ablation_comparisons(ablations: dict, reference: str, target: float, seeds: list[dict]) -> list[compare.Comparison]:
    """Each ablation's best loss and steps to the target against the full LAMB's ``seeds``; a diverged one: none."""
    full = [x for x in map(best_loss_key, seeds) if math.isfinite(x)]
    se = statistics.stdev(full) / math.sqrt(len(full)) if len(full) > 1 else 0.0
    out = []
    for name, r in ablations.items():
        if name != reference and math.isfinite(best_loss_key(r)):
            out.append(compare.difference(f"{name}: best loss - full", statistics.mean(full), se, best_loss_key(r),
                                          0.0, needed=compare.LOSS_EFFECT, df=len(full) - 1 if len(full) > 1 else None,
                                          resolution=LOSS_SHOWN, n=f"{len(full)}/1",
                                          basis=f"{len(full)} full-LAMB seeds"))
            out += _steps_ratio(f"{name}: steps to target / full", seeds, [r], target)
    return out


def precision_comparisons(tp: dict, saved05: dict | None, records: dict) -> list[compare.Comparison]:
    """bf16 / fp32 seq/s of this BERT, and over lesson 05's NeuMF's, to the drift of the lesson's ``records``."""
    if "bf16" not in tp:
        return []
    drift = pace_drift(records) or THROUGHPUT_RESOLUTION
    basis = f"1 run/mode; drift {drift:.0%}"
    bert = tp["bf16"]["seqs_per_s"] / tp["fp32"]["seqs_per_s"]
    out = [compare.quantity_ratio("seq/s, bf16 / fp32", bert, 0.0, needed=compare.SPEED_EFFECT, resolution=drift,
                                  basis=basis)]
    if saved05 and saved05.get("bf16") and saved05.get("fp32"):
        out.append(compare.quantity_ratio("bf16 speedup, BERT / NeuMF", bert * saved05["fp32"] / saved05["bf16"], 0.0,
                                          needed=compare.SPEED_EFFECT, resolution=(1 + drift) ** 2 - 1,
                                          basis=basis + ", both lessons"))
    return out
