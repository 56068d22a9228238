"""The cost model of communication: bandwidth bookkeeping and the alpha-beta(-gamma) model (lessons 06, 08, 09).

Pure functions of sizes, rank counts and link parameters: nothing here touches a process
group, so a performance model (lesson 09) can build on it and tests check it by hand.

1. **Bandwidth bookkeeping.** An all-reduce of ``n`` bytes that takes ``t`` seconds has
   *algorithm bandwidth* ``algbw = n / t`` and *bus bandwidth* ``busbw = algbw * 2(p-1)/p``
   on ``p`` ranks. The factor is NVIDIA nccl-tests' convention (``doc/PERFORMANCE.md`` in
   github.com/NVIDIA/nccl-tests): an optimal all-reduce must move ``2(p-1)/p * n`` bytes
   through each rank's link, so busbw is what the links actually carried and can be
   compared with the hardware's peak whatever ``p`` is. Units: bytes/s in the code, GB/s
   (1e9, as nccl-tests prints) in the tables.
2. **The alpha-beta(-gamma) model**: a message of ``n`` bytes costs ``alpha + n*beta``
   (latency + size / bandwidth), reducing ``n`` bytes costs ``n*gamma``. ``fit_alpha_beta``
   fits measured times; the textbook costs of the all-reduce algorithms from the seed
   talk (flat tree, binary tree, ring/pipeline, butterfly) and Rabenseifner's algorithm
   follow Thakur, Rabenseifner & Gropp (2005), "Optimization of Collective Communication
   Operations in MPICH", Int. J. High Performance Computing Applications 19(1):49-66.
"""

from __future__ import annotations

import math

import numpy as np

from ..tables import Table

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


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


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
    # A term below the fit's own resolution (the 1e-6 relative floor above) is rounding, not a measurement: on
    # flat times one machine's lstsq gave beta = 0.0 and CI's gave 1.4e-24 s/B (1/beta = 7e14 GB/s). Treat it as
    # unresolved, like a negative one, so every machine reports the same fit for the same data.
    if 0 < beta and beta * n.max() < 1e-6 * t.max():
        beta = -1.0
    if alpha < 0:  # latency below zero: fit the bandwidth term alone
        alpha, beta = 0.0, float(np.sum(w * X[:, 1]) / np.sum(w * X[:, 1] ** 2))
    elif beta < 0:  # time falling with size (or no resolved bandwidth term): only a latency is left to fit
        alpha, beta = float(np.sum(w * X[:, 0]) / np.sum(w * X[:, 0] ** 2)), 0.0
    return alpha, beta


def fit_text(alpha: float, beta: float) -> str:
    """``t = alpha + n beta`` in words: ``"12.3 us + n / 4.56 GB/s"``.

    A fit may have no bandwidth term (``beta == 0``, see :func:`fit_alpha_beta`): when every
    size measured was dominated by latency, or on a fast machine where the largest message
    still took no longer than the smallest. The text says so instead of dividing by zero
    (lesson 09's smoke sizes on a fast 2-core EPYC can give beta = 0).
    """
    if beta > 0:
        return f"{alpha * 1e6:.1f} us + n / {1 / beta / GB:{'.2f' if 1 / beta >= GB else '.3g'}} GB/s"
    return f"{alpha * 1e6:.1f} us, no bandwidth term resolved (every size measured took about the latency)"


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


# --------------------------------------------------------------------------- broadcast, the ring's halves (lesson 08)


