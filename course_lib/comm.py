"""What communication costs: all-reduce benchmarks and the alpha-beta model (lesson 06, 08+).

Three pieces, read top to bottom:

1. **Bandwidth bookkeeping** (pure functions). An all-reduce of ``n`` bytes that takes
   ``t`` seconds has *algorithm bandwidth* ``algbw = n / t`` and *bus bandwidth*
   ``busbw = algbw * 2(p-1)/p`` on ``p`` ranks. The factor is NVIDIA nccl-tests' convention
   (``doc/PERFORMANCE.md`` in github.com/NVIDIA/nccl-tests): an optimal all-reduce must move
   ``2(p-1)/p * n`` bytes through each rank's link, so busbw is what the links actually
   carried and can be compared with the hardware's peak whatever ``p`` is. Units: bytes/s
   in the code, GB/s (1e9, as nccl-tests prints) in the tables.
2. **Benchmarks** that run on every rank under ``course_lib.dist.launch``:
   ``allreduce_benchmark`` (time per all-reduce vs message size) and
   ``ddp_bucket_benchmark`` (DDP step time vs ``bucket_cap_mb``, and without overlap).
3. **The alpha-beta(-gamma) model**: a message of ``n`` bytes costs ``alpha + n*beta``
   (latency + size / bandwidth), reducing ``n`` bytes costs ``n*gamma``. ``fit_alpha_beta``
   fits measured times; the textbook costs of the all-reduce algorithms from the seed
   talk (flat tree, binary tree, ring/pipeline, butterfly) and Rabenseifner's algorithm
   follow Thakur, Rabenseifner & Gropp (2005), "Optimization of Collective Communication
   Operations in MPICH", Int. J. High Performance Computing Applications 19(1):49-66.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from . import dist as cdist
from .tables import Table

GB = 1e9  # nccl-tests reports GB/s with GB = 1e9 bytes
MB = 2**20  # DDP's bucket_cap_mb is in MiB (bucket_cap_mb * 1024 * 1024 bytes)


# --------------------------------------------------------------------------- bandwidth bookkeeping


def algbw(n_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth in bytes/s: message size over time per operation (nccl-tests)."""
    if time_s <= 0:
        raise ValueError(f"time must be positive, got {time_s!r} s")
    return n_bytes / time_s


