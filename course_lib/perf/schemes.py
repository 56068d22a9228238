"""Lesson 09's step model under each way of splitting a model: memory and time per rank (lesson 10).

Lesson 09 prices one step from its counted operations (:mod:`.model`: roofline per operation,
alpha-beta per message, DDP's buckets behind backward). Here the same counts, split the way each
scheme of lesson 10 splits the work, give each rank's memory, the bytes it sends and its step
time for one global batch, so the BERT-base / BERT-large predictions and the decision table of
lesson 10 come from one model. ``predict(a, b, curves, link, scheme=..., world_size=..., ...)``:

* ``a``, ``b``: :class:`.model.StepCounts` of the whole model on one process at two batch sizes
  (any other batch is :func:`.model.interpolate`); counted in fp32 (``"mixed"`` precision halves
  the bytes of forward and backward, of the activations and of the gradients sent, and keeps the
  optimizer's fp32 master weights: ZeRO's accounting, :func:`course_lib.parallel.sharded.memory_per_rank`);
* ``curves``: one device (:class:`.probe.DeviceCurves`, probed or a reference GPU's);
  ``link``: ``(alpha, beta)`` of one link between two ranks;
* ``op_overhead_s``: what each operation costs beyond its roofline, lesson 09's measured per-step overhead
  spread over its step's operations (:func:`.model.overhead_per_op`); it replaces the curves' own per-operation
  overhead, so each operation a rank runs pays one overhead. None: the curves' own (the probe's, or the
  reference GPU's assumed one).

Each scheme processes ``global_batch`` samples per optimizer step in micro-batches of ``micro_batch``:

* **DDP**: each of ``W`` ranks the whole model, ``global_batch / W`` samples (accumulated in
  micro-batches), lesson 09's bucketed all-reduce behind the last micro-batch's backward;
  **DDP + accumulation** (lesson 07's tool, :func:`predict_accumulated`): the same, in the fewest micro-batches
  whose activations fit beside DDP's state: forward and backward ``k`` times, the optimizer and the all-reduce
  once;
* **ZeRO-1 / ZeRO-2**: DDP's compute; the buckets reduce-scattered behind backward, each rank
  steps ``1/W`` of the parameters, then the parameters all-gathered (exposed: nothing left to hide it);
* **FSDP** (ZeRO-3): each transformer block all-gathered before its forward and again before its
  backward, its gradients reduce-scattered; one unit gathered ahead of the compute (FSDP2's
  prefetch), the root (embeddings, head) gathered once per step;
* **tensor** (Megatron): every rank every sample; the attention's and the MLP's operations split
  ``W`` ways (their FLOPs, bytes, parameters and activations), LayerNorms, embeddings and head
  replicated; two all-reduces of the activations per block forward and two backward, on the
  critical path;
* **pipeline**: the blocks in ``W`` stages (embeddings on the first, head and loss on the last),
  ``global_batch / micro_batch`` micro-batches, timed by lesson 10's own schedule simulation
  (:func:`course_lib.parallel.pipeline.simulate`) with each stage's operations and messages.

Left out, and said where it matters: activation recomputation, sequence parallelism, vocabulary
splitting, the bandwidth two collectives in flight at once share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..comm import cost
from ..comm.collectives import chunk_bounds
from ..parallel import pipeline as pipe
from ..parallel.sharded import PRECISIONS, memory_per_rank
from . import model as M

SCHEMES = ("DDP", "ZeRO-1", "ZeRO-2", "FSDP", "tensor", "pipeline")
ACCUMULATION = "DDP + accumulation"  # DDP in micro-batches: priced by predict_accumulated, not predict_all
SIMPLEST_FIRST = ("DDP", ACCUMULATION) + SCHEMES[1:]  # the order a choice between as-fast schemes prefers
_ZERO_NAME = {"DDP": "DDP", ACCUMULATION: "DDP", "ZeRO-1": "ZeRO-1", "ZeRO-2": "ZeRO-2", "FSDP": "ZeRO-3 / FSDP"}
_BLOCK = re.compile(r"\.blocks\.(\d+)(\.|$)")


@dataclass(frozen=True)
class SchemePrediction:
    """One rank's step under one scheme: time by part (seconds), memory by part (bytes), bytes sent."""

    scheme: str
    world_size: int
    global_batch: int
    micro_batch: int
    compute_s: float  # forward + backward + optimizer on this rank (per-operation overhead included)
    comm_s: float  # every message of the step, hidden or not
    exposed_comm_s: float  # the part of it the step waits for
    idle_s: float  # pipeline: the bubble (stages waiting for each other)
    parameters: float
    gradients: float
    optimizer_state: float
    activations: float  # saved for backward, at the peak (pipeline: the micro-batches in flight)
    sent_bytes: float
    gathered: float = 0.0  # FSDP: parameters gathered whole during the step (freed after it)

    @property
    def step_s(self) -> float:
        return self.compute_s + self.exposed_comm_s + self.idle_s

    @property
    def samples_per_s(self) -> float:
        return self.global_batch / self.step_s

    @property
    def memory_bytes(self) -> float:
        """The peak of a step: what stays between steps, the activations, and what FSDP gathers."""
        return self.parameters + self.gradients + self.optimizer_state + self.activations + self.gathered

    @property
    def state_bytes(self) -> float:
        """Parameters, gradients and optimizer state: what stays between steps."""
        return self.parameters + self.gradients + self.optimizer_state


