"""Ways to run Adam's step over NeuMF's embedding tables (lesson 01: the bottleneck after the sampler).

Dense Adam updates *every* row of every table at every step: its moments decay and its weight
moves even for the rows no sample of the batch looked up, so its cost grows with the tables,
not with the batch. Two ways to make that step cheaper, both measured in lesson 01:

* **how the same update is computed** (``adam_kwargs``): torch's three implementations of
  ``torch.optim.Adam`` (torch.optim docs, "Algorithms"): ``"for-loop"`` (a few kernels per
  parameter, launched from Python), ``"foreach"`` (each operation once over the list of
  parameters) and ``"fused"`` (one kernel for the whole update; CUDA, and CPU since torch 2.4 —
  measured here on torch 2.13). The same arithmetic, up to float rounding.
* **a different update** (:class:`SparseEmbeddingAdam`): the tables return sparse gradients
  (``nn.Embedding(sparse=True)``) and ``torch.optim.SparseAdam`` updates only the rows present in
  the batch; the dense layers keep ``torch.optim.Adam``. This is "lazy" Adam: the moments of an
  absent row are not decayed and its weight does not move, so it is *not* Adam — lesson 01
  measures its HR@10 next to Adam's before trusting its speed. (Even on a row present at every
  step it differs slightly: SparseAdam adds ``eps`` to ``sqrt(v)`` before the bias correction,
  Adam after it, so SparseAdam's ``eps`` acts like ``eps / sqrt(1 - beta2**t)`` — 32x at the first
  step, 1x after a few thousand; read in torch 2.13's ``torch.optim._functional.sparse_adam``.)
"""

from __future__ import annotations

import torch
from torch import nn

ADAM_IMPLS = ("auto", "for-loop", "foreach", "fused")


def fused_on_gpu(model: nn.Module) -> bool:
    """Whether torch's fused Adam/AdamW kernel applies: every parameter a floating CUDA tensor.

    One kernel launch for all parameters instead of several per tensor (a large share of
    NeuMF's step on GPUs, where the embeddings' update is most of the work). The CPU keeps
    the default implementation, which the suite's CPU references were made with.
    """
    params = list(model.parameters())
    return bool(params) and all(p.is_cuda and p.is_floating_point() for p in params)


def adam_kwargs(impl: str, model: nn.Module) -> dict:
    """The ``foreach``/``fused`` arguments of ``torch.optim.Adam`` for implementation ``impl``.

    ``"auto"`` is what every run of the course used before the choice existed: fused on CUDA
    (:func:`fused_on_gpu`), torch's own default elsewhere (the for-loop on CPU tensors:
    ``torch.optim.optimizer._default_to_fused_or_foreach`` picks foreach for CUDA tensors only).
    """
    if impl not in ADAM_IMPLS:
        raise ValueError(f"adam_impl={impl!r}; choose one of {ADAM_IMPLS}")
    if impl == "auto":
        return {"fused": fused_on_gpu(model)}
    return {"for-loop": {"foreach": False, "fused": False}, "foreach": {"foreach": True},
            "fused": {"fused": True}}[impl]


def resolved_adam_impl(optimizer: torch.optim.Optimizer) -> str:
    """Which implementation an Adam (or the dense half of :class:`SparseEmbeddingAdam`) runs:
    "fused", "foreach" or "for-loop" (``foreach=None`` resolved as torch resolves it)."""
    dense = optimizer.dense if isinstance(optimizer, SparseEmbeddingAdam) else optimizer
    group = dense.param_groups[0]
    if group.get("fused"):
        return "fused"
    if group.get("foreach") is None:
        from torch.optim.optimizer import _default_to_fused_or_foreach

        _, foreach = _default_to_fused_or_foreach(group["params"], differentiable=False, use_fused=False)
        return "foreach" if foreach else "for-loop"
    return "foreach" if group["foreach"] else "for-loop"


def sparse_tables(model: nn.Module) -> list[nn.Parameter]:
    """The weights of the model's ``nn.Embedding(sparse=True)`` tables (those with sparse gradients)."""
    return [m.weight for m in model.modules() if isinstance(m, nn.Embedding) and m.sparse and m.weight.requires_grad]


class SparseEmbeddingAdam(torch.optim.Optimizer):
    """``torch.optim.SparseAdam`` for the sparse embedding tables, ``torch.optim.Adam`` for every other
    parameter, stepped as one optimizer (lesson 01).

    The engine sees one optimizer: :attr:`param_groups` is the tables' group followed by the dense
    groups — the *same* dicts as the two inner optimizers', so setting a group's lr (the schedule)
    reaches them — and ``step``, ``zero_grad``, ``state_dict`` and ``load_state_dict`` cover both.
    SparseAdam has no weight decay, so neither group may have any. ``dense_groups``: the dense
    parameters' groups (dicts with ``"params"``); ``adam``: extra arguments of the dense Adam
    (:func:`adam_kwargs`).
    """

    def __init__(self, tables, dense_groups, *, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, **adam):
        tables = list(tables)
        if not tables:
            raise ValueError("SparseEmbeddingAdam: the model has no nn.Embedding(sparse=True) table; "
                             "build it with sparse embeddings (TrainConfig.sparse_embeddings=True)")
        table_ids = {id(p) for p in tables}
        dense_groups = [dict(g, params=[p for p in g["params"] if id(p) not in table_ids]) for g in dense_groups]
        dense_groups = [g for g in dense_groups if g["params"]]
        if any(g.get("weight_decay", 0.0) for g in dense_groups):
            raise ValueError("SparseEmbeddingAdam: weight_decay must be 0 (torch.optim.SparseAdam has none, "
                             "and decaying only the dense layers would be a third optimizer)")
        self.sparse = torch.optim.SparseAdam(tables, lr=lr, betas=betas, eps=eps)
        self.dense = torch.optim.Adam(dense_groups, lr=lr, betas=betas, eps=eps, **adam)
        # the inner optimizers' own group dicts: one lr setting reaches both
        super().__init__(self.sparse.param_groups + self.dense.param_groups, {})

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("SparseEmbeddingAdam.step takes no closure")
        self.sparse.step()
        self.dense.step()

    def state_dict(self) -> dict:
        return {"sparse": self.sparse.state_dict(), "dense": self.dense.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.sparse.load_state_dict(state_dict["sparse"])
        self.dense.load_state_dict(state_dict["dense"])
