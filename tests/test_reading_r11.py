"""Readings fixed after the eleventh full-profile read (#37: lessons 00-06 of the fresh-clone run of head 3d94f8d).
Each test feeds the reading the numbers that printed a statement its outputs contradict or hide, and the opposite."""

from test_reading_agreement import disagreements
from test_reading_r10a import RUN_THROUGHPUT, _throughput
from test_reading_r10c import TENTH, TENTH_WEAK, _rec

from course_lib import ladder
from course_lib.lessons import l01_baseline as L01
from course_lib.lessons import l06_data_parallel as L06


def test_the_throughput_trend_inside_the_tables_own_uncertainty_is_not_read_as_a_peak():
    """r11 01-H1: "samples/s stopped growing: it peaked at batch 16384 (546,119) and the largest batch ran at 0.86x of
    that peak; ... every ratio here is uncertain by at least 1.22x": a drop of 1.17x inside the 1.22x the same reading
    gives. Opposite: a drop beyond it is a peak, and with no inverted steps the trend is read as before."""
    text = L01.throughput_reading(_throughput())
    assert "stopped growing: it peaked" not in text, text
    assert ("samples/s peaked at batch 16384 (546,119) and the largest batch ran at 0.86x of that peak, less than the "
            "uncertainty below: these runs cannot tell whether it stopped growing") in text, text
    assert "uncertain by at least 1.22x" in text
    assert disagreements(text, _throughput(), extra=(20,)) == []
    deep = list(RUN_THROUGHPUT)
    deep[-1] = (65536, 9, 300000, 218.0)  # 0.55x of the peak: beyond 1.22x
    assert "samples/s stopped growing: it peaked at batch 16384" in L01.throughput_reading(_throughput(deep))
    flat = [(256, 100, 40000, 6.4), (1024, 100, 100000, 10.2), (4096, 100, 110000, 8.0)]  # 1.10x gained, spread 1.28x
    read = L01.throughput_reading(_throughput(flat))
    assert "cannot tell whether samples/s is flattening" in read and "samples/s is flattening:" not in read, read
    steady = [(256, 100, 40000, 6.4), (1024, 100, 100000, 10.2), (4096, 100, 110000, 37.2)]
    assert "samples/s is flattening: the last step up gained less than 20 %" in L01.throughput_reading(
        _throughput(steady))


def test_a_negative_step_fit_intercept_is_not_read_as_a_step_that_costs_nothing():
    """r11 06-C1: "each step costs 0 ms whatever the batch (optimizer step over every parameter, launches)", the fit's
    intercept (-1.95 ms) read as 0, while lesson 05 timed the optimizer step alone at 3.99 ms. Here one rank 42.3 ms
    per step and two 31.6 ms, 12.3 ms of it the timed all-reduce: the line's intercept is -1.8 ms. Opposite: the
    tenth run's rows (intercept 4.3 ms) keep the split."""
    two = _rec(16384, 285 * 16384 / 9.0, 9.0, 0.9406, 3.5, 9.0)
    rows = L06.scaling_rows({1: TENTH[1], 2: two}, {1: TENTH_WEAK[1], 2: two})
    text = L06.scaling_reading(rows)
    assert "costs 0 ms" not in text and "read as 0" not in text and "Compute would be" not in text, text
    step1, step2 = 16384 / TENTH[1]["samples_per_s"], 16384 / two["samples_per_s"]
    comm2 = 3.5 / 9.0 * step2
    fixed = 2 * (step2 - comm2) - step1
    slope = (step1 - (step2 - comm2)) / 8192
    assert fixed < 0
    assert (f"an intercept below zero ({1e3 * fixed:.3g} ms per step), which no cost per step can be") in text, text
    assert "these runs resolve no fixed cost" in text and "with more sizes" in text
    assert disagreements(text, L06.scaling_table(rows), extra=[1e3 * fixed, 1e6 * slope, 1e3 * comm2]) == [], text
    kept = L06.scaling_reading(L06.scaling_rows(TENTH, TENTH_WEAK))
    assert "each step costs 4.3 ms whatever the batch" in kept and "below zero" not in kept, kept


def test_a_rung_decided_in_its_lesson_does_not_sit_beside_a_level_paced_ratio_unexplained():
    """r11 05-H1: the ladder's '+bf16' cell read "1x (±62%) in paced seconds; decided by bf16 against fp32 on the same
    setting in its lesson: bf16 lower on every seed": a ratio that looks level beside a win. Opposite: a paced ratio
    whose ± leaves out 1 keeps the short cell."""
    decided = "bf16 against fp32 on the same setting in its lesson: bf16 lower on every seed"
    cell = ladder._below_cell({"vs_previous": 1.0, "vs_previous_uncertainty": 0.62, "decided": decided,
                               "previous_name": "+sqrt scaling"})
    assert cell.startswith("1x (±62%) in paced seconds against '+sqrt scaling': the pace drift alone leaves that "
                           "unresolved (1 lies within its ±); decided in its own lesson, both at one pace, by "), cell
    assert cell.endswith(decided)
    sure = ladder._below_cell({"vs_previous": 2.0, "vs_previous_uncertainty": 0.1, "decided": decided})
    assert sure == f"2x (±10%) in paced seconds; decided by {decided}", sure


