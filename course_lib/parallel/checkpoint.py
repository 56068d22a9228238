"""Checkpoints of a training run: rank 0 saves atomically, every rank resumes bit for bit (lesson 06).

The previous checkpoint is kept beside the latest (``ncf_ddp.prev.pt``): when the latest
cannot be read (a disk that filled up, a file cut short by a copy), resuming falls back to
the previous one and says so; when neither can, the error names the files, says what is
wrong with each, and how to start fresh. A file that ``torch.load(weights_only=True)``
refuses is not a checkpoint this course wrote, and is never loaded.

A checkpoint knows its run: it records the settings that made it and the world size,
and resuming with other settings or another world size is refused, saying what differs and how to
start fresh (a resubmission with other arguments silently continued the old run). One run at a
time writes a directory: rank 0 holds ``.lock`` (its host, pid and SLURM job) while it runs; a
second live run is refused, a dead holder's lock (same host, process gone; or the same SLURM job,
requeued) is taken over.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import pickle
import socket
import sys
import time
import zipfile

import torch

from .. import dist as cdist
from ..data.sampler import DeviceSampler
from ..fileio import atomic_torch_save, owner_is_gone, owner_tag

CHECKPOINT_NAME = "ncf_ddp.pt"
PREVIOUS_NAME = "ncf_ddp.prev.pt"
LOCK_NAME = ".lock"  # the live run that writes this directory
CHECKPOINT_FORMAT = 1


class CheckpointError(RuntimeError):
    """No checkpoint in the directory can be resumed from; the message says why and what to do."""


def read_checkpoint(path: str | os.PathLike) -> dict:
    """A checkpoint this course wrote, loaded on the CPU with ``weights_only=True``; a clear
    ``CheckpointError`` naming the file when it is damaged, foreign or of another format."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "weights only" in str(exc).lower() or "weights_only" in str(exc):
            raise CheckpointError(
                f"{path} is not a checkpoint this course wrote: it holds Python objects that a safe load "
                "(torch.load(weights_only=True)) refuses to run, so it was not loaded. Do not load it with "
                "weights_only=False unless you wrote it yourself; delete it or move it aside to start fresh.") from None
        raise CheckpointError(f"{path} is damaged (not a readable checkpoint: {exc})") from None
    except (RuntimeError, EOFError, ValueError, OSError, zipfile.BadZipFile) as exc:
        size = os.path.getsize(path) if os.path.exists(path) else 0
        raise CheckpointError(f"{path} is damaged ({size} bytes, cut short or overwritten: "
                              f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{path}: checkpoint format {found!r}, expected {CHECKPOINT_FORMAT} "
                              "(written by another version of the course, or not a checkpoint)")
    return state


