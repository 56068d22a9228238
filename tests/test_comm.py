"""course_lib.comm: bandwidth bookkeeping, the alpha-beta model, and two real gloo runs."""

import numpy as np
import pytest
import torch

from course_lib import comm
from course_lib import dist as cdist
from _timing import scaled

ALPHA, BETA = 50e-6, 1e-9  # 50 us latency, 1 GB/s
SIZES = 4.0 ** np.arange(1, 14)


# --------------------------------------------------------------------------- algbw / busbw


def test_algbw_is_size_over_time():
    assert comm.algbw(1e9, 0.5) == 2e9
    with pytest.raises(ValueError):
        comm.algbw(1, 0.0)


@pytest.mark.parametrize("p, factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_busbw_is_nccl_tests_factor(p, factor):
    # nccl-tests doc/PERFORMANCE.md: allreduce busbw = algbw * 2(n-1)/n
    assert comm.allreduce_busbw_factor(p) == factor
    assert comm.busbw(10e9, p) == pytest.approx(10e9 * factor)


def test_busbw_tends_to_twice_algbw():
    assert comm.busbw(1.0, 1024) == pytest.approx(2.0, rel=1e-3)


def test_default_sizes():
    gpu, cpu, smoke = comm.default_sizes("cuda"), comm.default_sizes("cpu"), comm.default_sizes(smoke=True)
    assert gpu[0] == cpu[0] == 4 and gpu[-1] == 256 * 2**20 and cpu[-1] == 64 * 2**20
    assert all(b == 4 * a for a, b in zip(gpu, gpu[1:]))
    assert len(smoke) == 3 and max(smoke) <= 2**16
    with pytest.raises(ValueError):
        comm.default_sizes("tpu")


# --------------------------------------------------------------------------- fit_alpha_beta


@pytest.mark.parametrize("robust", [True, False])
def test_fit_recovers_exact_line(robust):
    alpha, beta = comm.fit_alpha_beta(SIZES, ALPHA + BETA * SIZES, robust=robust)
    assert alpha == pytest.approx(ALPHA, rel=1e-6)
    assert beta == pytest.approx(BETA, rel=1e-6)


def test_fit_tolerates_proportional_noise():
    rng = np.random.default_rng(0)
    errors = []
    for _ in range(20):
        times = (ALPHA + BETA * SIZES) * np.exp(rng.normal(0.0, 0.05, SIZES.size))  # ~5 % noise
        alpha, beta = comm.fit_alpha_beta(SIZES, times)
        errors.append((abs(alpha / ALPHA - 1), abs(beta / BETA - 1)))
    errors = np.array(errors)
    assert np.median(errors, axis=0).max() < 0.1
    assert errors.max() < 0.3


def test_fit_ignores_a_few_slow_outliers():
    times = ALPHA + BETA * SIZES
    times[[1, 6]] *= 10  # two sizes hit by another process
    alpha, beta = comm.fit_alpha_beta(SIZES, times)
    assert alpha == pytest.approx(ALPHA, rel=0.02) and beta == pytest.approx(BETA, rel=0.02)
    plain_alpha, _ = comm.fit_alpha_beta(SIZES, times, robust=False)
    assert abs(plain_alpha / ALPHA - 1) > abs(alpha / ALPHA - 1)


def test_fit_never_returns_negative_parameters():
    alpha, beta = comm.fit_alpha_beta([1e3, 1e6, 1e7], [1e-3, 0.9e-3, 0.8e-3])
    assert alpha > 0 and beta == 0.0
    alpha, beta = comm.fit_alpha_beta([1e3, 1e6], [1e-9, 1e-3])
    assert alpha >= 0 and beta > 0
    with pytest.raises(ValueError):
        comm.fit_alpha_beta([8, 8], [1e-3, 2e-3])


@pytest.mark.parametrize("robust", [True, False])
def test_a_bandwidth_term_below_the_fits_resolution_is_none(robust):
    """CI's lstsq fitted flat ping-pong times with beta = 1.4e-24 s/B where this machine's gave exactly 0, and a
    test of lesson 08's spread failed on one machine only (stop 43). A bandwidth term that adds under a millionth
    of the largest time is rounding: the fit reports none, on every machine alike."""
    sizes = [8, 64, 4096]
    for beta_true in (0.0, 1e-24, 1e-20):
        alpha, beta = comm.fit_alpha_beta(sizes, [1e-4 + beta_true * n for n in sizes], robust=robust)
        assert beta == 0.0 and alpha == pytest.approx(1e-4, rel=1e-9)
    alpha, beta = comm.fit_alpha_beta(sizes, [1e-4 + 2e-9 * n for n in sizes], robust=robust)  # 8 % of 4 KiB's
    assert beta == pytest.approx(2e-9, rel=1e-6)


def test_a_fit_without_a_bandwidth_term_is_said_in_words_not_divided_by():
    """A zero beta (a fast machine can fit one) is reported, never divided by."""
    alpha, beta = comm.fit_alpha_beta([1e3, 1e6, 1e7], [1e-3, 0.9e-3, 0.8e-3])
    assert beta == 0.0
    assert comm.fit_text(alpha, beta).startswith(f"{alpha * 1e6:.1f} us, no bandwidth term")
    assert comm.fit_text(20e-6, 1 / 4e9) == "20.0 us + n / 4.00 GB/s"


# --------------------------------------------------------------------------- algorithm costs


ALGOS = list(comm.ALLREDUCE_ALGORITHMS.items())


@pytest.mark.parametrize("name, cost", ALGOS)
def test_one_rank_costs_nothing(name, cost):
    assert cost(1e6, 1, ALPHA, BETA, 1e-10) == 0.0


def test_two_ranks_by_hand():
    n, a, b, g = 1e6, ALPHA, BETA, 1e-10
    expected = {
        "flat tree": 2 * (a + n * b) + n * g,      # send to root, send back
        "binary tree": 2 * (a + n * b) + n * g,    # same tree when p = 2
        "ring": 2 * a + n * b + n * g / 2,         # 2 steps of n/2
        "butterfly": a + n * b + n * g,            # one exchange of the full vector
        "rabenseifner": 2 * a + n * b + n * g / 2,  # halving + doubling, 1 step each
    }
    for name, cost in ALGOS:
        assert cost(n, 2, a, b, g) == pytest.approx(expected[name]), name


def test_ring_bandwidth_term_tends_to_2n_beta():
    n = 1e8
    bandwidth_term = [comm.ring_allreduce_time(n, p, 0.0, BETA) for p in (2, 8, 64, 1024)]
    assert bandwidth_term == sorted(bandwidth_term)
    assert bandwidth_term[-1] == pytest.approx(2 * n * BETA, rel=1e-3)
    assert all(t < 2 * n * BETA for t in bandwidth_term)
    assert comm.rabenseifner_allreduce_time(n, 1024, 0.0, BETA) == pytest.approx(bandwidth_term[-1])


def test_latency_terms_by_rank_count():
    p = 64  # a latency-bound message: n = 0
    assert comm.butterfly_allreduce_time(0, p, ALPHA, BETA) == pytest.approx(6 * ALPHA)
    assert comm.binary_tree_allreduce_time(0, p, ALPHA, BETA) == pytest.approx(12 * ALPHA)
    assert comm.ring_allreduce_time(0, p, ALPHA, BETA) == pytest.approx(126 * ALPHA)
    assert comm.flat_tree_allreduce_time(0, p, ALPHA, BETA) == pytest.approx(126 * ALPHA)
    assert comm.best_algorithm(8, p, ALPHA, BETA) == "butterfly"
    assert comm.best_algorithm(1e9, p, ALPHA, BETA) in ("ring", "rabenseifner")
    # Flat tree's bandwidth term grows with p; the ring's does not.
    assert comm.flat_tree_allreduce_time(1e8, p, 0, BETA) > 30 * comm.ring_allreduce_time(1e8, p, 0, BETA)


def test_non_power_of_two_costs_more_than_the_power_below():
    for name in ("butterfly", "rabenseifner"):
        cost = comm.ALLREDUCE_ALGORITHMS[name]
        assert cost(1e6, 6, ALPHA, BETA) > cost(1e6, 4, ALPHA, BETA)
        assert cost(1e6, 8, ALPHA, BETA) < cost(1e6, 6, ALPHA, BETA)  # the power above can be cheaper
    assert comm.binary_tree_allreduce_time(0, 5, ALPHA, BETA) == pytest.approx(6 * ALPHA)  # ceil(log2 5) = 3
    with pytest.raises(ValueError):
        comm.ring_allreduce_time(1, 0, ALPHA, BETA)


def test_link_parameters_put_the_ring_on_the_fit():
    p, A, B = 4, 300e-6, 2e-9
    a, b = comm.link_alpha_beta_from_ring_fit(A, B, p)
    for n in (4.0, 1e6, 1e8):
        assert comm.ring_allreduce_time(n, p, a, b) == pytest.approx(A + B * n)
    with pytest.raises(ValueError):
        comm.link_alpha_beta_from_ring_fit(A, B, 1)


def test_predict_table_has_every_algorithm():
    sizes = [4, 1024, 2**20]
    t = comm.predict_table(sizes, 4, ALPHA, BETA, measured_s=[1e-4, 2e-4, 3e-3], fitted=(1e-4, 1e-9))
    assert len(t.rows) == 3 and "measured (us)" in t.columns and "fit (us)" in t.columns
    assert all(f"{k} (us)" in t.columns for k in comm.ALLREDUCE_ALGORITHMS)
    assert t.rows[0]["butterfly (us)"] == pytest.approx(2 * ALPHA * 1e6 + 2 * 4 * BETA * 1e6)
    assert "butterfly" in str(t)


def test_mlp_spec_size():
    spec = comm.default_mlp_spec("cpu")
    assert sum(p.numel() for p in spec.build().parameters()) == spec.num_params
    assert 2 < spec.param_mb < 10
    assert 10 < comm.default_mlp_spec("cuda").param_mb < 50


# --------------------------------------------------------------------------- real runs (2 gloo ranks)


@pytest.mark.slow
def test_allreduce_benchmark_on_two_gloo_ranks():
    sizes = [4, 4096, 2**18 + 2]  # the last one is not a whole number of floats
    rows_by_rank = cdist.launch(comm.allreduce_benchmark, 2, sizes, 6, 2, backend="gloo", timeout_s=scaled(600))
    rows = rows_by_rank[0]
    assert rows == rows_by_rank[1]  # timings are maxed over ranks: both ranks report the same
    assert [r["size_bytes"] for r in rows] == [4, 4096, 2**18]
    for r in rows:
        assert r["correct"] and r["world_size"] == 2 and r["backend"] == "gloo"
        assert r["time_s"] > 0 and r["time_mean_s"] > 0
        assert r["algbw_GBps"] == pytest.approx(r["size_bytes"] / r["time_s"] / 1e9)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 1.0)  # 2(p-1)/p = 1 for p = 2
    result = comm.BenchResult(rows=rows, world_size=2, backend="gloo")
    assert len(result.table().rows) == 3
    alpha, beta = result.fit()
    assert alpha >= 0 and beta >= 0 and (alpha > 0 or beta > 0)


