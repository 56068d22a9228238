"""Training runs as workers: ``worker(rank, world_size, ...) -> record`` for every launcher (lessons 06, 07).

The same function runs under ``course_lib.dist.launch`` from a notebook cell, under
``torchrun`` (``python -m course_lib.train_ddp``, ``python -m course_lib.run``) and in a
SLURM job: it loads its data, trains through the one engine, and returns its record.
Everything it needs comes in its arguments (small, picklable), nothing from module state.

- :func:`ncf_worker` / :func:`ncf_runs`: NeuMF to a target hit rate (:class:`RunSpec`).
- :func:`mlm_worker`: BERT masked-LM, every rank checking it built the same data.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

import torch

from .. import dist as cdist
from ..data import load_implicit
from ..data.text import MLMData, build_mlm_data, load_corpus, train_tokenizer
from ..parallel.checkpoint import Checkpointer
from .mlm import MLMTrainConfig, train_mlm
from .engine import RunHooks
from .ncf import TrainConfig, default_target_hr, train_to_target


# --------------------------------------------------------------------------- NeuMF


@dataclass(frozen=True)
class RunSpec:
    """Everything a worker needs besides ``TrainConfig`` (which holds the budget and the target):
    where the data comes from, checkpoints, reporting. Small and picklable (no tensors).

    Each worker loads the data itself (``load_implicit`` caches processed data on disk).
    """

    dataset: str = "ml-1m"
    profile: str = "full"
    synthetic_size: str | None = None
    num_eval_negatives: int | None = None  # None: the dataset's protocol (load_implicit)
    evaluate_points: bool = True
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool = True
    label: str = ""
    progress: str = "log"
    default_target: bool = False  # cfg.target_hr None: train to the dataset's default target (scripts)
    fail_at_step: int | None = None  # debug: this rank raises after that many steps
    fail_rank: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


def load_data(spec: RunSpec):
    """The run's data; the first rank of each node prepares the cache, the others read it."""
    def load():
        return load_implicit(spec.dataset, profile=spec.profile, synthetic_size=spec.synthetic_size,
                             num_eval_negatives=spec.num_eval_negatives)

    data = load() if cdist.local_rank() == 0 else None
    cdist.barrier()
    return data if data is not None else load()


def ncf_worker(rank: int, world_size: int, cfg, spec) -> dict:
    """Train NeuMF on this rank's share of every global batch; the result record as a dict.

    ``cfg``: a ``TrainConfig`` (or its dict); ``spec``: a :class:`RunSpec` (or its dict).
    Every rank returns the record; only rank 0 reports progress and writes checkpoints.
    """
    cfg = cfg if isinstance(cfg, TrainConfig) else TrainConfig(**cfg)
    spec = spec if isinstance(spec, RunSpec) else RunSpec(**spec)
    data = load_data(spec)
    if spec.default_target and cfg.target_hr is None:
        cfg = cfg.replace(target_hr=default_target_hr(data))
    fail = spec.fail_at_step if rank == spec.fail_rank else None
    checkpoint = (Checkpointer(spec.checkpoint_dir, spec.checkpoint_every, resume=spec.resume, fail_at_step=fail)
                  if spec.checkpoint_dir or fail is not None else None)
    result = train_to_target(data, cfg, device=cdist.device(), progress=spec.progress,
                             label=spec.label or f"x{world_size} B{cfg.global_batch_size}",
                             hooks=RunHooks(evaluate_points=spec.evaluate_points, checkpoint=checkpoint))
    return {**result.to_dict(), "rank": rank, "spec": spec.to_dict()}


def ncf_runs(rank: int, world_size: int, cfgs: list, spec) -> list[dict]:
    """Several ``ncf_worker`` runs in one launch (saves the process start-up between them)."""
    return [ncf_worker(rank, world_size, cfg, spec) for cfg in cfgs]


# --------------------------------------------------------------------------- BERT


def data_digest(data: MLMData) -> str:
    """A short digest of the vocabulary and the token rows: equal digests, identical data."""
    h = hashlib.sha256(data.tokenizer.to_str().encode())
    for t in (data.train_ids, data.eval_inputs, data.eval_labels):
        h.update(t.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def check_same_data_on_all_ranks(data: MLMData) -> None:
    """Raise on every rank if the ranks built different data (each trains on its slice of one global batch)."""
    if not (cdist.is_initialized() and cdist.world_size() > 1):
        return
    digests = [None] * cdist.world_size()
    torch.distributed.all_gather_object(digests, data_digest(data))
    if len(set(digests)) > 1:
        raise RuntimeError(
            f"the ranks built different MLM data (digests by rank: {digests}). Every rank must load the same "
            "corpus and the same cached tokenizer: on several nodes, point COURSE_DATA_DIR at a file system "
            "they all share, or build the data once (rank 0) before launching.")


def mlm_worker(rank: int, world_size: int, cfg: MLMTrainConfig, data_spec: dict) -> dict | None:
    """``launch(mlm_worker, W, cfg, data_spec)``: each rank builds the data (tokenizer from the cache) and trains.

    ``data_spec``: keyword arguments of :func:`course_lib.data.text.build_mlm_data` plus
    ``corpus`` (the ``load_corpus`` name). Returns the record on rank 0, None elsewhere.
    """
    spec = dict(data_spec)
    corpus = load_corpus(spec.pop("corpus", "auto"), spec.pop("text_dir", None))
    device = cdist.device()
    # Hugging Face's WordPiece trainer is not deterministic (hash-map iteration order breaks
    # ties differently in each process: huggingface/tokenizers#1794), so ranks that each
    # trained a tokenizer would tokenize the same text differently. Rank 0 trains and caches
    # it; the others wait and load the cached file.
    if cdist.is_main_process():
        train_tokenizer(corpus, spec.get("vocab_size", 8192))
    cdist.barrier()
    data = build_mlm_data(corpus, device=device, **spec)
    check_same_data_on_all_ranks(data)
    record = train_mlm(cfg, data, device=device, progress="log")
    return record if cdist.is_main_process() else None
