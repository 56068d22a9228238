"""The browser tests' set-up: Chromium installed by `make test` when it can be, a clear skip when not."""

import os
import shutil
import subprocess

import pytest

from _lab import REPO, browser_missing
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
    """A learner without root: no apt, exit 0 (the suite goes on), and what to run instead."""
    run = subprocess.run(["runuser", "-u", "nobody", "--", "bash", str(REPO / "ci" / "browser-deps.sh")],
                         env={"PATH": os.environ["PATH"], "COURSE_CHROMIUM": str(tmp_path / "none")},
                         capture_output=True, text=True, timeout=scaled(30), cwd="/")
    assert run.returncode == 0, run.stderr
    assert "cannot install it here" in run.stderr and "sudo apt-get install chromium" in run.stderr
    assert "the browser tests will skip" in run.stderr
