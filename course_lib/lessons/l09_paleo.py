"""Lesson 09, "Paleo's case studies": the seed talk's figures rebuilt by the course's step model.

The seed talk (its second half) presents Paleo's results; this module rebuilds each from the course's
model (:mod:`course_lib.perf.paleo`: the real step of each network counted on the ``meta`` device,
priced on a device's datasheet; Paleo's communication schemes) with the inputs of Paleo's own case
scripts (``scripts/exp_case_*.sh`` of github.com/TalwalkarLab/paleo, commit 984bbf5):

* AlexNet (one tower), batch 2048, K80s over 20 Gbit/s Ethernet, PPP 0.62 / 1.0, strong and weak
  scaling (the talk: "about 5x" at 32 workers with butterfly all-reduce, the others flat after 4);
* Inception v3, 256 per worker, K40s over 10 Gbit/s Ethernet, PPP 0.62 / 0.72, weak scaling to 100
  workers, against the TensorFlow team's 56x on 100 GPUs the talk quotes (the talk says K20s; Paleo's
  script prices K40s: we follow the script);
* the one weird trick: 8 K20s over PCIe 2.0, 128 images each, PPP 0.46 / 0.75: data parallelism
  against Krizhevsky's hybrid (convolutions data-parallel, the fully-connected layers model-parallel),
  against the talk's 24 h, 14 h predicted and 16 h measured.

Each case ends in a table, and where the talk or Paleo gives a figure, in :class:`course_lib.compare.Comparison`
rows (:func:`paleo_comparisons`).
"""

from __future__ import annotations

import argparse
import json
import math
from functools import lru_cache

import torch

from .. import compare
from ..parallel.data_parallel import DataParallel
from ..perf import model as M
from ..perf import paleo as P
from ..perf import paleo_nets as N
from ..perf.peaks import REFERENCE_PEAKS
from ..precision import Precision
from ..tables import Table
from ..train.engine import Engine

WORKERS = (1, 2, 4, 8, 16, 32, 64, 128)

# Paleo's own estimates for its AlexNet case (ms), from running Paleo itself (github.com/TalwalkarLab/paleo
# at commit 984bbf5, Python 3.11, numpy 2.4) with the case script's settings:
#   paleo simulate nets/alex_v2.json --batch_size=2048 --network_name=ethernet20 --device_name=K80
#         --ppp_comp=0.62 --ppp_comm=1.0 --scaling=strong --use_only_gemm
# ``--use_only_gemm`` (every convolution priced as a matrix multiply) because its cuDNN heuristics need
# cuDNN v4's C API through ctypes, which this machine does not have (the script itself leaves them on;
# Paleo also loads that library for the weights update, so the run marked the device as non-GPU, which
# switches only those heuristics off). Columns: workers, forward, backward, update, compute, then
# OneToAll, TreeAllReduce, ButterflyAllReduce (ms), rounded to 0.1 ms.
PALEO_ALEXNET_STRONG = [
    (1, 904.5, 2459.6, 1.2, 3365.3, 0.0, 0.0, 0.0),
    (2, 452.6, 1230.4, 1.2, 1684.2, 161.0, 161.0, 80.5),
    (4, 226.6, 615.8, 1.2, 843.6, 482.9, 321.9, 161.0),
    (8, 113.6, 308.6, 1.2, 423.4, 1126.8, 482.9, 241.5),
    (16, 57.1, 154.9, 1.2, 213.2, 2414.6, 643.9, 321.9),
    (32, 28.9, 78.1, 1.2, 108.1, 4990.1, 804.9, 402.4),
    (64, 14.8, 39.7, 1.2, 55.6, 10141.3, 965.8, 482.9),
    (128, 7.7, 20.5, 1.2, 29.3, 20443.5, 1126.8, 563.4),
]
# Paleo's backward of AlexNet's fc6 (a 5x5 convolution over a 5x5 map: a fully connected layer) at batch
# 2048, from the same run, layer by layer: 804.1 ms of computation against 30.9 ms forward. Paleo prices
# the gradient with respect to the data as a convolution over the output gradient padded to the input's
# size, 25 times the forward's multiply-adds here; torch (and the course's count) does it as one matmul,
# as many FLOPs as the forward. That one layer is most of the gap between the two compute columns.
PALEO_FC6_BACKWARD_MS = 804.1
PALEO_FC6_FORWARD_MS = 30.9

