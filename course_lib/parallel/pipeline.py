"""Pipeline parallelism: consecutive layers on consecutive ranks, micro-batches in flight (lesson 10).

Rank ``s`` of ``p`` holds stage ``s`` (a run of layers). A micro-batch's activations go
forward ``s -> s + 1`` and its activation gradients come back ``s + 1 -> s``: only
neighbours talk, by ``send``/``recv``, no collective. With one batch in flight every rank
but one waits; cutting the batch into ``m`` micro-batches lets the stages work on different
ones at once. Two classic orders of work on each stage (a **schedule**):

* **GPipe** (Huang et al. 2019): all ``m`` forwards, then all ``m`` backwards. Each stage holds
  the activations of all ``m`` micro-batches until their backward;
* **1F1B** (PipeDream-Flush, Narayanan et al. 2019/2021): stage ``s`` runs ``p - s - 1``
  warm-up forwards, then alternates one forward and one backward, then drains the backwards.
  At most ``p - s`` micro-batches are held at once: less memory, the same idle time.

With forward time ``t_f`` and backward time ``t_b`` per micro-batch on every stage, both take
``(m + p - 1)(t_f + t_b)`` for ``m (t_f + t_b)`` of work per stage: the idle fraction, the
**bubble**, is ``(p - 1) / (m + p - 1)`` (:func:`bubble_fraction`).

Schedules are pure data (per stage, an ordered list of :class:`Op`), so tests check them,
:func:`simulate` times them with given ``t_f`` / ``t_b`` (or each op's own duration), lesson 10
draws them, and one executor (:func:`run_stage`) carries any of them out with ``send``/``recv``,
recording when each op computed. The formula assumes equal stages and free messages; a measured
run says how far each assumption held: replayed with its own op durations and no gaps
(:func:`replay`), it idles by what unequal ops explain, and the rest of its idle time went
between the ops (messages, a stage woken late, another process on the core). Gradients over the ``m``
micro-batches add up to the full batch's (each micro-batch's loss is its sum divided by the whole
batch's count), so the result equals one process. PyTorch's own: ``torch.distributed.pipelining``
(``PipelineStage`` with ``ScheduleGPipe`` / ``Schedule1F1B``; :func:`native_stage_gradients`). Measured with torch 2.13:
both run on gloo; ``Schedule1F1B`` refuses ``m < p`` ("must be greater than or equal to the
number of stages"); by default (``scale_grads=True``) it divides the summed gradients by ``m``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ..comm.collectives import chunk_bounds


@dataclass(frozen=True)
class Op:
    """One unit of work on a stage: the forward (``"F"``) or backward (``"B"``) of micro-batch ``mb``."""

    kind: str
    mb: int

    def __str__(self) -> str:
        return f"{self.kind}{self.mb}"


def _check(p: int, m: int) -> None:
    for name, v in (("p (stages)", p), ("m (micro-batches)", m)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")


def gpipe_schedule(p: int, m: int) -> list[list[Op]]:
    """Per stage: ``F0 .. F(m-1)``, then ``B0 .. B(m-1)``."""
    _check(p, m)
    return [[Op("F", i) for i in range(m)] + [Op("B", i) for i in range(m)] for _ in range(p)]


def one_f_one_b_schedule(p: int, m: int) -> list[list[Op]]:
    """Per stage ``s``: ``min(p - s - 1, m)`` warm-up forwards, then one forward and one backward
    in turn, then the remaining backwards."""
    _check(p, m)
    out = []
    for s in range(p):
        warmup = min(p - s - 1, m)
        ops = [Op("F", i) for i in range(warmup)]
        f, b = warmup, 0
        while f < m:
            ops += [Op("F", f), Op("B", b)]
            f, b = f + 1, b + 1
        ops += [Op("B", i) for i in range(b, m)]
        out.append(ops)
    return out


SCHEDULES = {"GPipe": gpipe_schedule, "1F1B": one_f_one_b_schedule}


def bubble_fraction(p: int, m: int) -> float:
    """The idle fraction of GPipe and 1F1B with equal stages: ``(p - 1) / (m + p - 1)``."""
    _check(p, m)
    return (p - 1) / (m + p - 1)


def check_schedule(schedule: list[list[Op]], m: int) -> None:
    """Raise unless each stage runs every micro-batch's forward and backward once, forward first."""
    for s, ops in enumerate(schedule):
        if sorted((o.kind, o.mb) for o in ops) != sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)]):
            raise ValueError(f"stage {s} does not run F and B of micro-batches 0..{m - 1} exactly once: "
                             f"{' '.join(map(str, ops))}")
        for i in range(m):
            if ops.index(Op("B", i)) < ops.index(Op("F", i)):
                raise ValueError(f"stage {s} runs B{i} before F{i}")


