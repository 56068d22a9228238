"""Readings of lessons 08-10 against the full run of 2026-12-03 (read r10d, #37): each test feeds that run's
numbers and an opposite case."""
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

from course_lib.lessons import l08_collectives as L08  # noqa: E402
from course_lib.lessons import l10_model_parallelism as L10  # noqa: E402
from test_reading_agreement_i37h import _memory_outs  # noqa: E402
from test_reading_r8c import _row as _l09_row  # noqa: E402

FP32_BYTES = 3784068
# lesson 08 cell 37 of the run: NeuMF's methods on 2 ranks (bytes per step, median step in ms, steps lost of 128)
NEUMF = [("fp32 all-reduce", FP32_BYTES, 12.78, 0), ("PowerSGD rank 1", 80532, 21.86, 0),
         ("PowerSGD rank 4", 320196, 27.31, 0), ("top-0.1% + error feedback", 11364, 27.19, 0),
         ("top-0.1%, no error feedback", 11364, 24.93, 0), ("local SGD H=1", FP32_BYTES, 16.28, 0),
         ("local SGD H=4", 946017, 8.032, 0), ("local SGD H=16", 236504, 8.158, 0),
         ("delayed averaging", FP32_BYTES, 12.33, 0)]


def _neumf(rows=NEUMF, steps=128):
    def messages(method, b):
        if method.startswith("local SGD"):  # the weights, every H steps
            return [("all_reduce", FP32_BYTES)] * (steps * b // FP32_BYTES)
        return [("all_reduce", b)] * steps
    return [{"model": "NeuMF", "method": m, "bytes_per_step": b, "bytes_ratio": FP32_BYTES / b, "step_s": ms / 1e3,
             "steps_lost": lost, "steps": steps, "steady_steps": steps, "messages": messages(m, b)}
            for m, b, ms, lost in rows]


def _p2_line(summary):
    rows = L08.compression_verdict_rows(summary, L08.links(86.2e-6, 1 / 2.70e9), ps=(2, 64))
    lines = L08.compression_verdict(rows).splitlines()
    return rows, next(line for line in lines if line.startswith("NeuMF on this machine (measured), p = 2:"))


def test_compression_verdict_on_this_machine_at_the_runs_ranks_says_what_was_measured():
    # 08-C1: "NeuMF on this machine (measured), p = 2: delayed averaging pays most ...: 1.22x faster" while the
    # runs, on these very 2 ranks, measured delayed averaging at 12.33 ms, fp32 at 12.78 and local SGD H=4 at 8.032
    rows, line = _p2_line(_neumf())
    assert "delayed averaging pays most" in line, line  # the model's answer, as before
    assert "measured on these 2 ranks, local SGD H=4 1.59x (its step 8.032 against fp32's 12.78 ms" in line, line
    assert "delayed averaging 1.04x" in line and "the prediction did not hold here" in line, line
    table = str(L08.compression_verdict_table(rows, named_only=True))
    assert "measured speedup at p = 2" in table and "local SGD H=4" in table and "1.591" in table
    # the quoted links and p = 64 are not what ran: no measured clause there
    other = [ln for ln in L08.compression_verdict(rows).splitlines() if "p = 64" in ln or "(quoted)" in ln]
    assert other and not any("measured on these" in ln for ln in other)


def test_compression_verdict_says_the_prediction_held_where_the_measured_steps_agree():
    # the opposite: delayed averaging's step hid its all-reduce here (8.1 ms), the others as slow as fp32 or slower
    agree = [(m, b, 8.1 if m == "delayed averaging" else max(ms, 12.78), lost) for m, b, ms, lost in NEUMF]
    _, line = _p2_line(_neumf(agree))
    assert "measured on these 2 ranks, delayed averaging 1.58x" in line, line
    assert line.endswith(": the prediction held"), line


def _sharded_case(measured, predicted):
    """Lesson 10's sharded runs over DDP, ZeRO-1 and FSDP2 steps (s), measured and predicted (bytes and state
    predicted exactly): the ranks' outputs and the predictions."""
    outs = _memory_outs(measured["FSDP2"], measured["DDP"])
    for o in outs:
        o["ZeRO-1"] = {**o["ZeRO-1"], "step_s": measured["ZeRO-1"]}
    o = outs[0]
    pred = {name: SimpleNamespace(state_bytes=sum(o[name][k] for k in ("parameters", "gradients", "optimizer_state")),
                                  sent_bytes=o[name]["sent_bytes"], step_s=s) for name, s in predicted.items()}
    return outs, pred


def _model_reading(measured, predicted):
    """Lesson 10's model_reading over DDP, ZeRO-1 and FSDP2 steps (s), measured and predicted."""
    return L10.model_reading(*_sharded_case(measured, predicted))


def test_the_model_reading_says_an_over_prediction_is_not_the_overhead_it_leaves_out():
    # 10-C1: the takeaway put "off by DDP +10%, ZeRO-1 +17%, FSDP2 -24%" down to "(it leaves out the per-step
    # overhead)": leaving out a cost can only under-predict, and two of the three were over
    run = _model_reading({"DDP": 0.059, "ZeRO-1": 0.0527, "FSDP2": 0.0836},
                         {"DDP": 0.0647, "ZeRO-1": 0.0619, "FSDP2": 0.0635})
    assert "off by DDP +10%, ZeRO-1 +17%, FSDP2 -24% (DDP and ZeRO-1 over, although" in run, run
    assert "can only make it under-predict" in run and "; FSDP2 under)." in run, run
    # the opposite: all under, the overhead it leaves out is the reason given (r8c's sentence, unchanged)
    under = _model_reading({"DDP": 0.059, "ZeRO-1": 0.0527, "FSDP2": 0.0836},
                           {"DDP": 0.050, "ZeRO-1": 0.045, "FSDP2": 0.0635})
    # read f12h 10-H1: the overhead and any under-pricing of the operations together, not the overhead alone
    assert "(all under: the per-step overhead the model leaves out" in under and "over, although" not in under, under


def _conv(sync, stashed, unstashed):
    return ([{"p": 1, "mode": "synchronous", "held_out_loss": sync}]
            + [{"p": p, "mode": "stashed", "held_out_loss": v} for p, v in stashed.items()]
            + [{"p": p, "mode": "not stashed", "held_out_loss": v} for p, v in unstashed.items()])


def test_the_staleness_reading_says_what_dropping_the_stash_cost():
    # 10-H1: the markdown promises the held-out loss "stashed and not"; the reading gave the stashed only
    run = L10.staleness_reading(_conv(0.34452, {2: 0.35529, 4: 0.37201}, {2: 0.35511, 4: 0.373349}),
                                {2: 6.6e-7, 3: 3.1e-6, 4: 3.1e-6}, True)
    assert ("Dropping the stash: held-out loss p = 2: 0.3551 against 0.3553 (-0.1%), p = 4: 0.3733 against "
            "0.3720 (+0.4%) stashed; within 1% at every depth, it cost nothing measurable here.") in run, run
    # the opposite: the unstashed run at p = 4 ends 5% worse
    worse = L10.staleness_reading(_conv(0.3445, {2: 0.3553, 4: 0.3720}, {2: 0.3551, 4: 0.3906}), {}, True)
    assert "stashed; it cost convergence at p = 4." in worse and "nothing measurable here" not in worse, worse


def _servers(sync_curve):
    from course_lib.parallel import staleness

    def rec(label, mode, straggler, updates, loss, ttt, curve):
        return {"label": label, "mode": mode, "straggler_rank": 2 if straggler else None, "delay_s": 0.02,
                "updates": updates, "updates_per_s": updates / 2.0, "max_staleness": 27 if mode == "async" else 0,
                "mean_staleness": 2.0 if mode == "async" else 0.0, "final_loss": loss, "time_to_target_s": ttt,
                "curve": {"loss": curve}}
    # lesson 08 cell 34 of the run: the four parameter-server runs (curves: their best and final losses)
    return staleness.server_reading([
        rec("sync", "sync", False, 743, 1.0746, 0.1395, sync_curve),
        rec("async", "async", False, 1869, 1.5185, 0.06868, [2.4, 0.97, 1.5185]),
        rec("sync, rank 2 +20 ms", "sync", True, 88, 0.9300, 1.138, [2.4, 1.2, 0.9300]),
        rec("async, rank 2 +20 ms", "async", True, 1651, 1.5186, 0.05956, [2.4, 0.965, 1.5186])])


def test_the_server_reading_says_the_synchronous_loss_rose_too():
    # 08-H1: "its loss rose again after it reached the target (best 0.965, final 1.519)" of the asynchronous run
    # alone, while the synchronous run without the straggler rose from about 0.91 to 1.075 (the figure)
    run = _servers([2.4, 0.912, 1.0746])
    assert "(best 0.965, final 1.519), so which run is ahead depends on when they are read" in run, run
    assert ("; so did the synchronous run's without the straggler (best 0.912, final 1.075 after 743 updates): the "
            "loss climbs with updates in either schedule, and the final losses set 1651 asynchronous updates against "
            "88 synchronous ones.") in run, run
    # the opposite: the synchronous run ended at its best
    assert "so did the synchronous" not in _servers([2.4, 1.0, 1.0746])


def test_the_time_to_target_title_says_its_step_times_are_the_models():
    # 09-H2: "(step times measured here; ...)" over the model's step column: 25.05 ms at batch 16384, measured 50.16
    from course_lib.lessons import l09_performance_model as L09

    for fitted in (None, (2000.0, 4096.0)):
        title = L09.time_to_target_title(fitted)
        assert "measured here" not in title and "step times: the model's" in title, title
    assert "illustrative" in L09.time_to_target_title(None)
    assert "lesson 02's fit" in L09.time_to_target_title((2000.0, 4096.0))


# lesson 09 cell 17 of the run: the comparison table, (model, batch, ranks, predicted ms, measured ms)
L09_RUN = [_l09_row(*r) for r in [
    ("neumf", 1024, 1, 10.28, 8.518), ("neumf", 1024, 2, 16.78, 13.78), ("neumf", 4096, 1, 13.57, 15.12),
    ("neumf", 4096, 2, 18.74, 14.65), ("neumf", 16384, 1, 26.61, 50.16), ("neumf", 16384, 2, 26.35, 35.33),
    ("bert-mini", 8, 1, 227.6, 231), ("bert-mini", 8, 2, 211.2, 170.6), ("bert-mini", 16, 1, 394.5, 430),
    ("bert-mini", 16, 2, 281.8, 288.9), ("bert-mini", 32, 1, 762.4, 858.5), ("bert-mini", 32, 2, 435.3, 558.4)]]


def test_the_l09_verdict_says_whose_repeatability_the_calibration_steps_measure():
    # 09-H1: "-1% and -2% apart: this machine's repeatability" from two bert-mini steps, where NeuMF has none (and its
    # tiny step, 9.124 ms, measured slower than its batch-1024 step, 8.518 ms)
    from course_lib.lessons import l09_performance_model as L09

    text = L09.verdict(L09_RUN, goal=0.25)
    assert ("the two timings were -1% and -2% apart: the repeatability of bert-mini's steps; neumf has no "
            "calibration step here, so its repeatability is not measured): 22% (within") in text, text
    # the opposite: every model has its calibration steps, which then do stand for this machine
    both = L09_RUN + [_l09_row("neumf", 8, 1, 9.0, 9.1), _l09_row("neumf", 16, 2, 12.0, 12.2)]
    assert "apart: this machine's repeatability)" in L09.verdict(both, goal=0.25)


def _topk(no_ef_lost):
    """Lesson 08 cell 37's NeuMF top-k rows: final losses per seed and held-out HR@10, fp32's too."""
    def row(method, losses, metrics, lost):
        return {"model": "NeuMF", "method": method, "final_losses": losses, "metrics": metrics, "metric_name": "HR@10",
                "steps_lost": lost, "steps": 128}
    return [row("fp32 all-reduce", [0.4732, 0.4658, 0.4684], [0.3551, 0.3649, 0.36], 0),
            row("top-0.1% + error feedback", [0.4798, 0.4712, 0.4732], [0.3609, 0.3667, 0.364], 0),
            row("top-0.1%, no error feedback", [0.4929, 0.4864, 0.4876], [0.3579, 0.3687, 0.362], no_ef_lost)]


def test_the_topk_reading_says_whether_the_held_out_metric_showed_it():
    # 08-H2: "without error feedback top-k ends measurably worse" from the training loss, where the held-out HR@10
    # the lesson's steps lost read lost 0 of 128 steps with and without
    run = L08.topk_reading(_topk(0), "NeuMF")
    assert "ends measurably worse in training loss" in run, run
    assert ("; on the held-out metric it did not show (HR@10 0.3579..0.3687 without, 0.3609..0.3667 with, 0 and 0 "
            "of 128 steps lost).") in run, run
    # the opposite: without error feedback it also lost held-out steps
    lossy = L08.topk_reading(_topk(9), "NeuMF")
    assert "; held-out too (HR@10 0.3579..0.3687 without, 0.3609..0.3667 with, 9 and 0 of 128 steps lost)" in lossy


def test_the_l08_verdict_names_which_of_tree_and_butterfly_won_the_smallest_message():
    # 08-S2: "the tree/butterfly won the smallest message" where, at 1 KiB on the links at p = 4, the tree took
    # 2463 us and recursive doubling 4587 (the ring 8423)
    from course_lib.comm.bench import CollectivesResult
    from test_collectives import HOST_SIZES, HOST_US, LINK_SIZES, _links, _rows

    host = CollectivesResult(_rows(HOST_SIZES, HOST_US))

    def last(rd, tree):
        us = {4: {"ring": [8423, 6217, 6695, 10710, 25920], "recursive doubling": [rd, 2712, 5088, 9149, 36830],
                  "tree": [tree, 2548, 2630, 11530, 75370]}}
        return L08.verdict(host, 86.2e-6, 1 / 2.70e9, links=_links(LINK_SIZES, us)).splitlines()[-1]
    assert last(4587, 2463).startswith("Measured on the independent links at p = 4: the tree won the smallest message")
    # the opposite: the butterfly faster at 1 KiB
    assert "p = 4: recursive doubling (the butterfly) won the smallest" in last(2000, 2463)


def _ring_tree(ring_gbps, size=16 * 2**20):
    """ring_tree_rows-like rows from the ring's GB/s sent in all, per p (lesson 08 cell 22's ring-tree table)."""
    return [{"p": p, "size_bytes": size, "measured": 1.0, "links_model": 0.5, "shared_model": 1.0, "ring_GBps": g,
             "tree_GBps": 1.0, "ring_busbw_GBps": g / p} for p, g in ring_gbps]


RUN_HOST = _ring_tree([(2, 1.584), (3, 2.187), (4, 2.149)])
RUN_LINKS = _ring_tree([(2, 0.2463), (3, 0.3688), (4, 0.4855)], 2 * 2**20)
RUN_CLUSTER = {"nodes": 4, "rate": "1gbit"}


def test_the_busbw_reading_says_whether_busbw_stayed_the_same_across_p():
    # 08-H3: the bandwidth table at p = 2 alone (busbw = algbw x 1) under a takeaway that busbw "makes all-reduce
    # figures comparable across P"; the run's ring moved 0.792/0.729/0.537 GB/s per rank on one host, 0.123/0.123/0.121
    # on the 1gbit links
    text = L08.busbw_reading(RUN_HOST, RUN_LINKS, RUN_CLUSTER).splitlines()
    assert text[0].startswith("On one host the ring's busbw at the largest size was 0.792/0.729/0.537 GB/s at p = "
                              "2/3/4: 1.47x apart, not comparable across p here: the ranks share one memory"), text
    assert text[1] == ("On 4 virtual nodes' 1gbit links the ring's busbw at the largest size was 0.123/0.123/0.121 "
                       "GB/s at p = 2/3/4: within 10%, comparable across p, as the convention means where each rank "
                       "has a link of its own."), text
    # the opposite: a host whose busbw held, and links whose did not
    held = L08.busbw_reading(_ring_tree([(2, 1.6), (3, 2.3), (4, 3.1)]), _ring_tree([(2, 0.25), (3, 0.2), (4, 0.2)]),
                             RUN_CLUSTER).splitlines()
    assert "within 10%, comparable across p, as the convention means." in held[0], held
    assert "not comparable across p here." in held[1], held
    assert "one p only" in L08.busbw_reading(RUN_HOST[:1])


def test_the_busbw_reading_quotes_the_ring_tree_table():
    from test_reading_agreement import disagreements

    table = L08.ring_tree_table(RUN_HOST, RUN_LINKS, RUN_CLUSTER)
    assert "ring busbw (GB/s)" in table.columns
    for host, links in ((RUN_HOST, RUN_LINKS), (_ring_tree([(2, 1.6), (3, 2.3), (4, 3.1)]), None)):
        said = L08.busbw_reading(host, links, RUN_CLUSTER)
        table = L08.ring_tree_table(host, links, RUN_CLUSTER)
        assert disagreements(said, table, extra=[100 * L08.BUSBW_ALIKE, 1]) == [], said  # 10%; "1gbit"


def test_the_far_scaling_lines_keep_two_significant_figures():
    # 09-S1: "efficiency 0.00" (strong) and "0.01" (weak) at p = 1024 on this machine's link
    from course_lib.lessons import l09_performance_model as L09

    far = {"strong, this machine's link": {"p": 1024, "efficiency": 0.0031, "global batch": 16384},
           "weak, NVLink (quoted)": {"p": 1024, "efficiency": 0.5212, "global batch": 16777216}}
    lines = L09.far_scaling_lines(far).splitlines()
    assert lines[0].endswith("p =  1024: efficiency 0.0031, global batch 16384"), lines
    assert lines[1].endswith("efficiency 0.52, global batch 16777216"), lines


def test_the_l08_verdict_says_where_the_crossover_tables_other_p_disagree():
    # 08-H4: the verdict quoted p = 4 (1.8 MiB measured, 1.5 MiB modelled) alone, where the crossover table gave
    # never against 5.8 MiB at p = 2 and 828.0 KiB against 128.6 KiB at p = 3
    from course_lib.comm.bench import CollectivesResult
    from test_collectives import _rows

    sizes = [4 ** k for k in range(1, 13)]  # 4 B .. 16 MiB, the run's sweep
    ring = {2: [1706, 1549, 2550, 5013, 21185], 3: [3435, 4358, 4374, 7507, 30682], 4: [7349, 6549, 8513, 6872,
                                                                                       9087, 7184, 14680, 46850]}
    rd = {2: [635, 619, 1353, 6595, 19442], 3: [2075, 1192, 4947, 10023, 31168], 4: [2001, 2192, 2828, 2742, 2813,
                                                                                     5694, 16850, 61840]}

    def result(rd2):
        us = {}
        for p in (2, 3, 4):  # small sizes: recursive doubling well ahead; the run's times from the table's tail on
            r, d = ring[p], (rd2 if p == 2 else rd[p])
            us[p] = {"ring": [5000] * (12 - len(r)) + r, "recursive doubling": [1000] * (12 - len(d)) + d,
                     "tree": [3000] * 12}
        return CollectivesResult(_rows(sizes, us))
    alpha, beta, gamma = 8.6172e-05, 3.6996e-10, 2.8458e-11  # the run's ping-pong and additions
    first = L08.verdict(result(rd[2]), alpha, beta, gamma).splitlines()[0]
    assert "puts their crossover at 1.5 MiB; at p = 2, 3 the crossover table's measured and modelled sizes are more " \
           "than one step of the sweep apart (never against 5.8 MiB, 828.0 KiB against 128.6 KiB)" in first, first
    # the opposite: at p = 2 the ring pulls ahead from 4 MiB on (near the model's 5.8 MiB): only p = 3 is named
    first = L08.verdict(result([635, 619, 1353, 4000, 25000]), alpha, beta, gamma).splitlines()[0]
    assert "at p = 3 the crossover table's" in first and "never against" not in first, first


def test_the_l10_verdict_gives_every_ranks_strip():
    # 10-S1: "each rank sent 216 bytes per exchange for a strip of 1512 bytes", where rank 1's strip was 1296
    from test_reading_agreement_i37h import _bubble, _memory_outs, _mesh, _tensor_outs

    def halo(strips):
        return [{"rank": r, "out": 0.0, "input_grad": 0.0, "weight_grad": 0.0, "halo_bytes_per_exchange": 216,
                 "strip_bytes": s} for r, s in enumerate(strips)]

    def line(strips):
        text = L10.verdict(_tensor_outs(0.0), [_bubble(2, 8, 0.15, 0.12)], _memory_outs(0.08, 0.06), halo(strips),
                           _mesh(0.0))
        return next(ln for ln in text.splitlines() if ln.startswith("Halo exchange"))
    assert line([1512, 1296]).endswith("each rank sent 216 bytes per exchange, for strips of 1512 and 1296 bytes.")
    assert line([1512, 1512]).endswith("for strips of 1512 bytes.")  # the opposite: strips alike, one figure


def test_the_lesson06_fit_line_sets_the_fit_against_the_ping_pong():
    # 08-S1: "lesson 06's all-reduce fit, read as a ring on 2 ranks: alpha = 727.3 us, 1/beta = 0.45 GB/s" under the
    # ping-pong's 86.2 us and 2.70 GB/s, with no word on the difference
    saved = {"allreduce_alpha_s": 0.00145466, "allreduce_beta_s_per_byte": 2.2192e-09, "world_size": 2}
    line = L08.lesson06_fit_line(saved, 8.6172e-05, 3.6996e-10)
    assert line.startswith("lesson 06's all-reduce fit, read as a ring on 2 ranks: alpha = 727.3 us, 1/beta = "
                           "0.45 GB/s: 8.4x the ping-pong's alpha and 0.17x its bandwidth, so the library's"), line
    # the opposite: a fit that matches the ping-pong
    assert "within 1.5x of the ping-pong's" in L08.lesson06_fit_line(saved, 7.0e-4, 2.0e-9)
    assert "has not saved" in L08.lesson06_fit_line(None, 8.6e-5, 3.7e-10)


def test_the_staleness_reading_prints_no_negative_zero():
    # 10-S2 (the smoke copy of the fix above): "0.6323 against 0.6325 (-0.0%)"
    text = L10.staleness_reading(_conv(0.6321, {2: 0.6325, 4: 0.6331}, {2: 0.6323, 4: 0.6327}), {}, True)
    assert "-0.0%" not in text and "p = 2: 0.6323 against 0.6325 (0.0%)" in text, text
    assert "p = 4: 0.6327 against 0.6331 (-0.1%)" in text, text  # the opposite: a difference that shows keeps its sign