@pytest.mark.slow
def test_ddp_bucket_benchmark_on_two_gloo_ranks():
    spec = comm.MLPSpec(in_features=32, hidden=256, depth=2, out_features=4, batch_size=16)  # 0.55 MiB
    rows = cdist.launch(comm.ddp_bucket_benchmark, 2, [0.1, 25.0], 3, spec, 1, True, ["fp16", "bf16"], 2,
                        backend="gloo", timeout_s=scaled(600))[0]
    assert [r["overlap"] for r in rows] == [True, True, False, None, True, True]
    assert [r["compression"] for r in rows] == ["none", "none", "none", None, "fp16", "bf16"]
    assert [r["bucket_cap_mb"] for r in rows[:2]] == [0.1, 25.0]
    assert rows[2]["bucket_cap_mb"] == pytest.approx(spec.param_mb)
    grads = spec.num_params * 4
    for r in rows[:3]:  # every all-reduced byte counted on the tensors sent: all the fp32 gradients per step
        assert r["bytes_per_step"] == grads and r["params_in_sync"] and len(r["step_ms_repeats"]) == 2
        assert r["update_rel_diff"] == 0  # 2 ranks: a + b in any bucketing, / 2 exact: the same training
    assert rows[0]["allreduces_per_step"] > rows[1]["allreduces_per_step"] == 1  # 0.1 MiB: several buckets
    assert rows[3]["bytes_per_step"] == 0 and rows[3]["comm_ms"] == 0 and rows[3]["params_in_sync"] is None
    fp16 = rows[4]
    assert fp16["bytes_per_step"] == grads // 2 and fp16["refused"] is None and fp16["backend_reduces_dtype"]
    assert 0 < fp16["update_rel_diff"] < 0.05 and fp16["underflow"]["nonzero"] > 0
    bf16 = rows[5]
    if torch.version.cuda is None:  # DDP refuses torch's bf16 hook in a torch without CUDA (comm.hooks)
        assert "NCCL" in bf16["refused"] and bf16["step_ms"] is None and bf16["backend_reduces_dtype"]
    else:
        assert bf16["bytes_per_step"] == grads // 2
    for r in rows:
        if r["step_ms"] is not None:
            tl = r["timeline"]
            assert 0 < tl["backward_start_ms"] <= tl["backward_end_ms"] <= tl["step_ms"]
            assert len(tl["allreduces_ms"]) == r["allreduces_per_step"]
            assert all(a <= b for a, b, _ in tl["allreduces_ms"])
    result = comm.BucketResult(rows=rows, world_size=2, backend="gloo", model_spec=spec)
    assert len(result.table().rows) == 4 and len(result.compression_table().rows) == 3
    from course_lib.lessons import l06_data_parallel as study

    assert study.overlap_comparisons(result) and study.timeline_table(result).rows
    assert [c for c in study.compression_comparisons(result) if c.question.startswith("loss after")]


