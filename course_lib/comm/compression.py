"""Communication-efficient data parallelism: send less, or less often (lesson 08).

Lesson 06's DDP all-reduces every gradient in fp32 every step. Four ways to send fewer bytes, each
plugged into the same training step (:class:`course_lib.parallel.DataParallel` takes one as
``comm``; :class:`course_lib.train.engine.Engine` calls its ``after_step``):

* :class:`PowerSGD` -- torch's own DDP hook (``torch.distributed.algorithms.ddp_comm_hooks.
  powerSGD_hook``; Vogels et al. 2019): each gradient matrix ``M`` (n x m) is sent as two thin
  factors, ``P = M Q`` (n x r) and ``Q = M^T P`` (m x r), one power iteration per step started from
  the last step's ``Q`` (*warm start*), and what the rank-r approximation missed is added to the next
  step's gradient (*error feedback*). Vectors (biases, norms) and matrices that would not shrink by
  ``min_compression_rate`` go uncompressed. The first ``start_powerSGD_iter`` steps all-reduce in fp32
  (torch requires at least 2 with error feedback or warm start).
* :class:`TopK` -- each rank sends only its ``density`` fraction of largest-magnitude gradient entries,
  as values and indices, with the course's ring all-gather (:func:`course_lib.comm.collectives.
  ring_all_gather`); every rank adds all ranks' entries into a dense gradient and divides by the
  world size. With ``error_feedback`` the entries not sent are kept (the *residual*) and added to the
  next step's gradient (Stich et al. 2018, Lin et al. 2018 "Deep gradient compression"); without
  it, coordinates whose gradient is never among the largest never move.
* :class:`LocalSGD` -- no gradient communication: each rank steps on its own slice's gradient and
  the ranks average their *weights* every ``period`` steps (Stich 2019; Lin et al. 2020 "post-local
  SGD"). ``period=1`` with plain SGD is synchronous data parallelism (the average of ``w - lr g_r``
  is ``w - lr mean(g_r)``). Optimizer state (momentum, Adam's moments) stays local.
* :class:`DelayedAverage` -- the gradient all-reduce of step ``t`` is started at step ``t`` and
  applied at step ``t + 1`` (the seed slides' *delayed gradient averaging*): the communication has a
  whole step to hide behind compute, and every update is one step stale (lesson 08's ``tau = 1``).
  Step 0 applies nothing (no average has arrived yet).

**Counting what goes on the wire.** Every method runs under a :class:`MessageRecorder`, the recording
hook of lesson 06 (:class:`course_lib.comm.hooks.AllReduceRecorder`: ``records``, ``bytes_sent``,
``intervals``) with each record also listing its messages ``(op, bytes)``. The bytes are counted on
the tensors handed to the collectives, not computed from the model. For torch's PowerSGD hook that
needs one trick: the hook calls ``dist.all_reduce`` through its module's global ``dist`` (three times
per bucket: the uncompressed tensors, then P, then Q, the last two from callbacks of the first's
future); each call of the hook runs a copy of torch's function whose ``dist`` is a counting proxy
(:func:`with_dist`) -- the same code, every collective it issues counted for the bucket it serves.
``bytes`` is what this rank contributes, as lesson 06 counts an all-reduce's buffer; a cost model
prices an all-reduce of ``n`` bytes and an all-gather of ``p`` pieces of ``n`` bytes differently
(:func:`message_time`).
"""

from __future__ import annotations

import math
import types

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from . import collectives as C
from . import cost
from .hooks import AllReduceRecorder

OPS = ("all_reduce", "all_gather")


# --------------------------------------------------------------------------- counting