def block_of(module: str) -> int | None:
    """The block index of a module name (``"BertForMLM.blocks.3.attn.qkv"`` -> 3), None outside the blocks."""
    found = _BLOCK.search(module)
    return int(found.group(1)) if found else None


def tensor_split(module: str) -> bool:
    """Does Megatron split this module's work over the tensor-parallel ranks? The attention and the MLP of a block."""
    return block_of(module) is not None and (".attn" in module or ".mlp" in module)


def _n_blocks(counts: M.StepCounts) -> int:
    found = {block_of(m) for m in counts.param_bytes_by_module} - {None}
    return max(found) + 1 if found else 0


def _at_precision(counts: M.StepCounts, precision: str) -> M.StepCounts:
    """fp32 counts at ``precision``: mixed halves the bytes of forward and backward (16-bit tensors)
    and of the gradients; the optimizer works on fp32 master weights (unchanged)."""
    if precision == "fp32":
        return counts
    if precision != "mixed":
        raise ValueError(f"precision={precision!r}; choose 'fp32' or 'mixed'")
    half = 0.5
    ops = [o if o.phase == "optimizer" else replace(o, bytes=o.bytes * half) for o in counts.ops]
    return replace(counts, ops=ops, activation_bytes=int(counts.activation_bytes * half),
                   grad_ready=[(int(n * half), i) for n, i in counts.grad_ready],
                   activation_by_module={k: int(v * half) for k, v in counts.activation_by_module.items()})


def _n_params(counts: M.StepCounts, modules=None) -> int:
    """Parameters (fp32 counts: 4 bytes each) of ``modules`` (a predicate on names), or of all."""
    return sum(v for k, v in counts.param_bytes_by_module.items() if modules is None or modules(k)) // 4


def _time(ops, curves, split: int = 1, which=lambda o: False) -> float:
    """Seconds of ``ops`` on ``curves``; those ``which`` selects run ``1/split`` of their FLOPs and bytes."""
    return sum(M.op_time(replace(o, flops=o.flops / split, bytes=o.bytes / split) if which(o) else o, curves)
               for o in ops)


def _check(scheme: str, world_size: int, global_batch: int, micro_batch: int) -> int:
    if scheme not in SIMPLEST_FIRST:
        raise ValueError(f"scheme={scheme!r}; choose one of {SIMPLEST_FIRST}")
    if world_size < 1 or micro_batch < 1 or global_batch < micro_batch:
        raise ValueError(f"need world_size >= 1 and 1 <= micro_batch <= global_batch, got {world_size}, "
                         f"{micro_batch}, {global_batch}")
    per_rank = global_batch // world_size if scheme in _ZERO_NAME else global_batch
    if scheme in _ZERO_NAME and global_batch % world_size:
        raise ValueError(f"{scheme}: global_batch={global_batch} does not split over world_size={world_size}")
    if per_rank % micro_batch:
        raise ValueError(f"{scheme}: {per_rank} samples per rank are not a whole number of micro-batches of "
                         f"{micro_batch}")
    return per_rank // micro_batch


