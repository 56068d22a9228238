"""Data parallelism: the per-rank slice of the global batch, accumulation, the DDP wrap (lesson 06).

The training engine (:mod:`course_lib.train.engine`) hands every global batch to
:class:`DataParallel` and never mentions ranks itself. Tensor, pipeline and sharded
parallelism (lesson 10) plug in beside this module, behind the same seam: something that
wraps the model and says which part of each batch this rank computes.

**Why W ranks x micro batch b x k accumulation steps = one process with batch W*b*k.**
Every rank draws the *same* global batch (same sampler seed, so the same permutation and
negatives) and takes its slice ``r`` of ``W`` (``tensor_split``), then splits that slice
into ``k`` micro batches. Each micro step's loss is its *sum* over samples (or scored
tokens) divided by ``n / W`` (``n``: the count in the global batch), so the ``k`` backward
passes add up to ``W x`` the rank's share of the full-batch mean; DDP's all-reduce averages
over the ``W`` ranks, which leaves exactly the gradient of the mean over all ``n`` — also
for the smaller last batch of an epoch. ``no_sync()`` skips the all-reduce on all but the
last micro step (gradients accumulate locally; DDP docs: "gradients will be accumulated in
module variables, which will later be synchronized in the first forward-backward pass
exiting the context"). The sample order does not depend on ``W``, so a checkpoint taken
with one world size also resumes with another. ``tests/test_ddp.py`` checks the invariant
for NeuMF, ``tests/test_bert.py`` for BERT.
"""

from __future__ import annotations

import collections
import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .. import dist as cdist
from ..comm.hooks import AllReduceRecorder, in_flight_seconds
from ..config import BatchConfig, batch_config
from ..tables import Table


# --------------------------------------------------------------------------- the batch, stated once


def batch_table(global_batch_size: int, micro_batch_size: int, world_sizes=(1, 2, 4, 8)) -> Table:
    """How one global batch becomes per-rank micro batches and accumulation steps."""
    t = Table(["world_size", "global_batch_size", "micro_batch_size", "grad_accum_steps", "per-rank batch"],
              title=f"global batch {global_batch_size}, micro batch {micro_batch_size}")
    for w in world_sizes:
        try:
            bc = BatchConfig(global_batch_size, micro_batch_size, w)
            t.add(world_size=w, global_batch_size=global_batch_size, micro_batch_size=micro_batch_size,
                  grad_accum_steps=bc.grad_accum_steps, **{"per-rank batch": bc.per_rank_batch_size})
        except ValueError:
            t.add(world_size=w, global_batch_size=global_batch_size, micro_batch_size=micro_batch_size,
                  grad_accum_steps="does not divide")
    return t


# --------------------------------------------------------------------------- DDP and micro steps


class DataParallel:
    """Data parallelism for one run of ``train_to_target``; on one process it only accumulates."""

    def __init__(self, global_batch_size: int, micro_batch_size: int | None, device: torch.device,
                 bucket_cap_mb: float | None = None, comm=None):
        self.distributed = cdist.is_initialized() and dist.get_world_size() > 1
        self.rank, self.world_size = (dist.get_rank(), dist.get_world_size()) if self.distributed else (0, 1)
        self.batch = batch_config(global_batch_size, micro_batch_size, self.world_size)
        self.device = device
        self.bucket_cap_mb = bucket_cap_mb
        self.comm = comm  # None: DDP's all-reduce; else a method of course_lib.comm.compression (lesson 08)
        self.ddp = None
        self.recorder: AllReduceRecorder | None = None  # DDP's all-reduce, timed bucket by bucket
        self.sync_steps = 0
        # {micro-step index i: how many steps all-reduced during micro step i} -- with no_sync
        # working, only the last index k - 1 appears, once per step (tests/test_ddp.py)
        self.allreduce_micro_steps: collections.Counter = collections.Counter()

    @property
    def grad_accum_steps(self) -> int:
        return self.batch.grad_accum_steps

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """DDP around ``model`` when there are several ranks (it broadcasts rank 0's weights)."""
        if not self.distributed:
            return model
        kwargs = {} if self.bucket_cap_mb is None else {"bucket_cap_mb": self.bucket_cap_mb}
        self.ddp = DistributedDataParallel(
            model, device_ids=[self.device.index] if self.device.type == "cuda" else None, **kwargs)
        if self.comm is not None:  # PowerSGD, top-k, local SGD, ...: registers its own recording hook
            self.recorder = self.comm.attach(self.ddp, self.device)
            return self.ddp
        # DDP's own average (divide, then sum), timed per bucket on every backend: host clock on
        # CPU ranks, CUDA events on GPU ranks (course_lib.comm.hooks)
        self.recorder = AllReduceRecorder(device=self.device)
        self.ddp.register_comm_hook(None, self.recorder.hook)
        return self.ddp

    def after_step(self, model: torch.nn.Module) -> None:
        """After each optimizer step: the communication method's own work (local SGD averages the weights)."""
        if self.comm is not None and self.ddp is not None:
            self.recorder.step += 1
            self.comm.after_step(model, self.recorder)

    def micro_batches(self, train_model: torch.nn.Module, batch, count=None):
        """Yield ``(micro_batch, denominator, sync_context)`` for the ``k`` micro steps of one step.

        ``batch`` is the global batch (identical on every rank); ``count`` how many terms its
        mean has (default ``batch[0].numel()``, the samples; BERT passes its scored tokens).
        The caller computes ``loss = sum over the micro batch / denominator`` and calls
        backward inside the context: ``no_sync()`` for all but the last micro step, so DDP
        all-reduces once.
        """
        n = batch[0].numel() if count is None else count
        denominator = n / self.world_size
        local = [t.tensor_split(self.world_size)[self.rank] for t in batch]  # this rank's slice
        k = self.grad_accum_steps
        for i, micro in enumerate(zip(*(t.tensor_split(k) for t in local))):
            last = i == k - 1
            if self.ddp is not None and not last:
                sync = self.ddp.no_sync()  # accumulate locally, no all-reduce
            else:
                sync = contextlib.nullcontext()
                if self.ddp is not None:
                    self.sync_steps += 1  # this micro step all-reduces
            calls = self.recorder.calls if self.recorder is not None else 0
            yield micro, denominator, sync  # the caller's backward runs here (and calls the hook)
            if self.recorder is not None and self.recorder.calls > calls:
                self.allreduce_micro_steps[i] += 1

    def agree(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank: all ranks stop at the same step."""
        if not self.distributed:
            return flag
        t = torch.tensor([1 if flag else 0], device=self.device)
        dist.broadcast(t, src=0)
        return bool(t.item())

    @property
    def comm_method(self) -> str | None:
        """How :attr:`comm_time_s` is measured here, for the tables that show it (None on one process)."""
        if self.recorder is None:
            return None
        return f"timed: every bucket's all-reduce ({self.recorder.clock.kind})"

    @property
    def comm_time_s(self) -> float | None:
        """Seconds with a gradient all-reduce pending (None on one process): the union of every
        bucket's interval from "ready" to "reduced" (part of it overlaps backward compute).

        The same method on gloo and NCCL; only the clock differs (:mod:`course_lib.comm.hooks`:
        ``perf_counter`` on CPU ranks, CUDA events on GPU ranks, read here after the run).
        """
        if self.recorder is None:
            return None
        return in_flight_seconds(self.recorder.intervals())