def allreduce_busbw_factor(world_size: int) -> float:
    """``2(p-1)/p``: bytes each rank's link carries per byte all-reduced (nccl-tests' busbw).

    ``p = 1`` gives 0: a single rank moves nothing over a bus, so its bus bandwidth is 0
    (its algbw is just a memory copy, not communication).
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    return 2 * (world_size - 1) / world_size


def busbw(algbw_bytes_per_s: float, world_size: int) -> float:
    """Bus bandwidth of an all-reduce: ``algbw * 2(p-1)/p`` (nccl-tests, doc/PERFORMANCE.md)."""
    return algbw_bytes_per_s * allreduce_busbw_factor(world_size)


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


def _timed_blocks(op, iters: int, device: torch.device, blocks: int = 5) -> tuple[float, float]:
    """Seconds per ``op()``: ``(median over blocks, mean over all iters)``, max over ranks.

    The ``iters`` calls run back to back in up to ``blocks`` blocks, each started by a
    barrier and ended by a CUDA synchronize. Each block's mean is maxed over ranks (a
    collective is done when the slowest rank is); the median over blocks shrugs off a block
    hit by another process on a shared machine (common on 2-core CI and login nodes), the
    mean over all iterations is nccl-tests' number.
    """
    blocks = max(1, min(blocks, iters))
    sizes = [iters // blocks + (1 if b < iters % blocks else 0) for b in range(blocks)]
    block_means = []
    for n in sizes:
        _sync(device)
        cdist.barrier()
        start = time.perf_counter()
        for _ in range(n):
            op()
        _sync(device)
        block_means.append((time.perf_counter() - start) / n)
    means = torch.tensor(block_means, dtype=torch.float64, device=device)
    if cdist._initialized():
        dist.all_reduce(means, op=dist.ReduceOp.MAX)
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


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


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


# --------------------------------------------------------------------------- the alpha-beta model


def fit_alpha_beta(sizes_bytes, times_s, *, robust: bool = True) -> tuple[float, float]:
    """Fit ``t = alpha + beta * n`` to measured (size, time) pairs; return ``(alpha, beta)``.

    How: a linear fit on the **relative** residuals ``r_i = (t_i - alpha - beta n_i) / t_i``,
    i.e. each point weighted by ``1 / t_i``. Why: the times span several orders of
    magnitude. A plain least-squares fit minimises absolute errors, so the largest messages
    decide everything and alpha comes out as noise (often negative); on relative errors
    every point counts the same, so the small messages (where ``t ~ alpha``) set alpha and
    the large ones (where ``t ~ beta n``) set beta -- what the log-log plot shows by eye.
    Timing noise is also roughly proportional to the time, another reason to weight so.

    ``robust=True`` (default) minimises ``sum |r_i|`` instead of ``sum r_i**2``
    (iteratively reweighted least squares, starting from the least-squares fit): on a
    shared machine a few sizes come out several times too slow (another process took the
    core), and a least-absolute fit follows the majority of points instead of bending
    towards those. On exact data both give the same answer.

    Neither parameter may be negative: if the fit gives a negative one, it is set to 0
    and the other is refitted alone. Needs at least two distinct sizes.
    """
    n = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    if n.shape != t.shape or n.ndim != 1:
        raise ValueError(f"sizes and times must be 1-D and the same length, got {n.shape} and {t.shape}")
    if len(np.unique(n)) < 2:
        raise ValueError("fit_alpha_beta needs at least two different message sizes")
    if np.any(t <= 0) or np.any(n < 0):
        raise ValueError("times must be positive and sizes non-negative")
    X = np.stack([1.0 / t, n / t], axis=1)  # row i: [1, n_i] / t_i, so X @ (alpha, beta) ~ 1
    ones = np.ones_like(t)

    def solve(w):  # weighted least squares on the relative residuals
        sw = np.sqrt(w)
        return np.linalg.lstsq(X * sw[:, None], ones * sw, rcond=None)[0]

    w = np.ones_like(t)
    coef = solve(w)
    if robust:  # IRLS for least absolute deviation: weight 1/|r|, floored so exact fits stay put
        for _ in range(50):
            r = np.abs(ones - X @ coef)
            w = 1.0 / np.maximum(r, 1e-6)
            new = solve(w)
            if np.allclose(new, coef, rtol=1e-9, atol=0):
                coef = new
                break
            coef = new
    alpha, beta = float(coef[0]), float(coef[1])
    if alpha < 0:  # latency below zero: fit the bandwidth term alone
        alpha, beta = 0.0, float(np.sum(w * X[:, 1]) / np.sum(w * X[:, 1] ** 2))
    elif beta < 0:  # time falling with size: only a latency is left to fit
        alpha, beta = float(np.sum(w * X[:, 0]) / np.sum(w * X[:, 0] ** 2)), 0.0
    return alpha, beta


def _log2_steps(p: int) -> int:
    """``ceil(log2 p)``: rounds of a binomial tree / recursive doubling on p ranks."""
    return (_check_p(p) - 1).bit_length()


def _check_p(p: int) -> int:
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
        raise ValueError(f"p (number of ranks) must be an int >= 1, got {p!r}")
    return int(p)


def _largest_power_of_two_at_most(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def flat_tree_allreduce_time(n_bytes: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Flat tree: every rank sends to the root, the root reduces, then sends the result back.

    The root handles ``p-1`` full messages one after the other, twice::

        T = 2(p-1) alpha + 2(p-1) n beta + (p-1) n gamma

    Latency and bandwidth both grow linearly with ``p``: fine for a handful of ranks only.
    """
    p = _check_p(p)
    return 2 * (p - 1) * (alpha + n_bytes * beta) + (p - 1) * n_bytes * gamma


