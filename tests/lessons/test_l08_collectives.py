"""Lesson 08 (course_lib.lessons.l08_collectives, l08_compression, l08_prices): crossovers measured and modelled,
ring against tree on one host and on independent links, the parameter server's straggler, and the compression
section's summary, prices and comparisons, fed recorded and simulated results."""

import math

import pytest

from course_lib import comm, compare
from course_lib.comm.bench import CollectivesResult
from course_lib.lessons import l08_collectives as study
from course_lib.lessons import l08_compression as cstudy
from course_lib.lessons import l08_prices as prices

from _model_collectives import ALPHA, BETA, GAMMA
from _model_collectives import model_collectives


# one host (the full profile, 4 gloo ranks over loopback: the last two sizes of 4 B .. 16 MiB) and 4 virtual nodes
# on 1 Gbit/s links (course_lib.cluster; sizes 1 KiB .. 2 MiB), as recorded
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


def _outcomes(comps):
    return {c.question: c.outcome for c in comps}


def test_measured_crossover_finds_the_model_crossover_on_model_data():
    result = model_collectives()
    for p in (2, 4):
        measured, model = study.measured_crossover(result, p), study.model_crossover(p, ALPHA, BETA, GAMMA)
        assert model is not None and measured == pytest.approx(model, rel=0.5)  # interpolated between sizes
    table = study.crossover_table(result, ALPHA, BETA, GAMMA)
    assert [r["p"] for r in table.rows] == [2, 4]
    bw = study.bandwidth_table(result, 4)
    assert all(r["ring/backend"] == pytest.approx(1.0) for r in bw.rows)
    ext = study.extrapolation_table(study.links(ALPHA, BETA), ps=(8, 1024))
    assert {r["cheapest"] for r in ext.rows} <= {"ring", "recursive doubling", "tree", "rabenseifner"}
    assert len(ext.rows) == 2 * 2 * (1 + len(comm.QUOTED_INTERCONNECTS))


def test_a_crossover_within_the_sweeps_step_is_not_called_misplaced():
    comps = study.crossover_comparisons(model_collectives(), ALPHA, BETA, GAMMA, "model data")
    assert comps and not any(c.decided for c in comps)  # the model's own times: never "higher" or "lower"
    # a model off by far more than a step (alpha 100x too small) is called misplaced
    off = study.crossover_comparisons(model_collectives(), ALPHA / 100, BETA, GAMMA, "model data")
    assert any(c.outcome == compare.HIGHER for c in off)


def test_no_crossover_is_said_as_such():
    result = model_collectives(sizes=(4, 16, 64))  # all latency-bound: recursive doubling ahead throughout
    assert study.measured_crossover(result, 4) is None
    assert study.model_crossover(2, ALPHA, BETA, GAMMA, small="tree") == 0.0  # the ring cheaper at every size
    assert study.measured_crossover(result, 2, small="tree") == 0.0
    assert study.crossover_table(result, ALPHA, BETA, GAMMA).rows[0]["tree model"] == "every size"
    # "every size" and "never" have no ratio to the model: no comparison, the table shows them
    assert all("p = 4" not in c.question or "tree" in c.question
               for c in study.crossover_comparisons(result, ALPHA, BETA, GAMMA, "x"))


def test_lesson_spec_sizes_and_groups():
    full, smoke = study.lesson_spec("full", 4), study.lesson_spec("smoke", 3)
    assert full["groups"] == [[0, 1], [0, 1, 2], [0, 1, 2, 3]] and smoke["groups"] == [[0, 1], [0, 1, 2]]
    assert max(full["sizes"]) == 16 * 2**20 and max(smoke["sizes"]) <= 2**12
    with pytest.raises(ValueError):
        study.lesson_spec("full", 1)


def test_a_shaped_links_rate_comes_from_its_largest_message():
    alpha, beta = study.link_alpha_beta(_links()["pingpong"])
    assert 50e-6 < alpha < 100e-6 and 1.0e9 < 8 / beta < 1.15e9  # the 1 Gbit/s link, not the burst's 2.5


