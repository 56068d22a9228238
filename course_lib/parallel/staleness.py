"""Synchronous, stale and asynchronous updates; stragglers (lesson 08, after the seed talk on scaling).

Data parallelism as lessons 06-07 run it is **synchronous**: every step waits for every
rank's gradient, so the slowest rank sets the pace. The alternatives the seed talk describes:

* a **parameter server** with **asynchronous** updates: each worker pulls the weights, computes
  a gradient and pushes it; the server applies each gradient as it arrives. Nobody waits, but a
  gradient was computed on weights that are several updates old by the time it is applied;
* **stale-synchronous** updates: every update uses gradients exactly ``tau`` steps old (a queue
  of gradients), so communication can overlap the next steps' compute.

Two experiments, on the same small problem (a teacher MLP labels Gaussian inputs; a student MLP
learns them; SGD with momentum):

1. :func:`stale_sgd` -- one process, controlled staleness: the gradient of step ``t`` is taken at
   the weights of step ``t - tau`` (``tau = 0`` is synchronous), or, with ``tau="async"``, at the
   weights each of ``workers`` simulated workers read when it started (random compute times,
   so the staleness varies). Steps to a target loss vs ``tau``.
2. :func:`parameter_server_worker` -- real processes under ``launch``: rank 0 is the server, the
   others compute gradients on their own shard; one worker can be slowed by an injected delay.
   Synchronous rounds vs asynchronous pushes, on the wall clock.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters


@dataclass(frozen=True)
class Problem:
    """The small learning problem of this module: ``n_train`` Gaussian inputs labelled by a teacher MLP."""

    n_train: int = 4096
    n_eval: int = 1024
    features: int = 32
    hidden: int = 64
    classes: int = 10
    batch_size: int = 64
    seed: int = 0

    def data(self):
        """``(X, y, X_eval, y_eval)``, the same on every rank."""
        g = torch.Generator().manual_seed(self.seed)
        teacher = [torch.randn(self.features, 48, generator=g) / self.features**0.5,
                   torch.randn(48, self.classes, generator=g) / 48**0.5]
        X = torch.randn(self.n_train + self.n_eval, self.features, generator=g)  # (N, F)
        logits = torch.tanh(X @ teacher[0]) @ teacher[1] * 8.0
        y = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=g).squeeze(1)  # (N,) noisy labels
        return X[:self.n_train], y[:self.n_train], X[self.n_train:], y[self.n_train:]

    def model(self) -> nn.Module:
        torch.manual_seed(self.seed + 1)
        return nn.Sequential(nn.Linear(self.features, self.hidden), nn.Tanh(), nn.Linear(self.hidden, self.classes))


def _grad_at(model: nn.Module, w: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The gradient of the mean cross-entropy on ``(X, y)`` at the flat weights ``w``."""
    vector_to_parameters(w, model.parameters())
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(X), y).backward()
    return parameters_to_vector([p.grad for p in model.parameters()])