# Paleo's own Inception v3 case at 100 workers (scripts/exp_case_inception.sh: weak, 256 per worker, K40,
# 10 Gbit/s Ethernet, PPP 0.62 / 0.72; run as above with --use_only_gemm): compute, OneToAll, TreeAllReduce,
# ButterflyAllReduce (ms).
PALEO_INCEPTION_WEAK_100 = (100, 1257.6, 2701.1, 0.9, 3959.6, 20886.2, 1476.8, 738.4)

# Paleo's own one-weird-trick case (scripts/exp_case_hybrid.sh: K20, PCIe 2.0, PPP 0.46 / 0.75, 128 images per
# GPU, 8 GPUs; run as above with --use_only_gemm, and on Python 3 with its hybrid's filter() made a list, as in
# the Python 2 it was written for), ms per step: data parallel = compute 413.6 + tree all-reduce 198.3; hybrid =
# the convolutions (forward 100.9, backward 185.8, update 0.4, tree all-reduce 26.3) + the fully connected
# layers model-parallel (forward 33.8, backward 143.8, update 2.3).
PALEO_WEIRD_TRICK_STEP_MS = {"data_parallel": 611.9, "hybrid": 493.3}

# Quoted by the seed talk (shared/seeds/004, second half), not measured here.
TALK = {
    "alexnet_butterfly_speedup_at_32": 5.0,  # "something around 5x ... butterfly all-reduce with up to 32 workers"
    "others_flat_after": 4,  # "other communication strategies ... do decently well up to maybe 4 workers"
    "tf_inception_speedup_100_gpus": 56.0,  # TensorFlow blog: "56x speed-up ... for inception on 100 GPUs"
    "mxnet_inception_speedup_128_gpus": 109.0,  # MXNet: "109 speed up for inception on 128 GPUs"
    "weird_trick_data_parallel_h": 24.0,  # Paleo's estimate for plain data parallelism, 8 GPUs
    "weird_trick_hybrid_h": 14.0,  # Paleo's estimate for the hybrid
    "weird_trick_measured_h": 16.0,  # what Krizhevsky's run took
}


@lru_cache(maxsize=8)
def net_counts(name: str) -> tuple[M.StepCounts, M.StepCounts]:
    """Two counted training steps (batch 1 and 2) of one of :data:`.paleo_nets.NETS`, on the meta device;
    any other batch is interpolated (every count of these networks is linear in the batch)."""
    with torch.device("meta"):
        one, two = N.build(name), N.build(name)
    return count_module_step(one, one.input_shape, 1), count_module_step(two, two.input_shape, 2)


def case(net: str = "alexnet", device: str | P.SpecDevice = "K80", network: str | P.SpecNetwork = "ethernet20", *,
         batch: int = 2048, ppp_comp: float = 0.62, ppp_comm: float = 1.0, scaling: str = "strong",
         workers=WORKERS, combine: str = "max") -> list[dict]:
    """One of Paleo's scaling tables from the course's model (:func:`.paleo.scaling_rows`)."""
    dev = device if isinstance(device, P.SpecDevice) else P.paleo_device(device, ppp_comp)
    nw = network if isinstance(network, P.SpecNetwork) else P.paleo_network(network, ppp_comm)
    a, b = net_counts(net)
    return P.scaling_rows(a, b, dev, nw, batch=batch, workers=workers, scaling=scaling, combine=combine)


def paleo_scaling_table(rows: list[dict], title: str = "", schemes=P.JSON_SCHEMES) -> Table:
    """The CLI's table: workers, batch per worker, the compute parts, each scheme's ms and speedup."""
    cols = ["workers", "batch/worker", "forward ms", "backward ms", "update ms", "compute ms"]
    cols += [f"{s} ms" for s in schemes] + [f"{s} speedup" for s in schemes]
    t = Table(cols, title=title)
    for r in rows:
        t.add(**{"workers": r["workers"], "batch/worker": r["batch_per_worker"], "forward ms": r["forward_ms"],
                 "backward ms": r["backward_ms"], "update ms": r["update_ms"], "compute ms": r["compute_ms"]},
              **{f"{s} ms": r["comm_ms"][s] for s in schemes}, **{f"{s} speedup": r["speedup"][s] for s in schemes})
    return t


