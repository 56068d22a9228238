"""MovieLens as implicit feedback, the NCF way (lesson 01).

Where the files come from, in this order (first hit wins):

1. ``data_dir`` argument, then ``$COURSE_MOVIELENS_DIR`` — a directory where an
   instructor staged ``ml-1m.zip`` (checksummed) or the extracted ``ml-1m/ratings.dat``
   (row count checked) for offline compute nodes;
2. the per-user cache ``$COURSE_DATA_DIR`` or ``$XDG_CACHE_HOME/largebatch-course``
   (``~/.cache/largebatch-course``) — never a shared world-writable path;
3. a download from the publisher (files.grouplens.org), written to a temporary name,
   md5-verified, then renamed — a half-finished download never passes;
4. otherwise (offline, or ``dataset="synthetic"``, or the smoke profile) the synthetic
   set of :mod:`course_lib.data.synthetic`, written in ml-1m's on-disk format so the
   same parser below runs.

Implicit feedback as in He et al. (2017), "Neural Collaborative Filtering": every
rating is a positive; raw ids are mapped to 0..n-1; each user's latest interaction
(by timestamp, ties broken by the larger raw item id) is held out as the test item;
evaluation ranks it against ``num_eval_negatives`` items the user never rated.
"""

from __future__ import annotations

import os
import zlib
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from ..config import resolve_profile
from ..fileio import atomic_torch_save, cache_dir, clean_cache_once, download, file_digest
from ..tables import Table
from . import synthetic as _synthetic
from .sampler import sample_eval_negatives

PROCESSED_VERSION = 1  # bump when the processed format or split rule changes


class DatasetError(RuntimeError):
    """A dataset file is missing, truncated or corrupt; the message says how to fix it."""


@dataclass(frozen=True)
class MovieLensSpec:
    name: str
    url: str
    md5: str  # of the zip, as published next to it (<url>.md5)
    member: str  # ratings file inside the zip
    fmt: str  # "dat" (UserID::MovieID::Rating::Timestamp) or "csv" (header, comma)
    num_ratings: int
    # Negatives each held-out item is ranked against, as the protocol the course quotes for
    # this set: 100 for ml-1m (He et al., 2017), 999 for ml-20m (MLPerf's NCF benchmark, whose
    # target HR@10 0.635 is for 999). With 100 negatives ml-20m's HR@10 reaches ~0.96
    # (NVIDIA's reference), so MLPerf's target would be crossed at the first evaluation.
    eval_negatives: int = 100

    @property
    def zip_name(self) -> str:
        return f"{self.name}.zip"


# md5 values: the publisher's .md5 files; cross-checked against several independent
# public loaders (see data/README.md).
DATASETS: dict[str, MovieLensSpec] = {
    "ml-1m": MovieLensSpec("ml-1m", "https://files.grouplens.org/datasets/movielens/ml-1m.zip",
                           "c4d9eecfca2ab87c1945afe126590906", "ml-1m/ratings.dat", "dat", 1_000_209),
    "ml-20m": MovieLensSpec("ml-20m", "https://files.grouplens.org/datasets/movielens/ml-20m.zip",
                            "cd245b17a1ae2cc31bb14903e1204af3", "ml-20m/ratings.csv", "csv", 20_000_263, 999),
    "ml-25m": MovieLensSpec("ml-25m", "https://files.grouplens.org/datasets/movielens/ml-25m.zip",
                            "6b51fb2759a8657d3bfcbfc42b592ada", "ml-25m/ratings.csv", "csv", 25_000_095, 999),
}


# --------------------------------------------------------------------------- paths




def search_dirs(data_dir: str | os.PathLike | None = None) -> list[Path]:
    """Directories searched for MovieLens files, in order."""
    dirs = [Path(d).expanduser() for d in (data_dir, os.environ.get("COURSE_MOVIELENS_DIR")) if d]
    return dirs + [cache_dir()]


