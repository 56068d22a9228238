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