class Checkpointer:
    """Save every ``every`` steps (rank 0, atomically) and resume from the latest save.

    The file holds only tensors and plain containers, so ``torch.load(path,
    weights_only=True)`` reads it (no pickled classes). To resume mid-epoch exactly, the
    sampler's RNG state *at the start of the epoch* is saved with the number of batches
    already consumed; on resume the epoch is regenerated and those batches skipped.
    ``fail_at_step`` (debug: tests and the lesson) makes this rank raise once that many
    steps are done — a rank that dies mid-training.
    """

    def __init__(self, directory: str | os.PathLike | None, every: int = 0, *, resume: bool = True,
                 fail_at_step: int | None = None):
        self.path = os.path.join(directory, CHECKPOINT_NAME) if directory else None
        self.previous = os.path.join(directory, PREVIOUS_NAME) if directory else None
        self.every, self.resume, self.fail_at_step = every, resume, fail_at_step
        self.sampler = None
        self.step = 0  # steps done, counted as batches are handed out
        self._epoch_rng = None  # sampler RNG state when the current epoch began
        self._consumed = 0  # batches handed out in the current epoch
        self._replay = None  # (epoch RNG state, batches to skip) after restore()
        self.run = None  # the settings that define the run (for_run); saved, and compared on resume
        self._held = False  # rank 0 holds the directory's lock

    def for_run(self, **settings) -> None:
        """Say which run this is (``train_to_target`` passes its config and data): the settings are
        saved with every checkpoint, and a checkpoint of other settings is refused on resume."""
        self.run = _plain(settings)

    def hold(self) -> None:
        """Rank 0 takes the directory for this run, or raises ``CheckpointError`` naming the live
        run that holds it (two writers would overwrite each other's saves)."""
        if self._held or not self.path or not cdist.is_main_process():
            return
        directory = os.path.dirname(self.path)
        from ..userdirs import private_dir

        private_dir(directory, what="checkpoint folder", setting="--checkpoint-dir")
        lock = os.path.join(directory, LOCK_NAME)
        me = {"host": _this_host(), "hostname": socket.gethostname(), "pid": os.getpid(),
              "job": os.environ.get("SLURM_JOB_ID"), "since": time.time()}
        for _ in range(3):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)  # atomic, also on NFS v3+
            except FileExistsError:
                holder = _read_lock(lock)
                if holder.get("host") == me["host"] and holder.get("pid") == me["pid"]:
                    break  # this process already (another Checkpointer of the same run)
                if _lock_is_stale(lock, holder, me):
                    with _suppress_missing():
                        os.unlink(lock)
                    continue
                since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("since", 0)))
                raise CheckpointError(
                    f"{directory} is being written by another run: pid {holder.get('pid')} on "
                    f"{holder.get('hostname', '?')}" + (f" (SLURM job {holder['job']})" if holder.get("job") else "")
                    + f", since {since}. Two runs writing one checkpoint directory would overwrite each other's "
                    "saves. Give this run a directory of its own (--checkpoint-dir; ncf_ddp.sbatch makes one per "
                    f"job), or wait for that run to end. If it is gone (a node that crashed), delete {lock}.") from None
            else:
                with os.fdopen(fd, "w") as f:
                    json.dump(me, f)
                atexit.register(self.release)
                break
        self._held = True

    def release(self) -> None:
        """Give the directory back (at the end of the run; at exit at the latest)."""
        if not self._held:
            return
        lock = os.path.join(os.path.dirname(self.path), LOCK_NAME)
        holder = _read_lock(lock)
        if holder.get("pid") == os.getpid() and holder.get("host") == _this_host():
            with _suppress_missing():
                os.unlink(lock)
        self._held = False

    def track(self, sampler):
        """Wrap the batch iterable so its position can be saved and restored."""
        if not isinstance(sampler, DeviceSampler):
            raise ValueError("checkpoint/resume needs loader='device' (its RNG state is the whole sampler state)")
        self.sampler = sampler
        return _Tracked(self)

    def _iterate(self):
        g, skip = self.sampler.generator, 0
        if self._replay is not None:  # resume: regenerate this epoch, skip what was trained on
            rng, skip = self._replay
            g.set_state(rng)
            self._replay = None
        self._epoch_rng, self._consumed = g.get_state(), 0
        for batch in self.sampler:
            self._consumed += 1
            if self._consumed <= skip:
                continue
            if self.fail_at_step is not None and self.step >= self.fail_at_step:
                raise RuntimeError(f"injected failure on rank {cdist.rank()} after step {self.step} "
                                   "(RunSpec.fail_at_step, a debugging aid)")
            self.step += 1
            yield batch

    def due(self, step: int) -> bool:
        return self.path is not None and self.every > 0 and step % self.every == 0

    def save(self, model, optimizer, scaler, **loop_state) -> None:
        """Rank 0 writes the checkpoint (temp file + rename: a crash never leaves half a file),
        keeping the one before it as the fallback.

        ``loop_state``: the training loop's counters, curve and clock (``step`` among them).
        """
        if not cdist.is_main_process():
            return
        self.hold()
        state = {
            "format": CHECKPOINT_FORMAT, "step": loop_state["step"], "world_size": cdist.world_size(),
            "run": self.run,
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "sampler": {"epoch_rng": self._epoch_rng, "consumed": self._consumed},
            "torch_rng": torch.get_rng_state(),
            "loop": {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in loop_state.items()},
        }
        if os.path.exists(self.path):
            os.replace(self.path, self.previous)  # a crash from here on still leaves the previous one
        atomic_torch_save(state, self.path)

    def load(self) -> dict | None:
        """The latest readable checkpoint (the previous one when the latest is damaged), or None
        when there is none; ``CheckpointError`` when there are files and none can be read."""
        if self.path:
            self.hold()
        if not (self.resume and self.path):
            return None
        candidates = [p for p in (self.path, self.previous) if os.path.exists(p)]
        problems = []
        for path in candidates:
            try:
                state = read_checkpoint(path)
            except CheckpointError as exc:
                problems.append(str(exc))
                continue
            self._check_same_run(state, path)
            if problems:
                print(f"warning: {problems[0]}; resuming from the previous checkpoint {path} "
                      f"(step {state['step']}) instead", file=sys.stderr, flush=True)
            return state
        if problems:
            raise CheckpointError("cannot resume: " + "; ".join(problems) + ". To start fresh, delete the "
                                  f"checkpoint files in {os.path.dirname(self.path)} (or move them aside), or run "
                                  "without resuming (Checkpointer(resume=False), RunSpec(resume=False), "
                                  "train_ddp --no-resume).")
        return None

    def _check_same_run(self, state: dict, path: str) -> None:
        """Refuse a checkpoint of another run: other settings, or another world size."""
        differ = []
        if state.get("world_size") != cdist.world_size():
            differ.append(f"world size {state.get('world_size')} there, {cdist.world_size()} here")
        saved = state.get("run")
        if self.run is not None and saved is not None:
            differ += [f"{key} {there!r} there, {here!r} here" for key, there, here in _differences(saved, self.run)]
        if differ:
            raise CheckpointError(
                f"cannot resume from {path}: it was made by another run ({'; '.join(differ)}). To start this run "
                f"fresh, give it a directory of its own (--checkpoint-dir, RunSpec(checkpoint_dir=...)) or run "
                "without resuming (train_ddp --no-resume, RunSpec(resume=False), Checkpointer(resume=False)), which "
                "overwrites that run's checkpoints; to continue that run, run it again with its own settings.")

    def restore(self, model, optimizer, scaler) -> dict | None:
        """Load the latest checkpoint into model/optimizer/scaler/sampler; the loop state, or None."""
        state = self.load()
        if state is None:
            return None
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if scaler is not None and state["scaler"] is not None:
            scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["torch_rng"])
        self._replay = (state["sampler"]["epoch_rng"], state["sampler"]["consumed"])
        self.step = state["step"]
        return state["loop"]