def predict(a: M.StepCounts, b: M.StepCounts, curves, link: tuple[float, float], *, scheme: str, world_size: int,
            global_batch: int, micro_batch: int, values_per_sample: int, precision: str = "mixed",
            schedule: str = "1F1B", op_overhead_s: float | None = None) -> SchemePrediction:
    """Lesson 09's model of one step of ``scheme`` on ``world_size`` ranks (see the module docstring).

    ``values_per_sample``: the values one sample carries between two blocks (BERT: sequence length
    x hidden size): what tensor parallelism all-reduces and a pipeline stage sends. ``schedule``:
    the pipeline's (``"GPipe"`` or ``"1F1B"``)."""
    steps = _check(scheme, world_size, global_batch, micro_batch)
    curves = M.with_op_overhead(curves, op_overhead_s)
    micro = _at_precision(M.interpolate(a, b, micro_batch), precision)
    common = dict(scheme=scheme, world_size=world_size, global_batch=global_batch, micro_batch=micro_batch)
    if scheme in _ZERO_NAME:
        return _data_parallel(micro, curves, link, common, world_size, steps, precision)
    value_bytes = 2 if precision == "mixed" else 4
    if scheme == "tensor":
        return _tensor(micro, curves, link, common, world_size, steps, micro_batch * values_per_sample * value_bytes,
                       precision)
    return _pipeline(micro, curves, link, common, world_size, steps, values_per_sample * micro_batch * value_bytes,
                     precision, schedule)


def _data_parallel(micro: M.StepCounts, curves, link, common: dict, w: int, steps: int,
                   precision: str) -> SchemePrediction:
    """DDP and the ZeRO stages: every rank computes the whole model on its share of the batch; what
    differs is what it keeps (``memory_per_rank``) and what it sends."""
    scheme = common["scheme"]
    param_b, grad_b, _ = PRECISIONS[precision]
    n = _n_params(micro)
    fwd_bwd = [o for o in micro.ops if o.phase != "optimizer"]
    opt = [o for o in micro.ops if o.phase == "optimizer"]
    mem = memory_per_rank(n, w, _ZERO_NAME[scheme], precision)
    shard = w if _ZERO_NAME[scheme] != "DDP" else 1  # ZeRO steps 1/W of every tensor: each op, 1/W of the work
    compute = steps * _time(fwd_bwd, curves) + _time(opt, curves, shard, lambda o: True)
    if w == 1:
        comm = exposed = sent = 0.0
    elif _ZERO_NAME[scheme] == "DDP":  # lesson 09's buckets behind the last micro-batch's backward
        pred = M.predict_step(micro, curves, world_size=w, link=link)
        comm, exposed = pred.comm_s, pred.exposed_comm_s + pred.ddp_copy_s
        sent = 2 * (w - 1) / w * n * grad_b
    elif scheme in ("ZeRO-1", "ZeRO-2"):
        pred = M.predict_step(micro, curves, world_size=w, link=link, bucket_collective=cost.ring_reduce_scatter_time)
        gather = cost.ring_all_gather_time(n * param_b, w, *link)
        comm, exposed = pred.comm_s + gather, pred.exposed_comm_s + gather
        sent = (w - 1) / w * n * (grad_b + param_b)
    else:
        comm, exposed, sent = _fsdp(micro, curves, link, w, precision, steps)
    gathered = 0.0
    if scheme == "FSDP":  # two blocks whole at once (one computing, one prefetched) and the root, gathered
        gathered = (2 * _largest_block(micro) / 4 + n - _n_params(micro, lambda k: block_of(k) is not None)) * param_b
    return SchemePrediction(**common, compute_s=compute, comm_s=comm, exposed_comm_s=exposed, idle_s=0.0,
                            parameters=mem.parameters, gradients=mem.gradients, optimizer_state=mem.optimizer_state,
                            activations=sum(micro.activation_by_module.values()), sent_bytes=sent, gathered=gathered)