def peak_in_flight(schedule: list[list[Op]]) -> list[int]:
    """Per stage: the most micro-batches whose activations it holds at once (forward done,
    backward not yet): ``m`` for GPipe, ``p - s`` (at most ``m``) for 1F1B."""
    out = []
    for ops in schedule:
        held = peak = 0
        for o in ops:
            held += 1 if o.kind == "F" else -1
            peak = max(peak, held)
        out.append(peak)
    return out


@dataclass(frozen=True)
class Event:
    """When stage ``stage`` ran ``op`` (seconds), and on a CPU the CPU seconds its thread spent on it."""

    stage: int
    kind: str
    mb: int
    start: float
    end: float
    cpu: float | None = None


def simulate(schedule: list[list[Op]], t_forward: float = 1.0, t_backward: float = 2.0,
             durations: dict[tuple[int, str, int], float] | None = None) -> list[Event]:
    """The timeline of ``schedule`` when every forward takes ``t_forward`` and every backward
    ``t_backward`` (or each op ``durations[(stage, kind, mb)]``, when given), messages take no
    time, and each op starts as soon as its stage is free and its input has arrived (``F`` after
    the previous stage's ``F``, ``B`` after the next stage's ``B`` and its own ``F``). Raises
    ``ValueError`` when the stages wait for each other in a cycle."""
    p = len(schedule)
    done: dict[tuple[int, str, int], float] = {}
    pos, free = [0] * p, [0.0] * p
    events: list[Event] = []
    while any(pos[s] < len(schedule[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            if pos[s] >= len(schedule[s]):
                continue
            op = schedule[s][pos[s]]
            # F waits for the previous stage's F; B for the next stage's B and its own F
            deps = [(s - 1, "F", op.mb)] if op.kind == "F" else [(s + 1, "B", op.mb), (s, "F", op.mb)]
            deps = [d for d in deps if 0 <= d[0] < p]
            if any(d not in done for d in deps):
                continue
            start = max([free[s]] + [done[d] for d in deps])
            if durations is not None:
                end = start + durations[(s, op.kind, op.mb)]
            else:
                end = start + (t_forward if op.kind == "F" else t_backward)
            done[(s, op.kind, op.mb)] = free[s] = end
            events.append(Event(s, op.kind, op.mb, start, end))
            pos[s] += 1
            progressed = True
        if not progressed:
            raise ValueError("the schedule deadlocks: every stage waits for an op another stage has not run")
    return sorted(events, key=lambda e: (e.stage, e.start))


def replay(schedule: list[list[Op]], events: list[Event]) -> list[Event]:
    """``events`` (a measured run of ``schedule``) replayed with each op's own measured duration
    and no time between ops but what the schedule's order forces: the bubble that unequal op
    times alone explain. What the measured run idles beyond that went to messages and waits."""
    return simulate(schedule, durations={(e.stage, e.kind, e.mb): e.end - e.start for e in events})


def idle_fraction(events: list[Event]) -> float:
    """The measured bubble: mean over stages of ``1 - busy / makespan`` (makespan: first start
    to last end over all stages)."""
    if not events:
        return 0.0
    t0, t1 = min(e.start for e in events), max(e.end for e in events)
    stages = sorted({e.stage for e in events})
    busy = [sum(e.end - e.start for e in events if e.stage == s) for s in stages]
    return sum(1 - b / (t1 - t0) for b in busy) / len(stages)


def cpu_share(events: list[Event]) -> float | None:
    """CPU seconds over wall seconds of the ops (on a CPU; None on a GPU, where events carry no ``cpu``, or with no
    time timed): below 1, the stages were not computing all the time they were timed (another process had their
    core)."""
    wall = sum(e.end - e.start for e in events)
    cpu = [e.cpu for e in events]
    return sum(cpu) / wall if None not in cpu and wall > 0 else None


# --------------------------------------------------------------------------- the model and its stages


def mlp_stack(width: int = 256, depth: int = 8, seed: int = 0) -> nn.Sequential:
    """``depth`` blocks of ``Linear(width, width) + Tanh``: layers of equal cost, so equal stages."""
    torch.manual_seed(seed)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)])


