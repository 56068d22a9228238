"""When the course draws live widgets and when static figures (course_lib.widgets.widgets_available)."""

import pytest

from course_lib import widgets


@pytest.mark.parametrize("env, expected", [
    ({"COURSE_PROFILE": "smoke"}, False),                            # CI, papermill: static
    ({"COURSE_PROFILE": "smoke", "COURSE_WIDGETS": "live"}, True),   # the browser test: a frontend is there
    ({"COURSE_WIDGETS": "static"}, False),
    ({"COURSE_WIDGETS": " LIVE "}, True),
    ({"COURSE_PROFILE": "smoke", "COURSE_WIDGETS": "auto"}, False),
    ({}, False),                                                     # pytest is no notebook
])
def test_widgets_follow_the_environment(monkeypatch, env, expected):
    for var in ("CI", "COURSE_PROFILE", "COURSE_PROGRESS", "COURSE_WIDGETS"):
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert widgets.widgets_available() is expected


def test_a_wrong_widgets_setting_says_what_to_choose(monkeypatch):
    monkeypatch.setenv("COURSE_WIDGETS", "yes")
    with pytest.raises(ValueError, match=r"COURSE_WIDGETS='yes'.*'auto', 'live', 'static'"):
        widgets.widgets_available()


def test_the_live_allreduce_explorer_takes_a_fit_without_a_bandwidth_term(capsys):
    """Lesson 06 hands the explorer its all-reduce fit, and a fit of latency-bound sizes resolves no bandwidth
    term (beta = 0, comm.fit_text): the live explorer's bandwidth slider started at 1 / beta (ZeroDivisionError
    in a learner's JupyterLab; CI draws the static figure and never saw it). It starts at its fastest link."""
    import matplotlib

    matplotlib.use("Agg")
    assert widgets.allreduce_explorer(p=8, n_bytes=2**20, alpha=5e-5, beta=0.0, interactive=True) == (None, None)
    out = capsys.readouterr().out
    assert "VBox" in out and "no bandwidth term" in out