def _tensor(micro: M.StepCounts, curves, link, common: dict, w: int, steps: int, per_allreduce: float,
            precision: str) -> SchemePrediction:
    """Megatron-style tensor parallelism: the split layers' work and memory divided by ``w``, four
    all-reduces of one micro-batch's activations per block and micro-batch."""
    n = _n_params(micro)
    split_n = _n_params(micro, tensor_split)
    local_n = split_n / w + (n - split_n)
    mem = memory_per_rank(int(local_n), 1, "DDP", precision)
    fwd_bwd = [o for o in micro.ops if o.phase != "optimizer"]
    opt = [o for o in micro.ops if o.phase == "optimizer"]
    compute = (steps * _time(fwd_bwd, curves, w, lambda o: tensor_split(o.module))
               + _time(opt, curves, n / local_n, lambda o: True))  # every tensor, the split ones smaller
    n_allreduces = 4 * _n_blocks(micro) * steps  # two forward (attention, MLP), two backward, per block
    comm = n_allreduces * cost.ring_allreduce_time(per_allreduce, w, *link) if w > 1 else 0.0
    local_acts = sum(v / w if tensor_split(k) else v for k, v in micro.activation_by_module.items())
    return SchemePrediction(**common, compute_s=compute, comm_s=comm, exposed_comm_s=comm, idle_s=0.0,
                            parameters=mem.parameters, gradients=mem.gradients, optimizer_state=mem.optimizer_state,
                            activations=local_acts, sent_bytes=n_allreduces * 2 * (w - 1) / w * per_allreduce)


def _largest_block(counts: M.StepCounts) -> int:
    """fp32 bytes of the largest block (FSDP gathers it whole; with prefetch, two at once)."""
    per: dict[int, int] = {}
    for k, v in counts.param_bytes_by_module.items():
        if block_of(k) is not None:
            per[block_of(k)] = per.get(block_of(k), 0) + v
    return max(per.values(), default=0)


def _fsdp(micro: M.StepCounts, curves, link, w: int, precision: str, steps: int) -> tuple[float, float, float]:
    """FSDP's messages and how much of them the compute hides: ``(comm_s, exposed_s, sent_bytes)``.

    One stream of all-gathers and one of reduce-scatters beside the compute. Forward: block ``i``'s
    gather starts when block ``i - 1``'s gather is done and its compute has started (one unit ahead,
    FSDP2's default prefetch); block ``i``'s compute when its gather and the previous compute are done.
    Backward, blocks in reverse: gathered again, computed, their gradients reduce-scattered. The root
    (embeddings, head) is gathered once per step and reduce-scattered once. With accumulation
    (``steps`` micro-batches) every micro-batch gathers again."""
    alpha, beta = link
    param_b, grad_b, _ = PRECISIONS[precision]
    blocks = _n_blocks(micro)
    unit_n = [_n_params(micro, lambda k, i=i: block_of(k) == i) for i in range(blocks)]
    root_n = _n_params(micro) - sum(unit_n)
    gather = [cost.ring_all_gather_time(u * param_b, w, alpha, beta) for u in unit_n]
    scatter = [cost.ring_reduce_scatter_time(u * grad_b, w, alpha, beta) for u in unit_n]
    fwd = [sum(M.op_time(o, curves) for o in micro.ops if o.phase == "forward" and block_of(o.module) == i)
           for i in range(blocks)]
    bwd = [sum(M.op_time(o, curves) for o in micro.ops if o.phase == "backward" and block_of(o.module) == i)
           for i in range(blocks)]
    root_gather = cost.ring_all_gather_time(root_n * param_b, w, alpha, beta)
    root_scatter = cost.ring_reduce_scatter_time(root_n * grad_b, w, alpha, beta)

    def phase(order, compute, gathers, scatters):
        """What the compute of one pass over the blocks waits for: each block's gather starts when the
        previous gather is done and the previous block's compute has started (one unit ahead)."""
        order = list(order)
        gathered = started = done = scattered = 0.0
        for i in order:
            gathered = max(gathered, started) + gathers[i]
            started = max(done, gathered)
            done = started + compute[i]
            if scatters is not None:
                scattered = max(scattered, done) + scatters[i]
        return max(done, scattered) - sum(compute[i] for i in order)

    exposed = root_gather + root_scatter + steps * (
        phase(range(blocks), fwd, gather, None) + phase(reversed(range(blocks)), bwd, gather, scatter))
    comm = root_gather + root_scatter + steps * (2 * sum(gather) + sum(scatter))
    sent = (w - 1) / w * (root_n * (param_b + grad_b) + steps * sum(unit_n) * (2 * param_b + grad_b))
    return comm, max(0.0, exposed), sent