def find_local(name: str, data_dir: str | os.PathLike | None = None) -> Path | None:
    """The zip or extracted ratings file of ``name`` in the search dirs, or None."""
    spec = DATASETS[name]
    member = Path(spec.member)
    for d in search_dirs(data_dir):
        for candidate in (d / spec.zip_name, d / member, d / member.name):
            if candidate.is_file():
                return candidate
    return None


# --------------------------------------------------------------------------- integrity


def md5sum(path: str | os.PathLike) -> str:
    return file_digest(path, "md5")


class ChecksumMismatch(DatasetError):
    """A file's md5 differs from the published one."""

    def __init__(self, message: str, got: str, expected: str):
        super().__init__(message)
        self.got, self.expected = got, expected


def verify_md5(path: str | os.PathLike, expected: str, *, url: str = "") -> None:
    """Raise :class:`DatasetError` naming the file, both checksums and the fix on mismatch.

    A file that is present is used as it is and never downloaded again (``download=True``
    only applies when nothing is found), so the fix is always to remove the bad file.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path} does not exist (expected md5 {expected}).")
    got = md5sum(path)
    if got != expected:
        then = (f"the next load downloads a fresh copy from {url} (on a machine with internet)"
                if url else "put an intact copy in its place")
        raise ChecksumMismatch(
            f"{path} is truncated or corrupt: md5 {got}, expected {expected}. A file that is there is "
            f"never downloaded again, so delete it or move it aside; then {then}, or stage an intact copy "
            "in $COURSE_MOVIELENS_DIR.", got, expected)


def publisher_reachable(url: str, timeout: float = 3.0) -> bool:
    """A HEAD request with a short timeout: offline nodes answer False quickly, never hang."""
    try:
        req = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return 200 <= resp.status < 400
    except (urllib.error.URLError, OSError, ValueError):
        return False


def download_zip(name: str, dest_dir: str | os.PathLike | None = None, *, timeout: float = 30.0) -> Path:
    """Download ``name``'s zip into the cache: temp name -> md5 check -> rename."""
    spec = DATASETS[name]
    dest = Path(dest_dir or cache_dir()) / spec.zip_name
    try:
        return download(spec.url, dest, verify=lambda tmp: verify_md5(tmp, spec.md5, url=spec.url),
                        timeout=timeout)
    except ChecksumMismatch as err:
        raise DatasetError(
            f"the download of {spec.url} is incomplete or corrupt (md5 {err.got}, expected {err.expected}); "
            f"nothing was saved to {dest}. Try again; if it keeps failing, fetch the file another way and "
            "stage it in $COURSE_MOVIELENS_DIR.") from None


# --------------------------------------------------------------------------- parsing


def _iter_chunks(f, chunk: int = 1 << 26):
    """Yield byte blocks of whole lines."""
    rest = b""
    while True:
        block = f.read(chunk)
        if not block:
            if rest.strip():
                yield rest
            return
        block = rest + block
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            rest = block
            continue
        rest = block[cut:]
        yield block[:cut]


def _open_ratings(path: Path, spec: MovieLensSpec):
    if path.suffix == ".zip":
        try:
            zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, EOFError, OSError) as err:
            raise DatasetError(f"{path} is not a readable zip ({err}): it is truncated or corrupt. Delete it or "
                               "move it aside and fetch it again.") from None
        try:
            return zf, zf.open(spec.member)
        except KeyError:
            zf.close()
            raise DatasetError(f"{path} has no member {spec.member}; is it really {spec.zip_name}?") from None
    return None, open(path, "rb")


def _malformed_line(where: str, block: bytes, lines_before: int, fmt: str) -> str:
    """The error for a block numpy could not parse: find and quote its first bad line."""
    layout = "UserID::MovieID::Rating::Timestamp" if fmt == "dat" else "userId,movieId,rating,timestamp"
    for i, line in enumerate(block.split(b"\n")):
        fields = line.split()
        if not fields:
            continue
        try:
            ok = len(fields) == 4 and all(np.isfinite(float(x)) for x in fields)
        except ValueError:
            ok = False
        if not ok:
            shown = line.decode("latin-1")[:80].replace(" ", "::" if fmt == "dat" else ",")
            return (f"{where}: line {lines_before + i + 1} is not '{layout}' (4 numbers): {shown!r}. The file is "
                    "corrupt or not a MovieLens ratings file; delete it or move it aside and stage the original "
                    "zip (or let the course download it).")
    last = lines_before + block.count(b"\n")
    return (f"{where}: lines {lines_before + 1}-{last} do not split into '{layout}' "
            "columns; the file is truncated or corrupt. Delete it or move it aside and stage the original zip.")


