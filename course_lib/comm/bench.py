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
from .cost import GB, MB, _human_bytes, algbw, busbw, fit_alpha_beta


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


def _timed_blocks(op, iters: int, device: torch.device, blocks: int = 5, group=None) -> tuple[float, float]:
    """Seconds per ``op()``: ``(median over blocks, mean over all iters)``, max over ranks.

    The ``iters`` calls run back to back in up to ``blocks`` blocks, each started by a
    barrier and ended by a CUDA synchronize. Each block's mean is maxed over ranks (a
    collective is done when the slowest rank is); the median over blocks shrugs off a block
    hit by another process on a shared machine (common on 2-core CI and login nodes), the
    mean over all iterations is nccl-tests' number. ``group``: only its ranks take part.
    """
    blocks = max(1, min(blocks, iters))
    sizes = [iters // blocks + (1 if b < iters % blocks else 0) for b in range(blocks)]
    block_means = []
    for n in sizes:
        _sync(device)
        if cdist._initialized():
            dist.barrier(group=group)
        start = time.perf_counter()
        for _ in range(n):
            op()
        _sync(device)
        block_means.append((time.perf_counter() - start) / n)
    means = torch.tensor(block_means, dtype=torch.float64, device=device)
    if cdist._initialized():
        dist.all_reduce(means, op=dist.ReduceOp.MAX, group=group)
    means = means.cpu()
    mean_all = float((means * torch.tensor(sizes, dtype=torch.float64)).sum()) / iters
    return float(means.median()), mean_all


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
    backend = dist.get_backend() if cdist._initialized() else "none"
    element_size = torch.empty((), dtype=dtype).element_size()
    expected = world_size * (world_size + 1) / 2
    rows = []
    for size in sizes_bytes:
        count = max(1, int(size) // element_size)
        buf = torch.full((count,), float(rank + 1), dtype=dtype, device=device)
        if cdist._initialized():
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
            if cdist._initialized():
                dist.all_reduce(buf)
        time_s, mean_s = _timed_blocks(lambda: dist.all_reduce(buf) if cdist._initialized() else None,
                                       iters, device)
        n_bytes = count * element_size
        bw = algbw(n_bytes, time_s)
        rows.append({"size_bytes": n_bytes, "count": count, "dtype": str(dtype).replace("torch.", ""),
                     "world_size": world_size, "backend": backend, "device": device.type,
                     "iters": iters, "time_s": time_s, "time_mean_s": mean_s, "algbw_GBps": bw / GB,
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
        t = Table(["size", "bytes", "time (us)", "algbw (GB/s)", "busbw (GB/s)"],
                  title=f"all-reduce (sum), {self.world_size} ranks, {self.backend}; "
                        "time = max over ranks of the mean per op")
        for r in self.rows:
            t.add(**{"size": _human_bytes(r["size_bytes"]), "bytes": r["size_bytes"],
                     "time (us)": r["time_s"] * 1e6, "algbw (GB/s)": r["algbw_GBps"],
                     "busbw (GB/s)": r["busbw_GBps"]})
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
    hidden: int = 512
    depth: int = 4
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
        layers = [torch.nn.Linear(self.in_features, self.hidden), torch.nn.ReLU()]
        for _ in range(self.depth):
            layers += [torch.nn.Linear(self.hidden, self.hidden), torch.nn.ReLU()]
        layers.append(torch.nn.Linear(self.hidden, self.out_features))
        return torch.nn.Sequential(*layers)


def default_mlp_spec(device_kind: str = "cpu", *, smoke: bool = False) -> MLPSpec:
    """GPU: ~39 MiB of parameters (two of DDP's default 25 MiB buckets); CPU: ~4.5 MiB; smoke: tiny."""
    if smoke:
        return MLPSpec(in_features=32, hidden=64, depth=2, out_features=4, batch_size=16)
    if device_kind == "cuda":
        return MLPSpec(in_features=1024, hidden=1536, depth=3, out_features=1000, batch_size=256)
    return MLPSpec(in_features=256, hidden=512, depth=4, out_features=10, batch_size=64)


def _time_steps(step, steps: int, warmup: int, device: torch.device) -> float:
    """Seconds per ``step()`` after ``warmup`` untimed steps: median of block means, max over ranks."""
    for _ in range(warmup):
        step()
    return _timed_blocks(step, steps, device)[0]


def _params_in_sync(model: torch.nn.Module) -> bool:
    """True when every rank holds rank 0's parameters (data parallelism's invariant)."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    ok = torch.tensor([1.0 if torch.allclose(flat, ref, rtol=0, atol=1e-6) else 0.0], device=flat.device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return bool(ok.item())


def ddp_bucket_benchmark(rank: int, world_size: int, bucket_caps_mb: list[float], steps: int = 10,
                         model_spec: MLPSpec | None = None, warmup: int = 2,
                         compute_only: bool = False) -> list[dict]:
    """DDP step time (forward + backward + SGD step) per ``bucket_cap_mb``, plus no overlap.

    One row per bucket cap (``overlap=True``): DDP all-reduces each bucket as soon as its
    gradients are ready, while backward continues on earlier layers. Then one row with
    ``overlap=False``: backward under ``model.no_sync()`` (no DDP hooks fire), then one
    all-reduce of all gradients in one flat buffer, averaged by hand; its
    ``bucket_cap_mb`` is the size of that buffer. ``compute_only=True`` adds a row with no
    communication at all (``overlap=None``): the floor that perfect overlap would reach.
    ``step_ms`` is the median over 5 blocks of steps of the slowest rank's mean step
    (see ``_timed_blocks``); every row also checks that all
    ranks end with the same parameters.

    What to expect: on GPUs with NCCL, communication runs on its own stream, so with
    buckets the step is shorter than without overlap, and tiny buckets lose again to the
    per-message latency (alpha). On CPU with gloo the all-reduce competes with backward for
    the same few cores, so overlap may not help at all, and with 2 cores differences of
    10-20 % are within noise: run it twice before reading anything into it.
    A worker for ``launch``: arguments are positional, e.g.
    ``launch(ddp_bucket_benchmark, 2, [1, 25], 10, MLPSpec())``.
    """
    if not cdist._initialized():
        raise RuntimeError("ddp_bucket_benchmark needs a process group: run it with course_lib.dist.launch")
    spec = model_spec or default_mlp_spec(cdist.device().type)
    device = cdist.device()
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard of data
    X = torch.randn(spec.batch_size, spec.in_features, generator=gen).to(device)  # (B, in)
    y = torch.randn(spec.batch_size, spec.out_features, generator=gen).to(device)  # (B, out)
    device_ids = [device.index] if device.type == "cuda" else None

    def fresh(bucket_cap_mb: float):
        torch.manual_seed(0)  # the same initial weights on every rank and every variant
        model = DDP(spec.build().to(device), device_ids=device_ids, bucket_cap_mb=bucket_cap_mb)
        return model, torch.optim.SGD(model.parameters(), lr=1e-3)

    def loss_of(model):
        return torch.nn.functional.mse_loss(model(X), y)

    rows = []
    for cap in bucket_caps_mb:
        model, opt = fresh(cap)

        def step():
            opt.zero_grad(set_to_none=True)
            loss_of(model).backward()  # DDP's hooks all-reduce each full bucket during this call
            opt.step()

        t = _time_steps(step, steps, warmup, device)
        rows.append({"variant": "DDP buckets", "bucket_cap_mb": float(cap), "step_ms": t * 1e3, "overlap": True,
                     "params_in_sync": _params_in_sync(model)})

    model, opt = fresh(25.0)
    params = [p for p in model.parameters() if p.requires_grad]

    def step_no_overlap(communicate: bool = True):
        opt.zero_grad(set_to_none=True)
        with model.no_sync():  # backward without DDP's all-reduce hooks
            loss_of(model).backward()
        if communicate:
            flat = torch.cat([p.grad.reshape(-1) for p in params])  # all gradients, one buffer
            dist.all_reduce(flat)
            flat /= world_size
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
                offset += p.numel()
        opt.step()

    t = _time_steps(step_no_overlap, steps, warmup, device)
    rows.append({"variant": "one all-reduce after backward", "bucket_cap_mb": spec.param_mb, "step_ms": t * 1e3,
                 "overlap": False, "params_in_sync": _params_in_sync(model)})
    if compute_only:
        model, opt = fresh(25.0)
        params = [p for p in model.parameters() if p.requires_grad]
        t = _time_steps(lambda: step_no_overlap(communicate=False), steps, warmup, device)
        rows.append({"variant": "no communication (floor)", "bucket_cap_mb": 0.0, "step_ms": t * 1e3,
                     "overlap": None, "params_in_sync": None})  # ranks drift apart by design
    return rows


@dataclass
class BucketResult:
    """DDP bucket benchmark rows as rank 0 saw them (times are the max over ranks)."""

    rows: list[dict]
    world_size: int
    backend: str
    model_spec: MLPSpec = field(default_factory=MLPSpec)

    def table(self) -> Table:
        t = Table(["variant", "bucket_cap_mb", "step (ms)", "overlap", "params in sync"],
                  title=f"DDP step time, {self.world_size} ranks, {self.backend}, "
                        f"{self.model_spec.param_mb:.1f} MiB of gradients per step")
        for r in self.rows:
            t.add(**{"variant": r["variant"], "bucket_cap_mb": r["bucket_cap_mb"], "step (ms)": r["step_ms"],
                     "overlap": r["overlap"], "params in sync": r["params_in_sync"]})
        return t


def run_ddp_bucket_benchmark(world_size: int, bucket_caps_mb: list[float], steps: int = 10,
                             model_spec: MLPSpec | None = None, warmup: int = 2, compute_only: bool = False,
                             *, backend: str = "auto", timeout_s: float = 600.0) -> BucketResult:
    """Launch ``ddp_bucket_benchmark`` on ``world_size`` ranks from a notebook cell."""
    chosen = cdist.choose_backend(world_size, backend)
    spec = model_spec or default_mlp_spec("cuda" if chosen == "nccl" else "cpu")
    results = cdist.launch(ddp_bucket_benchmark, world_size, list(bucket_caps_mb), steps, spec, warmup,
                           compute_only, backend=chosen, timeout_s=timeout_s)
    return BucketResult(rows=results[0], world_size=world_size, backend=chosen, model_spec=spec)


# --------------------------------------------------------------------------- lesson 08: point-to-point and the course's collectives


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
        if beta <= 0:
            n = max(r["size_bytes"] for r in self.rows)
            t = float(np.median([r["one_way_s"] for r in self.rows if r["size_bytes"] == n]))
            beta = max(t - alpha, 0.01 * t) / max(n, 1)
        return alpha, beta

    def spread(self) -> dict:
        """Min, median and max over repeats of alpha (us) and of the bandwidth 1/beta (GB/s)."""
        fits = np.array(self.fits())
        alpha_us = fits[:, 0] * 1e6
        bw = np.array([1 / b / GB if b > 0 else float("inf") for b in fits[:, 1]])
        return {"alpha_us": (float(alpha_us.min()), float(np.median(alpha_us)), float(alpha_us.max())),
                "bandwidth_GBps": (float(bw.min()), float(np.median(bw)), float(bw.max())),
                "repeats": len(fits)}

    def table(self) -> Table:
        sizes = sorted({r["size_bytes"] for r in self.rows})
        t = Table(["size", "one-way min (us)", "median (us)", "max (us)"],
                  title=f"ping-pong, rank 0 <-> rank 1, {self.spread()['repeats']} repeats")
        for n in sizes:
            ts = np.array([r["one_way_s"] for r in self.rows if r["size_bytes"] == n]) * 1e6
            t.add(**{"size": _human_bytes(n), "one-way min (us)": ts.min(), "median (us)": float(np.median(ts)),
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
            row = {"size": _human_bytes(n)}
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
