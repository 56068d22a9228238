"""All-reduce times exactly as the alpha-beta-gamma model gives them (tests of lesson 08 and of the figures)."""

from course_lib import comm
from course_lib.comm.bench import CollectivesResult

ALPHA, BETA, GAMMA = 20e-6, 1e-9, 0.25e-9


def model_collectives(ps=(2, 4), sizes=tuple(4**k for k in range(1, 12)), alpha=ALPHA, beta=BETA, gamma=GAMMA):
    """Times of the three algorithms and of a 'backend' that is the ring, as the model gives them."""
    rows = []
    for p in ps:
        for n in sizes:
            for name, f in [("ring", comm.ring_allreduce_time), ("recursive doubling", comm.butterfly_allreduce_time),
                            ("tree", comm.binary_tree_allreduce_time), ("backend", comm.ring_allreduce_time)]:
                t = f(n, p, alpha, beta, gamma)
                rows.append({"p": p, "algorithm": name, "kind": "allreduce", "size_bytes": n, "time_s": t,
                             "algbw_GBps": n / t / 1e9, "busbw_GBps": comm.busbw(n / t, p) / 1e9})
    return CollectivesResult(rows)
