"""Lesson 09, Paleo's case studies: the seed talk's figures rebuilt by the course's step model
(:mod:`course_lib.perf.paleo`) with the inputs of Paleo's case scripts (``scripts/exp_case_*.sh`` of
github.com/TalwalkarLab/paleo, commit 984bbf5): AlexNet on K80s, Inception v3 on K40s, the one weird trick.
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

# Paleo's own estimates (ms), from running Paleo (commit 984bbf5, Python 3.11) with each case script's settings
# plus --use_only_gemm: its cuDNN heuristics need cuDNN v4's C API, absent here. AlexNet:
#   paleo simulate nets/alex_v2.json --batch_size=2048 --network_name=ethernet20 --device_name=K80
#         --ppp_comp=0.62 --ppp_comm=1.0 --scaling=strong --use_only_gemm
# Columns: workers, forward, backward, update, compute, then the communication of P.JSON_SCHEMES.
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
# Paleo prices fc6's (a 5x5 convolution over a 5x5 map) data gradient as a convolution over the padded output
# gradient, 25 times the forward's multiply-adds; torch does it as one matmul. Most of the compute gap.
PALEO_FC6_BACKWARD_MS = 804.1
PALEO_FC6_FORWARD_MS = 30.9
# exp_case_inception.sh (weak, 256 per worker, K40, 10 Gbit/s, PPP 0.62 / 0.72) at 100 workers, same columns.
PALEO_INCEPTION_WEAK_100 = (100, 1257.6, 2701.1, 0.9, 3959.6, 20886.2, 1476.8, 738.4)
# exp_case_hybrid.sh (K20, PCIe 2.0, PPP 0.46 / 0.75, 128 per GPU, 8 GPUs; its filter() made a list for Python 3).
PALEO_WEIRD_TRICK_STEP_MS = {"data_parallel": 611.9, "hybrid": 493.3}

# Quoted by the seed talk, not measured here.
TALK = {
    "alexnet_32": 5.0,  # butterfly: "something around 5x ... butterfly all-reduce with up to 32 workers"
    "inception_100": 56.0,  # TensorFlow blog: "56x speed-up ... for inception on 100 GPUs"
    "data_parallel_h": 24.0, "hybrid_h": 14.0,  # Paleo's estimates for the one weird trick, 8 GPUs
}
TALK_RESOLUTION = 0.10  # the talk's figures are round ("about 5x", "24 h")
PALEO_ROUNDING = 0.002  # Paleo's estimates are recorded to 0.1 ms, of times of 29 ms and more
READ_SCHEMES = P.JSON_SCHEMES + ("ring_all_reduce",)  # Paleo's three and the course's ring
PHASES = ("forward", "backward", "update", "compute")


def case(net: str = "alexnet", device: str | P.SpecDevice = "K80", network: str | P.SpecNetwork = "ethernet20", *,
         batch: int = 2048, ppp_comp: float = 0.62, ppp_comm: float = 1.0, scaling: str = "strong",
         workers=WORKERS, combine: str = "max") -> list[dict]:
    """One of Paleo's scaling tables from the course's model (:func:`.paleo.scaling_rows`)."""
    dev = device if isinstance(device, P.SpecDevice) else P.paleo_device(device, ppp_comp)
    nw = network if isinstance(network, P.SpecNetwork) else P.paleo_network(network, ppp_comm)
    a, b = net_counts(net)
    return P.scaling_rows(a, b, dev, nw, batch=batch, workers=workers, scaling=scaling, combine=combine)


def inception_case(workers=(1, 2, 4, 8, 16, 50, 100)) -> list[dict]:
    """Paleo's Inception v3 case (``exp_case_inception.sh``)."""
    return case("inception_v3", "K40", "ethernet", batch=256, ppp_comm=0.72, scaling="weak", workers=workers)


def paleo_scaling_table(rows: list[dict], schemes=P.JSON_SCHEMES) -> Table:
    """Per worker count: batch per worker, the compute's phases (ms), each scheme's ms and speedup."""
    t = Table(["workers", "batch/worker", *PHASES, *schemes, *(f"{s} speedup" for s in schemes)])
    for r in rows:
        t.add(workers=r["workers"], **{"batch/worker": r["batch_per_worker"]},
              **{k: r[f"{k}_ms"] for k in PHASES}, **{s: r["comm_ms"][s] for s in schemes},
              **{f"{s} speedup": r["speedup"][s] for s in schemes})
    return t