@torch.no_grad()
def eval_loss(model: nn.Module, w: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """``(loss, accuracy)`` of the flat weights ``w`` on ``(X, y)``."""
    vector_to_parameters(w, model.parameters())
    logits = model(X)
    return float(nn.functional.cross_entropy(logits, y)), float((logits.argmax(1) == y).float().mean())


def stale_sgd(problem: Problem, tau, steps: int, lr: float = 0.5, momentum: float = 0.9, workers: int = 8,
              eval_every: int = 10, seed: int = 0) -> dict:
    """SGD with momentum where step ``t`` applies a gradient taken at the weights of step ``t - tau``.

    ``tau="async"``: ``workers`` simulated workers with exponential compute times (mean 1); each
    update applies the gradient of the worker that finishes first, taken at the weights it read
    when it started: the staleness is whatever the race gives (about ``workers - 1`` on average).
    Returns the eval-loss curve (``steps``, ``loss``, ``accuracy``), the staleness of each update
    and, for the async run, the simulated time of each update (units: one mean gradient).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny steps: a second spinning OpenMP thread only slows them (lesson 06)
    try:
        return _stale_sgd(problem, tau, steps, lr, momentum, workers, eval_every, seed)
    finally:
        torch.set_num_threads(threads)


def _stale_sgd(problem, tau, steps, lr, momentum, workers, eval_every, seed) -> dict:
    X, y, Xe, ye = problem.data()
    model = problem.model()
    w = parameters_to_vector(model.parameters()).detach().clone()
    v = torch.zeros_like(w)
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    curve = {"step": [], "loss": [], "accuracy": []}
    staleness = []
    if tau == "async":
        versions = [w.clone()]  # versions[k] = the weights after k updates
        # each worker: (finish time, the version it read)
        running = [(rng.exponential(1.0), 0) for _ in range(workers)]
        sim_time = []
    else:
        tau = int(tau)
        if tau < 0:
            raise ValueError(f"tau must be >= 0 or 'async', got {tau}")
        history = deque([w.clone()], maxlen=tau + 1)
    for t in range(steps):
        idx = torch.randint(0, len(X), (problem.batch_size,), generator=g)
        if tau == "async":
            k = min(range(workers), key=lambda i: running[i][0])
            finish, read = running[k]
            grad = _grad_at(model, versions[read], X[idx], y[idx])
            staleness.append(t - read)
            sim_time.append(finish)
        else:
            grad = _grad_at(model, history[0], X[idx], y[idx])  # the oldest kept: t - tau (or 0 early on)
            staleness.append(min(t, tau))
        v.mul_(momentum).add_(grad)
        w.sub_(lr * v)
        if tau == "async":
            versions.append(w.clone())
            running[k] = (finish + rng.exponential(1.0), t + 1)
        else:
            history.append(w.clone())
        if (t + 1) % eval_every == 0 or t + 1 == steps:
            loss, acc = eval_loss(model, w, Xe, ye)
            curve["step"].append(t + 1)
            curve["loss"].append(loss)
            curve["accuracy"].append(acc)
    out = {"tau": tau, "curve": curve, "mean_staleness": float(np.mean(staleness)),
           "max_staleness": int(max(staleness)), "final_loss": curve["loss"][-1],
           "final_accuracy": curve["accuracy"][-1]}
    if tau == "async":
        out["sim_time"] = sim_time
    return out


def steps_to_target(curve: dict, target: float) -> int | None:
    """The first evaluated step whose loss is at or below ``target`` (None if never; NaN never counts)."""
    for step, loss in zip(curve["step"], curve["loss"]):
        if loss == loss and loss <= target:
            return step
    return None


# --------------------------------------------------------------------------- a parameter server, measured


@dataclass(frozen=True)
class ServerConfig:
    """One parameter-server run: ``mode`` "sync" or "async", the straggler and its delay, the budget."""

    mode: str = "async"
    straggler_rank: int | None = None  # a worker rank (>= 1) slowed by ``delay_s`` per gradient
    delay_s: float = 0.02
    budget_s: float = 3.0  # wall-clock seconds of training
    lr: float = 0.2
    momentum: float = 0.9
    eval_every: int = 10  # server updates between evaluations
    target_loss: float | None = None

    def label(self) -> str:
        who = f", rank {self.straggler_rank} +{self.delay_s * 1e3:g} ms" if self.straggler_rank else ""
        return f"{self.mode}{who}"


def _server(world_size: int, cfg: ServerConfig, problem: Problem) -> dict:
    server = _ParameterServer(world_size, cfg, problem)
    server.record()
    if cfg.mode == "sync":
        server.serve_sync()
    elif cfg.mode == "async":
        server.serve_async()
    else:
        raise ValueError(f"mode must be 'sync' or 'async', got {cfg.mode!r}")
    wall = time.perf_counter() - server.start
    server.record()
    return server.result(wall)


class _ParameterServer:
    """Rank 0's state: the weights and their momentum, the version (updates applied so far), the loss curve,
    and how stale each applied gradient was."""

    def __init__(self, world_size: int, cfg: ServerConfig, problem: Problem):
        _, _, self.Xe, self.ye = problem.data()
        self.cfg = cfg
        self.model = problem.model()
        self.w = parameters_to_vector(self.model.parameters()).detach().clone()
        self.v = torch.zeros_like(self.w)
        self.n = n = self.w.numel()
        self.out_msg = torch.zeros(n + 2)  # weights, then [continue flag, version]
        self.in_msg = torch.zeros(n + 1)  # gradient, then the version it was computed at
        self.workers = list(range(1, world_size))
        self.version, self.start = 0, time.perf_counter()
        self.curve = {"time_s": [], "update": [], "loss": [], "accuracy": []}
        self.staleness, self.grads_from = [], {r: 0 for r in self.workers}

    def push(self, dst: int, go: bool = True) -> None:
        """Send the current weights and version to ``dst``, with whether it should go on."""
        n = self.n
        self.out_msg[:n] = self.w
        self.out_msg[n] = 1.0 if go else 0.0
        self.out_msg[n + 1] = self.version
        dist.send(self.out_msg, dst)

    def record(self) -> None:
        """One point of the curve: the evaluation loss and accuracy now."""
        loss, acc = eval_loss(self.model, self.w, self.Xe, self.ye)
        self.curve["time_s"].append(time.perf_counter() - self.start)
        self.curve["update"].append(self.version)
        self.curve["loss"].append(loss)
        self.curve["accuracy"].append(acc)

    def apply(self, grad: torch.Tensor) -> None:
        """One SGD-with-momentum update, evaluated every ``eval_every`` updates."""
        self.v.mul_(self.cfg.momentum).add_(grad)
        self.w.sub_(self.cfg.lr * self.v)
        self.version += 1
        if self.version % self.cfg.eval_every == 0:
            self.record()

    def serve_sync(self) -> None:
        """Rounds: every worker gets the weights, the round's update is the mean of all their gradients."""
        n, workers = self.n, self.workers
        while time.perf_counter() - self.start < self.cfg.budget_s:
            for r in workers:
                self.push(r)
            total = torch.zeros(n)
            for _ in workers:  # in whatever order they arrive; the round waits for the last one
                sender = dist.recv(self.in_msg)
                total += self.in_msg[:n]
                self.grads_from[sender] += 1
                self.staleness.append(0)
            self.apply(total / len(workers))
        for r in workers:
            self.push(r, go=False)

    def serve_async(self) -> None:
        """Each gradient is applied as it arrives and its sender gets the new weights at once."""
        n = self.n
        for r in self.workers:
            self.push(r)
        active = len(self.workers)
        while active:
            sender = dist.recv(self.in_msg)  # from any worker: the first one done
            self.grads_from[sender] += 1
            if time.perf_counter() - self.start < self.cfg.budget_s:
                self.staleness.append(self.version - int(self.in_msg[n]))
                self.apply(self.in_msg[:n].clone())
                self.push(sender)
            else:
                self.push(sender, go=False)
                active -= 1

    def result(self, wall: float) -> dict:
        """The run's summary: throughput, staleness, the curve and the time to the target loss."""
        cfg, curve, staleness, version = self.cfg, self.curve, self.staleness, self.version
        target_time = None
        if cfg.target_loss is not None:
            target_time = next((t for t, loss in zip(curve["time_s"], curve["loss"]) if loss <= cfg.target_loss),
                               None)
        return {"label": cfg.label(), "mode": cfg.mode, "straggler_rank": cfg.straggler_rank,
                "delay_s": cfg.delay_s, "wall_s": wall, "updates": version, "updates_per_s": version / wall,
                "gradients_from": self.grads_from,
                "mean_staleness": float(np.mean(staleness)) if staleness else 0.0,
                "max_staleness": int(max(staleness)) if staleness else 0, "curve": curve,
                "final_loss": curve["loss"][-1], "final_accuracy": curve["accuracy"][-1],
                "time_to_target_s": target_time}


def _worker(rank: int, world_size: int, cfg: ServerConfig, problem: Problem) -> None:
    X, y, _, _ = problem.data()
    shard = torch.arange(rank - 1, len(X), world_size - 1)  # this worker's samples
    model = problem.model()
    n = parameters_to_vector(model.parameters()).numel()
    in_msg = torch.zeros(n + 2)
    out_msg = torch.zeros(n + 1)
    g = torch.Generator().manual_seed(100 + rank)
    while True:
        dist.recv(in_msg, 0)
        if in_msg[n] == 0:
            return
        idx = shard[torch.randint(0, len(shard), (problem.batch_size,), generator=g)]
        out_msg[:n] = _grad_at(model, in_msg[:n], X[idx], y[idx])
        out_msg[n] = in_msg[n + 1]
        if rank == cfg.straggler_rank:
            time.sleep(cfg.delay_s)  # the injected straggler
        dist.send(out_msg, 0)


def parameter_server_worker(rank: int, world_size: int, configs: list, problem: Problem | None = None) -> list:
    """Run each :class:`ServerConfig` in turn: rank 0 serves, ranks 1.. compute; a worker for ``launch``.

    Only point-to-point messages: the server sends weights (plus a continue flag and their
    version), a worker answers with a gradient (plus the version it used). Synchronous: each
    round the server sends the weights to every worker and waits for all their gradients
    (averaged). Asynchronous: the server applies each gradient as it arrives (``recv`` from any
    source) and sends that worker the new weights at once. Rank 0 returns one record per config.
    """
    if world_size < 2:
        raise ValueError("a parameter server needs a server and at least one worker (world_size >= 2)")
    problem = problem or Problem()
    torch.set_num_threads(1)
    records = []
    for cfg in configs:
        dist.barrier()
        if rank == 0:
            records.append(_server(world_size, cfg, problem))
        else:
            _worker(rank, world_size, cfg, problem)
    return records


# --------------------------------------------------------------------------- tables, figures, reading


def staleness_table(results: dict, target: float):
    """One row per run of :func:`stale_sgd`: staleness, steps to ``target``, final loss and accuracy."""
    from ..tables import Table

    t = Table(["tau", "mean staleness", "max staleness", "steps to target", "final loss", "final accuracy"],
              title=f"SGD with stale gradients: steps to eval loss <= {target:.3g}")
    for tau, r in results.items():
        t.add(**{"tau": str(tau), "mean staleness": r["mean_staleness"], "max staleness": r["max_staleness"],
                 "steps to target": steps_to_target(r["curve"], target), "final loss": r["final_loss"],
                 "final accuracy": r["final_accuracy"]})
    return t


def server_table(records: list):
    """One row per parameter-server run: updates/s, gradients per worker, staleness, loss, time to target."""
    from ..tables import Table

    t = Table(["run", "updates", "updates/s", "gradients per worker", "mean staleness", "max staleness",
               "final loss", "final accuracy", "time to target (s)"],
              title="parameter server, measured: rank 0 serves, the other ranks compute gradients")
    for r in records:
        t.add(**{"run": r["label"], "updates": r["updates"], "updates/s": r["updates_per_s"],
                 "gradients per worker": " / ".join(str(v) for v in r["gradients_from"].values()),
                 "mean staleness": r["mean_staleness"], "max staleness": r["max_staleness"],
                 "final loss": r["final_loss"], "final accuracy": r["final_accuracy"],
                 "time to target (s)": r["time_to_target_s"]})
    return t


def with_target(records: list, target: float) -> list:
    """The records with ``time_to_target_s`` (re)computed for ``target`` from their curves."""
    out = []
    for r in records:
        c = r["curve"]
        hit = next((t for t, loss in zip(c["time_s"], c["loss"]) if loss <= target), None)
        out.append({**r, "time_to_target_s": hit})
    return out


def plot_staleness(results: dict, records: list | None = None, target: float | None = None):
    """Left: eval loss vs step per staleness; right (with ``records``): loss vs wall clock per server run."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 if records else 1, figsize=(11 if records else 6, 3.6), squeeze=False)
    ax = axes[0][0]
    for tau, r in results.items():
        ax.plot(r["curve"]["step"], r["curve"]["loss"], label=f"tau = {tau}")
    ax.set_xlabel("update")
    ax.set_ylabel("eval loss")
    ax.set_yscale("log")
    ax.set_title("stale gradients (simulated)", fontsize=10)
    if records:
        ax2 = axes[0][1]
        for r in records:
            ax2.plot(r["curve"]["time_s"], r["curve"]["loss"], label=r["label"])
        ax2.set_xlabel("wall clock (s)")
        ax2.set_ylabel("eval loss")
        ax2.set_yscale("log")
        ax2.set_title("parameter server (measured)", fontsize=10)
    for a in axes[0]:
        if target is not None:
            a.axhline(target, color="gray", ls=":", lw=1)
        a.legend(fontsize=7)
    fig.tight_layout()
    return fig, axes