def test_bucket_benchmark_refuses_bad_arguments_before_anything_runs():
    with pytest.raises(RuntimeError, match="needs a process group"):
        comm.ddp_bucket_benchmark(0, 1, [25.0])


# --------------------------------------------------------------------------- figures


def _fake_result(p):
    rows = []
    for n in SIZES:
        t = ALPHA + BETA * n
        rows.append({"size_bytes": int(n), "time_s": t, "algbw_GBps": n / t / 1e9,
                     "busbw_GBps": comm.busbw(n / t, p) / 1e9})
    return comm.BenchResult(rows=rows, world_size=p, backend="gloo")


@pytest.mark.parametrize("p", [1, 4])
def test_plot_allreduce_cost(p):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.comm import plots as comm_plots

    fig, (ax_t, ax_bw) = comm_plots.plot_allreduce_cost(_fake_result(p))
    n_lines = 2 + (len(comm.ALLREDUCE_ALGORITHMS) if p > 1 else 0)
    assert len(ax_t.get_lines()) == n_lines
    assert ax_t.get_xscale() == "log" and ax_t.get_yscale() == "log"
    plt.close(fig)


def test_plot_ddp_buckets():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.comm import plots as comm_plots

    rows = [{"bucket_cap_mb": 1.0, "step_ms": 10.0, "overlap": True, "compression": "none",
             "step_ms_repeats": [9, 10, 12]},
            {"bucket_cap_mb": 4.5, "step_ms": 12.0, "overlap": False, "compression": "none"},
            {"bucket_cap_mb": 0.0, "step_ms": 8.0, "overlap": None, "compression": None},
            {"bucket_cap_mb": 25.0, "step_ms": 9.0, "overlap": True, "compression": "fp16"}]  # its own table
    fig, ax = comm_plots.plot_ddp_buckets(comm.BucketResult(rows=rows, world_size=2, backend="gloo"))
    assert len(ax.patches) == 3 and ax.containers  # three bars, and whiskers for the repeats
    plt.close(fig)


