"""Lesson 07's study: Adam vs LAMB at a large batch, each at its own swept lr, read from the records.

Every run is ``train_mlm`` (the one engine); this module states the study's settings once
(:class:`Study`), sweeps each optimizer's lr with a grid that extends at its edge
(:func:`course_lib.sweeps.sweep_with_edge_extension`), and reads the records: time and
steps to a target loss, a results table, the verdicts (Adam vs LAMB over seeds, small vs large batch
on the clock, the lr choice, the ablations), what gets saved.
Readings are computed from the learner's own records, so they stay true on any hardware.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..budget import Runs, SizedPlan, size_plan
from ..metrics import noise_verdict
from ..progress import resolve_progress
from ..sweeps import sweep_with_edge_extension
from ..tables import Table
from ..train.mlm import MLMTrainConfig, train_mlm


@dataclass(frozen=True)
class Study:
    """The study's settings: two batches, a budget in sequences, each optimizer's lr at the small batch.

    ``config(optimizer, batch, lr_factor)`` is the one place a run's settings come from: the
    sqrt rule scales ``base_lrs[optimizer]`` from ``small_batch`` to ``batch``, times
    ``lr_factor``; a large-batch run gets ``large_seqs`` sequences and 20% of its steps as
    warmup, a small one ``small_seqs`` and 10%; 20 evaluations per run.
    """

    small_batch: int
    large_batch: int
    micro_batch: int  # at most this many sequences per forward/backward on one rank
    small_seqs: int
    large_seqs: int
    base_lrs: dict = field(default_factory=lambda: {"adam": 1e-3, "lamb": 1e-2})
    common: dict = field(default_factory=dict)  # other MLMTrainConfig fields shared by every run

    def config(self, optimizer: str, batch: int, lr_factor: float = 1.0, **changes) -> MLMTrainConfig:
        large = batch > self.small_batch
        steps = max(2, (self.large_seqs if large else self.small_seqs) // batch)
        settings = dict(optimizer=optimizer, global_batch_size=batch, micro_batch_size=min(batch, self.micro_batch),
                        base_lr=self.base_lrs[optimizer] * lr_factor, base_batch_size=self.small_batch,
                        lr_scaling="sqrt", max_steps=steps, warmup_steps=round((0.2 if large else 0.1) * steps),
                        eval_every_steps=max(1, steps // 20))
        return MLMTrainConfig(**{**settings, **self.common, **changes})


MAX_EPOCHS = 20  # passes over the corpus a study run may make: beyond, it measures memorization


def budget(large_batch: int, num_train: int, *, large_batches: int, large_factor: int = 4,
           max_epochs: float = MAX_EPOCHS) -> tuple[int, int, str]:
    """``(small_seqs, large_seqs, note)``: the study's budget in sequences for a corpus of ``num_train``.

    The small-batch runs see ``large_batches`` large batches' worth of sequences, the large
    ones ``large_factor`` times that (the large batch gets more samples, as in the talk),
    but no run passes over the corpus more than ``max_epochs`` times: on a small corpus
    (the offline pydoc text on a GPU: ~950 sequences, ~100 epochs uncapped) more passes
    train the model to recite its data, and the comparison would be of memorization. The
    note says when the cap cut the budget (empty otherwise).
    """
    if min(large_batch, num_train, large_batches, large_factor) < 1:
        raise ValueError(f"budget needs positive sizes, got large_batch={large_batch}, num_train={num_train}, "
                         f"large_batches={large_batches}, large_factor={large_factor}")
    small = large_batch * large_batches
    cap = int(max_epochs * num_train) // large_factor
    if small <= cap:
        return small, small * large_factor, ""
    small = max(large_batch, cap)
    note = (
        f"NOTE: the budget is capped at {max_epochs:g} passes over this corpus' {num_train} training sequences "
        f"({small * large_factor} sequences for the large batch instead of "
        f"{large_batch * large_batches * large_factor}); "
        "a larger corpus (TEXT_DIR, or CORPUS='wikitext-103') gives the study its full length."
    )
    return small, small * large_factor, note


def make_study(large_batches: int, *, small_batch: int, large_batch: int, num_train: int, large_factor: int,
               world_size: int, max_micro_batch: int, common: dict, base_lrs: dict | None = None) -> tuple[str, Study]:
    """``(note, study)``: the lesson's :class:`Study` at ``large_batches`` large batches' worth of sequences
    (:func:`budget`; ``note`` says what capped it, empty otherwise), the same budget for both optimizers. The
    data-parallel run (section 3) splits the large batch over ``world_size`` ranks, so a rank's micro batch is at
    most ``large_batch // world_size`` (and ``max_micro_batch``). ``base_lrs``: each optimizer's lr at the small
    batch (default Adam 1e-3, LAMB 1e-2), scaled by sqrt(batch / small batch)."""
    small_seqs, large_seqs, note = budget(large_batch, num_train, large_batches=large_batches,
                                          large_factor=large_factor)
    return note, Study(small_batch=small_batch, large_batch=large_batch,
                       micro_batch=min(large_batch // world_size, max_micro_batch),
                       small_seqs=small_seqs, large_seqs=large_seqs,
                       base_lrs=dict(base_lrs or {"adam": 1e-3, "lamb": 1e-2}), common=common)


def budget_line(study: Study, large_batches: int, cut: bool, note: str = "") -> str:
    """The line under the sizing line: each batch's budget in sequences and, where the sizing cut the plan, the
    steps it gives at each batch (what the runs then take: :meth:`Study.config`). ``note``: :func:`budget`'s, said
    instead when the corpus capped the budget. (#37, third full run: "10240 at the large one (10 large batches'
    worth ...)": 10240 sequences are 40 large batches; the 10 were the small batch's budget.)"""
    if note:
        return note
    line = f"budget: {study.small_seqs} sequences at the small batch, {study.large_seqs} at the large one"
    if not cut:
        return line
    small = study.config("adam", study.small_batch).max_steps
    large = study.config("adam", study.large_batch).max_steps
    return line + (f" ({study.small_seqs} = {large_batches} large batches' worth, the large batch "
                   f"{study.large_seqs // max(1, study.small_seqs)}x that: {small} steps at batch "
                   f"{study.small_batch}, {large} at batch {study.large_batch}, the sized steps above rounded to "
                   "whole large batches)")