def parse_ratings(path: str | os.PathLike, fmt: str, *, member: str | None = None) -> dict[str, np.ndarray]:
    """Read a MovieLens ratings file (or a zip holding it) into int64 columns.

    ``fmt="dat"``: ml-1m's ``UserID::MovieID::Rating::Timestamp``; ``fmt="csv"``: ml-20m's
    ``userId,movieId,rating,timestamp`` with a header line. Parsed in C by numpy, in
    64 MB blocks of whole lines (no Python loop over ratings).
    """
    path = Path(path)
    spec = MovieLensSpec("?", "", "", member or ("ml-1m/ratings.dat" if fmt == "dat" else "ratings.csv"), fmt, 0)
    if fmt not in ("dat", "csv"):
        raise ValueError(f"unknown ratings format {fmt!r}; use 'dat' or 'csv'")
    zf, f = _open_ratings(path, spec)
    where = f"{path} (member {spec.member})" if path.suffix == ".zip" else str(path)
    cols = []
    try:
        first = True
        lines_before = 0  # of the file, before this block
        for raw in _iter_chunks(f):
            block = raw
            if fmt == "csv":
                if first:
                    header, _, block = block.partition(b"\n")
                    if not header.lower().startswith(b"userid"):
                        raise DatasetError(f"{where}: expected a 'userId,movieId,rating,timestamp' header, got "
                                           f"{header[:60]!r}. It is not a MovieLens ratings file; delete it or move it "
                                           "aside and stage the original zip.")
                    lines_before += 1
                block = block.replace(b",", b" ")
            else:
                block = block.replace(b"::", b" ")
            first = False
            try:
                vals = np.fromstring(block.decode("latin-1"), sep=" ", dtype=np.float64)
            except ValueError:  # numpy: "string or file could not be read to its end due to unmatched data"
                vals = None
            if vals is None or vals.size % 4:
                raise DatasetError(_malformed_line(where, block, lines_before, fmt))
            cols.append(vals.reshape(-1, 4))
            lines_before += block.count(b"\n")
    except (zipfile.BadZipFile, EOFError, zlib.error) as err:
        raise DatasetError(f"{path} is not a readable zip ({err}): it is truncated or corrupt. Delete it or move it "
                           "aside and fetch it again.") from None
    finally:
        f.close()
        if zf is not None:
            zf.close()
    arr = np.concatenate(cols) if cols else np.zeros((0, 4))
    return {
        "user": arr[:, 0].astype(np.int64),
        "item": arr[:, 1].astype(np.int64),
        "rating": arr[:, 2].astype(np.float32),
        "timestamp": arr[:, 3].astype(np.int64),
    }


# --------------------------------------------------------------------------- implicit data


