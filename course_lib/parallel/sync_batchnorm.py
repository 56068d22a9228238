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

import time

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


# --------------------------------------------------------------------------- lesson 11: BatchNorm at scale

BN_VARIANTS = ("local BN", "synchronized BN", "local BN, recomputed stats", "weight norm (no BN)")


@torch.no_grad()
def recompute_batchnorm_stats(model: nn.Module, inputs: torch.Tensor, batch_size: int) -> None:
    """Replace every BatchNorm's running statistics by the population's ("precise BN", Wu & Johnson
    2021): forward passes over ``inputs`` in training mode, each BatchNorm averaging the
    statistics of its batches with equal weight (``momentum=None``), then averaged over the ranks
    (mean of the means, and of the variances, weighted alike: every rank passes as many rows)."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [(m.momentum, m.training) for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the passes below
    was_training = model.training
    model.train()
    for lo in range(0, inputs.shape[0], batch_size):
        model(inputs[lo:lo + batch_size])
    model.train(was_training)
    multi = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    for m, (momentum, training) in zip(norms, saved):
        m.momentum = momentum
        if multi:
            for buf in (m.running_mean, m.running_var):
                dist.all_reduce(buf)
                buf /= dist.get_world_size()


def bn_variant_model(variant: str, in_features: int, hidden: int, backend: str | None = None) -> nn.Module:
    """The MLP of lesson 06 in one of :data:`BN_VARIANTS`: with plain (per-rank) BatchNorm, with
    synchronized BatchNorm, or with the BatchNorm replaced by weight normalization of both linear
    layers (Salimans & Kingma 2016: no batch statistics at all)."""
    if variant not in BN_VARIANTS:
        raise ValueError(f"unknown BatchNorm variant {variant!r}; choose one of {BN_VARIANTS}")
    model = MLPBN(in_features, hidden)
    if variant == "synchronized BN":
        return convert_sync_batchnorm(model, backend)
    if variant == "weight norm (no BN)":
        model.bn = nn.Identity()
        for name in ("fc1", "fc2"):
            setattr(model, name, nn.utils.parametrizations.weight_norm(getattr(model, name)))
    return model


def bn_task(n: int, in_features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, in) inputs whose features have very different offsets and scales (what BatchNorm
    removes), and (n,) labels: which side of a curved boundary the standardized inputs lie on."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(n, in_features, generator=gen)
    u = torch.randn(in_features, generator=torch.Generator().manual_seed(12345))
    y = (z @ u + 0.5 * z[:, 0] ** 2 - 0.5 > 0).float()
    scale = torch.logspace(-0.5, 1, in_features)  # 0.3 to 10
    shift = torch.linspace(-5, 5, in_features)
    return z * scale + shift, y


def batchnorm_scale_worker(rank: int, world_size: int, spec: dict) -> dict:
    """Lesson 11: each BatchNorm variant trained under DDP at each per-rank batch; test accuracy and
    time per step. Every rank draws the same global batch (``world_size x b`` rows) and keeps its
    slice, as in lesson 06. ``spec``: per_rank_batches, steps, lr, hidden, in_features, n_train,
    n_test, seed, variants (default all)."""
    device = torch.device("cpu")
    backend = dist.get_backend() if dist.is_initialized() else "gloo"
    x_train, y_train = bn_task(spec["n_train"], spec["in_features"], spec["seed"])
    x_test, y_test = bn_task(spec["n_test"], spec["in_features"], spec["seed"] + 1)
    my_rows = x_train.tensor_split(world_size)[rank]  # for the recomputed statistics
    rows = []
    for b in spec["per_rank_batches"]:
        for variant in spec.get("variants", BN_VARIANTS):
            torch.manual_seed(spec["seed"])
            model = bn_variant_model(variant, spec["in_features"], spec["hidden"], backend).to(device)
            net = DistributedDataParallel(model) if world_size > 1 else model
            opt = torch.optim.Adam(net.parameters(), lr=spec["lr"])
            gen = torch.Generator().manual_seed(spec["seed"] + 7)
            cdist.barrier()
            t0 = time.perf_counter()
            for _ in range(spec["steps"]):
                idx = torch.randint(0, x_train.shape[0], (b * world_size,), generator=gen)
                x, y = x_train[idx].tensor_split(world_size)[rank], y_train[idx].tensor_split(world_size)[rank]
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.binary_cross_entropy_with_logits(net(x).squeeze(1), y).backward()
                opt.step()
            step_s = (time.perf_counter() - t0) / spec["steps"]
            if variant == "local BN, recomputed stats":
                recompute_batchnorm_stats(model, my_rows, batch_size=max(b, 256))
            model.eval()
            with torch.no_grad():
                acc = float(((model(x_test).squeeze(1) > 0).float() == y_test).float().mean())
            rows.append({"per_rank_batch": b, "global_batch": b * world_size, "variant": variant,
                         "test_accuracy": acc, "step_ms": 1000 * step_s})
    return {"rank": rank, "world_size": world_size, "rows": rows}