def test_bytes_counted_on_the_schedules():
    n = 4 * 2**20
    for p in (2, 3, 4):  # ring and tree send the same bytes in all; on one shared bandwidth they tie
        assert study.schedule_bytes("ring", p, n)[1] == study.schedule_bytes("tree", p, n)[1] == 2 * (p - 1) * n
    # the bytes each waits for where every rank has its own link: the closed forms' bandwidth terms
    assert study.schedule_bytes("ring", 4, n)[0] == pytest.approx(2 * 3 / 4 * n)
    assert study.schedule_bytes("tree", 4, n)[0] == pytest.approx(2 * 2 * n)
    assert study.schedule_bytes("tree", 2, n)[0] == pytest.approx(2 * n)


def test_ring_against_tree_follows_the_links_on_links_and_the_shared_memory_on_one_host():
    host = study.ring_tree_rows(CollectivesResult(_rows(HOST_SIZES, HOST_US)))
    links = study.ring_tree_rows(study.links_collectives(_links()))
    assert [round(r["measured"], 2) for r in host] == [1.14, 0.80, 1.14]
    assert [round(r["measured"], 2) for r in links] == [0.61, 0.36, 0.41]
    assert [round(r["links_model"], 3) for r in links] == [0.5, 0.333, 0.375]
    on_links = [c.outcome for c in study.ring_tree_comparisons(links, "links")]  # [vs links, vs shared]
    on_host = [c.outcome for c in study.ring_tree_comparisons(host, "host")]
    assert on_links[0] != compare.HIGHER and on_links[1] == compare.LOWER  # far below a tie
    assert on_host[0] == compare.HIGHER and on_host[1] != compare.LOWER  # far above the links' prediction
    assert study.ring_tree_comparisons([], "x") == []
    table = study.ring_tree_table(CollectivesResult(_rows(HOST_SIZES, HOST_US)), _links())
    assert len(table.rows) == 6


def test_links_comparisons_on_both_paths():
    host = CollectivesResult(_rows(HOST_SIZES, HOST_US))
    off = study.links_comparisons({"ran": False, "why": "the virtual cluster needs root"}, host)
    assert off == study.ring_tree_comparisons(study.ring_tree_rows(host), "host")
    on = study.links_comparisons(_links(), host)
    links = study.links_collectives(_links())
    tied = study.tied_round_comparisons(links, "links")
    assert tied and on[-len(tied):] == tied  # the ring and the tree both take 2 rounds at p = 2
    assert len(on) > len(off) + len(tied)  # the links' ring-tree rows and crossovers
    table = study.crossover_table(links, *study.link_alpha_beta(_links()["pingpong"]), seen=True)
    assert [r["p"] for r in table.rows] == [2, 3, 4] and table.rows[0]["tree model"] == "every size"


def _tied(ring_over_tree):
    """p = 2, where the ring and the tree both take 2 rounds: the tree's times and the ring's at 5 sizes, the
    ring never catching up (no crossover)."""
    sizes = [2**k for k in range(10, 15)]
    tree = [100.0, 120.0, 150.0, 200.0, 300.0]
    us = {2: {"ring": [t * f for t, f in zip(tree, ring_over_tree)], "tree": tree,
              "recursive doubling": [t / 10 for t in tree]}}
    return CollectivesResult(_rows(sizes, us))


def test_tied_rounds_are_decided_across_the_sizes_below_the_crossover():
    steady = study.tied_round_comparisons(_tied([2.0, 2.1, 1.9, 2.05, 2.0]), "x")
    assert [c.outcome for c in steady] == [compare.HIGHER]  # one sign at every size, far beyond one timing
    mixed = study.tied_round_comparisons(_tied([2.0, 0.6, 1.5, 0.7, 1.8]), "x")
    assert [c.outcome for c in mixed] == [compare.UNRESOLVED]  # the winner flips from size to size
    close = study.tied_round_comparisons(_tied([1.01, 1.02, 1.01, 1.03, 1.02]), "x")
    assert [c.outcome for c in close] == [compare.UNRESOLVED]  # the same sign, but within one timing's movement


