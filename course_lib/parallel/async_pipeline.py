"""Asynchronous pipelines: PipeDream's one-forward-one-backward without flushes, and stale weights (lesson 10).

GPipe and 1F1B (:mod:`course_lib.parallel.pipeline`) **flush**: every batch's ``m`` micro-batches
drain out of the pipeline before the weights change, so each pays the bubble
``(p - 1) / (m + p - 1)`` again, and every gradient is the gradient at one set of weights.
PipeDream (Narayanan et al. 2019, *PipeDream: Generalized Pipeline Parallelism for DNN
Training*, SOSP) never flushes: the 1F1B order runs over the whole stream of ``n`` micro-batches
of a training run, and each stage **updates its weights after every backward** (each micro-batch
is a step of SGD). The pipeline fills once (``p - 1`` slots) and then no stage ever waits: the
bubble of the whole run is ``(p - 1) / (n + p - 1)``, zero in the steady state.

The price is **staleness** (the seed talk on scaling, seed 002: "you have the gradient of batch
zero, but you already fed batch five ... the deeper your pipeline is the more problematic it
becomes"). Stage ``s`` of ``p`` runs ``p - s - 1`` forwards ahead of its backwards, so when
micro-batch ``i`` comes forward, stage ``s`` has applied the updates of micro-batches
``0 .. i - (p - s) `` only: its forward uses weights ``p - s - 1`` updates older than the ones
its gradient will be applied to. Two ways to take the backward (:class:`StageWeights`):

* **weight stashing** (PipeDream's): the stage keeps the version each in-flight micro-batch's
  forward used and takes its backward at that same version: a correct gradient of a stale model,
  ``W_s <- W_s - lr * grad_s f(W_0^(i - p + 1), ..., W_s^(i - p + s + 1), ..., W_(p-1)^(i))``
  (the paper's equation, section 3.3). Up to ``p - s`` versions held at once on stage ``s``;
* **no stashing**: the backward takes the weights the stage holds *now* (version ``i``) with the
  activation its forward computed at an older one: the gradient of no model at all. The difference
  grows with the staleness, so with depth.

The stage runs through the course's one executor (:func:`~course_lib.parallel.pipeline.run_stage`
with ``weights=``): the order is :func:`pipedream_schedule` (1F1B over the whole run), and
:class:`StageWeights` computes each forward and applies each update. :func:`sequential_replay`
is the reference: the same stale updates replayed in one process, stage by stage and micro-batch by
micro-batch, with the versions read from the schedule (:func:`weight_versions`), so the pipeline
must equal it to float rounding. Both take the backward by **recomputing** the stage's forward at
the chosen version from the stage's saved input (the result is the same as keeping the forward's
graph; recomputing is what lets "no stashing" use newer weights than the forward did).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn
from torch.func import functional_call

from .pipeline import Event, Op, idle_fraction, mlp_stack, one_f_one_b_schedule, run_stage, stage_bounds, stage_of

MODES = ("stashed", "not stashed")


def pipedream_schedule(p: int, n: int) -> list[list[Op]]:
    """PipeDream's order for a run of ``n`` micro-batches: 1F1B (``p - s - 1`` warm-up forwards, then
    one forward and one backward in turn) over the whole run, never flushed. The order is 1F1B's; what
    makes it asynchronous is the update after every backward (:class:`StageWeights`)."""
    return one_f_one_b_schedule(p, n)


def weight_versions(schedule: list[list[Op]]) -> tuple[list[list[int]], list[list[int]]]:
    """Per stage and micro-batch, the version of the stage's weights (how many updates it has applied,
    one per backward) that the forward saw, and that the backward finds: read from the order of ops,
    not from a formula. For 1F1B over ``n`` micro-batches, stage ``s``'s forward of ``i`` sees
    ``max(0, i - (p - s - 1))`` and its backward finds ``i``."""
    fwd, bwd = [], []
    for ops in schedule:
        n = sum(o.kind == "F" for o in ops)
        f, b, done = [0] * n, [0] * n, 0
        for o in ops:
            if o.kind == "F":
                f[o.mb] = done
            else:
                b[o.mb] = done
                done += 1
        fwd.append(f)
        bwd.append(b)
    return fwd, bwd


def staleness(schedule: list[list[Op]]) -> list[int]:
    """Per stage: the most updates between the weights a forward used and the ones its gradient is
    applied to (``p - s - 1`` for :func:`pipedream_schedule`: the first stage the stalest, the last none)."""
    fwd, bwd = weight_versions(schedule)
    return [max(b - f for f, b in zip(fs, bs)) for fs, bs in zip(fwd, bwd)]


def steady_idle_fraction(events: list[Event]) -> float:
    """The idle fraction inside the steady state: from the first backward of the first stage
    (every stage has started by then) to the first stage's last forward (after it the stages only
    drain). Zero for :func:`pipedream_schedule` with equal stages and free messages."""
    p = 1 + max(e.stage for e in events)
    t0 = min(e.start for e in events if e.stage == 0 and e.kind == "B")
    t1 = max(e.end for e in events if e.stage == 0 and e.kind == "F")
    window = [Event(e.stage, e.kind, e.mb, max(e.start, t0), min(e.end, t1)) for e in events
              if e.end > t0 and e.start < t1]
    # every stage's busy time inside [t0, t1], over t1 - t0 (idle_fraction's makespan is the window's)
    edges = [Event(s, "F", -1, t0, t0) for s in range(p)] + [Event(s, "F", -1, t1, t1) for s in range(p)]
    return idle_fraction(window + edges)


class _Recompute(torch.autograd.Function):
    """The stage's forward without a graph; its backward recomputes it at the weights
    ``weights.backward_params(mb)`` chooses and returns the input's gradient (the weights' gradients
    go to ``weights``). ``anchor`` (a tensor that requires grad) makes the output need a gradient on
    the first stage, whose input does not."""

    @staticmethod
    def forward(ctx, x, anchor, weights, mb):
        ctx.save_for_backward(x)
        ctx.weights, ctx.mb, ctx.x_grad = weights, mb, x.requires_grad
        with torch.no_grad():
            return weights.call(weights.forward_params(mb), x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        w = ctx.weights
        with torch.enable_grad():
            xd = x.detach().requires_grad_(ctx.x_grad)
            params = [t.detach().requires_grad_() for t in w.backward_params(ctx.mb)]
            out = w.call(params, xd)
            grads = torch.autograd.grad(out, params + ([xd] if ctx.x_grad else []), grad_out)
        w.grads[ctx.mb] = list(grads[:len(params)])
        return (grads[-1] if ctx.x_grad else None), None, None, None


class StageWeights:
    """One stage's weights in an asynchronous pipeline: the versions it holds, each forward at the
    current version, each backward at the stashed one (``stash=True``) or at the current one, SGD with
    ``lr`` after every backward. Passed to ``run_stage(..., weights=)``.

    Records: ``versions[mb] = (forward's version, the version its backward took the gradient at, the version
    the update is applied to)`` (the backward's version is the one it used, not the one current when it
    ended), ``held``: after every op the number of distinct versions the stage holds (the current and the
    stashed ones), ``losses`` (last stage: each micro-batch's loss, in order)."""

    def __init__(self, module: nn.Module, lr: float, stash: bool):
        self.module, self.lr, self.stash = module, lr, stash
        self.names = [n for n, _ in module.named_parameters()]
        self.current = [p.detach().clone() for _, p in module.named_parameters()]
        self.version = 0
        self.stashed: dict[int, tuple[int, list[torch.Tensor]]] = {}  # mb -> (version, its weights)
        self.grads: dict[int, list[torch.Tensor]] = {}
        self.versions: dict[int, tuple[int, int, int]] = {}
        self.held: list[int] = []
        self.losses: list[float] = []
        self._anchor = torch.zeros((), requires_grad=True)

    def call(self, params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, dict(zip(self.names, params)), (x,))

    def forward_params(self, mb: int) -> list[torch.Tensor]:
        return self.stashed[mb][1]

    def backward_params(self, mb: int) -> list[torch.Tensor]:
        return self.stashed[mb][1] if self.stash else self.current

    def forward(self, mb: int, x: torch.Tensor) -> torch.Tensor:
        # the current version, kept for this micro-batch's backward (stashing) or for the record only
        self.stashed[mb] = (self.version, self.current if not self.stash else [t.clone() for t in self.current])
        y = _Recompute.apply(x, self._anchor, self, mb)
        if not self.stash:  # nothing kept: the forward's weights are the current ones, which will move on
            self.stashed[mb] = (self.version, None)
        self._count_held()
        return y

    def record_loss(self, mb: int, loss: float) -> None:
        self.losses.append(loss)

    def after_backward(self, mb: int) -> None:
        v_forward, _ = self.stashed.pop(mb)
        # the backward took its gradient at the stashed (forward's) version, or at the current one; the update lands
        # on the current one either way
        self.versions[mb] = (v_forward, v_forward if self.stash else self.version, self.version)
        with torch.no_grad():
            self.current = [w - self.lr * g for w, g in zip(self.current, self.grads.pop(mb))]
        self.version += 1
        self._count_held()

    def _count_held(self) -> None:
        stashed = {v for v, w in self.stashed.values() if w is not None and v != self.version}
        self.held.append(1 + len(stashed))

    def load_into(self, module: nn.Module) -> None:
        """Copy the current version into ``module``'s parameters."""
        with torch.no_grad():
            for p, w in zip(module.parameters(), self.current):
                p.copy_(w)


def _problem(spec: dict):
    """The learning problem: a student MLP stack (:func:`~course_lib.parallel.pipeline.mlp_stack`, seed 0)
    learns ``tanh(x A)`` (``A`` Gaussian, of variance ``4 / width``: targets of order one) on Gaussian
    inputs; ``n`` micro-batches of ``micro_batch`` rows, the same on every rank."""
    a = _target_map(spec)
    g = torch.Generator().manual_seed(2)
    xs = [torch.randn(spec["micro_batch"], spec["width"], generator=g) for _ in range(spec["n"])]
    return xs, [torch.tanh(x @ a) for x in xs]


def _target_map(spec: dict) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randn(spec["width"], spec["width"], generator=g) * (4 / spec["width"]) ** 0.5


def _mse_sum(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).sum()


def sequential_replay(spec: dict, p: int, stash: bool) -> dict:
    """The reference: the stale updates of the ``p``-stage pipeline replayed in one process, micro-batch
    after micro-batch. Micro-batch ``i`` runs forward stage by stage at the versions the schedule says
    each stage's forward saw (:func:`weight_versions`); backward, stage by stage from the last, at the
    same versions (``stash``) or at the version each stage holds when its backward comes; then every stage
    applies its update. ``p = 1`` is plain SGD. Returns each micro-batch's loss and the final weights."""
    xs, ts = _problem(spec)
    model = mlp_stack(spec["width"], spec["depth"], seed=0)
    sched = pipedream_schedule(p, spec["n"])
    fwd_v, bwd_v = weight_versions(sched)
    stages = [stage_of(model, s, p) for s in range(p)]
    names = [[n for n, _ in st.named_parameters()] for st in stages]
    history = [[[q.detach().clone() for q in st.parameters()]] for st in stages]  # history[s][v]: version v
    count = xs[0].numel()
    losses = []

    def call(s, params, x):
        return functional_call(stages[s], dict(zip(names[s], params)), (x,))

    for i in range(spec["n"]):
        inputs = [xs[i]]
        with torch.no_grad():
            for s in range(p):
                inputs.append(call(s, history[s][fwd_v[s][i]], inputs[s]))
        losses.append(float(_mse_sum(inputs[-1], ts[i]) / count))
        grad_out = None
        for s in reversed(range(p)):
            v = fwd_v[s][i] if stash else bwd_v[s][i]
            params = [t.detach().requires_grad_() for t in history[s][v]]
            xd = inputs[s].detach().requires_grad_(s > 0)
            out = call(s, params, xd)
            if s == p - 1:
                out = _mse_sum(out, ts[i]) / count
            grads = torch.autograd.grad(out, params + ([xd] if s > 0 else []), grad_out)
            grad_out = grads[-1] if s > 0 else None
            history[s].append([w - spec["lr"] * g for w, g in zip(history[s][-1], grads[:len(params)])])
    final = [history[s][-1] for s in range(p)]
    return {"losses": losses, "weights": final, "held_out_loss": held_out_loss(spec, stages, final)}


def held_out_loss(spec: dict, stages: list[nn.Module], weights: list[list[torch.Tensor]]) -> float:
    """The mean squared error of the model with ``weights`` (per stage) on 1024 held-out inputs."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1024, spec["width"], generator=g)
    t = torch.tanh(x @ _target_map(spec))
    with torch.no_grad():
        for st, w in zip(stages, weights):
            x = functional_call(st, dict(zip([n for n, _ in st.named_parameters()], w)), (x,))
    return float(((x - t) ** 2).mean())


def async_worker(rank: int, world_size: int, spec: dict) -> dict:
    """Worker: for each depth ``p`` in ``spec["depths"]`` (ranks ``0 .. p - 1`` of the launch; the others
    wait) and each mode (stashed, not stashed), train the student for ``spec["n"]`` micro-batches with
    PipeDream's schedule on the executor of :mod:`~course_lib.parallel.pipeline` (gloo, CPU), and return
    this stage's events, weight versions and final weights (the last stage also the losses).

    ``spec``: ``width``, ``depth`` (layers), ``micro_batch``, ``n`` (micro-batches), ``lr``, ``depths``."""
    if max(spec["depths"]) > world_size:
        raise ValueError(f"depths {spec['depths']} need {max(spec['depths'])} ranks; the launch has {world_size}")
    xs, ts = _problem(spec)
    count = xs[0].numel()
    out = []
    for p in spec["depths"]:
        group = dist.new_group(list(range(p)))  # every rank takes part in creating it
        if rank >= p:
            continue
        for mode in MODES:
            stage = stage_of(mlp_stack(spec["width"], spec["depth"], seed=0), rank, p)
            weights = StageWeights(stage, spec["lr"], stash=mode == "stashed")
            start = time.monotonic()
            events, _ = run_stage(stage, pipedream_schedule(p, spec["n"]), xs if rank == 0 else None,
                                  ts if rank == p - 1 else None, count, tuple(xs[0].shape),
                                  torch.device("cpu"), loss_sum=_mse_sum, weights=weights, group=group)
            out.append({"p": p, "mode": mode, "stage": rank, "events": events, "seconds": time.monotonic() - start,
                        "versions": [weights.versions[i] for i in range(spec["n"])], "held": max(weights.held),
                        "losses": weights.losses, "weights": weights.current,
                        "layers": stage_bounds(spec["depth"], p)[rank]})
    dist.barrier()
    return {"rank": rank, "runs": out}


def collect(per_rank: list[dict]) -> list[dict]:
    """The ranks' runs merged: one row per depth and mode with every stage's events, versions, peak
    versions held and final weights (stage order), and the last stage's losses."""
    rows = {}
    for pr in per_rank:
        for r in pr["runs"]:
            rows.setdefault((r["p"], r["mode"]), []).append(r)
    out = []
    for (p, mode), stages in sorted(rows.items()):
        stages.sort(key=lambda r: r["stage"])
        out.append({"p": p, "mode": mode, "events": [e for r in stages for e in r["events"]],
                    "versions": [r["versions"] for r in stages], "held": [r["held"] for r in stages],
                    "weights": [r["weights"] for r in stages], "losses": stages[-1]["losses"],
                    "seconds": max(r["seconds"] for r in stages)})
    return out


def max_difference(a: list[list[torch.Tensor]], b: list[list[torch.Tensor]]) -> float:
    """The largest absolute difference between two sets of per-stage weights."""
    return max(float((x - y).abs().max()) for sa, sb in zip(a, b) for x, y in zip(sa, sb))
