"""Batch statistics synchronized across ranks, and the lesson's comparison with local BatchNorm (lesson 06).

BatchNorm normalizes with the mean and variance *of the batch it sees*. Under data
parallelism each rank sees only its slice of the global batch, so plain BatchNorm
normalizes with the statistics of ``B / W`` samples: at a small per-rank batch they are
noisy, and the running statistics kept for evaluation differ from what one process with
the whole batch would keep. ``torch.nn.SyncBatchNorm`` all-reduces the statistics so
every rank normalizes with those of the global batch.

``torch.nn.SyncBatchNorm`` runs on GPUs only: on CPU tensors its forward raises
"SyncBatchNorm expected input tensor to be on GPU ..." (torch 2.13,
``torch/nn/modules/batchnorm.py``). :class:`AllReduceBatchNorm` does the same job with
two explicit all-reduces (sum, then sum of squared deviations), so the lesson can show
it on CPU with gloo; :func:`convert_sync_batchnorm` picks the one that fits the backend.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .. import dist as cdist
from ..models.mlp_bn import MLPBN
from ..tables import Table


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks, differentiable: the gradient of a sum over ranks is the sum over
    ranks of the gradients (what SyncBatchNorm's backward all-reduces, too)."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class AllReduceBatchNorm(nn.BatchNorm1d):
    """BatchNorm over the global batch, for (N, C) or (N, C, L) inputs, on any backend.

    In training with more than one rank: global count ``n``, global mean, then global
    (biased) variance of the deviations, each one all-reduce; normalize with them and
    update the running statistics with the unbiased variance ``var * n / (n - 1)``, as
    ``nn.BatchNorm1d`` does for one process that holds the whole batch. Otherwise
    (evaluation, one rank) it is plain BatchNorm.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        dims = [0] + list(range(2, x.dim()))  # every dim but channels
        shape = [1, -1] + [1] * (x.dim() - 2)  # (1, C) or (1, C, 1)
        count = torch.tensor([x.numel() / x.shape[1]], dtype=x.dtype, device=x.device)
        dist.all_reduce(count)
        n = count.item()
        mean = _AllReduceSum.apply(x.sum(dims)) / n  # (C,)
        var = _AllReduceSum.apply(((x - mean.view(shape)) ** 2).sum(dims)) / n  # (C,), biased
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                m = self.momentum if self.momentum is not None else 1.0 / self.num_batches_tracked.item()
                self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
                self.running_var.mul_(1 - m).add_(var.detach() * n / max(n - 1, 1), alpha=m)
        y = (x - mean.view(shape)) / torch.sqrt(var.view(shape) + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y


def convert_sync_batchnorm(module: nn.Module, backend: str | None = None) -> nn.Module:
    """Every ``BatchNorm1d`` of ``module`` synchronized across ranks.

    NCCL (GPU tensors): ``nn.SyncBatchNorm.convert_sync_batchnorm``, the real thing.
    Other backends (gloo on CPU): :class:`AllReduceBatchNorm`, same statistics.
    Parameters and running statistics are carried over.
    """
    if backend is None:
        backend = dist.get_backend() if dist.is_available() and dist.is_initialized() else "gloo"
    if backend == "nccl":
        return nn.SyncBatchNorm.convert_sync_batchnorm(module)
    if isinstance(module, nn.BatchNorm1d) and not isinstance(module, AllReduceBatchNorm):
        new = AllReduceBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                                 module.track_running_stats)
        new.load_state_dict(module.state_dict())
        new.train(module.training)
        return new
    for name, child in module.named_children():
        module.add_module(name, convert_sync_batchnorm(child, backend))
    return module


def batchnorm_worker(rank: int, world_size: int, per_rank_batch: int = 4, steps: int = 3, seed: int = 0) -> dict:
    """Local vs synchronized BatchNorm under DDP, against one process with the global batch.

    Every rank draws the same global batch (W * b rows) each step and trains on its slice
    of it; rank 0 also trains a plain copy on the whole batch (the reference). Returns the
    largest relative difference of BatchNorm's running mean/var and of the parameters
    from the reference, for local BN and for synchronized BN.
    """
    device = cdist.device()
    gen = torch.Generator().manual_seed(seed)
    n = per_rank_batch * world_size
    batches = []
    for _ in range(steps):  # (n, 8) inputs with a spread of means and scales, (n, 1) targets
        x = torch.randn(n, 8, generator=gen) * torch.linspace(0.5, 3, 8) + torch.linspace(-2, 2, 8)
        batches.append((x.to(device), x.sum(1, keepdim=True).sin().to(device)))

    def train(model, ddp: bool):
        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None) \
            if ddp else model
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for x, y in batches:
            if ddp:
                x, y = x.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
        return model

    def fresh():
        torch.manual_seed(seed)
        return MLPBN().to(device)

    variants = {"local BatchNorm": train(fresh(), True), "synchronized BatchNorm": train(
        convert_sync_batchnorm(fresh()), True)}
    reference = train(fresh(), False) if rank == 0 else None
    rows = {}
    for name, model in variants.items():
        if reference is None:
            continue
        ref = reference.state_dict()

        def rel(key):
            a, b = model.state_dict()[key].double(), ref[key].double()
            return ((a - b).norm() / b.norm()).item()

        params = [k for k, _ in reference.named_parameters()]
        rows[name] = {"running_mean": rel("bn.running_mean"), "running_var": rel("bn.running_var"),
                      "parameters": max(rel(k) for k in params),
                      "bn_class": type(model.bn).__name__}
    return {"rank": rank, "per_rank_batch": per_rank_batch, "global_batch": n, "steps": steps, "rows": rows}


def batchnorm_table(result: dict, tol: float = 1e-5) -> Table:
    """The demo's rows: relative difference from one process with the global batch."""
    t = Table(["BatchNorm", "class", "running_mean", "running_var", "parameters", f"matches (< {tol:g})"],
              title=f"after {result['steps']} steps, {result['per_rank_batch']} samples per rank, "
                    f"global batch {result['global_batch']}: relative difference from one process")
    for name, r in result["rows"].items():
        same = max(r["running_mean"], r["running_var"], r["parameters"]) < tol
        t.add(**{"BatchNorm": name, "class": r["bn_class"], "running_mean": r["running_mean"],
                 "running_var": r["running_var"], "parameters": r["parameters"], f"matches (< {tol:g})": same})
    return t