def test_small_messages_want_few_rounds_and_large_ones_the_ring_on_the_links():
    got = study.small_large_comparisons(study.links_collectives(_links()), "links")
    assert [c.outcome for c in got] == [compare.HIGHER, compare.LOWER]
    # the tree was the faster rival at the smallest size, recursive doubling at the largest
    assert got[0].estimate == pytest.approx(8939 / 4087) and got[1].estimate == pytest.approx(26060 / 37200)
    host = study.small_large_comparisons(CollectivesResult(_rows(HOST_SIZES, HOST_US)), "one host")
    assert host[1].outcome != compare.LOWER  # on one host the ring did not win the largest size clearly


def test_busbw_across_p():
    rows = [{"p": 2, "ring_busbw_GBps": 1.0}, {"p": 4, "ring_busbw_GBps": 1.02}]
    assert study.busbw_comparisons(rows, "x")[0].outcome == compare.SAME  # within 25% even with one timing each
    rows[1]["ring_busbw_GBps"] = 0.3
    assert study.busbw_comparisons(rows, "x")[0].outcome == compare.LOWER
    assert study.busbw_comparisons(rows[:1], "x") == []


def test_the_straggler_slows_synchronous_rounds_and_not_asynchronous_updates():
    def rec(mode, straggler, ups):
        return {"mode": mode, "straggler_rank": 2 if straggler else 0, "updates_per_s": ups}
    records = [rec("sync", False, 524.7), rec("async", False, 1127), rec("sync", True, 43.88), rec("async", True, 1122)]
    got = study.server_comparisons(records)
    assert [c.outcome for c in got] == [compare.LOWER, compare.UNRESOLVED]
    assert study.server_comparisons(records[:2]) == []


def test_alpha_beta_table_adds_lesson_06s_fit_where_saved():
    assert len(study.alpha_beta_table(None, 50e-6, 1e-9).rows) == 1
    saved = {"allreduce_alpha_s": 2 * 50e-6, "allreduce_beta_s_per_byte": 1e-9, "world_size": 2}
    assert len(study.alpha_beta_table(saved, 50e-6, 1e-9).rows) == 2


def test_links_spec():
    spec = study.links_spec("smoke", 2)
    assert spec["groups"] == [[0, 1]] and len(spec["sizes"]) == 2
    full = study.links_spec("full", 4)
    assert [len(g) for g in full["groups"]] == [2, 3, 4] and max(full["pingpong_sizes"]) == 4 * 2**20
    with pytest.raises(ValueError, match="nodes"):
        study.links_spec("full", 1)


def test_measure_on_links_says_why_not(monkeypatch):
    from course_lib import cluster as vc

    monkeypatch.setattr(vc, "unavailable_reason", lambda: "the virtual cluster needs root (test)")
    assert study.measure_on_links(study.links_spec("smoke", 2), 2) == {
        "ran": False, "why": "the virtual cluster needs root (test)"}


def test_measure_on_links_says_which_step_was_refused(monkeypatch):
    from course_lib import cluster as vc

    def refused(*a, **k):
        raise vc.ClusterError("step 'create the bridge's network namespace' was refused: Operation not permitted")

    monkeypatch.setattr(vc, "unavailable_reason", lambda: None)  # root, programs there, yet a step refused
    monkeypatch.setattr(vc, "up", refused)
    got = study.measure_on_links(study.links_spec("smoke", 2), 2)
    assert got["ran"] is False and "was refused: Operation not permitted" in got["why"]


# --------------------------------------------------------------------------- sending fewer bytes


def _run(method, seed, losses, bytes_per_step, metric=0.5, messages=None, step_s=0.01, curve=None, step_times=None):
    return {"model": "M", "method": method, "seed": seed, "losses": losses, "bytes_per_step": bytes_per_step,
            "metric": metric, "metric_name": "HR@10", "higher_is_better": True, "steady_steps": len(losses),
            "step_s": step_s, "step_times": step_times or [step_s] * len(losses),
            "curve": curve if curve is not None else [(len(losses), metric)],
            "messages": messages if messages is not None else [("all_reduce", bytes_per_step)] * len(losses)}


