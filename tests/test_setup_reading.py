"""Lesson 00's launch line says what the timed launch paid for (read of the full run, 2026-12-01, r3a 00-1: it
printed "starting 2 processes, each importing torch" under a launcher whose workers are forked from a fork server
that imported torch once)."""

from course_lib.dist import allreduce_demo, launch
from course_lib.dist.launcher import fork_server_running, worker_start_method
from course_lib.lessons import l00_setup as study


def test_the_launch_line_follows_how_the_workers_started():
    first = study.launch_reading(2.7, 2, "forkserver", first=True)  # the full run's cell 11
    assert first.startswith("the launch took 2.7 s on this machine")
    assert "started the fork server, which imports torch once, and forked 2 workers" in first
    assert "each importing torch" not in first
    later = study.launch_reading(0.4, 2, "forkserver", first=False)
    assert "forked from the running fork server" in later and "started" not in later
    spawned = study.launch_reading(5.1, 4, "spawn")  # no fork server (Windows, or a socket path too long)
    assert "4 fresh processes, each importing torch" in spawned and "fork server" not in spawned
    # the fourth read: a later launch's cost was stated ("a fraction of a second"), not timed; now it is
    again = study.launch_reading(2.7, 2, "forkserver", first=True, again_s=0.31)
    assert again.endswith("; a second launch took 0.3 s: it forked 2 workers from the running server, which had "
                          "imported torch, and set up their process group")
    assert "a second launch took 4.8 s: every launch starts fresh processes" in study.launch_reading(
        5.1, 4, "spawn", again_s=4.8)


def test_the_launcher_reports_its_start_method_and_whether_its_fork_server_runs():
    method = worker_start_method()
    assert method in ("forkserver", "spawn")
    if method == "forkserver":
        launch(allreduce_demo, 1, quiet=True)
        assert fork_server_running()