def stage_bounds(n_layers: int, p: int) -> list[tuple[int, int]]:
    """Which layers ``[lo, hi)`` each of ``p`` stages holds (equal counts, the first ones longer)."""
    if n_layers < p:
        raise ValueError(f"{n_layers} layers cannot fill {p} stages")
    return chunk_bounds(n_layers, p)


def stage_of(model: nn.Sequential, stage: int, p: int) -> nn.Sequential:
    """Stage ``stage`` of ``p``: its run of ``model``'s layers (the same modules, not copies)."""
    lo, hi = stage_bounds(len(model), p)[stage]
    return model[lo:hi]


def _loss_sum(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).sum()


def _sync(device: torch.device) -> None:
    """Wait for this device's queued work before reading the host clock (nothing to wait for on a CPU)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def _tag(kind: str, mb: int) -> int:
    """The message tag of micro-batch ``mb``'s activation (``F``) or activation gradient (``B``)."""
    return 2 * mb + (kind == "B")


def _post_receive(shape: tuple[int, ...], device, src: int, group, tag: int) -> tuple[torch.Tensor, object]:
    """A buffer and the receive into it from global rank ``src``, posted now."""
    buf = torch.empty(shape, device=device)
    return buf, dist.irecv(buf, src, group, tag=tag)


def _compute_op(op: Op, s: int, p: int, buf, held: dict, module: nn.Module, weights, inputs, targets, loss_sum,
                count: int):
    """Stage ``s`` of ``p`` computes ``op`` (its input ``buf`` received): a forward keeps its input and output
    in ``held`` for the backward; returns ``(what to send, to which stage, the output)`` (nothing to send at
    the ends of the pipeline)."""
    i = op.mb
    if op.kind == "F":
        x = inputs[i] if s == 0 else buf.requires_grad_()  # stage 0's inputs need no gradient
        y = module(x) if weights is None else weights.forward(i, x)
        if s == p - 1:
            y = loss_sum(y, targets[i]) / count
        out, dst = (y.detach().contiguous(), s + 1) if s < p - 1 else (None, None)
        held[i] = (x, y)
        return out, dst, y
    x, y = held.pop(i)
    if s == p - 1:
        y.backward()
    else:
        y.backward(buf)
    out, dst = (x.grad.contiguous(), s - 1) if s > 0 else (None, None)
    if weights is not None:
        weights.after_backward(i)
    return out, dst, y