def test_advice_to_accumulate_more_says_how_much_more():
    """r11 13-H: "even at k=8 ... accumulate more than k=8, or compress the gradients" with no size, while the
    lesson's own model (``hiding_k`` over more ks) put it at k=128. A line through each layout's step times over k
    gives the k; on the model's rows, which are such lines, it is ``hiding_k``'s. Opposite: where the far layout's
    compute per k grows faster than the near one's, no k gets there, and the reading says so."""
    from course_lib.lessons import l13_multi_node as L13

    near, far = (20e-6, 1e-9), (100e-6, 8 / 100e6)
    model = L13.predicted_layouts(10e-6, 617_604, 64, near=near, far=far)
    k, k2, batch = L13.extrapolated_k(model)
    big = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    assert k2 == L13.hiding_k(10e-6, 617_604, 64, near, far, ks=big) and 2 ** (k2.bit_length() - 2) < k <= k2
    assert batch == 4 * 64 * k2
    reading = L13.layout_verdict(model)
    assert f"accumulate more than k=8 (a line through each layout's step times over k gets there at about k={k:.3g}: " \
        f"the next power of two, k={k2}, is a global batch of {batch:,}, which must still train" in reading, reading
    rows = []
    for lay, c, a in (("1 node x 4", 1e-3, 0.05), ("4 nodes x 1", 2e-3, 0.15)):  # far: dearer per k
        for kk in (1, 2, 4, 8):
            rows.append({"layout": lay, "k": kk, "global_batch": 256 * kk, "samples_per_s": 256 * kk / (a + c * kk),
                         "step_s": a + c * kk, "source": "virtual"})
    assert L13.extrapolated_k(rows) is None
    assert "gives no k that gets there" in L13.layout_verdict(rows)


def test_the_tuned_sweep_says_which_batches_best_lr_was_never_bracketed():
    """r10 11-H7 (tenth full run, seen again in the eleventh): at batch 65,536 the fewest steps came at the grid's
    largest lr after its one extension, and the fit took them as that batch's tuned steps with nothing said.
    Opposite: a best lr inside its grid adds nothing."""
    from course_lib.lessons import l11_batch_size_science as L11

    def row(b, f, steps, chosen=False):
        return {"batch size": b, "x rule lr": f, "lr": 1e-3 * f, "steps to target": steps, "capped at": None,
                "wall_s": 1.0, "chosen": chosen}

    edge = [row(4096, 0.5, 1200), row(4096, 1.0, 1020, True), row(4096, 2.0, 1100),
            row(65536, 0.5, 140), row(65536, 1.0, 100), row(65536, 2.0, 90), row(65536, 4.0, 80, True)]
    text = L11.sweep_cost_sentence(edge)
    assert ("Not bracketed: batch 65,536 at its grid's largest lr (x4 the rule's): that sweep ended on an edge, so a "
            "lr beyond it was never tried and the steps there are an upper bound") in text, text
    assert "4,096 at" not in text
    inside = edge[:3] + [row(65536, 0.5, 140), row(65536, 1.0, 100, True), row(65536, 2.0, 120)]
    assert "Not bracketed" not in L11.sweep_cost_sentence(inside)


def test_the_bracket_figure_labels_its_bars_with_the_tables_fractions():
    """r11 12-S: the Hyperband figure wrote "12" on the bar of 1/8 (12.5 of 100 trials) beside the brackets table's
    "1/8"; it now writes the fraction as the table does."""
    import matplotlib

    matplotlib.use("Agg")
    from course_lib.lessons import l12_hyperparameter_search as L12
    from course_lib.plots import plot_hyperband_brackets

    brackets = L12.hyperband_brackets(27, 1, 2)
    fig = plot_hyperband_brackets(brackets, max_resource=27)
    labels = {t.get_text() for t in fig.axes[0].texts}
    assert {"all", "1/2", "1/4", "1/8", "1/16"} <= labels and "12" not in labels, labels
    table = str(L12.brackets_table(brackets, 1.0))
    assert "1/8" in table and "1/16" in table


def test_one_sign_at_every_size_is_not_called_more_than_noise_where_the_leads_are_close():
    """Lessons 08-13 re-run on the twelfth run's results after f12f: "the tree was faster at all 7 sizes below the
    measured crossover (... 1866 against 1906 us at 64 KiB, 4160 against 4163 us at 512 KiB ...), by 1.0x to 2.8x:
    the same sign at every size, not noise": a 0.07 % lead among them. Opposites: every lead clear (the twelfth
    run's 1.6x-3.6x), and every lead close."""
    from course_lib.lessons import l08_collectives as L08

    rerun = [1006 / 361, 842 / 423, 1906 / 1866, 4163 / 4160, 1945 / 979, 2071 / 1112, 2140 / 1021]
    text = L08._sign_clause(rerun)
    assert text == ("the same sign at every size, by more than 10% at 5 of them, not noise; at the other 2 by less, "
                    "too close for one timing each to tell"), text
    assert L08._sign_clause([1.6, 2.4, 3.6]) == "the same sign at every size, not noise"
    assert "does not tell from noise" in L08._sign_clause([1.001, 1.05])


def test_the_extrapolated_k_is_written_as_a_count():
    """Lesson 13 re-run on the twelfth run's results: "gets there at about k=9.24e+03". Opposite: a k under 1,000
    keeps its three significant figures."""
    from course_lib.lessons import l13_multi_node as L13

    rows = []
    for lay, a, c in (("1 node x 4", 0.02, 0.002), ("4 nodes x 1", 1.0, 0.0021)):
        for kk in (1, 2, 4, 8):
            rows.append({"layout": lay, "k": kk, "global_batch": 1024 * kk, "samples_per_s": 1024 * kk / (a + c * kk),
                         "step_s": a + c * kk, "source": "virtual"})
    k, k2, batch = L13.extrapolated_k(rows)
    assert k > 1000 and f"gets there at about k={k:,.0f}: the next power of two, k={k2}" in L13.layout_verdict(rows)
    assert "e+0" not in L13.layout_verdict(rows)
