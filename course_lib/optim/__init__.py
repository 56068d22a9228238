"""Large-batch optimization: lr scaling rules and schedules, LARS, LAMB (lessons 02, 03, 04, 07).

- ``schedules``: ``linear_scaled_lr``, ``sqrt_scaled_lr``, ``scaled_lr`` (by rule name), ``warmup_lr``, ``lr_at``,
  ``lr_factor``
- ``lars``: ``LARS``, ``lars_trust_ratio``, ``param_groups`` (biases and norm parameters out)
- ``adam``: Adam's implementations (``adam_kwargs``: for-loop, foreach, fused; ``fused_on_gpu``) and
  ``SparseEmbeddingAdam`` (SparseAdam for sparse embedding tables, Adam for the rest; lesson 01)
- ``lamb``: ``LAMB``, ``lamb_trust_ratio``
"""

from .adam import ADAM_IMPLS, SparseEmbeddingAdam, adam_kwargs, fused_on_gpu, resolved_adam_impl, sparse_tables
from .lamb import LAMB, lamb_trust_ratio
from .lars import LARS, lars_trust_ratio, param_groups
from .schedules import (
    DECAY_KINDS,
    LR_RULES,
    LR_SCALINGS,
    WARMUP_KINDS,
    linear_scaled_lr,
    lr_at,
    lr_factor,
    make_lambda,
    scaled_lr,
    sqrt_scaled_lr,
    warmup_lr,
)

__all__ = [
    "LARS",
    "LAMB",
    "param_groups",
    "fused_on_gpu",
    "ADAM_IMPLS",
    "adam_kwargs",
    "resolved_adam_impl",
    "sparse_tables",
    "SparseEmbeddingAdam",
    "lars_trust_ratio",
    "lamb_trust_ratio",
    "linear_scaled_lr",
    "sqrt_scaled_lr",
    "scaled_lr",
    "LR_RULES",
    "LR_SCALINGS",
    "warmup_lr",
    "lr_at",
    "lr_factor",
    "make_lambda",
    "WARMUP_KINDS",
    "DECAY_KINDS",
]
