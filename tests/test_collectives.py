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
    text = S.server_reading(records)
    assert "synchronous rounds fell from" in text and "updates old" in text
    assert len(S.server_table(S.with_target(records, 10.0)).rows) == 4


def test_the_server_reading_weighs_the_final_loss_against_the_time_to_target():
    """#37 (full run of 2026-12-01): "The price: ... the asynchronous loss was 1.727 against 0.930 synchronous"
    beside a table where the asynchronous run reached the target 16x sooner. Opposite: sync reached it first."""
    def rec(mode, straggler, ups, loss, ttt):
        return {"mode": mode, "straggler_rank": 2 if straggler else 0, "delay_s": 0.02, "updates_per_s": ups,
                "max_staleness": 37 if mode == "async" else 0, "mean_staleness": 2.0 if mode == "async" else 0,
                "final_loss": loss, "time_to_target_s": ttt}
    records = [rec("sync", False, 524.7, 1.225, 0.1081), rec("async", False, 1127, 1.709, 0.0631),
               rec("sync", True, 43.88, 0.930, 1.136), rec("async", True, 1122, 1.727, 0.07198)]
    text = S.server_reading(records)
    assert "yet the asynchronous run reached the target loss 15.8x sooner (0.072 s against 1.14 s)" in text
    assert "only its final loss is worse: after the same wall-clock budget the asynchronous loss was 1.727" in text
    records[3]["time_to_target_s"] = 2.0  # async later: the plain price
    plain = S.server_reading(records)
    assert "yet" not in plain and "updates old (mean over all updates 2.0), and after the same wall-clock" in plain
    records[2]["time_to_target_s"] = None  # only async reached it
    assert "yet only the asynchronous run reached the target loss (2 s)" in S.server_reading(records)


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


# --------------------------------------------------------------------------- reading the results (lesson 08)


def _fake_collectives(ps=(2, 4), sizes=tuple(4**k for k in range(1, 12))):
    """Times exactly as the model says, for the three algorithms and a 'backend' that is the ring."""
    from course_lib.comm.bench import CollectivesResult

    rows = []
    for p in ps:
        for n in sizes:
            for name, f in [("ring", comm.ring_allreduce_time), ("recursive doubling", comm.butterfly_allreduce_time),
                            ("tree", comm.binary_tree_allreduce_time), ("backend", comm.ring_allreduce_time)]:
                t = f(n, p, ALPHA, BETA, GAMMA)
                rows.append({"p": p, "algorithm": name, "kind": "allreduce", "size_bytes": n, "time_s": t,
                             "algbw_GBps": n / t / 1e9, "busbw_GBps": comm.busbw(n / t, p) / 1e9})
    return CollectivesResult(rows)


def test_measured_crossover_finds_the_model_crossover_on_model_data():
    from course_lib.lessons import l08_collectives as study

    result = _fake_collectives()
    for p in (2, 4):
        measured, model = study.measured_crossover(result, p), study.model_crossover(p, ALPHA, BETA, GAMMA)
        assert model is not None and measured == pytest.approx(model, rel=0.5)  # interpolated between sizes
    table = study.crossover_table(result, ALPHA, BETA, GAMMA)
    assert [r["p"] for r in table.rows] == [2, 4]
    text = study.verdict(result, ALPHA, BETA, GAMMA, p_far=1024)
    assert "the ring was faster than recursive doubling from about" in text and "1024 ranks" in text
    assert "wins below" not in text  # #37: a crossover of two algorithms, not the fastest of all (the tree ran too)
    # #37, the full run: at 100 MiB on 1024 ranks Rabenseifner's algorithm is the cheapest; the verdict says so
    rab = comm.cost.rabenseifner_allreduce_time(100 * 2**20, 1024, ALPHA, BETA, GAMMA)
    ring = comm.cost.ring_allreduce_time(100 * 2**20, 1024, ALPHA, BETA, GAMMA)
    assert rab < ring and f"Rabenseifner's reduce-scatter + all-gather, {rab * 1e3:.4g} ms, is cheaper" in text
    small = study.verdict(result, ALPHA, BETA, GAMMA, p_far=1024, gradient_bytes=8 * 2**10)  # latency-bound
    assert "Rabenseifner" not in small  # there recursive doubling is the cheapest: no clause
    bw = study.bandwidth_table(result, 4)
    assert all(r["ring / backend"] == pytest.approx(1.0) for r in bw.rows)
    ext = study.extrapolation_table(study.links(ALPHA, BETA), ps=(8, 1024))
    assert {r["cheapest"] for r in ext.rows} <= {"ring", "recursive doubling", "tree", "rabenseifner"}
    assert len(ext.rows) == 2 * 2 * (1 + len(comm.QUOTED_INTERCONNECTS))