def best_loss_key(record: dict) -> float:
    """Best first: the lowest held-out loss; a diverged run last. (Evaluations are too sparse,
    and the clock too noisy on a shared machine, to rank runs by time.)"""
    loss = record["best_eval_loss"]
    return loss if loss is not None and not record["diverged"] else math.inf


def time_to_loss(record: dict, target: float) -> tuple[float | None, int | None]:
    """(training seconds, steps) until the held-out loss first reaches ``target``; (None, None) if never."""
    c = record["curves"]
    for step, loss, t in zip(c["eval_step"], c["eval_loss"], c["eval_time_s"]):
        if math.isfinite(loss) and loss <= target:
            return t, step
    return None, None


def quiet_progress(progress: str = "auto") -> str:
    """A bar where a person watches (JupyterLab); nothing under papermill and CI, where :func:`train`
    prints one summary line per run instead of a line per evaluation (the full profile's 13 runs
    printed ~290 lines: review 2026-12-01)."""
    return "bar" if resolve_progress(progress) == "bar" else "none"


def run_line(record: dict) -> str:
    """One run in one line: its label, steps, best held-out loss and where, training seconds, sequences/s."""
    c = record["curves"]
    if record["diverged"]:
        return f"[{record['label']}] diverged after {record['steps']} steps"
    best = record["best_eval_loss"]
    at = next((s for s, v in zip(c["eval_step"], c["eval_loss"]) if v == best), None)
    return (f"[{record['label']}] {record['steps']} steps, best held-out loss {best:.3f} at step {at}, "
            f"{record['train_time_s']:.1f} s training, {record['seqs_per_s']:.1f} sequences/s")


def train(cfg, data, *, device, progress: str = "auto") -> dict:
    """``train_mlm`` with :func:`quiet_progress`, then its :func:`run_line`."""
    record = train_mlm(cfg, data, device=device, progress=quiet_progress(progress))
    print(run_line(record), flush=True)
    return record


def sweep_lr(study: Study, optimizer: str, data, *, device, factors, max_extensions: int = 2,
             batch: int | None = None) -> dict[str, dict]:
    """Runs at ``batch`` (default: the large one) for each lr factor (x the sqrt rule; at the small batch,
    x the optimizer's base lr), extended while the best sits at the grid's edge; ``{label: record}``."""
    batch = batch or study.large_batch

    def run(f: float) -> dict:
        rule = "sqrt rule" if batch > study.small_batch else "base lr"
        cfg = study.config(optimizer, batch, lr_factor=f, label=f"{optimizer} b={batch}, {rule} x{f:g}")
        return train(cfg, data, device=device)

    done = sweep_with_edge_extension(run, factors, best_loss_key, max_extensions=max_extensions)
    return {r["label"]: r for r in done.values()}


LARGE_BATCHES = 30  # the full plan: the small-batch runs see 30 large batches' worth of sequences (CPU)
FLOOR_SCALE = 1 / 3  # the shortest plan: a third of the steps (10 large batches' worth: 40 steps at the large
# batch, 80 at the small one); shorter, the runs barely leave the early plateau and no target is reached
OVERHEAD_S = 3.0  # per run: 20 evaluations of the held-out set and the model's build (measured 2026-12-01: ~2 s)


def measure_step_s(study: Study, data, *, device, steps: int = 3, repeats: int = 2,
                   warmup_steps: int = 2) -> dict[int, float]:
    """Seconds per training step of this lesson's own model at each of its two batches, now, on this machine
    (``throughput``: ``steps`` timed steps after ``warmup_steps`` untimed ones), ``repeats`` times with the batches
    interleaved; each batch keeps its fastest repeat, the least disturbed (lesson 05's rule,
    :func:`course_lib.lessons.l05_mixed_precision.precision_throughput`). Read r5b 07-1 (fifth full run): one
    repeat after one untimed step measured batch 32 at 0.518 s/step, and every batch-32 run of the lesson then ran
    at 0.126-0.229 s/step (80 steps in 10.1-18.3 s): the plan was priced 2.3-4x too slow at that batch."""
    from ..train.mlm import throughput

    best: dict[int, float] = {}
    for _ in range(max(1, repeats)):
        for b in (study.small_batch, study.large_batch):
            t = throughput(study.config("lamb", b), data, device=device, steps=steps,
                           warmup_steps=warmup_steps)["step_s"]
            best[b] = min(best.get(b, math.inf), t)
    return best


def plan_runs(study: Study, step_s: dict[int, float], *, small_factors, large_factors, small_extensions: int,
              large_extensions: int) -> list[Runs]:
    """The lesson's runs, planned at their worst case (every sweep extended as far as allowed): at the small
    batch an lr sweep per optimizer; at the large batch an lr sweep per optimizer, a second seed of each
    optimizer's best, and the two LAMB ablations."""
    small, large = study.config("adam", study.small_batch), study.config("adam", study.large_batch)
    return [Runs(f"batch {study.small_batch}", 2 * len(small_factors), small.max_steps, step_s[study.small_batch],
                 sweeps=2, extensions=small_extensions, overhead_s=OVERHEAD_S),
            Runs(f"batch {study.large_batch}", 2 * len(large_factors) + 2 + 2, large.max_steps,
                 step_s[study.large_batch], sweeps=2, extensions=large_extensions, overhead_s=OVERHEAD_S)]