CURVE = [(2, 0.1), (4, 0.3), (6, 0.4), (8, 0.5)]  # a reference's held-out HR every 2 of its 8 steps


def test_final_loss_and_steps_lost():
    ref = [10.0 - i for i in range(8)]  # 10 .. 3; trailing mean over 2 steps
    assert cstudy.smoothed(ref)[-1] == pytest.approx(3.5)
    assert cstudy.smoothed(ref)[:2] == [10.0, 9.5]
    assert cstudy.steps_lost(CURVE, 0.5, higher_is_better=True) == 0  # as good as the end
    assert cstudy.steps_lost(CURVE, 0.3, higher_is_better=True) == 4  # the reference got there at step 4 of 8
    assert cstudy.steps_lost(CURVE, 0.45, higher_is_better=True, tolerance=0.1) == 0  # within the seed noise
    assert cstudy.steps_lost(CURVE, 0.05, higher_is_better=True) == 6  # worse than its first point: at most N - 2
    assert cstudy.steps_lost(CURVE, 0.9, higher_is_better=True) == 0  # better than the reference ever was
    losses = [(2, 5.0), (4, 4.0), (8, 3.0)]  # a held-out loss: lower is better
    assert cstudy.steps_lost(losses, 4.0, higher_is_better=False) == 4
    assert cstudy.steps_lost(losses, 2.5, higher_is_better=False) == 0
    with pytest.raises(ValueError, match="no evaluated steps"):
        cstudy.steps_lost([], 1.0, higher_is_better=True)


def test_steps_lost_reads_between_the_last_two_evaluations():
    """BERT-mini's fp32 run, held-out MLM loss every 4 of its 32 steps, ending at 5.143..5.172 (seed spread
    0.029); local SGD H=4 ending at 5.434 lies 17% of the way from step 28's 5.49 to step 32's 5.16."""
    curve = [(4, 7.9), (8, 7.2), (12, 6.7), (16, 6.3), (20, 6.0), (24, 5.8), (28, 5.49), (32, 5.16)]
    assert cstudy.steps_lost(curve, 5.434, higher_is_better=False, tolerance=0.029) == 3  # reached at step 28.7
    assert cstudy.steps_lost(curve, 5.546, higher_is_better=False, tolerance=0.029) == 4  # at 27.3
    assert cstudy.steps_lost(curve, 5.17, higher_is_better=False, tolerance=0.029) == 0  # within the seed spread
    assert cstudy.steps_lost(curve, 5.0, higher_is_better=False) == 0  # better than fp32 ever was
    assert cstudy.steps_lost(curve, 9.0, higher_is_better=False) == 28  # worse than its first evaluation
    assert cstudy.steps_lost(CURVE, 0.45, higher_is_better=True) == 1  # halfway from step 6 to step 8
    ref = [_run("fp32 all-reduce", s, [6.0] * 32, 1000, metric=m, step_s=0.09,
                curve=[(c, v + d) for c, v in curve[:-1]] + [(32, m)]) for s, m, d in ((0, 5.16, 0.0),
                                                                                   (1, 5.143, -0.017))]
    h4 = _run("local SGD H=4", 0, [6.2] * 32, 250, metric=5.434, step_s=0.063)
    for r in ref + [h4]:
        r["higher_is_better"] = False
    summary = {r["method"]: r for r in cstudy.compression_summary(ref + [h4])}
    assert summary["local SGD H=4"]["steps_lost"] == 3 and summary["local SGD H=4"]["eval_every"] == 4


def _topk_rows(shift, seeds=(0, 1, 2)):
    rows = []
    for seed in seeds:
        base = [2.0 - 0.1 * i + 0.05 * seed for i in range(8)]
        rows += [_run("fp32 all-reduce", seed, base, 1000), _run(cstudy.EF_YES, seed, base, 3),
                 _run(cstudy.EF_NO, seed, [x + shift + 0.002 * seed for x in base], 3)]
    return rows