def _stage_of_op(ops, stage_of_block: dict[int, int], w: int) -> list[int]:
    """Each op's pipeline stage: a block's ops its stage's; before the first block (embeddings)
    stage 0; after the last (head, loss) the last stage."""
    inside = [i for i, o in enumerate(ops) if block_of(o.module) is not None]
    first, last = (inside[0], inside[-1]) if inside else (len(ops), -1)
    out = []
    for i, o in enumerate(ops):
        if block_of(o.module) is not None:
            out.append(stage_of_block[block_of(o.module)])
        else:
            before = i < first if o.phase == "forward" else i > last
            out.append(0 if before else w - 1)
    return out


def _on_stage(k: str, s: int, w: int, stage_of_block: dict[int, int]) -> bool:
    """Whether module ``k`` lives on stage ``s``: a block on its stage; the head, final norm and loss
    on the last; the embeddings on the first."""
    i = block_of(k)
    if i is not None:
        return stage_of_block[i] == s
    return s == (w - 1 if (".head" in k or k == "Global" or ".final_ln" in k) else 0)


def _pipeline(micro: M.StepCounts, curves, link, common: dict, w: int, m: int, message_bytes: float,
              precision: str, schedule: str) -> SchemePrediction:
    """``w`` stages (:func:`course_lib.parallel.pipeline.stage_bounds` of the blocks), ``m`` micro-batches:
    each op of a stage takes its operations' time plus, if it sends, one message of ``message_bytes``
    (alpha-beta); the schedule is simulated; the stage with the most memory sets the memory."""
    if schedule not in pipe.SCHEDULES:
        raise ValueError(f"schedule={schedule!r}; choose one of {tuple(pipe.SCHEDULES)}")
    blocks = _n_blocks(micro)
    if blocks < w:
        raise ValueError(f"{blocks} blocks cannot fill {w} pipeline stages")
    stage_of_block = {i: s for s, (lo, hi) in enumerate(chunk_bounds(blocks, w)) for i in range(lo, hi)}
    t = {(s, k): 0.0 for s in range(w) for k in "FB"}
    for phase, kind in (("forward", "F"), ("backward", "B")):
        ops = [o for o in micro.ops if o.phase == phase]
        for o, s in zip(ops, _stage_of_op(ops, stage_of_block, w)):
            t[(s, kind)] += M.op_time(o, curves)

    message = (link[0] + message_bytes * link[1]) if w > 1 else 0.0
    sched = pipe.SCHEDULES[schedule](w, m)
    with_msgs = {(s, op.kind, op.mb): t[(s, op.kind)] + (message if (op.kind == "F" and s < w - 1) or
                                                         (op.kind == "B" and s > 0) else 0.0)
                 for s in range(w) for op in sched[s]}
    without = {k: t[(k[0], k[1])] for k in with_msgs}
    span = max(e.end for e in pipe.simulate(sched, durations=with_msgs))
    span_no_msgs = max(e.end for e in pipe.simulate(sched, durations=without))
    busiest = max(m * (t[(s, "F")] + t[(s, "B")]) for s in range(w))

    stage_n = [_n_params(micro, lambda k, s=s: _on_stage(k, s, w, stage_of_block)) for s in range(w)]
    opt_s = _time([o for o in micro.ops if o.phase == "optimizer"], curves) * max(stage_n) / _n_params(micro)
    held = pipe.peak_in_flight(sched)
    acts = [held[s] * sum(v for k, v in micro.activation_by_module.items() if _on_stage(k, s, w, stage_of_block))
            for s in range(w)]
    memory = [memory_per_rank(stage_n[s], 1, "DDP", precision).total + acts[s] for s in range(w)]
    top = max(range(w), key=lambda s: memory[s])
    mem = memory_per_rank(stage_n[top], 1, "DDP", precision)
    n_msgs = 2 * m if w > 2 else m  # a middle stage sends forward and backward; with 2 stages each sends one way
    return SchemePrediction(**common, compute_s=busiest + opt_s, comm_s=n_msgs * message,
                            exposed_comm_s=span - span_no_msgs, idle_s=span_no_msgs - busiest,
                            parameters=mem.parameters, gradients=mem.gradients, optimizer_state=mem.optimizer_state,
                            activations=acts[top], sent_bytes=n_msgs * message_bytes if w > 1 else 0.0)