def json_rows(rows: list[dict]) -> dict:
    """The CLI's ``--json`` object: ``{"rows": [{workers, batch_per_worker, forward_ms, backward_ms, update_ms,
    compute_ms, comm_ms: {one_to_all, tree_all_reduce, butterfly_all_reduce}}]}``."""
    keys = ("workers", "batch_per_worker", "forward_ms", "backward_ms", "update_ms", "compute_ms")
    return {"rows": [{**{k: r[k] for k in keys}, "comm_ms": {s: r["comm_ms"][s] for s in P.JSON_SCHEMES}}
                     for r in rows]}


# --------------------------------------------------------------------------- against Paleo's own numbers


def against_paleo(rows: list[dict], paleo=PALEO_ALEXNET_STRONG) -> list[dict]:
    """The course's rows beside Paleo's own (same workers): compute and each scheme's ms, and the relative
    differences ``course / Paleo - 1``."""
    theirs = {p[0]: p for p in paleo}
    out = []
    for r in rows:
        p = theirs.get(r["workers"])
        if p is None:
            continue
        row = {"workers": r["workers"], "compute ms (course)": r["compute_ms"], "compute ms (Paleo)": p[4],
               "compute diff": r["compute_ms"] / p[4] - 1}
        for s, v in zip(P.JSON_SCHEMES, p[5:]):
            row[f"{s} ms (course)"] = r["comm_ms"][s]
            row[f"{s} ms (Paleo)"] = v
            row[f"{s} diff"] = (r["comm_ms"][s] / v - 1) if v else (0.0 if r["comm_ms"][s] == 0 else math.inf)
        out.append(row)
    return out


# --------------------------------------------------------------------------- where each scheme stops


READ_SCHEMES = P.JSON_SCHEMES + ("ring_all_reduce",)  # what the lesson tabulates and plots: Paleo's three and the ring


def best_workers(rows: list[dict], scheme: str) -> tuple[int, float]:
    """``(workers, speedup)`` at the best speedup of ``scheme``."""
    r = max(rows, key=lambda r: r["speedup"][scheme])
    return r["workers"], r["speedup"][scheme]


def stops_scaling(rows: list[dict], scheme: str, gain: float = 1.10) -> int:
    """The last worker count whose speedup beats the previous row's by ``gain`` (10 %): beyond it, adding
    workers buys less than that (or loses). The first row's count if even the second does not."""
    last = rows[0]["workers"]
    for prev, r in zip(rows, rows[1:]):
        if r["speedup"][scheme] < gain * prev["speedup"][scheme]:
            break
        last = r["workers"]
    return last


def communication_dominates(rows: list[dict], scheme: str) -> int | None:
    """The first worker count at which ``scheme``'s communication takes longer than the compute, or None."""
    for r in rows:
        if r["comm_ms"][scheme] > r["compute_ms"]:
            return r["workers"]
    return None


def paleo_own_weak_speedup(workers: int, per_worker: int, scheme: str = "butterfly_all_reduce",
                           paleo=PALEO_ALEXNET_STRONG, global_batch: int = 2048) -> float | None:
    """Paleo's own weak-scaling speedup, ``p T(1) / T(p)`` with ``T = compute + communication``, from its AlexNet
    run (:data:`PALEO_ALEXNET_STRONG`): the compute of the row whose strong-scaling batch per worker is
    ``per_worker`` (``global_batch / p``), the communication of the row with ``workers`` (it depends only on the
    gradients and ``p``). None where the run has no such rows."""
    col = 5 + P.JSON_SCHEMES.index(scheme) if scheme in P.JSON_SCHEMES else None  # the columns' order (against_paleo)
    by_w = {row[0]: row for row in paleo}
    at_batch = next((row for row in paleo if global_batch / row[0] == per_worker), None)
    if col is None or at_batch is None or workers not in by_w:
        return None
    compute = at_batch[4]
    return workers * compute / (compute + by_w[workers][col])


def inception_case(workers=(1, 2, 4, 8, 16, 50, 100), combine: str = "max") -> list[dict]:
    """Paleo's Inception v3 case (``scripts/exp_case_inception.sh``): weak scaling, 256 per worker, K40,
    10 Gbit/s Ethernet, PPP 0.62 / 0.72."""
    return case("inception_v3", "K40", "ethernet", batch=256, ppp_comp=0.62, ppp_comm=0.72, scaling="weak",
                workers=workers, combine=combine)


# --------------------------------------------------------------------------- the one weird trick