def flat_tree_broadcast_time(n_bytes: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """The root sends all ``n`` bytes to each of the ``p-1`` others in turn: ``(p-1)(alpha + n beta)``."""
    return (_check_p(p) - 1) * (alpha + n_bytes * beta)


def binomial_tree_broadcast_time(n_bytes: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """The holders double every round: ``ceil(log2 p)(alpha + n beta)``. Latency grows with the
    depth only, but every round moves the whole message (the seed talk's tree)."""
    return _log2_steps(p) * (alpha + n_bytes * beta)


def pipelined_broadcast_time(n_bytes: float, p: int, alpha: float, beta: float, gamma: float = 0.0,
                             segments: int | None = None) -> float:
    """A chain, the message cut into ``k`` segments that follow each other::

        T = (p - 1 + k - 1) (alpha + n/k beta)

    ``k = 1`` is a plain chain, ``(p-1)(alpha + n beta)``; as ``k`` grows the bandwidth term
    falls to ``n beta`` (independent of ``p``) while the latency term grows. ``segments=None``
    takes ``optimal_segments``.
    """
    p = _check_p(p)
    if p == 1:
        return 0.0
    k = optimal_segments(n_bytes, p, alpha, beta) if segments is None else int(segments)
    if k < 1:
        raise ValueError(f"segments must be >= 1, got {segments!r}")
    return (p - 1 + k - 1) * (alpha + n_bytes / k * beta)


def optimal_segments(n_bytes: float, p: int, alpha: float, beta: float) -> int:
    """The ``k`` that minimises ``pipelined_broadcast_time``: ``sqrt(n beta (p-2) / alpha)``,
    rounded to the better neighbouring integer, at least 1 (``p <= 2`` or ``alpha = 0``: 1 / many)."""
    p = _check_p(p)
    if p <= 2 or n_bytes <= 0:
        return 1
    if alpha <= 0:
        return max(1, int(n_bytes))
    k = math.sqrt(n_bytes * beta * (p - 2) / alpha)
    candidates = {max(1, math.floor(k)), max(1, math.ceil(k))}
    return min(candidates, key=lambda c: pipelined_broadcast_time(n_bytes, p, alpha, beta, segments=c))


def ring_reduce_scatter_time(n_bytes: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """``p-1`` steps of ``n/p`` bytes, each added on arrival: ``(p-1)(alpha + n/p (beta + gamma))``."""
    p = _check_p(p)
    return (p - 1) * alpha + (p - 1) / p * n_bytes * (beta + gamma)


def ring_all_gather_time(n_bytes: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """``p-1`` steps of ``n/p`` bytes (``n`` is the size of the gathered tensor): ``(p-1)(alpha + n/p beta)``."""
    p = _check_p(p)
    return (p - 1) * alpha + (p - 1) / p * n_bytes * beta


BROADCAST_ALGORITHMS = {
    "flat tree": flat_tree_broadcast_time,
    "binomial tree": binomial_tree_broadcast_time,
    "pipelined chain": pipelined_broadcast_time,
}


def schedule_time(schedule, alpha: float, beta: float, gamma: float = 0.0, element_size: int = 4) -> float:
    """The alpha-beta(-gamma) price of a :class:`course_lib.comm.collectives.Schedule`, round by round.

    A round lasts as long as its busiest rank: ``alpha`` per message that rank sends (or
    receives, whichever is more), ``beta`` per byte through its link in the busier direction,
    ``gamma`` per byte it adds. Rounds follow each other. For the course's schedules this
    gives back the closed forms above (the tests check it), so the formulas are the count of
    what the code sends.
    """
    total = 0.0
    for rnd in schedule.rounds:
        sent_msgs, recv_msgs, sent, recv, added = {}, {}, {}, {}, {}
        for t in rnd:
            b = t.count * element_size
            sent_msgs[t.src] = sent_msgs.get(t.src, 0) + 1
            recv_msgs[t.dst] = recv_msgs.get(t.dst, 0) + 1
            sent[t.src] = sent.get(t.src, 0) + b
            recv[t.dst] = recv.get(t.dst, 0) + b
            if t.reduce:
                added[t.dst] = added.get(t.dst, 0) + b
        ranks = set(sent) | set(recv)
        total += max(alpha * max(sent_msgs.get(r, 0), recv_msgs.get(r, 0))
                     + beta * max(sent.get(r, 0), recv.get(r, 0)) + gamma * added.get(r, 0) for r in ranks)
    return total


def crossover_size(cost_a, cost_b, p: int, alpha: float, beta: float, gamma: float = 0.0,
                   lo: float = 1.0, hi: float = 2.0**40) -> float | None:
    """The message size (bytes) above which ``cost_b`` becomes cheaper than ``cost_a``, or None.

    ``cost_a`` must be the cheaper one at ``lo`` (typically the latency-optimal algorithm) and
    ``cost_b`` at ``hi``; found by bisection on a log scale (the costs are linear in ``n``, so
    they cross at most once).
    """
    def diff(n):
        return cost_a(n, p, alpha, beta, gamma) - cost_b(n, p, alpha, beta, gamma)

    if diff(lo) >= 0 or diff(hi) <= 0:
        return None
    a, b = math.log(lo), math.log(hi)
    for _ in range(200):
        m = (a + b) / 2
        if diff(math.exp(m)) < 0:
            a = m
        else:
            b = m
    return math.exp((a + b) / 2)


# Quoted, not measured: per-step latency and per-direction bandwidth of two interconnects, for
# extrapolating lesson 08's costs. Bandwidths: NVIDIA's H100 SXM5 datasheet (NVLink 4: 900 GB/s
# per GPU, both directions together, through NVSwitch within a DGX/HGX H100 node) and NVIDIA's
# ConnectX-7 user manual (InfiniBand NDR: 400 Gb/s per port = 50 GB/s each way). Latencies: NCCL's
# own tuning model, github.com/NVIDIA/nccl src/graph/tuning.cc (hwLat, ring algorithm, Simple
# protocol -- the bandwidth-optimal one -- per hop: NVLink 5.7 us, network 6.6 us, in one NCCL 2.x
# release; the table changes between releases); real latencies depend on the protocol (NCCL's LL protocol: under 1 us
# per hop
# at half the bandwidth), the message size and the topology.
QUOTED_INTERCONNECTS = {
    "NVLink 4 via NVSwitch (H100 node)": {"alpha_s": 5.7e-6, "bandwidth_Bps": 450e9,
                                          "source": "H100 SXM5 datasheet (900 GB/s bidirectional); "
                                                    "NCCL tuning.cc hwLat NVLink ring/Simple 5.7 us"},
    "InfiniBand NDR 400 Gb/s (between nodes)": {"alpha_s": 6.6e-6, "bandwidth_Bps": 50e9,
                                                "source": "ConnectX-7 user manual (NDR 400 Gb/s per port); "
                                                          "NCCL tuning.cc hwLat network ring/Simple 6.6 us"},
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
        row = {"size": human_bytes(float(n)), "cheapest": best_algorithm(float(n), p, alpha, beta, gamma)}
        if measured_s is not None:
            row["measured (us)"] = float(measured_s[i]) * 1e6
        if fitted is not None:
            row["fit (us)"] = (fitted[0] + fitted[1] * float(n)) * 1e6
        row.update({f"{k} (us)": float(v[i]) * 1e6 for k, v in preds.items()})
        t.add(**row)
    return t


# The all-reduce algorithms of the course and their cost formula (lesson 08's predictions, the explorer widget).
ALLREDUCE_MODELS = {"ring": ring_allreduce_time, "recursive doubling": butterfly_allreduce_time,
                    "tree": binary_tree_allreduce_time}
