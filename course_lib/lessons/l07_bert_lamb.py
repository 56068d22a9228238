"""Lesson 07's study: Adam vs LAMB at a large batch, each at its own swept lr, read from the records.

Every run is ``train_mlm`` (the one engine); this module states the study's settings once
(:class:`Study`), sweeps each optimizer's lr with a grid that extends at its edge
(:func:`course_lib.sweeps.sweep_with_edge_extension`), and reads the records: time and
steps to a target loss, the results tables, and the lesson's questions as
:class:`course_lib.compare.Comparison` rows (Adam vs LAMB at each batch, small vs large batch on
the clock, the tuned lr against the sqrt rule, the lr choice, the ablations, bf16), what gets saved.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import torch

from .. import compare
from ..budget import Runs, SizedPlan, size_plan
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
    ones ``large_factor`` times that (a choice of this lesson: the seed talk trains every rung for the
    same 10 epochs, but at the large batch a budget of this model's few dozen steps would not leave the
    early plateau), and no run passes over the corpus more than ``max_epochs`` times: on a small corpus
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
    instead when the corpus capped the budget."""
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
    prints one summary line per run instead of a line per evaluation (a line per evaluation is hundreds of
    lines over the full profile's runs)."""
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
OVERHEAD_S = 3.0  # per run: 20 evaluations of the held-out set and the model's build (measured: ~2 s on 2 cores)


def measure_step_s(study: Study, data, *, device, steps: int = 3, repeats: int = 2,
                   warmup_steps: int = 2) -> dict[int, float]:
    """Seconds per training step of this lesson's own model at each of its two batches, now, on this machine
    (``throughput``: ``steps`` timed steps after ``warmup_steps`` untimed ones), ``repeats`` times with the batches
    interleaved; each batch keeps its fastest repeat, the least disturbed (lesson 05's rule,
    :func:`course_lib.lessons.l05_speed.precision_throughput`): one repeat after one untimed step can
    price a batch several times slower than its runs then train."""
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
                 "time to loss (s)": "not reached" if secs is None else float(f"{secs:.3g}"),
                 "steps to loss": "-" if steps is None else steps, "sequences/s": round(r["seqs_per_s"], 1)})
    return t


def eval_interval(record: dict) -> int:
    """Steps between a run's evaluations: the resolution of its steps to the target."""
    steps = record["curves"]["eval_step"]
    return max((b - a for a, b in zip(steps, steps[1:])), default=1)


def equal_sequences_point(runs: dict, small_batch: int, large_batch: int, optimizer: str) -> dict:
    """The point :func:`equal_sequences_comparisons` compares and :func:`equal_sequences_table` shows: the
    small-batch run's whole budget of sequences and its last held-out loss, and the large batch's first evaluation
    past that budget (``step``, ``seqs``, ``loss``; ``step`` None when the large run stopped before it)."""
    s, l = runs[f"{optimizer} b={small_batch}"], runs[f"{optimizer} b={large_batch} (best lr)"]
    seqs = s["curves"]["eval_step"][-1] * small_batch
    at = next(((st, v) for st, v in zip(l["curves"]["eval_step"], l["curves"]["eval_loss"])
               if st * large_batch >= seqs), (None, None))
    return {"optimizer": optimizer, "small_seqs": seqs, "small_loss": s["curves"]["eval_loss"][-1], "step": at[0],
            "seqs": None if at[0] is None else at[0] * large_batch, "loss": at[1]}


def equal_sequences_table(runs: dict, small_batch: int, large_batch: int, optimizers=("adam", "lamb")) -> Table:
    """Per optimizer, the held-out losses at equal sequences seen (:func:`equal_sequences_point`)."""
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


