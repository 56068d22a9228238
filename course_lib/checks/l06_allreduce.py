"""Exercise 06: averaging gradients and a ring all-reduce from send/recv, on several processes."""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..dist import LaunchTimeout, WorkerError, launch
from .harness import CheckResult, finish_result, learner_label, not_implemented_result, fmt_value


# --------------------------------------------------------------------------- 06: all-reduce by hand


def spawnable(name: str, fn) -> CheckResult | None:
    """A failing result when ``fn`` cannot be imported by spawned workers, else None."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "") or ""
    if module in (None, "__main__") or "<locals>" in qualname or "<lambda>" in qualname:
        return CheckResult(name, False, (
            f"{learner_label(fn)} is defined in the notebook (module {module!r}), so the worker processes cannot "
            "run it: launch() starts them as new processes (a fork server's, or spawned), which import the "
            "function by its module and name; a fresh Python process has no notebook namespace. Write the "
            "function to a .py file (the %%writefile cell above), import it from there, and pass that imported "
            "function."))
    return None


def probe_not_implemented(name: str, fn, probe: Callable[[], None]) -> CheckResult | None:
    """Call the stub in this process first: a NotImplementedError needs no worker processes."""
    try:
        probe()
    except NotImplementedError:
        return not_implemented_result(name, fn)
    except Exception:  # noqa: BLE001 - a real implementation fails here without a process group; fine
        pass
    return None


def _distributed_check(name: str, fn, probe: Callable[[], None], worker: Callable, judge: Callable,
                       world_size: int, *args, timeout_s: float) -> CheckResult:
    """The shape of every multi-process check: refuse what spawn cannot import, answer a stub
    without launching, run ``worker`` on ``world_size`` ranks, then ``judge(per_rank_results)``."""
    early = spawnable(name, fn)
    if early is None:
        early = probe_not_implemented(name, fn, probe)
    if early is not None:
        return finish_result(early)
    results = launch_cases(name, worker, [fn], world_size, *args, timeout_s=timeout_s)
    if isinstance(results, CheckResult):
        return finish_result(results)
    return finish_result(judge([r[0] for r in results]))


RING_DEADLOCK_HINT = ("a ring where each rank first calls a blocking send() and only then recv() can "
                      "deadlock. Post the send and the receive together (dist.isend + dist.irecv, then wait on "
                      "both), or let even ranks send first and odd ranks receive first.")


def launch_cases(name: str, worker: Callable, fns: list, world_size: int, *args,
                  timeout_s: float = 120.0, deadlock_hint: str = RING_DEADLOCK_HINT) -> list | CheckResult:
    """Run ``worker(rank, world_size, fns, *args)`` on ``world_size`` processes; map failures to results."""
    try:
        return launch(worker, world_size, fns, *args, backend="gloo", timeout_s=timeout_s,
                      collective_timeout_s=min(60.0, timeout_s))
    except WorkerError as err:
        tb = err.worker_traceback
        if "NotImplementedError" in tb:
            return not_implemented_result(name, fns[0])
        tail = "\n".join(tb.strip().splitlines()[-12:])
        return CheckResult(name, False, f"your function failed on rank {err.rank}:\n{tail}")
    except (TypeError, ValueError) as err:  # launch() refused the function or its arguments
        return CheckResult(name, False, f"could not start the workers: {err}")
    except LaunchTimeout:
        return CheckResult(name, False, (
            f"the workers did not finish within {timeout_s:g} s. Most likely every rank is waiting for "
            f"another: {deadlock_hint}"))


def _grad_net() -> nn.Module:
    torch.manual_seed(0)  # every rank builds the same model, as DDP's broadcast would make it
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _grad_avg_worker(rank: int, world_size: int, fns: list, compare_ddp: bool) -> list[list[str]]:
    """For each learner function: problems found on this rank (empty when its gradients match)."""
    model = _grad_net()
    g = torch.Generator().manual_seed(4)
    per_rank = 4
    X = torch.randn(per_rank * world_size, 8, generator=g)  # (world_size * 4, 8): the global batch
    y = torch.randn(per_rank * world_size, 1, generator=g)
    shard = slice(rank * per_rank, (rank + 1) * per_rank)  # this rank's micro-batch

    if compare_ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(copy.deepcopy(model))
        F.mse_loss(ddp(X[shard]), y[shard]).backward()
        reference = {n.removeprefix("module."): p.grad.clone() for n, p in ddp.named_parameters()}
        ref_name = "DDP's gradient"
    else:
        # Equal shards and a mean loss: the average of the shard gradients is the gradient of
        # the whole batch in one process, which is what DDP computes.
        full = copy.deepcopy(model)
        F.mse_loss(full(X), y).backward()
        reference = {n: p.grad.clone() for n, p in full.named_parameters()}
        ref_name = "the one-process gradient of the whole global batch"

    out = []
    for fn in fns:
        net = copy.deepcopy(model)
        F.mse_loss(net(X[shard]), y[shard]).backward()
        local = {n: p.grad.clone() for n, p in net.named_parameters()}
        fn(net)
        dist.barrier()
        problems = []
        for n, p in net.named_parameters():
            e, got = reference[n], p.grad
            if got is not None and torch.allclose(got, e, rtol=1e-4, atol=1e-6):
                continue
            hint = ""
            if got is None:
                problems.append(f"rank {rank}: parameter '{n}' has no gradient after your function")
                continue
            if torch.allclose(got, e * world_size, rtol=1e-4, atol=1e-6):
                hint = (f"\nhint: yours is world_size={world_size} times {ref_name}: all_reduce SUMs; divide "
                        "by the world size to average.")
            elif torch.allclose(got, local[n], rtol=1e-4, atol=1e-6):
                hint = "\nhint: yours is still this rank's own gradient: it was not all-reduced (in place)."
            elif torch.allclose(got, e / world_size, rtol=1e-4, atol=1e-6):
                hint = f"\nhint: yours is {ref_name} divided by world_size once more than needed."
            else:
                fixed = [d for d in range(2, 9) if torch.allclose(got * d, e * world_size, rtol=1e-4, atol=1e-6)]
                if fixed:
                    hint = (f"\nhint: yours is the sum over the ranks divided by {fixed[0]}, not by the world size "
                            f"({world_size}): divide by dist.get_world_size().")
            problems.append(f"rank {rank}: gradient of '{n}' differs from {ref_name}:\n"
                            f"  expected {fmt_value(e)}\n  got      {fmt_value(got)}{hint}")
        out.append(problems)
    return out


def _grad_avg_result(name: str, per_rank: list[list[str]], world_size: int, compare_ddp: bool) -> CheckResult:
    what = "DDP's" if compare_ddp else "the one-process whole-batch"
    cases = (f"{world_size} ranks x 4 samples each, a 2-layer MLP, every rank's gradients vs {what}",)
    problems = [p for rank_problems in per_rank for p in rank_problems]
    if problems:
        return CheckResult(name, False, problems[0] + (f"\n({len(problems) - 1} more difference(s) on these or "
                                                       "other ranks)" if len(problems) > 1 else ""), cases)
    return CheckResult(name, True, f"every gradient on every rank matches {what} gradients ({world_size} ranks "
                       "x 4 samples each, a 2-layer MLP).", cases)


def check_average_gradients(fn: Callable, world_size: int = 3, compare_ddp: bool = True,
                            timeout_s: float = 120.0) -> CheckResult:
    """``fn(model)``: average ``p.grad`` over the ranks with ``all_reduce``, compared with DDP (lesson 06).

    Launches ``world_size`` gloo processes (default 3: an odd world size, so a function that
    divides by a fixed 2 instead of the world size fails); each computes the gradient of its own shard
    of one global batch, calls ``fn(model)``, and compares with the gradients that
    ``DistributedDataParallel`` computes (``compare_ddp=False``: with the whole batch's
    gradient in one process, which DDP equals; that saves DDP's start-up time).
    ``fn`` must live in an importable module (see ``%%writefile`` in lesson 06).
    """
    name = "check_average_gradients"
    return _distributed_check(name, fn, lambda: fn(_grad_net()), _grad_avg_worker,
                              lambda per_rank: _grad_avg_result(name, per_rank, world_size, compare_ddp),
                              world_size, compare_ddp, timeout_s=timeout_s)


def ring_sizes(world_size: int) -> list:
    """Tensor shapes the ring check uses: shorter than, equal to, not divisible by world_size, 2-D."""
    sizes = [1, world_size - 1, world_size, world_size + 1, 2 * world_size + 1, 64, 1001, 4099, (4, 3)]
    return list(dict.fromkeys(s for s in sizes if s != 0))


# What a ring may not call: every collective of torch.distributed (a ring is built from
# point-to-point messages). Point-to-point calls are left unwrapped: P2POp accepts only the
# real dist.isend / dist.irecv.
_COLLECTIVES = ("all_reduce", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_object",
                "reduce_scatter", "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "gather",
                "scatter", "all_to_all", "all_to_all_single", "all_reduce_coalesced")


class _CallLog:
    """While active, refuses (raises) and records every torch.distributed collective ``fn``
    calls: as ``dist.<name>`` and as a name its module imported (``from torch.distributed import ...``).
    """

    def __init__(self, fn):
        self.fn_globals = getattr(fn, "__globals__", {})
        self.collectives: list[str] = []
        self._saved: list[tuple[object, str, object]] = []

    def _refuse(self, name):
        def refused(*args, **kwargs):
            self.collectives.append(name)
            raise RuntimeError(f"dist.{name} is a collective: build the ring from send/recv (or isend/irecv) only")
        return refused

    def __enter__(self):
        for name in _COLLECTIVES:
            original = getattr(dist, name, None)
            if original is None:
                continue
            refused = self._refuse(name)
            self._saved.append((dist, name, original))
            setattr(dist, name, refused)
            for key, value in list(self.fn_globals.items()):
                if value is original:
                    self._saved.append((self.fn_globals, key, value))
                    self.fn_globals[key] = refused
        return self

    def __exit__(self, *exc):
        for target, name, original in reversed(self._saved):
            if isinstance(target, dict):
                target[name] = original
            else:
                setattr(target, name, original)
        self._saved.clear()


def _ring_worker(rank: int, world_size: int, fns: list, sizes: list) -> list[list[str]]:
    """For each learner function: the cases that differ from ``dist.all_reduce`` on this rank,
    or the collectives it called (a ring is built from point-to-point messages only)."""
    out = []
    for fn in fns:
        problems = []
        for size in sizes:
            shape = tuple(size) if isinstance(size, (tuple, list)) else (size,)
            g = torch.Generator().manual_seed(1000 * rank + math.prod(shape))
            x = torch.randn(shape, generator=g)  # different values on every rank
            expected = x.clone()
            dist.all_reduce(expected)
            got = x.clone()
            log = _CallLog(fn)
            try:
                with log:
                    returned = fn(got)
            except NotImplementedError:
                raise
            except Exception as exc:
                if not log.collectives:
                    raise RuntimeError(f"on a tensor of shape {shape}: {type(exc).__name__}: {exc}") from exc
            if log.collectives:  # refused: raised, or caught by the learner's code
                problems.append(f"shape {shape} on {world_size} ranks: your function called "
                                f"dist.{log.collectives[0]}, a collective; a ring all-reduce is built from "
                                "point-to-point messages only (dist.send/recv or dist.isend/irecv)")
                break
            if torch.is_tensor(returned) and returned.data_ptr() != got.data_ptr():
                got = returned
            if got.shape == expected.shape and torch.allclose(got, expected, rtol=1e-5, atol=1e-5):
                continue
            case = f"shape {shape} on {world_size} ranks"
            if got.shape != expected.shape:
                problems.append(f"{case}: rank {rank} got shape {tuple(got.shape)}, expected {shape}")
                continue
            wrong = (~torch.isclose(got, expected, rtol=1e-5, atol=1e-5)).flatten().nonzero().flatten()
            n = got.numel()
            hint = ""
            if n % world_size and wrong.min().item() >= n - n % world_size:
                hint = (f"\nhint: only the last {n - wrong.min().item()} element(s) are wrong: {n} does not split "
                        f"into {world_size} equal chunks; let the chunk sizes differ (e.g. torch.tensor_split).")
            elif n % world_size:
                hint = (f"\nhint: {n} element(s) do not split evenly over {world_size} ranks (some chunks may even "
                        "be empty): use chunks of different sizes, e.g. torch.tensor_split(flat, world_size).")
            elif torch.equal(got, x):
                hint = "\nhint: the tensor is unchanged: the reduction must happen in place (copy the result into it)."
            problems.append(
                f"{case}: rank {rank} has {len(wrong)} of {n} element(s) different from dist.all_reduce, "
                f"first at flat index {wrong[0].item()}: expected {expected.flatten()[wrong[0]].item():.6g}, "
                f"got {got.flatten()[wrong[0]].item():.6g}{hint}")
        out.append(problems)
    return out


def _ring_result(name: str, per_rank: list[list[str]], world_size: int, sizes: list) -> CheckResult:
    cases = tuple(f"shape {tuple(s) if isinstance(s, (tuple, list)) else (s,)} on {world_size} ranks" for s in sizes)
    problems = [p for rank_problems in per_rank for p in rank_problems]
    if problems:
        more = f"\n({len(problems) - 1} more difference(s))" if len(problems) > 1 else ""
        return CheckResult(name, False, problems[0] + more, cases)
    listing = ", ".join(c.split(" on ")[0].removeprefix("shape ") for c in cases)
    return CheckResult(name, True, f"matches dist.all_reduce on every rank for {len(cases)} shapes on "
                       f"{world_size} ranks: {listing}", cases)


def check_ring_all_reduce(fn: Callable, world_size: int = 3, sizes: list | None = None,
                          timeout_s: float = 120.0) -> CheckResult:
    """``fn(tensor)``: a ring all-reduce (sum, in place) from send/recv, against ``dist.all_reduce`` (lesson 06).

    Launches ``world_size`` gloo processes and runs ``fn`` on tensors of every shape in
    ``sizes`` (default ``ring_sizes(world_size)``: lengths below, at and not divisible by
    ``world_size``, and a 2-D tensor). ``fn`` must live in an importable module, and it must
    build the sum from point-to-point messages: a call to a collective (``dist.all_reduce``,
    ``all_gather``, ``broadcast``...) is refused and reported.
    """
    name = "check_ring_all_reduce"
    sizes = ring_sizes(world_size) if sizes is None else list(sizes)
    return _distributed_check(name, fn, lambda: fn(torch.zeros(3)), _ring_worker,
                              lambda per_rank: _ring_result(name, per_rank, world_size, sizes),
                              world_size, sizes, timeout_s=timeout_s)