def against_paleo(rows: list[dict], paleo=PALEO_ALEXNET_STRONG) -> list[dict]:
    """Per worker count in both: compute and each scheme's ms, the course's and Paleo's, and ``course / Paleo - 1``."""
    theirs = {p[0]: p for p in paleo}
    out = []
    for r in rows:
        if r["workers"] in theirs:
            p = theirs[r["workers"]]
            row = {"workers": r["workers"]}
            for k, ours, paleo_ms in [("compute", r["compute_ms"], p[4])] + [
                    (s, r["comm_ms"][s], v) for s, v in zip(P.JSON_SCHEMES, p[5:])]:
                diff = ours / paleo_ms - 1 if paleo_ms else (0.0 if ours == 0 else math.inf)
                row.update({k: ours, f"{k} (Paleo)": paleo_ms, f"{k} diff": diff})
            out.append(row)
    return out


def paleo_comparison_table(compared: list[dict]) -> Table:
    """:func:`against_paleo`'s compute (with its difference), butterfly and tree columns."""
    cols = [c for k in ("compute", "butterfly_all_reduce", "tree_all_reduce") for c in (k, f"{k} (Paleo)")]
    rows = [{**r, "compute diff": f"{r['compute diff']:+.0%}"} for r in compared]
    return Table(["workers", *cols[:2], "compute diff", *cols[2:]], rows)


def best_workers(rows: list[dict], scheme: str) -> tuple[int, float]:
    """``(workers, speedup)`` at ``scheme``'s best speedup."""
    r = max(rows, key=lambda r: r["speedup"][scheme])
    return r["workers"], r["speedup"][scheme]


def stops_scaling(rows: list[dict], scheme: str, gain: float = 1.10) -> int:
    """The last worker count whose speedup beats the previous row's by ``gain``; the first if none does."""
    last = rows[0]["workers"]
    for prev, r in zip(rows, rows[1:]):
        if r["speedup"][scheme] < gain * prev["speedup"][scheme]:
            break
        last = r["workers"]
    return last


def communication_dominates(rows: list[dict], scheme: str) -> int | None:
    """The first worker count at which ``scheme``'s communication outlasts the compute, or None."""
    return next((r["workers"] for r in rows if r["comm_ms"][scheme] > r["compute_ms"]), None)


def schemes_table(rows: list[dict], schemes=READ_SCHEMES) -> Table:
    """Per scheme: best speedup and where, the last count gaining 10 %, the first where communication > compute."""
    t = Table(["scheme", "best", "at", "gains 10 % to", "priced to", "comm > compute from"])
    for s in schemes:
        w, sp = best_workers(rows, s)
        t.add(scheme=s, best=f"{sp:.1f}x", at=w, **{"gains 10 % to": stops_scaling(rows, s),
              "priced to": rows[-1]["workers"], "comm > compute from": communication_dominates(rows, s) or "-"})
    return t


def weak_table(rows: list[dict], paleo=PALEO_ALEXNET_STRONG, global_batch: int = 2048) -> Table:
    """Butterfly weak scaling at the most workers, ``p T(1) / T(p)``, from this model and from Paleo's strong-scaling
    run: its compute at this batch per worker, its communication at these workers (set by the gradients and ``p``)."""
    w, per = rows[-1]["workers"], rows[0]["batch_per_worker"]
    speedups = {"model": rows[-1]["speedup"]["butterfly_all_reduce"]}
    comm = {row[0]: row[5 + P.JSON_SCHEMES.index("butterfly_all_reduce")] for row in paleo}
    compute = next((row[4] for row in paleo if global_batch / row[0] == per), None)
    if compute is not None and w in comm:
        speedups["Paleo's"] = w * compute / (compute + comm[w])
    t = Table(["step times", "workers", "global batch", "speedup", "of linear"])
    for who, sp in speedups.items():
        t.add(**{"step times": who, "workers": w, "global batch": w * per, "speedup": f"{sp:.1f}x",
                 "of linear": f"{sp / w:.0%}"})
    return t


FC_LAYERS = ("fc6", "dropout6", "fc7", "dropout7", "fc8", "softmax", "Global")  # model-parallel in the hybrid
IMAGENET_IMAGES = 1_281_167  # ILSVRC-2012 training images


def _is_fc(module: str) -> bool:
    """Is this module (``PaleoNet.layers.fc6.conv``, or the loss) part of AlexNet's classifier?"""
    return module == "Global" or any(f".layers.{n}." in module + "." for n in FC_LAYERS)


