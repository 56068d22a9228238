"""Optuna journal files that survive a cut-off line, stay private, and never collide (lesson 12).

Optuna's ``JournalFileBackend`` (optuna 5.0, ``optuna/storages/journal/_file.py``, read there) appends
one JSON line per change under its lock and replays the whole file in every process. A process
killed (or a disk quota hit) in the middle of an append leaves a last line without its newline.
Optuna's reader tolerates that while it is the last line, but the next append is written straight
after it: the joined line is no JSON, and from then on every process that reads the journal fails
with ``JSONDecodeError`` inside Optuna, the study lost for good. :func:`prepare_journal` runs before a
study is opened, under Optuna's own lock (no process appends meanwhile): a cut-off last line is
dropped, a joined line keeps its complete part (each line Optuna writes starts with
``{"op_code":``), and it says so. The trial the cut-off process was running stays RUNNING in the
journal and is failed by the orphan rule (``optuna_search.fail_orphaned_trials``) like any killed trial's.

The journal is created 0600 in a folder that is the learner's (Optuna would make it 0644), and
lesson 12's study folders carry a random suffix (:func:`new_study_dir`): two kernels started in the
same second shared one timestamped folder, and so each other's studies.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path

from .userdirs import check_own, private_dir

_LINE_START = b'{"op_code":'  # how every line of Optuna's journal begins (JournalStorage._write_log)


def _repair_lines(data: bytes) -> tuple[bytes, list[str]]:
    """The journal's bytes with cut-off and joined lines repaired; what was done, one note each."""
    notes, kept = [], []
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last newline: b"" when the file ends with one
    if tail:
        notes.append(f"its last line was cut off ({len(tail)} bytes without an end: a process killed, or a full "
                     "disk or quota, in the middle of writing it); dropped")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            json.loads(line)
            kept.append(line)
            continue
        except ValueError:
            pass
        start = line.rfind(_LINE_START)
        if start > 0:
            try:
                json.loads(line[start:])
                kept.append(line[start:])
                notes.append(f"line {number} began with {start} bytes of a cut-off line that a later write was "
                             "joined to; dropped those, kept the complete line")
                continue
            except ValueError:
                pass
        notes.append(f"line {number} ({len(line)} bytes) is not a journal line (cut off or damaged); dropped")
    repaired = b"".join(line + b"\n" for line in kept)
    return repaired, notes


def prepare_journal(path: str | os.PathLike, *, quiet: bool = False) -> list[str]:
    """Make the journal at ``path`` ready for Optuna: its folder the learner's own, the file 0600,
    a cut-off or joined line repaired (under Optuna's lock). Returns the notes it printed."""
    path = Path(path)
    private_dir(path.parent, what="study folder", setting="STUDY_DIR")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    os.close(fd)
    check_own(path, what="journal", setting="STUDY_DIR")
    os.chmod(path, 0o600)
    with open(path, "rb") as f:
        data = f.read()
    if not data or (data.endswith(b"\n") and _all_lines_read(data)):
        return []
    from optuna.storages.journal import JournalFileBackend
    from optuna.storages.journal._file import get_lock_file

    backend = JournalFileBackend(str(path))
    with get_lock_file(backend._lock):  # nobody appends while the file is rewritten
        with open(path, "rb") as f:
            data = f.read()
        repaired, notes = _repair_lines(data)
        if notes:
            tmp = path.with_name(f".{path.name}.repair")
            fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(repaired)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    if notes and not quiet:
        print(f"journal {path}: " + "; ".join(notes) + ". The trial that was being written is failed when the "
              "search resumes (a killed process's trial, the orphan rule).", file=sys.stderr, flush=True)
    return notes


def _all_lines_read(data: bytes) -> bool:
    try:
        for line in data.splitlines():
            if line.strip():
                json.loads(line)
    except ValueError:
        return False
    return True


def new_study_dir(parent: str | os.PathLike) -> Path:
    """A fresh folder for a lesson's studies: ``<parent>/<date-time>-<random>``, made 0700 and
    exclusively (two kernels started in the same second each get their own)."""
    parent = private_dir(parent, what="studies folder", setting="STUDY_DIR")
    for _ in range(10):
        path = parent / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        os.chmod(path, 0o700)
        return path
    raise FileExistsError(f"could not make a new study folder in {parent}")


def spent_note(name: str, path, spent: float, budget: float) -> str:
    """What a reopened study whose budget is already spent says (nothing is trained)."""
    return (f"study {name!r} in {path} has already spent its budget ({spent:g} of {budget:g} "
            f"evaluation points, the resource it counts): no new trials; "
            f"its finished trials are read as they are. For a new search, use a fresh folder (STUDY_DIR=\"\" "
            f"makes one) or delete {path}.")