def test_no_crossover_is_said_as_such():
    from course_lib.lessons import l08_collectives as study

    result = _fake_collectives(sizes=(4, 16, 64))  # all latency-bound: recursive doubling ahead throughout
    assert study.measured_crossover(result, 4) is None
    assert "still ahead of the ring at the largest size measured" in study.verdict(result, ALPHA, BETA, GAMMA)
    # on 2 ranks the ring is cheaper than the tree at every size: said so, not "never"
    assert study.model_crossover(2, ALPHA, BETA, GAMMA, small="tree") == 0.0
    assert study.measured_crossover(result, 2, small="tree") == 0.0
    assert study.crossover_table(result, ALPHA, BETA, GAMMA).rows[0]["model (tree)"] == "every size"


def test_lesson_spec_sizes_and_groups():
    from course_lib.lessons import l08_collectives as study

    full, smoke = study.lesson_spec("full", 4), study.lesson_spec("smoke", 3)
    assert full["groups"] == [[0, 1], [0, 1, 2], [0, 1, 2, 3]] and smoke["groups"] == [[0, 1], [0, 1, 2]]
    assert max(full["sizes"]) == 16 * 2**20 and max(smoke["sizes"]) <= 2**12
    with pytest.raises(ValueError):
        study.lesson_spec("full", 1)


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
    fig, axes = plots.plot_predicted_vs_measured(_fake_collectives(), ALPHA, BETA, GAMMA)
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


# ------------------------------------------------------------------------- lesson 08 on independent links (#37 item 7)
# Recorded on this machine (2 cores) on 2026-12-01, microseconds per all-reduce, the slowest rank's median:
# one host (lesson 08's full profile, 4 gloo ranks over loopback: sizes 4 B .. 16 MiB, the last two kept here) and
# 4 virtual nodes on 1 Gbit/s links (course_lib.cluster; sizes 1 KiB .. 2 MiB).
HOST_SIZES = [4194304, 16777216]
HOST_US = {2: {"ring": [4785, 12630], "recursive doubling": [3326, 10930], "tree": [4441, 11110]},
           3: {"ring": [5201, 17770], "recursive doubling": [6503, 22370], "tree": [5770, 22290]},
           4: {"ring": [13240, 30520], "recursive doubling": [13810, 37010], "tree": [9275, 26850]}}
LINK_SIZES = [1024, 8192, 65536, 524288, 2097152]
LINK_US = {2: {"ring": [1095, 445.3, 539.9, 4034, 17170], "recursive doubling": [519.7, 237.1, 251.6, 3771, 16960],
               "tree": [262.2, 292.2, 337.1, 4071, 28210]},
           3: {"ring": [11190, 2694, 7157, 5300, 22600], "recursive doubling": [3939, 2270, 1311, 8288, 46240],
               "tree": [1344, 3170, 3540, 10720, 63640]},
           4: {"ring": [8939, 7152, 7936, 6208, 26060], "recursive doubling": [4347, 2941, 6624, 7945, 37200],
               "tree": [4087, 1466, 5282, 10610, 64030]}}
LINK_PINGPONG_US = {1: 70.58, 1024: 59.86, 16384: 70.42, 262144: 844.8, 1048576: 4945, 4194304: 31351}  # one way


def _rows(sizes, us):
    return [{"p": p, "algorithm": a, "kind": "allreduce", "size_bytes": n, "time_s": t * 1e-6,
             "algbw_GBps": 0.0, "busbw_GBps": 0.0}
            for p, algos in us.items() for a, ts in algos.items() for n, t in zip(sizes, ts)]


def _links(sizes=LINK_SIZES, us=LINK_US):
    return {"ran": True, "rate": "1gbit", "rate_bits_per_s": 1e9, "nodes": 4, "allreduce": _rows(sizes, us),
            "pingpong": [{"repeat": 0, "size_bytes": n, "one_way_s": t * 1e-6} for n, t in LINK_PINGPONG_US.items()]}


def test_a_shaped_links_rate_comes_from_its_largest_message():
    from course_lib.lessons import l08_collectives as study

    alpha, beta = study.link_alpha_beta(_links()["pingpong"])
    assert 50e-6 < alpha < 100e-6 and 1.0e9 < 8 / beta < 1.15e9  # the 1 Gbit/s link, not the burst's 2.5


def test_bytes_counted_on_the_schedules():
    from course_lib.lessons import l08_collectives as study

    n = 4 * 2**20
    for p in (2, 3, 4):  # ring and tree send the same bytes in all; on one shared bandwidth they tie
        assert study.total_bytes("ring", p, n) == study.total_bytes("tree", p, n) == 2 * (p - 1) * n
    # the bytes each waits for where every rank has its own link: the closed forms' bandwidth terms
    assert study.critical_path_bytes("ring", 4, n) == pytest.approx(2 * 3 / 4 * n)
    assert study.critical_path_bytes("tree", 4, n) == pytest.approx(2 * 2 * n)
    assert study.critical_path_bytes("tree", 2, n) == pytest.approx(2 * n)


