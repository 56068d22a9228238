"""course_lib.comm.collectives: schedules replayed by hand, priced by the alpha-beta model,
and executed on 2-5 gloo ranks against torch.distributed (sub-groups of one 5-rank launch)."""

import math
import random
import time

import pytest
import torch

from course_lib import comm
from course_lib import dist as cdist
from course_lib.comm import collectives as C
from course_lib.parallel import staleness as S

from _timing import scaled

from _model_collectives import model_collectives

import _dist_workers  # tests/ is on sys.path under pytest; spawned workers import it by name

ALPHA, BETA, GAMMA = 20e-6, 1e-9, 0.25e-9
ALLREDUCE_SCHEDULES = ["ring all-reduce", "recursive doubling all-reduce", "tree all-reduce"]
BROADCAST_SCHEDULES = ["flat tree broadcast", "binomial tree broadcast", "pipelined broadcast"]


def _lengths(p):
    return sorted({0, 1, max(p - 1, 0), p, p + 1, 2 * p + 3, 17})


# --------------------------------------------------------------------------- schedules, replayed on lists


@pytest.mark.parametrize("p", range(1, 13))
def test_every_schedule_computes_its_collective(p):
    rng = random.Random(p)
    for n in _lengths(p):
        values = [[rng.randint(-9, 9) for _ in range(n)] for _ in range(p)]
        total = [sum(col) for col in zip(*values)] if n else []
        for name in ALLREDUCE_SCHEDULES:
            assert C.SCHEDULES[name](p, n).replay(values) == [total] * p, (name, p, n)
        for src in range(p):
            for name in BROADCAST_SCHEDULES:
                kw = {"segments": 3} if name.startswith("pipelined") else {}
                assert C.SCHEDULES[name](p, n, src, **kw).replay(values) == [values[src]] * p, (name, p, n, src)
        scattered = C.ring_reduce_scatter_schedule(p, n).replay(values)
        for r, (lo, hi) in enumerate(C.chunk_bounds(n, p)):
            assert scattered[r][lo:hi] == total[lo:hi]
        mine = [[values[r][i] if lo <= i < hi else 0 for i in range(n)]
                for r, (lo, hi) in enumerate(C.chunk_bounds(n, p))]
        gathered = [values[r][lo:hi] for r, (lo, hi) in enumerate(C.chunk_bounds(n, p))]
        assert C.ring_all_gather_schedule(p, n).replay(mine) == [sum(gathered, [])] * p


def test_chunk_bounds_follow_tensor_split():
    for n in range(0, 12):
        for p in range(1, 6):
            sizes = [hi - lo for lo, hi in C.chunk_bounds(n, p)]
            assert sizes == [len(c) for c in torch.arange(n).tensor_split(p)]


@pytest.mark.parametrize("p", [2, 3, 4, 5, 6, 7, 8, 12, 16])
def test_message_counts_and_rounds(p):
    n = 8 * p
    log2 = (p - 1).bit_length()
    assert len(C.binomial_tree_broadcast_schedule(p, n).rounds) == log2
    assert C.binomial_tree_broadcast_schedule(p, n).messages == p - 1  # everyone receives once
    assert len(C.flat_tree_broadcast_schedule(p, n).rounds) == p - 1
    assert len(C.ring_allreduce_schedule(p, n).rounds) == 2 * (p - 1)
    q = 1 << (p.bit_length() - 1)
    extra = 2 if q != p else 0
    assert len(C.recursive_doubling_allreduce_schedule(p, n).rounds) == int(math.log2(q)) + extra
    # the ring is bandwidth-optimal: each rank sends 2(p-1)/p of the tensor, whatever p
    ring = C.ring_allreduce_schedule(p, n)
    assert all(ring.elements_sent_by(r) == 2 * (p - 1) * n // p for r in range(p))


# --------------------------------------------------------------------------- the cost model = what the schedules send


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 8, 13, 16])
def test_schedule_prices_equal_the_closed_forms(p):
    n_elems = 4 * 5 * 7 * 8 * 9 * 11 * 13 * 16  # divisible by every p and segment count used here
    n = 4 * n_elems  # bytes of float32
    pairs = [
        (C.flat_tree_broadcast_schedule(p, n_elems), comm.flat_tree_broadcast_time),
        (C.binomial_tree_broadcast_schedule(p, n_elems), comm.binomial_tree_broadcast_time),
        (C.ring_reduce_scatter_schedule(p, n_elems), comm.ring_reduce_scatter_time),
        (C.ring_all_gather_schedule(p, n_elems), comm.ring_all_gather_time),
        (C.ring_allreduce_schedule(p, n_elems), comm.ring_allreduce_time),
        (C.recursive_doubling_allreduce_schedule(p, n_elems), comm.butterfly_allreduce_time),
        (C.tree_allreduce_schedule(p, n_elems), comm.binary_tree_allreduce_time),
    ]
    for sched, formula in pairs:
        assert comm.schedule_time(sched, ALPHA, BETA, GAMMA) == pytest.approx(
            formula(n, p, ALPHA, BETA, GAMMA), rel=1e-12, abs=1e-15), sched.name
    for k in (1, 4, 8):
        sched = C.pipelined_broadcast_schedule(p, n_elems, 0, segments=k)
        assert comm.schedule_time(sched, ALPHA, BETA) == pytest.approx(
            comm.pipelined_broadcast_time(n, p, ALPHA, BETA, segments=k))


