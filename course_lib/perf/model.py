"""A Paleo-style model of one training step (Qi, Sparks & Talwalkar, ICLR 2017), built from the real step (lesson 09).

Paleo predicts a network's training time from what each layer computes and moves, what the
device sustains, and the communication scheme. Here, per **operation** of the course's own step
(:class:`course_lib.train.engine.Engine`), counted by running one step under a dispatch mode
(:func:`count_step`):

* FLOPs from ``torch.utils.flop_counter``'s formulas (plus CPU attention, which it does not
  count: :data:`EXTRA_FLOPS`), bytes = the tensors it reads and writes (views move nothing);
* time = the **roofline** of the two, ``max(flops / F(flops), bytes / BW(bytes))`` at the
  throughput the probe measured for an operation of that size (:mod:`.probe`'s curves), plus
  the **per-operation overhead** measured on this machine (:func:`roofline_time`);
* the step = data (the measured per-sample cost of the course's sampler, for the *global* batch
  each rank draws) + forward + backward + optimizer + the part of DDP's all-reduce that
  backward does not hide, bucket by bucket (:func:`bucket_overlap`; costs from lesson 08's
  alpha-beta fit) + DDP's copies of the gradients into and out of its buckets;
* memory = parameters + gradients + optimizer state + the activations autograd saves.

Operation counts are linear in the batch (each op's FLOPs and bytes are ``a + b x batch``), so
two counts give any batch (:func:`interpolate`), which is what scaling to 1024 devices needs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry
from torch.utils.module_tracker import ModuleTracker

from ..comm import cost
from ..tables import Table

DDP_FIRST_BUCKET_BYTES = (
    1 * 2**20
)  # DDP's first bucket is capped at 1 MiB (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)
DDP_BUCKET_BYTES = 25 * 2**20  # bucket_cap_mb=25, DDP's default


# --------------------------------------------------------------------------- counting a real step


def _attention_flops(q: torch.Tensor, k: torch.Tensor, backward: bool) -> int:
    """Two matmuls (Q K^T and P V): ``4 B H Tq Tk d`` forward; backward four: twice that."""
    b, h, tq, d = q.shape
    tk = k.shape[-2]
    return (8 if backward else 4) * b * h * tq * tk * d


# FLOPs of operations torch.utils.flop_counter has no formula for (it counts 0 for them):
# SDPA's CPU kernel is one of them (its CUDA kernels are registered).
EXTRA_FLOPS = {
    "_scaled_dot_product_flash_attention_for_cpu": lambda args, out: _attention_flops(args[0], args[1], False),
    "_scaled_dot_product_flash_attention_for_cpu_backward":
        lambda args, out: _attention_flops(args[1], args[2], True),  # (grad_out, query, key, value, ...)
}


def op_flops(func, args, kwargs, out) -> int:
    """FLOPs of one ATen call: flop_counter's formula, or :data:`EXTRA_FLOPS`, or 0."""
    packet = func._overloadpacket
    if packet in flop_registry:
        return int(flop_registry[packet](*args, **(kwargs or {}), out_val=out))
    extra = EXTRA_FLOPS.get(packet.__name__)
    return int(extra(args, out)) if extra else 0


def _tensor_bytes(tree) -> int:
    leaves, _ = tree_flatten(tree)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


@dataclass(frozen=True)
class OpCost:
    """One operation of the step: where it ran, what it did, its FLOPs and bytes."""

    phase: str  # "data" | "forward" | "backward" | "optimizer"
    module: str  # the innermost module (``Global``: outside any, e.g. the loss or the optimizer)
    op: str
    flops: float
    bytes: float


class _Counter(TorchDispatchMode):
    def __init__(self, tracker: ModuleTracker):
        super().__init__()
        self.tracker = tracker
        self.phase = "forward"
        self.ops: list[OpCost] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out  # a view moves no data
        phase = "backward" if torch._C._current_graph_task_id() != -1 else self.phase
        module = max(self.tracker.parents, key=len) if self.tracker.parents else "Global"
        flops = op_flops(func, args, kwargs, out)
        nbytes = _tensor_bytes(args) + _tensor_bytes(kwargs or {}) + _tensor_bytes(out)
        self.ops.append(OpCost(phase, module, func._overloadpacket.__name__, flops, nbytes))
        return out


class _PhaseSetter:
    """A stand-in for the engine's :class:`PhaseClock`: its phases tell the counter where it is."""

    def __init__(self, counter: _Counter, device):
        self.counter, self.device, self.enabled = counter, device, False

    def phase(self, name: str):
        import contextlib

        @contextlib.contextmanager
        def cm():
            self.counter.phase = {"forward_backward": "forward"}.get(name, name)
            yield

        return cm()


