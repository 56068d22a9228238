"""Lesson 13's readings fixed after the twelfth full-profile run (2026-12-04, /tmp/course17/runs/20261204-012210; read
by r12g, /work/notes/read-full-run-12-r12g.md): each test feeds the reading that run's numbers (its
results/13_multi_node.json), which printed the statement the findings quote, and the opposite results."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_reading_agreement import disagreements  # noqa: E402

from course_lib.lessons import l13_multi_node as L  # noqa: E402

# the run's two fits (link_rate of the sweeps, 4 ranks), as saved: no intercept errors (alpha_err_s came later)
NEAR = {"alpha_s": 0.0009773271566521503, "beta_s_per_byte": 1.0573787093884618e-09,
        "fit": "5864.0 us + n / 0.63 GB/s", "rate_bits_per_s": 7565879593.534491}
FAR = {"alpha_s": 0.000516371107724716, "beta_s_per_byte": 8.327583387570065e-08,
       "fit": "3098.2 us + n / 0.00801 GB/s", "rate_bits_per_s": 96066285.11148837}
# the run's measured step times (s) per layout and k, and lesson 02's steps to target there
STEPS = {("1 node x 4", 1): 0.02818680170000789, ("1 node x 4", 2): 0.0332430170499947,
         ("1 node x 4", 4): 0.0456601760500007, ("1 node x 4", 8): 0.04941084194999803,
         ("4 nodes x 1", 1): 0.5367078766500072, ("4 nodes x 1", 2): 0.5397484976999977,
         ("4 nodes x 1", 4): 0.5498961903000008, ("4 nodes x 1", 8): 0.563036914600002}
POINTS = [(256, 17406), (1024, 4356), (4096, 1020), (16384, 285), (65536, 100)]
COMPUTE, GRAD_BYTES, MICRO = 4.1752470122977605e-05, 3_784_068, 256
# the run's staged node loss (results/13_multi_node.json "node_loss")
NODE_LOSS = {"checkpoint_every": 10, "collective_timeout_s": 300,
             "final_hr": {"resumed": 0.3135761618614197, "uninterrupted": 0.3135761618614197},
             "killed_processes": 2, "left_after": 0, "lost_node": "node1", "max_relative_difference": 0.0,
             "message": "rank 0 on node0 lost its connection to node node1 (198.18.0.2), where rank 1 ran",
             "nodes": 2, "noticed_s": 1.2783102880002843, "ranks_per_node": 1, "reference_s": 25.45628281099971,
             "reference_steps": 40, "resumed_s": 17.6111723060003, "resumed_steps": 40, "step_at_loss": 10,
             "steps": 40, "survivor_exit": 1}
LINK_EXTRA = [100, 0.1, FAR["rate_bits_per_s"] / 100e6, L.LINK_TOLERANCE]  # the set rate, the fit over it, 35 %


def _rows(steps=STEPS, source="virtual"):
    return [{"layout": layout, "k": k, "global_batch": 4 * MICRO * k, "samples_per_s": 4 * MICRO * k / s,
             "step_s": s, "source": source} for (layout, k), s in steps.items()]


def _model():
    return L.predicted_layouts(COMPUTE, GRAD_BYTES, MICRO, (NEAR["alpha_s"], NEAR["beta_s_per_byte"]),
                               (FAR["alpha_s"], FAR["beta_s_per_byte"]))


def _sweep(alpha_fit, beta_fit, wobble=()):
    """An all-reduce sweep on t = alpha + beta n, each time times 1 + wobble[i] (timing noise)."""
    sizes = [4096 * 4 ** i for i in range(7)]
    w = list(wobble) + [0.0] * (len(sizes) - len(wobble))
    return [{"size_bytes": n, "time_s": (alpha_fit + beta_fit * n) * (1 + e)} for n, e in zip(sizes, w)]


def test_the_links_intercept_is_read_against_the_loopback_one_not_called_the_same_cost():
    """read f12k 13-C1: "Its 516 us per message ... is what a message costs gloo's processes on this machine's cores,
    on loopback as across the links" under a table of 977.3 us on loopback and 516.4 us across the links. Both are
    quoted now, and called one cost only when they agree within their errors (alpha_error, jackknife)."""
    table = L.link_table(NEAR, FAR, 4, measured=True)
    said = L.link_verdict(FAR, 100e6, "virtual", near=NEAR)
    assert "on loopback as across the links" not in said and "agree within" not in said, said
    assert "977.3 us per message on loopback and 516.4 us across the links" in said
    assert "no errors to read them against" in said  # the run saved its fits without errors
    assert disagreements(said, table, extra=LINK_EXTRA) == []
    # the same intercepts with errors far smaller than their 461 us apart: they differ
    apart = L.link_verdict({**FAR, "alpha_err_s": 40e-6}, 100e6, "virtual", near={**NEAR, "alpha_err_s": 60e-6})
    assert "differ by more than their errors (+/- 60 and 40 us)" in apart and "not one per-message cost" in apart
    assert disagreements(apart, table, extra=LINK_EXTRA + [60, 40]) == []
    # opposite: errors that cover the gap, one cost
    one = L.link_verdict({**FAR, "alpha_err_s": 250e-6}, 100e6, "virtual", near={**NEAR, "alpha_err_s": 250e-6})
    assert "agree within their errors (+/- 250 and 250 us): not the link's latency" in one
    assert "one per-message cost of gloo's processes on this machine's cores" in one


def test_the_intercepts_error_comes_from_the_sweep():
    """read f12k 13-C1: the error the verdict reads is the fit's own (the fit redone without each size)."""
    exact = L.link_rate(_sweep(6 * 500e-6, 6 / 4 * 8 / 100e6), ranks=4)  # a 4-rank ring: 500 us per message
    assert abs(exact["alpha_s"] - 500e-6) < 1e-9 and exact["alpha_err_s"] < 1e-9
    doubled = L.link_rate(_sweep(6 * 1000e-6, 6 / 4 * 8 / 100e6), ranks=4)
    said = L.link_verdict(exact, 100e6, "virtual", near=doubled)
    assert "1000 us per message on loopback and 500 us across the links, differ by more than their errors" in said
    # opposite: noisy sweeps of one intercept: errors that cover the gap between their two fits
    a = L.link_rate(_sweep(6 * 500e-6, 6 / 4 * 8 / 100e6, (0.6, -0.4, 0.3)), ranks=4)
    b = L.link_rate(_sweep(6 * 500e-6, 6 / 4 * 8 / 100e6, (-0.3, 0.5, -0.2)), ranks=4)
    assert a["alpha_err_s"] > 0 and b["alpha_err_s"] > 0
    assert "agree within their errors" in L.link_verdict(a, 100e6, "virtual", near=b)
    assert L.alpha_error(_sweep(1e-3, 1e-9)[:2]) is None  # two sizes: no fit left to redo


