"""Tensor parallelism: one layer's matrices split over the ranks, Megatron-LM style (lesson 10).

Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language Models Using
Model Parallelism", section 3. A linear layer ``y = x W^T + b`` with ``W`` of shape
``(out, in)`` can be cut two ways:

* **by output features (column parallel)**: rank ``r`` holds rows ``[lo, hi)`` of ``W`` and
  computes ``y[..., lo:hi]`` from the *whole* input. Forward needs no message. Backward: the
  gradient of the input is a sum over *all* output features, so each rank holds a partial
  sum and the ranks all-reduce it;
* **by input features (row parallel)**: rank ``r`` holds columns ``[lo, hi)`` of ``W``, takes
  the matching slice of the input, and computes a partial ``y`` that the ranks all-reduce.
  Backward needs no message: each rank's input slice only touched its own columns.

Put one after the other (an MLP: column-parallel ``fc``, GELU applied to each rank's slice,
row-parallel ``proj``) and the column layer's output is already the row layer's sliced input:
the block costs **one all-reduce forward and one backward**. The two messages are written as
two autograd functions that mirror each other: :class:`CopyToParallel` (identity forward,
all-reduce backward) and :class:`ReduceFromParallel` (all-reduce forward, identity backward);
Megatron calls them ``f`` and ``g``. Attention is split the same way by heads: each rank
computes whole heads (its rows of the query/key/value projection), and the output projection
is row parallel.

Features split like ``torch.tensor_split`` (``chunk_bounds``): any size works, also one that
does not divide by the number of ranks. PyTorch's own version is DTensor's
``parallelize_module`` with ``ColwiseParallel`` / ``RowwiseParallel`` (:func:`dtensor_mlp`);
measured with torch 2.13 on gloo: it equals the full layer when the sizes divide, and fails
in sharding propagation ("a and b must have same reduction dim") when they do not.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..comm.collectives import chunk_bounds


def _rank_size(group) -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def shard_bounds(n: int, group=None) -> tuple[int, int]:
    """``[lo, hi)``: this rank's share of ``n`` features (``torch.tensor_split``'s rule)."""
    rank, size = _rank_size(group)
    return chunk_bounds(n, size)[rank]


def _all_reduce(x: torch.Tensor, group) -> torch.Tensor:
    if _rank_size(group)[1] == 1:
        return x
    x = x.contiguous().clone()
    dist.all_reduce(x, group=group)
    return x


def _all_gather_last_dim(x: torch.Tensor, n: int, group) -> torch.Tensor:
    """Every rank's slice of the last dimension, concatenated (slices of unequal length too)."""
    rank, size = _rank_size(group)
    if size == 1:
        return x
    bounds = chunk_bounds(n, size)
    width = max(hi - lo for lo, hi in bounds)
    padded = F.pad(x, (0, width - x.shape[-1])).contiguous()  # all_gather wants equal shapes
    pieces = [torch.empty_like(padded) for _ in range(size)]
    dist.all_gather(pieces, padded, group=group)
    return torch.cat([p[..., : hi - lo] for p, (lo, hi) in zip(pieces, bounds)], dim=-1)


# --------------------------------------------------------------------------- the two messages