@dataclass
class StepCounts:
    """Everything counted from one step: the operations, and what stays in memory."""

    batch: int  # samples (NeuMF) or sequences (BERT) this rank processed
    ops: list[OpCost]
    param_bytes: int
    optimizer_state_bytes: int
    activation_bytes: int
    grad_ready: list[tuple[int, int]] = field(default_factory=list)  # (grad bytes, backward op index) in DDP order
    # where the bytes are, by module (the tracker's names, e.g. "BertForMLM.blocks.0.attn.qkv"): what
    # lesson 10 needs to split a model by layers (pipeline) or inside layers (tensor parallel)
    param_bytes_by_module: dict[str, int] = field(default_factory=dict)
    activation_by_module: dict[str, int] = field(default_factory=dict)  # saved tensors that are not parameters

    @property
    def grad_bytes(self) -> int:
        return sum(b for b, _ in self.grad_ready) or self.param_bytes

    @property
    def flops(self) -> float:
        return sum(o.flops for o in self.ops)

    def phase_ops(self, phase: str) -> list[OpCost]:
        return [o for o in self.ops if o.phase == phase]

    @property
    def memory_bytes(self) -> int:
        """Parameters + gradients + optimizer state + saved activations (the peak of a step, roughly)."""
        return self.param_bytes + self.grad_bytes + self.optimizer_state_bytes + self.activation_bytes


def count_step(engine, batch, count=None, *, batch_size: int | None = None) -> StepCounts:
    """Run ``engine.step(batch)`` once under the counter and return its :class:`StepCounts`.

    The engine is the course's own (:class:`course_lib.train.engine.Engine`, one process): its
    clock is swapped for one that tells the counter the phase; backward is recognised by
    autograd's running graph task; parameters' gradient-ready points by a hook per parameter.
    """
    model = engine.model
    params = [p for p in model.parameters() if p.requires_grad]
    tracker = ModuleTracker()
    counter = _Counter(tracker)
    saved = [0]
    saved_by: dict[str, int] = {}
    ready: dict[int, int] = {}

    param_ids = {id(p) for p in model.parameters()}

    def pack(t):
        n = t.numel() * t.element_size()
        saved[0] += n
        if id(t) not in param_ids and id(t._base) not in param_ids:  # a weight saved for backward is no new memory
            where = max(tracker.parents, key=len) if tracker.parents else "Global"
            saved_by[where] = saved_by.get(where, 0) + n
        return t

    hooks = [p.register_post_accumulate_grad_hook(lambda p: ready.__setitem__(id(p), len(counter.ops)))
             for p in params]
    old_clock = engine.clock
    engine.clock = _PhaseSetter(counter, engine.device)
    try:
        with tracker, counter, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            engine.step(batch, count)
    finally:
        engine.clock = old_clock
        for h in hooks:
            h.remove()
    state = sum(_tensor_bytes(list(s.values())) for s in engine.optimizer.state.values())
    n_backward = len(counter.ops)
    backward_idx = [i for i, o in enumerate(counter.ops) if o.phase == "backward"]
    # DDP puts parameters in buckets in reverse registration order (about the order backward produces them)
    grad_ready = []
    for p in reversed(params):
        i = ready.get(id(p), n_backward)
        grad_ready.append((p.numel() * p.element_size(), sum(1 for j in backward_idx if j < i)))
    pbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    by_module: dict[str, int] = {}
    for name, p in model.named_parameters():  # tied weights once, under the first module that holds them
        where = ".".join([type(model).__name__] + name.split(".")[:-1])
        by_module[where] = by_module.get(where, 0) + p.numel() * p.element_size()
    if batch_size is None:
        batch_size = batch[0].shape[0]
    return StepCounts(batch_size, counter.ops, pbytes, state, saved[0], grad_ready, by_module, saved_by)


