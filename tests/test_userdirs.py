"""Each learner's own folders: results, caches and torch.compile's cache in
the learner's home, made 0700, checked to be theirs before use; one bad results file is skipped."""

import json
import os
import stat
import warnings

import pytest

from course_lib import compile_cache, fileio, lesson, results, userdirs

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="a folder owned by another user can only be made by root (chown)")
NOBODY = 65534


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A learner with empty XDG folders and no course variables set."""
    for var in ("COURSE_RESULTS_DIR", "COURSE_DATA_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_results_of_a_shared_install_go_to_the_learners_own_data_folder(home, monkeypatch):
    # the checkout is the instructor's (a shared install): today's code put results next to it
    monkeypatch.setattr(results, "is_own_checkout", lambda root: False, raising=False)
    d = results.results_dir()
    assert d == home / "share" / "largebatch-course" / "runs" / "interactive" / "results"
    assert d.is_dir() and mode(d) == 0o700 and mode(home / "share" / "largebatch-course") == 0o700
    assert results.save_result("x", {"a": 1}).parent == d


def test_an_explicit_results_dir_still_wins(home, monkeypatch):
    monkeypatch.setenv("COURSE_RESULTS_DIR", str(home / "mine"))
    assert results.results_dir() == home / "mine"
    results.save_result("x", {"a": 1})
    assert mode(home / "mine") == 0o700  # made by the course: private


@needs_root
def test_is_own_checkout_tells_a_shared_install_from_a_clone(tmp_path):
    assert userdirs.is_own_checkout(tmp_path)
    os.chown(tmp_path, NOBODY, NOBODY)
    assert not userdirs.is_own_checkout(tmp_path)


@needs_root
def test_a_results_dir_of_another_user_is_refused_naming_the_setting(home, monkeypatch):
    theirs = home / "theirs"
    theirs.mkdir()
    (theirs / "01_baseline.json").write_text(json.dumps({"lr": 99.0, "dataset": "planted"}))
    os.chown(theirs, NOBODY, NOBODY)
    monkeypatch.setenv("COURSE_RESULTS_DIR", str(theirs))
    with pytest.raises(PermissionError, match=r"belongs to .*uid 65534.*COURSE_RESULTS_DIR"):
        results.load_results()
    with pytest.raises(PermissionError, match="COURSE_RESULTS_DIR"):
        results.save_result("x", {"a": 1})


def test_a_world_writable_folder_is_refused(home):
    d = home / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(PermissionError, match=r"writable by every user \(mode 777\).*chmod go-w"):
        fileio.atomic_write_text(d / "f.json", "{}")


def test_the_course_folders_it_makes_are_private_even_with_an_open_umask(home):
    old = os.umask(0o000)
    try:
        fileio.atomic_write_text(home / "a" / "b" / "c.json", "{}")
    finally:
        os.umask(old)
    assert mode(home / "a") == 0o700 and mode(home / "a" / "b") == 0o700


def test_the_kernel_compiles_into_a_private_cache(home, monkeypatch):
    # torch's default is <tmp>/torchinductor_<user>: torch writes it back into the environment once used
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", compile_cache._torch_default_inductor_dir())
    lesson.setup("smoke", ncf=False, quiet=True)
    d = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    assert d == str(home / "cache" / "largebatch-course" / "torchinductor") and mode(d) == 0o700
    # torch's own rule, read from its file (importing torch._inductor takes seconds): it now uses ours
    import importlib.util
    from pathlib import Path

    import torch

    path = Path(torch.__file__).parent / "_inductor" / "runtime" / "cache_dir_utils.py"
    spec = importlib.util.spec_from_file_location("_cache_dir_utils", path)
    rules = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rules)
    assert rules.cache_dir() == d and rules.triton_cache_dir(0).startswith(d)


def test_a_compile_cache_the_learner_chose_is_kept(home, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(home / "my-inductor"))
    assert compile_cache.use_private_compile_caches()["TORCHINDUCTOR_CACHE_DIR"] == str(home / "my-inductor")


@needs_root
def test_a_planted_compile_cache_is_refused(home, monkeypatch):
    planted = home / "cache" / "largebatch-course" / "torchinductor"
    planted.mkdir(parents=True)
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(PermissionError, match="torch.compile cache .* belongs to"):
        compile_cache.use_private_compile_caches()


def test_one_unreadable_results_file_is_reported_by_name_and_skipped(tmp_path):
    results.save_result("01_baseline", {"lr": 0.002, "dataset": "d"}, directory=tmp_path)
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "foreign.json").write_text("[1, 2]")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = results.load_results(tmp_path)
    assert loaded == {"01_baseline": {"dataset": "d", "lr": 0.002}}
    said = " ".join(str(w.message) for w in caught)
    assert "empty.json" in said and "foreign.json" in said


def test_a_folder_that_cannot_be_made_names_the_setting(home, monkeypatch):
    def read_only(path, mode=0o777):  # a read-only home on a compute node
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(userdirs.os, "mkdir", read_only)
    with pytest.raises(OSError, match=r"cannot make the course's results folder .*set COURSE_RESULTS_DIR"):
        userdirs.private_dir(home / "x" / "results", what="results folder", setting="COURSE_RESULTS_DIR")
