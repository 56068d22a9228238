"""The training engine: one optimizer step for every model of the course (lessons 01-07).

NeuMF (:mod:`course_lib.train.ncf`), BERT (:mod:`course_lib.train.mlm`) and the throughput
benchmarks all step through :class:`Engine`; a lesson changes its inputs, never copies it.
One step, in order:

1. the lr of this step (the schedule is the caller's: ``course_lib.optim.lr_at``);
2. the global batch cut into this rank's micro batches by the data-parallel seam
   (:class:`course_lib.parallel.DataParallel`): ``no_sync`` on all but the last, so DDP
   all-reduces once per step;
3. each micro batch's loss is a *sum* (over samples, or scored tokens) divided by the
   global batch's count over the ranks, so any split into ranks x micro steps gives the
   gradient of the mean over the whole global batch (the W x b x k invariant);
4. precision (:class:`course_lib.precision.Precision`): autocast, fp16 loss scaling, and the
   gradients unscaled *before* clipping and before LARS/LAMB read their norms (apex#1030);
5. optional global-norm clipping, the optimizer step (skipped by the fp16 scaler on
   inf/nan), the scaler's update, and the gradients cleared;
6. the data-parallel seam's ``after_step`` (a no-op unless its communication method works
   between steps: lesson 08's local SGD averages the weights every H steps).

``compile`` (lesson 01) runs the loss function — the model's forward and the loss, and through
AOTAutograd their backward — under ``torch.compile`` with those arguments; the optimizer step
stays eager. With ``mode="reduce-overhead"`` (CUDA graphs) each step first tells torch that a
new iteration begins (``torch.compiler.cudagraph_mark_step_begin``), so the graphs' output
buffers of the previous step may be reused.

The training clock (:class:`PhaseClock`) splits a step's wall time into sampling,
forward/backward and optimizer phases; evaluation is never on it.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable

import torch

from ..parallel.data_parallel import DataParallel
from ..precision import Precision

PHASES = ("sampling", "forward_backward", "optimizer")


class PhaseClock:
    """Per-phase time of the training steps, without costing the GPU its overlap.

    On CUDA every phase is an **NVTX range** (Nsight Systems shows the phases on its
    timeline, whether or not anything is timed) and a ``record_function`` row for
    ``torch.profiler``. With ``enabled=True`` each phase is also timed: on the CPU by the
    host clock, on CUDA by a pair of CUDA events — recorded in the stream, read only when
    :attr:`seconds` is asked for, so a timed step does not wait for the GPU (synchronizing
    at every phase boundary would remove the CPU/GPU overlap the timing is meant to see).
    An event pair measures the GPU time between the phase's start and end, including the
    GPU waiting for the host. ``enabled=False`` (the default of timed runs): no timing.
    """

    def __init__(self, device: torch.device, enabled: bool = True):
        self.device = device
        self.cuda = device.type == "cuda"
        self.enabled = enabled
        self._seconds = {p: 0.0 for p in PHASES}
        self._pending: list[tuple[str, object, object]] = []  # (phase, start event, end event), CUDA

    def _collect(self) -> None:
        """Add the recorded CUDA event pairs to the totals (waits for the last one)."""
        for name, start, end in self._pending:
            end.synchronize()
            self._seconds[name] += start.elapsed_time(end) / 1000.0
        self._pending.clear()

    @property
    def seconds(self) -> dict[str, float]:
        """Seconds per phase so far (on CUDA this waits for the recorded events: call it off the clock)."""
        self._collect()
        return self._seconds

    def sync(self):
        sync(self.device)

    @contextlib.contextmanager
    def phase(self, name: str):
        if self.cuda:
            torch.cuda.nvtx.range_push(name)
        if self.enabled and self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        try:
            with torch.profiler.record_function(name):  # a named row in torch.profiler tables
                yield
        finally:
            if self.enabled and self.cuda:
                end.record()
                self._pending.append((name, start, end))
                if len(self._pending) >= 3000:  # bound the list on long runs (one wait per ~1000 steps)
                    self._collect()
            elif self.enabled:
                self._seconds[name] += time.perf_counter() - t0
            if self.cuda:
                torch.cuda.nvtx.range_pop()


LossSum = Callable[[torch.nn.Module, tuple], torch.Tensor]  # (net, micro batch) -> summed loss (scalar)


@dataclass(frozen=True)
class RunHooks:
    """What a lesson adds to a training run beyond its settings; the defaults run it plainly.

    Shared by both loops (``train_to_target`` for NeuMF, ``train_mlm`` for BERT):

    - ``on_eval(model, point)`` (lesson 11): a measurement of the model at every evaluation point,
      off the clock; what it returns (a dict, or None) is kept in the record's ``probes`` with the point;
    - ``stop_early(point) -> bool`` (lesson 12): asked after every evaluation point but step 0's; True
      ends the run there, as reaching the target does (a search's pruner); rank 0 decides for all.

    NeuMF's loop only:

    - ``evaluate_points=False`` (lesson 01's timed runs): no HR@10 at the points, the clock only;
    - ``time_phases=True`` (lesson 01's profile): the training time split into phases (``PhaseClock``);
    - ``record_every`` (lessons 03-05): sample the lr, the loss scale and the trust ratios every N steps
      (default: about 250 samples per run);
    - ``keep_model=True`` (lesson 05): the trained model on the result (never serialized);
    - ``checkpoint`` (lesson 06): a :class:`course_lib.parallel.Checkpointer` (rank 0 saves every N steps;
      the run resumes from its latest file);
    - ``adapt_batch(record) -> (batch_size, lr) | None`` (lesson 11's adaptive batch): called with each
      record ``on_eval`` adds to the probes; a pair sets the global batch of the next steps (the sampler's
      ``batch_size``, mid-epoch) and the lr. ``epoch`` then counts samples; the steps budget stays
      ``max_epochs`` times the first batch's steps (``stop_early`` on ``point["epoch"]`` ends it at an epoch
      budget). One process, the device sampler, no lr schedule or milestones.
    """

    on_eval: Callable | None = None
    stop_early: Callable[[dict], bool] | None = None
    evaluate_points: bool = True
    time_phases: bool = False
    record_every: int | None = None
    keep_model: bool = False
    checkpoint: object | None = None
    adapt_batch: Callable[[dict], tuple | None] | None = None

    def only_shared(self, loop: str) -> None:
        """Refuse what ``loop`` (a loop that has only the shared hooks) cannot do, by name."""
        plain = RunHooks()
        extra = [f for f in ("evaluate_points", "time_phases", "record_every", "keep_model", "checkpoint",
                             "adapt_batch")
                 if getattr(self, f) != getattr(plain, f)]
        if extra:
            raise ValueError(f"{loop} takes only the on_eval and stop_early hooks; {extra} are NeuMF's "
                             "(course_lib.train.train_to_target)")


class Engine:
    """The step of one training run: model (wrapped for data parallelism), optimizer, precision.

    ``loss_sum(net, micro_batch)`` returns the loss *summed* over what the micro batch
    counts (samples for NeuMF, scored tokens for BERT); :meth:`step` divides it so the
    gradient is that of the mean over the global batch, whatever the ranks and micro steps.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, precision: Precision,
                 parallel: DataParallel, loss_sum: LossSum, max_grad_norm: float | None = None,
                 clock: PhaseClock | None = None, compile: dict | None = None):
        self.model = model
        self.optimizer = optimizer
        self.precision = precision
        self.parallel = parallel
        self.net = parallel.wrap(model)  # DistributedDataParallel on several ranks, else the model itself
        self.loss_sum = loss_sum if compile is None else torch.compile(loss_sum, **compile)
        self.mark_cudagraph_steps = bool(compile) and compile.get("mode") == "reduce-overhead"
        self.max_grad_norm = max_grad_norm
        self.clock = clock or PhaseClock(precision.device, enabled=False)
        self.device = precision.device

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self, batch: tuple, count: float | torch.Tensor | None = None) -> tuple[torch.Tensor, bool]:
        """One optimizer step on the global ``batch`` (identical on every rank).

        ``count``: how many terms the global batch's mean has (default: ``batch[0].numel()``).
        Returns ``(loss, taken)``: this rank's share of the global-mean loss (a detached
        0-d tensor; each rank's micro batches are divided by the rank's share of ``count``, as DDP
        averages the gradients over the ranks, so the mean over the ranks, not their sum, is the global
        batch's mean loss: ``train_mlm`` all-reduces and divides by the world size) and whether the
        optimizer step was taken (False when the fp16 scaler skipped it).
        """
        prec = self.precision
        if self.mark_cudagraph_steps:  # CUDA graphs (compile mode "reduce-overhead"): a new iteration
            torch.compiler.cudagraph_mark_step_begin()
        loss_total = torch.zeros((), device=self.device)
        with self.clock.phase("forward_backward"):
            for micro, denominator, sync in self.parallel.micro_batches(self.net, batch, count):
                with sync:
                    with prec.autocast():
                        loss = self.loss_sum(self.net, micro) / denominator
                    prec.backward(loss)  # loss * scale for fp16
                loss_total += loss.detach()
        with self.clock.phase("optimizer"):
            prec.unscale_(self.optimizer)  # true gradients for clipping and for LARS/LAMB's norms
            if self.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
            taken = prec.step(self.optimizer)  # skips inf/nan gradients (fp16)
            prec.update()
            self.optimizer.zero_grad(set_to_none=True)
            self.parallel.after_step(self.model)  # a no-op but for lesson 08's local SGD (course_lib.comm.compression)
        return loss_total, taken


def all_finite(model: torch.nn.Module) -> bool:
    """No inf/nan among the weights (a diverged run never recovers)."""
    return bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all())


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU): before reading a host clock."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