@dataclass
class ImplicitData:
    """Leave-one-out implicit-feedback data; ids are contiguous 0..n-1."""

    name: str
    synthetic: bool
    num_users: int
    num_items: int
    train_users: torch.Tensor  # (N,) int64
    train_items: torch.Tensor  # (N,) int64
    test_items: torch.Tensor  # (num_users,) int64, the held-out latest item per user
    eval_negatives: torch.Tensor  # (num_users, num_neg) int64, never a positive of that user
    source: str  # a sentence saying where the data came from
    meta: dict = field(default_factory=dict)

    @property
    def num_train(self) -> int:
        return int(self.train_users.numel())

    @property
    def num_eval_negatives(self) -> int:
        return int(self.eval_negatives.shape[1])

    @property
    def device(self) -> torch.device:
        return self.train_users.device

    def to(self, device) -> "ImplicitData":
        t = lambda x: x.to(device)
        return replace(self, train_users=t(self.train_users), train_items=t(self.train_items),
                       test_items=t(self.test_items), eval_negatives=t(self.eval_negatives))

    def stats(self) -> Table:
        """Dataset statistics (deterministic for a given file and seed)."""
        n = self.num_train + self.num_users
        t = Table(["property", "value"], title=f"{self.name} as implicit feedback")
        t.add(property="source", value="synthetic" if self.synthetic else "MovieLens (GroupLens)")
        t.add(property="users", value=self.num_users)
        t.add(property="items", value=self.num_items)
        t.add(property="interactions", value=n)
        t.add(property="train positives", value=self.num_train)
        t.add(property="density", value=f"{n / (self.num_users * self.num_items):.2%}")
        t.add(property="eval negatives per user", value=self.num_eval_negatives)
        return t

    def __repr__(self) -> str:
        return (f"ImplicitData({self.name!r}, synthetic={self.synthetic}, users={self.num_users}, "
                f"items={self.num_items}, train={self.num_train}, eval_negatives={self.num_eval_negatives}, "
                f"device={self.device})")


def leave_one_out(users: np.ndarray, items: np.ndarray, timestamps: np.ndarray, *, min_interactions: int = 2):
    """Map ids to 0..n-1 and hold out each user's latest interaction.

    Ties in time are broken by the larger raw item id (deterministic). Users with fewer
    than ``min_interactions`` are dropped (MovieLens has >= 20 per user, so none are).
    Returns (train_users, train_items, test_items, num_users, num_items) as numpy int64.
    """
    _, inverse, counts = np.unique(users, return_inverse=True, return_counts=True)
    keep_user = counts[inverse] >= min_interactions
    users, items, timestamps = users[keep_user], items[keep_user], timestamps[keep_user]
    _, u = np.unique(users, return_inverse=True)
    _, i = np.unique(items, return_inverse=True)
    order = np.lexsort((items, timestamps, u))  # by user, then time, then raw item id
    u, i = u[order], i[order]
    is_last = np.r_[u[1:] != u[:-1], True]  # the latest interaction of each user
    num_users, num_items = int(u.max()) + 1, int(i.max()) + 1
    test_items = np.empty(num_users, dtype=np.int64)
    test_items[u[is_last]] = i[is_last]
    return u[~is_last].astype(np.int64), i[~is_last].astype(np.int64), test_items, num_users, num_items


def implicit_from_file(path: str | os.PathLike, fmt: str, *, name: str, synthetic: bool, source: str,
                       num_eval_negatives: int = 100, seed: int = 0, member: str | None = None,
                       expected_ratings: int | None = None) -> ImplicitData:
    """Parse a ratings file, split it leave-one-out and sample evaluation negatives."""
    cols = parse_ratings(path, fmt, member=member)
    if expected_ratings is not None and len(cols["user"]) != expected_ratings:
        raise DatasetError(
            f"{path} has {len(cols['user'])} ratings, expected {expected_ratings}: the file is truncated "
            f"or not the published one; delete it and stage the original zip instead."
        )
    tu, ti, test, nu, ni = leave_one_out(cols["user"], cols["item"], cols["timestamp"])
    negs = sample_eval_negatives(np.concatenate([tu, np.arange(nu)]), np.concatenate([ti, test]),
                                 num_users=nu, num_items=ni, num_negatives=num_eval_negatives, seed=seed)
    return ImplicitData(name, synthetic, nu, ni, torch.from_numpy(tu), torch.from_numpy(ti),
                        torch.from_numpy(test), torch.from_numpy(negs), source,
                        meta={"file": str(path), "eval_negatives_seed": seed})


# --------------------------------------------------------------------------- processed cache


def _processed_path(key: str) -> Path:
    return cache_dir() / "processed" / f"{key}-v{PROCESSED_VERSION}.pt"


