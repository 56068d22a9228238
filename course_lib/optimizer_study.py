"""Lesson 07's study: Adam vs LAMB at a large batch, each at its own swept lr, read from the records.

Every run is ``train_mlm`` (the one engine); this module states the study's settings once
(:class:`Study`), sweeps each optimizer's lr with a grid that extends at its edge
(:func:`course_lib.search.sweep_with_edge_extension`), and reads the records: time and
steps to a target loss, a results table, the verdict of a pair of runs, what gets saved.
Readings are computed from the learner's own records, so they stay true on any hardware.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .search import sweep_with_edge_extension
from .tables import Table
from .train.mlm import MLMTrainConfig, train_mlm


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
    note = (f"NOTE: the budget is capped at {max_epochs:g} passes over this corpus' {num_train} training sequences "
            f"({small * large_factor} sequences for the large batch instead of {large_batch * large_batches * large_factor}); "
            "a larger corpus (TEXT_DIR, or CORPUS='wikitext-103') gives the study its full length.")
    return small, small * large_factor, note


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


def sweep_lr(study: Study, optimizer: str, data, *, device, factors, max_extensions: int = 2) -> dict[str, dict]:
    """Runs at the large batch for each lr factor (x the sqrt rule), extended while the best sits at
    the grid's edge; ``{label: record}`` in order of factor."""
    def run(f: float) -> dict:
        cfg = study.config(optimizer, study.large_batch, lr_factor=f,
                           label=f"{optimizer} b={study.large_batch}, sqrt rule x{f:g}")
        return train_mlm(cfg, data, device=device)

    done = sweep_with_edge_extension(run, factors, best_loss_key, max_extensions=max_extensions)
    return {r["label"]: r for r in done.values()}


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
                 "time to loss (s)": "not reached" if secs is None else round(secs, 1),
                 "steps to loss": "-" if steps is None else steps, "sequences/s": round(r["seqs_per_s"], 1)})
    return t


def verdict(adam: dict, lamb: dict, target: float) -> tuple[str, str]:
    """Which optimizer did better in one pair of runs: ``("lamb" | "adam", why)``.

    Reaching the target beats not reaching it; between two that reached it, fewer steps
    wins (the step count does not depend on how busy the machine was); otherwise, and at
    the same evaluation, the lower best loss."""
    (ta, sa), (tl, sl) = time_to_loss(adam, target), time_to_loss(lamb, target)
    lower = "lamb" if best_loss_key(lamb) < best_loss_key(adam) else "adam"
    losses = f"best loss adam {adam['best_eval_loss']:.3f}, lamb {lamb['best_eval_loss']:.3f}"
    if ta is None and tl is None:
        return lower, f"neither reached the target; {losses}"
    if ta is None:
        return "lamb", "LAMB reached the target where Adam did not"
    if tl is None:
        return "adam", "Adam reached the target where LAMB did not"
    times = f"adam {ta:.1f} s at step {sa}, lamb {tl:.1f} s at step {sl}"
    if sa != sl:
        return ("lamb" if sl < sa else "adam"), f"both reached the target ({times})"
    return lower, f"both reached the target at the same evaluation ({times}); {losses}"


def seeds_agree(winners: list[str], batch: int) -> str:
    """The sentence a pair of verdicts (two seeds) supports."""
    if len(set(winners)) == 1:
        return f"Both seeds agree: {winners[0]} did better at batch {batch}."
    return "The two seeds disagree: at this batch the difference between the optimizers is within the noise."


def trust_ratio_spread(record: dict) -> dict:
    """LAMB's per-layer trust ratios of a run, summarized: ``table`` (weights x steps), the first
    step's range, and per step the largest ratio over the smallest (its median and max)."""
    table = torch.tensor(list(record["trust_ratios"].values()))  # (weights, steps)
    spread = table.max(0).values / table.min(0).values
    return {"table": table, "first_min": float(table[:, 0].min()), "first_max": float(table[:, 0].max()),
            "spread": spread, "spread_median": float(spread.median()), "spread_max": float(spread.max())}


def saved_setting(saved07: dict | None, profile: str, plan) -> dict:
    """What a later lesson (11, 12) takes from lesson 07's saved result: the BERT preset, sequence
    length and vocabulary, and the target loss. From lesson 07's run in this ``profile`` (smoke and
    full train different models on different text), else the tier plan's, with no target."""
    ok = bool(saved07 and saved07.get("profile") == profile)
    return {"model": saved07["model"] if ok else plan.bert_model,
            "seq_len": saved07.get("seq_len", plan.bert_seq_len) if ok else plan.bert_seq_len,
            "vocab_size": plan.bert_vocab_size, "target_loss": saved07.get("target_loss") if ok else None}


def summary(record: dict, target: float) -> dict:
    """The scalars of one run that the lesson saves (and gpu-check prints)."""
    secs, steps = time_to_loss(record, target)
    c = record["curves"]
    return {"label": record["label"], "steps": record["steps"],
            "global_batch_size": record["config"]["global_batch_size"], "peak_lr": record["config"]["peak_lr"],
            "final_eval_loss": record["final_eval_loss"], "diverged": record["diverged"], "time_to_loss_s": secs,
            "steps_to_loss": steps, "seqs_per_s": record["seqs_per_s"],
            "eval_loss_curve": list(zip(c["eval_step"], c["eval_loss"]))}