def test_plot_bucket_timeline_draws_every_recorded_all_reduce():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.comm import plots as comm_plots

    tl = {"backward_start_ms": 1.0, "backward_end_ms": 9.0, "step_ms": 10.0,
          "allreduces_ms": [[2.0, 5.0, 100], [3.0, 8.5, 100], [4.0, 8.9, 100]]}
    rows = [{"variant": "DDP buckets", "bucket_cap_mb": 1.0, "overlap": True, "compression": "none",
             "allreduces_per_step": 3, "timeline": tl, "clock": "host clock"},
            {"variant": "one all-reduce after backward", "bucket_cap_mb": 4.0, "overlap": False, "compression": "none",
             "timeline": {**tl, "backward_end_ms": 3.0, "allreduces_ms": [[3.1, 8.0, 300]]}},
            {"variant": "DDP + bf16 compression", "overlap": True, "compression": "bf16", "timeline": None}]  # refused
    fig, ax = comm_plots.plot_bucket_timeline(comm.BucketResult(rows=rows, world_size=2, backend="gloo"))
    # per lane: forward, backward compute, (waiting), optimizer, then one bar per all-reduce
    assert len(ax.collections) == (4 + 3) + (3 + 1)
    assert [t.get_text() for t in ax.get_yticklabels()][0].startswith("DDP 1 MiB")
    plt.close(fig)


@pytest.mark.parametrize("p", [1, 2, 3, 8])
def test_plot_ring_steps_is_drawn_from_the_schedules(p):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.comm import plots as comm_plots

    fig, axes = comm_plots.plot_ring_steps(p)
    shown = [ax for ax in axes.flat if ax.get_visible()]
    assert len(shown) == 1 + 2 * (p - 1)  # the start, p - 1 reduce-scatter and p - 1 all-gather rounds
    last = shown[-1]
    cells = [t.get_text() for t in last.texts if type(t).__name__ != "Annotation"]  # arrows are Annotations
    assert cells == [("+".join(map(str, range(p))) if p <= 4 else str(p))] * p * p  # everyone has every sum
    if p > 1:
        assert len([c for c in shown[1].get_children() if type(c).__name__ == "Annotation"]) == p  # p messages
    plt.close(fig)


def test_importing_the_plots_sets_nothing():
    import subprocess
    import sys

    code = ("import sys, course_lib.comm.plots, course_lib.comm; "
            "print('matplotlib.pyplot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
