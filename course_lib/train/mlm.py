"""BERT masked-LM pretraining: ``train_mlm(cfg, data, device=...) -> record`` (lesson 07_bert_lamb).

The step is the course's one engine (:mod:`course_lib.train.engine`), as for NeuMF; this
module adds BERT's model, masked batches and held-out loss. The lesson changes
:class:`MLMTrainConfig`, never the loop:

- the batch is stated once (``global_batch_size``, ``micro_batch_size``) and
  ``grad_accum_steps`` is derived by :class:`course_lib.config.BatchConfig`, which
  refuses a global batch that does not divide;
- ``optimizer="adam"`` (AdamW, global-norm clipping at ``max_grad_norm``) or ``"lamb"``
  (:class:`course_lib.optim.LAMB`; ``max_grad_norm`` is its global pre-normalization,
  ``bias_correction`` its Adam bias correction — the two ablations of the talk);
- the peak lr comes from ``base_lr`` at ``base_batch_size`` by the square-root or linear
  rule, with linear warmup and BERT's linear decay (:func:`course_lib.optim.lr_at`);
- mixed precision through :class:`course_lib.precision.Precision` (gradients unscaled
  before clipping and before LAMB's trust ratios);
- inside a process group the model is wrapped in DistributedDataParallel, each rank
  trains on its slice of every global batch and skips the all-reduce (``no_sync``) on
  all but the last micro step; only rank 0 reports.

The clock: ``time_to_target_s`` is wall time spent *training* until the first
evaluation whose held-out MLM loss is at or below ``target_loss``; evaluation time is
excluded (reported as ``eval_time_s``). Not reached: ``None``, never the run length.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from .. import dist as cdist
from ..data.text import IGNORE_INDEX, MLMData
from ..models.bert import BertForMLM, bert_config
from ..optim import LAMB, fused_on_gpu, lr_at, param_groups
from ..parallel.data_parallel import DataParallel
from ..precision import Precision
from ..progress import resolve_progress, time_to_go
from ..settings import RunSettings, fit_run
from .engine import Engine, RunHooks, sync

OPTIMIZERS = ("adam", "lamb")


@dataclass(frozen=True)
class MLMTrainConfig(RunSettings):
    """Every setting of one BERT MLM run: :class:`course_lib.settings.RunSettings` (the batch,
    the lr and its rule, the schedule, precision, the budget) plus BERT's own. Batches count
    sequences. The budget is ``max_steps``; the schedule is BERT's: linear warmup, then
    linear decay to 0 at ``max_steps``."""

    OPTIMIZERS = OPTIMIZERS

    micro_batch_size: int | None = 64
    optimizer: str = "lamb"  # "adam" (AdamW) | "lamb"
    base_batch_size: int | None = 256
    lr_scaling: str = "sqrt"  # the LAMB paper's rule
    warmup_steps: int = 10
    decay: str = "polynomial"  # BERT: linear decay to 0 ("polynomial", power 1)
    weight_decay: float = 0.01
    max_steps: int | None = 100
    stop_at_target: bool = False
    eps: float = 1e-6
    max_grad_norm: float | None = 1.0  # LAMB: global pre-normalization; Adam: clipping. None = off
    bias_correction: bool = True  # LAMB only (AdamW always corrects)
    model: str = "mini"  # preset of course_lib.models.bert.PRESETS
    norm: str = "post"  # "post" (original BERT) | "pre"
    dropout: float = 0.1
    target_loss: float | None = None  # held-out MLM loss at an evaluation that ends the clock
    eval_every_steps: int = 10  # optimizer steps between held-out evaluations
    label: str = ""

    def __post_init__(self):
        super().__post_init__()
        if self.max_steps is None or self.eval_every_steps < 1:
            raise ValueError(f"MLMTrainConfig needs max_steps (its budget) and eval_every_steps >= 1, got "
                             f"{self.max_steps}, {self.eval_every_steps}")
        # a warmup longer than max_steps is shortened by fit_to_run (train_mlm), with a note
        self.batch(1)  # a global batch that does not divide is an error here, not mid-run

    def _fit_budget(self, planned_steps: int) -> tuple[dict, list[str]]:
        """BERT's part of :meth:`RunSettings.fit_to_run`: an evaluation interval longer than the run is the run."""
        if self.eval_every_steps > planned_steps:
            return {"eval_every_steps": planned_steps}, [
                f"evaluation every {self.eval_every_steps} steps is longer than this {planned_steps}-step run: "
                "evaluated at its start and end"]
        return {}, []

    def lr_at(self, step: int) -> float:
        return lr_at(step, peak_lr=self.peak_lr, warmup_steps=self.warmup_steps, total_steps=self.max_steps,
                     decay=self.decay)

    def name(self) -> str:
        return self.label or f"{self.optimizer} b={self.global_batch_size}"