def throughput_table(tp: dict[str, dict], title: str) -> Table:
    """Section 5's throughput per precision (``tp``: mode -> :func:`course_lib.train.mlm.throughput`'s result, fp32
    first) with each mode's speedup over fp32 (:func:`precision_comparisons` decides bf16's)."""
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
    (each rounded to 3 figures first, so the product is the one of the printed factors)."""
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
            "source": f"lesson 07's {profile} run" if ok else  # a lesson run alone says where its setting came from
            f"the tier plan's BERT, with no target loss: lesson 07 has not saved a {profile}-profile run here",
            "target_steps": None if base is None else base.get("steps_to_loss"),
            "target_batch": None if base is None else base.get("global_batch_size"),
            # its small-batch LAMB run's steps to the same target (lesson 12 searches LAMB)
            "lamb_steps": None if lamb is None else lamb.get("steps_to_loss"),
            # its held-out curve and peak lr: where it stood at a search trial's last step (lesson 12)
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


# --------------------------------------------------------------------------- the lesson's questions, decided
LOSS_SHOWN = 0.001  # held-out losses as the tables show them (3 decimals): the resolution of a single run's loss
LR_EFFECT = 0.5  # a tuned lr within 1.5x of the sqrt rule's: as close as a grid of factor-2 steps places it
THROUGHPUT_RESOLUTION = 0.1  # one short throughput run per mode, where no run of the lesson measured the pace's drift


def _steps(records: list[dict], target: float) -> list[int] | None:
    got = [time_to_loss(r, target)[1] for r in records]
    return None if not got or any(g is None for g in got) else got


def _at(runs: dict, optimizer: str, batch: int, small_batch: int, seed_tags) -> list[dict]:
    """The runs of ``optimizer`` read at ``batch``: the tuned small-batch run, or the large batch's seeds."""
    keys = [f"{optimizer} b={batch}"] if batch == small_batch else [f"{optimizer} b={batch} ({t})" for t in seed_tags]
    return [runs[k] for k in keys if k in runs]


def pace_drift(records: dict, batch: int | None = None) -> float | None:
    """How far the sequences/s of runs doing the same work moved (highest / lowest - 1) among ``records`` at ``batch``
    (every batch where None: the largest of them). Runs at one batch differ in their lr and optimizer only, which
    do not change the work of a step, so their spread is the machine's. None with fewer than two runs at a batch."""
    batches = [batch] if batch is not None else sorted({r["config"]["global_batch_size"] for r in records.values()})
    drifts = []
    for b in batches:
        rates = [r["seqs_per_s"] for r in records.values() if r["config"]["global_batch_size"] == b]
        if len(rates) > 1 and min(rates) > 0:
            drifts.append(max(rates) / min(rates) - 1)
    return max(drifts) if drifts else None


def optimizer_comparisons(runs: dict, target: float, small_batch: int, large_batch: int,
                          seed_tags=("best lr",)) -> list[compare.Comparison]:
    """LAMB against Adam at each batch: steps to the target, LAMB / Adam (a step count does not depend on how busy
    the machine was). The large batch's seeds give a spread; every step count is known to within one evaluation
    interval, the resolution. A batch where a run missed the target has no row (the table shows it)."""
    out = []
    for b in (small_batch, large_batch):
        adam, lamb = _at(runs, "adam", b, small_batch, seed_tags), _at(runs, "lamb", b, small_batch, seed_tags)
        sa, sl = _steps(adam, target), _steps(lamb, target)
        if sa is None or sl is None:
            continue
        res = max(eval_interval(r) for r in adam + lamb) / max(1, min(sa + sl))
        out.append(compare.ratio(f"steps to the target, LAMB / Adam, batch {b}", sa, sl, needed=compare.TIME_EFFECT,
                                 resolution=res, basis=f"{len(sa)} seed(s) each; evaluations every "
                                                       f"{max(eval_interval(r) for r in adam + lamb)} steps"))
    return out


def batch_comparisons(runs: dict, target: float, small_batch: int, large_batch: int, optimizer: str,
                      others: dict | None = None, seed_tags=("best lr",)) -> list[compare.Comparison]:
    """The lesson's question for one optimizer: did the large batch reach the target sooner on the clock? Its time
    (large / small; resolution: the pace's drift over every run at the batches, :func:`pace_drift`, and the time
    between evaluations) and the sequences each needed (sample efficiency; resolution: the evaluation interval)."""
    s, large = _at(runs, optimizer, small_batch, small_batch, seed_tags), _at(runs, optimizer, large_batch,
                                                                               small_batch, seed_tags)
    ss, sl = _steps(s, target), _steps(large, target)
    if not s or not large or ss is None or sl is None:
        return []
    ts, tl = [time_to_loss(r, target)[0] for r in s], [time_to_loss(r, target)[0] for r in large]
    spacing = max(eval_interval(r) / max(1, n) for r, n in zip(s + large, ss + sl))
    drift = pace_drift({**(others or {}), **runs}) or 0.0
    return [compare.ratio(f"{optimizer}: time to the target, batch {large_batch} / batch {small_batch}", ts, tl,
                          needed=compare.TIME_EFFECT, resolution=drift + spacing,
                          basis=f"pace drift {drift:.0%}; evaluation spacing"),
            compare.ratio(f"{optimizer}: sequences to the target, batch {large_batch} / batch {small_batch}",
                          [n * small_batch for n in ss], [n * large_batch for n in sl], needed=compare.TIME_EFFECT,
                          resolution=spacing, basis="evaluation spacing")]