def size(study: Study, step_s: dict[int, float], budget: float, *, small_factors, large_factors,
         small_extensions: int, large_extensions: int, other_s: float = 30.0) -> SizedPlan:
    """:func:`course_lib.budget.size_plan` for this lesson: edge extensions cut first (down to one: a best lr at
    the grid's edge has not been found), then every run's steps alike, down to :data:`FLOOR_SCALE`.
    ``other_s``: the lesson's other cells (corpus, tokenizer, this measurement, the throughput table)."""
    runs = plan_runs(study, step_s, small_factors=small_factors, large_factors=large_factors,
                     small_extensions=small_extensions, large_extensions=large_extensions)
    return size_plan(runs, budget, floor_scale=FLOOR_SCALE, other_s=other_s, min_extensions=1)


def tuning_reading(small_sweep: dict, large_sweep: dict, optimizer: str, small_batch: int, large_batch: int) -> str:
    """Each batch at its own tuned lr: the best peak lr of the sweep at each batch (lowest held-out loss), their
    ratio against the sqrt rule's sqrt(large / small), and whether either best sits at its grid's edge."""
    def best(sweep):
        mine = [r for name, r in sweep.items() if name.startswith(f"{optimizer} b=")]
        if not mine:
            return None, False
        lrs = sorted(r["config"]["peak_lr"] for r in mine)
        top = min(mine, key=best_loss_key)
        return top, top["config"]["peak_lr"] in (lrs[0], lrs[-1]) and len(lrs) > 1

    (s, s_edge), (l, l_edge) = best(small_sweep), best(large_sweep)
    if s is None or l is None or math.isinf(best_loss_key(s)) or math.isinf(best_loss_key(l)):
        return f"{optimizer}: no tuned lr at both batches (a sweep missing or every run diverged)"
    ls, ll = s["config"]["peak_lr"], l["config"]["peak_lr"]
    ratio, rule = ll / ls, math.sqrt(large_batch / small_batch)
    how = ("close to" if abs(math.log(ratio / rule)) < math.log(1.5) else "above" if ratio > rule else "below")
    edges = [f"batch {b}" for b, e in ((small_batch, s_edge), (large_batch, l_edge)) if e]
    line = (f"{optimizer}: tuned peak lr {ls:.2e} at batch {small_batch}, {ll:.2e} at batch {large_batch}: "
            f"{ratio:.2f}x, {how} the sqrt rule's {rule:.2f}x")
    return line + (f" (best at the edge of its grid at {' and '.join(edges)}: the tuned lr may lie beyond)"
                   if edges else "")


def best_of(records: dict[str, dict], prefix: str) -> dict:
    """The record with the lowest held-out loss among those whose label starts with ``prefix``."""
    return min((r for name, r in records.items() if name.startswith(prefix)), key=best_loss_key)


def results_table(records: dict[str, dict], target: float, title: str) -> Table:
    t = Table(["run", "steps", "peak lr", "best eval loss", "final eval loss", "time to loss (s)", "steps to loss",
               "sequences/s"], title=title)
    for name, r in records.items():
        secs, steps = time_to_loss(r, target)
        t.add(**{"run": name, "steps": r["steps"], "peak lr": f"{r['config']['peak_lr']:.2e}",
                 "best eval loss": None if r["best_eval_loss"] is None else round(r["best_eval_loss"], 3),
                 "final eval loss": "diverged" if r["diverged"] else round(r["final_eval_loss"], 3),
                 "time to loss (s)": "not reached" if secs is None else shown_seconds(secs),
                 "steps to loss": "-" if steps is None else steps, "sequences/s": round(r["seqs_per_s"], 1)})
    return t


def shown_seconds(t: float) -> float:
    """A time to the loss as :func:`results_table` shows it and :func:`batch_reading` quotes it: 3 figures (at 0.1 s,
    a GPU's or the smoke profile's sub-second runs all read 0.1 s: #37, the smoke run of 2026-12-01)."""
    return float(f"{t:.3g}")


def eval_interval(record: dict) -> int:
    """Steps between a run's evaluations: the resolution of its steps to the target."""
    steps = record["curves"]["eval_step"]
    return max((b - a for a, b in zip(steps, steps[1:])), default=1)


def seeds_verdict(adam: list[dict], lamb: list[dict], target: float, batch: int) -> tuple[str | None, str]:
    """Adam against LAMB at one batch over their seeds (paired by index): ``("adam" | "lamb" | None, why)``.

    Both reached the target on every seed: their steps to it, read against the seed-to-seed range and
    the evaluation interval (:func:`course_lib.metrics.noise_verdict`) — a gap within either is no
    measurable difference. Otherwise the one that reached it on more seeds, or (neither) the lower
    mean best loss, said with the best losses' own seed range."""
    steps = {name: [time_to_loss(r, target)[1] for r in runs] for name, runs in (("adam", adam), ("lamb", lamb))}
    if all(s is not None for v in steps.values() for s in v):
        res = max(eval_interval(r) for r in adam + lamb)
        won, why = noise_verdict(steps["adam"], steps["lamb"], names=("adam", "lamb"), quantity="steps to the target",
                                 unit="", resolution=res)
        return (None if won is None else ("adam", "lamb")[won]), f"at batch {batch}: {why}"
    hit = {name: sum(s is not None for s in v) for name, v in steps.items()}
    if hit["adam"] != hit["lamb"]:
        won = max(hit, key=hit.get)
        return won, (f"at batch {batch}: {won} reached the target on {hit[won]} of {len(steps[won])} seeds, "
                     f"the other on {min(hit.values())}")
    won, why = noise_verdict([best_loss_key(r) for r in adam], [best_loss_key(r) for r in lamb], names=("adam", "lamb"),
                             quantity="best held-out loss", unit="")
    return (None if won is None else ("adam", "lamb")[won]), (f"at batch {batch}: neither reached the target on every "
                                                              f"seed; {why}")


def large_batch_reading(small: tuple[str | None, str], large: tuple[str | None, str]) -> str:
    """What the two verdicts (small batch, large batch) support about a *large-batch* advantage."""
    (ws, why_s), (wl, why_l) = small, large
    if wl is None:
        return f"{why_l}: at the large batch the optimizers are level here. ({why_s})"
    if ws == wl:
        return (f"{why_l}; but {wl} was ahead at the small batch as well ({why_s}), so its lead is not shown to "
                "come from the batch")
    return f"{why_l}, while at the small batch {why_s.split(': ', 1)[-1]}: the lead opens with the batch"