FC_LAYERS = ("fc6", "dropout6", "fc7", "dropout7", "fc8", "softmax", "Global")  # model-parallel in the hybrid
IMAGENET_IMAGES = 1_281_167  # ILSVRC-2012 training images


def _is_fc(module: str) -> bool:
    """Is this (module tracker) name part of AlexNet's classifier (``PaleoNet.layers.fc6.conv``, the loss)?"""
    return module == "Global" or any(f".layers.{n}." in module + "." for n in FC_LAYERS)


def one_weird_trick(*, workers: int = 8, batch_per_gpu: int = 128, epochs: float = 90, device: str = "K20",
                    network: str = "pcie2", ppp_comp: float = 0.46, ppp_comm: float = 0.75,
                    combine: str = "max") -> dict:
    """Krizhevsky's 8-GPU AlexNet, two ways, per step and for ``epochs`` of ImageNet (Paleo's
    ``scripts/exp_case_hybrid.sh`` inputs: K20, PCIe 2.0, PPP 0.46 / 0.75, 128 images per GPU):

    * **data parallel**: every GPU the whole network on its 128 images, all the weights tree-all-reduced
      (Paleo's hybrid case uses the tree);
    * **hybrid** (the one weird trick): the convolutions data-parallel (only their weights all-reduced),
      the fully-connected layers model-parallel: each GPU computes ``1/workers`` of them for all
      ``workers x 128`` images, after fetching the others' last convolutional outputs (forward) and
      returning their gradients (backward): ``2 (workers - 1)`` transfers of one GPU's activations.

    ``epochs`` is an assumption (90 here; neither the talk nor Paleo's script states it), so the
    reading compares the ratio of the two as well as the hours."""
    dev = P.paleo_device(device, ppp_comp)
    nw = P.paleo_network(network, ppp_comm)
    a, b = net_counts("alexnet")
    local = M.interpolate(a, b, batch_per_gpu)
    everyone = M.interpolate(a, b, batch_per_gpu * workers)
    all_s = sum(P.phase_seconds(local, dev, combine).values())
    grad = a.grad_bytes
    fc_grad = sum(v for k, v in a.param_bytes_by_module.items() if _is_fc(k))
    data_parallel = all_s + P.tree_allreduce_time(grad, workers, nw)
    conv_s = sum(P.op_seconds(o, dev, combine) for o in local.ops if not _is_fc(o.module) and o.phase != "optimizer")
    fc_s = sum(P.op_seconds(o, dev, combine) for o in everyone.ops if _is_fc(o.module) and o.phase != "optimizer")
    update_s = sum(P.op_seconds(o, dev, combine) for o in local.ops if o.phase == "optimizer")
    pool5 = local.batch * 256 * 5 * 5 * 4  # bytes of one GPU's last convolutional output (256 x 5 x 5, fp32)
    fetch = 2 * (workers - 1) * pool5 * nw.beta
    hybrid = (conv_s + fc_s / workers + update_s * (grad - fc_grad + fc_grad / workers) / grad + fetch
              + P.tree_allreduce_time(grad - fc_grad, workers, nw))
    steps = epochs * IMAGENET_IMAGES / (batch_per_gpu * workers)
    return {"workers": workers, "epochs": epochs, "data_parallel_step_ms": data_parallel * 1e3,
            "hybrid_step_ms": hybrid * 1e3, "data_parallel_h": steps * data_parallel / 3600,
            "hybrid_h": steps * hybrid / 3600, "fetch_ms": fetch * 1e3,
            "conv_allreduce_ms": P.tree_allreduce_time(grad - fc_grad, workers, nw) * 1e3,
            "full_allreduce_ms": P.tree_allreduce_time(grad, workers, nw) * 1e3}


# --------------------------------------------------------------------------- what if


def today_device(name: str = "H100 SXM", dtype: str = "bf16", ppp_comp: float = 0.62) -> P.SpecDevice:
    """A reference GPU of lesson 09 (:data:`.peaks.REFERENCE_PEAKS`) as a :class:`.paleo.SpecDevice`."""

    r = REFERENCE_PEAKS[name]
    if not r.flops.get(dtype):
        raise ValueError(f"{name} has no {dtype} peak; choose one of {[k for k, v in r.flops.items() if v]}")
    return P.SpecDevice(f"{name} {dtype}", r.flops[dtype], r.memory_bandwidth, ppp_comp, r.source)