def test_the_time_to_target_verdict_says_what_accumulation_cost_in_steps():
    """read f12k 13-H1: cell 12 says "Across k the table shows what accumulation costs in steps" and the verdict read
    none, where the steps fell 4,356 -> 539 from k=1 to k=8 (8.08x for 8x the batch): accumulation cost none."""
    measured, model = L.ttt_rows(_rows(), POINTS), L.ttt_rows(_model(), POINTS)
    said = L.ttt_verdict(measured, model)
    assert ("Across k, steps to target fell 4,356 -> 2,108 -> 1,020 -> 539 from k=1 to k=8 (2.07x, 4.27x and 8.08x "
            "fewer for 2x, 4x and 8x the batch): k-fold fewer or more at every k, so accumulation cost no steps "
            "here.") in said, said
    extra = [L.TTT_MARGIN, L.TTT_NOISE, 9, 6]
    extra += [x for rows in (measured, model) for x in (L.extrapolated_k(rows, 1 / (1 + L.TTT_MARGIN)) or ())]
    assert disagreements(said, L.ttt_table(measured, model, POINTS), extra=extra) == []
    assert "accumulation cost no steps here" in L.ttt_verdict([], model)  # the model path reads the same steps
    # opposite: lesson 02 past perfect scaling (4x the batch, 2.18x fewer steps): 84 % more samples at k=4
    past = [(256, 17406), (1024, 4356), (4096, 2000), (16384, 1500), (65536, 1400)]
    m2, p2 = L.ttt_rows(_rows(), past), L.ttt_rows(_model(), past)
    worse = L.ttt_verdict(m2, p2)
    assert "fewer than k-fold, so accumulation cost steps: at k=8 " in worse and "cost no steps" not in worse, worse
    assert L.ttt_steps_reading(m2).endswith("% more samples to the target than at k=1")
    # within the noise band: 5 % more samples at k=4
    near = [(256, 17406), (1024, 4356), (4096, 1143), (16384, 285), (65536, 100)]
    assert "within the 10% noise band, so accumulation cost about no steps here" in L.ttt_steps_reading(
        L.ttt_rows(_rows(), near))
    assert L.ttt_steps_reading([]) == ""