def rate_spread(records: dict, optimizer: str | None, batch: int) -> tuple[float, float] | None:
    """The lowest and highest sequences/s (as :func:`results_table` shows them) of ``optimizer``'s runs at ``batch``
    among ``records`` (the sweeps and the seeds): runs of one model at one batch differ in their lr only, which does
    not change the work of a step, so their spread is the machine's, not the batch's. ``optimizer`` None: every run
    at ``batch``, whichever optimizer (the same model, micro batch and precision per step; :func:`batch_reading`).
    None with fewer than two."""
    rates = list(_rates_at(records, optimizer, batch).values())
    return (min(rates), max(rates)) if len(rates) > 1 else None


def _rates_at(records: dict, optimizer: str | None, batch: int) -> dict[str, float]:
    """{run name: sequences/s as :func:`results_table` shows them} of ``optimizer``'s runs at ``batch`` among
    ``records`` (every optimizer's with None): the runs :func:`rate_spread` spans."""
    return {name: round(r["seqs_per_s"], 1) for name, r in records.items()
            if (optimizer is None or name.startswith(f"{optimizer} b={batch}"))
            and r["config"]["global_batch_size"] == batch}


def batch_reading(runs: dict, target: float, small_batch: int, large_batch: int, optimizer: str,
                  others: dict | None = None) -> str:
    """The lesson's question for one optimizer: did the large batch reach the target sooner on the clock?
    Its time at both batches, the sequences each needed (steps x batch: sample efficiency) and the
    throughput each ran at — so a slower large batch says which of the two made it slower. ``others``: every run
    of the lesson (the sweeps); where the sequences/s of runs at one batch, whichever optimizer, spread so far that the
    two batches' ranges overlap (:func:`rate_spread`: a busy machine), the throughput side is said to be unresolved,
    and the clock's verdict is read from the sequences alone (read f12e 07-C1: from one optimizer's runs, Adam's slow
    stretch at 256 read as the batch's)."""
    s, l = runs[f"{optimizer} b={small_batch}"], runs[f"{optimizer} b={large_batch} (best lr)"]
    (ts, ss), (tl, sl) = time_to_loss(s, target), time_to_loss(l, target)
    # #37 item 1: the times and rates as the results table above shows them (time to loss at 3 figures, sequences/s
    # at 0.1), so the times are its cells and the rate the ratio of two of them
    rate = round(l["seqs_per_s"], 1) / round(s["seqs_per_s"], 1)
    if ts is None or tl is None:
        which = [f"batch {b}" for b, t in ((small_batch, ts), (large_batch, tl)) if t is None]
        return f"{optimizer}: {' and '.join(which)} did not reach the target; throughput {rate:.2f}x at the large batch"
    seqs = (sl * large_batch) / (ss * small_batch)
    tl, ts = shown_seconds(tl), shown_seconds(ts)
    when = "sooner" if tl < ts else "later" if tl > ts else "at the same time (to the 3 figures shown)"
    head = (f"{optimizer}: the large batch reached the target {when} ({tl:g} s vs {ts:g} s at batch {small_batch}); "
            f"it needed {seqs:.2f}x the sequences ({sl} steps x {large_batch} vs {ss} x {small_batch}) and ran at "
            f"{rate:.2f}x the sequences/s")
    if tl == ts:
        return head + ": on the clock the two batches are level here"
    # #37 (third full run, read r3b): on a busy machine the runs at one batch ran at very different rates, so a rate
    # ratio of two single runs named a "throughput gain" that runs at one batch spread wider than.
    # read f12e 07-C1 (twelfth full run): 'ran at 0.73x the sequences/s: there was no throughput gain ... (the large
    # batch ran no faster per sequence here), so both went against it' rested on Adam's runs alone (101.5-119.1 at
    # 256 against 139.1-159.8 at 32), while LAMB's runs at 256, the same model, micro batch and precision per step,
    # ran at 149.3-165.6: the spread per batch is read from every run at it, whichever optimizer
    spread = {b: rate_spread({**(others or {}), **runs}, None, b) for b in (small_batch, large_batch)}
    if all(spread.values()) and not (spread[large_batch][0] > spread[small_batch][1]
                                     or spread[large_batch][1] < spread[small_batch][0]):
        (a, b), (c, d) = spread[small_batch], spread[large_batch]
        # read r4b 07-1 (H, fourth full run): "(the same work per step: the machine's load)" named a cause no cell
        # measured (as r3a 01-3 in lesson 01's pace reading); the same work at other rates says only that something
        # outside the step moved
        head += (f"; but runs at one batch, both optimizers', ran at {a:g}-{b:g} sequences/s at batch {small_batch} "
                 f"and {c:g}-{d:g} at batch {large_batch} (the same work per step, so something outside the step "
                 "moved: on a shared machine, other jobs; no cell here measured which), so the throughput side is not "
                 "resolved here")
        if (tl > ts) == (seqs > 1):
            return head + (": the " + ("extra" if seqs > 1 else "fewer") + " sequences it needed are what the "
                           "measurement can tell (sample efficiency)")
        return head + ": the clock's difference is within that load's noise"
    # #37 (full run of 2026-12-01): "ran at 0.70x the sequences/s: the throughput gain did not pay ...": a gain is
    # named only where the large batch ran faster (at the figures printed)
    gain = round(rate, 2) > 1
    if tl < ts:
        if gain or seqs >= 1:
            return head + (": the throughput gain paid for the extra sequences" if gain else
                           ": sooner with no throughput gain and more sequences: within the noise of single timings")
        return head + ": with no throughput gain, it got there sooner by needing fewer sequences"
    if not gain:
        # read f12e 07-C1: "ran no faster per sequence here" is said of the batch only where every run at it, whichever
        # optimizer, ran below every run at the small batch (the spreads above, apart); with one run at a batch, of
        # those two runs
        why = (f"every run at batch {large_batch}, both optimizers', ran fewer sequences/s than every run at batch "
               f"{small_batch}: {spread[large_batch][0]:g}-{spread[large_batch][1]:g} against "
               f"{spread[small_batch][0]:g}-{spread[small_batch][1]:g}"
               if all(spread.values()) and spread[large_batch][1] < spread[small_batch][0] else
               "the large batch's runs ran faster, by less than the ratio's 2 decimals show" if all(spread.values())
               else "one run at each batch: the large batch's ran no faster per sequence than the small batch's")
        return head + (f": there was no throughput gain to pay for the extra sequences it needed ({why}), so both "
                       "went against it")
    return head + ": the throughput gain did not pay for the extra sequences it needed (sample efficiency decided)"


