"""CI's install scripts leave nothing behind: install-slurm.sh removes its
policy-rc.d on any exit, a SIGTERM included, and disables the services it installed; gpu-check.sh
installs only into a virtual environment."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from _timing import scaled

REPO = Path(__file__).resolve().parent.parent


def fake_bin(tmp_path: Path, apt_get: str) -> Path:
    """A PATH folder whose apt-get (and update-rc.d, deb-systemd-helper) only record what they were asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"apt-get": apt_get, "update-rc.d": 'echo "update-rc.d $*" >> "$CALLS"',
               "deb-systemd-helper": 'echo "deb-systemd-helper $*" >> "$CALLS"', "id": 'echo 0'}
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def slurm_env(tmp_path, bin_dir):
    # no munged/slurmctld/... on this PATH: the script thinks SLURM is missing and installs it
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "COURSE_POLICY_RC_D": str(tmp_path / "policy-rc.d"),
            "CALLS": str(tmp_path / "calls"), "HOME": str(tmp_path)}


@pytest.mark.skipif(any(Path(d, "slurmctld").exists() for d in ("/usr/sbin", "/sbin")),
                    reason="SLURM is installed here: install-slurm.sh has nothing to do")
def test_install_slurm_removes_its_policy_file_when_killed_with_sigterm(tmp_path):
    bin_dir = fake_bin(tmp_path, 'echo started > "$CALLS.apt"; sleep 1; exit 0')
    proc = subprocess.Popen(["bash", str(REPO / "ci" / "install-slurm.sh")], env=slurm_env(tmp_path, bin_dir),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + scaled(30)
    while not (tmp_path / "calls.apt").exists():
        assert time.monotonic() < deadline and proc.poll() is None, "the fake apt-get never ran"
        time.sleep(0.02)
    assert (tmp_path / "policy-rc.d").exists()  # in place while apt-get runs
    proc.send_signal(signal.SIGTERM)  # a cancelled CI job
    assert proc.wait(timeout=scaled(30)) == 143
    assert not (tmp_path / "policy-rc.d").exists(), "policy-rc.d left behind after SIGTERM"


@pytest.mark.skipif(any(Path(d, "slurmctld").exists() for d in ("/usr/sbin", "/sbin")),
                    reason="SLURM is installed here: install-slurm.sh has nothing to do")
def test_install_slurm_disables_the_services_it_installed(tmp_path):
    bin_dir = fake_bin(tmp_path, "exit 0")
    proc = subprocess.run(["bash", str(REPO / "ci" / "install-slurm.sh")], env=slurm_env(tmp_path, bin_dir),
                          capture_output=True, text=True, timeout=scaled(30))
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    for service in ("munge", "slurmctld", "slurmd"):
        assert f"update-rc.d {service} disable" in calls and f"deb-systemd-helper disable {service}.service" in calls
    assert not (tmp_path / "policy-rc.d").exists()


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"no {SYSTEM_PYTHON} (a Python outside any venv)")
def test_gpu_check_installs_into_a_venv_it_names_not_the_system_python(tmp_path):
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import sys, venv; print(sys.prefix == sys.base_prefix)"],
                           capture_output=True, text=True)
    if probe.stdout.strip() != "True":
        pytest.skip(f"{SYSTEM_PYTHON} has no venv module (Debian: apt-get install python3-venv)")
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "requirements.txt").write_text("")
    venv = tmp_path / "gpu-venv"
    env = {**os.environ, "PY": SYSTEM_PYTHON, "GPU_VENV": str(venv), "ALLOW_CPU": "1", "WHEELHOUSE": str(wheelhouse),
           "OUT": str(tmp_path / "out"), "CHECK_NOTEBOOKS": "none", "CHECK_BENCH": "0"}
    proc = subprocess.run(["bash", str(REPO / "ci" / "gpu-check.sh")], env=env, capture_output=True, text=True,
                          timeout=scaled(300))
    assert f"{SYSTEM_PYTHON} is not a virtual environment's Python: installing into the venv {venv}" in proc.stdout
    assert f"installing from {wheelhouse} (no index) into {venv}/bin/python" in proc.stdout, proc.stdout + proc.stderr
    assert (venv / "pyvenv.cfg").exists() and "include-system-site-packages = true" in (venv / "pyvenv.cfg").read_text()
