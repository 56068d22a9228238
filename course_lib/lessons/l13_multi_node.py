"""What lesson 13 measures on many nodes, and what it reads from the results.

Three paths, chosen by :func:`choose_path` from what the machine has:

* ``slurm``: the learner's own SLURM cluster with at least two nodes -- each run is one
  ``srun --nodes N --ntasks-per-node 1 torchrun ...`` started from a cell (:class:`SlurmNodes`);
* ``virtual``: the virtual cluster of course_lib/cluster.py (network namespaces on links of a set
  bandwidth; as root, or in a user namespace of the learner's own) -- one ``torchrun`` per node through
  ``cluster.popen`` (:class:`VirtualNodes`);
* ``model``: neither; lesson 09's view of a data-parallel step (k micro-batches of compute, then one
  ring all-reduce of the gradients that nothing hides) predicts the same tables, labelled as predictions.

Every run is ``torchrun -m course_lib.run WORKER ARGS --out FILE`` on each node, rendezvous (c10d) on the
first node: the worker is the one a notebook cell would launch, rank 0's return value comes back through
the file (a folder every node sees). What is measured:

1. the all-reduce over one link (2 nodes x 1 process): lesson 08's alpha-beta fit of the sweep, turned into
   one link's rate (:func:`link_rate`), against the rate the link was set to (:func:`link_verdict`);
2. the seed talk's comparison: 1 node x 4 processes against 4 nodes x 1 process on a slow link, at gradient
   accumulation k = 1, 2, 4, 8 with the micro-batch fixed (so the global batch grows with k and each
   all-reduce is paid once per k micro-batches): samples per second per layout (:func:`layout_rows`), and
   where the slow link stops mattering (:func:`layout_verdict`);
3. hierarchy: lesson 08's ring over all ranks against a two-level all-reduce from lesson 08's pieces, on
   2 nodes x 2 ranks (:func:`hierarchy_worker`, :func:`hierarchy_verdict`).

4. data placement: each node reading only its shard of the input from a shared folder the first node serves
   over its link, against every node reading the whole set (:func:`measure_placement`, :func:`placement_verdict`;
   on SLURM and without a cluster, :func:`predicted_placement` from the link's rate, labelled as a prediction).

5. a node lost (full profile, virtual cluster): :func:`stage_node_loss` kills a node after the first
   checkpoint, times how long the other node takes to notice, resubmits, and :func:`node_loss_verdict` compares
   the resumed run with an uninterrupted one (tests/test_multinode.py checks the same in every ``make test``).

Time to target per layout and k (item 2 read as the seed talk reads it): lesson 02's measured steps to target at
each layout's global batch x that layout's time per step (:func:`ttt_rows`, :func:`ttt_table`, :func:`ttt_verdict`);
no run here trains to the target.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import cluster as vc
from ..comm import cost
from ..metrics import jackknife_stderr, line_fit
from ..tables import join_and

PATHS = ("slurm", "virtual", "model")
K_VALUES = (1, 2, 4, 8)
LINK_TOLERANCE = 0.35  # the fitted rate within 35 % of the set rate (TCP/IP headers take ~4 %, the rest is noise)
HIDDEN_AT = 0.8  # the slow link "stops mattering" once 4 nodes x 1 run at >= 80 % of 1 node x 4's throughput


def one_node(world_size: int) -> str:
    return f"1 node x {world_size}"


def many_nodes(world_size: int) -> str:
    return f"{world_size} nodes x 1"


# --------------------------------------------------------------------------- which path


def slurm_nodes() -> int:
    """How many nodes this machine's SLURM offers (0: no SLURM commands, or no controller answers)."""
    if shutil.which("sinfo") is None or shutil.which("srun") is None:
        return 0
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%D"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(int(x) for x in r.stdout.split() if x.isdigit()) if r.returncode == 0 else 0


def choose_path(slurm_node_count: int, virtual_reason: str | None, want: str = "auto") -> dict:
    """``{"path", "why"}``: SLURM with >= 2 nodes, else the virtual cluster where it can be made, else the model.
    ``want`` forces one (``"slurm"``, ``"virtual"``, ``"model"``); a forced path that cannot run is an error."""
    if want not in ("auto", *PATHS):
        raise ValueError(f"RUN_ON={want!r}: choose 'auto', 'slurm', 'virtual' or 'model'")
    can = {"slurm": slurm_node_count >= 2, "virtual": virtual_reason is None, "model": True}
    why = {"slurm": f"SLURM offers {slurm_node_count} node(s); this lesson needs at least 2",
           "virtual": f"the virtual cluster cannot be made here: {virtual_reason}", "model": ""}
    if want != "auto":
        if not can[want]:
            raise ValueError(f"RUN_ON={want!r} cannot run here: {why[want]}")
        return {"path": want, "why": f"RUN_ON={want!r} was asked for"}
    if can["slurm"]:
        return {"path": "slurm", "why": f"SLURM offers {slurm_node_count} nodes: the runs go to your cluster"}
    if can["virtual"]:
        return {"path": "virtual", "why": f"{why['slurm']}; the virtual cluster (network namespaces) can be made"}
    return {"path": "model", "why": f"{why['slurm']}, and {why['virtual']}. This lesson needs one of the two to "
                                    "measure; meanwhile it shows lesson 09's model's PREDICTIONS"}


# --------------------------------------------------------------------------- running on nodes


def _torchrun(nnodes: int, nproc: int, head: str, port: int, worker: str, args: list, out: str) -> list[str]:
    return [str(Path(sys.executable).parent / "torchrun"), "--nnodes", str(nnodes), "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{head}:{port}", "--rdzv-id", f"l13-{port}",
            "-m", "course_lib.run", worker, *[json.dumps(a) for a in args], "--out", out]


def _load(out: str):
    import torch

    return torch.load(out, weights_only=False)