def throughput_comparisons(records: dict, small_batch: int, large_batch: int) -> list[compare.Comparison]:
    """Did the large batch process sequences faster? Every run at each batch (both optimizers, sweeps and seeds:
    the same work per step) is one measurement of its rate."""
    rates = {b: [r["seqs_per_s"] for r in records.values() if r["config"]["global_batch_size"] == b]
             for b in (small_batch, large_batch)}
    if min(len(v) for v in rates.values()) < 2:
        return []
    return [compare.ratio(f"sequences/s, batch {large_batch} / batch {small_batch} (every run)", rates[small_batch],
                          rates[large_batch], needed=compare.SPEED_EFFECT)]


def _best_losses(records: list[dict]) -> list[float]:
    return [best_loss_key(r) for r in records if math.isfinite(best_loss_key(r))]


def _seed_spread(records: list[dict]) -> float:
    """The large batch's seed-to-seed range of best losses, at least :data:`LOSS_SHOWN`: the resolution of one run's
    loss."""
    losses = _best_losses(records)
    return max(LOSS_SHOWN, max(losses) - min(losses)) if len(losses) > 1 else LOSS_SHOWN


def equal_sequences_comparisons(runs: dict, small_batch: int, large_batch: int, optimizer: str,
                                seed_tags=("best lr",)) -> list[compare.Comparison]:
    """Per sequence seen: the large batch's held-out loss at its first evaluation past the small-batch run's budget
    less the small-batch run's at its end (:func:`equal_sequences_point`), each a single run, read with the large
    batch's seed-to-seed range as resolution."""
    q = equal_sequences_point(runs, small_batch, large_batch, optimizer)
    if q["loss"] is None or not (math.isfinite(q["loss"]) and math.isfinite(q["small_loss"])):
        return []
    res = _seed_spread(_at(runs, optimizer, large_batch, small_batch, seed_tags))
    return [compare.difference(f"{optimizer}: held-out loss at equal sequences, batch {large_batch} - batch "
                               f"{small_batch}", q["small_loss"], 0.0, q["loss"], 0.0, needed=compare.LOSS_EFFECT,
                               resolution=res, basis="one run each; seed range as resolution")]


def tuning_comparisons(small_sweep: dict, large_sweep: dict, optimizer: str, small_batch: int,
                       large_batch: int) -> list[compare.Comparison]:
    """Each batch at its own tuned lr: the best peak lr at the large batch over the small one's, against the sqrt
    rule's sqrt(large / small). Each best is known to one step of its grid, the resolution."""
    def swept(sweep):
        mine = [r for name, r in sweep.items() if name.startswith(f"{optimizer} b=")]
        lrs = sorted({r["config"]["peak_lr"] for r in mine})
        step = max([b / a for a, b in zip(lrs, lrs[1:])] or [2.0])
        return (min(mine, key=best_loss_key) if mine else None), step

    (s, s_step), (lg, l_step) = swept(small_sweep), swept(large_sweep)
    if s is None or lg is None or math.isinf(best_loss_key(s)) or math.isinf(best_loss_key(lg)):
        return []
    value = lg["config"]["peak_lr"] / s["config"]["peak_lr"] / math.sqrt(large_batch / small_batch)
    return [compare.quantity_ratio(f"{optimizer}: tuned lr, batch {large_batch} / batch {small_batch}, over the sqrt "
                                   "rule's", value, 0.0, needed=LR_EFFECT, resolution=max(s_step, l_step) - 1,
                                   basis="one step of the lr grids")]


def lr_choice_comparisons(sweep: dict, optimizer: str, seeds: list[dict]) -> list[compare.Comparison]:
    """Is an optimizer's best swept lr distinguishable from the runner-up? Their best losses' difference, each a
    single run, read with the seed-to-seed range at the best lr (``seeds``) as resolution."""
    mine = sorted((r for name, r in sweep.items() if name.startswith(optimizer)), key=best_loss_key)
    if len(mine) < 2 or math.isinf(best_loss_key(mine[1])):
        return []
    tag = lambda r: r["label"].rsplit(" ", 1)[-1]  # noqa: E731  the "x0.5" of "..., sqrt rule x0.5"
    return [compare.difference(f"{optimizer}: best loss, lr {tag(mine[1])} - lr {tag(mine[0])} (the best)",
                               best_loss_key(mine[0]), 0.0, best_loss_key(mine[1]), 0.0, needed=compare.LOSS_EFFECT,
                               resolution=_seed_spread(seeds), basis="one run each; seed range as resolution")]