def _save_processed(data: ImplicitData, path: Path) -> None:
    payload = {
        "name": data.name, "synthetic": data.synthetic, "num_users": data.num_users,
        "num_items": data.num_items, "source": data.source, "meta": {k: str(v) for k, v in data.meta.items()},
        "train_users": data.train_users, "train_items": data.train_items,
        "test_items": data.test_items, "eval_negatives": data.eval_negatives,
    }
    atomic_torch_save(payload, path)


def _load_processed(path: Path) -> ImplicitData | None:
    if not path.is_file():
        return None
    try:
        p = torch.load(path, weights_only=True)
        return ImplicitData(p["name"], p["synthetic"], p["num_users"], p["num_items"], p["train_users"],
                            p["train_items"], p["test_items"], p["eval_negatives"], p["source"], p["meta"])
    except Exception:  # a stale or damaged cache is rebuilt, never trusted
        return None


# --------------------------------------------------------------------------- entry point


def load_implicit(dataset: str = "ml-1m", *, profile: str = "full", data_dir: str | os.PathLike | None = None,
                  download: bool = True, num_eval_negatives: int | None = None, seed: int = 0,
                  synthetic_size: str | None = None, use_cache: bool = True) -> ImplicitData:
    """The lessons' one entry point: real MovieLens when available, else synthetic.

    ``dataset``: "ml-1m", "ml-20m", "ml-25m" or "synthetic". The smoke profile always
    uses the small synthetic set. ``data.source`` says in a sentence which data ran;
    ``data.synthetic`` is the flag. Processed data are cached per dataset, negatives and seed.
    ``num_eval_negatives``: None = the protocol of the set that runs (100 for ml-1m and the
    synthetic sets, 999 for ml-20m/25m as MLPerf; see :class:`MovieLensSpec`).
    """
    # Names are checked before the profile is: a typo must fail in the smoke profile (CI) too,
    # not quietly run on synthetic data there and fail only in the full course.
    if dataset != "synthetic" and dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}: choose one of {sorted(DATASETS)} or 'synthetic' "
                         "(check the DATASET parameter of the notebook or the --dataset option).")
    if synthetic_size is not None:
        _check_synthetic_size(synthetic_size)
    clean_cache_once()  # temporary files of writers that were killed (a dead kernel, a killed job)
    profile = resolve_profile(profile)
    if num_eval_negatives is not None and num_eval_negatives < 1:
        raise ValueError(f"num_eval_negatives={num_eval_negatives}: need at least 1 negative per user")
    # the synthetic sets stand in for ml-1m and keep its protocol
    synthetic_negatives = num_eval_negatives or DATASETS["ml-1m"].eval_negatives
    if profile == "smoke":
        return load_synthetic("small", num_eval_negatives=synthetic_negatives, seed=seed,
                              reason="the smoke profile always uses the small synthetic set", use_cache=use_cache)
    if dataset == "synthetic":
        return load_synthetic(synthetic_size or "ml-1m", num_eval_negatives=synthetic_negatives, seed=seed,
                              reason="dataset='synthetic' was requested", use_cache=use_cache)
    spec = DATASETS[dataset]
    path, how = _locate(dataset, data_dir, download)
    if path is None:
        looked = ", ".join(str(d) for d in search_dirs(data_dir))
        return load_synthetic(
            "ml-1m", num_eval_negatives=synthetic_negatives, seed=seed,
            use_cache=use_cache,
            reason=f"{dataset} was not found locally (looked in {looked})"
                   + (" and files.grouplens.org is unreachable" if download else " and download=False"),
        )
    return _load_real(dataset, path, how, num_eval_negatives=num_eval_negatives or spec.eval_negatives, seed=seed,
                      use_cache=use_cache)


def _locate(dataset: str, data_dir, download: bool) -> tuple[Path | None, str]:
    """The real set's file (found locally, else downloaded when allowed and reachable) and how it was got."""
    path = find_local(dataset, data_dir)
    how = f"found at {path}" if path else ""
    if path is None and download:
        url = DATASETS[dataset].url
        if publisher_reachable(url):
            path = download_zip(dataset)
            how = f"downloaded from {url} to {path}"
    return path, how