def test_pipeline_segments_and_crossovers():
    n, p = 64e6, 16
    k = comm.optimal_segments(n, p, ALPHA, BETA)
    best = comm.pipelined_broadcast_time(n, p, ALPHA, BETA, segments=k)
    assert all(best <= comm.pipelined_broadcast_time(n, p, ALPHA, BETA, segments=j) for j in (1, k // 2, 2 * k, 4 * k))
    assert comm.pipelined_broadcast_time(n, p, ALPHA, BETA) == best
    assert comm.optimal_segments(n, 2, ALPHA, BETA) == 1
    # the chain beats the binomial tree for large messages, loses for small ones
    assert comm.pipelined_broadcast_time(8, p, ALPHA, BETA) > comm.binomial_tree_broadcast_time(8, p, ALPHA, BETA)
    assert comm.pipelined_broadcast_time(n, p, ALPHA, BETA) < comm.binomial_tree_broadcast_time(n, p, ALPHA, BETA)
    # butterfly below the crossover, ring above: where the two formulas are equal
    x = comm.crossover_size(comm.butterfly_allreduce_time, comm.ring_allreduce_time, p, ALPHA, BETA)
    assert (comm.butterfly_allreduce_time(x, p, ALPHA, BETA)
            == pytest.approx(comm.ring_allreduce_time(x, p, ALPHA, BETA)))
    # by hand for p = 16: 4(a + n b) = 30 a + 30/16 n b  ->  n = 26 a / (4 - 30/16) / b
    assert x == pytest.approx(26 * ALPHA / (4 - 30 / 16) / BETA, rel=1e-6)
    assert comm.crossover_size(comm.ring_allreduce_time, comm.butterfly_allreduce_time, p, ALPHA, BETA) is None


def test_quoted_interconnects_name_their_source():
    for name, link in comm.QUOTED_INTERCONNECTS.items():
        assert link["alpha_s"] > 0 and link["bandwidth_Bps"] > 0 and link["source"], name


# --------------------------------------------------------------------------- bad input


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="src must be a rank"):
        C.binomial_tree_broadcast_schedule(4, 10, src=4)
    with pytest.raises(ValueError, match="src must be a rank"):
        C.binomial_tree_broadcast(torch.zeros(3), src=1)  # one process alone: only rank 0 exists
    with pytest.raises(ValueError, match="contiguous"):
        C.ring_allreduce(torch.zeros(4, 4).t())
    with pytest.raises(TypeError, match="torch.Tensor"):
        C.tree_allreduce([1.0, 2.0])
    with pytest.raises(ValueError, match="segments"):
        C.pipelined_broadcast_schedule(3, 10, segments=0)
    with pytest.raises(ValueError, match="ranks"):
        C.ring_allreduce_schedule(0, 10)


def test_one_process_alone_is_a_no_op():
    x = torch.arange(5.0)
    for fn in list(C.ALLREDUCES.values()) + list(C.BROADCASTS.values()):
        assert torch.equal(fn(x.clone()), x)


# --------------------------------------------------------------------------- on gloo ranks


# One launch of 5 ranks checks 2, 3, 4 and 5: sub-groups whose ranks are not 0..p-1 (so the
# group argument is exercised too). Launches cost seconds each on a small machine.
GROUPS = [[1, 3], [0, 2, 4], [1, 2, 3, 4], [0, 1, 2, 3, 4]]
LENGTHS = [1, 3, 5, 9, 33]  # below, at and above every p here, and not divisible by most


SERVER_RUNS = [S.ServerConfig(mode=m, straggler_rank=s, delay_s=0.02, budget_s=0.4, lr=0.05)
               for s in (None, 2) for m in ("sync", "async")]


@pytest.fixture(scope="module")
def five_ranks():
    """One launch of 5 gloo ranks: every collective against torch.distributed, then the parameter-server runs."""
    return cdist.launch(_dist_workers.collectives_and_parameter_server, 5, LENGTHS, ("float32", "bfloat16", "int64"),
                        (1, 3), GROUPS, SERVER_RUNS, S.Problem(n_train=512, n_eval=256), backend="gloo",
                        timeout_s=scaled(300), collective_timeout_s=scaled(120), threads_per_worker=1, quiet=True)


@pytest.fixture(scope="module")
def backend_comparison(five_ranks):
    return [r["compare"] for r in five_ranks]


@pytest.mark.slow
def test_parameter_server_sync_async_and_a_straggler(five_ranks):
    records = five_ranks[0]["server"]
    sync0, async0, sync1, async1 = records
    assert [r["label"] for r in records] == ["sync", "async", "sync, rank 2 +20 ms", "async, rank 2 +20 ms"]
    for r in (sync0, sync1):  # every round has one gradient from each worker, none stale
        assert r["max_staleness"] == 0 and len(set(r["gradients_from"].values())) == 1
    # the straggler: synchronous rounds take at least its delay; asynchronous updates do not wait for it
    assert sync1["updates_per_s"] < 1 / 0.02
    # a worker without the delay contributes more updates than the straggler (by ~4x when the machine
    # is idle; only "more" holds on a busy one, where the 20 ms is small next to the waits for a core)
    assert async1["gradients_from"][1] > async1["gradients_from"][2]
    assert async1["max_staleness"] >= 2
    assert all(r["final_loss"] < r["curve"]["loss"][0] for r in records)  # everyone learned something
    assert len(S.server_table(S.with_target(records, 10.0)).rows) == 4


@pytest.mark.slow
def test_every_collective_equals_torch_distributed(backend_comparison):
    for rank, rows in enumerate(backend_comparison):
        wrong = [r for r in rows if not r["equal"]]
        assert not wrong, f"rank {rank}: {wrong[:3]}"
        assert {r["p"] for r in rows} == {len(g) for g in GROUPS if rank in g}
    for p in (2, 3, 4, 5):
        rank = next(g for g in GROUPS if len(g) == p)[0]
        rows = [r for r in backend_comparison[rank] if r["p"] == p]
        assert {r["length"] for r in rows} == set(LENGTHS)
        assert {r["dtype"] for r in rows} == {"float32", "bfloat16", "int64"}
        assert {r["algorithm"] for r in rows} == {
            "ring", "recursive doubling", "tree", "ring reduce-scatter", "ring all-gather", "flat tree",
            "binomial tree", "pipelined chain (1 segments)", "pipelined chain (3 segments)"}
        assert {r["src"] for r in rows if r["src"] is not None} == set(range(p))


@pytest.mark.slow
def test_a_rank_failing_mid_collective_ends_the_launch_with_its_error():
    start = time.monotonic()
    with pytest.raises(cdist.WorkerError) as err:
        cdist.launch(C.fail_midway, 3, 1, backend="gloo", timeout_s=scaled(120), collective_timeout_s=scaled(15),
                     threads_per_worker=1, quiet=True)
    assert err.value.rank == 1
    assert "failed halfway through the ring all-reduce" in str(err.value)
    assert time.monotonic() - start < scaled(100)  # ended by the failure, not by the launch timeout


def test_pingpong_fit_and_spread():
    from course_lib.comm.bench import PingPong

    rows = [{"repeat": r, "size_bytes": n, "one_way_s": (ALPHA + BETA * n) * (1 + 0.1 * r)}
            for r in range(3) for n in (1, 1024, 2**20, 2**22)]
    pp = PingPong(rows)
    alpha, beta = pp.alpha_beta()
    assert alpha == pytest.approx(ALPHA * 1.1, rel=1e-6) and beta == pytest.approx(BETA * 1.1, rel=1e-6)
    lo, mid, hi = pp.spread()["alpha_us"]
    assert lo < mid < hi and lo == pytest.approx(ALPHA * 1e6)
    assert len(pp.table().rows) == 4
    # every size latency-bound (the smoke profile's few KiB): the fit's beta is 0, the link's is not
    flat = PingPong([{"repeat": r, "size_bytes": n, "one_way_s": 1e-4} for r in range(3) for n in (8, 64, 4096)])
    a, b = flat.alpha_beta()
    assert b > 0 and a + b * 4096 == pytest.approx(1e-4, rel=0.02)


def test_pingpong_spread_where_a_repeat_resolved_no_bandwidth_term():
    """The smoke profile's ping-pong (up to 4 KiB) is latency-bound, so a repeat's fit can put beta at 0, and the
    spread's bandwidth was then inf: lesson 08 printed "1/beta = 0.05 GB/s (min 0.03, max inf)". Such a repeat
    counts at the bound alpha_beta() gives the link (its largest message), so the spread holds the beta printed."""
    import math

    from course_lib.comm.bench import PingPong

    rows = ([{"repeat": 0, "size_bytes": n, "one_way_s": 1e-4} for n in (8, 64, 4096)]  # flat: beta 0
            + [{"repeat": 1, "size_bytes": n, "one_way_s": 1e-4 + 2e-9 * n} for n in (8, 64, 4096)])  # resolved
    pp = PingPong(rows)
    assert pp.fits()[0][1] == 0.0
    lo, mid, hi = pp.spread()["bandwidth_GBps"]
    assert all(math.isfinite(x) for x in (lo, mid, hi))
    assert hi == pytest.approx(4096 / (0.01 * 1e-4) / 1e9)  # the flat repeat: 1 % of its largest message's time
    assert lo == pytest.approx(0.5, rel=1e-3)  # 1 / 2e-9 s per byte, the resolved repeat's own
    alpha, beta = pp.alpha_beta()
    assert lo <= 1 / beta / 1e9 <= hi


def test_figures_and_the_static_widget():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.comm import plots
    from course_lib.widgets import allreduce_explorer

    ring = C.ring_allreduce_schedule(4, 8)
    fig, ax = plots.plot_schedule(ring)
    assert len(ax.texts) >= ring.messages  # one label per chunk-sized message (plus the legend line)
    plt.close(fig)
    fig, axes = plots.plot_schedules([ring, C.binomial_tree_broadcast_schedule(5, 8, 2)])
    plt.close(fig)
    fig, axes = plots.plot_predicted_vs_measured(model_collectives(), ALPHA, BETA, GAMMA)
    assert len(axes[0]) == 2 and len(axes[0][0].get_lines()) == 4 + 3  # 4 measured series, 3 models
    plt.close(fig)
    fig, axes = plots.plot_extrapolation({"a": (ALPHA, BETA), "b": (1e-6, 1e-11)})
    assert len(axes[0][0].get_lines()) == 2 * 4
    plt.close(fig)
    fig, table = allreduce_explorer(p=1024, n_bytes=8, alpha=ALPHA, beta=BETA, interactive=False)
    assert table.title == "winner: recursive doubling"
    plt.close(fig)


@pytest.mark.slow
def test_bench_collectives_prints_the_ratio(capsys):
    from course_lib import bench

    assert bench.main(["collectives", "--size-mib", "0.25", "--iters", "2"]) == 0
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert last.startswith("ratio ring/backend: ") and float(last.split(": ")[1]) > 0
