"""Hybrids: a 2-D device mesh, data parallel along one axis and tensor parallel along the other (lesson 10).

Megatron-Turing NLG (the seed talk on Perlmutter) combined all three: 8-way tensor
parallelism inside a node (its all-reduces every layer need NVLink's bandwidth), pipeline
stages across 35 nodes (neighbour messages only), and data parallelism over the copies of
the whole pipeline (one gradient all-reduce per step). A **device mesh** names those axes:
4 ranks as a ``2 x 2`` grid ``("dp", "tp")``; rank ``r`` sits at row ``r // 2``, column
``r % 2``. Each *row* is a tensor-parallel group (ranks that split one layer), each *column*
a data-parallel group (ranks that hold the same shard and see different data).

:func:`mesh_worker` trains one step of BERT's MLP that way, built from
:mod:`.tensor`'s layers on the mesh's ``tp`` groups and an all-reduce of the gradients on its
``dp`` groups, checks each shard's gradient against one process on the whole batch, and
counts the elements each axis carried.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..comm.collectives import chunk_bounds
from .tensor import ParallelMLP


def mesh_worker(rank: int, world_size: int, dp: int = 2, batch: int = 8, seq: int = 4, hidden: int = 8,
                intermediate: int = 24, seed: int = 0) -> dict:
    """Worker on ``world_size = dp x tp`` ranks: one step of a tensor-parallel MLP, data parallel over ``dp``."""
    from torch.distributed.device_mesh import init_device_mesh

    from .. import dist as cdist
    from ..models.bert import MLP, bert_config

    if world_size % dp:
        raise ValueError(f"{world_size} ranks do not form a {dp} x {world_size / dp} mesh")
    tp = world_size // dp
    device = cdist.device()  # this rank's GPU under NCCL
    mesh = init_device_mesh(device.type, (dp, tp), mesh_dim_names=("dp", "tp"))
    tp_group, dp_group = mesh["tp"].get_group(), mesh["dp"].get_group()
    torch.manual_seed(seed)
    full = MLP(bert_config("tiny", hidden_size=hidden, intermediate_size=intermediate, num_heads=2,
                           dropout=0.0)).to(device)
    x = torch.randn(batch, seq, hidden).to(device)  # the global batch, the same on every rank
    (full(x).square().sum() / batch).backward()  # one process, the whole batch: the reference

    mlp = ParallelMLP.from_mlp(full, tp_group)
    dp_rank = dist.get_rank(dp_group)
    lo, hi = chunk_bounds(batch, dp)[dp_rank]
    carried = {"tp": 0, "dp": 0}
    y = mlp(x[lo:hi])  # this data-parallel replica's slice of the batch
    carried["tp"] += y.numel()  # forward: the row-parallel layer's all-reduce, in the tp group
    (y.square().sum() / batch).backward()
    carried["tp"] += x[lo:hi].numel()  # backward: the column-parallel layer's all-reduce of dL/dx
    for p in mlp.parameters():  # data parallel: add the replicas' gradients, in the dp group
        dist.all_reduce(p.grad, group=dp_group)
        carried["dp"] += p.grad.numel()
    rows = mlp.fc.rows
    diff = max(float((mlp.fc.weight.grad - full.fc.weight.grad[rows]).abs().max()),
               float((mlp.proj.weight.grad - full.proj.weight.grad[:, mlp.proj.lo:mlp.proj.hi]).abs().max()),
               float((mlp.proj.bias.grad - full.proj.bias.grad).abs().max()))
    return {"rank": rank, "coords": (dp_rank, dist.get_rank(tp_group)),
            "tp_group": dist.get_process_group_ranks(tp_group), "dp_group": dist.get_process_group_ranks(dp_group),
            "elements_tp": carried["tp"], "elements_dp": carried["dp"], "grad_diff": diff, "device": str(device)}
