"""Communication benchmarks that run on every rank under ``course_lib.dist.launch`` (lesson 06).

``allreduce_benchmark`` times one all-reduce per message size (the alpha-beta fit of
:mod:`course_lib.comm.cost` reads its rows); ``ddp_bucket_benchmark`` times DDP steps per
``bucket_cap_mb``, with and without overlapping the all-reduce with backward compute.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from .. import dist as cdist
from ..tables import Table
from .cost import GB, MB, human_bytes, algbw, busbw, fit_alpha_beta


def default_sizes(device_kind: str = "cpu", *, smoke: bool = False) -> list[int]:
    """Message sizes in bytes for the all-reduce sweep: powers of 4.

    GPU: 4 B to 256 MiB (NVLink/NCCL only reaches its bandwidth plateau at tens of MB).
    CPU (gloo): 4 B to 64 MiB (a few seconds in all with 2 ranks).
    ``smoke=True``: three tiny sizes (4 B, 1 KiB, 64 KiB) that exercise every code path.
    """
    if smoke:
        return [4, 4**5, 4**8]
    if device_kind not in ("cpu", "cuda"):
        raise ValueError(f"device_kind must be 'cpu' or 'cuda', got {device_kind!r}")
    top = 14 if device_kind == "cuda" else 13  # 4**14 = 256 MiB, 4**13 = 64 MiB
    return [4**k for k in range(1, top + 1)]


# --------------------------------------------------------------------------- the all-reduce benchmark


def _sync(device: torch.device) -> None:
    # CUDA collectives return before the GPU has finished; time only finished work.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_block_means(op, iters: int, device: torch.device, blocks: int = 5, group=None) -> tuple[list, list]:
    """``(per-block mean seconds per op, maxed over ranks; calls per block)``: see :func:`_timed_blocks`."""
    blocks = max(1, min(blocks, iters))
    sizes = [iters // blocks + (1 if b < iters % blocks else 0) for b in range(blocks)]
    block_means = []
    for n in sizes:
        _sync(device)
        if cdist.is_initialized():
            dist.barrier(group=group)
        start = time.perf_counter()
        for _ in range(n):
            op()
        _sync(device)
        block_means.append((time.perf_counter() - start) / n)
    means = torch.tensor(block_means, dtype=torch.float64, device=device)
    if cdist.is_initialized():
        dist.all_reduce(means, op=dist.ReduceOp.MAX, group=group)
    return means.cpu().tolist(), sizes


def _timed_blocks(op, iters: int, device: torch.device, blocks: int = 5, group=None) -> tuple[float, float]:
    """Seconds per ``op()``: ``(median over blocks, mean over all iters)``, max over ranks.

    The ``iters`` calls run back to back in up to ``blocks`` blocks, each started by a
    barrier and ended by a CUDA synchronize. Each block's mean is maxed over ranks (a
    collective is done when the slowest rank is); the median over blocks shrugs off a block
    hit by another process on a shared machine (common on 2-core CI and login nodes), the
    mean over all iterations is nccl-tests' number. ``group``: only its ranks take part.
    """
    means, sizes = _timed_block_means(op, iters, device, blocks, group)
    return _median(means), float(np.dot(means, sizes)) / iters


def _median(values) -> float:
    """torch's median: the lower middle value for an even count (a time that was measured)."""
    return float(torch.tensor(values, dtype=torch.float64).median())