def _plain(value):
    """Settings as plain containers of str/int/float/bool/None (what ``weights_only`` loads)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def _differences(saved, current, prefix=""):
    """(key, saved, current) for every leaf setting that differs between two nested dicts."""
    if isinstance(saved, dict) and isinstance(current, dict):
        for key in sorted(set(saved) | set(current)):
            yield from _differences(saved.get(key), current.get(key), f"{prefix}.{key}" if prefix else key)
    elif saved != current:
        yield prefix, saved, current


def _this_host() -> str:
    """This host as owner tags name it (``fileio.owner_tag``: its host part, which cannot collide)."""
    return owner_tag().rsplit("-", 1)[0]


def _read_lock(lock: str) -> dict:
    try:
        with open(lock) as f:
            holder = json.load(f)
        return holder if isinstance(holder, dict) else {}
    except (OSError, ValueError):
        return {}


def _lock_is_stale(lock: str, holder: dict, me: dict) -> bool:
    """The holder is gone: its process on this host ended, or it is this SLURM job before a requeue;
    a lock nobody could read (its writer killed while writing it) once it is a minute old."""
    try:
        mtime = os.stat(lock).st_mtime
    except OSError:
        return True
    if not holder:
        return time.time() - mtime > 60
    if me["job"] and holder.get("job") == me["job"]:
        return True
    return owner_is_gone(str(holder.get("host")), int(holder.get("pid", -1)), mtime)


class _suppress_missing:
    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        return kind is not None and issubclass(kind, FileNotFoundError)


class _Tracked:
    def __init__(self, owner: Checkpointer):
        self.owner = owner

    def __len__(self) -> int:
        return len(self.owner.sampler)

    def __iter__(self):
        return self.owner._iterate()



def checkpoint_params(directory: str | os.PathLike) -> tuple[int, dict]:
    """(step, model state) of the checkpoint in ``directory``, read with ``weights_only=True``."""
    state = torch.load(os.path.join(directory, CHECKPOINT_NAME), map_location="cpu", weights_only=True)
    return state["step"], state["model"]


def max_relative_difference(a: dict, b: dict) -> float:
    """Largest ``|a - b| / |b|`` (Frobenius norms) over the tensors of two state dicts."""
    if a.keys() != b.keys():
        raise KeyError(f"different parameters: {sorted(set(a) ^ set(b))}")
    return max(((a[k].double() - b[k].double()).norm() / b[k].double().norm().clamp_min(1e-30)).item() for k in a)
