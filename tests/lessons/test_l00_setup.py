"""Lesson 00: the backend chosen for the first all-reduce, and the table of what its launches cost."""

from course_lib.dist import allreduce_demo, launch
from course_lib.dist.launcher import fork_server_running, worker_start_method
from course_lib.lessons import l00_setup as study


def test_the_launch_table_follows_how_the_workers_started():
    first = study.launch_table(2.7, 2, "forkserver", first=True, again_s=0.31)
    assert [r["s"] for r in first.rows] == [2.7, 0.31]
    assert "started" in first.rows[0]["workers"] and "started" not in first.rows[1]["workers"]
    later = study.launch_table(0.4, 2, "forkserver", first=False)
    assert len(later.rows) == 1 and "started" not in later.rows[0]["workers"]
    spawned = study.launch_table(5.1, 4, "spawn", again_s=4.8)  # no fork server: every launch imports torch
    assert all("fork server" not in r["workers"] for r in spawned.rows)


def test_the_backend_reason_names_what_decided_it():
    assert "one GPU per rank" in study.backend_reason(2, 2, "nccl")
    assert "run on the CPU" in study.backend_reason(1, 2, "gloo")
    assert "no GPU visible" in study.backend_reason(0, 2, "gloo")


def test_the_launcher_reports_its_start_method_and_whether_its_fork_server_runs():
    method = worker_start_method()
    assert method in ("forkserver", "spawn")
    if method == "forkserver":
        launch(allreduce_demo, 1, quiet=True)
        assert fork_server_running()