def equal_sequences_point(runs: dict, small_batch: int, large_batch: int, optimizer: str) -> dict:
    """The one comparison :func:`equal_sequences_reading` reads and :func:`equal_sequences_table` shows: the
    small-batch run's whole budget of sequences and its last held-out loss, and the large batch's first evaluation
    past that budget (``step``, ``seqs``, ``loss``; ``step`` None when the large run stopped before it)."""
    s, l = runs[f"{optimizer} b={small_batch}"], runs[f"{optimizer} b={large_batch} (best lr)"]
    seqs = s["curves"]["eval_step"][-1] * small_batch
    at = next(((st, v) for st, v in zip(l["curves"]["eval_step"], l["curves"]["eval_loss"])
               if st * large_batch >= seqs), (None, None))
    return {"optimizer": optimizer, "small_seqs": seqs, "small_loss": s["curves"]["eval_loss"][-1], "step": at[0],
            "seqs": None if at[0] is None else at[0] * large_batch, "loss": at[1]}


def equal_sequences_table(runs: dict, small_batch: int, large_batch: int, optimizers=("adam", "lamb")) -> Table:
    """Per optimizer, the held-out losses at equal sequences seen (:func:`equal_sequences_point`): the numbers
    :func:`equal_sequences_reading` quotes (#37 item 1: it had quoted a point of the figure that no table printed)."""
    t = Table(["optimizer", f"batch {small_batch}: sequences", f"batch {small_batch}: held-out loss at its end",
               f"batch {large_batch}: step", f"batch {large_batch}: sequences", f"batch {large_batch}: held-out loss"],
              title="at equal sequences seen: the large batch at its first evaluation past the small batch's budget")
    for opt in optimizers:
        q = equal_sequences_point(runs, small_batch, large_batch, opt)
        t.add(**{"optimizer": opt, f"batch {small_batch}: sequences": q["small_seqs"],
                 f"batch {small_batch}: held-out loss at its end": round(q["small_loss"], 3),
                 f"batch {large_batch}: step": q["step"], f"batch {large_batch}: sequences": q["seqs"],
                 f"batch {large_batch}: held-out loss": None if q["loss"] is None else round(q["loss"], 3)})
    return t


def equal_sequences_reading(runs: dict, small_batch: int, large_batch: int, optimizer: str) -> str:
    """Per sequence seen: the large batch's held-out loss at its first evaluation past the small-batch run's
    whole budget of sequences, against the small-batch run's loss at its end (sample efficiency, without
    the clock). The large batch's extra budget is left out of the comparison. Its numbers are the row of
    :func:`equal_sequences_table`."""
    q = equal_sequences_point(runs, small_batch, large_batch, optimizer)
    seqs, small_loss, step, loss = q["small_seqs"], q["small_loss"], q["step"], q["loss"]
    if step is None:
        return f"{optimizer}: the large-batch run stopped before {seqs:,} sequences"
    if not (math.isfinite(loss) and math.isfinite(small_loss)):
        return f"{optimizer}: a diverged run: no loss to compare at equal sequences"
    how = "lower" if loss < small_loss else "higher"
    return (f"{optimizer}, at equal sequences seen: after {step * large_batch:,} sequences (step {step}) the large "
            f"batch's held-out loss was {loss:.3f}, {how} than the small batch's {small_loss:.3f} after its "
            f"{seqs:,}: per sequence, the large batch learned {'more' if loss < small_loss else 'less'}")


def shown_loss(loss: float) -> float:
    """A held-out loss as :func:`results_table` shows it (3 decimals): readings compare the cells a learner sees."""
    return round(loss, 3) if math.isfinite(loss) else loss


def spread_shown(losses: list[float]) -> float:
    """The seed-to-seed range of best losses, from their cells (:func:`shown_loss`); 0 with fewer than two."""
    shown = [shown_loss(x) for x in losses]
    return shown_loss(max(shown) - min(shown)) if len(shown) > 1 else 0.0


def lr_choice_reading(sweep: dict, optimizer: str, seed_losses: list[float]) -> str:
    """Whether an optimizer's best swept lr is distinguishable from the runner-up: the difference of their
    best losses against the seed-to-seed difference at the best lr (two seeds measured)."""
    mine = sorted((r for name, r in sweep.items() if name.startswith(optimizer)), key=best_loss_key)
    if len(mine) < 2:
        return f"{optimizer}: one lr swept"
    best, second = mine[0], mine[1]
    tag = lambda r: r["label"].rsplit(" ", 1)[-1]  # noqa: E731  the "x0.5" of "..., sqrt rule x0.5"
    if math.isinf(best_loss_key(second)):  # #37 item 2: not "inf lower in loss" where the runner-up diverged
        return (f"{optimizer}: every lr swept diverged" if math.isinf(best_loss_key(best)) else
                f"{optimizer}: best lr {tag(best)}, the only one swept that did not diverge")
    # #37 item 1: the difference of the best-loss cells as the tables show them (3 decimals), not of the raw losses
    # (4.0924 and 4.1786 print as 4.092 and 4.179: 0.087 apart, where the raw difference prints 0.086)
    gap = shown_loss(shown_loss(best_loss_key(second)) - shown_loss(best_loss_key(best)))
    noise = spread_shown(seed_losses)
    if gap <= noise:
        return (f"{optimizer}: best lr {tag(best)}, but {tag(second)} is within the seed-to-seed noise "
                f"(best losses {gap:.3f} apart, seeds {noise:.3f} apart): either is the best lr here")
    return f"{optimizer}: best lr {tag(best)}, {gap:.3f} lower in loss than {tag(second)} (seeds {noise:.3f} apart)"


