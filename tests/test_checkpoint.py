"""Damaged, foreign and missing checkpoints: resume falls back or says what is wrong and what to do."""

import argparse

import pytest
import torch

from course_lib.parallel.checkpoint import (CHECKPOINT_NAME, PREVIOUS_NAME, Checkpointer, CheckpointError,
                                            read_checkpoint)


def _save(ck: Checkpointer, step: int) -> None:
    model = torch.nn.Linear(2, 1)
    ck.save(model, torch.optim.SGD(model.parameters(), lr=0.1), None, step=step)


def test_the_previous_checkpoint_is_kept_and_a_damaged_latest_falls_back_to_it(tmp_path, capsys):
    ck = Checkpointer(tmp_path, every=1)
    _save(ck, 1)
    _save(ck, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([CHECKPOINT_NAME, PREVIOUS_NAME])
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
