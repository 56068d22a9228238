"""Data parallel training of NeuMF: DDP, gradient accumulation, checkpoints (lesson 06).

``train_to_target`` (course_lib.train) calls into this module; it never mentions ranks
itself. What data parallelism needs, and where it lives here:

* :class:`DataParallel` — the ranks, the batch arithmetic (``BatchConfig``), the DDP wrap,
  the micro steps with ``no_sync()``, and the one decision all ranks must share (stop).
* :class:`Checkpointer` — rank 0 writes model, optimizer, scaler, sampler RNG, step,
  curve and clock atomically every N steps; a resumed run continues bit for bit.
* :func:`ncf_worker` — ``worker(rank, world_size, cfg, spec) -> dict`` for
  ``course_lib.dist.launch``, ``torchrun`` (``python -m course_lib.train_ddp``) and SLURM.

**Why W ranks x micro batch b x k accumulation steps = one process with batch W*b*k.**
Every rank draws the *same* global batch (same sampler seed, so the same permutation and
negatives) and takes its slice ``r`` of ``W`` (``tensor_split``), then splits that slice
into ``k`` micro batches. Each micro step's loss is its *sum* over samples divided by
``n / W`` (``n``: samples in the global batch), so the ``k`` backward passes add up to
``W x`` the rank's share of the full-batch mean; DDP's all-reduce averages over the ``W``
ranks, which leaves exactly the gradient of the mean over all ``n`` samples — also for
the smaller last batch of an epoch. ``no_sync()`` skips the all-reduce on all but the last
micro step (gradients accumulate locally; DDP docs: "gradients will be accumulated in
module variables, which will later be synchronized in the first forward-backward pass
exiting the context"). The sample order does not depend on ``W``, so a checkpoint taken
with one world size also resumes with another. ``tests/test_ddp.py`` checks the invariant.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

from . import dist as cdist
from .config import BatchConfig
from .fileio import atomic_torch_save
from .tables import Table

CHECKPOINT_NAME = "ncf_ddp.pt"
CHECKPOINT_FORMAT = 1


# --------------------------------------------------------------------------- the batch, stated once


def batch_config(global_batch_size: int, micro_batch_size: int | None, world_size: int) -> BatchConfig:
    """``BatchConfig`` for a run; ``micro_batch_size=None`` means no accumulation (b = B / W)."""
    if micro_batch_size is None:
        if global_batch_size % world_size:
            raise ValueError(f"global batch {global_batch_size} does not split evenly over world_size={world_size} "
                             f"ranks; choose a multiple of {world_size}")
        micro_batch_size = global_batch_size // world_size
    return BatchConfig(global_batch_size, micro_batch_size, world_size)


def batch_table(global_batch_size: int, micro_batch_size: int, world_sizes=(1, 2, 4, 8)) -> Table:
    """How one global batch becomes per-rank micro batches and accumulation steps."""
    t = Table(["world_size", "global_batch_size", "micro_batch_size", "grad_accum_steps", "per-rank batch"],
              title=f"global batch {global_batch_size}, micro batch {micro_batch_size}")
    for w in world_sizes:
        try:
            bc = BatchConfig(global_batch_size, micro_batch_size, w)
            t.add(world_size=w, global_batch_size=global_batch_size, micro_batch_size=micro_batch_size,
                  grad_accum_steps=bc.grad_accum_steps, **{"per-rank batch": bc.per_rank_batch_size})
        except ValueError:
            t.add(world_size=w, global_batch_size=global_batch_size, micro_batch_size=micro_batch_size,
                  grad_accum_steps="does not divide")
    return t


# --------------------------------------------------------------------------- DDP and micro steps


class DataParallel:
    """Data parallelism for one run of ``train_to_target``; on one process it only accumulates."""

    def __init__(self, global_batch_size: int, micro_batch_size: int | None, device: torch.device,
                 bucket_cap_mb: float | None = None):
        self.distributed = cdist._initialized() and dist.get_world_size() > 1
        self.rank, self.world_size = (dist.get_rank(), dist.get_world_size()) if self.distributed else (0, 1)
        self.batch = batch_config(global_batch_size, micro_batch_size, self.world_size)
        self.device = device
        self.bucket_cap_mb = bucket_cap_mb
        self.ddp = None
        self._comm: list[tuple[float, float]] = []  # (start, end) of each bucket's all-reduce
        self.sync_steps = 0

    @property
    def grad_accum_steps(self) -> int:
        return self.batch.grad_accum_steps

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """DDP around ``model`` when there are several ranks (it broadcasts rank 0's weights)."""
        if not self.distributed:
            return model
        from torch.nn.parallel import DistributedDataParallel

        kwargs = {} if self.bucket_cap_mb is None else {"bucket_cap_mb": self.bucket_cap_mb}
        self.ddp = DistributedDataParallel(
            model, device_ids=[self.device.index] if self.device.type == "cuda" else None, **kwargs)
        if dist.get_backend() == "gloo":  # time each bucket's all-reduce (NCCL: see comm_time_s)
            self.ddp.register_comm_hook(None, self._timed_allreduce)
        return self.ddp

    def _timed_allreduce(self, state, bucket):
        """DDP's default hook (average = divide, then sum over ranks), with a stopwatch."""
        t0 = time.perf_counter()
        fut = dist.all_reduce(bucket.buffer().div_(self.world_size), async_op=True).get_future()

        def done(f):
            self._comm.append((t0, time.perf_counter()))
            return f.value()[0]

        return fut.then(done)

    def micro_batches(self, train_model: torch.nn.Module, batch):
        """Yield ``(micro_batch, denominator, sync_context)`` for the ``k`` micro steps of one step.

        ``batch`` is the global batch (identical on every rank). The caller computes
        ``loss = sum over the micro batch / denominator`` and calls backward inside the
        context: ``no_sync()`` for all but the last micro step, so DDP all-reduces once.
        """
        n = batch[0].numel()
        denominator = n / self.world_size
        local = [t.tensor_split(self.world_size)[self.rank] for t in batch]  # this rank's slice
        k = self.grad_accum_steps
        for i, micro in enumerate(zip(*(t.tensor_split(k) for t in local))):
            last = i == k - 1
            if self.ddp is not None and not last:
                sync = self.ddp.no_sync()  # accumulate locally, no all-reduce
            else:
                sync = contextlib.nullcontext()
                if self.ddp is not None:
                    self.sync_steps += 1  # this micro step all-reduces
            yield micro, denominator, sync

    def agree(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank: all ranks stop at the same step."""
        if not self.distributed:
            return flag
        t = torch.tensor([1 if flag else 0], device=self.device)
        dist.broadcast(t, src=0)
        return bool(t.item())

    @property
    def comm_time_s(self) -> float | None:
        """Seconds with a gradient all-reduce in flight (None on one process).

        gloo: the union of the timed all-reduces (part of it overlaps backward compute).
        NCCL: host clocks cannot see GPU collectives finish, so this uses DDP's own
        sampled timers (``avg_backward_comm_time``; sampled on the first iterations and
        every 100th) times the number of synchronizing steps: an estimate.
        """
        if self.ddp is None:
            return None
        if dist.get_backend() != "gloo":
            avg_ns = self.ddp._get_ddp_logging_data().get("avg_backward_comm_time", 0)
            return avg_ns * 1e-9 * self.sync_steps
        total, end = 0.0, float("-inf")
        for a, b in sorted(self._comm):
            total += max(0.0, b - max(a, end))
            end = max(end, b)
        return total


# --------------------------------------------------------------------------- checkpoints


class Checkpointer:
    """Save every ``every`` steps (rank 0, atomically) and resume from the latest save.

    The file holds only tensors and plain containers, so ``torch.load(path,
    weights_only=True)`` reads it (no pickled classes). To resume mid-epoch exactly, the
    sampler's RNG state *at the start of the epoch* is saved with the number of batches
    already consumed; on resume the epoch is regenerated and those batches skipped.
    ``fail_at_step`` (debug: tests and the lesson) makes this rank raise once that many
    steps are done — a rank that dies mid-training.
    """

    def __init__(self, directory: str | os.PathLike | None, every: int = 0, *, resume: bool = True,
                 fail_at_step: int | None = None):
        self.path = os.path.join(directory, CHECKPOINT_NAME) if directory else None
        self.every, self.resume, self.fail_at_step = every, resume, fail_at_step
        self.sampler = None
        self.step = 0  # steps done, counted as batches are handed out
        self._epoch_rng = None  # sampler RNG state when the current epoch began
        self._consumed = 0  # batches handed out in the current epoch
        self._replay = None  # (epoch RNG state, batches to skip) after restore()

    def track(self, sampler):
        """Wrap the batch iterable so its position can be saved and restored."""
        from .data.sampler import DeviceSampler

        if not isinstance(sampler, DeviceSampler):
            raise ValueError("checkpoint/resume needs loader='device' (its RNG state is the whole sampler state)")
        self.sampler = sampler
        return _Tracked(self)

    def _iterate(self):
        g, skip = self.sampler.generator, 0
        if self._replay is not None:  # resume: regenerate this epoch, skip what was trained on
            rng, skip = self._replay
            g.set_state(rng)
            self._replay = None
        self._epoch_rng, self._consumed = g.get_state(), 0
        for batch in self.sampler:
            self._consumed += 1
            if self._consumed <= skip:
                continue
            if self.fail_at_step is not None and self.step >= self.fail_at_step:
                raise RuntimeError(f"injected failure on rank {cdist.rank()} after step {self.step} "
                                   "(RunSpec.fail_at_step, a debugging aid)")
            self.step += 1
            yield batch

    def due(self, step: int) -> bool:
        return self.path is not None and self.every > 0 and step % self.every == 0

    def save(self, model, optimizer, scaler, **loop_state) -> None:
        """Rank 0 writes the checkpoint (temp file + rename: a crash never leaves half a file).

        ``loop_state``: the training loop's counters, curve and clock (``step`` among them).
        """
        if not cdist.is_main_process():
            return
        state = {
            "format": CHECKPOINT_FORMAT, "step": loop_state["step"], "world_size": cdist.world_size(),
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "sampler": {"epoch_rng": self._epoch_rng, "consumed": self._consumed},
            "torch_rng": torch.get_rng_state(),
            "loop": {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in loop_state.items()},
        }
        atomic_torch_save(state, self.path)

    def load(self) -> dict | None:
        if not (self.resume and self.path and os.path.exists(self.path)):
            return None
        state = torch.load(self.path, map_location="cpu", weights_only=True)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{self.path}: checkpoint format {state.get('format')!r}, expected {CHECKPOINT_FORMAT}")
        return state

    def restore(self, model, optimizer, scaler) -> dict | None:
        """Load the latest checkpoint into model/optimizer/scaler/sampler; the loop state, or None."""
        state = self.load()
        if state is None:
            return None
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if scaler is not None and state["scaler"] is not None:
            scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["torch_rng"])
        self._replay = (state["sampler"]["epoch_rng"], state["sampler"]["consumed"])
        self.step = state["step"]
        return state["loop"]


class _Tracked:
    def __init__(self, owner: Checkpointer):
        self.owner = owner

    def __len__(self) -> int:
        return len(self.owner.sampler)

    def __iter__(self):
        return self.owner._iterate()


# --------------------------------------------------------------------------- the worker


@dataclass(frozen=True)
class RunSpec:
    """Everything a worker needs besides ``TrainConfig``: small and picklable (no tensors).

    Each worker loads the data itself (``load_implicit`` caches processed data on disk).
    """

    dataset: str = "ml-1m"
    profile: str = "full"
    synthetic_size: str | None = None
    num_eval_negatives: int = 100
    target_hr: float | None = None
    max_epochs: float = 10
    max_steps: int | None = None
    stop_at_target: bool = True
    evaluate_points: bool = True
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool = True
    label: str = ""
    progress: str = "log"
    fail_at_step: int | None = None  # debug: this rank raises after that many steps
    fail_rank: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


def load_data(spec: RunSpec):
    """The run's data; the first rank of each node prepares the cache, the others read it."""
    from .data import load_implicit

    def load():
        return load_implicit(spec.dataset, profile=spec.profile, synthetic_size=spec.synthetic_size,
                             num_eval_negatives=spec.num_eval_negatives)

    data = load() if cdist.local_rank() == 0 else None
    cdist.barrier()
    return data if data is not None else load()


def ncf_worker(rank: int, world_size: int, cfg, spec) -> dict:
    """Train NeuMF on this rank's share of every global batch; the result record as a dict.

    ``cfg``: a ``TrainConfig`` (or its dict); ``spec``: a :class:`RunSpec` (or its dict).
    Every rank returns the record; only rank 0 reports progress and writes checkpoints.
    """
    from .train import TrainConfig, train_to_target

    cfg = cfg if isinstance(cfg, TrainConfig) else TrainConfig(**cfg)
    spec = spec if isinstance(spec, RunSpec) else RunSpec(**spec)
    data = load_data(spec)
    fail = spec.fail_at_step if rank == spec.fail_rank else None
    checkpoint = (Checkpointer(spec.checkpoint_dir, spec.checkpoint_every, resume=spec.resume, fail_at_step=fail)
                  if spec.checkpoint_dir or fail is not None else None)
    result = train_to_target(data, cfg, target_hr=spec.target_hr, max_epochs=spec.max_epochs,
                             max_steps=spec.max_steps, device=cdist.device(), progress=spec.progress,
                             stop_at_target=spec.stop_at_target, evaluate_points=spec.evaluate_points,
                             label=spec.label or f"x{world_size} B{cfg.batch_size}", checkpoint=checkpoint)
    return {**result.to_dict(), "rank": rank, "spec": spec.to_dict()}


def ncf_runs(rank: int, world_size: int, cfgs: list, spec) -> list[dict]:
    """Several ``ncf_worker`` runs in one launch (saves the process start-up between them)."""
    return [ncf_worker(rank, world_size, cfg, spec) for cfg in cfgs]


# --------------------------------------------------------------------------- SyncBatchNorm, shown


def batchnorm_worker(rank: int, world_size: int, per_rank_batch: int = 4, steps: int = 3, seed: int = 0) -> dict:
    """Local vs synchronized BatchNorm under DDP, against one process with the global batch.

    Every rank draws the same global batch (W * b rows) each step and trains on its slice
    of it; rank 0 also trains a plain copy on the whole batch (the reference). Returns the
    largest relative difference of BatchNorm's running mean/var and of the parameters
    from the reference, for local BN and for synchronized BN.
    """
    from torch.nn.parallel import DistributedDataParallel

    from .models.mlp_bn import MLPBN, convert_sync_batchnorm

    device = cdist.device()
    gen = torch.Generator().manual_seed(seed)
    n = per_rank_batch * world_size
    batches = []
    for _ in range(steps):  # (n, 8) inputs with a spread of means and scales, (n, 1) targets
        x = torch.randn(n, 8, generator=gen) * torch.linspace(0.5, 3, 8) + torch.linspace(-2, 2, 8)
        batches.append((x.to(device), x.sum(1, keepdim=True).sin().to(device)))

    def train(model, ddp: bool):
        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None) \
            if ddp else model
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for x, y in batches:
            if ddp:
                x, y = x.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
        return model

    def fresh():
        torch.manual_seed(seed)
        return MLPBN().to(device)

    variants = {"local BatchNorm": train(fresh(), True), "synchronized BatchNorm": train(
        convert_sync_batchnorm(fresh()), True)}
    reference = train(fresh(), False) if rank == 0 else None
    rows = {}
    for name, model in variants.items():
        if reference is None:
            continue
        ref = reference.state_dict()

        def rel(key):
            a, b = model.state_dict()[key].double(), ref[key].double()
            return ((a - b).norm() / b.norm()).item()

        params = [k for k, _ in reference.named_parameters()]
        rows[name] = {"running_mean": rel("bn.running_mean"), "running_var": rel("bn.running_var"),
                      "parameters": max(rel(k) for k in params),
                      "bn_class": type(model.bn).__name__}
    return {"rank": rank, "per_rank_batch": per_rank_batch, "global_batch": n, "steps": steps, "rows": rows}


def batchnorm_table(result: dict, tol: float = 1e-5) -> Table:
    """The demo's rows: relative difference from one process with the global batch."""
    t = Table(["BatchNorm", "class", "running_mean", "running_var", "parameters", f"matches (< {tol:g})"],
              title=f"after {result['steps']} steps, {result['per_rank_batch']} samples per rank, "
                    f"global batch {result['global_batch']}: relative difference from one process")
    for name, r in result["rows"].items():
        same = max(r["running_mean"], r["running_var"], r["parameters"]) < tol
        t.add(**{"BatchNorm": name, "class": r["bn_class"], "running_mean": r["running_mean"],
                 "running_var": r["running_var"], "parameters": r["parameters"], f"matches (< {tol:g})": same})
    return t


# --------------------------------------------------------------------------- what the lesson shows


def checkpoint_params(directory: str | os.PathLike) -> tuple[int, dict]:
    """(step, model state) of the checkpoint in ``directory``, read with ``weights_only=True``."""
    state = torch.load(os.path.join(directory, CHECKPOINT_NAME), map_location="cpu", weights_only=True)
    return state["step"], state["model"]


def max_relative_difference(a: dict, b: dict) -> float:
    """Largest ``|a - b| / |b|`` (Frobenius norms) over the tensors of two state dicts."""
    if a.keys() != b.keys():
        raise KeyError(f"different parameters: {sorted(set(a) ^ set(b))}")
    return max(((a[k].double() - b[k].double()).norm() / b[k].double().norm().clamp_min(1e-30)).item() for k in a)


def ladder_config(default, directory=None):
    """The setting to add data parallelism to: the latest saved rung (before "+data parallel")
    that recorded its ``config`` (a ``TrainConfig`` dict), else ``default``. Returns (cfg, rung)."""
    from .results import LADDER_STEPS, load_results
    from .train import TrainConfig

    rows = {r.get("step"): r for name, r in load_results(directory).items() if name.startswith("ladder_")}
    fields = set(TrainConfig.__dataclass_fields__)
    for rung in reversed(LADDER_STEPS[:-1]):
        saved = rows.get(rung, {}).get("config")
        if isinstance(saved, dict):
            return TrainConfig(**{k: v for k, v in saved.items() if k in fields}), rung
    return default, None


def scaling_rows(strong: dict, weak: dict) -> list[dict]:
    """Strong (fixed global batch) and weak (fixed per-rank batch) scaling, one row per run.

    ``strong``/``weak``: ``{world_size: result record}``. Efficiency is throughput over
    ``world_size x`` the one-rank throughput of the same mode (1.0 = perfect scaling); for
    strong scaling also time-to-target efficiency ``T(1) / (W T(W))``.
    """
    rows = []
    for mode, runs in (("strong", strong), ("weak", weak)):
        one = runs.get(1)
        for w in sorted(runs):
            r = runs[w]
            speedup = r["samples_per_s"] / one["samples_per_s"] if one else None
            ttt, ttt1 = r["time_to_target_s"], one["time_to_target_s"] if one else None
            comm = r.get("comm_time_s") or 0.0
            rows.append({
                "mode": mode, "world_size": w, "global_batch": r["config"]["batch_size"],
                "per_rank_batch": r["config"]["batch_size"] // w, "lr": r["config"]["lr"],
                "samples_per_s": r["samples_per_s"], "speedup": speedup,
                "efficiency": speedup / w if speedup is not None else None,
                "time_to_target_s": ttt, "epochs_to_target": r["epochs_to_target"],
                "ttt_efficiency": ttt1 / (w * ttt) if (mode == "strong" and ttt and ttt1) else None,
                "comm_s": comm, "comm_share": comm / r["train_time_s"] if r["train_time_s"] else None,
                "final_hr": r["final_hr"]})
    return rows


def scaling_table(rows: list[dict]) -> Table:
    t = Table(["mode", "ranks", "global batch", "per-rank batch", "samples/s", "speedup", "efficiency",
               "time to target (s)", "epochs to target", "comm (s)", "comm share", "final HR@10"],
              title="Strong scaling (fixed global batch) and weak scaling (fixed per-rank batch)")
    for r in rows:
        t.add(**{"mode": r["mode"], "ranks": r["world_size"], "global batch": r["global_batch"],
                 "per-rank batch": r["per_rank_batch"], "samples/s": r["samples_per_s"],
                 "speedup": r["speedup"], "efficiency": r["efficiency"],
                 "time to target (s)": r["time_to_target_s"] if r["time_to_target_s"] is not None else "not reached",
                 "epochs to target": r["epochs_to_target"], "comm (s)": r["comm_s"],
                 "comm share": f"{r['comm_share']:.0%}" if r["comm_share"] is not None else None,
                 "final HR@10": r["final_hr"]})
    return t


def plot_scaling(rows: list[dict]):
    """Two panels: samples/s vs ranks (with the ideal line) and scaling efficiency vs ranks."""
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(10, 3.6))
    for mode, color in (("strong", "tab:blue"), ("weak", "tab:orange")):
        rs = [r for r in rows if r["mode"] == mode]
        if not rs:
            continue
        w = [r["world_size"] for r in rs]
        ax_t.plot(w, [r["samples_per_s"] for r in rs], "o-", color=color, label=f"{mode} scaling")
        base = next((r["samples_per_s"] for r in rs if r["world_size"] == 1), None)
        if base:
            ax_t.plot(w, [base * x for x in w], ":", color=color, label=f"ideal ({mode})")
        ax_e.plot(w, [r["efficiency"] for r in rs], "o-", color=color, label=mode)
    ax_t.set(xlabel="ranks", ylabel="training samples/s", title="throughput")
    ax_e.axhline(1.0, color="gray", ls=":", lw=1)
    ax_e.set(xlabel="ranks", ylabel="efficiency = speedup / ranks", title="scaling efficiency", ylim=(0, 1.2))
    for ax in (ax_t, ax_e):
        ax.set_xticks(sorted({r["world_size"] for r in rows}))
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