class CopyToParallel(torch.autograd.Function):
    """Megatron's ``f``: identity forward; backward all-reduces the input's gradient.

    Before a column-parallel layer every rank holds the same ``x``; each rank's output
    slice depends on all of ``x``, so each rank's ``dL/dx`` is a partial sum."""

    @staticmethod
    def forward(ctx, x, group=None):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, ctx.group), None


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's ``g``: all-reduce forward (add the partial outputs); identity backward."""

    @staticmethod
    def forward(ctx, x, group=None):
        return _all_reduce(x, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class GatherFromParallel(torch.autograd.Function):
    """All-gather the last dimension forward; backward keeps this rank's slice of the gradient."""

    @staticmethod
    def forward(ctx, x, n, group=None):
        ctx.group, ctx.n = group, n
        return _all_gather_last_dim(x, n, group)

    @staticmethod
    def backward(ctx, grad):
        lo, hi = shard_bounds(ctx.n, ctx.group)
        return grad[..., lo:hi].contiguous(), None, None


class ScatterToParallel(torch.autograd.Function):
    """Keep this rank's slice of the last dimension forward; backward all-gathers the gradient."""

    @staticmethod
    def forward(ctx, x, group=None):
        ctx.group, ctx.n = group, x.shape[-1]
        lo, hi = shard_bounds(x.shape[-1], group)
        return x[..., lo:hi].contiguous()

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_last_dim(grad, ctx.n, ctx.group), None


# --------------------------------------------------------------------------- the layers


def _init_like_linear(weight: torch.Tensor, bias: torch.Tensor | None, fan_in: int) -> None:
    bound = 1.0 / fan_in**0.5  # nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both
    nn.init.uniform_(weight, -bound, bound)
    if bias is not None:
        nn.init.uniform_(bias, -bound, bound)


class ColumnParallelLinear(nn.Module):
    """``nn.Linear(in_features, out_features)`` with the output features split over the ranks.

    ``weight``: this rank's rows ``(out_local, in_features)``; ``bias``: its ``out_local``
    entries. Output: this rank's slice ``(..., out_local)``, or with ``gather_output=True``
    the full ``(..., out_features)`` (an all-gather forward)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, gather_output: bool = False,
                 group=None, rows: torch.Tensor | None = None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.gather_output, self.group = gather_output, group
        if rows is None:
            lo, hi = shard_bounds(out_features, group)
            rows = torch.arange(lo, hi)
        elif gather_output:
            raise ValueError("gather_output=True needs the contiguous default split of the output features")
        self.register_buffer("rows", rows, persistent=False)  # which output features are this rank's
        self.weight = nn.Parameter(torch.empty(len(rows), in_features))
        self.bias = nn.Parameter(torch.empty(len(rows))) if bias else None
        _init_like_linear(self.weight, self.bias, in_features)

    @classmethod
    def from_linear(cls, linear: nn.Linear, group=None, gather_output: bool = False,
                    rows: torch.Tensor | None = None) -> "ColumnParallelLinear":
        """This rank's rows of ``linear`` (the same full layer on every rank)."""
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, gather_output, group, rows)
        layer.to(linear.weight.device)  # built on the CPU (as nn.Linear is), then where the full layer lives
        with torch.no_grad():
            layer.weight.copy_(linear.weight[layer.rows])
            if layer.bias is not None:
                layer.bias.copy_(linear.bias[layer.rows])
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = CopyToParallel.apply(x, self.group)  # (..., in): the same on every rank
        y = F.linear(x, self.weight, self.bias)  # (..., out_local)
        return GatherFromParallel.apply(y, self.out_features, self.group) if self.gather_output else y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features} (this rank: {len(self.rows)})"


class RowParallelLinear(nn.Module):
    """``nn.Linear(in_features, out_features)`` with the input features split over the ranks.

    ``weight``: this rank's columns ``(out_features, in_local)``, ``[lo, hi)``; the bias is whole (added once,
    after the all-reduce). Input: this rank's slice ``(..., in_local)``
    (``input_is_parallel=True``: what a column-parallel layer produced), or the full input
    (``False``: each rank takes its slice). Output: the full ``(..., out_features)``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, input_is_parallel: bool = True,
                 group=None, cols: tuple[int, int] | None = None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.input_is_parallel, self.group = input_is_parallel, group
        if cols is not None and not input_is_parallel:
            raise ValueError("input_is_parallel=False needs the default split of the input features")
        self.lo, self.hi = cols if cols is not None else shard_bounds(in_features, group)
        self.weight = nn.Parameter(torch.empty(out_features, self.hi - self.lo))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        _init_like_linear(self.weight, self.bias, in_features)

    @classmethod
    def from_linear(cls, linear: nn.Linear, group=None, input_is_parallel: bool = True,
                    cols: tuple[int, int] | None = None) -> "RowParallelLinear":
        """This rank's columns of ``linear`` (the same full layer on every rank); ``cols``: which
        ``[lo, hi)``, when not the default split (attention: the columns of this rank's heads)."""
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, input_is_parallel, group, cols)
        layer.to(linear.weight.device)
        with torch.no_grad():
            layer.weight.copy_(linear.weight[:, layer.lo:layer.hi])
            if layer.bias is not None:
                layer.bias.copy_(linear.bias)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_is_parallel:
            x = ScatterToParallel.apply(x, self.group)  # (..., in_local)
        y = ReduceFromParallel.apply(F.linear(x, self.weight), self.group)  # (..., out): partial sums added
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features} (this rank: {self.hi - self.lo}), out_features={self.out_features}"