def plot_speedups(rows: list[dict], title: str = "", schemes=READ_SCHEMES, ax=None):
    """Speedup over one worker against workers (log-log), one line per scheme, linear speedup dashed."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.5))
    ws = [r["workers"] for r in rows]
    for s in schemes:
        if s in rows[0]["speedup"]:
            ax.plot(ws, [r["speedup"][s] for r in rows], "o-", label=s)
    ax.plot(ws, ws, "k--", lw=0.8, label="linear")
    ax.set(xscale="log", yscale="log", xlabel="workers", ylabel="speedup over one worker", title=title)
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax.figure, ax


def paleo_comparison_table(compared: list[dict]) -> Table:
    """:func:`against_paleo`'s rows: compute and butterfly ms, course beside Paleo, and the differences."""
    t = Table(["workers", "compute ms (course)", "compute ms (Paleo)", "compute diff",
               "butterfly ms (course)", "butterfly ms (Paleo)", "tree ms (course)", "tree ms (Paleo)"],
              title="the course's model beside Paleo's own estimates (Paleo run with --use_only_gemm)")
    for r in compared:
        t.add(
            **{
                "workers": r["workers"],
                "compute ms (course)": r["compute ms (course)"],
                "compute ms (Paleo)": r["compute ms (Paleo)"],
                "compute diff": f"{r['compute diff']:+.0%}",
                "butterfly ms (course)": r["butterfly_all_reduce ms (course)"],
                "butterfly ms (Paleo)": r["butterfly_all_reduce ms (Paleo)"],
                "tree ms (course)": r["tree_all_reduce ms (course)"],
                "tree ms (Paleo)": r["tree_all_reduce ms (Paleo)"],
            }
        )
    return t


def named_links() -> dict:
    """``{name: (alpha_s, bytes_per_s)}`` for the what-if widget: Paleo's networks (no latency in Paleo;
    5 us assumed here, the order of lesson 08's quoted interconnects) and the course's quoted NVLink and
    InfiniBand (:data:`course_lib.comm.cost.QUOTED_INTERCONNECTS`)."""
    from ..comm.cost import QUOTED_INTERCONNECTS  # noqa: PLC0415

    links = {f"Paleo {n.name} ({n.bandwidth / 1e9:g} GB/s)": (5e-6, n.bandwidth) for n in P.PALEO_NETWORKS.values()}
    links.update({k: (v["alpha_s"], v["bandwidth_Bps"]) for k, v in QUOTED_INTERCONNECTS.items()})
    return links


# --------------------------------------------------------------------------- tables and verdicts


TALK_RESOLUTION = 0.10  # the talk's figures are round ("about 5x", "24 h"): read as good to 10 %
PALEO_ROUNDING = 0.002  # Paleo's own estimates are recorded to 0.1 ms, of times of 29 ms and more


def largest_difference(compared: list[dict]) -> float:
    """The largest |course / Paleo - 1| of :func:`against_paleo`'s rows, compute and every scheme."""
    if not compared:
        raise ValueError("nothing to compare: no worker count in both tables")
    return max(abs(v) for r in compared for k, v in r.items() if k.endswith("diff"))


def _furthest(compared: list[dict], keys) -> tuple[dict, str]:
    """The row and key of :func:`against_paleo`'s rows whose course / Paleo ratio is furthest from 1 (log scale)."""
    pairs = [(r, k) for r in compared for k in keys if math.isfinite(r[k]) and r[k] > -1]
    return max(pairs, key=lambda rk: abs(math.log1p(rk[0][rk[1]])))


def schemes_table(rows: list[dict], schemes=READ_SCHEMES) -> Table:
    """Per scheme: the best speedup and where, the last worker count that still gained 10 % over the previous
    one, and the first at which communication outweighs compute ("-": at none)."""
    t = Table(["scheme", "best speedup", "at workers", "last count gaining 10 %", "most priced",
               "communication > compute from"], title="where each scheme stops scaling")
    for s in schemes:
        if s in rows[0]["speedup"]:
            w, sp = best_workers(rows, s)
            t.add(**{"scheme": s, "best speedup": f"{sp:.1f}x", "at workers": w,
                     "last count gaining 10 %": stops_scaling(rows, s), "most priced": rows[-1]["workers"],
                     "communication > compute from": communication_dominates(rows, s) or "-"})
    return t