def predict_all(a: M.StepCounts, b: M.StepCounts, curves, link, *, world_size: int, global_batch: int,
                micro_batch: int, values_per_sample: int, precision: str = "mixed", schemes=SCHEMES,
                schedule: str = "1F1B", op_overhead_s: float | None = None) -> list[SchemePrediction]:
    """:func:`predict` for each scheme in ``schemes`` (those the sizes allow: a pipeline needs a block per stage)."""
    out = []
    for scheme in schemes:
        if scheme == "pipeline" and _n_blocks(a) < world_size:
            continue
        out.append(predict(a, b, curves, link, scheme=scheme, world_size=world_size, global_batch=global_batch,
                           micro_batch=micro_batch, values_per_sample=values_per_sample, precision=precision,
                           schedule=schedule, op_overhead_s=op_overhead_s))
    return out


def predict_accumulated(a: M.StepCounts, b: M.StepCounts, curves, link, *, world_size: int, global_batch: int,
                        device_bytes: float, values_per_sample: int, precision: str = "mixed",
                        op_overhead_s: float | None = None) -> SchemePrediction | None:
    """DDP with gradient accumulation (lesson 07): each rank's ``global_batch / world_size`` samples in the
    fewest micro-batches (2, 4, ... of them, each a whole number of samples) whose step fits ``device_bytes``;
    if none fits, the smallest micro-batch (it does not fit either: DDP's state alone is too large). None when
    a rank has one sample (nothing to accumulate). Its step is lesson 09's DDP step in closed form:
    ``k (forward + backward at B / k) + optimizer + the all-reduce behind the last backward``."""
    per_rank = global_batch // world_size
    ks = [k for k in range(2, per_rank + 1) if per_rank % k == 0 and (k & (k - 1) == 0 or k == per_rank)]
    pred = None
    for k in ks:
        pred = predict(a, b, curves, link, scheme=ACCUMULATION, world_size=world_size, global_batch=global_batch,
                       micro_batch=per_rank // k, values_per_sample=values_per_sample, precision=precision,
                       op_overhead_s=op_overhead_s)
        if pred.memory_bytes <= device_bytes:
            break
    return pred


SAME_SPEED = 0.10  # steps this close are "as fast" to this model (lesson 09 asks 25 % of its median error on a CPU)


def fastest_that_fits(predictions: list[SchemePrediction], device_bytes: float,
                      same_speed: float = SAME_SPEED) -> SchemePrediction | None:
    """Among the predictions whose memory per rank fits ``device_bytes``, the simplest (first in
    :data:`SIMPLEST_FIRST`) whose step is within ``same_speed`` of the shortest; None if none fits."""
    fits = [p for p in predictions if p.memory_bytes <= device_bytes]
    if not fits:
        return None
    best = min(p.step_s for p in fits)
    return min((p for p in fits if p.step_s <= best * (1 + same_speed)), key=lambda p: SIMPLEST_FIRST.index(p.scheme))