def ablation_reading(ablations: dict, reference: str, target: float, seed_losses: list[float],
                     seed_steps: list[int | None] | None = None, floor: float | None = None) -> str:
    """Each ablation against the full LAMB run (``reference``), read from the runs: diverged, reached the
    target (its steps against the full run's, within the evaluation interval and the full run's own seeds'
    steps, ``seed_steps``, is no difference), and its best loss against the full run's, compared with
    LAMB's seed-to-seed difference of best loss. ``floor``: what token frequencies alone score
    (:meth:`MLMData.unigram_loss`); an ablation whose best loss is not below it learned nothing beyond them,
    and says so (the fourth read: "it did not diverge" at 4.960 beside a floor of 4.940)."""
    ref = ablations[reference]
    noise = spread_shown(seed_losses)
    _, ref_steps = time_to_loss(ref, target)
    seen = [s for s in (seed_steps or [ref_steps]) if s is not None]
    lines = []
    for name, r in ablations.items():
        if name == reference:
            continue
        if r["diverged"]:
            lines.append(f"{name}: diverged")
            continue
        _, steps = time_to_loss(r, target)
        gap = shown_loss(shown_loss(best_loss_key(r)) - shown_loss(best_loss_key(ref)))  # the cells (lr_choice_reading)
        # #37 (full run): "later by more than an evaluation interval; ...: no measurable effect": the loss's verdict
        effect = (f"best loss {gap:+.3f} vs the full LAMB, within the seed-to-seed noise ({noise:.3f}): no measurable "
                  "effect on the best loss" if abs(gap) <= noise
                  else f"best loss {gap:+.3f} vs the full LAMB (seeds {noise:.3f} apart)")
        if steps is None:
            reach = "did not reach the target"
        elif not seen:
            reach = f"reached the target at step {steps} (full LAMB did not)"
        else:
            res = max(eval_interval(r), eval_interval(ref))
            lo, hi = min(seen) - res, max(seen) + res
            within = lo <= steps <= hi
            reach = (f"reached the target at step {steps} (full LAMB: {', '.join(map(str, seen))} on its seeds, "
                     f"evaluations every {res}): "
                     + ("no measurable difference in steps" if within else
                        ("sooner" if steps < lo else "later") + " by more than an evaluation interval"))
        learned = ""
        if floor is not None and shown_loss(best_loss_key(r)) >= shown_loss(floor):
            learned = (f", but its best loss, {shown_loss(best_loss_key(r)):.3f}, is no lower than token frequencies "
                       f"alone score ({shown_loss(floor):.3f}): it learned nothing beyond them")
        lines.append(f"{name}: {reach}; {effect}; it did not diverge{learned}")
    return "\n".join(lines)


def lead_by_batch(runs: dict, target: float, small_batch: int, large_batch: int, seed_tags=("best lr",)) -> str:
    """LAMB's steps to the target over Adam's at the small batch and at the large one (the large one's
    mean over ``seed_tags``): a lead that opens or shrinks with the batch (review 2026-12-01 #2). Which optimizer is
    ahead at each batch is :func:`seeds_verdict`'s (the lesson's verdict on those runs); the ratios' bounds, one
    evaluation interval either way, say whether the lead changed between the batches."""
    def keys_of(opt, batch):
        keys = ([f"{opt} b={small_batch}"] if batch == small_batch
                else [f"{opt} b={large_batch} ({t})" for t in seed_tags])
        return [k for k in keys if k in runs]

    def steps(opt, batch):
        got = [time_to_loss(runs[k], target)[1] for k in keys_of(opt, batch)]
        return None if not got or any(g is None for g in got) else sum(got) / len(got)

    def resolution(batch):  # steps between evaluations of the runs read at this batch
        keys = ([f"{o} b={small_batch}" for o in ("adam", "lamb")] if batch == small_batch
                else [f"{o} b={large_batch} ({t})" for o in ("adam", "lamb") for t in seed_tags])
        return max((eval_interval(runs[k]) for k in keys if k in runs), default=1)

    ratios, bounds, side = {}, {}, {}
    for b in (small_batch, large_batch):
        a, l = steps("adam", b), steps("lamb", b)
        ratios[b] = None if a is None or l is None else (l, a, l / a)
        if ratios[b] is not None:
            # #37 (full run of 2026-12-01): "1.00 at batch 256 (22/22): Adam needed fewer steps at both batches",
            # and earlier a "shrank" from 0.71 to 0.78 with steps known to 12: each ratio is read with the
            # resolution of its steps (one evaluation interval either way)
            res = resolution(b)
            lo, hi = max(l - res, 0) / (a + res), (l + res) / max(a - res, 1e-9)
            bounds[b] = (lo, hi)
            # who is ahead at a batch is the lesson's one verdict on its seeds (seeds_verdict, printed in the line
            # above this one): read r7b 07-1, seventh full run: 'at batch 256: lamb lower on every seed (steps to the
            # target: adam 23 vs lamb 20; seed range 2)' and then, from these wider bounds, 'at batch 256 the two are
            # level within the evaluation interval', over LAMB at 20, 20 and Adam at 22, 24 on one evaluation grid
            won = seeds_verdict([runs[k] for k in keys_of("adam", b)], [runs[k] for k in keys_of("lamb", b)],
                                target, b)[0]
            side[b] = won or "level"
    if any(v is None for v in ratios.values()):
        return "LAMB/Adam steps to the target: not every run reached it, so the lead cannot be followed over the batch"
    (ls, as_, rs), (ll, al, rl) = ratios[small_batch], ratios[large_batch]
    ss, sl = side[small_batch], side[large_batch]
    apart = bounds[large_batch][0] > bounds[small_batch][1] or bounds[small_batch][0] > bounds[large_batch][1]
    if ss == sl == "lamb":
        trend = ("LAMB's lead " + ("shrank" if rl > rs else "grew") + " as the batch grew" if apart else
                 "LAMB ahead at both batches; whether its lead changed with the batch is within the evaluation "
                 "intervals")
    elif ss == sl == "adam":
        trend = "Adam needed fewer steps at both batches"
    elif ss == sl == "level":
        trend = "neither needed measurably fewer steps at either batch (within the evaluation intervals)"
    elif "lamb" in (ss, sl):
        trend = "LAMB ahead at batch " + (f"{large_batch} only" if sl == "lamb" else f"{small_batch} only")
    else:
        trend = (f"Adam needed fewer steps at batch {small_batch if ss == 'adam' else large_batch}; at batch "
                 f"{large_batch if ss == 'adam' else small_batch} the two are level within the evaluation interval")
    # read f12e 07-S6 (twelfth full run): "at batch 256: no measurable difference (... within the measurement's
    # resolution of 2)" and, a line below, "at batch 256 the two are level within the evaluation interval (steps known
    # to within 4 at most)", the 4 being batch 32's: each batch's own resolution, as the bounds above use it
    rs_, rl_ = resolution(small_batch), resolution(large_batch)
    known = (f"steps known to within {rs_} at both batches" if rs_ == rl_ else
             f"steps known to within {rs_} at batch {small_batch}, {rl_} at batch {large_batch}")
    return (f"LAMB/Adam steps to the target: {rs:.2f} at batch {small_batch} ({ls:g}/{as_:g}), {rl:.2f} at batch "
            f"{large_batch} ({ll:g}/{al:g}): {trend} ({known}).")


