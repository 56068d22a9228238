"""Private temporary directories and the clean-up of what dead processes left behind."""

import re
import os
import stat
import subprocess
import sys
import tempfile

from course_lib import fileio


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_new_private_temp_dir_is_fresh_and_private(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    a, b = fileio.new_private_temp_dir("course-x-"), fileio.new_private_temp_dir("course-x-")
    assert a != b and os.path.dirname(a) == str(tmp_path)
    assert os.path.basename(a).startswith(f"course-x-{fileio.owner_tag()}-")
    st = os.stat(a)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()


def test_session_temp_dir_is_one_per_process_and_prefix(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(fileio, "_SESSION_DIRS", {})
    a = fileio.session_temp_dir("course-y-")
    assert fileio.session_temp_dir("course-y-") == a and fileio.session_temp_dir("course-z-") != a


def test_only_dirs_of_dead_owners_on_this_host_are_removed(tmp_path):
    host = fileio.owner_tag().rsplit("-", 1)[0]
    dead = tmp_path / f"course-launch-{host}-{_dead_pid()}-abc123"
    alive = tmp_path / f"course-launch-{host}-{os.getppid()}-abc123"
    mine = tmp_path / f"course-launch-{fileio.owner_tag()}-abc123"
    other_host = tmp_path / f"course-launch-someothernode-{_dead_pid()}-abc123"
    other_prefix = tmp_path / f"course-ex06-{host}-{_dead_pid()}-abc123"
    untagged = tmp_path / "course-launch-abc123"
    for d in (dead, alive, mine, other_host, other_prefix, untagged):
        (d / "sub").mkdir(parents=True)
    old_untagged = tmp_path / "course-launch-k3j_x9q2"  # an older version's, SIGKILLed long ago
    old_untagged.mkdir()
    (old_untagged / "rank0.log").write_text("x")
    os.utime(old_untagged / "rank0.log", (1_000_000_000, 1_000_000_000))
    os.utime(old_untagged, (1_000_000_000, 1_000_000_000))
    busy_untagged = tmp_path / "course-launch-a1b2c3d4"  # old dir, but its log is still written to
    busy_untagged.mkdir()
    (busy_untagged / "rank0.log").write_text("x")
    os.utime(busy_untagged, (1_000_000_000, 1_000_000_000))
    removed = fileio.remove_stale_temp_dirs("course-launch-", tmp_path)
    assert sorted(removed) == sorted([str(dead), str(old_untagged)])
    assert not dead.exists() and all(d.exists() for d in (alive, mine, other_host, other_prefix, untagged,
                                                           busy_untagged))


def test_a_reused_pid_does_not_keep_a_stale_dir(tmp_path):
    """The pid is alive again, but that process started after the dir was last written."""
    host = fileio.owner_tag().rsplit("-", 1)[0]
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        d = tmp_path / f"course-launch-{host}-{proc.pid}-abc123"
        d.mkdir()
        os.utime(d, (1_000_000_000, 1_000_000_000))  # written in 2001, long before this process started
        assert fileio.remove_stale_temp_dirs("course-launch-", tmp_path) == [str(d)]
    finally:
        proc.kill()
        proc.wait()


def test_partial_files_of_killed_writers_are_removed_by_the_next_load(tmp_path, monkeypatch):
    """A writer SIGKILLed inside atomic_path leaves its temporary file; the next load removes
    it (and untagged ones from older versions once they are an hour old), never a live one."""
    import signal

    from course_lib.data import load_implicit

    cache = tmp_path / "cache"
    monkeypatch.setenv("COURSE_DATA_DIR", str(cache))
    monkeypatch.delenv("COURSE_MOVIELENS_DIR", raising=False)
    writer = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from course_lib.fileio import atomic_path\n"
        f"with atomic_path({str(cache / 'ml-1m.zip')!r}) as tmp:\n"
        "    tmp.write_bytes(b'0' * (10 << 20))\n"
        "    print('written', flush=True)\n"
        "    time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "written"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    left = list(cache.glob(".*.part"))
    assert len(left) == 1 and left[0].stat().st_size == 10 << 20
    old_style = cache / "processed" / ".synthetic-small-s0-neg100-v1.pt.k3j_x9q2.part"
    old_style.parent.mkdir(parents=True)
    old_style.write_bytes(b"x")
    os.utime(old_style, (1_000_000_000, 1_000_000_000))
    live = cache / f".other.zip.{fileio.owner_tag()}.abcd1234.part"  # this process is alive
    live.write_bytes(b"x")

    load_implicit("synthetic", profile="smoke")
    assert sorted(p.name for p in cache.rglob("*.part")) == [live.name]


def test_two_long_host_names_sharing_16_characters_get_different_owner_tags(tmp_path, monkeypatch):
    """Issue 32: the tag cut host names to 16 characters, so node -02's cleanup removed node -01's
    live partial file on a shared file system."""
    a, b = "cn-gpu-a100-rack01-01", "cn-gpu-a100-rack01-02"
    assert fileio._host_tag(a) != fileio._host_tag(b)
    assert re.fullmatch(r"[A-Za-z0-9]+", fileio._host_tag(a))
    # node 01's writer, alive over there (its pid is dead here): node 02 must keep its file
    live_elsewhere = tmp_path / f".data.pt.{fileio._host_tag(a)}-{_dead_pid()}.abc123.part"
    live_elsewhere.write_bytes(b"half")
    monkeypatch.setattr(fileio.socket, "gethostname", lambda: b)
    assert fileio.remove_stale_partials(tmp_path) == [] and live_elsewhere.exists()


def test_a_temp_dir_until_exit_is_removed_when_the_cell_that_made_it_fails(tmp_path):
    """Lesson 06's checkpoint folder: removed by the cell when it succeeds, and at the kernel's exit
    when a launch in it failed first (it stayed in /tmp for good)."""
    code = ("import sys; from course_lib import fileio; d = fileio.temp_dir_until_exit('course-lesson06-'); "
            "print(d, flush=True); open(d + '/ncf_ddp.pt', 'w').write('x'); raise RuntimeError('a launch failed')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert "a launch failed" in proc.stderr
    made = proc.stdout.strip()
    assert made.startswith(str(tmp_path / "course-lesson06-")) and not os.path.exists(made)