def build_model(cfg: MLMTrainConfig, vocab_size: int, max_position: int) -> BertForMLM:
    return BertForMLM(bert_config(cfg.model, vocab_size=vocab_size, max_position=max_position, norm=cfg.norm,
                                  dropout=cfg.dropout, attention_dropout=cfg.dropout))


def make_optimizer(model: torch.nn.Module, cfg: MLMTrainConfig) -> torch.optim.Optimizer:
    """AdamW or LAMB over ``param_groups`` (biases and LayerNorm: no decay, and no trust ratio for LAMB)."""
    groups = param_groups(model, cfg.weight_decay)
    if cfg.optimizer == "adam":
        return torch.optim.AdamW(groups, lr=cfg.peak_lr, betas=cfg.betas, eps=cfg.eps, fused=fused_on_gpu(model))
    return LAMB(groups, lr=cfg.peak_lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay,
                bias_correction=cfg.bias_correction, max_grad_norm=cfg.max_grad_norm)


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: MLMData, precision: Precision, batch_size: int = 64) -> float:
    """Mean MLM cross-entropy over every scored position of the held-out set."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for lo in range(0, data.eval_inputs.shape[0], batch_size):
        x, y = data.eval_inputs[lo:lo + batch_size], data.eval_labels[lo:lo + batch_size]
        n = int((y != IGNORE_INDEX).sum())
        if n == 0:
            continue
        with precision.autocast():
            loss = model(x, y)
        total += float(loss) * n
        count += n
    model.train(was_training)
    return total / max(count, 1)


# --------------------------------------------------------------------------- progress




class _Progress:
    def __init__(self, mode: str, total: int, label: str, settings: str = ""):
        self.mode, self.label, self.bar = mode, label, None
        if mode != "none" and settings:
            print(f"[{label}] {settings}", flush=True)  # the batch arithmetic and lr derivation, before the first step
        if mode == "bar":
            self.bar = tqdm(total=total, desc=label, unit="step", leave=True)

    def step(self):
        if self.bar is not None:
            self.bar.update(1)

    def point(self, step: int, total: int, train_loss: float, eval_loss: float, lr: float, train_s: float):
        if self.mode == "log":
            # step 0 is the initial evaluation: no training step yet, so no train loss (not a divergence)
            train = "-" if step == 0 else f"{train_loss:.3f}"
            print(f"[{self.label}] step {step}/{total}  train loss {train}  eval loss {eval_loss:.3f}  "
                  f"lr {lr:.2e}  train {train_s:.1f}s{time_to_go(step, total, train_s)}", flush=True)
        elif self.bar is not None:
            self.bar.set_postfix(eval_loss=f"{eval_loss:.3f}", refresh=False)

    def close(self):
        if self.bar is not None:
            self.bar.close()


# --------------------------------------------------------------------------- the loop


def train_mlm(cfg: MLMTrainConfig, data: MLMData, *, device: torch.device | str | None = None,
              progress: str = "auto", model: BertForMLM | None = None, hooks: RunHooks | None = None) -> dict:
    """Pretrain a BERT on ``data`` with ``cfg``; return the run's record (a dict; on ranks > 0 too).

    Record keys: ``config``, ``label``, ``time_to_target_s``, ``steps_to_target``,
    ``reached``, ``final_eval_loss``, ``best_eval_loss``, ``diverged``, ``steps``,
    ``train_time_s``, ``eval_time_s``, ``seqs_per_s``, ``tokens_per_s``, ``grad_accum_steps``,
    ``world_size``, ``precision`` (mode, loss scale, skipped steps), ``curves``
    (``step``/``train_loss``/``lr`` per step; ``eval_step``/``eval_loss``/``eval_time_s``),
    ``trust_ratios`` (LAMB only, else None: ``{parameter name: [ratio used at each step]}``
    for every parameter LAMB adapts — how differently it scales each layer's Adam step),
    ``probes``, ``probe_time_s`` and ``stopped_early``.

    ``hooks`` (:class:`course_lib.train.RunHooks`) takes the two hooks both loops share: ``on_eval(model,
    point)`` (lesson 11) at every held-out evaluation, off the clock, with ``point`` holding ``step``,
    ``sequences`` and ``eval_loss`` (it must leave the weights as it found them); ``stop_early(point)``
    (lesson 12: a pruner's decision), asked after every evaluation but step 0's with ``step`` and
    ``eval_loss``; True ends the run there (rank 0 decides for all ranks).
    """
    cfg = fit_run(cfg, cfg.max_steps, world_size=cdist.world_size(), label=cfg.name(),  # what can run
                  quiet=not cdist.is_main_process())
    run = _MLMRun(cfg, data, device, progress, model, hooks or RunHooks())
    run.eval_point(0, float("nan"))
    try:
        for step in range(1, cfg.max_steps + 1):
            train_loss = run.train_step(step)
            if not math.isfinite(train_loss) and run.precision.scaler is None:
                run.diverged = True
                break
            if step % cfg.eval_every_steps == 0 or step == cfg.max_steps:
                if run.evaluate(step, train_loss):  # diverged, reached the target, or a pruner's cut
                    break
    finally:
        run.shown.close()
    if run.curves["eval_step"][-1] != run.step and not run.diverged:
        run.eval_point(run.step, run.curves["train_loss"][-1])
    return run.record()


class _MLMRun:
    """One BERT run's state and its pieces, in the order ``train_mlm`` calls them."""

    def __init__(self, cfg: MLMTrainConfig, data: MLMData, device, progress: str, model: BertForMLM | None,
                 hooks: RunHooks):
        hooks.only_shared("train_mlm")
        self.cfg, self.data, self.hooks = cfg, data, hooks
        self.device = device = torch.device(device) if device is not None else (
            data.device if not cdist.is_initialized() else cdist.device())
        self.world_size = world_size = cdist.world_size()
        self.distributed = cdist.is_initialized() and world_size > 1
        self.label = cfg.name()
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank (DDP also broadcasts them)
        if model is None:
            model = build_model(cfg, data.vocab_size, data.seq_len)
        self.model = model = model.to(device)
        model.train()
        self.engine = _engine(cfg, model, device)
        self.optimizer, self.precision = self.engine.optimizer, self.engine.precision
        self.adapted = _adapted_parameters(model, self.optimizer)
        self.trust_steps: list[torch.Tensor] = []  # one small tensor per step; moved to the host once, at the end
        self.nan = torch.full((), math.nan, device=device)
        # The same generator on every rank: all ranks draw the same global batch and masks,
        # and each keeps its own slice, so W ranks x k micro steps = one process with the whole batch.
        self.gen = torch.Generator(device=data.device).manual_seed(cfg.seed)
        self.curves = {"step": [], "train_loss": [], "lr": [], "eval_step": [], "eval_loss": [], "eval_time_s": []}
        self.train_s = self.eval_s = self.probe_s = 0.0
        self.probes: list[dict] = []
        self.time_to_target = self.steps_to_target = None
        self.diverged = self.stopped = False
        self.step = 0
        self.shown = _Progress(resolve_progress(progress) if cdist.is_main_process() else "none", cfg.max_steps,
                               self.label, cfg.describe(world_size))

    def train_step(self, step: int) -> float:
        """One optimizer step on the clock; the mean loss over every scored token of the global batch."""
        cfg, device = self.cfg, self.device
        self.step = step
        sync(device)
        t0 = time.perf_counter()
        lr = cfg.lr_at(step - 1)
        self.engine.set_lr(lr)
        # The loss of the step is the mean over every scored token of the *global* batch
        # (the same on every rank); the engine gives each rank its slice in micro batches.
        step_loss, taken = self.engine.step(*_global_batch(self.data, cfg, self.gen, device))
        if self.adapted:  # NaN where no ratio was used: a step the fp16 loss scaler skipped, a weight without gradient
            self.trust_steps.append(torch.stack([self.optimizer.state[p].get("trust_ratio", self.nan) if taken
                                                 else self.nan for _, p in self.adapted]))
        if self.distributed:
            torch.distributed.all_reduce(step_loss)  # per-rank shares of the global mean add up
            step_loss /= self.world_size
        train_loss = float(step_loss)  # synchronizes
        sync(device)
        self.train_s += time.perf_counter() - t0
        self.curves["step"].append(step)
        self.curves["train_loss"].append(train_loss)
        self.curves["lr"].append(lr)
        self.shown.step()
        return train_loss

    def evaluate(self, step: int, train_loss: float) -> bool:
        """A held-out evaluation; True where the run ends here (diverged, target reached, a pruner's cut)."""
        loss = self.eval_point(step, train_loss)
        if not math.isfinite(loss):
            self.diverged = True
            return True
        if self.cfg.stop_at_target and self.time_to_target is not None:
            return True
        stop_early = self.hooks.stop_early
        if stop_early is not None and self.engine.parallel.agree(bool(stop_early({"step": step, "eval_loss": loss}))):
            self.stopped = True  # lesson 12: a pruner cut the run here
            return True
        return False

    def eval_point(self, step: int, train_loss: float) -> float:
        cfg, curves = self.cfg, self.curves
        t0 = time.perf_counter()
        loss = evaluate(self.model, self.data, self.precision, batch_size=max(cfg.micro_batch_size, 32))
        self.eval_s += time.perf_counter() - t0
        if self.hooks.on_eval is not None:  # lesson 11: a measurement of the model in training, off the clock
            t0 = time.perf_counter()
            point = {"step": step, "sequences": step * cfg.global_batch_size, "eval_loss": loss}
            found = self.hooks.on_eval(self.model, point)
            self.probe_s += time.perf_counter() - t0
            if found is not None:
                self.probes.append({**point, **found})
        curves["eval_step"].append(step)
        curves["eval_loss"].append(loss)
        curves["eval_time_s"].append(self.train_s)
        if cfg.target_loss is not None and self.time_to_target is None and loss <= cfg.target_loss:
            self.time_to_target, self.steps_to_target = self.train_s, step
        self.shown.point(step, cfg.max_steps, train_loss, loss, curves["lr"][-1] if curves["lr"] else 0.0,
                         self.train_s)
        return loss

    def record(self) -> dict:
        cfg, curves, train_s = self.cfg, self.curves, self.train_s
        steps = len(curves["step"])
        seqs = steps * cfg.global_batch_size
        finite = [x for x in curves["eval_loss"] if math.isfinite(x)]
        return {
            "label": self.label,
            "config": cfg.to_dict(),
            "corpus": self.data.corpus_name,
            "target_loss": cfg.target_loss,
            "reached": self.time_to_target is not None,
            "time_to_target_s": self.time_to_target,
            "steps_to_target": self.steps_to_target,
            "final_eval_loss": curves["eval_loss"][-1],
            "best_eval_loss": min(finite) if finite else None,
            "diverged": self.diverged,
            "stopped_early": self.stopped,
            "steps": steps,
            "train_time_s": train_s,
            "eval_time_s": self.eval_s,
            "probes": self.probes,
            "probe_time_s": self.probe_s,
            "seqs_per_s": seqs / train_s if train_s > 0 else None,
            "tokens_per_s": seqs * self.data.seq_len / train_s if train_s > 0 else None,
            "grad_accum_steps": cfg.batch(self.world_size).grad_accum_steps,
            "world_size": self.world_size,
            "device": str(self.device),
            "precision": self.precision.state(),
            "curves": curves,
            "trust_ratios": _trust_ratio_curves(self.adapted, self.trust_steps),
        }


def _mlm_loss_sum(net: torch.nn.Module, micro: tuple) -> torch.Tensor:
    """BERT's MLM loss on a micro batch, summed over its scored tokens (the engine divides)."""
    inputs, labels = micro
    return net(inputs, labels) * (labels != IGNORE_INDEX).sum()


def _engine(cfg: MLMTrainConfig, model: torch.nn.Module, device: torch.device) -> Engine:
    """The engine for ``cfg``: AdamW clips at ``max_grad_norm``; LAMB pre-normalizes inside its step."""
    precision = Precision(cfg.precision, device, loss_scaling=cfg.loss_scaling, init_scale=cfg.loss_scale)
    return Engine(model, make_optimizer(model, cfg), precision=precision,
                  parallel=DataParallel(cfg.global_batch_size, cfg.micro_batch_size, device),
                  loss_sum=_mlm_loss_sum, max_grad_norm=cfg.max_grad_norm if cfg.optimizer == "adam" else None)


def _global_batch(data: MLMData, cfg: MLMTrainConfig, gen: torch.Generator, device: torch.device):
    """``((inputs, labels), scored tokens)`` of one global batch of masked sequences, on ``device``."""
    inputs, labels = data.masked_batch(cfg.global_batch_size, gen)  # (B_global, T) each
    inputs, labels = inputs.to(device, non_blocking=True), labels.to(device)
    return (inputs, labels), (labels != IGNORE_INDEX).sum().clamp(min=1)


def _adapted_parameters(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list:
    """``(name, parameter)`` for each parameter whose step LAMB scales by a trust ratio (none for Adam)."""
    if not isinstance(optimizer, LAMB):
        return []
    names = {id(p): n for n, p in model.named_parameters()}
    return [(names[id(p)], p) for g in optimizer.param_groups if LAMB.adapts(g) for p in g["params"]]


def _trust_ratio_curves(adapted: list, steps: list) -> dict | None:
    if not adapted:
        return None
    if not steps:
        return {name: [] for name, _ in adapted}
    table = torch.stack(steps).cpu().T.tolist()  # (parameters, steps)
    return {name: row for (name, _), row in zip(adapted, table)}


def throughput(cfg: MLMTrainConfig, data: MLMData, *, device: torch.device | str, steps: int = 5,
               warmup_steps: int = 2) -> dict:
    """Sequences/s and tokens/s of training steps at ``cfg`` (no evaluation), after ``warmup_steps`` untimed ones.

    The steps are the engine's, as in :func:`train_mlm` (one process)."""
    device = torch.device(device)
    cfg = fit_run(cfg, cfg.max_steps, quiet=True)  # a micro batch larger than the batch
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, data.vocab_size, data.seq_len).to(device)
    engine = _engine(cfg, model, device)  # its optimizer starts at cfg.peak_lr
    gen = torch.Generator(device=data.device).manual_seed(cfg.seed)
    t0 = 0.0
    for i in range(warmup_steps + steps):
        if i == warmup_steps:
            sync(device)
            t0 = time.perf_counter()
        loss, _ = engine.step(*_global_batch(data, cfg, gen, device))
    sync(device)
    seconds = time.perf_counter() - t0
    seqs = steps * cfg.global_batch_size
    return {"precision": engine.precision.mode, "seqs_per_s": seqs / seconds,
            "tokens_per_s": seqs * data.seq_len / seconds, "step_s": seconds / steps, "final_loss": float(loss)}