def test_ring_tree_reading_tells_the_host_from_the_links_recorded_and_swapped():
    from course_lib.comm.bench import CollectivesResult
    from course_lib.lessons import l08_collectives as study

    host = study.ring_tree_rows(CollectivesResult(_rows(HOST_SIZES, HOST_US)))
    links = study.ring_tree_rows(study.links_collectives(_links()))
    assert [round(r["measured"], 2) for r in host] == [1.14, 0.80, 1.14]
    assert [round(r["measured"], 2) for r in links] == [0.61, 0.36, 0.41]
    assert [round(r["links_model"], 3) for r in links] == [0.5, 0.333, 0.375]
    assert not any(study.follows_links(r) for r in host) and all(study.follows_links(r) for r in links)
    on_host = study.ring_tree_reading(host, "On one host")
    assert "nearer the shared bandwidth" in on_host and "within 25% of a tie except at p = 3" in on_host
    assert "1.14/0.80/1.14x" in on_host
    # the full run's host times (ring 0.75/0.70/0.67x the tree's): nearer the shared view, yet not a tie
    faster = [{**r, "measured": m} for r, m in zip(host, (0.75, 0.70, 0.67))]
    # #37 (fourth full run, read r4c): the ring's messages are more and smaller than the tree's, not "fewer, larger"
    said = study.ring_tree_reading(faster, "On one host")
    assert ("not a tie within 25% at any p: how the two cut the bytes into messages (the ring: 2(p-1) rounds of n/p, "
            "the tree: 2 ceil(log2 p) rounds of n) favoured the ring") in said and "fewer, larger" not in said
    either = [{**r, "measured": m} for r, m in zip(host, (1.447, 0.7772, 0.8429))]  # the fourth run's host times
    assert ("within 25% of a tie except at p = 2, 3, where how the two cut the bytes into messages (the ring: 2(p-1) "
            "rounds of n/p, the tree: 2 ceil(log2 p) rounds of n) made a difference either way"
            ) in study.ring_tree_reading(either, "On one host")
    tied = [{**r, "measured": m} for r, m in zip(host, (1.1, 0.9, 1.0))]
    assert "and they tie (within 25%)" in study.ring_tree_reading(tied, "On one host")
    on_links = study.ring_tree_reading(links, "On the links")
    assert "follow the independent links" in on_links and "0.61/0.36/0.41x" in on_links
    # opposite results: the same reading, the labels swapped, says the opposite
    assert "follow the independent links" in study.ring_tree_reading(links, "On one host")
    assert "no single view fits" in study.ring_tree_reading([host[0], links[1]], "x")


def test_links_reading_on_both_paths():
    from course_lib.comm.bench import CollectivesResult
    from course_lib.lessons import l08_collectives as study

    host = CollectivesResult(_rows(HOST_SIZES, HOST_US))
    text = study.links_reading(_links(), host, gamma=0.0)
    assert text.splitlines()[0].startswith("On 4 virtual nodes with a 1gbit link each")
    assert "follow the independent links" in text and "nearer the shared bandwidth" in text
    assert "agree within one step of the sweep" in text and "the same number of rounds" in text
    assert "with that alpha the model agrees at" in text
    table = study.links_table(study.links_crossover_rows(_links()), study.ring_tree_rows(study.links_collectives(
        _links())), _links())
    assert [r["p"] for r in table.rows] == [2, 3, 4] and table.rows[0]["model (tree)"] == "every size"
    # where the cluster could not run: the refusal, then the host's own reason for the tie
    off = study.links_reading({"ran": False, "why": "the virtual cluster needs root"}, host)
    assert off.startswith("Independent links were not measured: the virtual cluster needs root")
    assert "nearer the shared bandwidth" in off and "virtual nodes" not in off
    # opposite: host-like times on the "links" read as a tie there too
    fake = _links(HOST_SIZES, HOST_US)
    assert "nearer the shared bandwidth" in study.links_reading(fake, host).splitlines()[0]


def test_links_reading_where_the_ping_pong_resolved_no_latency():
    """On a busy machine the link's fit can put alpha at 0 (CI, stop 39: a ZeroDivisionError in lesson 08's
    reading). The reading then says so instead of dividing by it."""
    from course_lib.comm.bench import CollectivesResult
    from course_lib.lessons import l08_collectives as study

    links = _links()
    links["pingpong"] = [{"repeat": 0, "size_bytes": n, "one_way_s": n * 8e-9} for n in LINK_PINGPONG_US]
    assert study.link_alpha_beta(links["pingpong"])[0] == pytest.approx(0, abs=1e-9)
    text = study.links_reading(links, CollectivesResult(_rows(HOST_SIZES, HOST_US)), gamma=0.0)
    assert "alpha = 0 us" in text
    # the model (alpha 0: the ring from every size) disagrees, so the round's latency is told, without a ratio
    assert "the ping-pong resolved no latency at all" in text and "x the ping-pong's alpha" not in text