class VirtualNodes:
    """Runs on the nodes of a virtual cluster (course_lib/cluster.py); ``workdir`` on the shared file system."""

    path = "virtual"

    def __init__(self, cluster: vc.Cluster, workdir: str | os.PathLike):
        self.cluster, self.workdir = cluster, Path(workdir)
        self._port = 29600

    def run(self, worker: str, args: list, *, nnodes: int, nproc: int, timeout_s: float = 600.0):
        """``worker(rank, world_size, *args)`` on ``nnodes`` nodes x ``nproc`` processes; rank 0's result."""
        self._port += 1
        out = str(self.workdir / f"result-{self._port}.pt")
        nodes = self.cluster.nodes[:nnodes]
        if len(nodes) < nnodes:
            raise ValueError(f"the virtual cluster {self.cluster.name!r} has {len(self.cluster.nodes)} nodes, "
                             f"{nnodes} asked for")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        for var in ("GLOO_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
            env.pop(var, None)
        cmd = _torchrun(nnodes, nproc, nodes[0].name, self._port, worker, args, out)
        logs = [open(self.workdir / f"run-{self._port}-{n.name}.log", "wb") for n in nodes]
        procs = [self.cluster.popen(n.name, cmd, env=env, cwd=str(self.workdir), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL) for n, log in zip(nodes, logs)]
        deadline = time.monotonic() + timeout_s
        try:
            codes = [p.wait(max(0.1, deadline - time.monotonic())) for p in procs]
        except subprocess.TimeoutExpired:
            codes = None
        finally:
            for n in nodes:
                self.cluster.kill_node(n.name)
            for p in procs:
                p.wait()
            for log in logs:
                log.close()
        if codes is None or any(codes):
            tail = "\n".join((self.workdir / f"run-{self._port}-{n.name}.log").read_text(errors="replace")[-2000:]
                             for n in nodes)
            raise RuntimeError(f"{worker} on {nnodes} node(s) x {nproc} "
                               f"{'timed out' if codes is None else f'failed (exit statuses {codes})'}:\n{tail}")
        return _load(out)


class SlurmNodes:
    """Runs on the learner's SLURM cluster: one ``srun`` per run, one torchrun task per node; ``workdir`` must be
    on a file system every node sees (the result file comes back through it). ``srun_options``: the site's
    (``--partition``, ``--account``, ``--time``)."""

    path = "slurm"

    def __init__(self, workdir: str | os.PathLike, srun_options: list[str] = (), *, wrap=None, env: dict | None = None):
        """``wrap(cmd) -> cmd`` and ``env``: how to reach SLURM from here (the tests run ``srun`` on a virtual
        cluster's head node); a login node needs neither."""
        self.workdir, self.srun_options = Path(workdir), list(srun_options)
        self.wrap, self.env = wrap or (lambda cmd: cmd), env

    def run(self, worker: str, args: list, *, nnodes: int, nproc: int, timeout_s: float = 1800.0):
        port = 20000 + os.getpid() % 20000
        out = str(self.workdir / f"result-{time.time_ns()}.pt")
        inner = _torchrun(nnodes, nproc, "HEAD", port, worker, args, out)
        # the rendezvous host is the allocation's first node, known only inside the step
        script = ('head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1); exec '
                  + " ".join(shlex.quote(a) for a in inner).replace("HEAD:", '"$head":'))
        cmd = ["srun", f"--nodes={nnodes}", "--ntasks-per-node=1", f"--cpus-per-task={nproc}", "--kill-on-bad-exit=1",
               *self.srun_options, "bash", "-c", script]
        r = subprocess.run(self.wrap(cmd), capture_output=True, text=True, timeout=timeout_s, cwd=str(self.workdir),
                           env=self.env)
        if r.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd[:6])} ...` failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
        return _load(out)


# --------------------------------------------------------------------------- 1. one link's alpha-beta


def nodes_worker(rank: int, world_size: int, sizes: list[int], iters: int, warmup: int, cfgs: list[dict],
                 spec: dict) -> dict:
    """One launch, both measurements (a launch costs seconds of start-up on every node): the all-reduce sweep
    over the ranks' links, then NeuMF at each config. A worker for ``torchrun -m course_lib.run``."""
    from ..comm.bench import allreduce_benchmark
    from ..train.workers import ncf_runs

    return {"sweep": allreduce_benchmark(rank, world_size, sizes, iters, warmup), "runs": ncf_runs(rank, world_size,
                                                                                                    cfgs, spec)}


def measure(runner, sizes: list[int], micro_batch: int, steps: int, spec: dict, base_cfg: dict | None = None,
            ks=K_VALUES, iters: int = 5, warmup: int = 1, world_size: int = 4) -> dict:
    """1 node x 4 and 4 nodes x 1, each one launch of :func:`nodes_worker`: ``{"near", "far"}`` (the sweep within
    a node, over loopback, and between nodes, over the links) and ``"layouts"`` (rows of :func:`layout_rows`)."""
    cfgs = layout_configs(micro_batch, world_size, steps, base_cfg, ks)
    out = {"layouts": []}
    for key, layout, nnodes, nproc in (("near", one_node(world_size), 1, world_size),
                                       ("far", many_nodes(world_size), world_size, 1)):
        got = runner.run("course_lib.lessons.l13_multi_node:nodes_worker", [list(sizes), iters, warmup, cfgs, spec],
                         nnodes=nnodes, nproc=nproc)
        out[key] = got["sweep"]
        out["layouts"] += layout_rows(layout, got["runs"], ks, source=runner.path)
    return out


def compute_per_sample(layouts: list[dict], near: dict, grad_bytes: int, micro_batch: int,
                       world_size: int = 4) -> float:
    """Seconds of compute per sample on one rank, from 1 node x 4's steps minus their all-reduce (the model's input)."""
    t_ar = cost.ring_allreduce_time(grad_bytes, world_size, near["alpha_s"], near["beta_s_per_byte"])
    per = sorted(max(r["step_s"] - t_ar, 0.0) / (micro_batch * r["k"])
                 for r in layouts if r["layout"] == one_node(world_size))
    if not per:
        raise ValueError(f"no '{one_node(world_size)}' rows to take the compute from")
    return per[len(per) // 2]


def compute_reading(compute_s_per_sample: float, layouts: list[dict], near: dict, grad_bytes: int, micro_batch: int,
                    world_size: int = 4, spread: float = 1.25) -> str:
    """The model's compute per sample and what it was taken from: each k's 1 node x W step less its all-reduce (the
    loopback fit) over the step's samples per rank, whose middle value :func:`compute_per_sample` takes. Lesson 09's
    model takes one constant; the values across k say whether one describes the steps (within ``spread``)."""
    head = f"compute {compute_s_per_sample * 1e6:.1f} us per sample per rank"
    rows = sorted((r for r in layouts if r["layout"] == one_node(world_size)), key=lambda r: r["k"])
    if not rows:
        return head + " (one process here, at k=1: no cluster to take it from), lesson 09's model's input."
    t_ar = cost.ring_allreduce_time(grad_bytes, world_size, near["alpha_s"], near["beta_s_per_byte"])
    per = {r["k"]: max(r["step_s"] - t_ar, 0.0) / (micro_batch * r["k"]) for r in rows}
    taken = min(per, key=lambda k: abs(per[k] - compute_s_per_sample))
    listing = ", ".join(f"{v * 1e6:.1f} us at k={k}" for k, v in per.items())
    text = (f"{head}: {one_node(world_size)}'s step less its all-reduce ({t_ar * 1e3:.1f} ms by the loopback fit) "
            f"over k x {micro_batch} samples is {listing}, and lesson 09's model takes k={taken}'s (the middle value) "
            "as one constant")
    lo, hi = min(per, key=per.get), max(per, key=per.get)
    if per[lo] > 0 and per[hi] / per[lo] > spread:
        return text + (f"; it is not one here ({per[hi] / per[lo]:.1f}x between k={hi} and k={lo}): part of a step "
                       "does not grow in proportion to k, which the model leaves out, so its one-node rows match the "
                       f"measured ones only at k={taken}.")
    return text + f"; one describes these steps (all within {spread - 1:.0%} of each other)."


def measure_link(runner, sizes: list[int], iters: int = 5, warmup: int = 1) -> list[dict]:
    """The all-reduce sweep (course_lib.comm.bench) on 2 nodes x 1 process: every byte crosses the link."""
    return runner.run("course_lib.comm.bench:allreduce_benchmark", [list(sizes), iters, warmup], nnodes=2, nproc=1)


def link_rate(rows: list[dict], ranks: int = 2) -> dict:
    """Lesson 08's fit of the sweep, read as one link: ``{"alpha_s", "beta_s_per_byte", "rate_bits_per_s"}``.
    A bandwidth-optimal all-reduce of n bytes (the ring, or halving-doubling) sends ``2 (p-1)/p n`` bytes out of
    every rank, one rank per node here: with 2 ranks n bytes each way over the link (n/2 to reduce, n/2 to gather).
    :func:`course_lib.comm.cost.link_alpha_beta_from_ring_fit` undoes that factor."""
    alpha, beta = cost.fit_alpha_beta([r["size_bytes"] for r in rows], [r["time_s"] for r in rows])
    a_link, b_link = cost.link_alpha_beta_from_ring_fit(alpha, beta, ranks)
    return {"alpha_s": a_link, "beta_s_per_byte": b_link, "rate_bits_per_s": 8 / b_link if b_link > 0 else None,
            "fit": cost.fit_text(alpha, beta), "alpha_err_s": alpha_error(rows, ranks)}


def alpha_error(rows: list[dict], ranks: int = 2) -> float | None:
    """The jackknife standard error of :func:`link_rate`'s per-message alpha: the fit redone without each size in
    turn, ``sqrt((m-1)/m * sum (a_i - mean)^2)``; None with fewer than 3 distinct sizes (no fit is left to redo).

    read f12k 13-C1 (twelfth full run): "Its 516 us per message ... is what a message costs gloo's processes on this
    machine's cores, on loopback as across the links" beside a loopback fit of 977 us: two intercepts can be called
    one cost only when they agree within their errors, and a fit gave none."""
    sizes = sorted({r["size_bytes"] for r in rows})
    if len(sizes) < 3:
        return None
    alphas = []
    for drop in sizes:
        kept = [r for r in rows if r["size_bytes"] != drop]
        a, b = cost.fit_alpha_beta([r["size_bytes"] for r in kept], [r["time_s"] for r in kept])
        alphas.append(cost.link_alpha_beta_from_ring_fit(a, b, ranks)[0])
    return jackknife_stderr(alphas)


def link_verdict(fit: dict, set_rate_bits_per_s: float | None, path: str, tolerance: float = LINK_TOLERANCE,
                 near: dict | None = None) -> str:
    """What the fit says about the link, on each path (a set rate exists only on the virtual cluster). ``near``: the
    loopback fit (:func:`link_rate` within one node), whose intercept the links' is read against
    (:func:`_intercepts`)."""
    rate = fit["rate_bits_per_s"]
    if path == "model":
        return ("PREDICTION, not a measurement: no cluster here, so no link was measured; lesson 09's model assumes "
                f"the link's rate you set ({_bits(set_rate_bits_per_s)}) and the alpha of lesson 08's fit.")
    if rate is None:
        return ("the fit found no bandwidth term: every message took about the latency. Measure larger messages "
                "(the sweep's largest should take many times the smallest).")
    if path == "slurm" or set_rate_bits_per_s is None:
        return (f"your interconnect, measured: {_bits(rate)} per link direction and {fit['alpha_s'] * 1e6:.0f} us per "
                "message, as gloo's TCP sees it (NCCL over InfiniBand would see more).")
    ratio = rate / set_rate_bits_per_s
    # the virtual cluster sets a rate only (vc.LATENCY_NOTE): the fit's intercept is no latency of the link
    alpha = _intercepts(fit, near)
    if abs(ratio - 1) <= tolerance:
        return (f"the fit recovers the link: {_bits(rate)} against the {_bits(set_rate_bits_per_s)} it was set to "
                f"({ratio:.0%}, within the {tolerance:.0%} tolerance); on loopback there is no link to find." + alpha)
    return (f"the fit does NOT recover the link: {_bits(rate)} against {_bits(set_rate_bits_per_s)} set ({ratio:.0%}, "
            f"outside {tolerance:.0%}). " + ("Something slower than the link set the pace (a busy CPU, too few "
                                             "iterations)." if ratio < 1 else "The shaping did not hold.") + alpha)


def _intercepts(far: dict, near: dict | None) -> str:
    """The links' intercept read against the loopback one, on the virtual cluster (which emulates no latency).

    read f12k 13-C1 (twelfth full run): "Its 516 us per message is not the link's latency ...: it is what a message
    costs gloo's processes on this machine's cores, on loopback as across the links" where the table right above gave
    977.3 us on loopback and 516.4 us across the links (1.9x apart on the same cores): one cost only when the two
    agree within their errors (:func:`alpha_error`, the sum of both); otherwise both are quoted and left apart."""
    from ..tables import cell_text as _fmt  # the link table's own cells (read f12k 13-S2: one number, one precision)

    a_far = _fmt(far["alpha_s"] * 1e6)
    none = " (the virtual cluster emulates none, only a rate)"
    if near is None:
        return f" Its {a_far} us per message is not the link's latency{none}."
    a_near = _fmt(near["alpha_s"] * 1e6)
    e_far, e_near = far.get("alpha_err_s"), near.get("alpha_err_s")
    both = f"{a_near} us per message on loopback and {a_far} us across the links"
    if e_far is None or e_near is None:
        return (f" The two fits' intercepts, {both}, are not the link's latency{none}; the fits carry no errors to "
                "read them against, so whether they are one cost of gloo's processes on these cores is not known.")
    err = f"(+/- {_fmt(e_near * 1e6)} and {_fmt(e_far * 1e6)} us)"
    if abs(near["alpha_s"] - far["alpha_s"]) <= e_near + e_far:
        return (f" The two fits' intercepts, {both}, agree within their errors {err}: not the link's latency{none} "
                "but one per-message cost of gloo's processes on this machine's cores.")
    return (f" The two fits' intercepts, {both}, differ by more than their errors {err}: neither is the link's "
            f"latency{none}, and they are not one per-message cost of gloo's processes on these cores (the links' "
            "is what the fit leaves over once its bandwidth term is fitted).")


def link_table(near: dict, far: dict, nodes: int, measured: bool):
    """The two fits :func:`link_verdict` reads, within a node and across the links (``near``, ``far``: the dicts of
    :func:`link_rate` or :func:`assumed_link`); ``measured``: False when no cluster measured them (assumed)."""
    from ..tables import Table

    t = Table(["where", "latency per message (us)", "rate", "fit of the whole all-reduce"],
              title=f"lesson 08's alpha-beta fit, {nodes} ranks ({'measured' if measured else 'ASSUMED: no cluster'})")
    for where, fit in ((f"{one_node(nodes)} (loopback)", near), (f"{many_nodes(nodes)} (the links)", far)):
        t.add(**{"where": where, "latency per message (us)": fit["alpha_s"] * 1e6,
                 "rate": _bits(fit["rate_bits_per_s"]), "fit of the whole all-reduce": fit["fit"]})
    return t


def _bits(rate: float | None) -> str:
    if rate is None:
        return "no rate"
    return f"{rate / 1e9:.2f} Gbit/s" if rate >= 1e9 else f"{rate / 1e6:.0f} Mbit/s"


# --------------------------------------------------------------------------- 2. 1 node x 4 vs 4 nodes x 1


def layout_configs(micro_batch: int, world_size: int, steps: int, base_cfg: dict | None = None,
                   ks=K_VALUES) -> list[dict]:
    """One TrainConfig dict per k: the micro-batch fixed, the global batch ``world_size * micro_batch * k``."""
    return [{**(base_cfg or {}), "global_batch_size": world_size * micro_batch * k, "micro_batch_size": micro_batch,
             "max_steps": steps, "stop_at_target": False, "target_hr": None} for k in ks]


def measure_layouts(runner, micro_batch: int, steps: int, spec: dict, base_cfg: dict | None = None,
                    ks=K_VALUES, world_size: int = 4) -> list[dict]:
    """NeuMF at each k on ``1 x world_size`` and ``world_size x 1``; the rows of :func:`layout_rows`."""
    cfgs = layout_configs(micro_batch, world_size, steps, base_cfg, ks)
    rows = []
    for layout, nnodes, nproc in ((one_node(world_size), 1, world_size), (many_nodes(world_size), world_size, 1)):
        records = runner.run("course_lib.train.workers:ncf_runs", [cfgs, spec], nnodes=nnodes, nproc=nproc)
        rows += layout_rows(layout, records, ks, source=runner.path)
    return rows


def layout_rows(layout: str, records: list[dict], ks=K_VALUES, source: str = "virtual") -> list[dict]:
    """One row per k from a run's records: samples per second and time per optimizer step."""
    return [{"layout": layout, "k": k, "global_batch": r["config"]["global_batch_size"],
             "samples_per_s": r["samples_per_s"], "step_s": r["train_time_s"] / max(1, r["steps"]),
             "source": source} for k, r in zip(ks, records)]


def predicted_layouts(compute_s_per_sample: float, grad_bytes: int, micro_batch: int, near: tuple[float, float],
                      far: tuple[float, float], ks=K_VALUES, world_size: int = 4) -> list[dict]:
    """Lesson 09's view of a data-parallel step: ``k * b * t_sample`` of compute, then one ring all-reduce of the
    gradients over the node's own links (``near``: alpha, beta per byte) or between nodes (``far``)."""
    rows = []
    for layout, (alpha, beta) in ((one_node(world_size), near), (many_nodes(world_size), far)):
        for k in ks:
            step = (k * micro_batch * compute_s_per_sample
                    + cost.ring_allreduce_time(grad_bytes, world_size, alpha, beta))
            rows.append({"layout": layout, "k": k, "global_batch": world_size * micro_batch * k,
                         "samples_per_s": world_size * micro_batch * k / step, "step_s": step, "source": "model"})
    return rows


def layout_table(rows: list[dict], predicted: list[dict]):
    """The rows :func:`layout_verdict` reads: the measured ones (none without a cluster), then the model's."""
    from ..tables import Table

    t = Table(["layout", "k", "global batch", "samples/s", "step (ms)", "source"],
              title="NeuMF, micro-batch fixed: measured rows, then lesson 09's predictions")
    for r in list(rows) + list(predicted):
        t.add(**{"layout": r["layout"], "k": r["k"], "global batch": f"{r['global_batch']:,}",
                 "samples/s": f"{r['samples_per_s']:,.0f}",
                 # read f12k 13-S2 (twelfth full run): "563" here beside "536.7" and the time-to-target table's "563.04"
                 "step (ms)": f"{r['step_s'] * 1e3:.2f}", "source": r["source"]})
    return t


def layout_ratios(rows: list[dict]) -> dict[int, float]:
    """k -> throughput of W nodes x 1 over 1 node x W."""
    near = {r["k"]: r["samples_per_s"] for r in rows if r["layout"].startswith("1 node x ")}
    far = {r["k"]: r["samples_per_s"] for r in rows if r["layout"].endswith(" nodes x 1")}
    return {k: far[k] / near[k] for k in near if k in far}


def extrapolated_k(rows: list[dict], hidden_at: float = HIDDEN_AT) -> tuple[float, int, int] | None:
    """Beyond the measured ks: a line ``step_s = a + c k`` through each layout's rows (per k: k micro-batches of
    compute, one all-reduce), and the k at which W nodes x 1 would run at ``hidden_at`` of 1 node x W's throughput
    (the same samples per step, so the ratio of their step times): ``(k, k as the next power of two, that k's global
    batch)``, or None where the lines never get there (the far layout's compute per k no cheaper than ``hidden_at`` of
    the near one's) or a layout has fewer than two ks.

    Read r11 13-H (eleventh full run): "accumulate more than k=8" gave no size, while the lesson's model (its
    :func:`hiding_k` over more ks) had one: k=128."""
    fits, per_k = {}, {}
    for side, pick in (("near", lambda n: n.startswith("1 node x ")), ("far", lambda n: n.endswith(" nodes x 1"))):
        rs = [r for r in rows if pick(r["layout"]) and r.get("step_s")]
        fits[side] = line_fit([r["k"] for r in rs], [r["step_s"] for r in rs]) if len(rs) >= 2 else None
        per_k.update({r["k"]: r["global_batch"] / r["k"] for r in rs})
    if fits["near"] is None or fits["far"] is None or not per_k:
        return None
    (a_n, c_n), (a_f, c_f) = fits["near"], fits["far"]
    gain = c_n - hidden_at * c_f
    if gain <= 0 or c_n <= 0:
        return None
    k = max(1.0, (hidden_at * a_f - a_n) / gain)
    k2 = 1 << math.ceil(math.log2(k))
    return k, k2, int(round(k2 * next(iter(per_k.values()))))


def _beyond(rows: list[dict], hidden_at: float) -> str:
    """The clause :func:`extrapolated_k` adds to "accumulate more than k=...": the size, or that the lines give none."""
    got = extrapolated_k(rows, hidden_at)
    if got is None:
        return " (a line through each layout's step times over k gives no k that gets there)"
    k, k2, batch = got
    # read (lead, re-run of lesson 13 on the twelfth run's results): "at about k=9.24e+03": a count in full
    about = f"{k:,.0f}" if k >= 1000 else f"{k:.3g}"
    return (f" (a line through each layout's step times over k gets there at about k={about}: the next power of two, "
            f"k={k2}, is a global batch of {batch:,}, which must still train to the target)")


def layout_verdict(rows: list[dict], hidden_at: float = HIDDEN_AT) -> str:
    """Where accumulation stops the slow link from mattering, read from the rows (measured or predicted)."""
    ratios = layout_ratios(rows)
    if not ratios:
        raise ValueError("no k has rows for both layouts ('1 node x W' and 'W nodes x 1')")
    sources = {r["source"] for r in rows}
    label = "PREDICTED by lesson 09's model" if sources == {"model"} else "measured"
    ks = sorted(ratios)
    text = ", ".join(f"k={k}: {ratios[k]:.0%}" for k in ks)
    hidden = [k for k in ks if ratios[k] >= hidden_at]
    suffix = bool(hidden) and all(ratios[k] >= hidden_at for k in ks if k >= hidden[0])
    if len(hidden) == len(ks):
        reading = (f"the slow link never mattered: already at k={ks[0]} the nodes ran at {ratios[ks[0]]:.0%} of one "
                   "node's throughput (the all-reduce is small next to the compute of a step)")
    elif suffix:
        reading = (f"accumulation hides the slow link from k={hidden[0]} on: each all-reduce is then paid once per "
                   f"{hidden[0]} micro-batches, and the nodes run at >= {hidden_at:.0%} of one node's throughput")
    elif hidden:
        reading = (f"no clear point: k={', '.join(map(str, hidden))} reached {hidden_at:.0%} but a larger k did not "
                   "(noise on a busy machine? measure more steps)")
    else:
        reading = (f"even at k={ks[-1]} the nodes reach only {ratios[ks[-1]]:.0%} of one node's throughput, short "
                   f"of the {hidden_at:.0%} at which the slow link stops mattering: accumulate more than k={ks[-1]}"
                   + _beyond(rows, hidden_at) + ", or compress the gradients (lesson 06)")
    names = sorted({r["layout"] for r in rows})
    far = next(n for n in names if n.endswith(" nodes x 1"))
    near = next(n for n in names if n.startswith("1 node x "))
    return f"{far} against {near} ({label}): {text}. {reading}."


def private_workdir() -> str:
    """A private folder (0700) for the lesson's run files (on the virtual cluster the nodes share the host's
    file system; on SLURM use a folder on the shared file system instead)."""
    return tempfile.mkdtemp(prefix="l13-")


def hiding_k(compute_s_per_sample: float, grad_bytes: int, micro_batch: int, near: tuple[float, float],
             far: tuple[float, float], hidden_at: float = HIDDEN_AT, ks=(1, 2, 4, 8, 16, 32, 64),
             world_size: int = 4) -> int | None:
    """The smallest k at which lesson 09's model has 4 nodes x 1 at ``hidden_at`` of 1 node x 4's throughput
    (None: no k of ``ks`` gets there). Exercise 13's reference."""
    ratios = layout_ratios(predicted_layouts(compute_s_per_sample, grad_bytes, micro_batch, near, far, ks, world_size))
    return next((k for k in ks if ratios[k] >= hidden_at), None)


# --------------------------------------------------------------------------- 2b. time to target per layout and k

TTT_MARGIN = 0.25  # the slow link is hidden once 4 nodes x 1 reach the target within 25 % of 1 node x 4's time
# (the same line as HIDDEN_AT read as time: 1 / 0.8 = 1.25)
TTT_NOISE = 0.10  # a ratio within 10 % of that threshold either way: too close to call from a few timed steps
# without lesson 02's curve: the linear-scaling ideal through this (batch, steps) point -- an ASSUMPTION, not a
# measurement (about what lesson 02's smallest batch takes on the full profile's data; its shape is all that matters
# here: it gives both layouts the same steps at each k)
ASSUMED_STEPS = (256, 16000)


def lesson02_steps(saved: dict | None, profile: str | None = None) -> tuple[list[tuple[int, int]] | None, str]:
    """``(points, line)``: lesson 02's fewest steps to target at each batch it measured (``[(batch, steps)]``,
    sorted; its best rule at each batch), and the line that says where the steps come from. ``points`` is None
    when the result is missing, of another profile (other data) or has fewer than two batches that reached the
    target: then :func:`steps_at` takes the :data:`ASSUMED_STEPS` ideal, and the line says so."""
    b0, s0 = ASSUMED_STEPS
    assumed = (f"; ASSUMED instead (not a measurement): the linear-scaling ideal, {s0:,} steps at batch {b0:,} and "
               "half the steps at every doubling")
    if not saved or not saved.get("rows"):
        return None, "lesson 02's steps to target are not here (run lesson 02 first to use its curve)" + assumed
    if profile and saved.get("profile") != profile:
        return None, (f"lesson 02's steps to target are of the {saved.get('profile')!r} profile, this run is "
                      f"{profile!r} (other data)" + assumed)
    best: dict[int, int] = {}
    for r in saved["rows"]:
        if r.get("steps to target"):
            b = int(r["batch size"])
            best[b] = min(best.get(b, r["steps to target"]), r["steps to target"])
    pts = sorted(best.items())
    if len(pts) < 2:
        return None, (f"only {len(pts)} batch size(s) of lesson 02 reached the target; interpolating needs two"
                      + assumed)
    listing = ", ".join(f"{s:,} at {b:,}" for b, s in pts)
    return pts, f"steps to target from lesson 02's runs here (the fewest at each batch): {listing}"


def steps_at(points: list[tuple[int, int]] | None, batch: int) -> tuple[float | None, str]:
    """Steps to target at ``batch`` from lesson 02's points: ``"measured"`` at one of its batches, ``"interpolated"``
    (a straight line in log steps against log batch between the two neighbours) between them, None with the
    reason outside them (no extrapolation: lesson 02's curve bends where it leaves perfect scaling). Without
    points, the :data:`ASSUMED_STEPS` ideal (``"assumed"``)."""
    if points is None:
        b0, s0 = ASSUMED_STEPS
        return s0 * b0 / batch, "assumed"
    at = dict(points)
    if batch in at:
        return float(at[batch]), "measured"
    lo, hi = points[0][0], points[-1][0]
    if not lo < batch < hi:
        return None, f"refused: batch {batch:,} is outside lesson 02's {lo:,}-{hi:,}"
    (b0, s0), (b1, s1) = next((p, q) for p, q in zip(points, points[1:]) if p[0] < batch < q[0])
    w = math.log(batch / b0) / math.log(b1 / b0)
    return math.exp(math.log(s0) + w * math.log(s1 / s0)), "interpolated"


def ttt_rows(layouts: list[dict], points: list[tuple[int, int]] | None) -> list[dict]:
    """Time to target per row of :func:`layout_rows` or :func:`predicted_layouts`: the steps to target at that
    row's global batch (:func:`steps_at`) x the row's time per step. No new training: the steps are lesson 02's."""
    out = []
    for r in layouts:
        steps, how = steps_at(points, r["global_batch"])
        out.append({"layout": r["layout"], "k": r["k"], "global_batch": r["global_batch"], "step_s": r["step_s"],
                    "steps": steps, "steps_how": how, "source": r["source"],
                    "time_to_target_s": steps * r["step_s"] if steps is not None else None})
    return out


def ttt_ratios(rows: list[dict]) -> dict[int, float]:
    """k -> time to target of W nodes x 1 over 1 node x W (the ks where both have one)."""
    near = {r["k"]: r["time_to_target_s"] for r in rows if r["layout"].startswith("1 node x ") and
            r["time_to_target_s"]}
    far = {r["k"]: r["time_to_target_s"] for r in rows if r["layout"].endswith(" nodes x 1") and
           r["time_to_target_s"]}
    return {k: far[k] / near[k] for k in sorted(near) if k in far}


def _ratio(x: float) -> str:
    return f"{x:.2f}x"


def ttt_title(points) -> str:
    where = ("lesson 02's measured steps to target (log-log interpolated between its batches, refused outside them)"
             if points else "the ASSUMED linear-scaling steps (lesson 02's curve is not here)")
    return ("NeuMF, time to target = steps to target at the global batch (world x micro-batch x k), from "
            f"{where}, x the layout's time per step at that k: measured, and lesson 09's model")


def ttt_table(measured: list[dict], model: list[dict], points):
    """Measured and lesson 09's model side by side, one row per layout and k (the model's rows give the keys: it
    has every layout and k; the measured columns are empty without a cluster)."""
    from ..tables import Table

    cols = ["layout", "k", "global batch", "steps to target", "steps", "step (ms), measured",
            "to target (s), measured", "nodes / 1 node, measured", "step (ms), model", "to target (s), model",
            "nodes / 1 node, model"]
    t = Table(cols, title=ttt_title(points))
    got = {(r["layout"], r["k"]): r for r in measured}
    ratios = {"measured": ttt_ratios(measured), "model": ttt_ratios(model)}
    for p in model:
        m = got.get((p["layout"], p["k"]))
        far = p["layout"].endswith(" nodes x 1")
        row = {"layout": p["layout"], "k": p["k"], "global batch": f"{p['global_batch']:,}",
               "steps to target": f"{p['steps']:,.0f}" if p["steps"] is not None else "—",
               "steps": p["steps_how"]}
        for src, r in (("measured", m), ("model", p)):
            row[f"step (ms), {src}"] = f"{r['step_s'] * 1e3:.2f}" if r else "no cluster"
            row[f"to target (s), {src}"] = (f"{r['time_to_target_s']:.2f}" if r and r["time_to_target_s"] is not None
                                           else "—")
            row[f"nodes / 1 node, {src}"] = (_ratio(ratios[src][p["k"]]) if far and p["k"] in ratios[src] else "")
        t.add(**row)
    return t


def ttt_hidden(ratios: dict[int, float], margin: float = TTT_MARGIN, noise: float = TTT_NOISE) -> dict:
    """Where the W nodes' time to target comes within ``margin`` of one node's: ``{"status", "k", "states"}``,
    status ``"always"`` (already at the smallest k), ``"from"`` (from ``k`` on, every larger k too), ``"never"``,
    or ``"cannot decide"``: a ratio within ``noise`` of the threshold, or a k within the margin followed by a
    larger one that is not."""
    limit = 1 + margin
    states = {k: ("within" if x <= limit * (1 - noise) else "outside" if x >= limit * (1 + noise) else "too close")
              for k, x in sorted(ratios.items())}
    ks = list(states)
    if not ks:
        return {"status": "cannot decide", "k": None, "states": states}
    if any(s == "too close" for s in states.values()):
        return {"status": "cannot decide", "k": None, "states": states}
    first = next((k for k in ks if states[k] == "within"), None)
    if first is None:
        return {"status": "never", "k": None, "states": states}
    if any(states[k] == "outside" for k in ks if k > first):
        return {"status": "cannot decide", "k": None, "states": states}
    return {"status": "always" if first == ks[0] else "from", "k": first, "states": states}


def _ttt_reading(rows: list[dict], margin: float, noise: float) -> tuple[str, dict]:
    ratios = ttt_ratios(rows)
    h = ttt_hidden(ratios, margin, noise)
    refused = sorted({r["k"] for r in rows if r["time_to_target_s"] is None})
    text = ", ".join(f"k={k}: {_ratio(x)}" for k, x in ratios.items()) or "no k"
    if refused:
        text += f" (k={', '.join(map(str, refused))}: no steps to target at that batch)"
    if h["status"] == "always":
        say = f"within {margin:.0%} already at k={h['k']}: the slow link never mattered to the time to target"
    elif h["status"] == "from":
        say = f"within {margin:.0%} from k={h['k']} on: accumulation hides the slow link there"
    elif h["status"] == "never":
        say = (f"never within {margin:.0%} up to k={max(ratios)}: the slow link still sets the time to target "
               f"(accumulate more than k={max(ratios)}" + _beyond(rows, 1 / (1 + margin))
               + ", or compress the gradients: lesson 06)")
    elif not ratios:
        say = "cannot decide: no k has a time to target for both layouts"
    else:
        close = [k for k, s in h["states"].items() if s == "too close"]
        say = ("cannot decide: " + (f"k={', '.join(map(str, close))} within {noise:.0%} of the {margin:.0%} "
                                    "threshold (measure more steps)" if close else
                                    "a k within the margin, then a larger k outside it (noise? measure more steps)"))
    return f"{text}; {say}", h


def _model_gap(measured: list[dict], model: list[dict], noise: float = TTT_NOISE) -> str:
    """Where the model's verdict agrees with the measured one, whether its numbers do: the ratio and the step time
    (cells of :func:`ttt_table`) where the model is furthest from the measurement, or that all are within ``noise``."""
    rm, rp = ttt_ratios(measured), ttt_ratios(model)
    got = {(r["layout"], r["k"]): r["step_s"] for r in measured}
    pairs = [(p, got[(p["layout"], p["k"])]) for p in model if (p["layout"], p["k"]) in got]
    ks = [k for k in rm if k in rp]
    if not ks or not pairs:
        return ""

    def off(a: float, b: float) -> float:
        return max(a / b, b / a)

    k = max(ks, key=lambda k: off(rp[k], rm[k]))
    p, m = max(pairs, key=lambda q: off(q[0]["step_s"], q[1]))
    if off(rp[k], rm[k]) <= 1 + noise and off(p["step_s"], m) <= 1 + noise:
        return f" on the verdict and on the numbers (its ratios and step times within {noise:.0%} of the measured)"
    return (f" on the verdict, not on the numbers: at k={k} it has {_ratio(rp[k])} against {_ratio(rm[k])} measured, "
            f"and its {p['layout']} step at k={p['k']} is {p['step_s'] * 1e3:.2f} ms against {m * 1e3:.2f} ms "
            "measured")


def ttt_steps_reading(rows: list[dict], noise: float = TTT_NOISE) -> str:
    """What accumulation cost in steps to the target, from the rows' "steps to target" (the same for both layouts at
    one k: lesson 02's steps at the global batch): a k-fold batch that takes k-fold fewer steps or more costs none;
    otherwise each k's samples to the target against k=1's say how much more it took ("" when no two k have steps).

    read f12k 13-H1 (twelfth full run): cell 12 says "Across k the table shows what accumulation costs in steps" and
    the verdict read no steps, where they fell 4,356 -> 539 from k=1 to k=8 (8.08x for 8x the batch): none."""
    layout = next((r["layout"] for r in rows if r["layout"].startswith("1 node x ")), rows[0]["layout"] if rows else "")
    steps = {r["k"]: r["steps"] for r in rows if r["layout"] == layout and r["steps"]}
    if len(steps) < 2:
        return ""
    ks = sorted(steps)
    k0, k1 = ks[0], ks[-1]
    extra = {k: steps[k] * k / (steps[k0] * k0) - 1 for k in ks[1:]}  # more samples to the target than the first k
    worst = max(extra, key=extra.get)
    fold = join_and([f"{steps[k0] / steps[k]:.2f}x" for k in ks[1:]])
    times = join_and([f"{k / k0:g}x" for k in ks[1:]])
    head = (f"steps to target fell {' -> '.join(f'{steps[k]:,.0f}' for k in ks)} from k={k0} to k={k1} ({fold} fewer "
            f"for {times} the batch)")
    if extra[worst] < 0.005:  # under the 1 % the next clause prints: k-fold as the folds above print
        return head + ": k-fold fewer or more at every k, so accumulation cost no steps here"
    if extra[worst] <= noise:
        return (head + f": at most {extra[worst]:.0%} more samples to the target (k={worst}), within the {noise:.0%} "
                "noise band, so accumulation cost about no steps here")
    return (head + f": fewer than k-fold, so accumulation cost steps: at k={worst} {extra[worst]:.0%} more samples to "
            f"the target than at k={k0}")


def ttt_verdict(measured: list[dict], model: list[dict], margin: float = TTT_MARGIN, noise: float = TTT_NOISE) -> str:
    """At which k the W nodes' time to target comes within ``margin`` of one node's, measured and by lesson 09's
    model, and whether they agree; read from the rows of :func:`ttt_rows` (the same steps for both layouts at one
    k, so the ratio there is the ratio of the step times; across k the steps are what accumulation costs)."""
    names = sorted({r["layout"] for r in model or measured})
    if not names:
        raise ValueError("time-to-target verdict: no rows (measured or model)")
    far = next((n for n in names if n.endswith(" nodes x 1")), "W nodes x 1")
    near = next((n for n in names if n.startswith("1 node x ")), "1 node x W")
    pred, hp = _ttt_reading(model, margin, 0.0)  # a prediction has no timing noise to allow for
    if not measured:
        steps = ttt_steps_reading(model, noise)  # read f12k 13-H1: what accumulation cost in steps
        return (f"time to target, {far} over {near}, PREDICTED by lesson 09's model only (no cluster measured "
                f"here): {pred}." + (f" Across k, {steps}." if steps else ""))
    meas, hm = _ttt_reading(measured, margin, noise)
    if "cannot decide" in (hm["status"], hp["status"]):
        agree = "Whether the model agrees cannot be decided from these rows"
    elif (hm["status"], hm["k"]) == (hp["status"], hp["k"]) or {hm["status"], hp["status"]} == {"never"}:
        agree = "The model agrees" + _model_gap(measured, model, noise)
    else:
        agree = "The model does NOT agree (it leaves out what the measurement saw: the machine's load, gloo's copies)"
    src = sorted({r["source"] for r in measured})
    best_m = min((r for r in measured if r["time_to_target_s"]), key=lambda r: r["time_to_target_s"], default=None)
    best = ""
    if best_m:
        best = (f" Fastest measured: {best_m['layout']} at k={best_m['k']} ({best_m['time_to_target_s']:.2f} s).")
    steps = ttt_steps_reading(measured or model, noise)  # read f12k 13-H1: what accumulation cost in steps
    steps = f" Across k, {steps}." if steps else ""
    return (f"time to target, {far} over {near}, measured ({', '.join(src)}): {meas}. Lesson 09's model: {pred}. "
            f"{agree}.{steps}{best}")


# --------------------------------------------------------------------------- figures


def plot_sweeps(near_rows: list[dict], far_rows: list[dict], near_fit: dict, far_fit: dict, ranks: int = 4, ax=None):
    """All-reduce time against message size within a node and between nodes, with lesson 08's fits."""
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    for rows, fit, label, color in ((near_rows, near_fit, f"{one_node(ranks)} (loopback)", "tab:blue"),
                                    (far_rows, far_fit, f"{many_nodes(ranks)} (the links)", "tab:red")):
        n = np.array([r["size_bytes"] for r in rows], dtype=float)
        ax.loglog(n, [r["time_s"] for r in rows], "o", color=color, label=f"{label}, measured")
        grid = np.geomspace(n.min(), n.max(), 50)
        model = [cost.ring_allreduce_time(x, ranks, fit["alpha_s"], fit["beta_s_per_byte"]) for x in grid]
        ax.loglog(grid, model, "-", color=color, alpha=0.6, label=f"{label}, fit: {_bits(fit['rate_bits_per_s'])}")
    ax.set_xlabel("message (bytes)")
    ax.set_ylabel("all-reduce time (s)")
    ax.legend(fontsize=8)
    ax.set_title("all-reduce within a node and across nodes")
    return ax


def plot_layouts(rows: list[dict], predicted: list[dict], hidden_at: float = HIDDEN_AT, ax=None):
    """4 nodes x 1 over 1 node x 4 against k: measured (if any) and lesson 09's prediction."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    for data, label, style in ((rows, "measured", "o-"), (predicted, "lesson 09's model (prediction)", "s--")):
        ratios = layout_ratios(data) if data else {}
        if ratios:
            ax.semilogx(list(ratios), list(ratios.values()), style, base=2, label=label)
    ax.axhline(hidden_at, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("gradient accumulation k (micro-batch fixed)")
    ax.set_ylabel("throughput, W nodes x 1 / 1 node x W")
    ax.set_ylim(0, max(1.2, ax.get_ylim()[1]))
    ax.legend(fontsize=8)
    ax.set_title(f"does accumulation hide the slow link? (dotted: {hidden_at:.0%} of one node's throughput)")
    return ax


def grad_bytes(spec: dict, cfg: dict | None = None) -> int:
    """Bytes of NeuMF's fp32 gradients for ``spec``'s data (what each step's all-reduce sums)."""
    from ..models.ncf import NeuMF
    from ..train.ncf import TrainConfig
    from ..train.workers import RunSpec, load_data

    data = load_data(RunSpec(**spec))
    c = TrainConfig(**{"global_batch_size": 256, **(cfg or {})})
    model = NeuMF(data.num_users, data.num_items, factors=c.factors, layers=c.layers)
    return 4 * sum(p.numel() for p in model.parameters())


def one_process_compute(micro_batch: int, steps: int, spec: dict, base_cfg: dict | None = None) -> float:
    """Seconds of compute per sample in this process (the model path's input: no cluster to measure on)."""
    from ..train.workers import ncf_worker

    (cfg,) = layout_configs(micro_batch, 1, steps, base_cfg, ks=(1,))
    record = ncf_worker(0, 1, cfg, spec)
    return record["train_time_s"] / max(1, record["steps"]) / micro_batch


def assumed_link(rate: str, alpha_s: float = 50e-6) -> dict:
    """A link the model path assumes (no measurement): ``rate`` in tc's units and a per-message latency."""
    bits = vc.parse_rate(rate)
    return {"alpha_s": alpha_s, "beta_s_per_byte": 8 / bits, "rate_bits_per_s": bits, "fit": "assumed"}


# --------------------------------------------------------------------------- 3. hierarchy: a two-level all-reduce


def hierarchy_worker(rank: int, world_size: int, sizes: list[int], iters: int = 3) -> list[dict]:
    """Lesson 08's ring over all ranks against a two-level all-reduce built from lesson 08's pieces: a binomial
    reduce inside each node (to its first rank), the ring among the nodes' first ranks, a binomial broadcast
    back inside each node. Ranks are numbered node by node (torchrun does); ``$LOCAL_WORLD_SIZE`` per node.
    Rows ``{"size_bytes", "algorithm", "time_s"}`` (the slowest rank's median), checked against the sum."""
    import torch
    import torch.distributed as dist

    from .. import dist as cdist
    from ..comm.collectives import (binomial_tree_broadcast, binomial_tree_reduce_schedule, ring_allreduce,
                                    run_schedule)

    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    if world_size % local:
        raise ValueError(f"world_size={world_size} is not a whole number of nodes of {local} ranks")
    nnodes = world_size // local
    node_groups = [dist.new_group(list(range(i * local, (i + 1) * local))) for i in range(nnodes)]  # every rank
    leaders = dist.new_group([i * local for i in range(nnodes)])
    mine, leader = node_groups[rank // local], rank % local == 0

    def two_level(t):
        run_schedule(binomial_tree_reduce_schedule(local, t.numel(), 0), t, mine)
        if leader:
            ring_allreduce(t, leaders)
        binomial_tree_broadcast(t, 0, mine)

    algorithms = {"flat ring": lambda t: ring_allreduce(t), "two-level": two_level}
    expected = world_size * (world_size + 1) / 2
    rows = []
    for size in sizes:
        count = max(1, int(size) // 4)
        for name, fn in algorithms.items():
            t = torch.full((count,), float(rank + 1))
            fn(t)
            if not bool((t == expected).all()):
                raise AssertionError(f"{name} of {count * 4} B: rank {rank} got {t[0].item()} instead of {expected}")
            times = []
            for _ in range(iters):
                t.zero_()
                cdist.barrier()
                t0 = time.perf_counter()
                fn(t)
                times.append(time.perf_counter() - t0)
            slowest = torch.tensor([sorted(times)[len(times) // 2]], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            rows.append({"size_bytes": count * 4, "algorithm": name, "time_s": float(slowest.item()),
                         "nodes": nnodes, "ranks_per_node": local})
    return rows


def hierarchy_bytes_ratio(nodes: int, ranks_per_node: int) -> float:
    """Bytes a node sends over its link, flat ring over two-level: the ring's ``2 (p-1)/p n`` leave a node through
    its one rank whose successor is on the next node; the two-level's leaders send ``2 (m-1)/m n`` (m nodes)."""
    p, m = nodes * ranks_per_node, nodes
    return ((p - 1) / p) / ((m - 1) / m) if m > 1 else float("inf")


def hierarchy_table(rows: list[dict]):
    """The timings :func:`hierarchy_verdict` reads, one row per message size and algorithm."""
    from ..tables import Table

    t = Table(["bytes", "algorithm", "time (ms)"], title="flat ring against two-level, 2 nodes x 2 ranks")
    for r in rows:
        # read f12k 13-S2 (twelfth full run): "2185" here where the verdict says "2184.8 ms": the verdict's :.1f
        t.add(**{"bytes": f"{r['size_bytes']:,}", "algorithm": r["algorithm"], "time (ms)": f"{r['time_s'] * 1e3:.1f}"})
    return t


def hierarchy_verdict(rows: list[dict], margin: float = 1.15) -> str:
    """Which all-reduce the slow link favoured at the largest message, against what the bytes predict."""
    if not rows:
        raise ValueError("no hierarchy rows")
    top = max(r["size_bytes"] for r in rows)
    at = {r["algorithm"]: r for r in rows if r["size_bytes"] == top}
    if set(at) != {"flat ring", "two-level"}:
        raise ValueError(f"the largest message ({top} B) lacks one of the two algorithms: {sorted(at)}")
    flat, two = at["flat ring"]["time_s"], at["two-level"]["time_s"]
    expect = hierarchy_bytes_ratio(at["flat ring"]["nodes"], at["flat ring"]["ranks_per_node"])
    head = (f"at {top:,} B the flat ring took {flat * 1e3:.1f} ms and the two-level all-reduce {two * 1e3:.1f} ms "
            f"({flat / two:.2f}x); the bytes over each node's link predict {expect:.2f}x where the link sets the pace")
    if flat / two >= margin:
        return head + ": the two-level all-reduce wins by sending fewer bytes over the slow link."
    if two / flat >= margin:
        return head + (": the flat ring won -- the extra steps inside the node cost more than the link saved "
                       "(a fast link, or small messages).")
    return head + ": no clear winner (within 15 %)."


# --------------------------------------------------------------------------- 4. data placement: a shard per node or all


# What a node runs to read its input: every file named, over HTTP from the node that holds the shared folder (on the
# virtual cluster: node0, as an NFS server or a head node would serve it), timed from the first request to the
# last byte. Standard library only.
FETCH = """
import json, sys, time, urllib.request
base, names = sys.argv[1], sys.argv[2:]
start, got = time.perf_counter(), 0
for name in names:
    with urllib.request.urlopen(base + "/" + name, timeout=300) as r:
        while chunk := r.read(1 << 20):
            got += len(chunk)
print(json.dumps({"bytes": got, "seconds": time.perf_counter() - start}))
"""
PLACEMENTS = ("a shard per node", "the whole set on every node")
PLACEMENT_PORT = 8070


def write_shards(spec: dict, folder: str | os.PathLike, nodes: int) -> list[str]:
    """The training interactions of ``spec``'s data as ``nodes`` shard files (int32 user and item columns, one
    contiguous slice each, ``np.save``) in ``folder``; their names."""
    import numpy as np

    from ..train.workers import RunSpec, load_data

    data = load_data(RunSpec(**spec))
    pairs = np.stack([data.train_users.numpy(), data.train_items.numpy()], axis=1).astype(np.int32)
    names = []
    for k, part in enumerate(np.array_split(pairs, nodes)):
        names.append(f"shard-{k:03d}-of-{nodes:03d}.npy")
        np.save(Path(folder) / names[-1], part)
    return names


def placement_files(placement: str, names: list[str], node: int) -> list[str]:
    """The files ``node`` reads: its own shard, or all of them."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement {placement!r}: choose one of {PLACEMENTS}")
    return [names[node]] if placement == PLACEMENTS[0] else list(names)


def measure_placement(cluster: vc.Cluster, spec: dict, workdir: str | os.PathLike, timeout_s: float = 300.0) -> dict:
    """Every node reads its input from the shared folder that node0 serves over its link, all nodes at once, for
    each placement: rows ``{"placement", "node", "bytes", "seconds"}`` and ``total_bytes`` (the whole set)."""
    folder = Path(workdir) / "shared-input"
    folder.mkdir()
    names = write_shards(spec, folder, len(cluster.nodes))
    head = cluster.nodes[0]
    server = cluster.popen(head.name, [sys.executable, "-m", "http.server", "--bind", head.address,
                                       str(PLACEMENT_PORT), "--directory", str(folder)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    base = f"http://{head.name}:{PLACEMENT_PORT}"
    rows = []
    try:
        deadline = time.monotonic() + 30
        while cluster.run(head.name, [sys.executable, "-c", FETCH, base, names[0]], capture_output=True,
                          timeout=30).returncode != 0:  # until the server answers
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"the file server on {head.name} did not start (exit {server.poll()})")
            time.sleep(0.2)
        for placement in PLACEMENTS:
            procs = [cluster.popen(n.name, [sys.executable, "-c", FETCH, base,
                                            *placement_files(placement, names, k)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for k, n in enumerate(cluster.nodes)]
            for n, p in zip(cluster.nodes, procs):
                out, err = p.communicate(timeout=timeout_s)
                if p.returncode != 0:
                    raise RuntimeError(f"reading the input on {n.name} failed ({p.returncode}): {err[-2000:]}")
                rows.append({"placement": placement, "node": n.name, **json.loads(out)})
    finally:
        server.kill()
        server.wait()
    return {"rows": rows, "total_bytes": sum((folder / n).stat().st_size for n in names),
            "nodes": len(cluster.nodes), "source": "virtual"}


def predicted_placement(total_bytes: int, nodes: int, rate_bits_per_s: float) -> dict:
    """Lesson 09's kind of arithmetic for the same reads: the serving node's link carries what the other nodes
    read (it reads its own files locally), so the last node has its input after that many bytes at the rate."""
    rows = []
    for placement in PLACEMENTS:
        per_node = total_bytes / nodes if placement == PLACEMENTS[0] else total_bytes
        over_link = per_node * (nodes - 1)
        for k in range(nodes):
            rows.append({"placement": placement, "node": f"node{k}", "bytes": per_node,
                         "seconds": over_link * 8 / rate_bits_per_s if k else 0.0})
    return {"rows": rows, "total_bytes": total_bytes, "nodes": nodes, "source": "model"}


def placement_summary(result: dict) -> list[dict]:
    """Per placement: bytes read per node (the largest) and the start-up time (the slowest node: the job
    starts when every node has its input)."""
    out = []
    for placement in PLACEMENTS:
        mine = [r for r in result["rows"] if r["placement"] == placement]
        if mine:
            out.append({"placement": placement, "bytes_per_node": max(r["bytes"] for r in mine),
                        "startup_s": max(r["seconds"] for r in mine), "nodes": len(mine)})
    return out


def placement_table(result: dict):
    from ..tables import Table

    label = "PREDICTED (no cluster)" if result["source"] == "model" else "measured"
    t = Table(["placement", "bytes read per node", "of the whole set", "start-up (s), slowest node"],
              title=f"input placement on {result['nodes']} nodes, the shared folder served by node0 ({label})")
    for r in placement_summary(result):
        t.add(**{"placement": r["placement"], "bytes read per node": f"{r['bytes_per_node']:,.0f}",
                 "of the whole set": f"{r['bytes_per_node'] / result['total_bytes']:.0%}",
                 "start-up (s), slowest node": r["startup_s"]})
    return t


def placement_verdict(result: dict, margin: float = 1.25) -> str:
    """Whether sharding the input per node shortened the start-up, read from the rows (measured or predicted)."""
    by = {r["placement"]: r for r in placement_summary(result)}
    if set(by) != set(PLACEMENTS):
        raise ValueError(f"placement verdict: need rows for both placements {PLACEMENTS}, got {sorted(by)}")
    shard, whole = by[PLACEMENTS[0]], by[PLACEMENTS[1]]
    label = "PREDICTED by the link's rate" if result["source"] == "model" else "measured"
    ratio = whole["startup_s"] / shard["startup_s"] if shard["startup_s"] > 0 else math.inf
    model = result["source"] == "model"
    read, had, did = ("would read", "would have", "would shorten") if model else ("read", "had", "shortened")
    head = (f"{label}: with a shard per node each node {read} {shard['bytes_per_node']:,.0f} bytes and the last {had} "
            f"its input after {shard['startup_s']:.2f} s; with the whole set on every node "
            f"{whole['bytes_per_node']:,.0f} bytes ({whole['bytes_per_node'] / shard['bytes_per_node']:.1f}x) and "
            f"{whole['startup_s']:.2f} s ({ratio:.2f}x)")
    if ratio >= margin:
        return head + (f": sharding the input {did} the start-up, since every byte a node does not need still "
                       "crosses the serving node's one link -- the seed talk's advice to shard per node and move "
                       "data close to compute.")
    return head + (f": no start-up difference beyond {margin - 1:.0%} here (the set is small next to what the link "
                   "carries in a second, or the file system is local): sharding pays when the input is large next "
                   "to the link.")


# --------------------------------------------------------------------------- 5. a node lost, staged


def _train_ddp(c: vc.Cluster, port: int, nproc: int, args: list[str]) -> list[str]:
    return [str(Path(sys.executable).parent / "torchrun"), "--nnodes", str(len(c.nodes)), "--nproc-per-node",
            str(nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{c.nodes[0].name}:{port}", "--rdzv-id",
            f"loss-{port}", "-m", "course_lib.train_ddp", *args]


def _start_job(c: vc.Cluster, workdir: Path, tag: str, port: int, nproc: int, args: list[str]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for var in ("GLOO_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        env.pop(var, None)
    procs, logs = {}, {}
    for n in c.nodes:
        logs[n.name] = workdir / f"{tag}-{n.name}.log"
        with open(logs[n.name], "wb") as log:
            procs[n.name] = c.popen(n.name, _train_ddp(c, port, nproc, args), env=env, cwd=str(workdir), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return {"procs": procs, "logs": logs}


def _wait_job(c: vc.Cluster, job: dict, timeout_s: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    try:
        return {n: p.wait(max(0.1, deadline - time.monotonic())) for n, p in job["procs"].items()}
    except subprocess.TimeoutExpired:
        for n in job["procs"]:
            c.kill_node(n)
        raise RuntimeError("the job did not end within the time allowed:\n" + "\n".join(
            p.read_text(errors="replace")[-1500:] for p in job["logs"].values()))


def stage_node_loss(cluster: vc.Cluster, workdir: str | os.PathLike, steps: int = 60, every: int = 10, nproc: int = 1,
                    slow_rate: str | None = None, timeout_s: float = 300.0, nodes: int = 2) -> dict:
    """notebooks/beyond/ncf_ddp.sbatch's worker (``course_lib.train_ddp``, smoke data) on every node of ``c``: once
    uninterrupted, once with the last node SIGKILLed right after the first checkpoint, then resubmitted with the same
    checkpoint folder. What the other nodes did, how long they took to notice, and whether the resumed run ended
    with the uninterrupted run's model. ``slow_rate``: the links during the killed run (time to kill between two
    checkpoints); ``nodes``: the first that many nodes of ``cluster`` take part."""
    from dataclasses import replace

    from ..parallel.checkpoint import CHECKPOINT_NAME, checkpoint_params, max_relative_difference

    if not 2 <= nodes <= len(cluster.nodes):
        raise ValueError(f"nodes={nodes}: a node loss needs 2 to {len(cluster.nodes)} nodes of {cluster.name!r}")
    c = replace(cluster, nodes=cluster.nodes[:nodes])

    workdir = Path(workdir)
    base = ["--dataset", "synthetic", "--profile", "smoke", "--global-batch", "1024", "--max-steps", str(steps),
            "--checkpoint-every", str(every), "--no-target"]
    ref_dir, lost_dir = workdir / "uninterrupted", workdir / "interrupted"
    port = 29700 + os.getpid() % 200
    t0 = time.monotonic()
    ref = _start_job(c, workdir, "uninterrupted", port, nproc, base + ["--checkpoint-dir", str(ref_dir), "--out",
                                                                       str(workdir / "uninterrupted.json")])
    codes = _wait_job(c, ref, timeout_s)
    reference_s = time.monotonic() - t0
    if any(codes.values()):
        raise RuntimeError(f"the uninterrupted job failed ({codes}):\n" + ref["logs"][c.nodes[0].name].read_text())
    lost = c.nodes[-1].name
    if slow_rate:
        c.set_rate(slow_rate)
    try:
        t_start = time.monotonic()
        job = _start_job(c, workdir, "interrupted", port + 1, nproc, base + ["--checkpoint-dir", str(lost_dir)])
        deadline = time.monotonic() + timeout_s
        while not (lost_dir / CHECKPOINT_NAME).exists():
            if time.monotonic() > deadline or any(p.poll() is not None for p in job["procs"].values()):
                for n in job["procs"]:
                    c.kill_node(n)
                raise RuntimeError("the job ended or stalled before its first checkpoint")
            time.sleep(0.02)
        t_kill = time.monotonic()
        written_s = time.time() - (lost_dir / CHECKPOINT_NAME).stat().st_mtime  # the checkpoint's age at the kill
        killed = c.kill_node(lost)
        survivor = c.nodes[0].name
        code = job["procs"][survivor].wait(timeout_s)
        noticed_s = time.monotonic() - t_kill
        for n, p in job["procs"].items():
            if n != survivor:
                p.wait(30)
    finally:
        if slow_rate:
            c.set_rate(c.rate)
    for n in job["procs"]:
        c.kill_node(n)  # nothing of the failed job is left in any node
    left = c.processes()
    step_at_loss, _ = checkpoint_params(lost_dir)
    log = job["logs"][survivor].read_text(errors="replace")
    said = next((line.strip() for line in log.splitlines() if "lost its connection to node" in line), None)
    if said:  # the sentence that names the node and its ranks (the transport's own words follow in brackets)
        said = said[said.find("rank "):].split(": that node", 1)[0]
    t1 = time.monotonic()
    resumed = _start_job(c, workdir, "resumed", port + 2, nproc, base + ["--checkpoint-dir", str(lost_dir), "--out",
                                                                         str(workdir / "resumed.json")])
    codes = _wait_job(c, resumed, timeout_s)
    resumed_s = time.monotonic() - t1
    if any(codes.values()):
        raise RuntimeError(f"the resumed job failed ({codes}):\n" + resumed["logs"][survivor].read_text())
    (s_res, m_res), (s_ref, m_ref) = checkpoint_params(lost_dir), checkpoint_params(ref_dir)
    rec_ref = json.loads((workdir / "uninterrupted.json").read_text())
    rec_res = json.loads((workdir / "resumed.json").read_text())
    return {"nodes": len(c.nodes), "ranks_per_node": nproc, "steps": steps, "checkpoint_every": every,
            "lost_node": lost, "killed_processes": len(killed), "step_at_loss": step_at_loss,
            "survivor_exit": code, "noticed_s": noticed_s, "message": said, "left_after": len(left),
            "reference_s": reference_s, "resumed_s": resumed_s, "resumed_steps": s_res, "reference_steps": s_ref,
            "interrupted_s": t_kill - t_start, "kill_after_checkpoint_s": max(0.0, written_s),
            "max_relative_difference": max_relative_difference(m_res, m_ref),
            "final_hr": {"uninterrupted": rec_ref["final_hr"], "resumed": rec_res["final_hr"]},
            "collective_timeout_s": 300}


def node_loss_verdict(r: dict, tolerance: float = 1e-6, hr_tolerance: float = 2e-3) -> str:
    """What the staged loss showed: the job's end, the time to notice, and the resume against the uninterrupted."""
    ended = r["survivor_exit"] != 0
    head = (f"{r['lost_node']} was killed ({r['killed_processes']} processes) after the checkpoint of step "
            f"{r['step_at_loss']} of {r['steps']}; ")
    if not ended:
        head += "the other node's torchrun did NOT fail (the job had finished before the kill?); "
    else:
        head += (f"node0's torchrun ended with status {r['survivor_exit']}, {r['noticed_s']:.1f} s later "
                 f"({'within' if r['noticed_s'] < r['collective_timeout_s'] else 'NOT within'} the "
                 f"{r['collective_timeout_s']} s collective timeout: gloo's connection was reset at the next "
                 "all-reduce), ")
        head += (f"saying: \"{r['message']}\"; " if r["message"] else "without naming the lost node; ")
    head += f"{r['left_after']} processes were left in the nodes. "
    same = r["max_relative_difference"] <= tolerance and r["resumed_steps"] == r["reference_steps"]
    hr = r["final_hr"]
    d_hr = abs(hr["resumed"] - hr["uninterrupted"])
    exact = r["max_relative_difference"] == 0
    params = ("parameters identical to the uninterrupted run's, bit for bit," if exact else
              f"parameters within {r['max_relative_difference']:.1e} of the uninterrupted run's")
    tail = (f"Resubmitted with the same checkpoint folder it resumed at step {r['step_at_loss']} and ended at step "
            f"{r['resumed_steps']} with {params} and HR@10 {hr['resumed']:.4f} against {hr['uninterrupted']:.4f}: ")
    cost_line = "\n" + node_loss_cost(r)
    if same and d_hr <= hr_tolerance:
        return head + tail + ("the same result" + ("" if exact else " (up to float rounding)")
                              + ", as a checkpoint promises.") + cost_line
    return head + tail + (f"NOT the same result (tolerance {tolerance:g} on the parameters, {hr_tolerance:g} on "
                          "HR@10): something the checkpoint does not hold (the data order? the optimizer state?)."
                          + cost_line)


def node_loss_cost(r: dict) -> str:
    """What the lost node cost, from :func:`stage_node_loss`'s times: the resubmitted job's seconds for the steps left
    against the uninterrupted job's for all, the steps redone (those the killed job ran past its last checkpoint:
    fewer than ``checkpoint_every``), and, where the stage recorded the killed job's time to the kill, the whole.

    read f12k 13-H2 (twelfth full run): cell 0 asks "what a lost node costs" and cell 19 gave the time to notice
    (1.3 s) and the bitwise resume, not the resubmitted job's 17.61 s for steps 10-40 against 25.46 s for all 40."""
    left = r["resumed_steps"] - r["step_at_loss"]
    line = (f"What the loss cost: the resubmitted job took {r['resumed_s']:.1f} s for steps {r['step_at_loss']}-"
            f"{r['resumed_steps']} ({left} steps, its start-up included) against {r['reference_s']:.1f} s for all "
            f"{r['reference_steps']} uninterrupted; ")
    after = r.get("kill_after_checkpoint_s")
    redone = (f"steps redone: those the killed job ran past step {r['step_at_loss']}'s checkpoint, fewer than the "
              f"{r['checkpoint_every']} between checkpoints")
    line += redone + (f" (it was killed {after:.2f} s after that checkpoint was written)" if after is not None else
                      "") + "; "
    if r.get("interrupted_s") is None:
        return line + ("the loss cost the killed job's time to the kill (not recorded in this result), "
                       f"{r['noticed_s']:.1f} s to notice and the resubmission's {r['resumed_s']:.1f} s, against "
                       f"{r['reference_s']:.1f} s for the uninterrupted job.")
    total = r["interrupted_s"] + r["noticed_s"] + r["resumed_s"]
    return line + (f"in all, the killed job's {r['interrupted_s']:.1f} s to the kill, {r['noticed_s']:.1f} s to notice "
                   f"and the resubmission's {r['resumed_s']:.1f} s make {total:.1f} s against {r['reference_s']:.1f} s "
                   f"uninterrupted: the loss cost {total - r['reference_s']:+.1f} s.")