def test_error_feedback_is_decided_seed_by_seed():
    worse = cstudy.error_feedback_comparisons(cstudy.compression_summary(_topk_rows(0.3)))
    assert worse[0].outcome == compare.HIGHER  # without it, the loss ends higher on every seed
    same = cstudy.error_feedback_comparisons(cstudy.compression_summary(_topk_rows(0.0)))
    assert same[0].outcome in (compare.SAME, compare.UNRESOLVED) and not same[0].decided
    one = cstudy.error_feedback_comparisons(cstudy.compression_summary(_topk_rows(0.3, seeds=(0,))))
    assert one == []  # one seed: no spread to tell noise from effect


def test_staleness_against_the_simulation():
    ref = [1.0] * 8
    summary = cstudy.compression_summary([_run("fp32 all-reduce", 0, ref, 1000, metric=0.5, curve=CURVE),
                                          _run("delayed averaging", 0, ref, 1000, metric=0.4)])
    rows = [{"tau": "0", "steps to target": 100}, {"tau": "1", "steps to target": 120}]
    (c,) = cstudy.staleness_comparisons(summary, rows, sim_eval_every=5)
    assert c.estimate == pytest.approx(2 / 8 - 0.2) and c.outcome == compare.UNRESOLVED  # evaluations 2 steps apart
    assert cstudy.staleness_comparisons(summary, rows[:1] + [{"tau": "1", "steps to target": None}], 5) == []


def test_measured_speedup_includes_the_steps_lost():
    n = 100e6
    curve = [(s, s / 16) for s in range(1, 17)]
    fast = [0.010, 0.011, 0.0105, 0.0102] * 4
    ref = [0.020, 0.021, 0.0205, 0.0202] * 4
    summary = cstudy.compression_summary([
        _run("fp32 all-reduce", 0, [1.0] * 16, n, step_s=0.02, metric=1.0, curve=curve, step_times=ref),
        _run("local SGD H=16", 0, [1.0] * 16, n / 16, step_s=0.01, metric=1.0, step_times=fast),
        _run("PowerSGD rank 4", 0, [1.0] * 16, n / 100, step_s=0.01, metric=4 / 16, step_times=fast)])
    h16, power = cstudy.speedup_comparisons(summary)  # in the summary's order of methods
    assert h16.outcome == compare.HIGHER  # half the step time, no steps lost
    assert power.outcome == compare.LOWER  # the same step, but 12 of 16 steps lost


def _verdict_summary(lost_steps):
    curve = [(s, s / 16) for s in range(1, 17)]  # HR rises by 1/16 a step
    n = 100e6
    return cstudy.compression_summary([
        _run("fp32 all-reduce", 0, [1.0] * 16, n, step_s=0.02, metric=1.0, curve=curve),
        _run("PowerSGD rank 4", 0, [1.0] * 16, n / 100, step_s=0.02, metric=(16 - lost_steps) / 16),
        _run("local SGD H=16", 0, [1.0] * 16, n / 16, step_s=0.01, metric=1.0, messages=[("all_reduce", n)])])


def test_the_prices_say_compression_pays_on_a_slow_link_and_not_on_a_fast_one():
    links = {"slow": (50e-6, 1 / 1e9), "fast": (5e-6, 1 / 450e9)}
    rows = prices.compression_verdict_rows(_verdict_summary(2), links, ps=(2,))
    best = {(r["link"], r["method"]): r["speedup"] for r in rows}
    assert best[("slow", "PowerSGD rank 4")] > 1.05 > best[("fast", "PowerSGD rank 4")]
    assert ("M", "slow", "PowerSGD rank 4") in prices.best_methods(rows)
    lossy = prices.compression_verdict_rows(_verdict_summary(15), {"slow": links["slow"]}, ps=(2,))
    assert prices.best_methods(lossy) == {("M", "slow", "local SGD H=16")}  # 15 of 16 steps lost do not pay
    with pytest.raises(ValueError, match="fp32"):
        prices.compression_verdict_rows([r for r in _verdict_summary(2) if r["method"] != "fp32 all-reduce"], links)
    assert all(math.isfinite(r["speedup"]) for r in rows)
    table = prices.compression_verdict_table(rows, best_only=True)
    assert {(r["link"], r["method"]) for r in table.rows} == {(k[1], k[2]) for k in prices.best_methods(rows)}