def binary_tree_allreduce_time(n_bytes: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Binomial tree reduce to a root, then binomial tree broadcast (Thakur et al. 2005, sec. 4).

    ``ceil(log2 p)`` rounds each way, each moving the full message::

        T = 2 ceil(log2 p) (alpha + n beta) + ceil(log2 p) n gamma

    Latency grows only with the tree depth, but every round carries all ``n`` bytes.
    """
    steps = _log2_steps(p)
    return 2 * steps * (alpha + n_bytes * beta) + steps * n_bytes * gamma


def ring_allreduce_time(n_bytes: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Ring / pipeline: reduce-scatter then all-gather, ``2(p-1)`` steps of ``n/p`` bytes each.

    ::

        T = 2(p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma

    The bandwidth term tends to ``2 n beta`` however many ranks there are (bandwidth-optimal),
    but the latency term grows with ``p`` -- the seed talk's "scales with twice the number of
    nodes". Used by Baidu's ring all-reduce and by NCCL for large messages.
    """
    p = _check_p(p)
    frac = (p - 1) / p
    return 2 * (p - 1) * alpha + 2 * frac * n_bytes * beta + frac * n_bytes * gamma


def _non_power_of_two_extra(n_bytes: float, p: int, alpha: float, beta: float, gamma: float) -> float:
    """MPICH's fix for p not a power of two (Thakur et al. 2005, sec. 4.4): the ``p - p'``
    extra ranks first hand their data to a partner (one step with a reduction) and get the
    result back at the end (one more step); the other ``p'`` ranks run the algorithm."""
    if p == _largest_power_of_two_at_most(p):
        return 0.0
    return 2 * alpha + 2 * n_bytes * beta + n_bytes * gamma


def butterfly_allreduce_time(n_bytes: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Butterfly / recursive doubling: in round k each rank swaps its full vector with the rank
    ``2**k`` away and reduces, so after ``log2 p`` rounds everyone has the sum::

        T = log2(p) (alpha + n beta + n gamma)            (p a power of two)

    Fewest latency terms of all (best for small messages), but every round sends all ``n``
    bytes. For other ``p``, ``log2 p'`` rounds on the largest power of two ``p' < p`` plus
    two extra steps (see ``_non_power_of_two_extra``).
    """
    p = _check_p(p)
    steps = int(math.log2(_largest_power_of_two_at_most(p)))
    return (steps * (alpha + n_bytes * beta + n_bytes * gamma)
            + _non_power_of_two_extra(n_bytes, p, alpha, beta, gamma))


def rabenseifner_allreduce_time(n_bytes: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Rabenseifner: reduce-scatter by recursive halving, then all-gather by recursive doubling::

        T = 2 log2(p) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma   (p a power of two)

    The ring's bandwidth term with the butterfly's (doubled) latency term: MPICH's choice
    for long messages (Thakur et al. 2005, sec. 4.4). Non-powers of two as for the butterfly.
    """
    p = _check_p(p)
    q = _largest_power_of_two_at_most(p)
    frac = (q - 1) / q
    return (2 * math.log2(q) * alpha + 2 * frac * n_bytes * beta + frac * n_bytes * gamma
            + _non_power_of_two_extra(n_bytes, p, alpha, beta, gamma))


ALLREDUCE_ALGORITHMS = {
    "flat tree": flat_tree_allreduce_time,
    "binary tree": binary_tree_allreduce_time,
    "ring": ring_allreduce_time,
    "butterfly": butterfly_allreduce_time,
    "rabenseifner": rabenseifner_allreduce_time,
}


def predict_times(sizes_bytes, p: int, alpha: float, beta: float, gamma: float = 0.0) -> dict[str, np.ndarray]:
    """Predicted all-reduce time (s) of every algorithm in ``ALLREDUCE_ALGORITHMS`` per size."""
    return {name: np.array([f(float(n), p, alpha, beta, gamma) for n in sizes_bytes])
            for name, f in ALLREDUCE_ALGORITHMS.items()}


def best_algorithm(n_bytes: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> str:
    """Name of the cheapest algorithm for this message size and rank count under the model."""
    return min(ALLREDUCE_ALGORITHMS, key=lambda k: ALLREDUCE_ALGORITHMS[k](n_bytes, p, alpha, beta, gamma))


def link_alpha_beta_from_ring_fit(alpha_fit: float, beta_fit: float, p: int) -> tuple[float, float]:
    """Per-message ``(alpha, beta)`` of one link, assuming the measured all-reduce was a ring.

    A fit of the library's all-reduce gives ``t = A + B n`` for the whole collective, not for
    one message. If the library ran a ring, ``A = 2(p-1) alpha`` and ``B = 2(p-1)/p beta``;
    inverting that lets the other algorithms be predicted for the same links (the ring's
    curve then lies on the fit by construction). The assumption is ours: NCCL switches
    between ring and tree by size and topology, gloo has ring and halving-doubling variants.
    """
    p = _check_p(p)
    if p == 1:
        raise ValueError("with p = 1 an all-reduce sends no messages, so the fit says nothing about links")
    return alpha_fit / (2 * (p - 1)), beta_fit * p / (2 * (p - 1))


def predict_table(sizes_bytes, p: int, alpha: float, beta: float, gamma: float = 0.0,
                  measured_s=None, fitted: tuple[float, float] | None = None) -> Table:
    """Model vs measurement per message size, in microseconds.

    ``alpha, beta`` are per-message (link) parameters for the algorithm formulas;
    ``fitted`` is the ``(A, B)`` fit of the measured collective, shown as its own column;
    ``measured_s`` the measured times. The last column names the model's cheapest algorithm.
    """
    preds = predict_times(sizes_bytes, p, alpha, beta, gamma)
    cols = ["size"] + (["measured (us)"] if measured_s is not None else []) \
        + (["fit (us)"] if fitted is not None else []) + [f"{k} (us)" for k in preds] + ["cheapest"]
    t = Table(cols, title=f"all-reduce time, p = {p}: alpha = {alpha * 1e6:.3g} us, "
                          f"beta = {beta * GB:.3g} s/GB per link, gamma = {gamma * GB:.3g} s/GB")
    for i, n in enumerate(sizes_bytes):
        row = {"size": _human_bytes(float(n)), "cheapest": best_algorithm(float(n), p, alpha, beta, gamma)}
        if measured_s is not None:
            row["measured (us)"] = float(measured_s[i]) * 1e6
        if fitted is not None:
            row["fit (us)"] = (fitted[0] + fitted[1] * float(n)) * 1e6
        row.update({f"{k} (us)": float(v[i]) * 1e6 for k, v in preds.items()})
        t.add(**row)
    return t


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
    from torch.nn.parallel import DistributedDataParallel as DDP

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
