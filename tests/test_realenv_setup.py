"""The browser tests' set-up: Chromium installed by `make test` when it can be, a clear skip when not."""

import os
import shutil
import subprocess

import pytest

from _lab import REPO, browser_missing
from _readable import others_can_enter, readable_checkout
from _timing import scaled


def test_without_chromium_the_browser_tests_say_how_to_get_it(tmp_path):
    reason = browser_missing(tmp_path / "no-chromium")
    assert "no Chromium at" in reason and "ci/browser-deps.sh" in reason and "apt-get install chromium" in reason


def test_browser_setup_is_quiet_when_chromium_is_there(tmp_path):
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    run = subprocess.run(["bash", str(REPO / "ci" / "browser-deps.sh")],
                         env={**os.environ, "COURSE_CHROMIUM": str(fake)},
                         capture_output=True, text=True, timeout=scaled(30))
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root to run as another user")
def test_browser_setup_without_root_explains_and_does_not_fail(tmp_path):
    """A learner without root: no apt, exit 0 (the suite goes on), and what to run instead. ``nobody`` runs a
    copy it can read: the checkout may lie under a folder only root can enter (tests/_readable.py)."""
    with readable_checkout(["ci/browser-deps.sh", "ci/apt-once.sh"]) as copy:
        run = subprocess.run(["runuser", "-u", "nobody", "--", "bash", str(copy / "ci" / "browser-deps.sh")],
                             env={"PATH": os.environ["PATH"], "COURSE_CHROMIUM": str(tmp_path / "none")},
                             capture_output=True, text=True, timeout=scaled(30), cwd="/")
    assert run.returncode == 0, run.stderr
    assert "cannot install it here" in run.stderr and "sudo apt-get install chromium" in run.stderr
    assert "the browser tests will skip" in run.stderr


SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's: every user can run it (the suite's venv may live under /root)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser") or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="needs root to run as another user, and Debian's /usr/bin/python3")
def test_a_checkout_others_cannot_enter_gives_them_a_copy_they_can_read(tmp_path):
    """A clone under a folder only root can enter (root's home, ``mktemp -d``: mode 0700): ``nobody`` cannot
    import course_lib from it, and can from the copy the tests that run as another user hand out
    (tests/_readable.py), which nobody can write to and which is gone after the block."""
    private = tmp_path / "private"
    private.mkdir()
    os.chmod(private, 0o700)
    clone = private / "clone"
    clone.mkdir()
    shutil.copytree(REPO / "course_lib", clone / "course_lib", ignore=shutil.ignore_patterns("__pycache__"))
    assert not others_can_enter(clone)

    def as_nobody(code: str, where) -> subprocess.CompletedProcess:
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(where), "PYTHONDONTWRITEBYTECODE": "1"}
        return subprocess.run(["runuser", "-u", "nobody", "--", SYSTEM_PYTHON, "-c", code], env=env,
                              capture_output=True, text=True, timeout=scaled(30), cwd="/")

    imports = "import course_lib, os; print(os.path.dirname(course_lib.__file__))"
    assert as_nobody(imports, clone).returncode != 0  # what the tests ran into in such a clone
    with readable_checkout(["course_lib"], src=clone) as copy:
        assert others_can_enter(copy) and copy.stat().st_uid == 0
        run = as_nobody(imports, copy)
        assert run.returncode == 0 and run.stdout.strip() == str(copy / "course_lib"), run.stderr
        write = as_nobody(f"open({str(copy / 'course_lib' / 'x.py')!r}, 'w')", copy)
        assert write.returncode != 0 and "Permission denied" in write.stderr, write.stderr
    assert not copy.exists() and not copy.parent.exists()