def _load_real(dataset: str, path: Path, how: str, *, num_eval_negatives: int, seed: int,
               use_cache: bool) -> ImplicitData:
    """Real MovieLens from ``path``: the processed cache when it is of this very file, else verified and parsed."""
    spec = DATASETS[dataset]
    key = f"{dataset}-neg{num_eval_negatives}-seed{seed}"
    # A hit must be this very file: the path, and its size and mtime, as when it was verified and
    # parsed (a hit skips the md5 of a 300 MB zip; a file replaced at the same path is a miss).
    cached = _load_processed(_processed_path(key)) if use_cache else None
    if cached is not None and cached.meta.get("file") == str(path) and cached.meta.get("file_stamp") == _stamp(path):
        return cached
    if path.suffix == ".zip":
        verify_md5(path, spec.md5, url=spec.url)
        expected = None
    else:
        expected = spec.num_ratings  # an extracted file has no published checksum: check its row count
    data = implicit_from_file(path, spec.fmt, name=dataset, synthetic=False,
                              source=f"Real MovieLens {dataset} (GroupLens), {how}.",
                              num_eval_negatives=num_eval_negatives, seed=seed, member=spec.member,
                              expected_ratings=expected)
    data = replace(data, meta={**data.meta, "file_stamp": _stamp(path)})
    if use_cache:
        _save_processed(data, _processed_path(key))
    return data

def _stamp(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def load_synthetic(size: str = "ml-1m", *, num_eval_negatives: int = 100, seed: int = 0, reason: str = "",
                   use_cache: bool = True) -> ImplicitData:
    """The synthetic set of ``size`` (see :data:`synthetic.SIZES`), parsed by the real ml-1m parser."""
    params = _synthetic.SIZES[_check_synthetic_size(size)]
    clean_cache_once()
    why = f" because {reason}" if reason else ""
    # The sentence says why synthetic data runs *this* time, so it is never taken from the cache.
    source = (f"SYNTHETIC data ({params['num_users']} users x {params['num_items']} items, seed {seed}, "
              f"ml-1m file format){why}; numbers are not comparable to published MovieLens results.")
    key = f"synthetic-{size}-s{seed}-neg{num_eval_negatives}"
    cached = _load_processed(_processed_path(key)) if use_cache else None
    if cached is not None:
        return replace(cached, source=source)
    zpath = cache_dir() / "synthetic" / f"synthetic-{size}-seed{seed}.zip"
    if not _synthetic.is_intact(zpath):  # missing, damaged, or without its recorded checksum
        _synthetic.write_ml1m_zip(zpath, seed=seed, **params)
    data = implicit_from_file(
        zpath, "dat", name=f"synthetic-{size}", synthetic=True, member="ml-1m/ratings.dat",
        source=source, num_eval_negatives=num_eval_negatives, seed=seed,
    )
    if use_cache:
        _save_processed(data, _processed_path(key))
    return data


def _check_synthetic_size(size: str) -> str:
    if size not in _synthetic.SIZES:
        raise ValueError(f"unknown synthetic_size {size!r}: choose one of {list(_synthetic.SIZES)} "
                         "(check the synthetic_size argument or the --synthetic-size option).")
    return size


def describe_data_sources(data_dir: str | os.PathLike | None = None, *, check_online: bool = True) -> Table:
    """For lesson 00: where each MovieLens set would come from on this machine."""
    t = Table(["dataset", "status", "where"], title="MovieLens data sources")
    online = None
    for name in ("ml-1m", "ml-20m"):
        spec = DATASETS[name]
        path = find_local(name, data_dir)
        if path is not None:
            t.add(dataset=name, status="found locally", where=str(path))
            continue
        if online is None:
            online = check_online and publisher_reachable(spec.url)
        if online:
            t.add(dataset=name, status="downloadable", where=f"{spec.url} -> {cache_dir()}")
        else:
            t.add(dataset=name, status="will use synthetic (offline)",
                  where="stage the zip in $COURSE_MOVIELENS_DIR to use the real data")
    return t