def run_stage(module: nn.Module, schedule: list[list[Op]], inputs: list[torch.Tensor] | None,
              targets: list[torch.Tensor] | None, count: int, shape: tuple[int, ...],
              device: torch.device | None = None, loss_sum=None, weights=None,
              group=None) -> tuple[list[Event], float]:
    """Carry out this rank's part of ``schedule`` with ``send``/``recv``; return its events and loss.

    Rank ``s`` of the group is stage ``s``. Stage 0 gets the ``m`` micro-batches in ``inputs``,
    the last stage the ``targets``; each micro-batch's loss is ``loss_sum(output, target)`` (default:
    the squared error summed over elements) divided by ``count`` (the whole batch's count), so the
    gradients add up to the full batch's mean. Every activation and its gradient has ``shape``
    (stages map width to width) and lives on ``device`` (default: ``course_lib.dist.device()``).

    An event is one op's **compute**: from the moment its input is here (its message received)
    to the moment its output is computed. Everything else is idle, the bubble: waiting for a
    message, and posting one. Times are ``time.monotonic()``, one clock for every process of a
    host (``launch`` starts its ranks on one host), so the ranks' events line up without an
    offset; on a CPU each event also carries the thread's CPU seconds (``cpu``), which say
    whether the stage had a core to itself while it computed.

    Messages between neighbours: see :class:`_StageMail`.

    ``weights`` (asynchronous pipelines, :mod:`course_lib.parallel.async_pipeline`): an object that
    computes each forward (``weights.forward(mb, x)`` instead of ``module(x)``, with the weights it
    chooses), is told each micro-batch's loss on the last stage (``weights.record_loss(mb, loss)``)
    and updates the stage after each backward (``weights.after_backward(mb)``, timed with it).
    ``group``: run on the ranks of this process group (stage ``s`` is its rank ``s``); the others skip.
    """
    from .. import dist as cdist

    s, p = dist.get_rank(group), dist.get_world_size(group)
    if len(schedule) != p:
        raise ValueError(f"a schedule for {len(schedule)} stages on {p} ranks")
    if (s == 0 and inputs is None) or (s == p - 1 and targets is None):
        raise ValueError("stage 0 needs the micro-batches (inputs), the last stage their targets")
    device = device or cdist.device()
    loss_sum = loss_sum or _loss_sum
    on_cpu = device.type == "cpu"
    ops = schedule[s]
    mail = _StageMail(s, p, shape, device, group)
    held: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    events, loss_total = [], 0.0
    dist.barrier(group)
    mail.post_receives(ops)
    for op in ops:
        buf = mail.receive(op)
        start, cpu0 = time.monotonic(), time.thread_time()
        out, dst, y = _compute_op(op, s, p, buf, held, module, weights, inputs, targets, loss_sum, count)
        _sync(device)
        end, cpu1 = time.monotonic(), time.thread_time()
        if op.kind == "F" and s == p - 1:
            loss_total += float(y)
            if weights is not None:
                weights.record_loss(op.mb, float(y))
        if out is not None:
            mail.send(op, out, dst)
        events.append(Event(s, op.kind, op.mb, start, end, cpu1 - cpu0 if on_cpu else None))
    mail.finish()
    if len(held):
        raise RuntimeError(f"stage {s}: micro-batches {sorted(held)} never ran their backward")
    return events, loss_total