class Messenger:
    """The collectives one hook call issues, counted into its record ``rec`` (``bytes``, ``messages``).

    Attribute access falls through to ``torch.distributed``, so it can stand in for the module in a
    hook written against ``dist`` (:func:`with_dist`).
    """

    def __init__(self, rec: dict):
        self._rec = rec
        rec.setdefault("bytes", 0)
        rec.setdefault("messages", [])

    def _count(self, op: str, tensor: torch.Tensor) -> None:
        n = tensor.numel() * tensor.element_size()
        self._rec["bytes"] += n
        self._rec["messages"].append((op, n))
        self._rec.setdefault("dtype", str(tensor.dtype).replace("torch.", ""))

    def all_reduce(self, tensor, *args, **kwargs):
        """``torch.distributed.all_reduce``, counted."""
        self._count("all_reduce", tensor)
        return dist.all_reduce(tensor, *args, **kwargs)

    def all_gather_pieces(self, piece: torch.Tensor, group=None) -> torch.Tensor:
        """Every rank's ``piece`` (all the same length), concatenated in rank order: ``(p * k,)``.

        The course's ring all-gather (lesson 08): rank ``r`` owns chunk ``r`` of a ``p * k`` tensor.
        """
        self._count("all_gather", piece)
        p = dist.get_world_size(group)
        rank = dist.get_rank(group)
        k = piece.numel()
        full = torch.zeros(p * k, dtype=piece.dtype, device=piece.device)
        full[rank * k:(rank + 1) * k] = piece.reshape(-1)
        return C.ring_all_gather(full, group)

    def __getattr__(self, name):
        return getattr(dist, name)


class _CountingDefault:
    """torch's ``default_hooks`` module with ``_allreduce_fut`` counted (PowerSGD's fp32 steps call it)."""

    def __init__(self, messenger: Messenger):
        self._m = messenger

    def _allreduce_fut(self, process_group, tensor):
        group = process_group if process_group is not None else dist.group.WORLD
        tensor.div_(group.size())
        return self._m.all_reduce(tensor, group=group, async_op=True).get_future().then(lambda f: f.value()[0])

    def __getattr__(self, name):
        return getattr(default_hooks, name)


def with_dist(fn, messenger: Messenger):
    """A copy of the function ``fn`` whose global ``dist`` (and ``default``, torch's default hooks) count
    into ``messenger``: functions ``fn`` defines while it runs (its future callbacks) share those globals."""
    g = dict(fn.__globals__)
    g["dist"] = messenger
    if "default" in g:
        g["default"] = _CountingDefault(messenger)
    return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)


def completed(tensor: torch.Tensor) -> torch.futures.Future:
    """A future that already holds ``tensor`` (a hook whose communication is done, or not needed)."""
    fut = torch.futures.Future()
    fut.set_result(tensor)
    return fut


class MessageRecorder(AllReduceRecorder):
    """Lesson 06's recording hook around another communication method: one record per bucket (or per
    weight average), with its bytes and messages; ``bytes_sent``/``intervals`` as for the all-reduce."""

    def __init__(self, method, *, device=None):
        super().__init__("none", device=device)
        self.method = method
        self.step = 0

    def hook(self, state, bucket):
        self.calls += 1
        rec = {"index": bucket.index(), "step": self.step, "ready": self.clock.stamp()}
        self.records.append(rec)
        fut = self.method.bucket_hook(state, bucket, Messenger(rec))
        clock = self.clock

        def done(f):
            rec["done"] = clock.stamp()
            return f.value()  # every method's future holds the averaged bucket

        return fut.then(done)

    def outside(self, fn, *args):
        """Run ``fn(messenger, *args)`` (communication outside DDP's hooks: a weight average), recorded."""
        rec = {"index": -1, "step": self.step, "ready": self.clock.stamp()}
        self.records.append(rec)
        out = fn(Messenger(rec), *args)
        rec["done"] = self.clock.stamp()
        return out

    def messages(self, since_step: int = 0) -> list[tuple[str, int]]:
        return [m for r in self.records if r["step"] >= since_step for m in r.get("messages", [])]

    def bytes_per_step(self, since_step: int = 0) -> float:
        """Bytes this rank handed to collectives per step, over the steps from ``since_step`` on."""
        steps = self.step - since_step
        if steps <= 0:
            raise ValueError(f"bytes_per_step(since_step={since_step}): only {self.step} steps recorded")
        return sum(n for _, n in self.messages(since_step)) / steps


# --------------------------------------------------------------------------- the methods


