"""Exercise 10: the communication of a column-parallel layer (Megatron's ``f``), checked on 2 and 3 ranks.

The learner writes an autograd function that is the identity forward and all-reduces the
gradient backward. The check builds, on every rank, the same full ``nn.Linear`` and this
rank's rows of it (``course_lib.parallel.tensor.ColumnParallelLinear.from_linear``, with the
learner's function in place of the course's), runs a forward and backward on inputs of
several shapes (out_features that do not divide by the number of ranks; a 3-D input), and
compares with one process: the output slice (an all-reduce in *forward* sums it and fails),
the input's gradient (no all-reduce in backward leaves a partial sum and fails; an average
instead of a sum fails), and the weight and bias gradients of this rank's rows.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .harness import CheckResult, finish_result, fmt_value
from .l06_allreduce import launch_cases, probe_not_implemented, spawnable

CASES = ((4, 6, 7), (3, 5, 6, 5))  # (*input shape, out_features): out 7 and 5 do not divide by 2 or 3


def _apply(fn, x: torch.Tensor) -> torch.Tensor:
    return fn.apply(x) if isinstance(fn, type) and issubclass(fn, torch.autograd.Function) else fn(x)


def _column_worker(rank: int, world_size: int, fns: list, cases) -> list[list[str]]:
    from ..parallel.tensor import ColumnParallelLinear

    out = []
    for fn in fns:
        problems = []
        for i, case in enumerate(cases):
            *shape, out_features = case
            torch.manual_seed(10 + i)  # the same full layer and data on every rank
            full = nn.Linear(shape[-1], out_features)
            x = torch.randn(*shape)
            coeff = torch.randn(out_features)  # loss = sum(y * coeff): every output feature matters
            shard = ColumnParallelLinear.from_linear(full)
            rows = shard.rows
            x_full, x_tp = x.clone().requires_grad_(), x.clone().requires_grad_()
            y_full = full(x_full)
            (y_full * coeff).sum().backward()
            y_tp = F.linear(_apply(fn, x_tp), shard.weight, shard.bias)  # (..., rows on this rank)
            (y_tp * coeff[rows]).sum().backward()
            where = f"rank {rank} of {world_size}, input {tuple(shape)}, out_features={out_features}"
            if not torch.allclose(y_tp, y_full[..., rows], rtol=1e-5, atol=1e-6):
                problems.append(
                    f"{where}: the output differs from the full layer's rows {rows.tolist()}: expected "
                    f"{fmt_value(y_full[..., rows])}, got {fmt_value(y_tp)}\nhint: forward is the identity; the "
                    "all-reduce belongs in backward."
                )
            elif x_tp.grad is None:
                problems.append(f"{where}: the input got no gradient: backward must return one (the all-reduced grad)")
            elif not torch.allclose(x_tp.grad, x_full.grad, rtol=1e-5, atol=1e-6):
                hint = ""
                if world_size > 1 and torch.allclose(x_tp.grad * world_size, x_full.grad, rtol=1e-4, atol=1e-5):
                    hint = ("\nhint: your gradient is 1/W of the right one: sum over the ranks (ReduceOp.SUM), "
                            "don't average.")
                else:
                    hint = ("\nhint: this rank's rows give only part of dL/dx; the other ranks hold the rest. "
                            "Backward must add them up over every rank (dist.all_reduce).")
                problems.append(f"{where}: dL/dx differs from one process's: expected {fmt_value(x_full.grad)}, "
                                f"got {fmt_value(x_tp.grad)}{hint}")
            elif not (torch.allclose(shard.weight.grad, full.weight.grad[rows], rtol=1e-5, atol=1e-6)
                      and torch.allclose(shard.bias.grad, full.bias.grad[rows], rtol=1e-5, atol=1e-6)):
                problems.append(f"{where}: the weight gradient of this rank's rows differs from one process's "
                                "(does your backward change the gradient it passes on?)")
        out.append(problems)
    return out


def check_copy_to_parallel(fn: Callable, world_sizes=(2, 3), timeout_s: float = 120.0) -> CheckResult:
    """``fn``: an ``autograd.Function`` (or a function of ``x``) that is the identity forward and
    all-reduces the gradient backward. Checked as the input side of a column-parallel layer on
    each of ``world_sizes`` gloo process groups against one process's ``nn.Linear`` (module docstring)."""
    name = "check_copy_to_parallel"
    early = spawnable(name, fn) or probe_not_implemented(
        name, fn, lambda: _apply(fn, torch.zeros(3, requires_grad=True)).sum().backward())
    if early is not None:
        return finish_result(early)
    listing = []
    for ws in world_sizes:
        per_rank = launch_cases(name, _column_worker, [fn], ws, CASES, timeout_s=timeout_s,
                                 deadlock_hint="a rank that calls a collective the others do not (every rank "
                                               "must run the same all-reduce in backward).")
        if isinstance(per_rank, CheckResult):
            return finish_result(per_rank)
        problems = [p for r in per_rank for p in r[0]]
        listing.append(f"{ws} ranks: inputs {[c[:-1] for c in CASES]}, out_features {[c[-1] for c in CASES]}")
        if problems:
            more = f"\n({len(problems) - 1} more difference(s))" if len(problems) > 1 else ""
            return finish_result(CheckResult(name, False, problems[0] + more, tuple(listing)))
    return finish_result(CheckResult(name, True, "the column-parallel layer with your function equals one process's "
                               "nn.Linear: output rows, dL/dx and the shard's weight gradients:\n"
                               + "\n".join(f"  - {c}" for c in listing), tuple(listing)))