def test_the_node_loss_verdict_says_what_the_lost_node_cost():
    """read f12k 13-H2: cell 0 asks "what a lost node costs"; the verdict gave the 1.3 s to notice and the bitwise
    resume, not the resubmitted job's 17.6 s for steps 10-40 against 25.5 s for all 40 uninterrupted."""
    said = L.node_loss_verdict(NODE_LOSS)
    assert "the same result, as a checkpoint promises.\n" in said  # the verdict as before, then the cost's line
    cost = said.split("\n")[-1]
    assert cost.startswith("What the loss cost: the resubmitted job took 17.6 s for steps 10-40 (30 steps, its "
                           "start-up included) against 25.5 s for all 40 uninterrupted; steps redone: those the killed "
                           "job ran past step 10's checkpoint, fewer than the 10 between checkpoints;"), cost
    assert "killed job's time to the kill (not recorded in this result), 1.3 s to notice" in cost
    # opposite: a stage that recorded the killed job's time, killed late (step 30 of 40): the whole cost
    late = {**NODE_LOSS, "step_at_loss": 30, "resumed_s": 9.0, "interrupted_s": 21.0, "kill_after_checkpoint_s": 0.02}
    cost = L.node_loss_cost(late)
    assert "9.0 s for steps 30-40 (10 steps" in cost
    assert "(it was killed 0.02 s after that checkpoint was written)" in cost
    assert ("in all, the killed job's 21.0 s to the kill, 1.3 s to notice and the resubmission's 9.0 s make 31.3 s "
            "against 25.5 s uninterrupted: the loss cost +5.8 s.") in cost


def test_the_layout_and_hierarchy_tables_print_the_verdicts_precision():
    """read f12k 13-S2: the layout table's "563" beside "536.7" and the time-to-target table's "563.04"; the hierarchy
    table's "2185" where its verdict says "2184.8 ms"."""
    table = str(L.layout_table(_rows(), _model()))
    assert "563.04" in table and "536.71" in table and " 563 " not in table
    rows = [{"size_bytes": 16777216, "algorithm": a, "time_s": t, "nodes": 2, "ranks_per_node": 2}
            for a, t in (("flat ring", 2.1848108450003565), ("two-level", 1.4809134540000741))]
    hier = L.hierarchy_table(rows)
    assert "2184.8" in str(hier) and "1480.9" in str(hier) and "2185 " not in str(hier)
    assert disagreements(L.hierarchy_verdict(rows), hier, extra=[L.hierarchy_bytes_ratio(2, 2), 0.15]) == []