class FullPrecision:
    """DDP's fp32 all-reduce (the reference), counted like the others."""

    name = "fp32 all-reduce"
    warmup_steps = 0

    def attach(self, ddp, device) -> MessageRecorder:
        rec = MessageRecorder(self, device=device)
        ddp.register_comm_hook(None, rec.hook)
        return rec

    def bucket_hook(self, state, bucket, m: Messenger):
        return _CountingDefault(m)._allreduce_fut(None, bucket.buffer())

    def after_step(self, model, rec) -> None:
        pass


class PowerSGD(FullPrecision):
    """torch's ``powerSGD_hook`` at ``matrix_approximation_rank = rank``, error feedback and warm start on."""

    def __init__(self, rank: int = 4, start_iter: int = 2, min_compression_rate: float = 2.0, seed: int = 0):
        if rank < 1:
            raise ValueError(f"PowerSGD rank {rank}: the approximation rank must be at least 1")
        if start_iter < 2:
            raise ValueError(f"PowerSGD start_iter {start_iter}: torch needs >= 2 with error feedback/warm start")
        self.rank, self.warmup_steps = rank, start_iter
        self.min_compression_rate, self.seed = min_compression_rate, seed
        self.name = f"PowerSGD rank {rank}"
        self._previous = None  # the last bucket's future (see bucket_hook)

    def attach(self, ddp, device) -> MessageRecorder:
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=self.rank, start_powerSGD_iter=self.warmup_steps,
            min_compression_rate=self.min_compression_rate, use_error_feedback=True, warm_start=True,
            random_seed=self.seed)
        rec = MessageRecorder(self, device=device)
        ddp.register_comm_hook(state, rec.hook)
        return rec

    def bucket_hook(self, state, bucket, m: Messenger):
        # torch's hook issues its P and Q all-reduces from callbacks of its first all-reduce's future, which
        # gloo completes on its own thread; with several buckets in flight the ranks can then issue the
        # collectives of different buckets in different orders (measured here: gloo aborts with "Received data
        # size doesn't match expected size"). Finishing one bucket's chain before starting the next keeps the
        # order the same on every rank; the chain still overlaps the backward of the buckets not yet ready.
        if self._previous is not None:
            self._previous.wait()
        self._previous = with_dist(powerSGD_hook.powerSGD_hook, m)(state, bucket)
        return self._previous


def topk_compress(grad: torch.Tensor, k: int, residual: torch.Tensor | None):
    """``(values, indices, new_residual)`` of the ``k`` largest-magnitude entries of ``grad + residual``.

    With error feedback (``residual`` a tensor) the new residual is what was not sent:
    ``corrected - scatter(values at indices)``, so ``sent + new_residual == grad + residual``
    exactly. Without (``residual`` None) it is None and the rest is dropped.
    """
    corrected = grad if residual is None else grad + residual
    k = max(1, min(int(k), corrected.numel()))
    indices = corrected.abs().topk(k, sorted=False).indices
    values = corrected[indices]
    if residual is None:
        return values, indices, None
    new_residual = corrected.clone()
    new_residual[indices] = 0.0
    return values, indices, new_residual


def topk_average(values: torch.Tensor, indices: torch.Tensor, n: int, world_size: int) -> torch.Tensor:
    """Every rank's gathered ``(values, indices)`` added into a dense length-``n`` gradient, over ``world_size``."""
    out = torch.zeros(n, dtype=values.dtype, device=values.device)
    out.index_add_(0, indices, values)
    return out.div_(world_size)