def test_quoted_links_reduce_at_their_gpus_memory_bandwidth():
    from course_lib.perf.peaks import REFERENCE_PEAKS

    links = study.links(ALPHA, BETA, GAMMA)
    assert links[study.MEASURED_LINK] == (ALPHA, BETA, GAMMA)
    quoted = [k for k in links if k != study.MEASURED_LINK]
    assert len(quoted) == len(comm.QUOTED_INTERCONNECTS)
    for name in quoted:
        assert links[name][2] == pytest.approx(3 / REFERENCE_PEAKS[study.LINK_GPU].memory_bandwidth)


def _floored(fp32_metrics, floor=0.4):
    rows = []
    for seed, m in enumerate(fp32_metrics):
        base = [2.0 - 0.1 * i + 0.05 * seed for i in range(8)]
        rows += [_run("fp32 all-reduce", seed, base, 1000, metric=m), _run(cstudy.EF_YES, seed, base, 3),
                 _run(cstudy.EF_NO, seed, [x + 0.3 for x in base], 3)]
    for r in rows:
        r.update(floor=floor, floor_name="popularity ranking", start=0.38)
    return cstudy.compression_summary(rows)


def test_methods_are_judged_only_where_fp32_cleared_the_floor():
    past = _floored([0.50, 0.51, 0.49])
    (floor,) = cstudy.floor_comparisons(past)
    assert floor.outcome == compare.HIGHER
    assert cstudy.error_feedback_comparisons(past)[0].outcome == compare.HIGHER
    below = _floored([0.35, 0.36, 0.34])
    assert cstudy.floor_comparisons(below)[0].outcome == compare.LOWER
    gated = cstudy.error_feedback_comparisons(below) + cstudy.speedup_comparisons(below)
    assert gated and all(c.outcome == compare.UNRESOLVED and c.basis == cstudy.NOT_PAST_FLOOR for c in gated)
    assert [r["held-out"] for r in cstudy.compression_table(below).rows][-2:] == ["HR@10 0.38", "HR@10 0.4"]


def test_a_gpu_link_is_priced_with_the_modelled_compute_not_this_machines():
    links = {"here": (50e-6, 1 / 1e9, 1 / 40e9), "gpu": (5e-6, 1 / 450e9, 1e-12)}
    rows = prices.compression_verdict_rows(_verdict_summary(2), links, ps=(2,), modelled={"gpu": {"M": 1e-3}})
    assert {r["compute_s"] for r in rows if r["link"] == "gpu"} == {1e-3}
    assert {r["compute_from"] for r in rows if r["link"] == "gpu"} == {"model"}
    assert {r["compute_s"] for r in rows if r["link"] == "here"} == {0.01}  # the fastest measured step
    ref = cstudy.method_row(_verdict_summary(2), "M", "fp32 all-reduce")
    with_gamma = prices.predicted_step_s(ref, 0.0, links["here"], 2)
    assert with_gamma > prices.predicted_step_s(ref, 0.0, links["here"][:2], 2)  # the additions cost time


def test_gpu_compute_comes_from_lesson_09s_model_of_the_gpu_each_quoted_link_joins():
    spec = cstudy.compression_spec("smoke")
    spec["models"] = ["neumf"]
    links = study.links(ALPHA, BETA, GAMMA)
    got = prices.gpu_compute_s(spec, links)
    assert set(got) == set(links) - {study.MEASURED_LINK}
    assert len({v["NeuMF"] for v in got.values()}) == 1  # one GPU, one step
    assert all(v["NeuMF"] > 0 for v in got.values())
