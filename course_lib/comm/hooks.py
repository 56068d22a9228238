"""DDP communication hooks that record what they all-reduce, and when (lesson 06).

DDP calls a comm hook once per gradient bucket, as soon as every gradient in the bucket is
ready, and copies the tensor the hook's future returns into the bucket's gradients
(``DistributedDataParallel.register_comm_hook``). :class:`AllReduceRecorder` is such a hook:
DDP's default all-reduce (divide by the world size, then sum over the ranks: torch's
``default_hooks.allreduce_hook``), optionally compressed to fp16 or bf16 with torch's own
wrappers (``fp16_compress_wrapper(allreduce_hook)`` is, by torch's docstring, what
``fp16_compress_hook`` is; ``tests/test_ddp_hooks.py`` checks they train bit for bit alike).
For every bucket it records the bytes it handed to ``all_reduce`` (counted on the tensor sent,
not computed from the model), when the bucket was ready and when its all-reduce finished.

**One method on every backend; two clocks.** ``ready`` is stamped when DDP calls the hook,
``done`` in the callback of the all-reduce's future. On the CPU (gloo) the stamps are
``time.perf_counter()``: gloo runs the all-reduce on its own thread and completes the future
there, so the callback runs when the data has arrived. On a GPU (NCCL) the host returns
long before the GPU has finished, so the stamps are CUDA events: ``ready`` on the stream
backward runs on, ``done`` inside the callback, where torch makes current a stream that
waits for the collective's kernels (torch.futures: callbacks on CUDA futures run "with some
dedicated streams set as current ... synchronized with those kernels"), so the event
completes when the all-reduce has. Events are read once, after the run
(:meth:`intervals`). Either way an interval is "this bucket's all-reduce was pending": queued
behind an earlier bucket or on the wire.

**bf16 and this build of torch (pinned, torch 2.13).** ``register_comm_hook`` refuses a hook
*named* ``bf16_compress_hook`` or ``bf16_compress_wrapper_hook`` unless torch was built with
CUDA and NCCL >= 2.10 (or XPU and XCCL): "BF16 all reduce communication hook required CUDA 11+
and NCCL 2.10+ or XPU and XCCL" (``DistributedDataParallel._check_comm_hook``). It checks the
*build*, not the process group's backend: a CPU-only torch refuses it even though gloo sums
bf16 tensors (measured: :func:`backend_reduces`), and a CUDA build accepts it over gloo too.
fp16 has no such check. Because the recorder's own name is not on that list, it asks DDP
first with torch's own hook on a throw-away one-parameter model (:func:`ddp_refusal`) and
is not used where DDP would refuse torch's.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

COMPRESSIONS = ("none", "fp16", "bf16")
COMPRESSED_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
_TORCH_HOOKS = {"none": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
                "bf16": default_hooks.bf16_compress_hook}
_WRAPPERS = {"fp16": default_hooks.fp16_compress_wrapper, "bf16": default_hooks.bf16_compress_wrapper}


def check_compression(compression: str) -> str:
    if compression not in COMPRESSIONS:
        raise ValueError(f"gradient compression {compression!r}: choose one of {COMPRESSIONS}")
    return compression


def torch_hook(compression: str):
    """torch's own DDP hook for ``compression``: ``allreduce_hook``, ``fp16_compress_hook``, ``bf16_compress_hook``."""
    return _TORCH_HOOKS[check_compression(compression)]


# --------------------------------------------------------------------------- clocks


class HostClock:
    """``time.perf_counter()`` stamps, for ranks whose tensors live on the CPU (gloo)."""

    kind = "host clock"

    def stamp(self) -> float:
        return time.perf_counter()

    def seconds(self, stamps) -> list[float]:
        return [float(s) for s in stamps]


class CudaEventClock:
    """CUDA events recorded on the current stream; :meth:`seconds` synchronizes once and reads them
    all against a reference event recorded when the clock was made (GPU ranks, NCCL)."""

    kind = "CUDA events"

    def __init__(self, device: torch.device):
        self.device = device
        self._ref = torch.cuda.Event(enable_timing=True)
        self._ref.record()

    def stamp(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, stamps) -> list[float]:
        stamps = list(stamps)
        if stamps:
            torch.cuda.synchronize(self.device)
        return [self._ref.elapsed_time(e) / 1e3 for e in stamps]  # elapsed_time is in ms


def make_clock(device: torch.device):
    """CUDA events for a CUDA device, the host clock otherwise."""
    return CudaEventClock(device) if torch.device(device).type == "cuda" else HostClock()


