"""Negative sampling and batch production (lesson 01: the data-loading bottleneck).

Ways to produce the same training epoch of (user, item, label) triples:

* :class:`DeviceSampler` — positives live on the device; each epoch permutes them,
  draws ``neg_per_pos`` uniform negatives per positive with one ``torch.randint``,
  shuffles, and hands out batches by index slicing. No per-sample Python.
* :class:`PerSampleDataset` + :func:`make_dataloader` — the textbook
  ``torch.utils.data`` path: ``__getitem__`` builds one sample in Python, the
  default collate stacks them, the batch is copied to the device. Its textbook
  improvements are :func:`make_dataloader`'s arguments (worker processes, pinned memory,
  prefetching, persistent workers) and :class:`BatchedDataset` (``batched=True``): the
  same shuffled indices, a whole batch built per call with array slicing.

All yield ``(users, items, labels)`` with ``labels`` float32 (1 = positive). Worker
processes are shut down when the loader is closed (:meth:`ClosingDataLoader.close`), which
the training loop does however it ends — an interrupted cell leaves none behind.
"""

from __future__ import annotations

import time
import weakref

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

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
            start = 0
            while u.numel() - start >= self.batch_size:  # read per batch: lesson 11's adaptive batch changes it
                b = self.batch_size
                yield u[start:start + b], i[start:start + b], y[start:start + b]
                start += b
            rest = (u[start:], i[start:], y[start:])
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


class BatchedDataset(PerSampleDataset):
    """:class:`PerSampleDataset`'s epoch, a batch per call: ``dataset[indices]`` takes the list of
    sample indices a ``BatchSampler`` yields and builds the whole batch with array operations
    (one ``integers`` call for its negatives), so the Python cost is per batch, not per sample."""

    def __getitem__(self, indices):
        idx = np.asarray(indices, dtype=np.int64)  # (B,)
        pos, slot = np.divmod(idx, 1 + self.neg_per_pos)
        users = self.users[pos]
        items = np.where(slot == 0, self.items[pos], self.rng.integers(self.num_items, size=idx.size))
        return torch.from_numpy(users), torch.from_numpy(items), torch.from_numpy((slot == 0).astype(np.float32))


def _seed_worker(worker_id: int) -> None:
    """A worker's own negatives: each worker process starts with a *copy* of the dataset, numpy
    generator included, so without this every worker would draw the same negatives (torch's
    "Randomness in multi-process data loading" note). torch gives each worker its own seed
    (the loader's base seed + worker id), which reseeds the copy: reproducible, and different."""
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)


class ClosingDataLoader(DataLoader):
    """A ``DataLoader`` that can shut its worker processes down: :meth:`close` (or ``with``).

    Workers are processes; an iterator that is still referenced keeps them alive — a cell
    interrupted mid-epoch keeps its frames (and so the iterator) in the traceback, and
    ``persistent_workers=True`` keeps them in the loader on purpose. ``close()`` stops the workers
    of every iterator this loader made. (It uses the iterator's ``_shutdown_workers``, the method
    torch's own ``__del__`` calls; torch 2.13.)"""

    def __init__(self, *args, **kwargs):
        self._iterators = weakref.WeakSet()  # before DataLoader's __init__: it forbids some attributes after
        super().__init__(*args, **kwargs)

    def _get_iterator(self):
        it = super()._get_iterator()
        self._iterators.add(it)
        return it

    def close(self) -> None:
        for it in list(self._iterators):
            shutdown = getattr(it, "_shutdown_workers", None)  # only the multi-process iterator has workers
            if shutdown is not None:
                shutdown()
        self._iterators.clear()
        self._iterator = None  # a persistent loader's iterator: the next epoch starts new workers

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_dataloader(users: torch.Tensor, items: torch.Tensor, num_items: int, *, batch_size: int,
                    neg_per_pos: int = 4, seed: int = 0, num_workers: int = 0, pin_memory: bool = False,
                    prefetch_factor: int | None = None, persistent_workers: bool = False,
                    batched: bool = False) -> ClosingDataLoader:
    """A shuffled ``DataLoader`` over the epoch (lesson 01's data-loading ladder).

    ``batched=False``: :class:`PerSampleDataset` with the default collate (the textbook "before");
    ``batched=True``: :class:`BatchedDataset` fed by a ``BatchSampler`` over the same shuffled
    indices (``batch_size=None``: the loader does no batching of its own). The rest are the
    DataLoader's own arguments; ``pin_memory`` matters only for copies to a GPU (the caller
    passes it for CUDA only). Close the loader to stop its workers (:class:`ClosingDataLoader`).
    """
    g = torch.Generator()
    g.manual_seed(seed)
    workers = {"num_workers": num_workers, "pin_memory": pin_memory}
    if num_workers:
        workers.update(worker_init_fn=_seed_worker, persistent_workers=persistent_workers,
                       prefetch_factor=prefetch_factor)
    if not batched:
        ds = PerSampleDataset(users, items, num_items, neg_per_pos=neg_per_pos, seed=seed)
        return ClosingDataLoader(ds, batch_size=batch_size, shuffle=True, generator=g, **workers)
    ds = BatchedDataset(users, items, num_items, neg_per_pos=neg_per_pos, seed=seed)
    # the same sample order as shuffle=True: DataLoader builds exactly this sampler from its generator
    batches = BatchSampler(RandomSampler(ds, generator=g), batch_size=batch_size, drop_last=False)
    # generator=g as well: each epoch's iterator first draws its workers' base seed from it, as above
    return ClosingDataLoader(ds, sampler=batches, batch_size=None, generator=g, **workers)


def time_loading(batches, num_samples: int, device: torch.device) -> tuple[float, float, float]:
    """``(first_batch_s, steady_samples_per_s, samples_per_s)`` of producing batches alone (on
    ``device``) for about ``num_samples`` samples, from a fresh ``iter(batches)``: the wait for the
    first batch (an epoch's start-up: its shuffle, a DataLoader's workers starting), the throughput
    after it, and the throughput over all of them."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n, first, first_n = 0, None, 0
    while n < num_samples:
        for users, items, labels in batches:
            users, items, labels = (t.to(device, non_blocking=True) for t in (users, items, labels))
            n += labels.numel()
            if first is None:
                first, first_n = time.perf_counter() - t0, n
            if n >= num_samples:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    total = time.perf_counter() - t0
    return first or 0.0, throughput(n - first_n, total - (first or 0.0)), throughput(n, total)


def batch_production_rate(batches, num_samples: int, device: torch.device) -> float:
    """Samples/s of producing batches alone (on ``device``), for about ``num_samples`` samples."""
    return time_loading(batches, num_samples, device)[2]