@contextlib.contextmanager
def meta_nonzero(rows: int):
    """Count a step on PyTorch's ``meta`` device (shapes, no values: BERT-large in a second, no memory)
    whose model calls ``nonzero``: without values its output length is unknown, so inside this block
    ``nonzero`` of a meta tensor returns ``rows`` rows (e.g. the masked positions of the real labels)."""

    class _Rows(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._overloadpacket is torch.ops.aten.nonzero and args[0].device.type == "meta":
                return torch.empty((rows, args[0].dim()), dtype=torch.long, device="meta")
            return func(*args, **(kwargs or {}))

    with _Rows():
        yield


def interpolate(a: StepCounts, b: StepCounts, batch: float) -> StepCounts:
    """The counts at ``batch`` from counts at two batches: every op's FLOPs and bytes, and the
    activations, are linear in the batch (parameters and optimizer state do not depend on it)."""
    if [(o.phase, o.op) for o in a.ops] != [(o.phase, o.op) for o in b.ops] or a.batch == b.batch:
        raise ValueError("interpolate needs the same operations counted at two different batch sizes")
    w = (batch - a.batch) / (b.batch - a.batch)

    def lin(x, y):
        return max(0.0, x + w * (y - x))

    ops = [replace(o, flops=lin(o.flops, o2.flops), bytes=lin(o.bytes, o2.bytes)) for o, o2 in zip(a.ops, b.ops)]
    acts = {k: int(lin(v, b.activation_by_module.get(k, 0))) for k, v in a.activation_by_module.items()}
    return StepCounts(int(round(batch)), ops, a.param_bytes, a.optimizer_state_bytes,
                      int(lin(a.activation_bytes, b.activation_bytes)), a.grad_ready, a.param_bytes_by_module, acts)


# --------------------------------------------------------------------------- pricing


def roofline_time(flops: float, n_bytes: float, flops_per_s: float, bytes_per_s: float,
                  overhead_s: float = 0.0) -> float:
    """Time of one operation: ``max(flops / flops_per_s, bytes / bytes_per_s) + overhead_s``.

    The roofline (Williams, Waterman & Patterson 2009): an operation is bound by compute or by
    memory traffic, whichever takes longer; arithmetic intensity ``flops / bytes`` above
    ``flops_per_s / bytes_per_s`` (the ridge point) means compute-bound."""
    if flops < 0 or n_bytes < 0:
        raise ValueError("flops and bytes must be non-negative")
    return max(flops / flops_per_s if flops else 0.0, n_bytes / bytes_per_s if n_bytes else 0.0) + overhead_s


def op_time(op: OpCost, curves, per_op_overhead: bool = True) -> float:
    """One counted operation priced on this device's curves (:class:`.probe.DeviceCurves`)."""
    return roofline_time(op.flops, op.bytes, curves.flops_at(op.flops) if op.flops else 1.0,
                         curves.bandwidth_at(op.bytes), curves.overhead_s if per_op_overhead else 0.0)


def roofline_sum(counts: StepCounts, curves) -> float:
    """The step's operations by the roofline alone (no overhead): compute and traffic only."""
    return sum(op_time(o, curves, per_op_overhead=False) for o in counts.ops)


def step_overhead(measured_tiny_s: float, tiny: StepCounts, curves) -> float:
    """The per-step overhead of this step on this machine: a step measured at a tiny batch, minus
    what the roofline explains of it (Python, the dispatcher, the optimizer's per-tensor loop, kernel
    launches). Paleo's "software factor", measured rather than assumed; never below the per-op
    overhead of the probe times the number of operations."""
    return max(measured_tiny_s - roofline_sum(tiny, curves), len(tiny.ops) * curves.overhead_s)


def overhead_per_op(step_overhead_s: float, operations: int) -> float:
    """A measured per-step overhead (:func:`step_overhead`) spread over the ``operations`` of the step it was
    measured on: what each operation costs beyond its roofline, to price another step of the same software
    (another model's, a scheme's, k micro-batches') by its own operations."""
    if operations < 1:
        raise ValueError("the overhead needs the step's operations to spread over")
    return step_overhead_s / operations


def with_op_overhead(curves, op_overhead_s: float | None):
    """``curves`` whose per-operation overhead is ``op_overhead_s`` (None: ``curves`` unchanged). The overhead
    replaces the probe's, it is not added to it: each operation pays one overhead."""
    return curves if op_overhead_s is None else replace(curves, overhead_s=op_overhead_s)


def ddp_buckets(grad_ready: list[tuple[int, float]], cap_bytes: int = DDP_BUCKET_BYTES,
                first_cap_bytes: int = DDP_FIRST_BUCKET_BYTES) -> list[tuple[int, float]]:
    """Gradients (bytes, ready time) in DDP's order grouped into buckets: ``[(bytes, ready time)]``.

    A bucket closes when adding the next gradient would pass its cap (the first bucket's cap is
    smaller, so communication starts early); it is ready when its last gradient is."""
    buckets, size, ready, cap = [], 0, 0.0, first_cap_bytes
    for n, t in grad_ready:
        if size and size + n > cap:
            buckets.append((size, ready))
            size, ready, cap = 0, 0.0, cap_bytes
        size += n
        ready = max(ready, t)
    if size:
        buckets.append((size, ready))
    return buckets


def bucket_overlap(ready_s, comm_s) -> tuple[float, float]:
    """``(end of the last all-reduce, exposed time)`` of bucketed all-reduces behind backward.

    Bucket ``i`` becomes ready at ``ready_s[i]`` (backward has produced all its gradients); the
    all-reduces run one after the other, each starting when its bucket is ready and the previous
    one is done: ``end_i = max(ready_i, end_{i-1}) + comm_i``. Backward ends at ``max(ready_s)``;
    what the step waits for beyond that is ``end_last - max(ready_s)`` (0 when fully hidden)."""
    end = 0.0
    for r, c in zip(ready_s, comm_s):
        end = max(r, end) + c
    last = max(ready_s) if len(ready_s) else 0.0
    return end, max(0.0, end - last)


@dataclass
class StepPrediction:
    """Predicted time of one step, by part, and its memory."""

    batch: int  # per rank
    world_size: int
    data_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    comm_s: float  # all-reduce time in total (hidden or not)
    exposed_comm_s: float
    ddp_copy_s: float
    overhead_s: float  # the measured per-step overhead (0 when each op paid the probe's per-op overhead)
    memory_bytes: int
    flops: float  # this rank's FLOPs per step
    layers: list[dict] = field(default_factory=list)

    @property
    def step_s(self) -> float:
        return (self.data_s + self.forward_s + self.backward_s + self.optimizer_s + self.exposed_comm_s
                + self.ddp_copy_s + self.overhead_s)

    @property
    def samples_per_s(self) -> float:
        return self.batch * self.world_size / self.step_s

    def parts(self) -> dict[str, float]:
        return {"data": self.data_s, "forward": self.forward_s, "backward": self.backward_s,
                "optimizer": self.optimizer_s, "all-reduce (exposed)": self.exposed_comm_s,
                "DDP bucket copies": self.ddp_copy_s, "per-step overhead": self.overhead_s}

    def mfu(self, peak_flops: float) -> float:
        """Model FLOPs utilisation: the step's FLOPs per second over ``peak_flops`` (per device)."""
        return self.flops / self.step_s / peak_flops

    def layer_table(self, top: int = 12) -> Table:
        """The ``top`` layers by time; the title says how many it shows of how many (a model
        may have fewer layers than ``top``)."""
        shown = sorted(self.layers, key=lambda r: -r["time_s"])[:top]
        which = (f"all {len(shown)} layers, by time" if len(shown) == len(self.layers) else
                 f"top {len(shown)} of {len(self.layers)} layers by time")
        t = Table(["layer", "FLOPs (M)", "MB moved", "ops", "time (ms)", "bound"],
                  title=f"the step, layer by layer (batch {self.batch} per rank; {which})")
        for r in shown:
            t.add(**{"layer": r["layer"], "FLOPs (M)": r["flops"] / 1e6, "MB moved": r["bytes"] / 1e6,
                     "ops": r["ops"], "time (ms)": r["time_s"] * 1e3, "bound": r["bound"]})
        return t


def predict_step(
    counts: StepCounts,
    curves,
    *,
    world_size: int = 1,
    link: tuple[float, float] | None = None,
    data_s: float = 0.0,
    step_overhead_s: float | None = None,
    bucket_cap_bytes: int = DDP_BUCKET_BYTES,
    bucket_collective=cost.ring_allreduce_time,
) -> StepPrediction:
    """Predicted step of one rank at ``counts.batch`` samples, on ``world_size`` ranks.

    ``link``: per-message ``(alpha, beta)`` of one link (``comm.link_alpha_beta_from_ring_fit``
    of a measured all-reduce), priced as a ring all-reduce per bucket; ``data_s``: the sampler's
    time for one *global* batch (every rank of the course draws the whole global batch and keeps
    its slice); ``step_overhead_s``: the measured per-step overhead (:func:`step_overhead`); when
    None, each operation pays the probe's per-op overhead instead. ``bucket_collective(bytes, p, alpha,
    beta)``: what each bucket costs (DDP: a ring all-reduce; ZeRO: a ring reduce-scatter, lesson 10)."""
    per_op = step_overhead_s is None
    phase_s = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    layers: dict[str, dict] = {}
    backward_t = []  # cumulative backward time after each backward op
    for o in counts.ops:
        t = op_time(o, curves, per_op)
        phase = o.phase if o.phase in phase_s else "forward"
        phase_s[phase] += t
        if o.phase == "backward":
            backward_t.append(phase_s["backward"])
        name = o.module if o.phase != "optimizer" else "optimizer"
        row = layers.setdefault(name, {"layer": name, "flops": 0.0, "bytes": 0.0, "ops": 0, "time_s": 0.0,
                                       "compute_s": 0.0, "memory_s": 0.0})
        row["flops"] += o.flops
        row["bytes"] += o.bytes
        row["ops"] += 1
        row["time_s"] += t
        row["compute_s"] += o.flops / curves.flops_at(o.flops) if o.flops else 0.0
        row["memory_s"] += o.bytes / curves.bandwidth_at(o.bytes)
    for row in layers.values():
        over = row["ops"] * curves.overhead_s
        row["bound"] = max((("overhead", over), ("compute", row["compute_s"]), ("memory", row["memory_s"])),
                           key=lambda kv: kv[1])[0]
    comm_s = exposed = copy_s = 0.0
    if world_size > 1:
        if link is None:
            raise ValueError("predicting more than one rank needs the link's (alpha, beta)")
        ready = [(n, backward_t[i - 1] if 0 < i <= len(backward_t) else (phase_s["backward"] if i else 0.0))
                 for n, i in counts.grad_ready]
        buckets = ddp_buckets(ready, bucket_cap_bytes)
        comms = [bucket_collective(n, world_size, *link) for n, _ in buckets]
        comm_s = sum(comms)
        _, exposed = bucket_overlap([r for _, r in buckets], comms)
        g = counts.grad_bytes
        copy_s = 2 * 2 * g / curves.bandwidth_at(2 * g)  # gradients into the buckets and back: read + write each
    overhead = len(counts.ops) * curves.overhead_s if per_op else step_overhead_s
    return StepPrediction(counts.batch, world_size, data_s, phase_s["forward"], phase_s["backward"],
                          phase_s["optimizer"], comm_s, exposed, copy_s, 0.0 if per_op else overhead,
                          counts.memory_bytes, counts.flops, list(layers.values()))


def scaling_curve(a: StepCounts, b: StepCounts, curves, link: tuple[float, float], *, batch: int, ps,
                  mode: str = "strong", step_overhead_s: float | None = None) -> list[dict]:
    """Predicted step time, throughput and efficiency on ``p`` devices for each ``p`` in ``ps``.

    ``mode="strong"``: the global batch ``batch`` is fixed, each device gets ``batch / p``;
    efficiency = ``T(1) / (p T(p))`` (the same work, p times the devices). ``mode="weak"``: each
    device keeps ``batch``, the global batch grows as ``p x batch``; efficiency = ``T(1) / T(p)``
    -- which says nothing about whether the larger batch still reaches the target in as few epochs.
    The data term is left out (the course's sampler cost depends on how it is sharded, not on p).
    """
    if mode not in ("strong", "weak"):
        raise ValueError(f"mode={mode!r}; choose 'strong' or 'weak'")
    rows, t1 = [], None
    for p in ps:
        per = batch / p if mode == "strong" else batch
        if per < 1:
            break
        counts = interpolate(a, b, per)
        pred = predict_step(counts, curves, world_size=p, link=link if p > 1 else None,
                            step_overhead_s=step_overhead_s)
        t = pred.step_s
        t1 = t if t1 is None else t1
        eff = t1 / (p * t) if mode == "strong" else t1 / t
        rows.append({"p": p, "batch per device": per, "global batch": per * p, "step (ms)": t * 1e3,
                     "samples/s": per * p / t, "efficiency": eff, "exposed comm (ms)": pred.exposed_comm_s * 1e3,
                     "speedup": eff * p})
    return rows


def scale_curves(curves, *, flops_factor: float = 1.0, bandwidth_factor: float = 1.0, overhead_factor: float = 1.0):
    """The same device, ``flops_factor`` times faster at compute (and so on): for "what if the device were
    10x faster"."""
    from .probe import DeviceCurves  # noqa: PLC0415

    return DeviceCurves(curves.device, [(x, f * flops_factor) for x, f in curves.matmul],
                        [(x, b * bandwidth_factor) for x, b in curves.copy], curves.overhead_s * overhead_factor,
                        curves.threads)


def steps_to_target(batch: float, min_steps: float, critical_batch: float) -> float:
    """Steps to a target at ``batch`` by the empirical model of McCandlish et al. (2018), "An Empirical
    Model of Large-Batch Training": ``S = S_min (1 + B_crit / B)``. Far below ``B_crit`` the steps halve
    when the batch doubles (perfect scaling); far above, they stop falling (the batch stops paying)."""
    return min_steps * (1 + critical_batch / batch)