def in_flight_seconds(intervals) -> float:
    """Length of the union of ``(start, end)`` intervals: the time with at least one pending."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        total += max(0.0, b - max(a, end))
        end = max(end, b)
    return total


# --------------------------------------------------------------------------- the recording hook


class AllReduceRecorder:
    """A DDP comm hook: average each bucket over the ranks (optionally in fp16/bf16) and record it.

    Register its bound method: ``ddp.register_comm_hook(None, recorder.hook)`` (DDP reads the
    hook's ``__name__``, which an instance lacks). ``records``: one dict per bucket all-reduce in
    the order DDP called the hook, ``{"index", "bytes", "dtype", "ready", "done"}``: ``ready`` is
    stamped when DDP calls the hook (so a compressed bucket's interval includes its cast),
    ``done`` when the all-reduce finished (:meth:`intervals` turns the stamps into seconds).
    While ``count_underflow`` is True (benchmarks switch it on for warm-up steps only: it costs
    passes over the bucket), ``underflow`` adds up the nonzero fp32 gradients (``"nonzero"``),
    how many stayed nonzero after the cast to the compressed type (``"nonzero_sent"``) and how
    many of those are subnormal there (``"subnormal_sent"``: below the type's smallest normal
    number, where it keeps fewer significant bits; fp16: 6.1e-5).
    """

    def __init__(self, compression: str = "none", *, clock=None, device=None, count_underflow: bool = False):
        self.compression = check_compression(compression)
        self.clock = clock if clock is not None else make_clock(device if device is not None else torch.device("cpu"))
        self.count_underflow = count_underflow
        self.underflow = {"nonzero": 0, "nonzero_sent": 0, "subnormal_sent": 0}
        self.records: list[dict] = []
        self.calls = 0

    def hook(self, state, bucket):
        """What DDP calls per bucket (no annotations: DDP compares them with its own types)."""
        self.calls += 1
        rec = {"index": bucket.index(), "ready": self.clock.stamp()}
        if self.count_underflow:
            self.underflow["nonzero"] += int(torch.count_nonzero(bucket.buffer()))

        def send(process_group, b):
            return self._allreduce(process_group, b, rec)

        if self.compression != "none":
            send = _WRAPPERS[self.compression](send)  # casts the bucket, calls send, casts the result back
        return send(state, bucket)

    def _allreduce(self, process_group, bucket, rec):
        """torch's ``allreduce_hook`` with a stopwatch: the buffer here is what goes on the wire."""
        group = process_group if process_group is not None else dist.group.WORLD
        buffer = bucket.buffer()  # fp32, or the fp16/bf16 copy the compress wrapper made
        rec.update(bytes=buffer.numel() * buffer.element_size(), dtype=str(buffer.dtype).replace("torch.", ""))
        if self.count_underflow:
            self.underflow["nonzero_sent"] += int(torch.count_nonzero(buffer))
            tiny = torch.finfo(buffer.dtype).tiny
            self.underflow["subnormal_sent"] += int(((buffer != 0) & (buffer.abs() < tiny)).sum())
        self.records.append(rec)
        buffer.div_(group.size())  # divide first, as torch's hooks do (keeps fp16 sums in range)
        fut = dist.all_reduce(buffer, group=group, async_op=True).get_future()
        clock = self.clock

        def done(f):
            rec["done"] = clock.stamp()
            return f.value()[0]

        return fut.then(done)

    def reset(self) -> None:
        """Forget the records so far (after warm-up steps)."""
        self.records = []

    def intervals(self, records=None) -> list[tuple[float, float]]:
        """``(ready_s, done_s)`` of each recorded all-reduce, on the clock's time axis."""
        recs = [r for r in (self.records if records is None else records) if "done" in r]
        secs = self.clock.seconds([s for r in recs for s in (r["ready"], r["done"])])
        return list(zip(secs[0::2], secs[1::2]))

    def in_flight_s(self) -> float:
        """Seconds with at least one bucket's all-reduce pending, over all records."""
        return in_flight_seconds(self.intervals())

    def bytes_sent(self) -> int:
        return sum(r["bytes"] for r in self.records)


def ddp_refusal(compression: str, device: torch.device | None = None) -> str | None:
    """Why DDP refuses torch's own hook for ``compression`` in this process (None: it accepts it).

    Asks on a throw-away one-parameter DDP model, so call it on every rank together (building
    DDP broadcasts the parameter). See the module docstring for the bf16 rule.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    probe = DistributedDataParallel(torch.nn.Linear(1, 1).to(device),
                                    device_ids=[device.index] if device.type == "cuda" else None)
    try:
        probe.register_comm_hook(None, torch_hook(compression))
    except (TypeError, ValueError, RuntimeError) as err:
        return str(err)
    return None


def backend_reduces(dtype: torch.dtype, device: torch.device | None = None, group=None) -> bool:
    """Whether this process group's backend sums ``dtype`` tensors correctly (all ranks call it together)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    t = torch.full((4,), float(rank + 1), dtype=dtype, device=device)
    try:
        dist.all_reduce(t, group=group)
    except (RuntimeError, TypeError, ValueError):
        return False
    return bool((t.float() == size * (size + 1) / 2).all())