def rate_noise_source(records: dict) -> dict | None:
    """Where :func:`rate_noise` comes from: the optimizer and batch whose runs (among ``records``) spread the most
    (``noise``: highest / lowest - 1 of their sequences/s as :func:`results_table` shows them), their ``low`` and
    ``high`` rates and the runs that ran them (``slowest``, ``fastest``). None with no two such runs."""
    groups = sorted({(name.split(" ", 1)[0], r["config"]["global_batch_size"]) for name, r in records.items()})
    best = None
    for o, b in groups:
        s = rate_spread(records, o, b)
        if s and s[0] > 0 and (best is None or s[1] / s[0] - 1 > best["noise"]):
            named = _rates_at(records, o, b)
            best = {"noise": s[1] / s[0] - 1, "optimizer": o, "batch": b, "low": s[0], "high": s[1],
                    "slowest": min(named, key=named.get), "fastest": max(named, key=named.get)}
    return best


def rate_noise(records: dict) -> float | None:
    """How far the sequences/s of runs doing the same work moved in this lesson: the largest ``highest / lowest - 1``
    of :func:`rate_spread` over each optimizer and batch among ``records`` (the sweeps and the seeds). None with no
    two such runs. Which runs set it: :func:`rate_noise_source`."""
    src = rate_noise_source(records)
    return None if src is None else src["noise"]


def precision_reading(bert: float, neumf: float | None, margin: float = 1.1, noise: float | None = None,
                      source: dict | None = None) -> str:
    """bf16's speedup over fp32 for lesson 07's BERT next to lesson 05's NeuMF on the same machine
    (``neumf``: None when lesson 05 did not run here), and what a gap between them means. ``noise``: how far runs of the
    same work moved in this lesson (:func:`rate_noise`); the BERT ratio is one short run per mode, so a gap within it
    is none this measurement resolves (read r10c 07-H1, tenth full run: "1.38x for this BERT, 1.52x for lesson 05's
    NeuMF ...: here NeuMF gained more than the transformer (its step is smaller, so what 16 bits save in memory
    traffic shows more)", 10.07% apart against a 10% margin, while the lesson's runs at one batch moved up to 18%, and
    a cause no cell measured). ``source``: :func:`rate_noise_source`, the runs that set ``noise``, named beside it.

    Read f12e 07-H1 (twelfth full run): "1.36x for this BERT, 1.19x for lesson 05's NeuMF ...: within 96% of each
    other, the most that runs of the same work moved ...: no difference between the models this measurement
    resolves": the ratios are 1.14x apart, the 96% was one slow run's (LAMB at 256, 84.3 against 165.6 sequences/s),
    and BERT's own 1.36x, one short run per mode as well, lay inside that same noise unsaid. The gap is stated first,
    then the gauge and the runs that set it, and whether BERT's own ratio over fp32 is within it."""
    line = f"bf16 vs fp32: {bert:.2f}x for this BERT"
    if neumf is None:
        return line + " (lesson 05's NeuMF ratio is not saved here)"
    line += f", {neumf:.2f}x for lesson 05's NeuMF on the same machine"
    if noise is not None and 1 + noise > margin:
        margin = 1 + noise
        gap = max(bert / neumf, neumf / bert)
        if gap < margin:
            where = ("" if source is None else
                     f" ({source['optimizer']}'s runs at batch {source['batch']}: [{source['slowest']}] at "
                     f"{source['low']:g}, [{source['fastest']}] at {source['high']:g})")
            own = (f", nor BERT's own {bert:.2f}x over fp32, which is within that noise too"
                   if max(bert, 1 / bert) < margin else f"; BERT's own {bert:.2f}x over fp32 lies beyond that noise")
            return line + (f": {gap:.2f}x apart, within {noise:.0%}, the most that runs of the same work moved in "
                           f"sequences/s in this lesson{where}. BERT's ratio is one short run per mode, so this "
                           f"measurement resolves no difference between the models{own}")
    if bert >= neumf * margin and neumf >= margin:
        # #37 (full runs of 2026-12-01): NeuMF measured 1.43x and 1.48x faster in bf16, so "which they do not" speed
        # up was contradicted by the ratio it followed; the clause is chosen by NeuMF's own ratio
        return line + (": 16-bit units sped up both steps here, the transformer's, made of matmuls, more; how much of "
                       "NeuMF's step its matmuls are at lesson 05's batch is in lesson 05's phase table")
    if bert >= neumf * margin:
        return line + (": the transformer's step is mostly matmuls, which 16-bit units speed up; NeuMF's is mostly "
                       "embedding lookups and the optimizer's pass over its tables, which they did not speed up here")
    if neumf >= bert * margin:
        return line + (": here NeuMF gained more than the transformer, whose step is mostly matmuls (no cell here "
                       "measured why; lesson 05's phase table times NeuMF's step by phase)")
    return line + f": within {margin - 1:.0%} of each other, no difference between the models worth reading into"