def ablation_comparisons(ablations: dict, reference: str, target: float, seeds: list[dict]) -> list[compare.Comparison]:
    """Each ablation against the full LAMB (its ``seeds``: the full run's seeds at the same settings): best loss,
    ablation - full (the seeds' standard error, plus the losses' 3 decimals), and steps to the target, ablation /
    full (resolution: the evaluation interval). A diverged ablation, or one that missed the target, has no row
    for what it has no number for (the table shows it)."""
    full = _best_losses(seeds)
    full_steps = _steps(seeds, target)
    out = []
    for name, r in ablations.items():
        if name == reference or r["diverged"] or math.isinf(best_loss_key(r)):
            continue
        se = statistics.stdev(full) / math.sqrt(len(full)) if len(full) > 1 else 0.0
        out.append(compare.difference(f"{name}: best loss - full LAMB's", statistics.mean(full), se,
                                      best_loss_key(r), 0.0, needed=compare.LOSS_EFFECT,
                                      df=len(full) - 1 if len(full) > 1 else None, resolution=LOSS_SHOWN,
                                      n=f"{len(full)}/1", basis=f"{len(full)} seeds of the full LAMB"))
        steps = time_to_loss(r, target)[1]
        if steps is not None and full_steps:
            res = max(eval_interval(x) for x in seeds + [r]) / max(1, min(full_steps + [steps]))
            out.append(compare.ratio(f"{name}: steps to the target / full LAMB's", full_steps, [steps],
                                     needed=compare.TIME_EFFECT, resolution=res, basis="evaluation spacing"))
    return out


def precision_comparisons(tp: dict, saved05: dict | None, records: dict) -> list[compare.Comparison]:
    """bf16 against fp32 for this BERT (``tp``: :func:`course_lib.train.mlm.throughput` per mode), and its speedup
    over lesson 05's NeuMF's on the same machine (``saved05``: lesson 05's saved speeds, None where it did not run
    here). One short run per mode: the resolution is how far the lesson's runs of the same work moved
    (:func:`pace_drift` over ``records``), else :data:`THROUGHPUT_RESOLUTION`."""
    if "bf16" not in tp:
        return []
    drift = pace_drift(records) or THROUGHPUT_RESOLUTION
    basis = f"one run per mode; pace drift {drift:.0%}"
    bert = tp["bf16"]["seqs_per_s"] / tp["fp32"]["seqs_per_s"]
    out = [compare.quantity_ratio("bf16 / fp32 sequences/s, this BERT", bert, 0.0, needed=compare.SPEED_EFFECT,
                                  resolution=drift, basis=basis)]
    if saved05 and saved05.get("bf16") and saved05.get("fp32"):
        neumf = saved05["bf16"] / saved05["fp32"]
        out.append(compare.quantity_ratio("bf16's speedup, this BERT / lesson 05's NeuMF", bert / neumf, 0.0,
                                          needed=compare.SPEED_EFFECT, resolution=(1 + drift) ** 2 - 1,
                                          basis=basis + ", both lessons"))
    return out


def comparisons(runs: dict, small_sweep: dict, sweep: dict, target: float, small_batch: int, large_batch: int,
                seed_tags=("best lr",)) -> list[compare.Comparison]:
    """Section 3's questions: Adam against LAMB at each batch, then per optimizer the tuned lr against the sqrt
    rule, the lr choice, the clock, the sequences and the loss at equal sequences; and the throughput per batch."""
    every = {**small_sweep, **sweep, **runs}
    out = optimizer_comparisons(runs, target, small_batch, large_batch, seed_tags)
    for opt in ("adam", "lamb"):
        seeds = _at(runs, opt, large_batch, small_batch, seed_tags)
        out += (tuning_comparisons(small_sweep, sweep, opt, small_batch, large_batch)
                + lr_choice_comparisons(sweep, opt, seeds)
                + batch_comparisons(runs, target, small_batch, large_batch, opt, every, seed_tags)
                + equal_sequences_comparisons(runs, small_batch, large_batch, opt, seed_tags))
    return out + throughput_comparisons(every, small_batch, large_batch)