def weak_table(rows: list[dict], scheme: str = "butterfly_all_reduce", paleo=PALEO_ALEXNET_STRONG) -> Table:
    """Weak scaling at the most workers: the global batch it assumes, and the throughput speedup and its share of
    linear, from this model and from Paleo's own step times for the same inputs (:func:`paleo_own_weak_speedup`)."""
    last = rows[-1]
    w, per = last["workers"], rows[0]["batch_per_worker"]
    own = paleo_own_weak_speedup(w, per, scheme, paleo) if paleo is not None else None
    t = Table(["whose step times", "workers", "global batch", "speedup", "of linear"],
              title=f"weak scaling, {scheme}, at the most workers")
    t.add(**{"whose step times": "this model", "workers": w, "global batch": w * last["batch_per_worker"],
             "speedup": f"{last['speedup'][scheme]:.1f}x", "of linear": f"{last['speedup'][scheme] / w:.0%}"})
    if own is not None:
        t.add(**{"whose step times": "Paleo's own (its run above)", "workers": w,
                 "global batch": w * last["batch_per_worker"], "speedup": f"{own:.1f}x", "of linear": f"{own / w:.0%}"})
    return t


def weird_trick_table(r: dict, talk=TALK, paleo_ms=PALEO_WEIRD_TRICK_STEP_MS) -> Table:
    """The one weird trick: per way, the step (this model and Paleo's own), the hours for ``r["epochs"]`` epochs
    (assumed), and the talk's hours."""
    t = Table(["way", "step (ms)", "Paleo's own step (ms)", f"hours ({r['epochs']:g} epochs, assumed)",
               "the talk's hours"], title=f"data parallel against the hybrid on {r['workers']} GPUs")
    for way, key in (("data parallel", "data_parallel"), ("hybrid", "hybrid")):
        t.add(**{"way": way, "step (ms)": r[f"{key}_step_ms"], "Paleo's own step (ms)": paleo_ms[key],
                 f"hours ({r['epochs']:g} epochs, assumed)": r[f"{key}_h"],
                 "the talk's hours": talk[f"weird_trick_{key}_h"]})
    return t


def what_if_table(rows_of: dict) -> Table:
    """``{label: rows}`` of the same case under other assumptions: the best butterfly and ring speedups and where."""
    t = Table(["variant", "butterfly best", "at", "ring best", "at "], title="AlexNet, strong scaling: what changes")
    for label, rows in rows_of.items():
        cells = {"variant": label}
        for s, col, at in (("butterfly_all_reduce", "butterfly best", "at"), ("ring_all_reduce", "ring best", "at ")):
            w, sp = best_workers(rows, s) if s in rows[0]["speedup"] else ("-", None)
            cells.update({col: "-" if sp is None else f"{sp:.1f}x", at: w})
        t.add(**cells)
    return t


def paleo_comparisons(alex: list[dict], compared: list[dict], inception: list[dict], trick: dict,
                      talk=TALK) -> list[compare.Comparison]:
    """The course's model against the figures it rebuilds, each a ratio against
    :data:`course_lib.compare.MODEL_EFFECT`: the talk's butterfly speedup at 32 workers, Paleo's own compute and
    communication (the worker count furthest apart), the quoted Inception speedup per scheme, and the hybrid's
    gain in the talk. Both sides are computed, not sampled: the interval is the resolution of the figure compared
    with (:data:`TALK_RESOLUTION`, :data:`PALEO_ROUNDING`)."""
    def against(question, value, resolution, basis):
        return compare.quantity_ratio(question, value, 0.0, needed=compare.MODEL_EFFECT, resolution=resolution,
                                      basis=basis, n="1")

    talk_basis = "the talk's round figure, to 10 %"
    out = []
    at = [r for r in alex if r["workers"] == 32]
    if at:
        out.append(against("AlexNet, butterfly speedup at 32 workers: model / the talk's 5x",
                           at[0]["speedup"]["butterfly_all_reduce"] / talk["alexnet_butterfly_speedup_at_32"],
                           TALK_RESOLUTION, talk_basis))
    comm_keys = [f"{s} diff" for s in P.JSON_SCHEMES]
    for what, keys in (("compute", ["compute diff"]), ("communication", comm_keys)):
        rows = [r for r in compared if r["workers"] > 1] if what == "communication" else compared
        r, k = _furthest(rows, keys)
        out.append(against(f"AlexNet {what}, course / Paleo's own (furthest: {k[:-5]}, {r['workers']} workers)",
                           1 + r[k], PALEO_ROUNDING, "Paleo's figures rounded to 0.1 ms"))
    last = inception[-1]
    for s in P.JSON_SCHEMES:
        out.append(against(f"Inception v3 on {last['workers']} workers, {s}: model / the quoted "
                           f"{talk['tf_inception_speedup_100_gpus']:g}x",
                           last["speedup"][s] / talk["tf_inception_speedup_100_gpus"], TALK_RESOLUTION, talk_basis))
    gain = trick["data_parallel_h"] / trick["hybrid_h"]
    talk_gain = talk["weird_trick_data_parallel_h"] / talk["weird_trick_hybrid_h"]
    out.append(against("one weird trick, the hybrid's gain over data parallel: model / Paleo in the talk",
                       gain / talk_gain, TALK_RESOLUTION, talk_basis))
    return out