class ParallelMLP(nn.Module):
    """BERT's MLP (``models.bert.MLP``) with ``fc`` column parallel and ``proj`` row parallel:
    one all-reduce forward (in ``proj``) and one backward (in ``fc``)."""

    def __init__(self, fc: ColumnParallelLinear, proj: RowParallelLinear, dropout: float = 0.0):
        super().__init__()
        self.fc, self.proj, self.dropout = fc, proj, nn.Dropout(dropout)

    @classmethod
    def from_mlp(cls, mlp: nn.Module, group=None) -> "ParallelMLP":
        return cls(ColumnParallelLinear.from_linear(mlp.fc, group), RowParallelLinear.from_linear(mlp.proj, group),
                   mlp.dropout.p if hasattr(mlp, "dropout") else 0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # GELU acts on each element, so it can act on each rank's slice: no message between fc and proj.
        # (Dropout after proj must draw the same mask on every rank: Megatron seeds it alike.)
        return self.dropout(self.proj(F.gelu(self.fc(x))))


def head_rows(num_heads: int, head_dim: int, group=None) -> torch.Tensor:
    """The rows of a fused ``(3C, C)`` query/key/value weight that this rank's heads use."""
    lo, hi = shard_bounds(num_heads, group)
    c = num_heads * head_dim
    part = torch.arange(lo * head_dim, hi * head_dim)
    return torch.cat([part, part + c, part + 2 * c])


class ParallelSelfAttention(nn.Module):
    """``models.bert.SelfAttention`` split by heads: this rank's heads of q, k, v (column
    parallel, no message), attention on them alone, and a row-parallel output projection."""

    def __init__(self, qkv: ColumnParallelLinear, out: RowParallelLinear, local_heads: int, head_dim: int,
                 attention_dropout: float = 0.0, dropout: float = 0.0):
        super().__init__()
        self.qkv, self.out = qkv, out
        self.local_heads, self.head_dim = local_heads, head_dim
        self.attention_dropout, self.dropout = attention_dropout, nn.Dropout(dropout)

    @classmethod
    def from_attention(cls, attn: nn.Module, group=None) -> "ParallelSelfAttention":
        c = attn.out.in_features
        head_dim = c // attn.num_heads
        lo, hi = shard_bounds(attn.num_heads, group)
        qkv = ColumnParallelLinear.from_linear(attn.qkv, group, rows=head_rows(attn.num_heads, head_dim, group))
        out = RowParallelLinear.from_linear(attn.out, group, cols=(lo * head_dim, hi * head_dim))
        return cls(qkv, out, hi - lo, head_dim, attn.attention_dropout, attn.dropout.p)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, _ = x.shape
        c_local = self.local_heads * self.head_dim
        q, k, v = self.qkv(x).split(c_local, dim=-1)  # each (B, T, c_local)
        q, k, v = (t.view(B, T, self.local_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))  # (B, h, T, D)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                           dropout_p=self.attention_dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, T, c_local)  # (B, T, c_local): this rank's heads
        return self.dropout(self.out(y))


def parallel_block(block: nn.Module, group=None) -> nn.Module:
    """A copy of a BERT ``Block`` whose attention and MLP are tensor parallel (LayerNorms replicated):
    two all-reduces forward, two backward."""
    tp = copy.deepcopy(block)
    tp.attn = ParallelSelfAttention.from_attention(block.attn, group)
    tp.mlp = ParallelMLP.from_mlp(block.mlp, group)
    return tp


# --------------------------------------------------------------------------- PyTorch's own


def dtensor_mlp(mlp: nn.Module, mesh) -> nn.Module:
    """A copy of BERT's MLP tensor-parallel with DTensor: ``fc`` ``ColwiseParallel``, ``proj``
    ``RowwiseParallel`` on the 1-D ``mesh`` (weights become ``DTensor`` shards)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    return parallelize_module(copy.deepcopy(mlp), mesh, {"fc": ColwiseParallel(), "proj": RowwiseParallel()})


def full_gradient(param: torch.Tensor) -> torch.Tensor:
    """A parameter's gradient as a plain tensor (a DTensor's shards gathered)."""
    g = param.grad
    return g.full_tensor() if hasattr(g, "full_tensor") else g


def count_collectives():
    """``torch``'s ``CommDebugMode``: counts the collectives run inside it, ours and DTensor's."""
    from torch.distributed.tensor.debug import CommDebugMode

    return CommDebugMode()


# --------------------------------------------------------------------------- the check: equal to one process


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest ``|a - b|`` relative to the reference's largest value (at least 1): 1e-6 is fp32 rounding."""
    return float((a - b).abs().max() / b.abs().max().clamp(min=1.0)) if a.numel() else 0.0