def one_weird_trick(*, workers: int = 8, batch_per_gpu: int = 128, epochs: float = 90, device: str = "K20",
                    network: str = "pcie2", ppp_comp: float = 0.46, ppp_comm: float = 0.75,
                    combine: str = "max") -> dict:
    """Krizhevsky's 8-GPU AlexNet per step and for ``epochs`` of ImageNet (``exp_case_hybrid.sh``'s inputs):
    data parallel (all weights tree-all-reduced), or the hybrid: convolutions data-parallel, each GPU computing
    ``1/workers`` of the fully connected layers for all images after ``2 (workers - 1)`` transfers of one GPU's
    last convolutional output. ``epochs`` is assumed (neither the talk nor Paleo states it)."""
    dev = P.paleo_device(device, ppp_comp)
    nw = P.paleo_network(network, ppp_comm)
    a, b = net_counts("alexnet")
    local = M.interpolate(a, b, batch_per_gpu)
    everyone = M.interpolate(a, b, batch_per_gpu * workers)
    grad = a.grad_bytes
    fc_grad = sum(v for k, v in a.param_bytes_by_module.items() if _is_fc(k))
    data_parallel = sum(P.phase_seconds(local, dev, combine).values()) + P.tree_allreduce_time(grad, workers, nw)
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
            "hybrid_h": steps * hybrid / 3600}


def weird_trick_table(r: dict, talk=TALK, paleo_ms=PALEO_WEIRD_TRICK_STEP_MS) -> Table:
    """Per way: the step (ms, this model and Paleo's), the hours for ``r["epochs"]`` epochs, and the talk's."""
    t = Table(["way", "step", "Paleo's step", "hours", "talk's hours"])
    for key in ("data_parallel", "hybrid"):
        t.add(**{"way": key.replace("_", " "), "step": r[f"{key}_step_ms"], "Paleo's step": paleo_ms[key],
                 "hours": r[f"{key}_h"], "talk's hours": talk[f"{key}_h"]})
    return t


def today_device(name: str = "H100 SXM", dtype: str = "bf16", ppp_comp: float = 0.62) -> P.SpecDevice:
    """A reference GPU (:data:`.peaks.REFERENCE_PEAKS`) as a :class:`.paleo.SpecDevice`."""
    r = REFERENCE_PEAKS[name]
    if not r.flops.get(dtype):
        raise ValueError(f"{name}: no {dtype} peak, only {[k for k, v in r.flops.items() if v]}")
    return P.SpecDevice(f"{name} {dtype}", r.flops[dtype], r.memory_bandwidth, ppp_comp, r.source)


def plot_speedups(rows: list[dict], title: str = "", schemes=READ_SCHEMES):
    """Speedup over one worker against workers (log-log), one line per scheme, linear dashed."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    ws = [r["workers"] for r in rows]
    for s in schemes:
        ax.plot(ws, [r["speedup"][s] for r in rows], "o-", label=s)
    ax.plot(ws, ws, "k--", lw=0.8, label="linear")
    ax.set(xscale="log", yscale="log", xlabel="workers", ylabel="speedup", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig, ax


def what_if_table(rows_of: dict) -> Table:
    """``{variant: rows}``: the best butterfly and ring speedups and where."""
    t = Table(["variant", "butterfly", "at", "ring", "at "])
    for label, rows in rows_of.items():
        (bw, bsp), (rw, rsp) = best_workers(rows, "butterfly_all_reduce"), best_workers(rows, "ring_all_reduce")
        t.add(**{"variant": label, "butterfly": f"{bsp:.1f}x", "at": bw, "ring": f"{rsp:.1f}x", "at ": rw})
    return t


def named_links() -> dict:
    """``{name: (alpha_s, bytes_per_s)}`` for the what-if widget: Paleo's networks (5 us assumed: Paleo has no
    latency) and the course's quoted NVLink and InfiniBand (:data:`course_lib.comm.cost.QUOTED_INTERCONNECTS`)."""
    from ..comm.cost import QUOTED_INTERCONNECTS  # noqa: PLC0415

    links = {f"Paleo {n.name} ({n.bandwidth / 1e9:g} GB/s)": (5e-6, n.bandwidth) for n in P.PALEO_NETWORKS.values()}
    links.update({k: (v["alpha_s"], v["bandwidth_Bps"]) for k, v in QUOTED_INTERCONNECTS.items()})
    return links


