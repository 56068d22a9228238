"""Sharded data parallelism: ZeRO's stages, stage 1 from collectives, and FSDP2 (lesson 10).

Data parallelism (lesson 06) keeps on every rank a full copy of everything a step needs:
the parameters, their gradients and the optimizer's state (Adam: two more numbers per
parameter). Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", cut that redundancy in three stages, each rank keeping ``1/W`` of:

* **stage 1** — the optimizer state. After backward the gradients are **reduce-scattered**
  (rank ``r`` gets the sum of chunk ``r`` only), each rank updates its chunk of the
  parameters with its chunk of the state, and the updated chunks are **all-gathered**.
  A reduce-scatter plus an all-gather is exactly a ring all-reduce (lesson 08): the same
  bytes on the wire as DDP;
* **stage 2** — also the gradients (each rank keeps only the reduced chunk it updates);
* **stage 3** — also the parameters: a layer's full weights exist only while it runs. Each
  layer is all-gathered before its forward, again before its backward, and its gradients
  reduce-scattered: ``3 (W-1)/W`` of the parameters' bytes per step against DDP's
  ``2 (W-1)/W``, 1.5x. PyTorch's FSDP (``fully_shard``, "FSDP2") is stage 3.

:func:`memory_per_rank` and :func:`comm_bytes_per_step` are the arithmetic (pure);
:class:`ZeroStage1` builds stage 1 from lesson 08's ``ring_reduce_scatter`` and
``ring_all_gather``; :func:`sharded_worker` measures DDP, stage 1 and FSDP2 on the same
model and data and checks they end equal. Measured with torch 2.13 on gloo: ``fully_shard``
runs on CPU processes; it shards every parameter along dim 0 (padding the last shard when
the rows do not divide), and the optimizer state it creates is sharded the same way.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ..comm.collectives import chunk_bounds, ring_all_gather, ring_reduce_scatter

SCHEMES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP")
# bytes per parameter: (parameters, gradients, optimizer state). fp32 Adam: m and v.
# "mixed": ZeRO paper's accounting (section 3.1): fp16 parameters and gradients, and the
# optimizer keeps fp32 master parameters, m and v: K = 12 bytes.
PRECISIONS = {"fp32": (4, 4, 8), "mixed": (2, 2, 12)}


@dataclass(frozen=True)
class MemoryPerRank:
    """Bytes one rank keeps for the whole model between steps."""

    parameters: float
    gradients: float
    optimizer_state: float

    @property
    def total(self) -> float:
        return self.parameters + self.gradients + self.optimizer_state


def memory_per_rank(n_params: int, world_size: int, scheme: str, precision: str = "fp32") -> MemoryPerRank:
    """What each of ``world_size`` ranks keeps for a model of ``n_params`` parameters, Adam-style
    optimizer, under ``scheme`` (one of :data:`SCHEMES`). Excludes activations, and the one
    layer that ZeRO-3 gathers at a time."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r}; choose one of {SCHEMES}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}; choose one of {tuple(PRECISIONS)}")
    bp, bg, bs = PRECISIONS[precision]
    level = SCHEMES.index(scheme)  # 0 DDP, 1 stage 1, ...
    w = world_size
    return MemoryPerRank(parameters=n_params * bp / (w if level >= 3 else 1),
                         gradients=n_params * bg / (w if level >= 2 else 1),
                         optimizer_state=n_params * bs / (w if level >= 1 else 1))