def compare_with_full(rank: int, world_size: int, batch: int = 5, hidden: int = 12, intermediate: int = 30,
                      heads: int = 3, seq: int = 4, seed: int = 0) -> dict:
    """Worker: tensor-parallel layers against the same full layers on one process (fp32, eval mode).

    Returns the largest differences (relative to the reference, see ``_max_diff``) of outputs, input gradients
    and every shard's weight gradient, and the collectives counted in one MLP forward and backward. Sizes that
    do not divide by ``world_size`` work (the defaults: 30 MLP features, 3 heads)."""
    from .. import dist as cdist
    from ..models.bert import Block, bert_config

    device = cdist.device()  # this rank's GPU under NCCL; numbers are drawn on the CPU, the same on every tier
    torch.manual_seed(seed)
    cfg = bert_config("tiny", hidden_size=hidden, num_heads=heads, intermediate_size=intermediate, dropout=0.0,
                      attention_dropout=0.0)
    full = Block(cfg).eval().to(device)  # the same weights on every rank (same seed)
    x = torch.randn(batch, seq, hidden).to(device)
    # loss = sum(y * coeff): gradients of order 1, every output counts
    coeff = torch.randn(batch, seq, hidden).to(device)
    out = {"rank": rank, "world_size": world_size, "device": str(device)}
    out.update(_compare_mlp(full, x, coeff, intermediate))
    out.update(_compare_block(full, x, coeff))
    torch.manual_seed(seed + 1)  # the constructors above drew random numbers by rank: start alike again
    out.update(_compare_gather_and_row(x, batch, hidden, intermediate, device))
    return out


def _compare_mlp(full, x, coeff, intermediate: int) -> dict:
    """The MLP split column then row against ``full.mlp``: outputs, gradients and collectives counted."""
    mlp_tp = ParallelMLP.from_mlp(full.mlp).eval()
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    with count_collectives() as comm:
        y_tp = mlp_tp(x1)
        (y_tp * coeff).sum().backward()
    y_full = full.mlp(x2)
    (y_full * coeff).sum().backward()
    fc_rows, (plo, phi) = mlp_tp.fc.rows, (mlp_tp.proj.lo, mlp_tp.proj.hi)
    out = {}
    out["mlp_out"] = _max_diff(y_tp, y_full)
    out["mlp_input_grad"] = _max_diff(x1.grad, x2.grad)
    out["mlp_weight_grads"] = max(
        _max_diff(mlp_tp.fc.weight.grad, full.mlp.fc.weight.grad[fc_rows]),
        _max_diff(mlp_tp.fc.bias.grad, full.mlp.fc.bias.grad[fc_rows]),
        _max_diff(mlp_tp.proj.weight.grad, full.mlp.proj.weight.grad[:, plo:phi]),
        _max_diff(mlp_tp.proj.bias.grad, full.mlp.proj.bias.grad))
    out["mlp_collectives"] = {str(k): v for k, v in comm.get_comm_counts().items()}
    out["mlp_local_features"], out["intermediate"] = len(fc_rows), intermediate
    return out