# --------------------------------------------------------------------------- the command line


def cli(argv=None) -> int:
    """``python -m course_lib.bench paleo ...``: one of Paleo's scaling tables from the course's model."""
    ap = argparse.ArgumentParser(prog="python -m course_lib.bench paleo",
                                 description="Paleo's scaling table (compute + each scheme's communication) from "
                                             "lesson 09's step model, on a device and network of Paleo's")
    ap.add_argument("--net", default="alexnet", choices=sorted(N.NETS))
    ap.add_argument("--device", default="K80", choices=sorted(P.PALEO_DEVICES))
    ap.add_argument("--network", default="ethernet20", choices=sorted(P.PALEO_NETWORKS))
    ap.add_argument("--batch", type=int, default=2048, help="global batch (strong) or per worker (weak)")
    ap.add_argument("--ppp-comp", type=float, default=0.62, help="platform percent of peak, computation")
    ap.add_argument("--ppp-comm", type=float, default=1.0, help="platform percent of peak, communication")
    ap.add_argument("--scaling", default="strong", choices=["strong", "weak"])
    ap.add_argument("--workers", default=",".join(map(str, WORKERS)), help="comma-separated worker counts")
    ap.add_argument("--combine", default="max", choices=["max", "sum"],
                    help="an op's compute and memory terms: the roofline's max (default) or Paleo's sum")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args(argv)
    try:
        workers = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        ap.error(f"--workers {args.workers!r}: give comma-separated integers, e.g. 1,2,4,8")
    if args.batch < 1:
        ap.error(f"--batch {args.batch}: must be at least 1")
    try:
        rows = case(args.net, args.device, args.network, batch=args.batch, ppp_comp=args.ppp_comp,
                    ppp_comm=args.ppp_comm, scaling=args.scaling, workers=workers, combine=args.combine)
    except ValueError as e:
        ap.error(str(e))
    if args.json:
        print(json.dumps(json_rows(rows)))
        return 0
    print(paleo_scaling_table(rows, title=f"{args.net}, {args.scaling} scaling, batch {args.batch}, {args.device} "
                                    f"(PPP {args.ppp_comp:g}) over {args.network} (PPP {args.ppp_comm:g})"))
    return 0


class CrossEntropySum:
    """``loss_sum`` for the engine: cross-entropy of the logits, summed over the batch (picklable)."""

    def __call__(self, net, micro):
        x, y = micro
        return torch.nn.functional.cross_entropy(net(x), y, reduction="sum")


def count_module_step(model: torch.nn.Module, input_shape, batch: int, *, num_classes: int | None = None,
                      lr: float = 0.01) -> M.StepCounts:
    """One training step of ``model`` (a classifier: inputs ``(batch, *input_shape)`` -> logits) counted by
    lesson 09's counter (:func:`.model.count_step`) through the course's :class:`~course_lib.train.engine.Engine`
    with plain SGD (Paleo's update, ``w -= lr g``), on the ``meta`` device: ``model`` is moved there
    (its weights' values are dropped; pass a copy to keep them)."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch!r}")
    meta = torch.device("meta")
    model = model.to(meta).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, foreach=True)
    engine = Engine(model, optimizer, precision=Precision("fp32", meta), parallel=DataParallel(batch, None, meta),
                    loss_sum=CrossEntropySum())
    x = torch.empty((batch, *input_shape), device=meta)
    if num_classes is None:
        with torch.no_grad():
            num_classes = model(torch.empty((1, *input_shape), device=meta)).shape[-1]
    y = torch.zeros(batch, dtype=torch.long, device=meta)
    return M.count_step(engine, (x, y), batch_size=batch)