def test_verdict_says_what_ran():
    from course_lib.comm.bench import CollectivesResult
    from course_lib.lessons import l08_collectives as study

    host = CollectivesResult(_rows(HOST_SIZES, HOST_US))
    on_links = study.verdict(host, 43e-6, 1 / 2.8e9, links=_links())
    assert on_links.splitlines()[-1].startswith("Measured on the independent links at p = 4: the tree won "
                                                "the smallest message and the ring the largest")
    alone = study.verdict(host, 43e-6, 1 / 2.8e9, links={"ran": False, "why": "not root"})
    assert "Measured on this host at p = 4 this did not show" in alone.splitlines()[-1]
    assert "model's prediction" in alone and alone.splitlines()[:-1] == on_links.splitlines()[:-1]


def test_crossover_agreement_rule():
    from course_lib.lessons import l08_collectives as study

    sizes = [1024, 8192, 65536]
    assert study.crossover_agrees(10_000, 30_000, sizes) and not study.crossover_agrees(1_000, 30_000, sizes)
    assert study.crossover_agrees(0.0, 500, sizes) and not study.crossover_agrees(0.0, 60_000, sizes)
    assert study.crossover_agrees(None, 10**7, sizes) and not study.crossover_agrees(None, 2000, sizes)
    assert study.crossover_agrees(None, None, sizes) and study.crossover_agrees(0.0, 0.0, sizes)
    assert not study.crossover_agrees(0.0, None, sizes)


def test_links_spec():
    from course_lib.lessons import l08_collectives as study

    spec = study.links_spec("smoke", 2)
    assert spec["groups"] == [[0, 1]] and len(spec["sizes"]) == 2
    full = study.links_spec("full", 4)
    assert [len(g) for g in full["groups"]] == [2, 3, 4] and max(full["pingpong_sizes"]) == 4 * 2**20
    with pytest.raises(ValueError, match="at least 2 nodes"):
        study.links_spec("full", 1)


def test_measure_on_links_says_why_not(monkeypatch):
    from course_lib import cluster as vc
    from course_lib.lessons import l08_collectives as study

    monkeypatch.setattr(vc, "unavailable_reason", lambda: "the virtual cluster needs root (test)")
    assert study.measure_on_links(study.links_spec("smoke", 2), 2) == {
        "ran": False, "why": "the virtual cluster needs root (test)"}


def test_measure_on_links_says_which_step_was_refused(monkeypatch):
    from course_lib import cluster as vc
    from course_lib.lessons import l08_collectives as study

    def refused(*a, **k):
        raise vc.ClusterError("step 'create the bridge's network namespace' was refused: Operation not permitted")

    monkeypatch.setattr(vc, "unavailable_reason", lambda: None)  # root, programs there, yet a step refused
    monkeypatch.setattr(vc, "up", refused)
    got = study.measure_on_links(study.links_spec("smoke", 2), 2)
    assert got["ran"] is False and "was refused: Operation not permitted" in got["why"]


def test_the_verdicts_crossover_counts_where_recursive_doubling_won_below_it():
    """#37 (fourth full run, read r4c): "the ring was faster than recursive doubling from about 2.4 MiB on,
    recursive doubling below it" over a p = 4 table where the ring was faster at 4 B (1806 against 5850 us). The
    run's p = 4 times (ring, recursive doubling) at 4 B, 1 KiB, 1 MiB, 4 MiB, 16 MiB; and the opposite, recursive
    doubling faster at every size below the crossover."""
    from course_lib.comm.bench import CollectivesResult
    from course_lib.lessons import l08_collectives as study

    sizes = [4, 1024, 2**20, 4 * 2**20, 16 * 2**20]
    run = {4: {"ring": [1806, 8711, 9871, 16110, 41760], "recursive doubling": [5850, 3150, 4702, 19230, 58100],
               "tree": [2124, 1064, 6711, 12550, 49540]}}
    said = study.verdict(CollectivesResult(_rows(sizes, run)), 64.7e-6, 1 / 1.71e9).splitlines()[0]
    assert "recursive doubling faster at 2 of the 3 sizes below it" in said, said
    assert "on, recursive doubling below it" not in said
    run[4]["ring"][0] = 6000  # the opposite: recursive doubling faster at every size below
    said = study.verdict(CollectivesResult(_rows(sizes, run)), 64.7e-6, 1 / 1.71e9).splitlines()[0]
    assert "on, recursive doubling below it (measured" in said and "faster at" not in said, said