def allreduce_benchmark(rank: int, world_size: int, sizes_bytes: list[int], iters: int = 20,
                        warmup: int = 5, dtype: torch.dtype = torch.float32) -> list[dict]:
    """Time ``iters`` all-reduces (sum) per message size on this rank; a worker for ``launch``.

    For each size: one all-reduce of known values, checked (each rank sends ``rank + 1``,
    every element must come back as ``p(p+1)/2``); ``warmup`` untimed all-reduces; a
    barrier; then ``iters`` timed back-to-back all-reduces in 5 blocks (barrier before each,
    CUDA synchronize before the clock stops). Each block's mean time per operation is taken
    as the **maximum over ranks** (an all-reduce of MAX on the timings, so every rank returns
    the same rows); ``time_s`` is the median over blocks (robust to a block disturbed by
    other work on the machine), ``time_mean_s`` the plain mean over all iterations.
    Bandwidths use ``time_s``.

    ``iters`` and ``warmup`` are ordinary parameters (not keyword-only) because ``launch``
    passes arguments positionally: ``launch(allreduce_benchmark, 2, sizes, 20, 5)``.
    Sizes are rounded down to whole elements of ``dtype`` (at least one); rows report the
    bytes actually sent.
    """
    if iters < 1 or warmup < 0:
        raise ValueError(f"need iters >= 1 and warmup >= 0, got iters={iters}, warmup={warmup}")
    device = cdist.device()
    backend = dist.get_backend() if cdist.is_initialized() else "none"
    element_size = torch.empty((), dtype=dtype).element_size()
    expected = world_size * (world_size + 1) / 2
    rows = []
    for size in sizes_bytes:
        count = max(1, int(size) // element_size)
        buf = torch.full((count,), float(rank + 1), dtype=dtype, device=device)
        if cdist.is_initialized():
            dist.all_reduce(buf)
        wrong = int((buf != expected).sum().item())
        if wrong:
            raise AssertionError(f"all-reduce of {count * element_size} B gave {wrong} wrong element(s) "
                                 f"on rank {rank}: expected every element = {expected:g}, got e.g. "
                                 f"{buf[(buf != expected).nonzero()[0]].item():g}")
        # Zeros for the timed loop: sums of zeros stay zero, so repeated in-place
        # all-reduces can never overflow (costs the same adds as any other values).
        buf.zero_()
        for _ in range(warmup):
            if cdist.is_initialized():
                dist.all_reduce(buf)
        blocks, counts = _timed_block_means(lambda: dist.all_reduce(buf) if cdist.is_initialized() else None,
                                            iters, device)
        time_s, mean_s = _median(blocks), float(np.dot(blocks, counts)) / iters
        n_bytes = count * element_size
        bw = algbw(n_bytes, time_s)
        rows.append({"size_bytes": n_bytes, "count": count, "dtype": str(dtype).replace("torch.", ""),
                     "world_size": world_size, "backend": backend, "device": device.type,
                     "iters": iters, "time_s": time_s, "time_mean_s": mean_s, "time_min_s": min(blocks),
                     "time_max_s": max(blocks), "blocks": len(blocks), "algbw_GBps": bw / GB,
                     "busbw_GBps": busbw(bw, world_size) / GB, "correct": True})
    return rows


@dataclass
class BenchResult:
    """The all-reduce sweep as rank 0 saw it (times are the max over ranks)."""

    rows: list[dict]
    world_size: int
    backend: str

    @property
    def sizes_bytes(self) -> np.ndarray:
        return np.array([r["size_bytes"] for r in self.rows], dtype=float)

    @property
    def times_s(self) -> np.ndarray:
        return np.array([r["time_s"] for r in self.rows], dtype=float)

    def fit(self, *, robust: bool = True) -> tuple[float, float]:
        """``(alpha_s, beta_s_per_byte)`` of this library's all-reduce on this machine."""
        return fit_alpha_beta(self.sizes_bytes, self.times_s, robust=robust)

    def table(self) -> Table:
        blocks = max((r.get("blocks", 0) for r in self.rows), default=0)
        t = Table(["size", "bytes", "time (us)", "blocks: min-max (us)", "algbw (GB/s)", "busbw (GB/s)"],
                  title=f"all-reduce (sum), {self.world_size} ranks, {self.backend}; time = median over "
                        f"{blocks or 'the'} blocks of the slowest rank's mean per op")
        for r in self.rows:
            spread = (f"{r['time_min_s'] * 1e6:.4g}-{r['time_max_s'] * 1e6:.4g}" if "time_min_s" in r else None)
            t.add(**{"size": human_bytes(r["size_bytes"]), "bytes": r["size_bytes"],
                     "time (us)": r["time_s"] * 1e6, "blocks: min-max (us)": spread,
                     "algbw (GB/s)": r["algbw_GBps"], "busbw (GB/s)": r["busbw_GBps"]})
        return t


def run_allreduce_benchmark(world_size: int, sizes: list[int] | None = None, iters: int = 20, warmup: int = 5,
                            dtype: torch.dtype = torch.float32, *, backend: str = "auto",
                            timeout_s: float = 600.0) -> BenchResult:
    """Launch ``allreduce_benchmark`` on ``world_size`` ranks from a notebook cell.

    ``sizes=None`` picks ``default_sizes`` for the backend ``launch`` will use.
    """
    chosen = cdist.choose_backend(world_size, backend)
    if sizes is None:
        sizes = default_sizes("cuda" if chosen == "nccl" else "cpu")
    results = cdist.launch(allreduce_benchmark, world_size, list(sizes), iters, warmup, dtype,
                           backend=chosen, timeout_s=timeout_s)
    return BenchResult(rows=results[0], world_size=world_size, backend=chosen)


# --------------------------------------------------------------------------- DDP gradient buckets


@dataclass(frozen=True)
class MLPSpec:
    """A plain MLP for the bucket benchmark: ``depth`` hidden ``Linear(hidden, hidden)`` layers."""

    in_features: int = 256
    hidden: int = 256
    depth: int = 16
    out_features: int = 10
    batch_size: int = 64

    @property
    def num_params(self) -> int:
        h = self.hidden
        return (self.in_features * h + h) + self.depth * (h * h + h) + (h * self.out_features + self.out_features)

    @property
    def param_mb(self) -> float:
        """Size of the fp32 gradients in MiB (what the all-reduces move per step)."""
        return self.num_params * 4 / MB

    def build(self) -> torch.nn.Module:
        """The MLP with He initialization (normal, fan-in, zero biases): with torch's default init
        the signal shrinks about 0.6x per ReLU layer, and 16 layers leave gradients near 1e-8 that
        no 16-bit format could carry: a broken network, not a property of compression."""
        layers = [torch.nn.Linear(self.in_features, self.hidden), torch.nn.ReLU()]
        for _ in range(self.depth):
            layers += [torch.nn.Linear(self.hidden, self.hidden), torch.nn.ReLU()]
        layers.append(torch.nn.Linear(self.hidden, self.out_features))
        for layer in layers:
            if isinstance(layer, torch.nn.Linear):
                torch.nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                torch.nn.init.zeros_(layer.bias)
        return torch.nn.Sequential(*layers)


def default_mlp_spec(device_kind: str = "cpu", *, smoke: bool = False) -> MLPSpec:
    """The bucket benchmark's model.

    CPU: ~4.3 MiB of gradients in 17 weight matrices of 256 KiB, so that caps of 0.25, 1 and
    25 MiB make different buckets (a bucket takes whole tensors until it reaches its cap: caps
    below one tensor's size all give one tensor per bucket). GPU: ~39 MiB in 9 MiB matrices
    (caps below 9 MiB give one matrix each). Smoke: 42 KiB, one bucket at any cap above that.
    """
    if smoke:
        return MLPSpec(in_features=32, hidden=64, depth=2, out_features=4, batch_size=16)
    if device_kind == "cuda":
        return MLPSpec(in_features=1024, hidden=1536, depth=3, out_features=1000, batch_size=256)
    return MLPSpec()


def _time_steps(step, steps: int, warmup: int, device: torch.device, after_warmup=None) -> float:
    """Seconds per ``step()`` after ``warmup`` untimed steps: median of block means, max over ranks."""
    for _ in range(warmup):
        step()
    if after_warmup is not None:
        after_warmup()
    return _timed_blocks(step, steps, device)[0]


def _params_in_sync(model: torch.nn.Module) -> bool:
    """True when every rank holds rank 0's parameters (data parallelism's invariant)."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    ok = torch.tensor([1.0 if torch.allclose(flat, ref, rtol=0, atol=1e-6) else 0.0], device=flat.device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return bool(ok.item())


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).double().cpu() for p in model.parameters()])


def _update_difference(theta: torch.Tensor, ref: torch.Tensor, theta0: torch.Tensor, spec: "MLPSpec") -> tuple:
    """``|theta - ref| / |ref - theta0|`` over all parameters, and the largest over single tensors
    with that tensor's name: how much a variant's training differs from the reference's."""
    names, sizes = zip(*[(n, p.numel()) for n, p in spec.build().named_parameters()])
    whole = float((theta - ref).norm()) / (float((ref - theta0).norm()) or float("nan"))
    worst, worst_name = 0.0, names[0]
    for name, a, r, z in zip(names, theta.split(sizes), ref.split(sizes), theta0.split(sizes)):
        moved = float((r - z).norm())
        d = float((a - r).norm()) / moved if moved else (0.0 if float((a - r).norm()) == 0 else float("inf"))
        if d > worst:
            worst, worst_name = d, name
    return whole, worst, worst_name


_LABELS = {"buckets": "DDP buckets", "no overlap": "one all-reduce after backward",
           "floor": "no communication (floor)", "compressed": "DDP + {} compression"}


@dataclass(frozen=True)
class _BucketBench:
    """What every variant of one :func:`ddp_bucket_benchmark` shares: the model, this rank's data, the clock."""

    spec: "MLPSpec"
    device: torch.device
    device_ids: list | None
    clock: object
    X: torch.Tensor  # (B, in)
    y: torch.Tensor  # (B, out)
    world_size: int
    steps: int
    warmup: int
    repeats: int


def _bucket_model(kind: str, cap: float, compression, bench: "_BucketBench") -> tuple:
    """The variant's DDP model from the shared initial weights, and its all-reduce recorder (None when DDP's
    hooks do not fire: no overlap, floor)."""
    from . import hooks

    torch.manual_seed(0)  # the same initial weights on every rank and every variant
    model = DDP(bench.spec.build().to(bench.device), device_ids=bench.device_ids,
                bucket_cap_mb=cap if kind in ("buckets", "compressed") else 25.0)
    recorder = None
    if kind in ("buckets", "compressed"):
        recorder = hooks.AllReduceRecorder(compression, clock=bench.clock, count_underflow=kind == "compressed")
        model.register_comm_hook(None, recorder.hook)
    return model, recorder


def _flat_allreduce(params: list, clock, world_size: int) -> dict:
    """The no-overlap variant's all-reduce: every gradient in one flat buffer, averaged and copied back;
    returns its record (bytes, ready and done stamps), as the recorder keeps DDP's."""
    flat = torch.cat([p.grad.reshape(-1) for p in params])  # all gradients, one buffer
    rec = {"index": 0, "bytes": flat.numel() * flat.element_size(), "ready": clock.stamp()}
    dist.all_reduce(flat)
    rec["done"] = clock.stamp()
    flat /= world_size
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
        offset += p.numel()
    return rec


def _median_step_timeline(marks: list[tuple], recs: list[dict], clock) -> tuple[list, dict]:
    """Every all-reduce as (ready s, done s, bytes), and the timeline of the step of median length in ms from
    its start: backward start and end, the optimizer step's end, and the all-reduces during it."""
    secs = clock.seconds([m[j] for m in marks for j in range(4)] + [s for r in recs for s in (r["ready"], r["done"])])
    step_secs = [secs[4 * k:4 * k + 4] for k in range(len(marks))]
    rec_secs = secs[4 * len(marks):]
    intervals = [(rec_secs[2 * i], rec_secs[2 * i + 1], recs[i]["bytes"]) for i in range(len(recs))]
    k = int(np.argsort([t[3] - t[0] for t in step_secs])[len(step_secs) // 2])  # the median step
    t0 = step_secs[k][0]
    upto = marks[k + 1][4] if k + 1 < len(marks) else len(recs)
    timeline = {"backward_start_ms": (step_secs[k][1] - t0) * 1e3, "backward_end_ms": (step_secs[k][2] - t0) * 1e3,
                "step_ms": (step_secs[k][3] - t0) * 1e3,
                "allreduces_ms": [[(a - t0) * 1e3, (b - t0) * 1e3, n] for a, b, n in intervals[marks[k][4]:upto]]}
    return intervals, timeline


def _bucket_variant_run(kind: str, cap: float, compression, bench: "_BucketBench") -> dict:
    """One variant of :func:`ddp_bucket_benchmark`, timed: its step, its all-reduces, its timeline, its weights."""
    from contextlib import nullcontext

    from . import hooks

    device, clock, X, y = bench.device, bench.clock, bench.X, bench.y
    model, recorder = _bucket_model(kind, cap, compression, bench)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    params = [p for p in model.parameters() if p.requires_grad]
    manual: list[dict] = []  # the no-overlap variant's one all-reduce per step
    marks: list[tuple] = []  # per step: stamps (start, forward done, backward done, step done), records before
    losses = []

    def step():
        recs = recorder.records if recorder is not None else manual
        n_before = len(recs)
        t0 = clock.stamp()
        opt.zero_grad(set_to_none=True)
        with model.no_sync() if kind in ("no overlap", "floor") else nullcontext():  # no_sync: no hooks fire
            loss = torch.nn.functional.mse_loss(model(X), y)
            t1 = clock.stamp()
            loss.backward()  # DDP's hooks all-reduce each full bucket during this call
        t2 = clock.stamp()
        if kind == "no overlap":
            manual.append(_flat_allreduce(params, clock, bench.world_size))
        opt.step()
        marks.append((t0, t1, t2, clock.stamp(), n_before))
        losses[:] = [losses[0] if losses else loss.detach(), loss.detach()]  # the first step's and the latest

    def after_warmup():
        marks.clear()
        manual.clear()
        if recorder is not None:
            recorder.reset()
            recorder.count_underflow = False  # counted on the warm-up steps only (it costs two passes)

    step_s = _time_steps(step, bench.steps, bench.warmup, device, after_warmup)
    recs = recorder.records if recorder is not None else manual
    intervals, timeline = _median_step_timeline(marks, recs, clock)
    return {"step_s": step_s, "comm_s": hooks.in_flight_seconds([(a, b) for a, b, _ in intervals]) / len(marks),
            "bytes_per_step": sum(n for _, _, n in intervals) / len(marks),
            "allreduces_per_step": len(intervals) / len(marks), "timeline": timeline,
            "in_sync": None if kind == "floor" else _params_in_sync(model), "params": _flat(model),
            "first_loss": float(losses[0]), "loss": float(losses[1]),
            "underflow": dict(recorder.underflow) if recorder is not None else None}


def _bucket_row(kind: str, cap: float, compression, rs: list[dict], ref, theta0, bench: "_BucketBench",
                refused: dict, reduces: dict) -> dict:
    """One row of :func:`ddp_bucket_benchmark`: a variant's repeats, read against the reference's weights."""
    row = {"variant": _LABELS[kind].format(compression), "bucket_cap_mb": cap,
           "overlap": {"buckets": True, "compressed": True, "no overlap": False, "floor": None}[kind],
           "compression": compression, "backend": dist.get_backend(), "device": bench.device.type,
           "clock": bench.clock.kind, "repeats": bench.repeats, "steps": bench.steps}
    if kind == "compressed":
        row.update(refused=refused[compression], backend_reduces_dtype=reduces[compression])
    if not rs:  # refused by DDP: not run
        row.update(step_ms=None, step_ms_repeats=[], comm_ms=None, bytes_per_step=None, allreduces_per_step=None,
                   timeline=None, params_in_sync=None, update_rel_diff=None, worst_tensor_rel_diff=None,
                   worst_tensor=None, first_loss=None, final_loss=None, underflow=None)
        return row
    last = rs[-1]
    whole, worst, worst_name = (None, None, None) if kind == "floor" else _update_difference(
        last["params"], ref, theta0, bench.spec)
    row.update(step_ms=float(np.median([r["step_s"] for r in rs])) * 1e3,
               step_ms_repeats=[r["step_s"] * 1e3 for r in rs],
               comm_ms=float(np.median([r["comm_s"] for r in rs])) * 1e3,
               bytes_per_step=last["bytes_per_step"], allreduces_per_step=last["allreduces_per_step"],
               timeline=last["timeline"], params_in_sync=last["in_sync"] if kind != "floor" else None,
               update_rel_diff=whole, worst_tensor_rel_diff=worst, worst_tensor=worst_name,
               first_loss=last["first_loss"], final_loss=last["loss"],
               underflow=last["underflow"] if kind == "compressed" else None)
    return row


def ddp_bucket_benchmark(rank: int, world_size: int, bucket_caps_mb: list[float], steps: int = 10,
                         model_spec: MLPSpec | None = None, warmup: int = 2, compute_only: bool = False,
                         compressions=(), repeats: int = 1) -> list[dict]:
    """DDP step time (forward + backward + SGD step) per ``bucket_cap_mb``, without overlap, compressed.

    Variants, each from the same initial weights on the same per-rank data:

    * one per bucket cap (``overlap=True``): DDP all-reduces each bucket as soon as its
      gradients are ready, while backward continues on earlier layers;
    * ``overlap=False``: backward under ``model.no_sync()`` (no DDP hooks fire), then one
      all-reduce of all gradients in one flat buffer; its ``bucket_cap_mb`` is that buffer's size;
    * ``compute_only=True``: no communication at all (``overlap=None``), the floor that perfect
      overlap would reach (the ranks drift apart: ``params_in_sync`` is None);
    * one per ``compressions`` entry (``"fp16"``, ``"bf16"``) at the largest cap: torch's
      compression hook (:mod:`course_lib.comm.hooks`); a row DDP refuses here (bf16 on a torch
      built without CUDA/NCCL) is not run and says why in ``refused``.

    Every DDP variant all-reduces through :class:`~course_lib.comm.hooks.AllReduceRecorder` (DDP's
    average, or torch's compression, timed per bucket on the host clock or CUDA events), so each
    row counts what it sent: ``bytes_per_step``, ``allreduces_per_step`` and ``comm_ms``, the time
    per step with an all-reduce pending (the no-overlap all-reduce is stamped by the same clock).
    ``timeline``: this rank's step of median length, in ms from its start (forward first):
    ``backward_start_ms``, ``backward_end_ms`` (``loss.backward()`` returned: DDP waits there
    for the last bucket), ``step_ms``, and ``allreduces_ms``: ``[ready, done, bytes]`` per all-reduce.
    ``update_rel_diff``: how far this variant's parameters ended from the uncompressed run at the
    largest cap, relative to how far that run moved them (``|theta - theta_ref| / |theta_ref -
    theta_0|``): the size of rounding for fp32 variants, and what compression changed;
    ``worst_tensor_rel_diff`` / ``worst_tensor``: the same for the parameter tensor that differs
    most (a layer whose small gradients fp16 flushes to zero shows there, not in the whole).

    ``repeats``: the variants run ``repeats`` times, interleaved (A, B, C, A, B, C...), so the
    machine's drift hits all alike; ``step_ms`` is the median over repeats of each repeat's
    median-of-blocks step (slowest rank, see ``_timed_blocks``), ``step_ms_repeats`` all of
    them: their spread is the run-to-run noise a comparison must beat.

    ``warmup`` >= 1: DDP builds its buckets during the first step (see :func:`_check_bucket_args`).
    A worker for ``launch``: arguments are positional, e.g.
    ``launch(ddp_bucket_benchmark, 2, [1, 25], 10, MLPSpec())``.
    """
    from . import hooks

    compressions = _check_bucket_args(bucket_caps_mb, steps, warmup, repeats, compressions)
    spec = model_spec or default_mlp_spec(cdist.device().type)
    bench = _bucket_bench(spec, rank, world_size, steps, warmup, repeats)
    ref_cap = max(float(c) for c in bucket_caps_mb)
    variants = ([("buckets", float(c), "none") for c in bucket_caps_mb] + [("no overlap", spec.param_mb, "none")]
                + ([("floor", 0.0, None)] if compute_only else []) + [("compressed", ref_cap, c) for c in compressions])
    refused = {c: hooks.ddp_refusal(c, bench.device) for c in compressions}  # every rank asks together
    reduces = {c: hooks.backend_reduces(hooks.COMPRESSED_DTYPES[c], bench.device) for c in compressions}
    torch.manual_seed(0)
    theta0 = _flat(spec.build())  # the initial weights every variant starts from

    runs = _run_variants_interleaved(variants, refused, bench)
    ref = runs[variants.index(("buckets", ref_cap, "none"))][-1]["params"]
    return [_bucket_row(kind, cap, compression, runs[i], ref, theta0, bench, refused, reduces)
            for i, (kind, cap, compression) in enumerate(variants)]


def _run_variants_interleaved(variants: list[tuple], refused: dict, bench: "_BucketBench") -> dict[int, list[dict]]:
    """Each variant's runs by index: ``bench.repeats`` rounds of A, B, C..., skipping the refused compressions."""
    runs: dict[int, list[dict]] = {i: [] for i in range(len(variants))}
    for _ in range(bench.repeats):
        for i, (kind, cap, compression) in enumerate(variants):
            if kind == "compressed" and refused[compression] is not None:
                continue
            runs[i].append(_bucket_variant_run(kind, cap, compression, bench))
    return runs

def _check_bucket_args(bucket_caps_mb, steps: int, warmup: int, repeats: int, compressions) -> list[str]:
    """Refuse what :func:`ddp_bucket_benchmark` cannot run; return the compressions' canonical names.

    ``warmup`` >= 1: DDP's first step runs with all gradients in one bucket and rebuilds its
    buckets after it, in the order the gradients became ready; a bucket takes whole tensors until
    it reaches the cap, and with ``bucket_cap_mb`` given the first bucket has the same cap (only
    DDP's default, ``None``, makes the first bucket 1 MiB). Measured and read in torch 2.13's
    ``distributed.py`` (``_BucketCapacityConfig``).
    """
    from . import hooks

    if not cdist.is_initialized():
        raise RuntimeError("ddp_bucket_benchmark needs a process group: run it with course_lib.dist.launch")
    if not bucket_caps_mb:
        raise ValueError("bucket_caps_mb: give at least one bucket cap (MiB), e.g. [1, 25]")
    if warmup < 1 or repeats < 1 or steps < 1:
        raise ValueError(f"need steps >= 1, warmup >= 1 (DDP builds its buckets during the first step) and "
                         f"repeats >= 1; got steps={steps}, warmup={warmup}, repeats={repeats}")
    compressions = [hooks.check_compression(c) for c in compressions]
    if "none" in compressions:
        raise ValueError("compressions: name 'fp16' and/or 'bf16'; the uncompressed reference is the "
                         "bucket row at the largest cap")
    return compressions


def _bucket_bench(spec: "MLPSpec", rank: int, world_size: int, steps: int, warmup: int,
                  repeats: int) -> "_BucketBench":
    """This rank's data (its own shard), device and clock, shared by every variant."""
    from . import hooks

    device = cdist.device()
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard of data
    X = torch.randn(spec.batch_size, spec.in_features, generator=gen).to(device)  # (B, in)
    y = torch.randn(spec.batch_size, spec.out_features, generator=gen).to(device)  # (B, out)
    device_ids = [device.index] if device.type == "cuda" else None
    clock = hooks.make_clock(device)
    return _BucketBench(spec, device, device_ids, clock, X, y, world_size, steps, warmup, repeats)


@dataclass
class BucketResult:
    """DDP bucket benchmark rows as rank 0 saw them (step times are the max over ranks)."""

    rows: list[dict]
    world_size: int
    backend: str
    model_spec: MLPSpec = field(default_factory=MLPSpec)

    @property
    def bucket_rows(self) -> list[dict]:
        """Every row but the compressed ones: bucket caps, no overlap, the floor."""
        return [r for r in self.rows if r.get("compression") in ("none", None)]

    @property
    def compression_rows(self) -> list[dict]:
        """The uncompressed reference (the largest cap) and each compressed row, run or refused."""
        comp = [r for r in self.rows if r.get("compression") not in ("none", None)]
        if not comp:
            return []
        cap = comp[0]["bucket_cap_mb"]
        ref = [r for r in self.rows
               if r["overlap"] is True and r["compression"] == "none" and r["bucket_cap_mb"] == cap]
        return ref[:1] + comp

    def table(self) -> Table:
        t = Table(["variant", "bucket cap (MiB)", "all-reduces per step", "step (ms)", "repeats (ms)",
                   "all-reduce pending (ms per step)", "overlap", "params in sync"],
                  title=f"DDP step time, {self.world_size} ranks, {self.backend}, "
                        f"{self.model_spec.param_mb:.2f} MiB of gradients per step; step = median over repeats "
                        "of the slowest rank's median-of-blocks mean")
        for r in self.bucket_rows:
            t.add(**{"variant": r["variant"], "bucket cap (MiB)": r["bucket_cap_mb"],
                     "all-reduces per step": r.get("allreduces_per_step"), "step (ms)": r["step_ms"],
                     "repeats (ms)": ", ".join(f"{x:.3g}" for x in r.get("step_ms_repeats", [])) or None,
                     "all-reduce pending (ms per step)": r.get("comm_ms"), "overlap": r["overlap"],
                     "params in sync": r["params_in_sync"]})
        return t

    def compression_table(self) -> Table:
        t = Table(["variant", "all-reduced per step", "step (ms)", "repeats (ms)", "all-reduce pending (ms per step)",
                   "update vs uncompressed", "worst tensor", "loss: first -> last", "flushed to zero",
                   "subnormal when sent"],
                  title=f"Gradient compression with DDP comm hooks, {self.world_size} ranks, {self.backend}, "
                        f"bucket cap {self.compression_rows[0]['bucket_cap_mb']:g} MiB" if self.compression_rows
                        else "Gradient compression: not measured")
        for r in self.compression_rows:
            if r["step_ms"] is None:
                t.add(**{"variant": r["variant"], "all-reduced per step": "not run: DDP refused the hook here"})
                continue
            u = r.get("underflow") or {}
            flushed = (u["nonzero"] - u["nonzero_sent"]) / u["nonzero"] if u.get("nonzero") else None
            subnormal = u["subnormal_sent"] / u["nonzero"] if u.get("nonzero") else None
            t.add(**{"variant": r["variant"], "all-reduced per step": human_bytes(r["bytes_per_step"]),
                     "step (ms)": r["step_ms"],
                     "repeats (ms)": ", ".join(f"{x:.3g}" for x in r["step_ms_repeats"]),
                     "all-reduce pending (ms per step)": r["comm_ms"],
                     "update vs uncompressed": r["update_rel_diff"],
                     "worst tensor": f"{r['worst_tensor']}: {r['worst_tensor_rel_diff']:.2g}",
                     "loss: first -> last": f"{r['first_loss']:.4f} -> {r['final_loss']:.4f}",
                     "flushed to zero": f"{flushed:.2%}" if flushed is not None else "—",
                     "subnormal when sent": f"{subnormal:.2%}" if subnormal is not None else "—"})
        return t


def run_ddp_bucket_benchmark(world_size: int, bucket_caps_mb: list[float], steps: int = 10,
                             model_spec: MLPSpec | None = None, warmup: int = 2, compute_only: bool = False,
                             compressions=(), repeats: int = 1, *, backend: str = "auto",
                             timeout_s: float = 600.0) -> BucketResult:
    """Launch ``ddp_bucket_benchmark`` on ``world_size`` ranks from a notebook cell."""
    chosen = cdist.choose_backend(world_size, backend)
    spec = model_spec or default_mlp_spec("cuda" if chosen == "nccl" else "cpu")
    results = cdist.launch(ddp_bucket_benchmark, world_size, list(bucket_caps_mb), steps, spec, warmup,
                           compute_only, list(compressions), repeats, backend=chosen, timeout_s=timeout_s)
    return BucketResult(rows=results[0], world_size=world_size, backend=chosen, model_spec=spec)


# --------------------------------------------------------------------------- lesson 08: point-to-point and the course's
# collectives


def pingpong_benchmark(rank: int, world_size: int, sizes_bytes: list[int], iters: int = 20,
                       repeats: int = 5, warmup: int = 3) -> list[dict]:
    """One-way message time between ranks 0 and 1, per size, ``repeats`` times; a worker for ``launch``.

    Rank 0 sends ``n`` bytes to rank 1, which sends them back; half the round trip, averaged
    over ``iters`` round trips, is one message: ``alpha + n beta``. Each repeat is a full pass
    over the sizes, so the spread between repeats shows how steady this machine is. Only
    rank 0's clock is read (one clock, no offset between processes). Other ranks wait.
    Rows (on every rank): ``{"repeat", "size_bytes", "one_way_s"}``.
    """
    if world_size < 2:
        raise ValueError("a ping-pong needs 2 ranks")
    rows = []
    device = cdist.device()
    for rep in range(repeats):
        for size in sizes_bytes:
            buf = torch.zeros(max(1, int(size)), dtype=torch.uint8, device=device)
            dist.barrier()
            t = torch.zeros(1, dtype=torch.float64)
            if rank in (0, 1):
                peer = 1 - rank
                for i in range(warmup + iters):
                    if i == warmup:
                        _sync(device)
                        start = time.perf_counter()
                    if rank == 0:
                        dist.send(buf, peer)
                        dist.recv(buf, peer)
                    else:
                        dist.recv(buf, peer)
                        dist.send(buf, peer)
                _sync(device)
                t[0] = (time.perf_counter() - start) / (2 * iters)
            dist.broadcast(t, 0)
            rows.append({"repeat": rep, "size_bytes": buf.numel(), "one_way_s": float(t[0])})
    return rows


@dataclass
class PingPong:
    """Ping-pong rows and the alpha-beta fit of each repeat."""

    rows: list[dict]

    def fits(self) -> list[tuple[float, float]]:
        """``(alpha, beta)`` fitted to each repeat on its own."""
        reps = sorted({r["repeat"] for r in self.rows})
        out = []
        for rep in reps:
            mine = [r for r in self.rows if r["repeat"] == rep]
            out.append(fit_alpha_beta([r["size_bytes"] for r in mine], [r["one_way_s"] for r in mine]))
        return out

    def alpha_beta(self) -> tuple[float, float]:
        """The median over repeats of alpha and of beta: this machine's link, as the lesson uses it.

        beta is never 0: when every size measured is latency-bound (the smoke profile's few
        KiB, or noise on a busy machine) the fit's bandwidth term comes out 0, and a model with
        an infinitely fast link predicts nothing. Then beta is bounded by the largest message:
        what its median time leaves after alpha (at least 1 % of that time) per byte.
        """
        fits = np.array(self.fits())
        alpha, beta = float(np.median(fits[:, 0])), float(np.median(fits[:, 1]))
        return alpha, self._bounded_beta(alpha, beta, self.rows)

    @staticmethod
    def _bounded_beta(alpha: float, beta: float, rows: list[dict]) -> float:
        """``beta``, or where a fit resolved none (0) the bound :meth:`alpha_beta` describes, from ``rows``."""
        if beta > 0:
            return beta
        n = max(r["size_bytes"] for r in rows)
        t = float(np.median([r["one_way_s"] for r in rows if r["size_bytes"] == n]))
        return max(t - alpha, 0.01 * t) / max(n, 1)

    def spread(self) -> dict:
        """Min, median and max over repeats of alpha (us) and of the bandwidth 1/beta (GB/s). A repeat whose fit
        resolved no bandwidth term counts at the bound :meth:`alpha_beta` gives (its own largest message), not as
        an infinite bandwidth (lesson 08 printed "max inf" GB/s on the smoke profile's latency-bound sizes)."""
        reps = sorted({r["repeat"] for r in self.rows})
        fits = np.array(self.fits())
        alpha_us = fits[:, 0] * 1e6
        bw = np.array([1 / self._bounded_beta(a, b, [r for r in self.rows if r["repeat"] == rep]) / GB
                       for rep, (a, b) in zip(reps, fits)])
        return {"alpha_us": (float(alpha_us.min()), float(np.median(alpha_us)), float(alpha_us.max())),
                "bandwidth_GBps": (float(bw.min()), float(np.median(bw)), float(bw.max())),
                "repeats": len(fits)}

    def table(self) -> Table:
        sizes = sorted({r["size_bytes"] for r in self.rows})
        t = Table(["size", "one-way min (us)", "median (us)", "max (us)"],
                  title=f"ping-pong, rank 0 <-> rank 1, {self.spread()['repeats']} repeats")
        for n in sizes:
            ts = np.array([r["one_way_s"] for r in self.rows if r["size_bytes"] == n]) * 1e6
            t.add(**{"size": human_bytes(n), "one-way min (us)": ts.min(), "median (us)": float(np.median(ts)),
                     "max (us)": ts.max()})
        return t


def measure_gamma(n_bytes: int = 4 * 2**20, repeats: int = 20, device=None) -> float:
    """Seconds per byte of ``a += b`` on float32 on ``device`` (default: this process's): the
    model's reduction term, ``gamma``."""
    device = torch.device(device) if device is not None else cdist.device()
    count = max(1, n_bytes // 4)
    a = torch.zeros(count, device=device)
    b = torch.ones(count, device=device)
    a.add_(b)
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        a.add_(b)
        _sync(device)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) / (count * 4)


def _collective_ops(name: str, buf: torch.Tensor, group, src: int = 0, segments: int = 8):
    from . import collectives

    if name == "backend":
        return lambda: dist.all_reduce(buf, group=group)
    if name == "backend broadcast":
        return lambda: dist.broadcast(buf, src if group is None else dist.get_global_rank(group, src), group=group)
    if name in collectives.ALLREDUCES:
        fn = collectives.ALLREDUCES[name]
        return lambda: fn(buf, group=group)
    if name == "pipelined chain":
        return lambda: collectives.pipelined_broadcast(buf, src, segments, group=group)
    if name in collectives.BROADCASTS:
        fn = collectives.BROADCASTS[name]
        return lambda: fn(buf, src, group=group)
    raise ValueError(f"unknown algorithm {name!r}")


ALLREDUCE_BENCH = ("ring", "recursive doubling", "tree", "backend")
BROADCAST_BENCH = ("flat tree", "binomial tree", "pipelined chain", "backend broadcast")


def collectives_benchmark(rank: int, world_size: int, sizes_bytes: list[int], algorithms=ALLREDUCE_BENCH,
                          iters: int = 10, warmup: int = 2, groups=None, segments: int = 8) -> list[dict]:
    """Time each algorithm (course's and the backend's) per message size; a worker for ``launch``.

    ``groups``: rank lists to measure on (``dist.new_group`` each), so one launch measures
    several ``p``; ranks outside a group wait at the next barrier. float32 zeros (sums stay
    zero), ``warmup`` untimed calls, then ``_timed_blocks`` (max over the group's ranks,
    median over blocks). Rows: ``{"p", "algorithm", "kind", "size_bytes", "time_s",
    "algbw_GBps", "busbw_GBps"}``; busbw uses nccl-tests' factor, ``2(p-1)/p`` for an
    all-reduce and 1 for a broadcast.
    """
    device = cdist.device()
    groups = [list(range(world_size))] if groups is None else [sorted(g) for g in groups]
    handles = [None if len(g) == world_size else dist.new_group(g) for g in groups]
    rows = []
    for members, group in zip(groups, handles):
        if rank in members:
            p = len(members)
            for size in sizes_bytes:
                count = max(1, int(size) // 4)
                buf = torch.zeros(count, dtype=torch.float32, device=device)
                for name in algorithms:
                    op = _collective_ops(name, buf, group, segments=segments)
                    for _ in range(warmup):
                        op()
                    t, _ = _timed_blocks(op, iters, device, blocks=min(5, iters), group=group)
                    kind = "broadcast" if "broadcast" in name or name in ("flat tree", "binomial tree",
                                                                          "pipelined chain") else "allreduce"
                    bw = algbw(count * 4, t)
                    rows.append({"p": p, "algorithm": name, "kind": kind, "size_bytes": count * 4, "time_s": t,
                                 "algbw_GBps": bw / GB,
                                 "busbw_GBps": (busbw(bw, p) if kind == "allreduce" else bw) / GB})
        dist.barrier()
    return rows


@dataclass
class CollectivesResult:
    """Measured times of the course's collectives and the backend's, as rank 0 saw them."""

    rows: list[dict]
    backend: str = "gloo"

    def times(self, p: int, algorithm: str) -> tuple[np.ndarray, np.ndarray]:
        """``(sizes_bytes, times_s)`` of one algorithm at ``p`` ranks."""
        mine = sorted((r["size_bytes"], r["time_s"]) for r in self.rows if r["p"] == p and r["algorithm"] == algorithm)
        return np.array([m[0] for m in mine], dtype=float), np.array([m[1] for m in mine], dtype=float)

    @property
    def world_sizes(self) -> list[int]:
        return sorted({r["p"] for r in self.rows})

    @property
    def algorithms(self) -> list[str]:
        return list(dict.fromkeys(r["algorithm"] for r in self.rows))

    def table(self, p: int) -> Table:
        algos = [a for a in self.algorithms if any(r["p"] == p and r["algorithm"] == a for r in self.rows)]
        t = Table(["size"] + [f"{a} (us)" for a in algos] + ["fastest"],
                  title=f"measured time per operation, p = {p} ({self.backend}; max over ranks, median of blocks)")
        sizes = sorted({r["size_bytes"] for r in self.rows if r["p"] == p})
        for n in sizes:
            row = {"size": human_bytes(n)}
            best = None
            for a in algos:
                v = next(r["time_s"] for r in self.rows if r["p"] == p and r["algorithm"] == a and r["size_bytes"] == n)
                row[f"{a} (us)"] = v * 1e6
                if best is None or v < best[1]:
                    best = (a, v)
            row["fastest"] = best[0]
            t.add(**row)
        return t


def ring_vs_backend(world_size: int = 2, size_bytes: int = 16 * MB, iters: int = 10, warmup: int = 3,
                    *, backend: str = "auto", timeout_s: float = 600.0) -> CollectivesResult:
    """The course's ring all-reduce against the backend's, at one size, in one launch (``bench collectives``)."""
    chosen = cdist.choose_backend(world_size, backend)
    rows = cdist.launch(collectives_benchmark, world_size, [size_bytes], ("ring", "backend"), iters, warmup,
                        backend=chosen, timeout_s=timeout_s)[0]
    return CollectivesResult(rows, chosen)