class _StageMail:
    """One stage's messages to and from its neighbours in :func:`run_stage`.

    gloo moves a message only once both sides have posted it, and the bytes move on its
    background thread. A receive posted only when the op needs it made the sender's thread do
    that work while the sender was busy computing the next micro-batch (measured: GPipe's
    forwards waited milliseconds for activations sent long before). So on gloo every receive
    this stage will need is posted before it starts, tagged by micro-batch and direction, and
    sends go out as soon as their tensor is computed. On NCCL the messages between two ranks run
    in order on one stream: a receive posted early would hold up the sends behind it (1F1B
    would deadlock), so each receive is posted when its op comes, grouped with the sends of the
    op before (``batch_isend_irecv``, as Megatron-LM does; an op that receives nothing posts those
    sends alone); the wait for the input then covers the sends grouped with it.
    """

    def __init__(self, s: int, p: int, shape: tuple[int, ...], device: torch.device, group):
        self.s, self.p, self.shape, self.device, self.group = s, p, shape, device, group
        self.early = dist.get_backend() != "nccl"
        self.posted: dict = {}
        self.works, self.outbox = [], []

    def peer(self, r: int) -> int:
        """Group rank -> global rank."""
        return r if self.group is None else dist.get_global_rank(self.group, r)

    def source(self, op: Op) -> int | None:
        """The neighbour whose message this op waits for, if any."""
        if op.kind == "F":
            return self.s - 1 if self.s > 0 else None
        return self.s + 1 if self.s < self.p - 1 else None

    def post_receives(self, ops: list[Op]) -> None:
        """gloo: every receive this stage will need, posted before it starts."""
        self.posted = {(op.kind, op.mb): _post_receive(self.shape, self.device, self.peer(self.source(op)),
                                                       self.group, _tag(op.kind, op.mb))
                       for op in ops if self.early and self.source(op) is not None}

    def receive(self, op: Op) -> torch.Tensor | None:
        """Wait for ``op``'s input from its neighbour (None when it has none)."""
        src = self.source(op)
        if src is None:
            if self.outbox:  # NCCL, nothing to receive: the queued sends go now
                self.works += dist.batch_isend_irecv(self.outbox)
                self.outbox = []
            return None
        if self.early:
            buf, work = self.posted.pop((op.kind, op.mb))
            work.wait()
        else:  # NCCL (no tags: messages match in order): this receive and the sends queued since the last
            buf = torch.empty(self.shape, device=self.device)
            for work in dist.batch_isend_irecv(self.outbox + [dist.P2POp(dist.irecv, buf, self.peer(src),
                                                                         self.group)]):
                work.wait()
            self.outbox = []
        _sync(self.device)
        return buf

    def send(self, op: Op, out: torch.Tensor, dst: int) -> None:
        """Send ``op``'s output to ``dst``: at once on gloo, queued for the next group on NCCL."""
        if self.early:
            self.works.append(dist.isend(out, self.peer(dst), self.group, tag=_tag(op.kind, op.mb)))
        else:
            self.outbox.append(dist.P2POp(dist.isend, out, self.peer(dst), self.group))

    def finish(self) -> None:
        """Send what is still queued and wait for every send to complete."""
        if self.outbox:
            self.works += dist.batch_isend_irecv(self.outbox)
        for work in self.works:
            work.wait()


def micro_batches(x: torch.Tensor, m: int) -> list[torch.Tensor]:
    """``x`` cut into ``m`` micro-batches along the batch dimension (equal sizes required)."""
    if x.shape[0] % m:
        raise ValueError(f"a batch of {x.shape[0]} does not split into {m} equal micro-batches")
    return list(x.chunk(m))


