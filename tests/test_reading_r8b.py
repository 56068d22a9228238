"""Readings fixed after the eighth full-profile read (#37, helper r8b: lessons 05, 06 and 07 of the run of
2026-12-02, /tmp/course13; /work/notes/read-full-run-8-r8b.md). Each test feeds the reading that run's own numbers,
which printed a statement its outputs contradict (or a figure its noise does not allow), and the opposite results."""

from test_mixed_precision import AMX_SERVER

from course_lib.lessons import l05_mixed_precision as L05

# the eighth run's lesson 05, cell 11: fastest of 3 interleaved repeats at batch 16384 (ms per step by phase)
EIGHTH_PHASES = {"fp32": {"sampling": 0.4155e-3, "forward_backward": 21.48e-3, "optimizer": 2.209e-3},
                 "bf16": {"sampling": 0.3951e-3, "forward_backward": 15.17e-3, "optimizer": 2.135e-3},
                 "fp16": {"sampling": 0.5284e-3, "forward_backward": 188.6e-3, "optimizer": 3.039e-3}}
EIGHTH_REPEATS = {"fp32": [5.74e5, 6.77e5, 5.86e5], "bf16": [7.73e5, 9.2e5, 9.11e5], "fp16": [7.27e4, 8.52e4, 8.22e4]}


def _speed(repeats=EIGHTH_REPEATS, phases=EIGHTH_PHASES):
    runs = {}
    for m, reps in repeats.items():
        prec = {"mode": m, "loss_scaling": "dynamic" if m == "fp16" else "none"}
        runs[m] = L05.SpeedRun(m, max(reps), sum(phases[m].values()), phases[m], prec, 30, 3)
    return L05.PrecisionSpeed(runs, repeats, 30, load=1.6)


def test_the_step_bound_keeps_the_figures_the_repeats_noise_allows():
    """r8b 05-1: cell 15 "forward+backward is 89% of fp32's step, so even free 16-bit math could make the step at most
    9.19x faster", beside "tolerance 13%" (fp32's repeats 5.74e5, 6.77e5, 5.86e5): 1/(1 - share) multiplies the
    share's noise by share/(1 - share), about 8 here, so the bound is known to one figure. Opposite: quiet repeats and
    a half-share step keep two figures."""
    text = L05.speedup_reading(_speed(), AMX_SERVER, "cpu", neumf_share=0.011, load_now=1.7)
    assert "9.19x" not in text and text.count("could make the step at most 9x faster") == 2, text
    assert "tolerance 13%" in text
    quiet = {m: [v[1], v[1] * 0.995, v[1] * 0.99] for m, v in EIGHTH_REPEATS.items()}
    half = {m: {**p, "optimizer": p["forward_backward"]} for m, p in EIGHTH_PHASES.items()}
    other = L05.speedup_reading(_speed(quiet, half), AMX_SERVER, "cpu", load_now=1.7)
    share = 21.48 / (0.4155 + 2 * 21.48)
    assert f"at most {1 / (1 - share):.2g}x faster" in other and "tolerance 3%" in other, other
    assert L05.amdahl_bound_text(0.5, 0.001) == "2x" and L05.amdahl_bound_text(0.9, 0.001) == "10x"
    assert L05.amdahl_bound_text(0.25, 0.004) == "1.33x"
