"""The CPU quota of this process's cgroup (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``/``cfs_period_us``).

A JupyterHub CPU limit (a spawner's ``cpu_limit``), a container or a SLURM job with cgroup
``ConstrainCores`` off may allow a process 2 cores' worth of time while its affinity mask still shows
every core of a 64-core node: sized from the mask, every worker would start 64 threads and the
kernel would throttle them all. The quota is the smallest one on the path from this process's cgroup
to the root (a parent's limit holds for its children). Rounded up, as the JDK (``CgroupSubsystem``)
and Go 1.25's GOMAXPROCS do: a quota of 1.5 cores keeps 2 threads busy part of the time.
Formats: the kernel's cgroup-v2.rst ("cpu.max: $MAX $PERIOD", "max" for no limit) and cgroup v1's
sched-bwc.rst (cfs_quota_us -1 for no limit).
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _walk_up(mount: Path, rel: str):
    """``mount/rel``, then each parent up to ``mount`` (inside a container ``rel`` may be the host's
    path, absent here: then the mount itself is this process's cgroup)."""
    parts = [p for p in rel.strip("/").split("/") if p]
    for n in range(len(parts), -1, -1):
        yield mount.joinpath(*parts[:n])


def cpu_quota_cores(cgroup_root: str | os.PathLike = "/sys/fs/cgroup",
                    proc_self_cgroup: str | os.PathLike = "/proc/self/cgroup") -> float | None:
    """Cores' worth of CPU time this process's cgroup allows per period, or None when unlimited
    (or when there is no cgroup file system, e.g. macOS)."""
    root = Path(cgroup_root)
    text = _read(Path(proc_self_cgroup))
    if text is None:
        return None
    limits = []
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, rel = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2 (unified)
            for d in _walk_up(root, rel):
                value = _read(d / "cpu.max")
                if value:
                    quota, _, period = value.partition(" ")
                    if quota != "max" and period:
                        limits.append(int(quota) / int(period))
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's hierarchy
            names = [controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"]
            mount = next((root / n for n in names if (root / n).is_dir()), None)
            if mount is None:
                continue
            for d in _walk_up(mount, rel):
                quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
                if quota and period and int(quota) > 0 and int(period) > 0:
                    limits.append(int(quota) / int(period))
    return min(limits) if limits else None


def cores_allowed_by_quota(**kw) -> int | None:
    """:func:`cpu_quota_cores` rounded up to whole cores (at least 1), or None when unlimited."""
    q = cpu_quota_cores(**kw)
    return None if q is None else max(1, math.ceil(q - 1e-9))