def full_gradients(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> list[torch.Tensor]:
    """One process's gradients of the mean squared error over the whole batch (the reference)."""
    model.zero_grad()
    (_loss_sum(model(x), target) / target.numel()).backward()
    return [p.grad.clone() for p in model.parameters()]


def native_stage_gradients(module: nn.Module, schedule: str, x: torch.Tensor | None, target: torch.Tensor | None,
                           m: int) -> tuple[list[torch.Tensor], float]:
    """The same pipeline with ``torch.distributed.pipelining``: this rank's stage gradients
    (``PipelineStage`` + ``ScheduleGPipe`` or ``Schedule1F1B``) and, on the last stage, the loss.

    Its loss function is the micro-batch *mean*; the schedule divides the sum of the ``m``
    micro-batches' gradients by ``m`` (``scale_grads=True``): with equal micro-batches that is
    the full batch's mean."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    s, p = dist.get_rank(), dist.get_world_size()
    module.zero_grad()
    stage = PipelineStage(module, s, p, next(module.parameters()).device)
    cls = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[schedule]
    sched = cls(stage, n_microbatches=m, loss_fn=lambda out, t: ((out - t) ** 2).mean())
    losses: list = []
    last = {"target": target, "losses": losses} if s == p - 1 else {}  # (one stage: the first is the last)
    if s == 0:
        sched.step(x, **last)
    else:
        sched.step(**last)
    loss = float(sum(losses) / len(losses)) if losses else 0.0
    return [p.grad.clone() for p in module.parameters()], loss


def pipeline_worker(rank: int, world_size: int, spec: dict) -> dict:
    """Worker: for each schedule and each ``m`` in ``spec``, run the hand-built pipeline
    (``spec["repeats"]`` timed runs after one warm-up), compare this stage's gradients with one
    process's and, where PyTorch allows it, with ``torch.distributed.pipelining``'s.

    ``spec``: ``width``, ``depth``, ``batch``, ``ms``, ``schedules``, ``repeats``, ``native`` (bool).
    Everything lives on ``course_lib.dist.device()`` (this rank's GPU under NCCL); the weights and
    the batch are drawn on the CPU first, so every rank and every tier starts from the same numbers."""
    from .. import dist as cdist

    device = cdist.device()
    model = mlp_stack(spec["width"], spec["depth"], seed=0).to(device)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(spec["batch"], spec["width"], generator=g).to(device)
    target = torch.randn(spec["batch"], spec["width"], generator=g).to(device)
    stage = stage_of(model, rank, world_size)
    lo, hi = stage_bounds(len(model), world_size)[rank]
    n_before = sum(1 for layer in model[:lo] for _ in layer.parameters())
    reference = full_gradients(model, x, target)[n_before:n_before + len(list(stage.parameters()))]
    rows = []
    for name in spec["schedules"]:
        for m in spec["ms"]:
            sched = SCHEDULES[name](world_size, m)
            xs, ts = micro_batches(x, m), micro_batches(target, m)
            runs = []
            for rep in range(spec["repeats"] + 1):  # the first run warms up (allocations, first messages)
                stage.zero_grad()
                events, loss = run_stage(stage, sched, xs, ts, target.numel(), xs[0].shape, device)
                if rep:
                    runs.append(events)
            grad_diff = max(float((p.grad - r).abs().max()) for p, r in zip(stage.parameters(), reference))
            row = {"schedule": name, "m": m, "p": world_size, "rank": rank, "runs": runs, "grad_diff": grad_diff,
                   "loss": loss}
            if spec.get("native") and not (name == "1F1B" and m < world_size):
                grads, native_loss = native_stage_gradients(stage, name, x if rank == 0 else None,
                                                            target if rank == world_size - 1 else None, m)
                row["native_grad_diff"] = max(float((a - r).abs().max()) for a, r in zip(grads, reference))
                row["native_loss"] = native_loss
            rows.append(row)
    return {"rank": rank, "rows": rows, "stage_layers": (lo, hi), "device": str(device)}


def pipeline_depths_worker(rank: int, world_size: int, spec: dict) -> dict:
    """Worker: :func:`pipeline_worker`'s runs (our executor; no ``torch.distributed.pipelining``) at each
    depth ``p`` in ``spec["ps"]``, on ranks ``0 .. p - 1`` of the launch (the others wait): lesson 10's
    pipeline at more stages than its main launch has ranks. Every stage holds its share of the same stack
    (``spec["depth"]`` layers, divisible enough for every ``p``), on the CPU over gloo.

    ``spec``: ``width``, ``depth``, ``batch``, ``ms``, ``schedules``, ``repeats``, ``ps``. Returns this rank's
    rows, one per depth, schedule and ``m`` (with ``p``); :func:`depth_bubbles` reads them."""
    if max(spec["ps"]) > world_size:
        raise ValueError(f"depths {spec['ps']} need {max(spec['ps'])} ranks; the launch has {world_size}")
    device = torch.device("cpu")
    model = mlp_stack(spec["width"], spec["depth"], seed=0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(spec["batch"], spec["width"], generator=g)
    target = torch.randn(spec["batch"], spec["width"], generator=g)
    full = full_gradients(model, x, target)
    rows = []
    for p in spec["ps"]:
        group = dist.new_group(list(range(p)))  # every rank takes part in creating it
        if rank >= p:
            continue
        stage = stage_of(model, rank, p)
        lo, hi = stage_bounds(len(model), p)[rank]
        n_before = sum(1 for layer in model[:lo] for _ in layer.parameters())
        reference = full[n_before:n_before + len(list(stage.parameters()))]
        for name in spec["schedules"]:
            for m in spec["ms"]:
                sched = SCHEDULES[name](p, m)
                xs, ts = micro_batches(x, m), micro_batches(target, m)
                runs = []
                for rep in range(spec["repeats"] + 1):  # the first run warms up
                    stage.zero_grad()
                    events, loss = run_stage(stage, sched, xs, ts, target.numel(), xs[0].shape, device, group=group)
                    if rep:
                        runs.append(events)
                grad_diff = max(float((q.grad - r).abs().max()) for q, r in zip(stage.parameters(), reference))
                rows.append({"schedule": name, "m": m, "p": p, "rank": rank, "runs": runs, "grad_diff": grad_diff,
                             "loss": loss})
    dist.barrier()
    return {"rank": rank, "rows": rows}


def depth_bubbles(per_rank: list[dict]) -> list[dict]:
    """:func:`measured_bubbles` of :func:`pipeline_depths_worker`'s runs, depth by depth (each depth's
    rows come from its own ranks only)."""
    out = []
    for p in sorted({r["p"] for pr in per_rank for r in pr["rows"]}):
        out += measured_bubbles([{"rows": [r for r in pr["rows"] if r["p"] == p]} for pr in per_rank[:p]])
    return out


# --------------------------------------------------------------------------- the same pipeline over BERT's encoder


class BertStage(nn.Module):
    """Stage ``stage`` of ``p`` of a :class:`~course_lib.models.bert.BertForMLM`: its run of blocks
    (:func:`stage_bounds`), the first stage also the embeddings, the last the final LayerNorm and the
    MLM head (logits of every position). Every stage passes hidden states ``(B, T, C)``. The head's
    decoder is tied to the token embedding: with ``p > 1`` the first and the last stage each hold that
    matrix and each computes part of its gradient (:func:`tied_gradients` adds them up)."""

    def __init__(self, model: nn.Module, stage: int, p: int):
        super().__init__()
        lo, hi = stage_bounds(len(model.blocks), p)[stage]
        self.first, self.last = stage == 0, stage == p - 1
        self.blocks = nn.ModuleList(model.blocks[lo:hi])  # the same modules, not copies
        if self.first:  # the embeddings' modules (their parameters are this stage's); the lookup is model.embed
            self.embeddings = nn.ModuleList(m for m in (model.tok_emb, model.pos_emb, model.seg_emb, model.emb_ln)
                                            if m is not None)
            self._embed = model.embed
        if self.last:
            self.final_ln, self.head = model.final_ln, model.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self._embed(x) if self.first else x  # (B, T, C)
        for block in self.blocks:
            h = block(h)
        if self.last:
            h = self.final_ln(h) if self.final_ln is not None else h
            return self.head(h)  # (B, T, V)
        return h


def _mlm_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy summed over the scored positions (label -100: not scored)."""
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100,
                                       reduction="sum")


