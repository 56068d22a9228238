"""Offline MovieLens-like data in ml-1m's on-disk format (lesson 01, CI, offline nodes).

The generator writes ``ml-1m/ratings.dat`` (``UserID::MovieID::Rating::Timestamp``)
inside a zip, so the real parser in :mod:`course_lib.data.movielens` runs on it.
It has structure a model can learn, so the lessons' effects are real:

* low-rank preferences: user u picks item i with log-odds ``signal * <p_u, q_i>``;
* popularity skew: a Zipf-like item bias ``-zipf * log(popularity rank)``;
* activity skew: ratings per user are log-normal (at least ``min_per_user``, as ml-1m's 20);
* increasing timestamps per user, in a random order of the user's items, so the
  held-out latest item is a random positive.

Users sample their items without replacement by the Gumbel-top-k trick, vectorized
over a block of users at a time: deterministic given the seed, a few seconds for ml-1m size.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np

from ..fileio import atomic_path, atomic_write_text, file_digest

# named sizes; "ml-1m" matches ml-1m's shape (6040 users, 3706 rated movies, ~1M ratings)
SIZES = {
    "tiny": dict(num_users=300, num_items=200, num_ratings=15_000),  # unit tests
    "small": dict(num_users=1000, num_items=500, num_ratings=60_000),
    "ml-1m": dict(num_users=6040, num_items=3706, num_ratings=1_000_209),
}


def generate_ratings(num_users: int = 6040, num_items: int = 3706, num_ratings: int = 1_000_209, *,
                     rank: int = 16, signal: float = 2.5, zipf: float = 0.9, activity_sigma: float = 1.0,
                     min_per_user: int = 20, seed: int = 0, block: int = 512) -> dict[str, np.ndarray]:
    """Synthetic ratings as raw MovieLens-style columns (1-based, sparse movie ids)."""
    rng = np.random.default_rng(seed)
    max_per_user = num_items // 2
    if num_ratings > num_users * max_per_user or num_ratings < num_users * min_per_user:
        raise ValueError(f"{num_ratings} ratings do not fit {num_users} users x {num_items} items "
                         f"with {min_per_user}..{max_per_user} per user")
    # ratings per user: log-normal activity on top of the minimum, summing to ~num_ratings
    act = rng.lognormal(0.0, activity_sigma, num_users)
    n_u = min_per_user + np.floor(act / act.sum() * (num_ratings - min_per_user * num_users)).astype(np.int64)
    n_u = np.minimum(n_u, max_per_user)
    # low-rank preferences and a Zipf-like popularity bias (random item order)
    p = rng.normal(size=(num_users, rank)).astype(np.float32) / np.sqrt(rank)  # (U, r)
    q = rng.normal(size=(num_items, rank)).astype(np.float32)  # (I, r)
    pop = (-zipf * np.log(1.0 + rng.permutation(num_items))).astype(np.float32)  # (I,)
    users, items, affinity = [], [], []
    for lo in range(0, num_users, block):  # loop over user blocks only
        hi = min(lo + block, num_users)
        logits = signal * (p[lo:hi] @ q.T) + pop  # (B, I)
        gumbel = rng.gumbel(size=logits.shape).astype(np.float32)
        order = np.argsort(-(logits + gumbel), axis=1)  # Gumbel-top-k = sampling without replacement
        take = np.arange(num_items)[None, :] < n_u[lo:hi, None]  # (B, I)
        rows = np.broadcast_to(np.arange(lo, hi)[:, None], take.shape)
        users.append(rows[take])
        chosen = order[take]
        items.append(chosen)
        affinity.append(logits[rows[take] - lo, chosen])
    user = np.concatenate(users)
    item = np.concatenate(items)
    aff = np.concatenate(affinity)
    # star ratings 1..5 from the affinity's quantiles (cosmetic: implicit feedback ignores them)
    rating = 1 + np.searchsorted(np.quantile(aff, [0.06, 0.17, 0.43, 0.78]), aff)
    # increasing timestamps per user, from 2000-04-25 on, in a random order of the user's items
    start = 956_703_932 + rng.integers(0, 3 * 365 * 86400, num_users)
    shuffled = np.lexsort((rng.random(user.size), user))  # random order within each user
    user, item, rating = user[shuffled], item[shuffled], rating[shuffled]
    steps = rng.exponential(3600.0, user.size).astype(np.int64) + 1
    first = np.r_[True, user[1:] != user[:-1]]
    csum = np.cumsum(steps)
    offset = csum - np.maximum.accumulate(np.where(first, csum, 0))
    timestamp = start[user] + offset
    # ml-1m movie ids are sparse in 1..3952: mimic that so the id remapping is exercised
    movie_ids = np.sort(rng.choice(np.arange(1, int(num_items * 1.07) + 2), num_items, replace=False))
    return {"user": user + 1, "item": movie_ids[item], "rating": rating.astype(np.int64), "timestamp": timestamp}


def format_ratings_dat(cols: dict[str, np.ndarray]) -> bytes:
    """ml-1m's ``UserID::MovieID::Rating::Timestamp`` lines, built by vectorized string ops."""
    s = np.strings
    parts = [cols[k].astype(np.int64).astype(str) for k in ("user", "item", "rating", "timestamp")]
    line = parts[0]
    for part in parts[1:]:
        line = s.add(s.add(line, "::"), part)
    return ("\n".join(line.tolist()) + "\n").encode("ascii")


def checksum_path(path: str | os.PathLike) -> Path:
    """Where the md5 of a generated zip is recorded: ``<zip>.md5`` next to it."""
    return Path(f"{path}.md5")


def write_ml1m_zip(path: str | os.PathLike, *, seed: int = 0, **sizes) -> Path:
    """Write a synthetic ``ml-1m.zip``-layout archive (member ``ml-1m/ratings.dat``) atomically,
    then its md5 to ``<zip>.md5`` (see :func:`is_intact`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = generate_ratings(seed=seed, **sizes)
    checksum_path(path).unlink(missing_ok=True)  # a zip is trusted only once its checksum is written
    with atomic_path(path) as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            zf.writestr("ml-1m/ratings.dat", format_ratings_dat(cols))
            zf.writestr("ml-1m/README", _readme(seed, sizes))
        digest = file_digest(tmp, "md5")
    atomic_write_text(checksum_path(path), digest + "\n")
    return path


def is_intact(path: str | os.PathLike) -> bool:
    """True when ``path`` is a generated zip whose md5 matches the one recorded when it was written.

    A generated file has no published checksum, so it records its own: a zip damaged in the
    cache (a full disk, a bad copy, an edit) or one without a record is rebuilt, not parsed.
    """
    path = Path(path)
    try:
        recorded = checksum_path(path).read_text().strip()
        return path.is_file() and file_digest(path, "md5") == recorded
    except OSError:
        return False


def _readme(seed: int, sizes: dict) -> str:
    buf = io.StringIO()
    buf.write("SYNTHETIC data written by course_lib.data.synthetic, not MovieLens.\n")
    buf.write(f"seed={seed} {sizes}\nFormat: UserID::MovieID::Rating::Timestamp (as ml-1m/ratings.dat).\n")
    return buf.getvalue()
