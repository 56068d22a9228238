"""Damaged, foreign and missing checkpoints: resume falls back or says what is wrong and what to do."""

import argparse

import pytest
import torch

from course_lib.parallel.checkpoint import (CHECKPOINT_NAME, LOCK_NAME, PREVIOUS_NAME, Checkpointer, CheckpointError,
                                            read_checkpoint)


def _save(ck: Checkpointer, step: int) -> None:
    model = torch.nn.Linear(2, 1)
    ck.save(model, torch.optim.SGD(model.parameters(), lr=0.1), None, step=step)


def test_the_previous_checkpoint_is_kept_and_a_damaged_latest_falls_back_to_it(tmp_path, capsys):
    ck = Checkpointer(tmp_path, every=1)
    _save(ck, 1)
    _save(ck, 2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != LOCK_NAME) == sorted([CHECKPOINT_NAME, PREVIOUS_NAME])
    assert ck.load()["step"] == 2
    latest = tmp_path / CHECKPOINT_NAME
    latest.write_bytes(latest.read_bytes()[:100])  # cut short
    assert ck.load()["step"] == 1
    err = capsys.readouterr().err
    assert f"{latest} is damaged" in err and "resuming from the previous checkpoint" in err


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_nothing_readable_is_a_clear_error_naming_the_files(tmp_path, damage):
    ck = Checkpointer(tmp_path, every=1)
    _save(ck, 1)
    _save(ck, 2)
    for name in (CHECKPOINT_NAME, PREVIOUS_NAME):
        p = tmp_path / name
        p.write_bytes(b"" if damage == "empty" else p.read_bytes()[:64])
    with pytest.raises(CheckpointError) as info:
        ck.load()
    msg = str(info.value)
    assert str(tmp_path / CHECKPOINT_NAME) in msg and str(tmp_path / PREVIOUS_NAME) in msg
    assert "damaged" in msg and "To start fresh, delete" in msg and "--no-resume" in msg
    assert Checkpointer(tmp_path, every=1, resume=False).load() is None


def test_a_file_with_arbitrary_objects_is_refused_as_not_ours(tmp_path):
    path = tmp_path / CHECKPOINT_NAME
    torch.save({"format": 1, "payload": argparse.Namespace(a=1)}, path)  # an object: weights_only refuses it
    with pytest.raises(CheckpointError, match="is not a checkpoint this course wrote") as info:
        read_checkpoint(path)
    assert "weights_only=False" in str(info.value) and "unless you wrote it yourself" in str(info.value)
    torch.save({"format": 99, "step": 1}, path)
    with pytest.raises(CheckpointError, match="checkpoint format 99, expected 1"):
        read_checkpoint(path)


def test_no_checkpoint_yet_means_start_from_scratch(tmp_path):
    assert Checkpointer(tmp_path / "none", every=1).load() is None


# --------------------------------------------------------------------------- a checkpoint knows its run


def test_a_checkpoint_of_other_settings_is_refused_saying_what_differs(tmp_path):
    ck = Checkpointer(tmp_path, every=1)
    ck.for_run(config={"global_batch_size": 4096, "base_lr": 0.001}, data="ml-1m")
    _save(ck, 3)
    same = Checkpointer(tmp_path, every=1)
    same.for_run(config={"global_batch_size": 4096, "base_lr": 0.001}, data="ml-1m")
    assert same.load()["step"] == 3
    other = Checkpointer(tmp_path, every=1)
    other.for_run(config={"global_batch_size": 8192, "base_lr": 0.001}, data="ml-1m")
    with pytest.raises(CheckpointError) as info:
        other.load()
    msg = str(info.value)
    assert "made by another run" in msg and "config.global_batch_size 4096 there, 8192 here" in msg
    assert "--checkpoint-dir" in msg and "--no-resume" in msg


def test_a_checkpoint_of_another_world_size_is_refused(tmp_path, monkeypatch):
    ck = Checkpointer(tmp_path, every=1)
    _save(ck, 2)
    from course_lib import dist as cdist

    monkeypatch.setattr(cdist, "world_size", lambda: 4)
    with pytest.raises(CheckpointError, match="world size 1 there, 4 here"):
        Checkpointer(tmp_path, every=1).load()


def test_a_directory_a_live_run_holds_is_refused_and_a_dead_runs_is_taken_over(tmp_path):
    import json
    import subprocess
    import sys

    from course_lib import fileio

    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = tmp_path / ".lock"
        lock.write_text(json.dumps({"host": fileio._host_tag(), "hostname": "this-node", "pid": holder.pid,
                                    "job": "41", "since": 0}))
        with pytest.raises(CheckpointError, match=rf"another run: pid {holder.pid} on this-node \(SLURM job 41\)"):
            Checkpointer(tmp_path, every=1).load()
    finally:
        holder.kill()
        holder.wait()
    ck = Checkpointer(tmp_path, every=1)
    assert ck.load() is None  # the holder is gone: its lock is taken over
    assert json.loads(lock.read_text())["pid"] == __import__("os").getpid()
    ck.release()
    assert not lock.exists()


def test_the_sbatch_checkpoints_in_a_directory_per_job_unless_told_to_resume(tmp_path):
    import re
    import subprocess
    from pathlib import Path

    script = (Path(__file__).resolve().parent.parent / "notebooks" / "beyond" / "ncf_ddp.sbatch").read_text()
    assert '--checkpoint-dir "$CHECKPOINT_DIR"' in script
    line = re.search(r"^CHECKPOINT_DIR=.*$", script, re.M).group(0)

    def where(**env):
        return subprocess.run(["bash", "-c", f'{line}; echo "$CHECKPOINT_DIR"'], cwd=tmp_path, text=True,
                              capture_output=True, check=True, env={"SLURM_JOB_NAME": "ncf-ddp", **env}).stdout.strip()

    assert where(SLURM_JOB_ID="7") == f"{tmp_path}/checkpoints/ncf-ddp-7" != where(SLURM_JOB_ID="8")
    assert where(SLURM_JOB_ID="8", RESUME_FROM="7") == f"{tmp_path}/checkpoints/ncf-ddp-7"
