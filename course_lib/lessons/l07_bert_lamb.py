"""Lesson 07's study: Adam vs LAMB at the largest batch the budget allows, each at its own swept lr.

Every run is ``train_mlm`` (the one engine) with the same sequences at every batch; this module sizes the study
(:func:`size_study`), states its settings once (:class:`Study`), sweeps each optimizer's lr with a grid that extends
at its edge (:func:`course_lib.sweeps.sweep_with_edge_extension`), and reads the records: time and steps to a target
loss, the results tables, and the lesson's questions as :class:`course_lib.compare.Comparison` rows, what gets saved.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import torch

from .. import compare
from ..progress import resolve_progress
from ..sweeps import sweep_with_edge_extension
from ..tables import Table
from ..train.mlm import MLMTrainConfig, train_mlm


@dataclass(frozen=True)
class Study:
    """The study's settings: two batches, every run's budget in sequences, each optimizer's lr at the small batch.

    ``config(optimizer, batch, lr_factor)`` is the one place a run's settings come from: the sqrt rule scales
    ``base_lrs[optimizer]`` from ``small_batch`` to ``batch``, times ``lr_factor``; every run gets ``seqs`` sequences,
    the same epochs at every batch (as the seed talk trains every rung for the same 10 epochs), a large-batch run 20%
    of its steps as warmup, a small one 10%; 40 evaluations per run (the resolution of its steps to a target).
    """

    small_batch: int
    large_batch: int
    micro_batch: int  # at most this many sequences per forward/backward on one rank
    seqs: int
    base_lrs: dict = field(default_factory=lambda: {"adam": 1e-3, "lamb": 1e-2})
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
    """The lesson's runs at worst: each optimizer's lr sweep at each batch, fully extended; a second seed of each best
    at the large batch; two LAMB ablations."""
    return 2 * (len(small_factors) + small_extensions) + 2 * (len(large_factors) + large_extensions) + 2 + 2


def size_study(seq_s: float, budget: float, *, num_train: int, small_batch: int, runs: int, other_s: float = 40.0,
               large_batch: int | None = None, seqs: int | None = None) -> dict:
    """Every run's sequences and the large batch from the pace ``seq_s`` (seconds per sequence, about the same at any
    batch on one CPU) and ``budget`` (``other_s`` of it for the other cells): every run an equal share, at most
    :data:`MAX_EPOCHS` epochs; the largest ``small_batch`` x 2^k that still takes :data:`MIN_LARGE_STEPS` steps of
    them, at most half the corpus (more is full-batch descent), at least :data:`MIN_LARGE_FACTOR` x ``small_batch``
    (over budget if it must). ``large_batch``, ``seqs``: given instead of sized."""
    if min(seq_s, budget, num_train, small_batch, runs) <= 0:
        raise ValueError(f"size_study needs positive sizes, got seq_s={seq_s}, budget={budget}, "
                         f"num_train={num_train}, small_batch={small_batch}, runs={runs}")
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
    """What :func:`size_study` decided, one row each, beside the batch the seed talk reached with LAMB."""
    t = Table(["quantity", "value"], title="the study's size: every run the same sequences, at every batch")
    for name, value in (("seconds per training sequence (measured)", f"{sizing['seq_s']:.3g}"),
                        ("runs, at most", sizing["runs"]), ("sequences per run", sizing["seqs"]),
                        ("epochs per run, every batch", round(sizing["epochs"], 2)),
                        ("steps per run at the small batch", sizing["seqs"] // small_batch),
                        ("large batch (sequences)", sizing["large_batch"]),
                        ("steps per run at the large batch", sizing["seqs"] // sizing["large_batch"]),
                        ("the seed talk's LAMB batch (64k) / this large batch", TALK_BATCH // sizing["large_batch"]),
                        ("planned seconds, at most", round(sizing["planned_s"])), ("budget (s)", sizing["budget_s"])):
        t.add(quantity=name, value=value)
    return t


def make_study(sizing: dict, *, small_batch: int, world_size: int, max_micro_batch: int, common: dict,
               base_lrs: dict | None = None) -> Study:
    """The lesson's :class:`Study` at ``sizing`` (:func:`size_study`). The data-parallel run (section 3) splits the
    large batch over ``world_size`` ranks, so a rank's micro batch is at most ``large_batch // world_size`` (and
    ``max_micro_batch``). ``base_lrs``: each optimizer's lr at the small batch (default Adam 1e-3, LAMB 1e-2)."""
    large = sizing["large_batch"]
    return Study(small_batch=small_batch, large_batch=large, micro_batch=min(large // world_size, max_micro_batch),
                 seqs=sizing["seqs"], base_lrs=dict(base_lrs or {"adam": 1e-3, "lamb": 1e-2}), common=common)


def measure_seq_s(data, *, small_batch: int, max_micro_batch: int, common: dict, device, steps: int = 3,
                  repeats: int = 2) -> float:
    """Seconds per training sequence of this model, now, here: the slower of the small batch and one micro batch (what
    an accumulated large batch repeats), each the fastest of ``repeats``, the least disturbed (lesson 05's rule)."""
    from ..train.mlm import throughput

    probe = Study(small_batch=small_batch, large_batch=max_micro_batch, micro_batch=max_micro_batch,
                  seqs=max_micro_batch * (steps + 4), common=common)
    best: dict[int, float] = {}
    for _ in range(max(1, repeats)):
        for b in sorted({small_batch, max_micro_batch}):
            rate = throughput(probe.config("lamb", b), data, device=device, steps=steps, warmup_steps=2)["seqs_per_s"]
            best[b] = min(best.get(b, math.inf), 1 / rate)
    return max(best.values())


def target_loss(sweep: dict, margin: float) -> float:
    """The loss both optimizers reach at the large batch: the worse of their best held-out losses there (each at its
    best swept lr), plus ``margin`` (a second seed ends a little above or below the first)."""
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


def quiet_progress(progress: str = "auto") -> str:
    """A bar where a person watches (JupyterLab); nothing under papermill and CI, where :func:`train` prints one
    line per run instead of one per evaluation (hundreds of lines over the full profile's runs)."""
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


def best_of(records: dict[str, dict], prefix: str) -> dict:
    """The record with the lowest held-out loss among those whose label starts with ``prefix``."""
    return min((r for name, r in records.items() if name.startswith(prefix)), key=best_loss_key)


def results_table(records: dict[str, dict], target: float, title: str, num_train: int) -> Table:
    """One row per run: its steps and epochs (passes over the ``num_train`` training sequences), lr, losses, time and
    steps to ``target``, pace."""
    t = Table(["run", "steps", "epochs", "peak lr", "best eval loss", "final eval loss", "time to loss (s)",
               "steps to loss", "sequences/s"], title=title)
    for name, r in records.items():
        secs, steps = time_to_loss(r, target)
        epochs = round(r["steps"] * r["config"]["global_batch_size"] / num_train, 1)
        t.add(**{"run": name, "steps": r["steps"], "epochs": epochs, "peak lr": f"{r['config']['peak_lr']:.2e}",
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
    """The point :func:`equal_sequences_comparisons` compares: the small-batch run's whole budget of sequences and its
    last held-out loss, and the large batch's first evaluation past that budget (``step``, ``seqs``, ``loss``; ``step``
    None when the large run stopped before it): the end of both runs where every batch gets the same sequences."""
    s, l = runs[f"{optimizer} b={small_batch}"], runs[f"{optimizer} b={large_batch} (best lr)"]
    seqs = s["curves"]["eval_step"][-1] * small_batch
    at = next(((st, v) for st, v in zip(l["curves"]["eval_step"], l["curves"]["eval_loss"])
               if st * large_batch >= seqs), (None, None))
    return {"optimizer": optimizer, "small_seqs": seqs, "small_loss": s["curves"]["eval_loss"][-1], "step": at[0],
            "seqs": None if at[0] is None else at[0] * large_batch, "loss": at[1]}


def throughput_table(tp: dict[str, dict], title: str) -> Table:
    """Section 5's throughput per precision (``tp``: mode -> ``throughput``'s result, fp32 first), speedup vs fp32."""
    t = Table(["precision", "sequences/s", "tokens/s", "speedup vs fp32"], title=title)
    for mode, r in tp.items():
        t.add(precision=mode, **{"sequences/s": round(r["seqs_per_s"], 1), "tokens/s": round(r["tokens_per_s"]),
                                 "speedup vs fp32": round(r["seqs_per_s"] / tp["fp32"]["seqs_per_s"], 2)})
    return t


def trust_ratio_spread(record: dict) -> dict:
    """A run's LAMB trust ratios: ``table`` (weights x steps), the first step's range, and per step the largest ratio
    over the smallest (its median and max)."""
    table = torch.tensor(list(record["trust_ratios"].values()))  # (weights, steps)
    spread = table.max(0).values / table.min(0).values
    return {"table": table, "first_min": float(table[:, 0].min()), "first_max": float(table[:, 0].max()),
            "spread": spread, "spread_median": float(spread.median()), "spread_max": float(spread.max())}


def peak_step_line(record: dict, adam_peak_lr: float, spread: dict) -> str:
    """LAMB's step per element at its peak lr (``spread``: the run's :func:`trust_ratio_spread`) beside Adam's best
    peak lr: lr x the median trust ratio at that step, the product of the two factors as printed (3 figures)."""
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
    # the small-batch Adam baseline ("adam b=32"): how many steps it took to reach the target
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
            "precision": (record.get("precision") or {}).get("mode"),  # lesson 11 reruns BERT in it
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
