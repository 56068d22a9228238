"""Spatial decomposition: one image cut into strips over the ranks, with halo exchange (lesson 10).

The fourth way the seed talks split work (after data, tensor and pipeline): cut each
*sample* along its spatial dimensions, as stencil codes for partial differential equations
have done for decades. A ``k x k`` convolution near a strip's edge needs ``k // 2`` rows that
live on the neighbouring rank: before each convolution every rank sends its first and last
``k // 2`` rows to its neighbours and receives theirs, the **halo** (ghost cells). Only
neighbours talk, and the bytes are ``2 x halo rows x width``, whatever the image's height.
Backward runs the exchange in reverse: the gradient that landed on a halo row belongs to
the neighbour that owns the row, so it is sent back and added there. The weights are
replicated, so their gradients (a sum over positions) are all-reduced, as in data parallelism.
It pays only when one sample is too large for one device (the seed talk: a gigapixel
panorama, a 3-D simulation volume).
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..comm.collectives import chunk_bounds


def _exchange(sends: dict[int, torch.Tensor], recv_shapes: dict[int, tuple],
              device: torch.device) -> dict[int, torch.Tensor]:
    """Post every send and receive of one exchange together (one ``batch_isend_irecv``: NCCL needs
    them grouped, or two neighbours that both send first would wait on each other), then wait."""
    received = {peer: torch.empty(shape, device=device) for peer, shape in recv_shapes.items()}
    ops = [dist.P2POp(dist.irecv, t, peer) for peer, t in received.items()]
    ops += [dist.P2POp(dist.isend, t.contiguous(), peer) for peer, t in sends.items()]
    if ops:
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    return received


class HaloExchange(torch.autograd.Function):
    """``(N, C, H_local, W)`` -> ``(N, C, halo + H_local + halo, W)``: the neighbours' edge rows
    above and below (zeros at the image's own top and bottom: a convolution's zero padding)."""

    @staticmethod
    def forward(ctx, x, halo: int):
        rank, p = dist.get_rank(), dist.get_world_size()
        ctx.halo = halo
        n, c, h, w = x.shape
        if h < halo:
            raise ValueError(f"rank {rank}'s strip has {h} rows, fewer than the halo of {halo}")
        sends, shapes = {}, {}
        if rank > 0:
            sends[rank - 1], shapes[rank - 1] = x[:, :, :halo], (n, c, halo, w)
        if rank < p - 1:
            sends[rank + 1], shapes[rank + 1] = x[:, :, h - halo:], (n, c, halo, w)
        got = _exchange(sends, shapes, x.device)
        zeros = x.new_zeros(n, c, halo, w)
        return torch.cat([got.get(rank - 1, zeros), x, got.get(rank + 1, zeros)], dim=2)

    @staticmethod
    def backward(ctx, grad):
        rank, p = dist.get_rank(), dist.get_world_size()
        halo = ctx.halo
        n, c, h2, w = grad.shape
        h = h2 - 2 * halo
        own = grad[:, :, halo:halo + h].clone()
        sends, shapes = {}, {}
        if rank > 0:  # the rows above came from rank - 1: their gradient goes back there
            sends[rank - 1], shapes[rank - 1] = grad[:, :, :halo], (n, c, halo, w)
        if rank < p - 1:
            sends[rank + 1], shapes[rank + 1] = grad[:, :, halo + h:], (n, c, halo, w)
        got = _exchange(sends, shapes, grad.device)
        if rank > 0:  # what rank - 1 computed with my top rows
            own[:, :, :halo] += got[rank - 1]
        if rank < p - 1:
            own[:, :, h - halo:] += got[rank + 1]
        return own, None


def halo_conv2d(x_local: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    """``conv`` (odd square kernel, stride 1, 'same' padding) on this rank's strip of rows:
    equal to the same rows of ``conv`` on the whole image."""
    k = conv.kernel_size[0]
    if conv.kernel_size != (k, k) or k % 2 == 0 or conv.stride != (1, 1) or conv.padding != (k // 2, k // 2):
        raise ValueError("halo_conv2d needs an odd square kernel, stride 1 and padding k // 2")
    x = HaloExchange.apply(x_local, k // 2)  # (N, C, H_local + 2 halo, W)
    return F.conv2d(x, conv.weight, conv.bias, padding=(0, k // 2))  # (N, C_out, H_local, W)


def strip(x: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s rows of ``(N, C, H, W)`` (``tensor_split``'s rule)."""
    lo, hi = chunk_bounds(x.shape[2], world_size)[rank]
    return x[:, :, lo:hi]


def halo_bytes(halo: int, width: int, channels: int, batch: int = 1, element_size: int = 4) -> int:
    """Bytes a middle rank sends per exchange: ``halo`` rows to each of its two neighbours."""
    return 2 * halo * width * channels * batch * element_size


@contextlib.contextmanager
def exact_fp32_convolutions():
    """cuDNN's convolutions in fp32, not TF32 (torch 2.13: ``torch.backends.cudnn.allow_tf32`` is True by
    default, 10-bit mantissas on NVIDIA GPUs since Ampere): the equality checked here is fp32's."""
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = old


def compare_halo_conv(rank: int, world_size: int, height: int = 13, width: int = 9, channels: int = 3,
                      kernel: int = 3, layers: int = 2, seed: int = 0) -> dict:
    """Worker: ``layers`` halo convolutions (with ReLU) on this rank's strip against the same
    convolutions on the whole image: output, input gradient, and the weights' gradients (all-reduced)."""
    with exact_fp32_convolutions():
        return _compare_halo_conv(rank, world_size, height, width, channels, kernel, layers, seed)


def _compare_halo_conv(rank, world_size, height, width, channels, kernel, layers, seed) -> dict:
    from .. import dist as cdist

    device = cdist.device()  # this rank's GPU under NCCL; the numbers are drawn on the CPU, the same everywhere
    torch.manual_seed(seed)
    convs = nn.ModuleList(nn.Conv2d(channels, channels, kernel, padding=kernel // 2) for _ in range(layers)).to(device)
    x = torch.randn(2, channels, height, width).to(device)
    x_full = x.clone().requires_grad_()
    y_full = x_full
    for conv in convs:
        y_full = torch.relu(conv(y_full))
    # rows weighted unequally
    (y_full * torch.linspace(-1, 1, height, device=device).view(1, 1, -1, 1)).sum().backward()
    full_w = [c.weight.grad.clone() for c in convs]
    convs.zero_grad()
    x_local = strip(x, rank, world_size).clone().requires_grad_()
    y = x_local
    for conv in convs:
        y = torch.relu(halo_conv2d(y, conv))
    lo, hi = chunk_bounds(height, world_size)[rank]
    (y * torch.linspace(-1, 1, height, device=device)[lo:hi].view(1, 1, -1, 1)).sum().backward()
    w_grads = [c.weight.grad.clone() for c in convs]
    for g in w_grads:
        dist.all_reduce(g)
    def rel(a, b):  # largest |a - b| relative to the reference's largest value (at least 1)
        return float((a - b).abs().max() / b.abs().max().clamp(min=1.0))

    return {
        "rank": rank,
        "rows": (lo, hi),
        "device": str(device),
        "out": rel(y, strip(y_full, rank, world_size)),
        "input_grad": rel(x_local.grad, strip(x_full.grad, rank, world_size)),
        "weight_grad": max(rel(a, b) for a, b in zip(w_grads, full_w)),
        "halo_bytes_per_exchange": halo_bytes(kernel // 2, width, channels, 2)
        * ((rank > 0) + (rank < world_size - 1))
        // 2,
        "strip_bytes": x_local.numel() * 4,
    }