def comm_bytes_per_step(param_bytes: float, world_size: int, scheme: str) -> float:
    """Bytes each rank sends per step with ring collectives (``W - 1`` chunks of ``1/W``):
    DDP's all-reduce ``2 (W-1)/W``, stages 1 and 2 the same (reduce-scatter + all-gather),
    stage 3 ``3 (W-1)/W`` of the gradients' bytes (``param_bytes``)."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r}; choose one of {SCHEMES}")
    w = world_size
    passes = 3 if scheme == SCHEMES[3] else 2
    return passes * (w - 1) / w * param_bytes


# --------------------------------------------------------------------------- stage 1 from collectives


class ZeroStage1:
    """Optimizer-state sharding over the ranks, built from lesson 08's ring collectives.

    The model's parameters become views into one flat buffer (same values, same modules).
    Rank ``r`` owns chunk ``r`` of it (``chunk_bounds``): its optimizer (any
    ``torch.optim`` class) sees that chunk as one parameter, so its state is ``1/W`` of
    DDP's. ``step()``: flatten the gradients, ``ring_reduce_scatter`` them (rank ``r`` now
    holds the sum of its chunk), divide by ``W`` (DDP's mean), update the chunk in place,
    ``ring_all_gather`` the flat buffer -- every rank's parameters are updated.
    """

    def __init__(self, params, optimizer_cls=torch.optim.AdamW, group=None, **optimizer_kwargs):
        self.params = [p for p in params if p.requires_grad]
        self.group = group
        self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)
        self.numel = sum(p.numel() for p in self.params)
        self.flat = torch.cat([p.detach().reshape(-1) for p in self.params])  # (numel,)
        offset = 0
        for p in self.params:  # the parameters now live in the flat buffer
            p.data = self.flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        self.lo, self.hi = chunk_bounds(self.numel, self.world_size)[self.rank]
        self.shard = nn.Parameter(self.flat[self.lo:self.hi])  # shares the flat buffer's memory
        self.optimizer = optimizer_cls([self.shard], **optimizer_kwargs)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        grads = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.params])
        mine = ring_reduce_scatter(grads, self.group)  # this rank's chunk, summed over the ranks
        self.shard.grad = mine / self.world_size
        self.optimizer.step()  # updates self.flat[lo:hi] in place
        self.shard.grad = None
        ring_all_gather(self.flat, self.group)  # every rank's updated chunk, everywhere

    def state_bytes(self) -> int:
        """Bytes of optimizer state this rank keeps (its chunk's)."""
        return _tensor_bytes(v for s in self.optimizer.state.values() for v in s.values())


# --------------------------------------------------------------------------- measuring


def _nbytes(t) -> int:
    return (t.numel() * t.element_size() if torch.is_tensor(t)
            else sum(_nbytes(x) for x in t) if isinstance(t, (list, tuple)) else 0)


class CommCounter:
    """Counts the collectives that run inside it and the bytes this rank *sends* for them with
    ring algorithms, from the tensors handed to ``torch.distributed``'s ops (a dispatch mode sees
    DDP's bucket all-reduce, FSDP2's all-gathers and reduce-scatters, and our ``isend``s alike):
    an all-reduce of ``n`` bytes sends ``2 (W-1)/W n``, an all-gather into ``n`` bytes ``(W-1)/W n``,
    a reduce-scatter into a shard of ``s`` bytes ``(W-1) s``, a send its bytes."""

    def __init__(self, world_size: int):
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self
        self.world_size, self.calls, self.sent_bytes = world_size, {}, 0.0

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                counter._record(str(func.overloadpacket), args)
                return func(*args, **(kwargs or {}))

        self._mode = _Mode()

    def _record(self, name: str, args) -> None:
        w = self.world_size
        if not name.startswith("c10d.") or not args:
            return
        n = _nbytes(args[0])
        if name in ("c10d.allreduce_",):
            sent = 2 * (w - 1) / w * n
        elif name in ("c10d._allgather_base_", "c10d.allgather_"):  # args[0]: the gathered output
            sent = (w - 1) / w * n
        elif name in ("c10d._reduce_scatter_base_", "c10d.reduce_scatter_"):  # args[0]: this rank's shard
            sent = (w - 1) * n
        elif name == "c10d.send":
            sent = n
        elif name == "c10d.recv_":
            sent = 0
        else:
            return
        self.calls[name] = self.calls.get(name, 0) + 1
        self.sent_bytes += sent

    def __enter__(self):
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)



def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _tensor_bytes(tensors) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in tensors if torch.is_tensor(t) and t.dim() > 0)


def held_bytes(model: nn.Module, optimizer_state_bytes: int) -> dict:
    """Bytes this rank holds in parameters, gradients (local shards for DTensors) and optimizer state."""
    params = list(model.parameters())
    return {"parameters": _tensor_bytes(params),
            "gradients": _tensor_bytes(p.grad for p in params if p.grad is not None),
            "optimizer_state": optimizer_state_bytes}


def _optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    return _tensor_bytes(v for s in optimizer.state.values() for v in s.values())


def largest_layer_bytes(model: nn.Module, units) -> int:
    """Bytes of the largest unit that FSDP gathers whole at once (a layer; the rest of the root)."""
    sizes = [_tensor_bytes(u.parameters()) for u in units]
    in_units = {id(p) for u in units for p in u.parameters()}
    sizes.append(_tensor_bytes(p for p in model.parameters() if id(p) not in in_units))
    return max(sizes)


def fsdp_units(model: nn.Module) -> list[nn.Module]:
    """What :func:`fully_shard_model` shards as separate units: BERT's blocks (or a Sequential's layers)."""
    return list(model.blocks) if hasattr(model, "blocks") else list(model.children())


