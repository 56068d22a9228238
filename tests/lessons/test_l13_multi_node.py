"""Lesson 13 (course_lib/lessons/l13_*.py): its paths, tables and comparisons, fed recorded results from each path.

The recordings are real runs of these modules' functions on a loaded 2-core box: ``virtual``: 4 nodes of
course_lib/cluster.py on 100 Mbit/s links; ``slurm``: the same functions through ``srun`` on
tests/_slurm_cluster.py's MultiNodeCluster (4 slurmd on 1 Gbit/s virtual nodes); ``model``:
:func:`predicted_layouts`. Each comparison is also fed a clear opposite or an unclear case.
"""

import pytest

from course_lib import compare
from course_lib.comm import cost
from course_lib.lessons import l13_hierarchy as H
from course_lib.lessons import l13_multi_node as L
from course_lib.lessons import l13_nodes as N
from course_lib.lessons import l13_placement as P

# measure_link on 2 virtual nodes, links set to 100 Mbit/s: (size in bytes, median time in s)
VIRTUAL_LINK = [(1024, 0.0038254), (4096, 0.00044585), (16384, 0.00052246), (65536, 0.0053121),
                (262144, 0.030970), (1048576, 0.095385)]
# the same through srun on the 2-node SLURM of the virtual cluster (links at 1 Gbit/s, tbf's bucket 500 kB:
# messages of up to 1 MB mostly fit in the bucket, so the "rate" comes out above the link's)
SLURM_LINK = [(1024, 0.00036504), (4096, 0.0034626), (16384, 0.00041009), (65536, 0.00037030),
              (262144, 0.0010190), (1048576, 0.0077558)]
# measure's NeuMF runs (micro_batch=64, steps=4, smoke NeuMF): samples/s per (layout, k)
VIRTUAL_LAYOUTS = {
    ("1 node x 4", 1): 4148,
    ("1 node x 4", 2): 7523,
    ("1 node x 4", 4): 16616,
    ("1 node x 4", 8): 27642,
    ("4 nodes x 1", 1): 1802,
    ("4 nodes x 1", 2): 3119,
    ("4 nodes x 1", 4): 5078,
    ("4 nodes x 1", 8): 9544,
}
SLURM_LAYOUTS = {
    ("1 node x 4", 1): 2343,
    ("1 node x 4", 2): 7408,
    ("1 node x 4", 4): 15343,
    ("1 node x 4", 8): 22812,
    ("4 nodes x 1", 1): 3465,
    ("4 nodes x 1", 2): 6232,
    ("4 nodes x 1", 4): 8860,
    ("4 nodes x 1", 8): 14721,
}


def rows_of(link):
    return [{"size_bytes": n, "time_s": t} for n, t in link]


def layout_rows(samples, source):
    return [{"layout": layout, "k": k, "global_batch": 256 * k, "samples_per_s": sps, "step_s": 256 * k / sps,
             "source": source} for (layout, k), sps in samples.items()]


def test_the_path_is_slurm_then_the_virtual_cluster_then_the_model():
    assert N.choose_path(4, None)["path"] == "slurm"
    assert N.choose_path(1, None)["path"] == "virtual"
    model = N.choose_path(0, "the virtual cluster needs root")
    assert model["path"] == "model" and "needs root" in model["why"]
    assert N.choose_path(0, None, want="model")["path"] == "model"
    with pytest.raises(ValueError, match="RUN_ON='slurm' cannot run here: SLURM offers 1 node"):
        N.choose_path(1, None, want="slurm")
    with pytest.raises(ValueError, match="RUN_ON='cloud'"):
        N.choose_path(1, None, want="cloud")


def test_the_model_ratio_grows_with_k_when_the_far_link_is_slower():
    rows = L.predicted_layouts(50e-6, 617_604, 64, near=(20e-6, 1e-9), far=(100e-6, 8 / 1e9))
    ratios = L.layout_ratios(rows)
    assert list(ratios) == list(L.K_VALUES)
    assert all(a < b for a, b in zip(list(ratios.values()), list(ratios.values())[1:]))
    step = {(r["layout"], r["k"]): r["step_s"] for r in rows}
    assert step[("4 nodes x 1", 1)] == pytest.approx(64 * 50e-6 + cost.ring_allreduce_time(617_604, 4, 100e-6, 8e-9))
    more = L.predicted_layouts(50e-6, 617_604, 64, (20e-6, 1e-9), (100e-6, 8 / 1e9), ks=(1,), overhead_s=0.02)
    assert more[1]["step_s"] == pytest.approx(step[("4 nodes x 1", 1)] + 0.02)  # the overhead, once a step


