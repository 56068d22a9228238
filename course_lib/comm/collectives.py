"""Collectives built from point-to-point messages: trees, a chain, a ring, a butterfly (lesson 08).

Every algorithm here is written twice over, on purpose, as one thing:

1. a **schedule**: a pure function of the number of ranks ``p``, the tensor length ``n``
   and the root, that lists the rounds of the algorithm, and in each round who sends which
   elements ``[lo, hi)`` to whom, and whether the receiver adds them (a reduction) or
   overwrites its copy. Schedules touch no process group: tests replay them on lists of
   numbers for many ``p``, the figures of lesson 08 draw them step by step, and
   :func:`schedule_time` prices them with the alpha-beta model of :mod:`.cost`;
2. **one executor**, :func:`run_schedule`, that carries a schedule out on this rank with
   ``torch.distributed.isend`` / ``irecv`` only: in each round it posts its receives and
   sends together, waits for them, then applies what it received.

So the figure a learner sees is the message pattern the code sends. The public functions
have ``torch.distributed``'s shape: they work **in place**, sum, on any contiguous tensor of
any length (shorter than ``p`` or not divisible by it too), on a ``group`` or the default
one, for any ``p >= 1``.

Rooted: ``flat_tree_broadcast``, ``binomial_tree_broadcast``, ``pipelined_broadcast``.
Rootless: ``ring_reduce_scatter``, ``ring_all_gather``, ``ring_allreduce`` (the two in
sequence), ``recursive_doubling_allreduce`` (butterfly; ranks beyond the largest power of two
fold in first and get the result back last, as MPICH does), ``tree_allreduce`` (binomial
reduce to rank 0, then binomial broadcast). References: Thakur, Rabenseifner & Gropp (2005),
"Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1):49-66; the
seed talk on scaling (NERSC Deep Learning for Science School 2019).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .. import dist as cdist
from . import cost

DEFAULT_SEGMENTS = 8  # pipelined broadcast: pieces the message is cut into (see cost.optimal_segments)


# --------------------------------------------------------------------------- schedules (pure)


@dataclass(frozen=True)
class Transfer:
    """One message: ``src`` sends its elements ``[lo, hi)`` to ``dst``, which adds them
    (``reduce=True``) or overwrites its own ``[lo, hi)`` with them."""

    src: int
    dst: int
    lo: int
    hi: int
    reduce: bool = False

    @property
    def count(self) -> int:
        return self.hi - self.lo


@dataclass(frozen=True)
class Schedule:
    """An algorithm as rounds of transfers, for ``p`` ranks and a tensor of ``n`` elements."""

    name: str
    p: int
    n: int
    rounds: tuple[tuple[Transfer, ...], ...]
    root: int | None = None

    @property
    def messages(self) -> int:
        return sum(len(r) for r in self.rounds)

    def elements_sent_by(self, rank: int) -> int:
        return sum(t.count for r in self.rounds for t in r if t.src == rank)

    def replay(self, values: list[list]) -> list[list]:
        """Carry the schedule out on plain lists (one per rank), as the executor does: within
        a round every message carries what its sender held *before* the round."""
        state = [list(v) for v in values]
        if len(state) != self.p or any(len(v) != self.n for v in state):
            raise ValueError(f"replay needs {self.p} lists of {self.n} values")
        for rnd in self.rounds:
            sent = [(t, state[t.src][t.lo:t.hi]) for t in rnd]
            for t, payload in sent:
                if t.reduce:
                    state[t.dst][t.lo:t.hi] = [a + b for a, b in zip(state[t.dst][t.lo:t.hi], payload)]
                else:
                    state[t.dst][t.lo:t.hi] = payload
        return state


def _check_p_root(p: int, root: int | None = None) -> None:
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"the number of ranks must be an int >= 1, got {p!r}")
    if root is not None and (isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < p):
        raise ValueError(f"src must be a rank in 0..{p - 1}, got {root!r}")


def chunk_bounds(n: int, p: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` of the ``p`` chunks of ``n`` elements: sizes differ by at most one, the
    first ``n % p`` chunks one longer (``torch.tensor_split``'s rule); empty when ``n < p``."""
    base, extra = divmod(n, p)
    bounds, lo = [], 0
    for i in range(p):
        hi = lo + base + (1 if i < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def _segments(n: int, k: int) -> list[tuple[int, int]]:
    return [b for b in chunk_bounds(n, max(1, min(k, n))) if b[1] > b[0]]


def flat_tree_broadcast_schedule(p: int, n: int, src: int = 0) -> Schedule:
    """The root sends the whole tensor to every other rank, one after the other: ``p - 1`` rounds."""
    _check_p_root(p, src)
    rounds = tuple((Transfer(src, (src + i) % p, 0, n),) for i in range(1, p)) if n else ()
    return Schedule("flat tree broadcast", p, n, rounds, src)


def binomial_tree_broadcast_schedule(p: int, n: int, src: int = 0) -> Schedule:
    """Binomial tree: in round ``k`` every rank that has the data sends it ``2**(K-1-k)`` ranks
    further (relative to the root), so the number of holders doubles: ``ceil(log2 p)`` rounds."""
    _check_p_root(p, src)
    steps = (p - 1).bit_length()
    rounds = []
    for k in range(steps):
        dist_k = 1 << (steps - 1 - k)  # the farthest hop first (MPICH's order)
        rnd = tuple(Transfer((v + src) % p, (v + dist_k + src) % p, 0, n)
                    for v in range(0, p, 2 * dist_k) if v + dist_k < p)
        rounds.append(rnd)
    return Schedule("binomial tree broadcast", p, n, tuple(rounds) if n else (), src)


def pipelined_broadcast_schedule(p: int, n: int, src: int = 0, segments: int = DEFAULT_SEGMENTS) -> Schedule:
    """A chain ``src -> src+1 -> ... `` with the message cut into ``segments`` pieces: in round
    ``t`` the ``i``-th rank of the chain forwards piece ``t - i``. ``p - 1 + k - 1`` rounds of
    ``n / k`` elements (``k`` pieces; fewer when ``n < segments``)."""
    _check_p_root(p, src)
    if isinstance(segments, bool) or not isinstance(segments, int) or segments < 1:
        raise ValueError(f"segments must be an int >= 1, got {segments!r}")
    pieces = _segments(n, segments)
    k = len(pieces)
    rounds = []
    for t in range(p - 1 + k - 1 if p > 1 and k else 0):
        rnd = []
        for i in range(p - 1):  # chain position i sends to position i + 1
            s = t - i
            if 0 <= s < k:
                lo, hi = pieces[s]
                rnd.append(Transfer((src + i) % p, (src + i + 1) % p, lo, hi))
        rounds.append(tuple(rnd))
    return Schedule(f"pipelined broadcast ({k} segments)", p, n, tuple(rounds), src)


def _ring_rounds(p: int, n: int, offset: int, reduce: bool) -> tuple[tuple[Transfer, ...], ...]:
    """``p - 1`` rounds in which rank ``r`` sends chunk ``(r - s - offset) % p`` to ``r + 1`` in round
    ``s``; empty chunks (``n < p``) are no message, and rounds left empty are dropped."""
    _check_p_root(p)
    bounds = chunk_bounds(n, p)
    rounds = []
    for s in range(p - 1):
        sent = [(r, bounds[(r - s - offset) % p]) for r in range(p)]
        rnd = tuple(Transfer(r, (r + 1) % p, lo, hi, reduce=reduce) for r, (lo, hi) in sent if hi > lo)
        if rnd:
            rounds.append(rnd)
    return tuple(rounds)


def ring_reduce_scatter_schedule(p: int, n: int) -> Schedule:
    """``p - 1`` rounds: in round ``s`` rank ``r`` sends chunk ``(r - s - 1) % p`` to ``r + 1``,
    which adds it to its own. Afterwards rank ``r`` holds the full sum of chunk ``r``."""
    return Schedule("ring reduce-scatter", p, n, _ring_rounds(p, n, 1, reduce=True))


def ring_all_gather_schedule(p: int, n: int) -> Schedule:
    """``p - 1`` rounds: rank ``r`` starts with chunk ``r`` and in round ``s`` passes chunk
    ``(r - s) % p`` to ``r + 1``. Afterwards every rank holds every chunk."""
    return Schedule("ring all-gather", p, n, _ring_rounds(p, n, 0, reduce=False))


def ring_allreduce_schedule(p: int, n: int) -> Schedule:
    """Reduce-scatter, then all-gather: ``2(p - 1)`` rounds of ``n / p`` elements."""
    rs, ag = ring_reduce_scatter_schedule(p, n), ring_all_gather_schedule(p, n)
    return Schedule("ring all-reduce", p, n, rs.rounds + ag.rounds)


def _largest_power_of_two_at_most(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def recursive_doubling_allreduce_schedule(p: int, n: int) -> Schedule:
    """Butterfly: ranks swap their whole vector with the rank ``2**k`` away and add.

    For ``p`` not a power of two (MPICH): with ``q`` the largest power of two below ``p`` and
    ``e = p - q`` extra ranks, first each even rank ``2i < 2e`` hands its vector to ``2i + 1``
    (which adds it), leaving ``q`` active ranks; those run ``log2 q`` exchange rounds; last,
    each ``2i + 1`` sends the result back to ``2i``. ``log2 q`` rounds, plus 2 when ``e > 0``.
    """
    _check_p_root(p)
    if n == 0 or p == 1:
        return Schedule("recursive doubling all-reduce", p, n, ())
    q = _largest_power_of_two_at_most(p)
    e = p - q
    # active ranks get new numbers 0..q-1: the odd ranks below 2e, then every rank from 2e on
    real = [2 * i + 1 for i in range(e)] + list(range(2 * e, p))
    rounds = []
    if e:
        rounds.append(tuple(Transfer(2 * i, 2 * i + 1, 0, n, reduce=True) for i in range(e)))
    mask = 1
    while mask < q:
        rounds.append(tuple(Transfer(real[v], real[v ^ mask], 0, n, reduce=True) for v in range(q)))
        mask <<= 1
    if e:
        rounds.append(tuple(Transfer(2 * i + 1, 2 * i, 0, n) for i in range(e)))
    return Schedule("recursive doubling all-reduce", p, n, tuple(rounds))


def binomial_tree_reduce_schedule(p: int, n: int, root: int = 0) -> Schedule:
    """The broadcast tree run backwards: leaves first, each rank adds what its children sent
    and passes the sum to its parent; the root ends with the total. ``ceil(log2 p)`` rounds."""
    bcast = binomial_tree_broadcast_schedule(p, n, root)
    rounds = tuple(tuple(Transfer(t.dst, t.src, t.lo, t.hi, reduce=True) for t in rnd)
                   for rnd in reversed(bcast.rounds))
    return Schedule("binomial tree reduce", p, n, rounds, root)


def tree_allreduce_schedule(p: int, n: int) -> Schedule:
    """Binomial reduce to rank 0, then binomial broadcast from it: ``2 ceil(log2 p)`` rounds."""
    red, bc = binomial_tree_reduce_schedule(p, n, 0), binomial_tree_broadcast_schedule(p, n, 0)
    return Schedule("tree all-reduce", p, n, red.rounds + bc.rounds)


# --------------------------------------------------------------------------- the executor


def _check_tensor(tensor) -> torch.Tensor:
    if not torch.is_tensor(tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise ValueError("the tensor must be contiguous: these collectives send slices of its memory "
                         "in place (call .contiguous() first and copy the result back)")
    if tensor.dtype == torch.bool or tensor.is_complex():
        raise TypeError(f"sum is defined here for real numbers; got dtype {tensor.dtype}")
    return tensor.view(-1)


def _group_rank_size(group) -> tuple[int, int]:
    if not cdist.is_initialized():
        return 0, 1  # a process alone: every collective is a no-op, as torch's would be on one rank
    return dist.get_rank(group), dist.get_world_size(group)


def _global(group, r: int) -> int:
    return r if group is None else dist.get_global_rank(group, r)


PIECE_BYTES = 2**20  # the executor cuts longer messages into pieces of at most this many bytes


def _pieces(lo: int, hi: int, per_piece: int) -> list[tuple[int, int]]:
    return [(a, min(a + per_piece, hi)) for a in range(lo, hi, per_piece)]


def _land(target: torch.Tensor, landing: torch.Tensor, reduce: bool, staged: bool) -> None:
    if reduce:
        target.add_(landing)
    elif staged:
        target.copy_(landing)


def run_schedule(schedule: Schedule, tensor: torch.Tensor, group=None, piece_bytes: int = PIECE_BYTES) -> torch.Tensor:
    """Carry ``schedule`` out on this rank's ``tensor`` (in place) with isend/irecv only.

    Each round: post this rank's receives (into a staging buffer when it will add, straight
    into its slice when it overwrites) and sends, as one ``dist.batch_isend_irecv``, wait for
    them, adding what came in. A
    sender's slice is never written during its own round, so every message carries what its
    sender held before the round -- the rule :meth:`Schedule.replay` follows.

    Transport detail (not part of the algorithm): a message longer than ``piece_bytes`` goes
    as several pieces posted at once, and each received piece is added as soon as it lands,
    while the next ones are still on the way. Measured with gloo on a 2-core machine, one
    8 MiB exchange took about twice as long as the same bytes in 1 MiB pieces.
    """
    flat = _check_tensor(tensor)
    rank, p = _group_rank_size(group)
    if schedule.p != p or schedule.n != flat.numel():
        raise ValueError(f"schedule is for {schedule.p} ranks x {schedule.n} elements; this is rank {rank} of "
                         f"{p} with {flat.numel()} elements")
    per_piece = max(1, piece_bytes // flat.element_size())
    # One staging buffer for the whole call, reused round after round: a fresh one per round
    # costs page faults every time (measured on the 2-core development machine, the ring at
    # 16 MiB went from ~0.6 to ~0.9 of gloo's own all-reduce with it). Sized for every receive of
    # the busiest round, an upper bound: pages that are never touched cost nothing.
    need = max((sum(t.count for t in rnd if t.dst == rank) for rnd in schedule.rounds), default=0)
    workspace = torch.empty(need, dtype=flat.dtype, device=flat.device)
    for rnd in schedule.rounds:
        ops, landed = _round_ops(rnd, rank, flat, workspace, per_piece, group)
        if not ops:
            continue  # this rank sits the round out
        # One batch per round: gloo posts the operations one by one; NCCL must group them, or two
        # ranks that each first receive from the other would wait on each other forever.
        _wait_and_land(dist.batch_isend_irecv(ops), ops, landed)
    return tensor


def _round_ops(rnd, rank, flat, workspace, per_piece, group):
    """This rank's P2P operations for one round (receives first, then sends) and where each receive lands."""
    ops, landed = [], []
    sending = [(t.lo, t.hi) for t in rnd if t.src == rank]
    used = 0
    for t in rnd:
        if t.dst == rank:
            overlaps = any(lo < t.hi and t.lo < hi for lo, hi in sending)
            staged = t.reduce or overlaps  # never write a slice this rank is still sending
            buf = workspace[used:used + t.count] if staged else None
            used += t.count if staged else 0
            for tag, (lo, hi) in enumerate(_pieces(t.lo, t.hi, per_piece)):
                target = flat[lo:hi]
                landing = buf[lo - t.lo:hi - t.lo] if staged else target
                ops.append(dist.P2POp(dist.irecv, landing, _global(group, t.src), group, tag))
                landed.append((target, landing, t.reduce, staged))
    for t in rnd:
        if t.src == rank:
            for tag, (lo, hi) in enumerate(_pieces(t.lo, t.hi, per_piece)):
                ops.append(dist.P2POp(dist.isend, flat[lo:hi], _global(group, t.dst), group, tag))
    return ops, landed


def _wait_and_land(works, ops, landed):
    """Wait for one round's operations, adding (or copying) each received piece into place."""
    if len(works) == len(ops):  # one handle per operation: add each piece as soon as it lands
        for work, (target, landing, reduce, staged) in zip(works, landed):
            work.wait()
            _land(target, landing, reduce, staged)
        for work in works[len(landed):]:
            work.wait()
    else:  # coalesced into one handle (NCCL)
        for work in works:
            work.wait()
        for target, landing, reduce, staged in landed:
            _land(target, landing, reduce, staged)


def _rooted(make, tensor, src, group, **kw):
    flat = _check_tensor(tensor)
    _, p = _group_rank_size(group)
    return run_schedule(make(p, flat.numel(), src, **kw), tensor, group)


def _rootless(make, tensor, group):
    flat = _check_tensor(tensor)
    _, p = _group_rank_size(group)
    return run_schedule(make(p, flat.numel()), tensor, group)


def flat_tree_broadcast(tensor: torch.Tensor, src: int = 0, group=None) -> torch.Tensor:
    """Broadcast ``tensor`` from ``src`` (a rank of ``group``) by sending it to each rank in turn."""
    return _rooted(flat_tree_broadcast_schedule, tensor, src, group)


def binomial_tree_broadcast(tensor: torch.Tensor, src: int = 0, group=None) -> torch.Tensor:
    """Broadcast ``tensor`` from ``src`` along a binomial tree: ``ceil(log2 p)`` rounds."""
    return _rooted(binomial_tree_broadcast_schedule, tensor, src, group)


def pipelined_broadcast(tensor: torch.Tensor, src: int = 0, segments: int = DEFAULT_SEGMENTS,
                        group=None) -> torch.Tensor:
    """Broadcast ``tensor`` from ``src`` down a chain, cut into ``segments`` pieces that flow
    one behind the other (``cost.optimal_segments`` says how many pay off)."""
    return _rooted(pipelined_broadcast_schedule, tensor, src, group, segments=segments)


def ring_reduce_scatter(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sum over the ranks, scattered: afterwards chunk ``r`` of ``tensor`` (``chunk_bounds``)
    holds the full sum on rank ``r``; the other chunks hold partial sums. Returns that chunk."""
    rank, p = _group_rank_size(group)
    _rootless(ring_reduce_scatter_schedule, tensor, group)
    lo, hi = chunk_bounds(tensor.numel(), p)[rank]
    return tensor.view(-1)[lo:hi]


def ring_all_gather(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Rank ``r`` contributes chunk ``r`` of ``tensor``; afterwards every rank holds every chunk."""
    return _rootless(ring_all_gather_schedule, tensor, group)


def ring_allreduce(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sum ``tensor`` over the ranks in place: ``ring_reduce_scatter`` then ``ring_all_gather``."""
    ring_reduce_scatter(tensor, group)
    return ring_all_gather(tensor, group)


def recursive_doubling_allreduce(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sum ``tensor`` over the ranks in place with the butterfly (any ``p``: extra ranks fold in)."""
    return _rootless(recursive_doubling_allreduce_schedule, tensor, group)


def tree_allreduce(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sum ``tensor`` over the ranks in place: binomial reduce to rank 0, then binomial broadcast."""
    return _rootless(tree_allreduce_schedule, tensor, group)


BROADCASTS = {
    "flat tree": flat_tree_broadcast,
    "binomial tree": binomial_tree_broadcast,
    "pipelined chain": pipelined_broadcast,
}
ALLREDUCES = {
    "ring": ring_allreduce,
    "recursive doubling": recursive_doubling_allreduce,
    "tree": tree_allreduce,
}
# The alpha-beta(-gamma) formula of each algorithm above (cost.py); tests check they price the schedules.
COSTS = {
    "ring": cost.ring_allreduce_time,
    "recursive doubling": cost.butterfly_allreduce_time,
    "tree": cost.binary_tree_allreduce_time,
    "flat tree": cost.flat_tree_broadcast_time,
    "binomial tree": cost.binomial_tree_broadcast_time,
    "pipelined chain": cost.pipelined_broadcast_time,
}
SCHEDULES = {
    "flat tree broadcast": flat_tree_broadcast_schedule,
    "binomial tree broadcast": binomial_tree_broadcast_schedule,
    "pipelined broadcast": pipelined_broadcast_schedule,
    "ring reduce-scatter": ring_reduce_scatter_schedule,
    "ring all-gather": ring_all_gather_schedule,
    "ring all-reduce": ring_allreduce_schedule,
    "recursive doubling all-reduce": recursive_doubling_allreduce_schedule,
    "tree all-reduce": tree_allreduce_schedule,
}


# --------------------------------------------------------------------------- equality with torch.distributed


def _values(rank: int, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Small integers, different on every rank: their sums are exact in every dtype (bf16 too),
    so the algorithms must match torch.distributed bit for bit, whatever the order of the adds."""
    g = torch.Generator().manual_seed(seed * 7919 + rank)
    return torch.randint(-8, 9, (n,), generator=g).to(dtype)


def compare_with_backend(rank: int, world_size: int, lengths, dtypes=("float32", "bfloat16", "int64"),
                         segments=(1, 3), groups=None) -> list[dict]:
    """Run every collective of this module against ``torch.distributed``; a worker for ``launch``.

    ``groups``: lists of global ranks to run on (each a ``dist.new_group``, so one launch of
    5 ranks also checks 2, 3 and 4, and the ``group`` argument with ranks that are not
    0..p-1); ``None`` is the whole world. For each group, length, dtype and algorithm
    (broadcasts from every root of the group, the pipelined one with each of ``segments``),
    one row ``{"p", "algorithm", "length", "dtype", "src", "equal"}``, ``equal`` meaning
    bit-identical with ``dist.broadcast`` / ``dist.all_reduce`` on this rank. ``ring
    reduce-scatter`` is checked on this rank's own chunk, ``ring all-gather`` on the whole
    tensor. Launches cost seconds each: check everything in one.
    """
    rows = []
    device = cdist.device()
    groups = [list(range(world_size))] if groups is None else [sorted(g) for g in groups]
    handles = [None if len(g) == world_size else dist.new_group(g) for g in groups]  # every rank calls new_group
    for members, group in zip(groups, handles):
        if rank not in members:
            continue
        p, me = len(members), members.index(rank)
        for n in lengths:
            for dname in dtypes:
                dtype = getattr(torch, dname)
                x = _values(rank, n, dtype, n * 31 + len(dname)).to(device)
                summed = x.clone()
                dist.all_reduce(summed, group=group)

                def row(name, got, expected, src=None):
                    rows.append({"p": p, "algorithm": name, "length": n, "dtype": dname, "src": src,
                                 "equal": bool(got.shape == expected.shape and torch.equal(got.cpu(), expected.cpu()))})

                for name, fn in ALLREDUCES.items():
                    row(name, fn(x.clone(), group=group), summed)
                lo, hi = chunk_bounds(n, p)[me]
                row("ring reduce-scatter", ring_reduce_scatter(x.clone(), group=group), summed[lo:hi])
                mine = torch.zeros_like(x)
                mine[lo:hi] = summed[lo:hi]
                row("ring all-gather", ring_all_gather(mine, group=group), summed)
                for src in range(p):
                    expected = x.clone()
                    dist.broadcast(expected, members[src], group=group)
                    for name, fn in BROADCASTS.items():
                        if name == "pipelined chain":
                            for k in segments:
                                row(f"pipelined chain ({k} segments)", fn(x.clone(), src, k, group=group),
                                    expected, src)
                        else:
                            row(name, fn(x.clone(), src, group=group), expected, src)
    return rows


def fail_midway(rank: int, world_size: int, bad_rank: int, n: int = 64) -> None:
    """A rank that fails in the middle of a ring all-reduce (lesson 08, tests).

    Every rank starts ``ring_allreduce``; ``bad_rank`` does the reduce-scatter half and then
    raises, so its peers are left waiting for all-gather messages that never come. What
    should happen: ``launch`` raises ``WorkerError`` naming ``bad_rank``, and no rank hangs.
    """
    x = torch.ones(n)
    ring_reduce_scatter(x)
    if rank == bad_rank:
        raise RuntimeError(f"rank {rank} failed halfway through the ring all-reduce (injected)")
    ring_all_gather(x)