def throughput_table(tp: dict[str, dict], title: str) -> Table:
    """Section 5's throughput per precision (``tp``: mode -> :func:`course_lib.train.mlm.throughput`'s result, fp32
    first) with each mode's speedup over fp32: the cells :func:`precision_reading`'s BERT ratio is read from."""
    t = Table(["precision", "sequences/s", "tokens/s", "speedup vs fp32"], title=title)
    for mode, r in tp.items():
        t.add(precision=mode, **{"sequences/s": round(r["seqs_per_s"], 1), "tokens/s": round(r["tokens_per_s"]),
                                 "speedup vs fp32": round(r["seqs_per_s"] / tp["fp32"]["seqs_per_s"], 2)})
    return t


def trust_ratio_spread(record: dict) -> dict:
    """LAMB's per-layer trust ratios of a run, summarized: ``table`` (weights x steps), the first
    step's range, and per step the largest ratio over the smallest (its median and max)."""
    table = torch.tensor(list(record["trust_ratios"].values()))  # (weights, steps)
    spread = table.max(0).values / table.min(0).values
    return {"table": table, "first_min": float(table[:, 0].min()), "first_max": float(table[:, 0].max()),
            "spread": spread, "spread_median": float(spread.median()), "spread_max": float(spread.max())}


def peak_step_line(record: dict, adam_peak_lr: float, spread: dict) -> str:
    """LAMB's step per element at its peak lr (``record``: the LAMB run, ``spread``: its :func:`trust_ratio_spread`)
    beside Adam's best peak lr: lr x the median trust ratio at that step, the product of the two factors as printed
    (read r8b 07-1, eighth full run: "LAMB lr 2.83e-02 x median ratio 0.047 = 1.34e-03", where 2.83e-02 x 0.047 is
    1.33e-03: the product was taken before the ratio was rounded to 0.047)."""
    lrs = record["curves"]["lr"]
    peak = lrs.index(max(lrs))
    lr = float(f"{lrs[peak]:.3g}")
    ratio = float(f"{float(spread['table'][:, peak].median()):.3g}")
    return (f"at the peak lr (step {peak + 1}): LAMB lr {lr:.2e} x median ratio {ratio:.3g} = {lr * ratio:.2e} per "
            f"element; Adam's best peak lr {adam_peak_lr:.2e}")


def saved_setting(saved07: dict | None, profile: str, plan) -> dict:
    """What a later lesson (11, 12) takes from lesson 07's saved result: the BERT preset, sequence
    length and vocabulary, and the target loss. From lesson 07's run in this ``profile`` (smoke and
    full train different models on different text), else the tier plan's, with no target."""
    ok = bool(saved07 and saved07.get("profile") == profile)
    # the small-batch Adam baseline that set the target ("adam b=32"): how many steps it took to reach it
    base = next((r for r in (saved07 or {}).get("runs", []) if ok and r.get("label", "").startswith("adam b=")
                 and "(" not in r["label"]), None)
    lamb = next((r for r in (saved07 or {}).get("runs", []) if ok and base is not None
                 and r.get("label") == f"lamb b={base.get('global_batch_size')}"), None)
    return {"model": saved07["model"] if ok else plan.bert_model,
            "seq_len": saved07.get("seq_len", plan.bert_seq_len) if ok else plan.bert_seq_len,
            "vocab_size": plan.bert_vocab_size, "target_loss": saved07.get("target_loss") if ok else None,
            "source": f"lesson 07's {profile} run" if ok else  # issue 36: a lesson run alone says so
            f"the tier plan's BERT, with no target loss: lesson 07 has not saved a {profile}-profile run here",
            "target_steps": None if base is None else base.get("steps_to_loss"),
            "target_batch": None if base is None else base.get("global_batch_size"),
            # its small-batch LAMB run's steps to the same target (lesson 12 searches LAMB: #37, read r3b)
            "lamb_steps": None if lamb is None else lamb.get("steps_to_loss"),
            # its held-out curve and peak lr: where it stood at a search trial's last step (#37, read r9e 12-H1)
            "lamb_curve": None if lamb is None else [list(p) for p in lamb.get("eval_loss_curve", [])],
            "lamb_lr": None if lamb is None else lamb.get("peak_lr")}


def summary(record: dict, target: float, label: str | None = None) -> dict:
    """The scalars of one run that the lesson saves (and gpu-check prints); ``label``: the name the lesson gives
    the run (``"adam b=32"``: the small batch's tuned run, whatever lr the sweep chose), else the run's own."""
    secs, steps = time_to_loss(record, target)
    c = record["curves"]
    return {"label": label or record["label"], "run": record["label"], "steps": record["steps"],
            "global_batch_size": record["config"]["global_batch_size"], "peak_lr": record["config"]["peak_lr"],
            "final_eval_loss": record["final_eval_loss"], "diverged": record["diverged"], "time_to_loss_s": secs,
            "steps_to_loss": steps, "seqs_per_s": record["seqs_per_s"],
            "eval_loss_curve": list(zip(c["eval_step"], c["eval_loss"]))}