# one node's step times on the full profile's NeuMF (micro-batch 256, 4 processes on a quiet 2-core machine), and
# lesson 08's fits of its sweeps: loopback, and 4 nodes on 2 Gbit/s links
QUIET = {"compute_s_per_sample": 20e-6, "overhead_s": 0.015}
LOOPBACK, TWO_GBIT = (987e-6, 9.24e-10), (1.1e-3, 8 / 2e9)


def test_the_accumulation_rate_puts_the_crossover_inside_the_sweep_and_100_mbit_does_not():
    """The sizing rule on simulated hardware: lesson 09's model with a quiet machine's compute and link fits."""
    def crossover(far):
        rows = L.predicted_layouts(QUIET["compute_s_per_sample"], 3_784_068, 256, LOOPBACK, far,
                                   overhead_s=QUIET["overhead_s"])
        return L.extrapolated_k(rows)[0]

    assert 2 < crossover(TWO_GBIT) < L.K_VALUES[-1] / 4  # crossed well before the largest k
    assert crossover((1.1e-3, 8 / 100e6)) > 2 * L.K_VALUES[-1]  # 100 Mbit/s: far beyond it


class _Runner:
    """A runner that records the configs it was given and times every step at 0.1 s per micro-batch."""
    path = "virtual"

    def run(self, worker, args, *, nnodes, nproc):
        self.ks = [c["global_batch_size"] // (4 * c["micro_batch_size"]) for c in args[3]]
        return {"sweep": [], "runs": [{"config": c, "train_time_s": 0.1 * k + 0.01 * i, "steps": 1}
                                      for i, (c, k) in enumerate(zip(args[3], self.ks))]}


def test_the_repeats_run_at_both_ends_and_are_kept_per_k():
    runner = _Runner()
    got = L.measure(runner, [1024], 64, 1, {}, ks=(1, 2, 4), world_size=4, repeats=3)
    assert runner.ks == [1, 2, 4, 1, 4, 1, 4]  # the ends alternate: a slow moment falls on no one k alone
    assert [len(r["step_s_runs"]) for r in got["layouts"][:3]] == [3, 1, 3]
    rows = got["layouts"][:3]  # one node's: the runs of each k averaged (k=1 ran 1st, 4th and 6th)
    assert [r["k"] for r in rows] == [1, 2, 4] and rows[0]["step_s_runs"] == pytest.approx([0.1, 0.13, 0.15])
    assert rows[0]["step_s"] == pytest.approx(0.38 / 3) and rows[1]["samples_per_s"] == pytest.approx(512 / 0.21)


def test_the_step_fit_recovers_a_simulated_machines_compute_and_overhead():
    near = {"alpha_s": 0.0, "beta_s_per_byte": 1e-9}
    t_ar = cost.ring_allreduce_time(1_000_000, 4, 0.0, 1e-9)
    rows = [{"layout": "1 node x 4", "k": k, "step_s": 0.015 + t_ar + k * 256 * 20e-6,
             "step_s_runs": [(0.015 + t_ar + k * 256 * 20e-6) * f for f in (0.98, 1.02)]} for k in L.K_VALUES]
    fit = L.step_fit(rows + [{"layout": "4 nodes x 1", "k": 1, "step_s": 9.0}], near, 1_000_000, 256)
    assert fit["compute_s_per_sample"] == pytest.approx(20e-6, rel=0.02)
    assert fit["overhead_s"] == pytest.approx(0.015, abs=0.002) and fit["df"] == 2 * len(L.K_VALUES) - 2
    shown = L.step_fit_table(fit).rows
    assert len(shown) == 2
    with pytest.raises(ValueError, match="two distinct"):
        L.step_fit(rows[:1], near, 1_000_000, 256)


def test_configs_fix_the_micro_batch_and_grow_the_global_batch():
    cfgs = L.layout_configs(64, 4, steps=3, ks=(1, 2, 4, 8))
    assert [(c["global_batch_size"], c["micro_batch_size"], c["max_steps"]) for c in cfgs] == [
        (256, 64, 3), (512, 64, 3), (1024, 64, 3), (2048, 64, 3)]
    assert all(c["stop_at_target"] is False for c in cfgs)


# hierarchy_worker on 2 virtual nodes x 2 ranks, links at 100 Mbit/s: (size, algorithm, median time of the slowest rank)
HIERARCHY = [(262144, "flat ring", 0.032660), (262144, "two-level", 0.031025), (1048576, "flat ring", 0.13392),
             (1048576, "two-level", 0.16840), (4194304, "flat ring", 0.55552), (4194304, "two-level", 0.37040)]


def hierarchy_rows(recorded):
    return [{"size_bytes": n, "algorithm": a, "time_s": t, "nodes": 2, "ranks_per_node": 2} for n, a, t in recorded]


def test_the_model_path_measures_this_process_and_assumes_the_link(tmp_path, monkeypatch):
    """What lesson 13 runs where neither SLURM nor the virtual cluster can: one process's compute, an assumed link."""
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    spec = {"dataset": "synthetic", "profile": "smoke", "progress": "none", "evaluate_points": False}
    compute = L.one_process_compute(64, 2, spec)
    assert 0 < compute < 1.0
    link = L.assumed_link("100mbit", alpha_s=50e-6)
    assert link["rate_bits_per_s"] == 1e8 and link["beta_s_per_byte"] == pytest.approx(8e-8)
    assert L.grad_bytes(spec) == 4 * 154_401  # NeuMF on the smoke set: 1000 users, 500 items, factors 32
    rows = L.predicted_layouts(compute, L.grad_bytes(spec), 64, (20e-6, 1e-9),
                               (link["alpha_s"], link["beta_s_per_byte"]))
    assert L.layout_comparisons(rows) == [] and L.model_comparisons([], rows) == []  # predictions: tables only


def test_exercise_13s_reference_is_the_lessons_model():
    from course_lib.checks import l13_multi_node as check

    def hiding_k(c, s, b, near, far, hidden_at, ks):  # the lesson's model, read at the first k that hides the link
        ratios = L.layout_ratios(L.predicted_layouts(c, s, b, near, far, ks))
        return next((k for k in ks if ratios[k] >= hidden_at), None)

    for _, *args in check.CASES:
        assert check.reference(*args, check.KS) == hiding_k(*args, check.KS)
    assert check.check_accumulation_to_hide(hiding_k).passed


# measure_placement on 4 virtual nodes at 100 Mbit/s, the smoke set (460,440 bytes in 4 shards): (bytes, seconds)
PLACED = {"shard per node": [(115112, 0.0357), (115112, 0.0705), (115112, 0.0825), (115104, 0.0816)],
          "whole set": [(460440, 0.0222), (460440, 0.1402), (460440, 0.1421), (460440, 0.1630)]}


def placement_result(placed=PLACED, source="virtual"):
    return {"rows": [{"placement": p, "node": f"node{k}", "bytes": b, "seconds": s}
                     for p, reads in placed.items() for k, (b, s) in enumerate(reads)],
            "total_bytes": 460440, "nodes": 4, "source": source}


def test_placement_prediction_is_the_serving_links_bytes():
    pred = P.predicted_placement(460440, 4, 100e6)
    summary = {r["placement"]: r for r in P.placement_summary(pred)}
    assert summary["shard per node"]["startup_s"] == pytest.approx(3 * 460440 / 4 * 8 / 100e6)
    assert summary["whole set"]["startup_s"] == pytest.approx(3 * 460440 * 8 / 100e6)
    assert P.placement_comparisons(pred) == []  # a prediction is its table's
    assert "PREDICTED (no cluster)" in P.placement_table(pred).title


# stage_node_loss on 2 virtual nodes x 1 rank, 40 steps, checkpoints every 10, node1 killed at 200 Mbit/s (loaded box)
STAGED = {"nodes": 2, "ranks_per_node": 1, "steps": 40, "checkpoint_every": 10, "lost_node": "node1",
          "killed_processes": 2, "step_at_loss": 10, "survivor_exit": 1, "noticed_s": 11.42,
          "message": "rank 0 on node0 lost its connection to node node1 (198.18.0.2), where rank 1 ran",
          "left_after": 0, "reference_s": 36.5, "resumed_s": 48.6, "resumed_steps": 40, "reference_steps": 40,
          "max_relative_difference": 0.0, "final_hr": {"uninterrupted": 0.2890, "resumed": 0.2890},
          "collective_timeout_s": 300}


def test_a_staged_node_loss_needs_two_nodes():
    from course_lib import cluster as vc

    one = vc.Cluster("x", (vc.Node("node0", "198.18.0.1", "eth0", "course-x-node0", "p0"),), "1gbit", 1e9,
                     "course-x-br", "/nonexistent")
    with pytest.raises(ValueError, match="nodes=2: a node loss needs 2 to 1 nodes of 'x'"):
        N.stage_node_loss(one, "/nonexistent")


# --------------------------------------------------------------------------- time to target per layout and k

# lesson 02's saved rows (full profile, a 2-core machine): steps to target per batch and rule
LESSON02 = {"profile": "full", "rows": [
    {"batch size": b, "steps to target": s} for b, s in ((256, 17406), (1024, 4356), (4096, 1500), (16384, None),
                                                         (65536, None), (256, 17406), (1024, 4356), (4096, 1020),
                                                         (16384, 285), (65536, 100))]}
POINTS = [(256, 17406), (1024, 4356), (4096, 1020), (16384, 285), (65536, 100)]
def _model(compute=10e-6):
    return L.predicted_layouts(compute, 617_604, 64, near=(20e-6, 1e-9), far=(100e-6, 8 / 100e6))


def test_lesson02s_curve_is_read_interpolated_and_refused_outside():
    points, line = L.lesson02_steps(LESSON02, "full")
    assert points == POINTS and "17,406 at 256" in line
    assert L.steps_at(points, 1024) == (4356.0, "measured")
    s, how = L.steps_at(points, 2048)
    assert how == "interpolated" and s == pytest.approx((4356 * 1020) ** 0.5)  # halfway in log-log
    s, how = L.steps_at(points, 128)
    assert s is None and how == "outside"
    assert L.steps_at(points, 131072)[0] is None
    # missing, another profile, too few points: the assumed ideal, said so in one line
    for saved in (None, {**LESSON02, "profile": "smoke"}, {"profile": "full", "rows": [{"batch size": 256,
                                                                                         "steps to target": 9}]}):
        points, line = L.lesson02_steps(saved, "full")
        assert points is None and "ASSUMED" in line
    assert L.steps_at(None, 512) == (8000.0, "assumed")


def test_time_to_target_is_the_steps_times_the_step():
    rows = L.ttt_rows(layout_rows(VIRTUAL_LAYOUTS, "virtual"), POINTS)
    r = next(r for r in rows if (r["layout"], r["k"]) == ("4 nodes x 1", 4))
    assert r["steps_how"] == "measured" and r["time_to_target_s"] == pytest.approx(4356 * 1024 / 5078)
    refused = L.ttt_rows([{**r, "global_batch": 128} for r in layout_rows(VIRTUAL_LAYOUTS, "virtual")], POINTS)
    assert all(r["time_to_target_s"] is None for r in refused)
    assert "—" in str(L.ttt_table(refused, L.ttt_rows(_model(), POINTS)))


def test_the_fit_recovers_a_set_link_and_not_one_it_was_not_set_to():
    # a clean sweep of a 100 Mbit/s link (2 ranks: n bytes each way), 3% timing noise alternating in sign
    sizes = [4**k for k in range(6, 13)]
    clean = [{"size_bytes": n, "time_s": (2e-4 + n * 8 / 100e6) * (1.03 if i % 2 else 0.97)}
             for i, n in enumerate(sizes)]
    fit = L.link_rate(clean)
    assert fit["sizes"] == 7 and fit["alpha_err_s"] > 0 and fit["rate_rel_err"] > 0
    near = L.link_rate(rows_of(SLURM_LINK))
    assert L.link_comparisons(near, fit, 100e6, "virtual")[0].outcome == compare.SAME
    assert L.link_comparisons(near, fit, 1e9, "virtual")[0].outcome == compare.LOWER
    assert L.link_comparisons(L.assumed_link("8gbit"), L.assumed_link("100mbit"), 100e6, "model") == []
    # on SLURM no rate was set: only the intercepts are compared
    assert [c.question for c in L.link_comparisons(near, fit, None, "slurm")] == [
        "per-message cost, links - loopback"]


def test_a_noisy_recorded_sweep_leaves_the_links_rate_unresolved():
    fit = L.link_rate(rows_of(VIRTUAL_LINK))
    assert 0.9e8 < fit["rate_bits_per_s"] < 1.1e8  # 101 Mbit/s recorded on a 100 Mbit/s link
    (rate, _) = L.link_comparisons(L.link_rate(rows_of(SLURM_LINK)), fit, 100e6, "virtual")
    assert rate.low < 1 < rate.high and rate.outcome == compare.UNRESOLVED  # a few sizes, one far off the line


def test_a_fit_without_a_bandwidth_term_has_no_rate_to_compare():
    flat = L.link_rate([{"size_bytes": n, "time_s": t} for n, t in ((4, 1e-4), (1024, 0.9e-4), (65536, 0.8e-4))])
    assert flat["rate_bits_per_s"] is None
    assert all("rate" not in c.question for c in L.link_comparisons(flat, flat, 100e6, "virtual"))


def test_layout_comparisons_say_where_accumulation_hides_the_link():
    virtual = L.layout_comparisons(layout_rows(VIRTUAL_LAYOUTS, "virtual"))
    # 4 nodes at 43% and 35% of one node's throughput at k = 1 and 8: the link sets the pace at both ends
    assert [c.question.split(",")[0] for c in virtual] == ["throughput at k=1", "throughput at k=8"]
    assert [c.outcome for c in virtual] == [compare.LOWER] * 2 and virtual[0].reference == pytest.approx(0.8)
    slurm = L.layout_comparisons(layout_rows(SLURM_LAYOUTS, "slurm"))
    assert [c.outcome for c in slurm] == [compare.HIGHER, compare.LOWER]  # 148% at k = 1, 65% at k = 8
    assert L.layout_comparisons(_model()) == []  # predictions carry no measurement


def repeated(far_share, spread=0.01):
    """Three runs per layout at k = 1 and 128: the nodes at ``far_share`` of one node's throughput at k = 128."""
    rows = []
    for layout, shares in (("1 node x 4", (1.0, 1.0)), ("4 nodes x 1", (0.48, far_share))):
        for k, s in zip((1, 128), shares):
            runs = [1.0 / s * (1 + spread * d) for d in (-1, 0, 1)]
            rows.append({"layout": layout, "k": k, "global_batch": 1024 * k, "step_s": sum(runs) / 3,
                         "samples_per_s": 3 * 1024 * k / sum(runs), "step_s_runs": runs, "source": "virtual"})
    return rows


def test_the_crossover_row_is_decided_by_its_interval():
    reached, close = L.layout_comparisons(repeated(0.97))[1], L.layout_comparisons(repeated(0.85))[1]
    assert reached.question.startswith("throughput at k=128") and reached.n == "3/3"
    assert reached.outcome == compare.HIGHER  # 97%: clear of 80% with the runs' spread and the resolution
    assert close.outcome == compare.UNRESOLVED  # 85%: within the timing resolution of 80%
    assert L.layout_comparisons(repeated(0.97, spread=0.2))[1].outcome == compare.UNRESOLVED  # runs far apart
    assert L.layout_comparisons(repeated(0.97))[0].outcome == compare.LOWER  # k = 1: 48%


def test_the_model_is_set_against_the_measured_steps_per_layout():
    measured = layout_rows(VIRTUAL_LAYOUTS, "virtual")
    same = [{**r, "source": "model"} for r in measured]
    comps = L.model_comparisons(measured, same)
    assert [c.outcome for c in comps] == [compare.SAME, compare.SAME] and comps[0].estimate == pytest.approx(1.0)
    half = [{**r, "step_s": r["step_s"] / 2, "source": "model"} for r in measured]
    assert all(c.outcome == compare.LOWER for c in L.model_comparisons(measured, half))


def test_the_tables_carry_the_ratios_the_compute_and_the_extrapolated_k():
    measured = layout_rows(VIRTUAL_LAYOUTS, "virtual")
    t = L.layout_table(measured, _model())
    assert [r["k"] for r in t.rows] == list(L.K_VALUES)  # every k of the model; measured where run
    assert [r["nodes / 1 node"] for r in t.rows] == ["43%", "41%", "31%", "35%"] + ["—"] * (len(L.K_VALUES) - 4)
    assert t.rows[0]["1 node ms"] == f"{256 / 4148 * 1e3:.1f}" and t.rows[-1]["nodes ms"] == "—"
    beyond = L.beyond_table(measured, _model()).rows
    assert beyond[0]["source"] == "measured" and beyond[1]["source"] == "model"
    got = L.extrapolated_k(_model(), L.HIDDEN_AT)
    assert got is None or beyond[1]["power of two"] == got[1]


def test_the_two_level_all_reduce_wins_on_a_slow_link_by_the_bytes_it_saves():
    assert H.hierarchy_bytes_ratio(2, 2) == pytest.approx(1.5)  # 3/4 of n out of a node against 1/2 of n
    (c,) = H.hierarchy_comparisons(hierarchy_rows(HIERARCHY))
    assert c.outcome == compare.LOWER and c.estimate == pytest.approx(0.37040 / 0.55552)
    fast = [(n, a, t * (2.0 if a == "two-level" else 1.0)) for n, a, t in HIERARCHY]
    assert H.hierarchy_comparisons(hierarchy_rows(fast))[0].outcome == compare.HIGHER
    even = [(n, a, 0.1) for n, a, _ in HIERARCHY]
    assert not H.hierarchy_comparisons(hierarchy_rows(even))[0].decided


def test_sharding_the_input_shortens_the_start_up_when_the_link_carries_it():
    result = placement_result()
    summary = {r["placement"]: r for r in P.placement_summary(result)}
    assert summary["shard per node"]["bytes_per_node"] == 115112
    assert summary["whole set"]["startup_s"] == 0.1630
    assert [r["of the set"] for r in P.placement_table(result).rows] == ["25%", "100%"]
    (c,) = P.placement_comparisons(result)
    assert c.outcome == compare.HIGHER and c.estimate == pytest.approx(0.1630 / 0.0825)
    same = {p: [(b, 0.05) for b, _ in reads] for p, reads in PLACED.items()}
    assert not P.placement_comparisons(placement_result(same))[0].decided


def test_a_resumed_run_that_matches_is_the_same_and_one_that_drifted_is_not():
    table = N.node_loss_table(STAGED)
    assert {r["what"]: r["value"] for r in table.rows}["notice s"] == 11.42
    assert [c.outcome for c in N.node_loss_comparisons(STAGED)] == [compare.SAME, compare.SAME]
    drifted = {**STAGED, "max_relative_difference": 3e-3, "final_hr": {"uninterrupted": 0.289, "resumed": 0.25}}
    assert [c.outcome for c in N.node_loss_comparisons(drifted)] == [compare.LOWER, compare.HIGHER]
    timed = {**STAGED, "interrupted_s": 5.0}
    cost_row = {r["what"]: r["value"] for r in N.node_loss_table(timed).rows}["cost s"]
    assert cost_row == pytest.approx(5.0 + 11.42 + 48.6 - 36.5)


def test_the_figure_draws_the_models_curve_and_the_measured_ends_with_their_intervals():
    import matplotlib

    matplotlib.use("Agg")
    curve = L.predicted_layouts(QUIET["compute_s_per_sample"], 3_784_068, 256, LOOPBACK, TWO_GBIT,
                                ks=L.k_grid(), overhead_s=QUIET["overhead_s"])
    assert L.k_grid()[0] == 1 and L.k_grid()[-1] == pytest.approx(4 * L.K_VALUES[-1])
    ax = L.plot_layouts(repeated(0.97), curve)
    assert len(ax.containers) == 2  # the intervals of the two crossover rows
    assert any("crossover" in t.get_text() for t in ax.get_legend().get_texts())
    assert len(L.plot_layouts([], curve).containers) == 0  # the model path: the curve alone
