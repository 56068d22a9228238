"""The lessons' diagrams and widgets: each renders from the learner's objects, and what it
computes (fp16's regions, the two SGD paths) is right."""

import math

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

from course_lib import diagrams, widgets  # noqa: E402
from course_lib.models.ncf import NeuMF  # noqa: E402
from course_lib.optim.schedules import lr_at  # noqa: E402


def _close(fig):
    import matplotlib.pyplot as plt

    fig.canvas.draw()  # a figure that cannot be drawn fails here, not in the learner's notebook
    plt.close(fig)


@pytest.mark.parametrize("world_size", [1, 2, 8])
def test_launch_diagram(world_size):
    fig = diagrams.launch_diagram(world_size)
    assert f"world_size={world_size}" in "".join(t.get_text() for t in fig.axes[0].texts)
    _close(fig)
    with pytest.raises(ValueError, match="world_size"):
        diagrams.launch_diagram(0)


def test_neumf_diagram_is_sized_from_the_model():
    model = NeuMF(1000, 500, factors=16, layers=(64, 32, 16))
    fig = diagrams.neumf_diagram(model)
    text = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "1000 x 16" in text and "500 x 32" in text and "64 -> 32 -> 16" in text
    total = sum(p.numel() for p in model.parameters())
    assert f"{total:,} parameters" in fig.axes[0].get_title()
    _close(fig)


def test_one_big_step_matches_k_small_steps_only_while_lr_x_curvature_x_k_is_small():
    def ends(**kw):
        fig, t = diagrams.small_steps_vs_big_step(**kw)
        _close(fig)
        (sx, sy), (bx, by) = [(r["end x"], r["end y"]) for r in t.rows]
        start = (2.0, 2.0)
        return math.hypot(sx - bx, sy - by) / math.hypot(sx - start[0], sy - start[1]), (sx, sy), (bx, by)

    # the gap is second order: lr x curvature x k = 0.004 leaves the end points 0.1-1% of the way apart
    gap, _, _ = ends(k=4, lr=1e-3)
    assert gap < 0.01
    # lr x curvature x k = 3.2: the big step overshoots the minimum that the small steps approach
    gap, small, big = ends(k=8, lr=0.4, curvature=(1.0, 1.0))
    assert gap > 0.5 and math.hypot(*big) > 2 * math.hypot(*small)


def test_fp16_fractions_follow_ieee_rounding():
    # log2 values: -30 and -25 (half the smallest subnormal: ties to even, 0) flush; -24 and -15
    # are subnormal; -14 and 15 normal; log2(65520) and 17 overflow
    v = np.array([-30, -25, -24, -15, -14, 15, math.log2(65520.0), 17, -np.inf])
    fr = diagrams.fp16_fractions(v)
    assert fr == pytest.approx({"zero": 2 / 8, "subnormal": 2 / 8, "normal": 2 / 8, "inf": 2 / 8})
    for x, kind in ((2.0 ** -25, "zero"), (2.0 ** -24, "subnormal"), (2.0 ** -15, "subnormal"),
                    (2.0 ** -14, "normal"), (65519.0, "normal"), (65520.0, "inf")):
        stored = float(torch.tensor(x).half())
        actual = "zero" if stored == 0 else "inf" if math.isinf(stored) else \
            "subnormal" if stored < 2.0 ** -14 else "normal"
        assert actual == kind, x
        assert diagrams.fp16_fractions([math.log2(x)])[kind] == 1.0
    # a scale of 2^10 moves -30 and -25 out of zero and 15 into overflow
    fr = diagrams.fp16_fractions(v, 2.0 ** 10)
    assert fr["zero"] == 0 and fr["inf"] == 3 / 8


def test_number_line_and_loss_scaling_explorer_render():
    mags = np.random.default_rng(0).normal(-20, 4, 5000)
    fig, fr = diagrams.fp16_number_line(mags, 2.0 ** 8)
    assert fr == diagrams.fp16_fractions(mags, 2.0 ** 8) and "2^8" in fig.axes[0].get_title()
    _close(fig)
    fig, fr2 = widgets.loss_scaling_explorer(mags, scale=2.0 ** 8, interactive=False)
    assert fr2 == fr
    _close(fig)
    with pytest.raises(ValueError, match="scale"):
        diagrams.fp16_number_line(mags, 0)


def test_kinds_of_parallelism():
    fig = diagrams.kinds_of_parallelism(p=4, layers=4)
    assert [ax.get_title() for ax in fig.axes] == [f"{k} parallel" for k in diagrams.KINDS]
    _close(fig)


def test_schedule_builder_uses_the_course_schedule_and_the_scaling_rule():
    fig, t = widgets.schedule_builder(peak_lr=0.5, warmup_steps=10, total_steps=100, decay="cosine",
                                      interactive=False)
    assert {r["step"]: r["lr"] for r in t.rows} == {
        s: lr_at(s, peak_lr=0.5, warmup_steps=10, total_steps=100, decay="cosine") for s in (0, 5, 10, 55, 100)}
    _close(fig)
    fig, t = widgets.schedule_builder(base_lr=0.001, base_batch=256, batch=4096, rule="sqrt", warmup_steps=0,
                                      total_steps=10, decay="constant", interactive=False)
    assert t.rows[0]["lr"] == pytest.approx(0.004)  # sqrt(16) x 0.001
    _close(fig)


def test_the_interactive_widgets_build_and_redraw_without_a_frontend(capsys):
    # a person's JupyterLab: the controls are built and the first drawing made (display() prints here)
    assert widgets.schedule_builder(base_lr=0.001, base_batch=256, batch=3000, interactive=True) == (None, None)
    mags = np.random.default_rng(0).normal(-20, 4, 1000)
    assert widgets.loss_scaling_explorer(mags, interactive=True) == (None, None)
    assert "VBox" in capsys.readouterr().out