def fully_shard_model(model: nn.Module) -> nn.Module:
    """FSDP2: ``fully_shard`` each unit of :func:`fsdp_units`, then the root (embeddings, head)."""
    from torch.distributed.fsdp import fully_shard

    for unit in fsdp_units(model):
        fully_shard(unit)
    fully_shard(model)
    return model


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def sharded_worker(rank: int, world_size: int, spec: dict) -> dict:
    """Worker: the same BERT, data and AdamW steps under DDP, ZeRO stage 1 (ours) and FSDP2.

    ``spec``: ``preset``, ``vocab_size``, ``seq_len``, ``global_batch`` (split over the ranks),
    ``steps``, ``lr``. Per scheme: bytes held (parameters, gradients, optimizer state), median
    step time, the bytes sent in the last step (:class:`CommCounter`), and the largest
    difference of the final parameters from DDP's.

    Measured with torch 2.13: FSDP2 sends less than 1.5x DDP's bytes (1.36x for the tiny BERT),
    because ``fully_shard`` leaves the root unit (embeddings, head) gathered between forward and
    backward (``reshard_after_forward`` is False for the root): only the blocks are gathered twice."""
    from .. import dist as cdist
    from ..models.bert import build_bert

    device = cdist.device()  # this rank's GPU under NCCL; weights and data drawn on the CPU, the same everywhere
    torch.manual_seed(0)
    base = build_bert(spec["preset"], vocab_size=spec["vocab_size"], dropout=0.0, attention_dropout=0.0,
                      max_position=spec["seq_len"]).to(device)
    batches = _mlm_batches(spec, rank, world_size, device)
    out = {"rank": rank, "n_params": base.num_parameters(), "device": str(device)}
    finals = {}
    # each scheme is built only once the one before has run, on a fresh copy of the same weights
    for name, make in (("DDP", _ddp_scheme), ("ZeRO-1", _zero1_scheme), ("FSDP2", _fsdp2_scheme)):
        out[name], finals[name] = _run_scheme(*make(base, spec, device), batches, world_size, device)
    out["largest_unit_bytes"] = largest_layer_bytes(base, fsdp_units(base))

    for name in ("ZeRO-1", "FSDP2"):
        out[name]["max_diff_from_ddp"] = max(float((a - b_).abs().max()) for a, b_ in zip(finals[name], finals["DDP"]))
    out["DDP"]["max_diff_from_ddp"] = 0.0
    initial = [p.detach() for p in base.parameters()]
    out["ddp_moved_from_init"] = max(float((a - b_).abs().max()) for a, b_ in zip(finals["DDP"], initial))
    return out


def _mlm_batches(spec: dict, rank: int, world_size: int, device) -> tuple:
    """Every step's masked-LM ids and labels (drawn alike on every rank) and this rank's slice ``(lo, hi)``."""
    g = torch.Generator().manual_seed(1)
    steps, b = spec["steps"], spec["global_batch"]
    ids = torch.randint(0, spec["vocab_size"], (steps, b, spec["seq_len"]), generator=g)
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.15, ids, torch.full_like(ids, -100))
    lo, hi = chunk_bounds(b, world_size)[rank]
    if hi - lo != b // world_size or b % world_size:
        raise ValueError(f"global_batch={b} does not split evenly over {world_size} ranks")
    return ids.to(device), labels.to(device), lo, hi


def _ddp_scheme(base, spec, device):
    """DDP: everything replicated, one all-reduce of the gradients."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    m = copy.deepcopy(base)
    ddp = DDP(m, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(m.parameters(), lr=spec["lr"])
    return m, lambda: (opt.step(), opt.zero_grad(set_to_none=False)), lambda: _optimizer_state_bytes(opt), ddp


def _zero1_scheme(base, spec, device):
    """ZeRO stage 1 from lesson 08's ring collectives."""
    m = copy.deepcopy(base)
    zero = ZeroStage1(m.parameters(), torch.optim.AdamW, lr=spec["lr"])

    def zero_step():
        zero.step()
        for p in m.parameters():
            p.grad.zero_()

    return m, zero_step, zero.state_bytes, None


def _fsdp2_scheme(base, spec, device):
    """FSDP2: ``fully_shard`` on every block and the root."""
    m = fully_shard_model(copy.deepcopy(base))
    opt = torch.optim.AdamW(m.parameters(), lr=spec["lr"])
    return m, lambda: (opt.step(), opt.zero_grad(set_to_none=False)), lambda: _optimizer_state_bytes(opt), None


def _run_scheme(model, step_fn, state_bytes_fn, forward_model, batches, world_size: int, device) -> tuple:
    """Train ``model`` on this rank's slice of ``batches``; its bytes held, median step time, the last step's
    messages, and its final (full) parameters."""
    ids, labels, lo, hi = batches
    steps = ids.shape[0]
    times = []
    fm = forward_model or model
    counter = CommCounter(world_size)
    for t in range(steps):
        dist.barrier()
        _sync_device(device)
        t0 = time.perf_counter()
        with counter if t == steps - 1 else contextlib.nullcontext():  # the last step's messages
            loss = fm(ids[t, lo:hi], labels[t, lo:hi])
            loss.backward()
            step_fn()
        _sync_device(device)
        times.append(time.perf_counter() - t0)
    record = {**held_bytes(model, state_bytes_fn()), "step_s": statistics.median(times[1:] or times),
              "sent_bytes": counter.sent_bytes, "collectives": dict(counter.calls)}
    return record, [_full(p.detach()).clone() for p in model.parameters()]


def _sync_device(device) -> None:
    """The GPU's queued work done before the host reads its clock."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
