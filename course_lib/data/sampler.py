"""Negative sampling and batch production (lesson 01: the data-loading bottleneck).

Two ways to produce the same training epoch of (user, item, label) triples:

* :class:`DeviceSampler` — positives live on the device; each epoch permutes them,
  draws ``neg_per_pos`` uniform negatives per positive with one ``torch.randint``,
  shuffles, and hands out batches by index slicing. No per-sample Python.
* :class:`PerSampleDataset` + :func:`make_dataloader` — the textbook
  ``torch.utils.data`` path: ``__getitem__`` builds one sample in Python, the
  default collate stacks them, the batch is copied to the device.

Both yield ``(users, items, labels)`` with ``labels`` float32 (1 = positive).
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..metrics import throughput


# --------------------------------------------------------------------------- evaluation negatives


def sample_eval_negatives(users: np.ndarray, items: np.ndarray, *, num_users: int, num_items: int,
                          num_negatives: int = 100, seed: int = 0, chunk_users: int = 16384) -> np.ndarray:
    """(num_users, num_negatives) distinct items per user, none of them a positive of that user.

    ``users``/``items`` must hold *all* positives (train and test). Vectorized rejection
    sampling: draw more candidates than needed, reject positives (binary search in the
    sorted ``user * num_items + item`` keys) and repeats within a row, keep the first
    ``num_negatives`` survivors; rows that come up short are redrawn.
    """
    users = np.asarray(users, dtype=np.int64)
    items = np.asarray(items, dtype=np.int64)
    pos_keys = np.unique(users * num_items + items)  # sorted
    per_user = np.bincount(users, minlength=num_users)
    if (num_items - per_user < num_negatives).any():
        worst = int(per_user.argmax())
        raise ValueError(f"user {worst} has {per_user[worst]} positives among {num_items} items: "
                         f"fewer than {num_negatives} negatives are left to sample")
    rng = np.random.default_rng(seed)
    out = np.empty((num_users, num_negatives), dtype=np.int64)
    for start in range(0, num_users, chunk_users):  # a loop over user *chunks* bounds memory on ml-20m
        rows = np.arange(start, min(start + chunk_users, num_users))
        todo = rows
        for _ in range(4):
            if not todo.size:
                break
            # enough candidates for the densest user of this batch, with margin
            keep_frac = 1.0 - per_user[todo].max() / num_items
            m = int(num_negatives / keep_frac * 1.3) + 16
            cand = rng.integers(0, num_items, size=(todo.size, m))  # (R, m)
            keys = todo[:, None] * num_items + cand
            hit = np.searchsorted(pos_keys, keys).clip(max=pos_keys.size - 1)
            ok = pos_keys[hit] != keys  # not a positive of this user
            # drop repeats within a row: sort, mark equal neighbours, scatter back
            order = np.argsort(cand, axis=1, kind="stable")
            sorted_c = np.take_along_axis(cand, order, axis=1)
            dup_sorted = np.zeros_like(ok)
            dup_sorted[:, 1:] = sorted_c[:, 1:] == sorted_c[:, :-1]
            dup = np.empty_like(ok)
            np.put_along_axis(dup, order, dup_sorted, axis=1)
            ok &= ~dup
            enough = ok.sum(axis=1) >= num_negatives
            rank = np.cumsum(ok, axis=1) - 1
            take = ok & (rank < num_negatives) & enough[:, None]
            out[todo[enough]] = cand[take].reshape(-1, num_negatives)
            todo = todo[~enough]
        # users who rated most of the catalogue: rejection keeps failing, so draw exactly
        # from their complement (rare; a loop over these few users only)
        for u in todo:
            lo, hi = np.searchsorted(pos_keys, [u * num_items, (u + 1) * num_items])
            free = np.setdiff1d(np.arange(num_items), pos_keys[lo:hi] - u * num_items)
            out[u] = rng.choice(free, num_negatives, replace=False)
    return out


# --------------------------------------------------------------------------- device-resident sampler


class DeviceSampler:
    """Training batches produced on the device with tensor ops.

    Every positive appears exactly once per epoch, each with ``neg_per_pos`` negatives
    drawn uniformly over all items. Like NVIDIA's NCF reference, a uniform negative may
    collide with one of the user's positives (probability ~ density, about 4% on ml-1m);
    rejecting those would cost a lookup per sample for little accuracy.

    Under data parallelism every rank draws the same global batches (same seed, so the
    same permutation) and :class:`course_lib.parallel.DataParallel` gives each its slice.
    ``batch_size`` counts samples (positives + negatives), as in NVIDIA's reference.
    """

    def __init__(self, users: torch.Tensor, items: torch.Tensor, num_items: int, *, batch_size: int,
                 neg_per_pos: int = 4, seed: int = 0, drop_last: bool = False, chunk_positives: int = 1 << 16):
        if users.shape != items.shape or users.dim() != 1:
            raise ValueError("users and items must be 1-D tensors of equal length")
        self.users, self.items = users, items
        self.num_items = num_items
        self.batch_size = batch_size  # global: positives + negatives, all ranks together
        self.neg_per_pos = neg_per_pos
        self.drop_last = drop_last
        self.chunk_positives = chunk_positives
        self.device = users.device
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)

    @property
    def samples_per_epoch(self) -> int:
        return self.users.numel() * (1 + self.neg_per_pos)

    def __len__(self) -> int:
        n, b = self.samples_per_epoch, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def _chunk(self, idx: torch.Tensor):
        """Positives ``idx`` plus their negatives, shuffled: three (C * (1 + k),) tensors."""
        c, k, g = idx.numel(), self.neg_per_pos, self.generator
        users, items = self.users[idx], self.items[idx]  # (C,)
        neg_items = torch.randint(0, self.num_items, (c * k,), generator=g, device=self.device)  # (C*k,)
        users = torch.cat([users, users.repeat(k)])  # (C*(1+k),)
        items = torch.cat([items, neg_items])
        labels = torch.cat([torch.ones(c, device=self.device), torch.zeros(c * k, device=self.device)])
        perm = torch.randperm(users.numel(), generator=g, device=self.device)
        return users[perm], items[perm], labels[perm]

    def __iter__(self):
        """One epoch of batches. Positives are permuted globally, then expanded with their
        negatives a chunk at a time, so the first batch is ready at once and memory stays
        bounded (ml-20m's epoch is 100M samples)."""
        n, b = self.users.numel(), self.batch_size
        perm = torch.randperm(n, generator=self.generator, device=self.device)
        chunk = max(self.chunk_positives, b)
        rest = None
        for lo in range(0, n, chunk):
            u, i, y = self._chunk(perm[lo:lo + chunk])
            if rest is not None:
                u, i, y = (torch.cat([r, x]) for r, x in zip(rest, (u, i, y)))
            full = u.numel() // b * b
            for start in range(0, full, b):
                yield u[start:start + b], i[start:start + b], y[start:start + b]
            rest = (u[full:], i[full:], y[full:])
        if rest is not None and rest[0].numel() and not self.drop_last:
            yield rest


# --------------------------------------------------------------------------- the DataLoader path


class PerSampleDataset(Dataset):
    """The same epoch as :class:`DeviceSampler`, one Python sample at a time.

    Index ``idx`` is positive ``idx // (1 + neg_per_pos)``; slot 0 is the positive
    itself, the other slots draw a uniform negative item.
    """

    def __init__(self, users: torch.Tensor, items: torch.Tensor, num_items: int, *, neg_per_pos: int = 4,
                 seed: int = 0):
        self.users = users.cpu().numpy()
        self.items = items.cpu().numpy()
        self.num_items = num_items
        self.neg_per_pos = neg_per_pos
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self.users) * (1 + self.neg_per_pos)

    def __getitem__(self, idx: int):
        pos, slot = divmod(idx, 1 + self.neg_per_pos)
        user = int(self.users[pos])
        if slot == 0:
            return user, int(self.items[pos]), 1.0
        return user, int(self.rng.integers(self.num_items)), 0.0


def make_dataloader(users: torch.Tensor, items: torch.Tensor, num_items: int, *, batch_size: int,
                    neg_per_pos: int = 4, seed: int = 0, num_workers: int = 0) -> DataLoader:
    """A plain shuffled ``DataLoader`` with default collate (the lesson's "before")."""
    g = torch.Generator()
    g.manual_seed(seed)
    ds = PerSampleDataset(users, items, num_items, neg_per_pos=neg_per_pos, seed=seed)
    return DataLoader(ds, batch_size=batch_size, shuffle=True, generator=g, num_workers=num_workers)


def batch_production_rate(batches, num_samples: int, device: torch.device) -> float:
    """Samples/s of producing batches alone (on ``device``), for about ``num_samples`` samples."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while n < num_samples:
        for users, items, labels in batches:
            users, items, labels = (t.to(device, non_blocking=True) for t in (users, items, labels))
            n += labels.numel()
            if n >= num_samples:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    return throughput(n, time.perf_counter() - t0)
