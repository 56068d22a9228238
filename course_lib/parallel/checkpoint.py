"""Checkpoints of a training run: rank 0 saves atomically, every rank resumes bit for bit (lesson 06)."""

from __future__ import annotations

import os

import torch

from .. import dist as cdist
from ..data.sampler import DeviceSampler
from ..fileio import atomic_torch_save

CHECKPOINT_NAME = "ncf_ddp.pt"
CHECKPOINT_FORMAT = 1


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
        self.every, self.resume, self.fail_at_step = every, resume, fail_at_step
        self.sampler = None
        self.step = 0  # steps done, counted as batches are handed out
        self._epoch_rng = None  # sampler RNG state when the current epoch began
        self._consumed = 0  # batches handed out in the current epoch
        self._replay = None  # (epoch RNG state, batches to skip) after restore()

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
        """Rank 0 writes the checkpoint (temp file + rename: a crash never leaves half a file).

        ``loop_state``: the training loop's counters, curve and clock (``step`` among them).
        """
        if not cdist.is_main_process():
            return
        state = {
            "format": CHECKPOINT_FORMAT, "step": loop_state["step"], "world_size": cdist.world_size(),
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "sampler": {"epoch_rng": self._epoch_rng, "consumed": self._consumed},
            "torch_rng": torch.get_rng_state(),
            "loop": {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in loop_state.items()},
        }
        atomic_torch_save(state, self.path)

    def load(self) -> dict | None:
        if not (self.resume and self.path and os.path.exists(self.path)):
            return None
        state = torch.load(self.path, map_location="cpu", weights_only=True)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{self.path}: checkpoint format {state.get('format')!r}, expected {CHECKPOINT_FORMAT}")
        return state

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