def _compare_block(full, x, coeff) -> dict:
    """A whole transformer block (attention split by heads + the MLP) against ``full``."""
    full.zero_grad()
    block_tp = parallel_block(full).eval()
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    (block_tp(x1) * coeff).sum().backward()
    (full(x2) * coeff).sum().backward()
    out = {}
    out["block_out"] = _max_diff(block_tp(x), full(x))
    out["block_input_grad"] = _max_diff(x1.grad, x2.grad)
    q = block_tp.attn.qkv
    out["block_weight_grads"] = max(
        _max_diff(q.weight.grad, full.attn.qkv.weight.grad[q.rows]),
        _max_diff(
            block_tp.attn.out.weight.grad, full.attn.out.weight.grad[:, block_tp.attn.out.lo : block_tp.attn.out.hi]
        ),
        _max_diff(block_tp.ln1.weight.grad, full.ln1.weight.grad),
    )
    out["local_heads"] = block_tp.attn.local_heads
    return out


def _compare_gather_and_row(x, batch: int, hidden: int, intermediate: int, device) -> dict:
    """A column layer with gather_output and a row layer fed the full input, against plain nn.Linear."""
    lin, full_row = nn.Linear(hidden, intermediate).to(device), nn.Linear(intermediate, hidden).to(device)
    xi = torch.randn(batch, intermediate).to(device)
    col = ColumnParallelLinear.from_linear(lin, gather_output=True)  # (its init draws by rank: after the rest)
    row = RowParallelLinear.from_linear(full_row, input_is_parallel=False)
    return {"gathered_out": _max_diff(col(x), lin(x)),
            "row_full_input_out": _max_diff(row(xi), full_row(xi))}


def compare_dtensor(rank: int, world_size: int, batch: int = 5, hidden: int = 16, intermediate: int = 32,
                    seq: int = 4, seed: int = 0) -> dict:
    """Worker: the same MLP block with DTensor's ``parallelize_module``, against the full layer and
    against ours (sizes must divide by ``world_size`` for DTensor: see the module docstring)."""
    from torch.distributed.device_mesh import init_device_mesh

    from .. import dist as cdist
    from ..models.bert import MLP, bert_config

    device = cdist.device()
    torch.manual_seed(seed)
    cfg = bert_config("tiny", hidden_size=hidden, intermediate_size=intermediate, num_heads=2, dropout=0.0)
    full = MLP(cfg).eval().to(device)
    mesh = init_device_mesh(device.type, (world_size,))
    dt = dtensor_mlp(full, mesh).eval()
    ours = ParallelMLP.from_mlp(full).eval()
    x = torch.randn(batch, seq, hidden).to(device)
    x0, x1, x2 = (x.clone().requires_grad_() for _ in range(3))
    with count_collectives() as comm:
        # an AsyncCollectiveTensor (the all-reduce may still be in flight); use it as it is: measured with
        # torch 2.13, calling its .wait() returned a tensor cut from the graph ("does not require grad")
        y_dt = dt(x0)
        y_dt.square().sum().backward()
    y_ours, y_full = ours(x1), full(x2)
    y_ours.square().sum().backward()
    y_full.square().sum().backward()
    return {"rank": rank, "dtensor_out": _max_diff(y_dt, y_full), "ours_out": _max_diff(y_ours, y_full),
            "dtensor_vs_ours": _max_diff(y_dt, y_ours),
            "dtensor_input_grad": _max_diff(x0.grad, x2.grad),
            "dtensor_weight_grad": max(_max_diff(full_gradient(dt.fc.weight), full.fc.weight.grad),
                                       _max_diff(full_gradient(dt.proj.weight), full.proj.weight.grad)),
            "dtensor_local_shape": tuple(dt.fc.weight.to_local().shape),
            "dtensor_collectives": {str(k): v for k, v in comm.get_comm_counts().items()}}
