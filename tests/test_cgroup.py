"""usable_cpu_cores respects a cgroup CPU quota, read from fake cgroup files."""

import os

import pytest

from course_lib import hardware
from course_lib._cgroup import cpu_quota_cores

AFFINITY = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def v2(tmp_path, rel="/user.slice/jupyter-ada", **files):
    """A cgroup v2 tree: ``files`` maps a folder under the root ('' the root) to its cpu.max."""
    (tmp_path / "proc").write_text(f"0::{rel}\n")
    for folder, cpu_max in files.items():
        d = tmp_path / "cg" / folder if folder else tmp_path / "cg"
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.max").write_text(cpu_max + "\n")
    return {"cgroup_root": tmp_path / "cg", "proc_self_cgroup": tmp_path / "proc"}


def test_cgroup_v2_cpu_max_limits_the_cores(tmp_path):
    where = v2(tmp_path, **{"user.slice/jupyter-ada": "200000 100000", "user.slice": "max 100000"})
    assert cpu_quota_cores(**where) == 2.0
    assert hardware.usable_cpu_cores(**where) == min(AFFINITY, 2)


def test_a_parents_limit_holds_and_a_fraction_rounds_up(tmp_path):
    where = v2(tmp_path, **{"user.slice/jupyter-ada": "max 100000", "user.slice": "150000 100000"})
    assert cpu_quota_cores(**where) == 1.5
    assert hardware.usable_cpu_cores(**where) == min(AFFINITY, 2)


def test_inside_a_container_the_mount_is_the_cgroup(tmp_path):
    where = v2(tmp_path, rel="/kubepods/pod1/abc", **{"": "100000 100000"})  # the host's path is not mounted here
    assert hardware.usable_cpu_cores(**where) == 1


def test_no_limit_leaves_the_affinity_mask(tmp_path):
    where = v2(tmp_path, **{"user.slice/jupyter-ada": "max 100000"})
    assert cpu_quota_cores(**where) is None and hardware.usable_cpu_cores(**where) == AFFINITY
    assert cpu_quota_cores(cgroup_root=tmp_path / "none", proc_self_cgroup=tmp_path / "none") is None


@pytest.mark.parametrize("controllers, folder", [("cpu,cpuacct", "cpu,cpuacct"), ("cpu", "cpu")])
def test_cgroup_v1_cfs_quota_and_period(tmp_path, controllers, folder):
    (tmp_path / "proc").write_text(f"4:memory:/job_7\n2:{controllers}:/slurm/job_7\n")
    d = tmp_path / "cg" / folder / "slurm" / "job_7"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("300000\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    (d.parent / "cpu.cfs_quota_us").write_text("-1\n")  # unlimited above
    (d.parent / "cpu.cfs_period_us").write_text("100000\n")
    where = {"cgroup_root": tmp_path / "cg", "proc_self_cgroup": tmp_path / "proc"}
    assert cpu_quota_cores(**where) == 3.0
    assert hardware.usable_cpu_cores(**where) == min(AFFINITY, 3)