class TopK(FullPrecision):
    """Top-k sparsification (``density`` of each bucket's entries), values and indices all-gathered."""

    def __init__(self, density: float = 0.01, error_feedback: bool = True):
        if not 0.0 < density <= 1.0:
            raise ValueError(f"top-k density {density}: must be in (0, 1] (the fraction of entries sent)")
        self.density, self.error_feedback = density, error_feedback
        self.residuals: dict[int, torch.Tensor] = {}
        self.name = f"top-{density:.2%}" + (" + error feedback" if error_feedback else ", no error feedback")

    def bucket_hook(self, state, bucket, m: Messenger):
        grad = bucket.buffer()
        idx = bucket.index()
        residual = None
        if self.error_feedback:
            residual = self.residuals.get(idx)
            if residual is None or residual.shape != grad.shape:
                # DDP rebuilds its buckets once, after the first step (in the order gradients became ready),
                # so bucket i may change size then; the first step's residual is dropped (why torch's PowerSGD
                # starts compressing at step 2 or later)
                residual = torch.zeros_like(grad)
        k = math.ceil(self.density * grad.numel())
        values, indices, new_residual = topk_compress(grad, k, residual)
        if self.error_feedback:
            self.residuals[idx] = new_residual
        all_values = m.all_gather_pieces(values)
        all_indices = m.all_gather_pieces(indices)
        return completed(topk_average(all_values, all_indices, grad.numel(), dist.get_world_size()))


def average_weights(m: Messenger, model: torch.nn.Module) -> None:
    """Replace every rank's weights by their mean over the ranks (one fp32 all-reduce of the flat weights)."""
    params = list(model.parameters())
    flat = parameters_to_vector(params).detach()
    m.all_reduce(flat)
    vector_to_parameters(flat.div_(dist.get_world_size()), params)


class LocalSGD(FullPrecision):
    """Each rank steps on its own gradient; the weights are averaged every ``period`` steps."""

    def __init__(self, period: int = 4):
        if period < 1:
            raise ValueError(f"local SGD period {period}: average the weights every H >= 1 steps")
        self.period = period
        self.name = f"local SGD, H = {period}"

    def bucket_hook(self, state, bucket, m: Messenger):
        return completed(bucket.buffer())  # the local gradient, nothing sent

    def after_step(self, model, rec) -> None:
        if rec.step % self.period == 0:  # rec.step: steps taken so far, this one included
            with torch.no_grad():
                rec.outside(average_weights, model)


class DelayedAverage(FullPrecision):
    """The average of step ``t``'s gradients applied at step ``t + 1`` (one step stale)."""

    name = "delayed averaging (1 step)"

    def __init__(self):
        self.pending: dict[int, torch.futures.Future] = {}

    def bucket_hook(self, state, bucket, m: Messenger):
        send = bucket.buffer().clone().div_(dist.get_world_size())  # DDP reuses the bucket's buffer
        fut = m.all_reduce(send, async_op=True).get_future()
        previous = self.pending.get(bucket.index())
        self.pending[bucket.index()] = fut
        applied = torch.zeros_like(send) if previous is None else previous.wait()[0]
        return completed(applied)


def make_method(name: str, **kwargs):
    """A method by name: ``fp32``, ``powersgd``, ``topk``, ``local_sgd``, ``delayed``."""
    methods = {"fp32": FullPrecision, "powersgd": PowerSGD, "topk": TopK, "local_sgd": LocalSGD,
               "delayed": DelayedAverage}
    if name not in methods:
        raise ValueError(f"communication method {name!r}: choose one of {tuple(methods)}")
    return methods[name](**kwargs)


# --------------------------------------------------------------------------- pricing


def message_time(op: str, n_bytes: float, p: int, alpha: float, beta: float) -> float:
    """Seconds for one message this rank contributes ``n_bytes`` to, on ``p`` ranks (ring algorithms):
    an all-reduce of ``n_bytes``, or an all-gather of ``p`` pieces of ``n_bytes`` (it grows with ``p``)."""
    if op == "all_reduce":
        return cost.ring_allreduce_time(n_bytes, p, alpha, beta)
    if op == "all_gather":
        return cost.ring_all_gather_time(p * n_bytes, p, alpha, beta)
    raise ValueError(f"message op {op!r}: one of {OPS}")


def comm_time_per_step(messages, steps: int, p: int, alpha: float, beta: float) -> float:
    """Predicted communication seconds per step of ``messages`` (``(op, bytes)``) spread over ``steps``."""
    if steps <= 0:
        raise ValueError(f"comm_time_per_step: steps={steps}, need at least one")
    return sum(message_time(op, n, p, alpha, beta) for op, n in messages) / steps