def paleo_comparisons(alex: list[dict], compared: list[dict], inception: list[dict], trick: dict,
                      talk=TALK) -> list[compare.Comparison]:
    """The model's ratios to the figures it rebuilds, against :data:`course_lib.compare.MODEL_EFFECT`: the talk's
    butterfly speedup at 32 workers, Paleo's own compute and communication (where furthest apart), the quoted
    Inception speedup per scheme, the hybrid's gain. Both sides are computed: the interval is the figure's rounding."""
    def against(question, value, resolution=TALK_RESOLUTION, basis="the talk, to 10 %"):
        return compare.quantity_ratio(question, value, 0.0, needed=compare.MODEL_EFFECT, resolution=resolution,
                                      basis=basis, n="1")

    out = [against(f"AlexNet butterfly speedup at 32 workers / the talk's {talk['alexnet_32']:g}x",
                   r["speedup"]["butterfly_all_reduce"] / talk["alexnet_32"])
           for r in alex if r["workers"] == 32]
    for what, rows, keys in (("compute", compared, ["compute diff"]),
                             ("communication", [r for r in compared if r["workers"] > 1],
                              [f"{s} diff" for s in P.JSON_SCHEMES])):
        pairs = [(r, k) for r in rows for k in keys if math.isfinite(r[k]) and r[k] > -1]
        r, k = max(pairs, key=lambda rk: abs(math.log1p(rk[0][rk[1]])))  # the furthest from 1, log scale
        out.append(against(f"AlexNet {what} / Paleo's ({k[:-5]}, {r['workers']} workers)", 1 + r[k],
                           PALEO_ROUNDING, "Paleo, to 0.1 ms"))
    last = inception[-1]
    for s in P.JSON_SCHEMES:
        out.append(against(f"Inception v3, {s}, {last['workers']} workers / quoted "
                           f"{talk['inception_100']:g}x", last["speedup"][s] / talk["inception_100"]))
    talk_gain = talk["data_parallel_h"] / talk["hybrid_h"]
    out.append(against("hybrid's gain over data parallel / the talk's",
                       trick["data_parallel_h"] / trick["hybrid_h"] / talk_gain))
    return out


def cli(argv=None) -> int:
    """``python -m course_lib.bench paleo ...``: one of Paleo's scaling tables from the course's model."""
    ap = argparse.ArgumentParser(prog="python -m course_lib.bench paleo",
                                 description="Paleo's scaling table from lesson 09's step model")
    ap.add_argument("--net", default="alexnet", choices=sorted(N.NETS))
    ap.add_argument("--device", default="K80", choices=sorted(P.PALEO_DEVICES))
    ap.add_argument("--network", default="ethernet20", choices=sorted(P.PALEO_NETWORKS))
    ap.add_argument("--batch", type=int, default=2048, help="per worker if weak")
    ap.add_argument("--ppp-comp", type=float, default=0.62, help="Paleo's PPP")
    ap.add_argument("--ppp-comm", type=float, default=1.0)
    ap.add_argument("--scaling", default="strong", choices=["strong", "weak"])
    ap.add_argument("--workers", default=",".join(map(str, WORKERS)),
                    type=lambda text: [int(w) for w in text.split(",") if w.strip()])
    ap.add_argument("--combine", default="max", choices=["max", "sum"], help="max: roofline; sum: Paleo's")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.batch < 1:
        ap.error(f"--batch {args.batch} < 1")
    try:
        rows = case(args.net, args.device, args.network, batch=args.batch, ppp_comp=args.ppp_comp,
                    ppp_comm=args.ppp_comm, scaling=args.scaling, workers=args.workers, combine=args.combine)
    except ValueError as e:
        ap.error(str(e))
    if args.json:
        keys = ("workers", "batch_per_worker", "forward_ms", "backward_ms", "update_ms", "compute_ms")
        print(json.dumps({"rows": [{**{k: r[k] for k in keys},
                                    "comm_ms": {s: r["comm_ms"][s] for s in P.JSON_SCHEMES}} for r in rows]}))
    else:
        print(paleo_scaling_table(rows))
    return 0


# Paleo's first half with the course's counter: any classifier's training step counted on the meta device
# (shapes, no values: AlexNet at batch 2048 counts in a second and no memory), through the course's Engine with
# Paleo's update, plain SGD.


def cross_entropy_sum(net, micro):
    """The engine's ``loss_sum``: cross-entropy summed over the batch."""
    x, y = micro
    return torch.nn.functional.cross_entropy(net(x), y, reduction="sum")


def count_module_step(model: torch.nn.Module, input_shape, batch: int, lr: float = 0.01) -> M.StepCounts:
    """One training step of the classifier ``model`` counted on the ``meta`` device (``model`` is moved there:
    its weights are dropped)."""
    meta = torch.device("meta")
    model = model.to(meta).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, foreach=True)
    engine = Engine(model, optimizer, precision=Precision("fp32", meta), parallel=DataParallel(batch, None, meta),
                    loss_sum=cross_entropy_sum)
    x = torch.empty((batch, *input_shape), device=meta)
    y = torch.zeros(batch, dtype=torch.long, device=meta)
    return M.count_step(engine, (x, y), batch_size=batch)


@lru_cache(maxsize=8)
def net_counts(name: str) -> tuple[M.StepCounts, M.StepCounts]:
    """Steps of one of :data:`course_lib.perf.paleo_nets.NETS` counted at batch 1 and 2 (each count is linear
    in the batch)."""
    with torch.device("meta"):
        one, two = N.build(name), N.build(name)
    return count_module_step(one, one.input_shape, 1), count_module_step(two, two.input_shape, 2)