def tied_gradients(model: nn.Module, group=None) -> None:
    """Add up the tied embedding's gradient over the stages (Megatron's "embedding group": the first
    stage's part from the lookup, the last stage's from the decoder); stages without it add zeros."""
    w = model.tok_emb.weight
    if w.grad is None:
        w.grad = torch.zeros_like(w)
    dist.all_reduce(w.grad, group=group)


def bert_pipeline_worker(rank: int, world_size: int, spec: dict) -> dict:
    """Worker: the executor of this module over BERT's encoder (``spec``: ``preset``, ``vocab_size``,
    ``seq_len``, ``batch``, ``ms``, ``schedules``, optional ``num_layers``), against one process's
    masked-LM gradients on the whole batch: per schedule and ``m``, the largest difference of this
    stage's gradients, relative to the largest gradient (the tied embedding added up first)."""
    from .. import dist as cdist
    from ..models.bert import build_bert

    device = cdist.device()
    torch.manual_seed(0)
    overrides = {"num_layers": spec["num_layers"]} if spec.get("num_layers") else {}
    model = build_bert(spec["preset"], vocab_size=spec["vocab_size"], max_position=spec["seq_len"], dropout=0.0,
                       attention_dropout=0.0, **overrides).to(device)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, spec["vocab_size"], (spec["batch"], spec["seq_len"]), generator=g)
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.15, ids, torch.full_like(ids, -100))
    labels[:, 0] = ids[:, 0]  # every sequence scores at least one position
    ids, labels = ids.to(device), labels.to(device)
    count = int((labels != -100).sum())
    model.zero_grad()
    (model(ids, labels) * count / count).backward()  # the mean over the scored positions: the reference
    stage = BertStage(model, rank, world_size)
    reference = {id(p_): p_.grad.clone() for p_ in stage.parameters()}
    shape_of = (spec["seq_len"], model.cfg.hidden_size)
    rows = []
    for name in spec["schedules"]:
        for m in spec["ms"]:
            model.zero_grad(set_to_none=True)
            xs, ts = micro_batches(ids, m), micro_batches(labels, m)
            run_stage(stage, SCHEDULES[name](world_size, m), xs, ts, count, (xs[0].shape[0], *shape_of), device,
                      loss_sum=_mlm_loss_sum)
            if world_size > 1 and spec.get("tied", True):  # tied=False: the check without it (it must fail)
                tied_gradients(model)
            scale = max(float(r.abs().max()) for r in reference.values())
            diff = max(float(((p_.grad if p_.grad is not None else torch.zeros_like(p_)) - reference[id(p_)])
                             .abs().max()) for p_ in stage.parameters()) / scale
            rows.append({"schedule": name, "m": m, "grad_diff": diff})
    lo, hi = stage_bounds(len(model.blocks), world_size)[rank]
    return {"rank": rank, "rows": rows, "blocks": (lo, hi), "first": stage.first, "last": stage.last,
            "parameters": sum(p_.numel() for p_ in stage.parameters())}


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def measured_bubbles(per_rank: list[dict]) -> list[dict]:
    """One row per schedule and ``m``, the ranks' events merged run by run (medians over the runs):

    * ``predicted``: ``(p-1)/(m+p-1)``; ``measured``: the idle fraction of the runs;
    * ``replayed``: the idle fraction of the same runs replayed with each op's measured duration and
      no time between ops (:func:`replay`): ``replayed - predicted`` is what unequal op times
      explain, ``measured - replayed`` what went to messages and waits;
    * ``forward_ms`` / ``backward_ms``: the mean compute of one micro-batch on one stage;
    * ``cpu_share``: CPU seconds over wall seconds of the ops (on a CPU; None on a GPU): below 1, the
      stages were not computing all the time they were timed (another process had their core);
    * ``grad_diff`` / ``native_grad_diff``: the largest gradient difference from one process's."""
    out = []
    for row0 in per_rank[0]["rows"]:
        key = (row0["schedule"], row0["m"])
        rows = [next(r for r in pr["rows"] if (r["schedule"], r["m"]) == key) for pr in per_rank]
        p, m = row0["p"], key[1]
        sched = SCHEDULES[key[0]](p, m)
        runs = [[e for r in rows for e in r["runs"][k]] for k in range(len(row0["runs"]))]
        ops = [e for run in runs for e in run]
        forward = [e.end - e.start for e in ops if e.kind == "F"]
        backward = [e.end - e.start for e in ops if e.kind == "B"]
        out.append({"schedule": key[0], "p": p, "m": m, "predicted": bubble_fraction(p, m),
                    "measured": _median([idle_fraction(run) for run in runs]),
                    "replayed": _median([idle_fraction(replay(sched, run)) for run in runs]),
                    "forward_ms": 1e3 * sum(forward) / len(forward), "backward_ms": 1e3 * sum(backward) / len(backward),
                    "cpu_share": cpu_share(ops),
                    "runs": len(runs), "grad_diff": max(r["grad_diff"] for r in rows),
                    "native_grad_diff": max((r["native_grad_diff"] for r in rows if "native_grad_diff" in r),
                                            default=None)})
    return out


def timeline(per_rank: list[dict], schedule: str, m: int, run: int = 0) -> list[Event]:
    """The events of one measured run, all ranks, times from the earliest start."""
    events = [e for pr in per_rank for r in pr["rows"] if (r["schedule"], r["m"]) == (schedule, m)
              for e in r["runs"][run]]
    t0 = min(e.start for e in events)
    return [Event(e.stage, e.kind, e.mb, e.start - t0, e.end - t0, e.cpu) for e in events]
