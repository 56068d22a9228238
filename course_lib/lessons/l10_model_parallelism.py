"""Lesson 10's measurements and their reading: tensor, pipeline, sharded and spatial parallelism.

The mechanics live in :mod:`course_lib.parallel` (``tensor``, ``pipeline``, ``sharded``,
``spatial``, ``hybrid``). This module says what lesson 10 runs on this machine
(:func:`lesson_spec`, one launch: :func:`lesson_worker`), turns the ranks' results into
tables, draws the pipeline timelines, prices BERT-base and BERT-large on a node of 8 GPUs
(memory and bytes per step, pure arithmetic), builds the decision table, and writes the
verdict from the learner's own numbers.
"""

from __future__ import annotations

import functools
import math

import torch

from . import l09_performance_model as performance_study
from ..comm import cost
from ..comm.bench import allreduce_benchmark
from ..config import pick
from ..models.bert import BertForMLM, bert_config
from ..parallel import hybrid, pipeline, sharded, spatial, tensor
from ..perf import schemes
from ..tables import Table, join_and

GiB = 2**30
# BERT-large (Devlin et al. 2018): 24 layers, hidden 1024, 16 heads, MLP 4096; both with
# BERT's WordPiece vocabulary of 30522, 512 positions and 2 segment types.
# BERT-shaped 1.3B and 6.7B: the layer shapes of GPT-3 XL and GPT-3 6.7B (Brown et al. 2020, table 2.1)
# with BERT's vocabulary: what the decision table asks about beyond BERT-large.
BERT_SHAPES = {
    "BERT-base": dict(preset="base"),
    "BERT-large": dict(preset="base", num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096),
    "BERT-1.3B": dict(preset="base", num_layers=24, hidden_size=2048, num_heads=16, intermediate_size=8192),
    "BERT-6.7B": dict(preset="base", num_layers=32, hidden_size=4096, num_heads=32, intermediate_size=16384),
}
TOLERANCE = 1e-5  # fp32, relative to the largest value compared: "equal to one process"


def lesson_spec(profile: str, mesh_dp: int | None = None) -> dict:
    """What lesson 10's one launch runs, by profile (smoke: every path, small sizes). With
    ``mesh_dp``, the launch also runs the mesh (``dp x (W / dp)``): when the mesh has as many
    ranks as the launch, one launch less to start.

    The pipeline's sizes are chosen for its bubble: each micro-batch's compute (full profile: about
    10 ms at m = 8 on one core) must be large beside a message's latency (gloo: about 0.1 ms,
    more when the machine is busy), which the formula takes as zero; smoke checks the paths only."""
    return {"mesh_dp": mesh_dp,
        "tensor": {"batch": 5, "hidden": 12, "intermediate": 30, "heads": 3, "seq": 4},
        "pipeline": {"width": pick(profile, full=1024, smoke=128), "depth": 8,
                     "batch": pick(profile, full=1024, smoke=64), "ms": [1, 2, 4, 8],
                     "schedules": ["GPipe", "1F1B"], "repeats": pick(profile, full=5, smoke=1), "native": True},
        "sharded": {"preset": "tiny", "vocab_size": pick(profile, full=4096, smoke=1024),
                    "seq_len": pick(profile, full=64, smoke=16), "global_batch": pick(profile, full=16, smoke=4),
                    "steps": pick(profile, full=6, smoke=3), "lr": 1e-3},
        "bert_pipeline": {"preset": "tiny", "vocab_size": 256, "seq_len": 16, "batch": 8, "ms": [1, 4],
                          "schedules": ["GPipe", "1F1B"]},
        "halo": {"height": 13, "width": 9, "channels": 3, "kernel": 3, "layers": 2},
        # the link between the ranks, for lesson 09's model on this machine (lesson 08's all-reduce fit)
        "allreduce": {"sizes": [2**k for k in range(8, pick(profile, full=23, smoke=19), 2)],
                      "iters": pick(profile, full=10, smoke=4)},
    }


def lesson_worker(rank: int, world_size: int, spec: dict) -> dict:
    """Lesson 10's measurements in one launch (each launch costs seconds of start-up)."""
    out = {
        "tensor": tensor.compare_with_full(rank, world_size, **spec["tensor"]),
        "dtensor": tensor.compare_dtensor(rank, world_size),
        "pipeline": pipeline.pipeline_worker(rank, world_size, spec["pipeline"]),
        "bert_pipeline": pipeline.bert_pipeline_worker(rank, world_size, spec["bert_pipeline"]),
        "sharded": sharded.sharded_worker(rank, world_size, spec["sharded"]),
        "halo": spatial.compare_halo_conv(rank, world_size, **spec["halo"]),
        "allreduce": allreduce_benchmark(rank, world_size, spec["allreduce"]["sizes"], spec["allreduce"]["iters"], 2),
    }
    if spec.get("mesh_dp"):
        out["mesh"] = hybrid.mesh_worker(rank, world_size, spec["mesh_dp"])
    return out


# --------------------------------------------------------------------------- tensor parallelism


def _ok(diff: float | None) -> str:
    return "n/a" if diff is None else ("yes" if diff <= TOLERANCE else "NO")


def tensor_table(outs: list[dict]) -> Table:
    """Largest difference from one process's full layer, over the ranks, per quantity."""
    t = Table(["what", "compared with one process", "max |difference|", "equal (fp32)"],
              title=f"tensor parallel on {len(outs)} ranks vs the full layer on one process")
    rows = [("MLP (column -> row)", "output", "mlp_out"), ("", "input gradient", "mlp_input_grad"),
            ("", "every shard's weight gradient", "mlp_weight_grads"),
            ("BERT block (attention by heads + MLP)", "output", "block_out"),
            ("", "input gradient", "block_input_grad"), ("", "weight gradients", "block_weight_grads"),
            ("column layer, gather_output=True", "output", "gathered_out"),
            ("row layer fed the full input", "output", "row_full_input_out")]
    for what, compared, key in rows:
        d = max(o["tensor"][key] for o in outs)
        t.add(**{"what": what, "compared with one process": compared, "max |difference|": f"{d:.1e}",
                 "equal (fp32)": _ok(d)})
    return t


def tensor_all_equal(outs: list[dict]) -> bool:
    keys = [k for k, v in outs[0]["tensor"].items() if k.endswith(("_out", "_grad", "_grads")) and isinstance(v, float)]
    dt = ["dtensor_out", "dtensor_input_grad", "dtensor_weight_grad", "dtensor_vs_ours"]
    return all(o["tensor"][k] <= TOLERANCE for o in outs for k in keys) and \
        all(o["dtensor"][k] <= TOLERANCE for o in outs for k in dt)


def collectives_table(outs: list[dict]) -> Table:
    """The collectives one forward + backward of the MLP ran: ours and DTensor's (CommDebugMode)."""
    t = Table(["implementation", "collectives counted (forward + backward)", "weight shard on rank 0"],
              title="what one tensor-parallel MLP step communicates")
    o = outs[0]
    t.add(
        **{
            "implementation": "ours (ColumnParallelLinear -> RowParallelLinear)",
            "collectives counted (forward + backward)": ", ".join(
                f"{k}: {v}" for k, v in o["tensor"]["mlp_collectives"].items()
            ),
            "weight shard on rank 0": f"fc: {o['tensor']['mlp_local_features']} of {o['tensor']['intermediate']} rows",
        }
    )
    t.add(
        **{
            "implementation": "DTensor (parallelize_module)",
            "collectives counted (forward + backward)": ", ".join(
                f"{k}: {v}" for k, v in o["dtensor"]["dtensor_collectives"].items()
            ),
            "weight shard on rank 0": f"fc: {o['dtensor']['dtensor_local_shape']}",
        }
    )
    return t


# --------------------------------------------------------------------------- pipeline


def bubble_table(rows: list[dict]) -> Table:
    """Predicted vs measured bubble per schedule and m, the measured excess split into what unequal op
    times explain and what went between the ops, and whether the gradients equal one process's."""
    t = Table(
        [
            "schedule",
            "p",
            "m",
            "predicted (p-1)/(m+p-1)",
            "measured",
            "difference (points)",
            "from unequal ops",
            "from between ops",
            "forward per micro-batch (ms)",
            "CPU share",
            "gradients = one process",
            "torch.distributed.pipelining = one process",
        ],
        title=f"the pipeline bubble: formula vs this machine (median over {rows[0]['runs']} runs)" if rows else "",
    )
    for r in rows:
        t.add(
            **{
                "schedule": r["schedule"],
                "p": r["p"],
                "m": r["m"],
                "predicted (p-1)/(m+p-1)": f"{r['predicted']:.3f}",
                "measured": f"{r['measured']:.3f}",
                "difference (points)": f"{100 * (r['measured'] - r['predicted']):+.1f}",
                "from unequal ops": f"{100 * (r['replayed'] - r['predicted']):+.1f}",
                "from between ops": f"{100 * (r['measured'] - r['replayed']):+.1f}",
                "forward per micro-batch (ms)": f"{r['forward_ms']:.2f}",
                "CPU share": "n/a (GPU)" if r["cpu_share"] is None else f"{r['cpu_share']:.0%}",
                "gradients = one process": _ok(r["grad_diff"]),
                # #37 (fourth full run, read r4c): "n/a (1F1B needs m >= p)" stood on every row of the deeper
                # pipelines' table, GPipe at m = 8 on 3 stages too: there torch's pipelining was not run at all
                "torch.distributed.pipelining = one process": _ok(r["native_grad_diff"])
                if r["native_grad_diff"] is not None
                else "n/a (1F1B needs m >= p)" if r["schedule"] == "1F1B" and r["m"] < r["p"]
                else "not run at this p",
            }
        )
    return t


def worst_bubble_gap(rows: list[dict]) -> float:
    """The largest |measured - predicted| over the rows, in points."""
    return max(100 * abs(r["measured"] - r["predicted"]) for r in rows)


BUBBLE_GOAL_POINTS = 10.0  # lesson 10's goal: measured within 10 points of the formula
BUSY_CPU_SHARE = 0.9  # below this share of a core while computing, another process had the core


def bubble_reading(rows: list[dict], goal: float = BUBBLE_GOAL_POINTS) -> str:
    """What the measured bubbles say against (p-1)/(m+p-1), computed from the rows with the table's
    rounding (:func:`bubble_table`): the worst row's difference in points and relative to the formula,
    against the goal, split into unequal op times and time between the ops, and the larger part named
    as the cause (or the shared cores, when the stages had less than ``BUSY_CPU_SHARE`` of a core)."""
    r = max(rows, key=lambda x: abs(x["measured"] - x["predicted"]))
    p = rows[0]["p"]
    gap = 100 * (r["measured"] - r["predicted"])
    ops, between = 100 * (r["replayed"] - r["predicted"]), 100 * (r["measured"] - r["replayed"])
    rel = (r["measured"] - r["predicted"]) / r["predicted"] if r["predicted"] else math.nan
    within = f"within the goal of {goal:g} points. " if abs(gap) <= goal else f"more than the goal of {goal:g} points. "
    text = (f"The largest gap from (p-1)/(m+p-1) at p = {p}: {r['schedule']}, m = {r['m']}, measured "
            f"{r['measured']:.3f} against {r['predicted']:.3f} ({gap:+.1f} points, {rel:+.0%} of the formula's value), "
            + within
            + f"Of it, {ops:+.1f} points come from unequal op times and {between:+.1f} from the time between ops. ")
    busy = r["cpu_share"] is not None and r["cpu_share"] < BUSY_CPU_SHARE
    if busy:
        text += (f"The stages had {r['cpu_share']:.0%} of a core while they computed: other processes share this "
                 "machine, and the formula assumes each stage a processor of its own.")
    elif abs(between) > abs(ops):
        text += (f"The larger part is between the ops (one micro-batch's forward took {r['forward_ms']:.2f} ms): the "
                 "messages between the stages and waking the stage that waits are not small beside it, and the "
                 "formula takes them as free.")
    else:
        text += ("The larger part is unequal op times (the first stage skips its input's gradient, the last "
                 "computes the loss), and the formula assumes equal ones.")
    return text


def plot_timelines(per_rank: list[dict], m: int, run: int = 0, simulated: bool = True):
    """Per schedule: which rank computes what when, measured (and simulated with the measured
    mean forward and backward times underneath, if ``simulated``). Returns ``(fig, axes)``."""
    import matplotlib.pyplot as plt

    names = [n for n in pipeline.SCHEDULES if any(r["schedule"] == n and r["m"] == m for r in per_rank[0]["rows"])]
    panels = [(n, "measured") for n in names] + ([(n, "simulated") for n in names] if simulated else [])
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 1.2 + 1.0 * len(panels) * len(per_rank) / 2), squeeze=False)
    p = len(per_rank)
    colors = {"F": "#7fb3e0", "B": "#2f6ea8"}
    for ax, (name, kind) in zip(axes[:, 0], panels):
        events = pipeline.timeline(per_rank, name, m, run)
        if kind == "simulated":
            tf = sum(e.end - e.start for e in events if e.kind == "F") / max(1, sum(e.kind == "F" for e in events))
            tb = sum(e.end - e.start for e in events if e.kind == "B") / max(1, sum(e.kind == "B" for e in events))
            events = pipeline.simulate(pipeline.SCHEDULES[name](p, m), tf, tb)
        for e in events:
            ax.barh(e.stage, e.end - e.start, left=e.start, color=colors[e.kind], edgecolor="white", height=0.8)
            if e.end - e.start > 0.03 * max(x.end for x in events):
                ax.text((e.start + e.end) / 2, e.stage, f"{e.kind}{e.mb}", ha="center", va="center", fontsize=7,
                        color="black" if e.kind == "F" else "white")
        ax.set_yticks(range(p), [f"rank {s}" for s in range(p)])
        ax.invert_yaxis()
        bubble = pipeline.idle_fraction(events)
        ax.set_title(f"{name}, p = {p}, m = {m}, {kind}: idle {bubble:.0%} "
                     f"(formula {pipeline.bubble_fraction(p, m):.0%})", fontsize=9)
    axes[-1, 0].set_xlabel("seconds (light: forward, dark: backward; gaps: the bubble)")
    fig.tight_layout()
    return fig, axes


def bert_pipeline_equal(outs: list[dict]) -> bool:
    """The pipeline over BERT's encoder: every stage's gradients equal one process's, for every schedule and m."""
    return all(r["grad_diff"] <= TOLERANCE for o in outs for r in o["bert_pipeline"]["rows"])


def in_flight_table(p: int, m: int) -> Table:
    """Micro-batches whose activations each stage holds at most, per schedule (the memory side)."""
    t = Table(["schedule"] + [f"stage {s}" for s in range(p)],
              title=f"activations held at once (micro-batches), p = {p}, m = {m}")
    for name, make in pipeline.SCHEDULES.items():
        t.add(schedule=name, **{f"stage {s}": v for s, v in enumerate(pipeline.peak_in_flight(make(p, m)))})
    return t


# --------------------------------------------------------------------------- sharded data parallelism


MEASURED_SCHEMES = {"DDP": "DDP", "ZeRO-1": "ZeRO-1", "FSDP2": "FSDP"}  # measured here -> lesson 09's model


def sharded_predictions(spec: dict, world_size: int, curves, link, gpu: bool = False) -> dict:
    """Lesson 09's model of the sharded runs measured here (the same BERT, batch and fp32 AdamW on
    ``world_size`` ranks of ``curves`` and ``link``): per measured scheme, a
    :class:`~course_lib.perf.schemes.SchemePrediction` (memory, bytes sent, step)."""
    cfg = bert_config(spec["preset"], vocab_size=spec["vocab_size"], dropout=0.0, attention_dropout=0.0,
                      max_position=spec["seq_len"])
    a, b = performance_study.bert_step_counts(cfg, (2, 4), spec["seq_len"], gpu=gpu)
    per_rank = spec["global_batch"] // world_size
    return {name: schemes.predict(a, b, curves, link, scheme=scheme, world_size=world_size,
                                  global_batch=spec["global_batch"], micro_batch=per_rank,
                                  values_per_sample=spec["seq_len"] * cfg.hidden_size, precision="fp32")
            for name, scheme in MEASURED_SCHEMES.items()}


def memory_table(outs: list[dict], predicted: dict | None = None) -> Table:
    """Bytes each rank holds per scheme (measured by counting its tensors; rank 0), bytes it sent in one
    step (counted from the collectives' tensors), step time, the largest difference of the final weights
    from DDP's, and (``predicted``: :func:`sharded_predictions`) what lesson 09's model predicts of them."""
    o = outs[0]
    w = len(outs)
    t = Table(["scheme", "parameters", "gradients", "optimizer state", "total", "vs DDP", "predicted total",
               "sent per step (vs DDP)", "predicted sent", "step (ms)", "predicted step (ms)",
               "max |w - w_DDP| after the steps"],
              title=f"memory per rank, measured on rank 0 of {w} (BERT, {o['n_params']:,} parameters, AdamW, fp32)")
    ddp_total = sum(o["DDP"][k] for k in ("parameters", "gradients", "optimizer_state"))
    for name in MEASURED_SCHEMES:
        r = o[name]
        total = r["parameters"] + r["gradients"] + r["optimizer_state"]
        pred = predicted[name] if predicted else None
        t.add(
            **{
                "scheme": name,
                "parameters": cost.human_bytes(r["parameters"]),
                "gradients": cost.human_bytes(r["gradients"]),
                "optimizer state": cost.human_bytes(r["optimizer_state"]),
                "total": cost.human_bytes(total),
                "vs DDP": f"{total / ddp_total:.2f}x",
                "predicted total": cost.human_bytes(pred.state_bytes) if pred else "-",
                "sent per step (vs DDP)": (f"{cost.human_bytes(r['sent_bytes'])} "
                                           f"({r['sent_bytes'] / o['DDP']['sent_bytes']:.2f}x)"),
                "predicted sent": cost.human_bytes(pred.sent_bytes) if pred else "-",
                "step (ms)": _ms(max(x[name]["step_s"] for x in outs)),
                "predicted step (ms)": _ms(pred.step_s) if pred else "-",
                "max |w - w_DDP| after the steps": f"{max(x[name]['max_diff_from_ddp'] for x in outs):.1e}",
            }
        )
    return t


def _ms(seconds: float) -> str:
    """A step of the memory table, in ms to three significant figures (a GPU's few-ms steps keep their digits; the
    model's reading takes its errors from these cells)."""
    ms = seconds * 1e3
    return f"{ms:.3g}" if ms < 1000 else f"{ms:.0f}"


def _gap_ms(x: float) -> str:
    """A signed gap in ms for :func:`fsdp_step_reading`: whole ms, or one decimal under 1 ms (#37, sixth full run,
    read r6c: 22.2 against 22.7 ms read "(-0 ms)")."""
    return f"{x:+.0f}" if x == 0 or abs(x) >= 0.95 else f"{x:+.1f}"


def fsdp_step_reading(table: Table) -> str:
    """FSDP2's step against DDP's, from the memory table's rows (measured and predicted step, ms): how much of
    the measured gap the model's priced messages explain, and how much is left outside the model."""
    rows = {r["scheme"]: r for r in table.rows}
    if "FSDP2" not in rows or "DDP" not in rows:
        return "no FSDP2 and DDP rows to compare"
    f, d = rows["FSDP2"], rows["DDP"]
    gap = float(f["step (ms)"]) - float(d["step (ms)"])
    if f["predicted step (ms)"] == "-":
        return f"FSDP2's step took {f['step (ms)']} ms against DDP's {d['step (ms)']} ms ({gap:+.0f} ms)."
    model_gap = float(f["predicted step (ms)"]) - float(d["predicted step (ms)"])
    out = (f"FSDP2's step took {f['step (ms)']} ms against DDP's {d['step (ms)']} ms ({gap:+.0f} ms); the model, "
           f"which prices FSDP2's gathers on the measured link and counts their bytes as sent, predicts "
           f"{f['predicted step (ms)']} against {d['predicted step (ms)']} ms ({_gap_ms(model_gap)} ms). ")
    if abs(gap) <= 1 or abs(model_gap) >= 0.5 * abs(gap):
        return out + "Its priced messages account for most of the gap."
    # #37 (full run): "messages explain at most -1 of the +35 ms": a model gap of the other sign explains none
    explained = (f"So messages explain at most {_gap_ms(model_gap)} of the {gap:+.0f} ms" if model_gap * gap > 0 else
                 f"So the priced messages explain none of the {gap:+.0f} ms (the model puts "
                 + ("the two level)" if round(model_gap) == 0 else
                    # the gap as the sentence before it prints it (a check of the fix below: "(-0.8 ms)" then
                    # "the model puts FSDP2 1 ms faster")
                    f"FSDP2 {_gap_ms(model_gap)[1:]} ms {'faster' if model_gap < 0 else 'slower'} than DDP)"))
    # read f12h 10-H1 (twelfth full run): "the rest is outside the model (per-unit hooks and the Python around each
    # gather, which a step this small is mostly made of)": lesson 10 times no step without the hooks, and lesson 09
    # finds the model under-pricing the operations themselves too; the rest is either, and this run does not split it
    return out + (explained + "; the rest the model does not predict: what it leaves out (per-unit hooks and the "
                  "Python around each gather) or prices too low (the gathers and the copies around them), which "
                  "this lesson does not time apart.")


def prediction_error(outs: list[dict], predicted: dict) -> dict:
    """Per measured scheme: the model's relative error on the bytes sent, on the state held (parameters,
    gradients, optimizer state of rank 0) and on the step time (slowest rank)."""
    o = outs[0]
    out = {}
    for name in MEASURED_SCHEMES:
        r, p = o[name], predicted[name]
        held = r["parameters"] + r["gradients"] + r["optimizer_state"]
        step = max(x[name]["step_s"] for x in outs)
        out[name] = {"sent": p.sent_bytes / r["sent_bytes"] - 1, "state": p.state_bytes / held - 1,
                     "step": p.step_s / step - 1}
    return out


def fsdp_within_goal(outs: list[dict]) -> tuple[bool, float, float]:
    """Is FSDP2's measured total per rank at most DDP's / W plus the largest unit? (ok, measured, bound)."""
    w = len(outs)
    worst, bound = 0.0, 0.0
    for o in outs:
        ddp = sum(o["DDP"][k] for k in ("parameters", "gradients", "optimizer_state"))
        fsdp = sum(o["FSDP2"][k] for k in ("parameters", "gradients", "optimizer_state"))
        worst, bound = max(worst, fsdp), ddp / w + o["largest_unit_bytes"]
    return worst <= bound, worst, bound


def sharded_equal(outs: list[dict], rel: float = 1e-4) -> bool:
    """ZeRO-1 and FSDP2 end where DDP ends (relative to how far DDP moved the weights)."""
    return all(o[k]["max_diff_from_ddp"] <= rel * max(o["ddp_moved_from_init"], 1e-12) + 1e-7
               for o in outs for k in ("ZeRO-1", "FSDP2"))


def comm_table(param_bytes: float, world_size: int) -> Table:
    """Bytes each rank sends per step, per scheme (ring collectives)."""
    t = Table(["scheme", "collectives per step", "bytes sent per rank", "vs DDP"],
              title=f"communication per step, {cost.human_bytes(param_bytes)} of gradients, W = {world_size}")
    how = {"DDP": "all-reduce of the gradients", "ZeRO-1": "reduce-scatter gradients + all-gather parameters",
           "ZeRO-2": "reduce-scatter gradients + all-gather parameters",
           "ZeRO-3 / FSDP": "all-gather (forward) + all-gather (backward) + reduce-scatter"}
    ddp = sharded.comm_bytes_per_step(param_bytes, world_size, "DDP")
    for s in sharded.SCHEMES:
        b = sharded.comm_bytes_per_step(param_bytes, world_size, s)
        t.add(**{"scheme": s, "collectives per step": how[s], "bytes sent per rank": cost.human_bytes(b),
                 "vs DDP": f"{b / ddp:.1f}x"})
    return t


# --------------------------------------------------------------------------- BERT-base and -large on 8 GPUs: lesson
# 09's model


def bert_parameters(name: str) -> dict:
    """Parameter count and shape of BERT-base / BERT-large, counted from ``models.bert`` on the meta device."""
    cfg = bert_shape(name)
    with torch.device("meta"):
        model = BertForMLM(cfg)
    largest_block = sum(p.numel() for p in model.blocks[0].parameters())
    return {"name": name, "n_params": model.num_parameters(), "cfg": cfg, "block_params": largest_block,
            "embedding_params": model.tok_emb.weight.numel()}


def bert_shape(name: str, seq_len: int = 512):
    """The :class:`~course_lib.models.bert.BertConfig` of one of :data:`BERT_SHAPES` (BERT's vocabulary,
    ``seq_len`` positions)."""
    if name not in BERT_SHAPES:
        raise ValueError(f"unknown model {name!r}; choose one of {tuple(BERT_SHAPES)}")
    shape = dict(BERT_SHAPES[name])
    return bert_config(shape.pop("preset"), vocab_size=30522, type_vocab_size=2, max_position=max(seq_len, 512),
                       **shape)


@functools.lru_cache(maxsize=16)
def bert_counts(name: str, seq_len: int, gpu: bool = True) -> tuple:
    """Lesson 09's counts of the course's BERT step for model ``name`` at 2 and 4 sequences of ``seq_len``
    tokens (on the meta device: :func:`course_lib.lessons.l09_performance_model.bert_step_counts`); any other batch
    is their interpolation. Cached: the node table and the decision table share them."""
    return tuple(performance_study.bert_step_counts(bert_shape(name, seq_len), (2, 4), seq_len, gpu=gpu))


def node_predictions(names, *, world_size: int, micro_batch: int, seq_len: int, curves, link,
                     precision: str = "mixed") -> dict[str, list]:
    """Per model: lesson 09's prediction of every scheme (:func:`course_lib.perf.schemes.predict_all`) on
    ``world_size`` devices of ``curves`` joined by ``link``, for a global batch of ``micro_batch`` per
    device (tensor and pipeline parallelism: the same global batch, in micro-batches of ``micro_batch``)."""
    out = {}
    for name in names:
        a, b = bert_counts(name, seq_len, True)
        out[name] = schemes.predict_all(a, b, curves, link, world_size=world_size,
                                        global_batch=micro_batch * world_size, micro_batch=micro_batch,
                                        values_per_sample=seq_len * bert_shape(name, seq_len).hidden_size,
                                        precision=precision)
    return out


def _gib(x: float) -> str:
    return f"{x / GiB:.2f} GiB"


def _duration(seconds: float) -> str:
    """A step's time, in ms below 10 s, else in s."""
    return f"{seconds * 1e3:.3g} ms" if seconds < 10 else f"{seconds:.0f} s"


def node_table(by_link: dict[str, dict[str, list]], title: str = "") -> Table:
    """Lesson 09's model per model and scheme: memory per rank (and how much of it is activations), bytes
    sent per rank per step, and the step on each link of ``by_link`` (name -> :func:`node_predictions`)."""
    links = list(by_link)
    first = by_link[links[0]]
    t = Table(["model", "scheme", "memory per rank", "of which activations", "sent per rank per step"]
              + [f"step (ms), {k}" for k in links] + [f"exposed comm. (ms), {k}" for k in links[:1]]
              + [f"sequences/s, {k}" for k in links[:1]], title=title)
    for name, preds in first.items():
        for i, p in enumerate(preds):
            row = {
                "model": name,
                "scheme": _scheme_label(p),
                "memory per rank": _gib(p.memory_bytes),
                "of which activations": _gib(p.activations),
                "sent per rank per step": cost.human_bytes(p.sent_bytes),
            }
            for k in links:
                row[f"step (ms), {k}"] = f"{by_link[k][name][i].step_s * 1e3:.1f}"
            row[f"exposed comm. (ms), {links[0]}"] = f"{p.exposed_comm_s * 1e3:.2f}"
            row[f"sequences/s, {links[0]}"] = f"{p.samples_per_s:,.0f}"
            t.add(**row)
    return t


def _scheme_label(p) -> str:
    if p.scheme == "tensor":
        return f"tensor parallel x{p.world_size}"
    if p.scheme == "pipeline":
        return f"pipeline x{p.world_size} (1F1B, m = {p.global_batch // p.micro_batch})"
    return p.scheme


def node_reading(by_link: dict[str, dict[str, list]], device_bytes: float) -> str:
    """What the node predictions say, computed from them: per model the choice on the first link (the
    simplest scheme as fast as the fastest, :func:`course_lib.perf.schemes.fastest_that_fits`), what
    tensor parallelism costs there and on the second link, and which schemes would not fit ``device_bytes``."""
    links = list(by_link)
    lines = []
    for name, preds in by_link[links[0]].items():
        best = schemes.fastest_that_fits(preds, device_bytes)
        too_big = [_scheme_label(p) for p in preds if p.memory_bytes > device_bytes]
        if best is None:
            lines.append(f"{name}: no scheme fits in {device_bytes / 1e9:.0f} GB per device.")
            continue
        fastest = min((p for p in preds if p.memory_bytes <= device_bytes), key=lambda p: p.step_s)
        same = [p for p in preds if p is not best and p.memory_bytes <= device_bytes
                and p.step_s <= fastest.step_s * (1 + schemes.SAME_SPEED)]
        # the ratio is printed to three places: the table's rounded steps can sit on the 10 % edge (60.2 / 54.7
        # = 1.1005 in a full run, where the unrounded 60.16 / 54.75 = 1.099 is within it)
        slowest = max(p.step_s for p in [best, *same]) / fastest.step_s
        line = (f"{name}: on {links[0]}, {_scheme_label(best)} ({best.step_s * 1e3:.0f} ms per step, "
                f"{best.samples_per_s:,.0f} sequences/s)"
                + (f", as fast as {', '.join(_scheme_label(p) for p in same)} (steps at most {slowest:.3f}x the "
                   f"fastest's, within {schemes.SAME_SPEED:.0%})" if same else ", the fastest"))
        tp = next((p for p in preds if p.scheme == "tensor"), None)
        if tp is not None and tp is not best:
            excess = (tp.step_s - best.step_s) * 1e3
            line += (f"; tensor parallelism {tp.step_s / best.step_s:.1f}x slower ({excess:.0f} ms more): its "
                     f"{cost.human_bytes(tp.sent_bytes)} of activations per step wait on the link for "
                     f"{tp.exposed_comm_s * 1e3:.0f} ms of that, the other {excess - tp.exposed_comm_s * 1e3:.0f} ms "
                     "are not communication")
            if len(links) > 1:
                slow = {p.scheme: p for p in by_link[links[1]][name]}
                line += (f", and on {links[1]} {slow['tensor'].step_s / slow[best.scheme].step_s:.1f}x "
                         f"({slow['tensor'].step_s * 1e3:.0f} ms against {slow[best.scheme].step_s * 1e3:.0f} ms)")
        line += (f". Over {device_bytes / 1e9:.0f} GB per device: {', '.join(too_big)}." if too_big
                 else f". Every scheme fits in {device_bytes / 1e9:.0f} GB per device.")
        lines.append(line)
    return "\n".join(lines)


# --------------------------------------------------------------------------- choosing, for this machine


def decision_rows(names, *, world_size: int, device_bytes: float, micro_batch: int, seq_len: int, curves, link,
                  precision: str) -> list[dict]:
    """Per model of ``names``: lesson 09's prediction of every scheme on this machine (``world_size``
    devices of ``device_bytes``, ``curves``, ``link``) at ``micro_batch`` sequences per device, the choice
    (:func:`course_lib.perf.schemes.fastest_that_fits`) and why. When nothing fits, the largest smaller
    micro-batch (halving) at which something does. One device: the model fits or it does not. The counts
    are the node table's (the optimizer as one multi-tensor operation per step, as on a GPU: at these
    sizes a small part of the step on a CPU too)."""
    rows = []
    for name in names:
        a, b = bert_counts(name, seq_len, True)
        kinds = schemes.SCHEMES if world_size > 1 else ("DDP",)
        values = seq_len * bert_shape(name, seq_len).hidden_size

        def at(micro):
            return schemes.predict_all(a, b, curves, link, world_size=world_size, global_batch=micro * world_size,
                                       micro_batch=micro, values_per_sample=values, precision=precision, schemes=kinds)

        preds = at(micro_batch)
        best = schemes.fastest_that_fits(preds, device_bytes)
        smaller, micro = None, micro_batch
        while best is None and micro > 1 and smaller is None:
            micro //= 2
            found = schemes.fastest_that_fits(at(micro), device_bytes)
            smaller = (micro, found) if found else None
        rows.append({"model": name, "parameters": schemes._n_params(a), "micro_batch": micro_batch,
                     "predictions": preds, "choice": best, "smaller": smaller,
                     "why": decision_why(preds, best, device_bytes, world_size, smaller)})
    return rows


def decision_why(preds: list, best, device_bytes: float, world_size: int, smaller=None) -> str:
    """Why ``best`` (or nothing) was chosen among ``preds``, from their numbers; ``smaller``: ``(micro-batch,
    choice)`` where something fits at a smaller micro-batch."""
    ddp = next(p for p in preds if p.scheme == "DDP")
    least = min(preds, key=lambda p: p.memory_bytes)
    if best is None:
        text = (f"nothing fits: the least memory is {_scheme_label(least)}'s {_gib(least.memory_bytes)} per device "
                f"({_gib(least.activations)} of it activations) against {_gib(device_bytes)}")
        if smaller:
            m, p = smaller
            return text + (f"; with {m} sequence{'s' if m > 1 else ''} per device, "
                           f"{_scheme_label(p)} fits ({_gib(p.memory_bytes)}, "
                           f"{_duration(p.step_s)} per step)")
        return text + ": more devices, or recomputing activations in backward"
    if world_size == 1:
        return f"fits on the device ({_gib(best.memory_bytes)} of {_gib(device_bytes)})"
    fits = [p for p in preds if p.memory_bytes <= device_bytes]
    fastest = min(fits, key=lambda p: p.step_s)
    if best.scheme == "DDP":
        return (f"fits on every device ({_gib(best.memory_bytes)} of {_gib(device_bytes)}), and "
                + ("nothing is faster" if fastest is best else
                   f"{_scheme_label(fastest)} is within {schemes.SAME_SPEED:.0%} of it (DDP's step "
                   f"{best.step_s / fastest.step_s:.3f}x its)") +
                ": replicate, one all-reduce behind backward")
    if ddp.memory_bytes <= device_bytes:
        return (f"DDP fits too, but {_scheme_label(best)} is predicted {ddp.step_s / best.step_s:.2f}x faster "
                f"({_duration(best.step_s)} against {_duration(ddp.step_s)} per step)")
    return (f"DDP needs {_gib(ddp.memory_bytes)} per device ({_gib(ddp.activations)} of it activations), more than "
            f"{_gib(device_bytes)}; {_scheme_label(best)} needs {_gib(best.memory_bytes)}")


def decision_table(rows: list[dict], device_bytes: float, world_size: int) -> Table:
    """The decision rows as a table: per model, DDP's memory, the choice, its memory and step, and why."""
    micro = rows[0]["micro_batch"] if rows else 0
    t = Table(["model", "parameters", "DDP needs per device", "choice", "its memory", "its step", "why"],
              title=f"what fits on {world_size} x {device_bytes / GiB:.1f} GiB at {micro} sequences per device, and "
                    f"runs fastest (lesson 09's model; the simplest within {schemes.SAME_SPEED:.0%} of the fastest)")
    for r in rows:
        ddp = next(p for p in r["predictions"] if p.scheme == "DDP")
        c = r["choice"]
        n = r["parameters"]
        t.add(**{"model": r["model"], "parameters": f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M",
                 "DDP needs per device": _gib(ddp.memory_bytes),
                 "choice": _scheme_label(c) if c else "nothing",
                 "its memory": _gib(c.memory_bytes) if c else "-", "its step": _duration(c.step_s) if c else "-",
                 "why": r["why"]})
    return t


def device_memory_bytes(hw, world_size: int) -> float:
    """Memory one rank may use: its GPU's, or this machine's RAM shared by ``world_size`` CPU ranks."""
    if hw.gpus:
        return min(g.memory_gib for g in hw.gpus) * GiB
    import psutil

    return psutil.virtual_memory().total / world_size


def learner_curves(device: str, precision: str, repeats: int = 2):
    """This machine's device as lesson 09 measures it (:func:`~course_lib.perf.probe.probe_hardware`; on a
    CPU at one thread, as each rank of lesson 10 runs), its matmul curve scaled to the 16-bit peak when
    ``precision`` is mixed on a GPU. Returns ``(curves, probe)``."""
    from ..perf.model import scale_curves
    from ..perf.probe import probe_hardware

    if device == "cpu":
        with performance_study.threads(1):
            probe = probe_hardware("cpu", matmul_sizes=(64, 128, 256, 512), copy_sizes=[2**k for k in range(12, 25, 2)],
                                   repeats=repeats)
    else:
        probe = probe_hardware(device, repeats=repeats, h2d=False)
    curves = probe.curves
    if precision == "mixed" and device != "cpu":
        fast = max((probe.matmul_by_dtype.get(d, (0, 0))[0] for d in ("bf16", "fp16")), default=0)
        if fast > 0:
            curves = scale_curves(curves, flops_factor=fast / probe.matmul_by_dtype["fp32"][0])
    return curves, probe


# --------------------------------------------------------------------------- the verdict


def model_reading(sharded_outs: list[dict], predicted: dict, exact: float = 0.02) -> str:
    """How lesson 09's model did on the sharded runs measured here, from :func:`prediction_error`; the step errors
    from the memory table's step cells (#37, full run of 2026-12-01: "FSDP2 -58%" over a table of 28 against 65 ms)."""
    err = prediction_error(sharded_outs, predicted)
    for name in err:  # at the table's rounding: its two step cells of the row
        step = max(x[name]["step_s"] for x in sharded_outs)
        err[name]["step"] = float(_ms(predicted[name].step_s)) / float(_ms(step)) - 1
    worst = {k: max(abs(e[k]) for e in err.values()) for k in ("sent", "state", "step")}
    steps = ", ".join(f"{name} {e['step']:+.0%}" for name, e in err.items())
    def how(x):
        return "exactly" if x <= 1e-9 else (f"within {x:.1%}" if x <= exact else f"off by up to {x:.0%}")
    text = (f"Lesson 09's model predicted the bytes each scheme sent {how(worst['sent'])} and the state it kept "
            f"{how(worst['state'])}; its step times were off by {steps}")
    under = all(e["step"] < 0 for e in err.values())
    if not under:
        # #37 (full run of 2026-12-03, read r10d): the takeaway put these errors down to the per-step overhead the
        # model leaves out, over DDP +10% and ZeRO-1 +17%: leaving out a cost can only under-predict
        over = [name for name, e in err.items() if e["step"] > 0]
        low = [name for name, e in err.items() if e["step"] < 0]
        return text + (f" ({' and '.join(over)} over, although the model leaves out the per-step overhead of Python "
                       "and of the hooks, which can only make it under-predict: its prices of the operations "
                       "themselves were above what they took here" + (f"; {' and '.join(low)} under" if low else "")
                       + ").")
    # #37 (eighth full run, read r8c): "(all under: ... which is most of a step this small)" over DDP -40% and
    # ZeRO-1 -30%. read f12h 10-H1 (twelfth full run): "(all under: it leaves out the per-step overhead ..., which is
    # most of FSDP2's step here and less than half of DDP's and ZeRO-1's)": the -error of a step is the overhead the
    # model leaves out and any under-pricing of the operations it counts together (lesson 09's compute-bound steps
    # were under-predicted too); lesson 10 times no step without the overhead, so the reading gives the ms not
    # predicted, from the memory table's two step cells, and says the split is not measured here
    parts = []
    for name in err:
        cell = _ms(max(x[name]["step_s"] for x in sharded_outs))
        parts.append(f"{_cell_gap(cell, _ms(predicted[name].step_s))} of {name}'s {cell} ms")
    rest = join_and(parts)
    return text + (" (all under: the per-step overhead the model leaves out, of Python and of DDP's and FSDP2's hooks, "
                   "which lesson 09 measures apart for its own models, and any under-pricing of the operations it "
                   f"counts make up together {rest}; this lesson times no step without the overhead, so how much "
                   "of that is which it does not say).")


def _cell_gap(a: str, b: str) -> str:
    """``a - b`` of two table cells (ms), to the decimals of the coarser one (no more digits than both have):
    50.6 - 27.6 -> "23.0", 53.5 - 8.12 -> "45.4"."""
    places = min(len(c.split(".")[1]) if "." in c else 0 for c in (a, b))
    return f"{float(a) - float(b):.{places}f}"


def _largest_gaps(rows: list[dict]) -> dict[int, tuple[dict, float]]:
    """Per depth of bubble ``rows``: the row furthest from the formula and its gap in points (measured - predicted)."""
    out = {}
    for p in sorted({r["p"] for r in rows}):
        worst = max((r for r in rows if r["p"] == p), key=lambda r: abs(r["measured"] - r["predicted"]))
        out[p] = worst, 100 * (worst["measured"] - worst["predicted"])
    return out


def _outside_goal(gap: float, goal: float = BUBBLE_GOAL_POINTS) -> bool:
    """A bubble gap (points) outside ``goal``, at the one decimal the readings print it to."""
    return abs(round(gap, 1)) > goal


def _depth_gaps(rows: list[dict]) -> str:
    """Per depth of ``rows``: the largest gap from the formula (points, the bubble table's rounding) and whether it is
    within :data:`BUBBLE_GOAL_POINTS`, as :func:`depth_reading` reads them."""
    return "; ".join(f"p = {p}: {gap:+.1f} points, {'outside' if _outside_goal(gap) else 'within'}"
                     for p, (_, gap) in _largest_gaps(rows).items())


def _alike(values) -> str:
    """One figure where every rank's is the same, else each rank's in rank order ("1512 and 1296")."""
    vals = list(values)
    return str(vals[0]) if len(set(vals)) == 1 else ", ".join(map(str, vals[:-1])) + f" and {vals[-1]}"


def verdict(tensor_outs: list[dict], bubble_rows: list[dict], sharded_outs: list[dict], halo_outs: list[dict],
            mesh_outs: list[dict], predicted: dict | None = None, deep_rows: list[dict] | None = None) -> str:
    """What this machine's runs say, in sentences computed from them (``predicted``: :func:`sharded_predictions`;
    ``deep_rows``: the deeper pipelines' bubble rows, :func:`pipeline.depth_bubbles`, read with the main launch's:
    #37, eighth full run, read r8c: "the bubble's largest gap ... +6.1 points, within the goal of 10" from p = 2 alone,
    where the depth reading above it found +18.6 and +22.7 points at p = 3 and 4, outside)."""
    lines = []
    eq = tensor_all_equal(tensor_outs)
    lines.append(f"Tensor parallel (ours and DTensor's) {'equals' if eq else 'does NOT equal'} one process "
                 f"on {len(tensor_outs)} ranks, outputs and every shard's gradient.")
    grads = all(r["grad_diff"] <= TOLERANCE for r in bubble_rows + list(deep_rows or []))
    bert = ""
    if all("bert_pipeline" in o for o in tensor_outs):
        bert = (" (over BERT's encoder too, the tied embedding's gradient added up)" if bert_pipeline_equal(tensor_outs)
                else " (but NOT over BERT's encoder)")
    if deep_rows:
        ps = sorted({r["p"] for r in bubble_rows + list(deep_rows)})
        lines.append(f"Pipeline: gradients {'equal' if grads else 'differ from'} one process's for every schedule, m "
                     f"and p = {', '.join(map(str, ps))}{bert}; the bubble's largest gap from the formula (goal: "
                     f"{BUBBLE_GOAL_POINTS:g} points), {_depth_gaps(bubble_rows + list(deep_rows))} (splits and "
                     "causes: the readings under the two bubble tables).")
    else:
        gap = max((100 * (r["measured"] - r["predicted"]) for r in bubble_rows), key=abs)
        lines.append(f"Pipeline: gradients {'equal' if grads else 'differ from'} one process's "
                     f"for every schedule and m{bert}; "
                     f"the bubble's largest gap from the formula is {gap:+.1f} points, "
                     f"{'within' if abs(gap) <= BUBBLE_GOAL_POINTS else 'outside'} the goal of "
                     f"{BUBBLE_GOAL_POINTS:g} (its split and cause: the reading under the bubble table).")
    ok, measured, bound = fsdp_within_goal(sharded_outs)
    steps = {r["scheme"]: r["step (ms)"] for r in memory_table(sharded_outs, predicted).rows}
    o = sharded_outs[0]
    ddp = sum(o["DDP"][k] for k in ("parameters", "gradients", "optimizer_state"))
    z1 = sum(o["ZeRO-1"][k] for k in ("parameters", "gradients", "optimizer_state"))
    lines.append(
        f"Sharding on {len(sharded_outs)} ranks: stage 1 keeps {z1 / ddp:.2f}x DDP's bytes per rank, FSDP2 "
        f"{measured / ddp:.2f}x ({'within' if ok else 'ABOVE'} 1/W of DDP's plus the largest layer, "
        f"{bound / ddp:.2f}x); both end {'equal to' if sharded_equal(sharded_outs) else 'AWAY from'} DDP's "
        f"weights; in one step FSDP2 sent {o['FSDP2']['sent_bytes'] / o['DDP']['sent_bytes']:.2f}x DDP's bytes "
        f"and stage 1 {o['ZeRO-1']['sent_bytes'] / o['DDP']['sent_bytes']:.2f}x; FSDP2's step took "
        f"{float(steps['FSDP2']) / float(steps['DDP']):.1f}x DDP's here (the memory table's slowest ranks)."
    )
    if predicted:
        lines.append(model_reading(sharded_outs, predicted))
    halo_ok = all(max(h["out"], h["input_grad"]) <= TOLERANCE for h in halo_outs)
    lines.append(
        f"Halo exchange: the split convolution {'equals' if halo_ok else 'does NOT equal'} the whole one; "
        # #37 (read r10d, S): "for a strip of 1512 bytes" where rank 1's strip was 1296: every rank's, in rank order
        f"each rank sent {_alike(h['halo_bytes_per_exchange'] for h in halo_outs)} bytes per exchange, for strips "
        f"of {_alike(h['strip_bytes'] for h in halo_outs)} bytes."
    )
    if mesh_outs:
        m0 = mesh_outs[0]
        lines.append(f"Mesh {len(mesh_outs) // len(m0['tp_group'])} x {len(m0['tp_group'])}: tensor-parallel groups "
                     f"{sorted({tuple(m['tp_group']) for m in mesh_outs})} carried activations "
                     f"({m0['elements_tp']} values per rank per step), data-parallel groups "
                     f"{sorted({tuple(m['dp_group']) for m in mesh_outs})} the gradient shards ({m0['elements_dp']}); "
                     f"gradients {'equal' if all(m['grad_diff'] <= TOLERANCE for m in mesh_outs) else 'differ from'} "
                     "one process's.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- asynchronous pipelines (PipeDream)


ASYNC_TOLERANCE = 1e-6  # the pipeline against its one-process replay (the same stale updates)


def async_spec(profile: str) -> dict:
    """Lesson 10's asynchronous pipeline, by profile. ``run``: the pipeline itself on 4 gloo ranks (depths 2,
    3 and 4, both modes; a wider stack in full so each op is long beside a message); ``convergence``: the same
    stale updates over a longer run, replayed in one process (the replay equals the pipeline: checked on
    ``run``), at depths 1 (synchronous SGD), 2 and 4. lr 1.0: the largest of 0.5 / 1 / 2 / 3 at which, on
    our runs, the synchronous model kept improving with depth-independent steps."""
    return {"run": {"width": pick(profile, full=256, smoke=32), "depth": 8,
                    "micro_batch": pick(profile, full=64, smoke=16), "n": pick(profile, full=48, smoke=12), "lr": 0.5,
                    "depths": [2, 3, 4]},
            "convergence": {"width": 32, "depth": 8, "micro_batch": 16, "n": pick(profile, full=400, smoke=40),
                            "lr": 1.0, "depths": [1, 2, 4]}}


def async_rows(outs: list[dict], spec: dict) -> list[dict]:
    """The pipeline's runs (one row per depth and mode) with what lesson 10 reads from them: each stage's
    staleness and peak versions held, the whole run's bubble (formula and measured), the steady state's
    (simulated with the measured mean op times, replayed with each op's measured duration and nothing between the
    ops, and measured), the stages' CPU share while computing (on a CPU), and the largest difference from the
    one-process replay of the same stale updates (weights and losses).

    read f12h 10-H2 (twelfth full run): the simulation uses one mean forward and one mean backward for every stage,
    so its 0.000 cannot show idle from unequal stages; ``steady_replayed`` (:func:`pipeline.replay`, as
    :func:`pipeline.measured_bubbles`' "from unequal ops") can, and splits the measured steady-state idle."""
    from ..parallel import async_pipeline as ap

    rows = []
    for r in ap.collect([o["async"] if "async" in o else o for o in outs]):
        p, n = r["p"], spec["n"]
        sched = ap.pipedream_schedule(p, n)
        ref = ap.sequential_replay(spec, p, stash=r["mode"] == "stashed")
        ev = r["events"]
        tf = sum(e.end - e.start for e in ev if e.kind == "F") / sum(e.kind == "F" for e in ev)
        tb = sum(e.end - e.start for e in ev if e.kind == "B") / sum(e.kind == "B" for e in ev)
        rows.append({"p": p, "mode": r["mode"], "n": n, "staleness": ap.staleness(sched), "held": r["held"],
                     "versions": r["versions"], "weights": r["weights"], "losses": r["losses"],
                     "bubble_formula": pipeline.bubble_fraction(p, n), "bubble_measured": pipeline.idle_fraction(ev),
                     "steady_simulated": ap.steady_idle_fraction(pipeline.simulate(sched, tf, tb)),
                     "steady_replayed": ap.steady_idle_fraction(pipeline.replay(sched, ev)),
                     "steady_measured": ap.steady_idle_fraction(ev), "forward_ms": 1e3 * tf,
                     "cpu_share": pipeline.cpu_share(ev),
                     "replay_diff": max(ap.max_difference(r["weights"], ref["weights"]),
                                        max(abs(a - b) for a, b in zip(r["losses"], ref["losses"])))})
    return rows


def async_bubble_reading(rows: list[dict], goal: float = BUBBLE_GOAL_POINTS, cores: int | None = None,
                         processes: int = 4) -> str:
    """The asynchronous runs' bubbles against the schedule's, from the rows: the steady state (simulated with the
    mean op times: zero) and the whole run (``(p - 1) / (n + p - 1)``), within ``goal`` points or not, and why
    (the launch's ``processes`` sharing the cores named only where they outnumber ``cores``: #37, eighth full run,
    read r8c).

    read f12h 10-H2 (twelfth full run): "Measured, the steady state idled 54% ...: the time went between the ops
    (messages, and the launch's 4 processes sharing this machine's 2 cores), not to the schedule", from a simulation
    with one mean op time for every stage, which cannot show idle from unequal stages. Where the rows carry
    ``steady_replayed`` (each op's measured duration, nothing between the ops) the idle is split into unequal ops
    and between the ops and the larger part named; where the stages had less than ``BUSY_CPU_SHARE`` of a core
    the replayed op times include waiting for one, and the reading says the split is not the stages' alone;
    without the replay it says the split is not made."""
    cores = usable_cores() if cores is None else cores
    worst = max(rows, key=lambda r: r["steady_measured"] - r["steady_simulated"])
    gap = 100 * (worst["steady_measured"] - worst["steady_simulated"])
    whole = ", ".join(f"p = {r['p']}: {r['bubble_measured']:.2f} (formula {r['bubble_formula']:.2f})"
                      for r in rows if r["mode"] == "stashed")
    text = (f"Without flushes the schedule has no bubble in its steady state when its stages are equal (simulated "
            f"with the mean measured op times, one forward and one backward time for every stage: "
            f"{max(max(r['steady_simulated'] for r in rows), 0.0):.3f}); the whole run idles {whole}. ")
    if gap <= goal:
        return text + f"Measured, the steady state idles within {gap:.0f} points of none (the goal: {goal:.0f})."
    between_why = (f"messages, and the launch's {processes} processes sharing this machine's {cores} cores"
                   if processes > cores else "messages, and waking the stage that waits")
    text += (f"Measured, the steady state idled {worst['steady_measured']:.0%} (p = {worst['p']}, {worst['mode']}), "
             f"with {worst['forward_ms']:.2f} ms per forward. ")
    if worst.get("steady_replayed") is None:
        return text + ("The mean-time simulation cannot show idle from unequal stages (the first skips its input's "
                       f"gradient, the last computes the loss), so how much of it is unequal stages and how much "
                       f"went between the ops ({between_why}) this run does not split.")
    ops = 100 * (worst["steady_replayed"] - max(worst["steady_simulated"], 0.0))
    between = 100 * (worst["steady_measured"] - worst["steady_replayed"])
    text += (f"Replayed with each op's measured duration and nothing between the ops it idles "
             f"{max(worst['steady_replayed'], 0.0):.3f}: {ops:+.1f} points from unequal op times (the first stage "
             f"skips its input's gradient, the last computes the loss), {between:+.1f} between the ops "
             f"({between_why}). ")
    share = worst.get("cpu_share")
    if share is not None and share < BUSY_CPU_SHARE:
        return text + (f"But the stages had {share:.0%} of a core while they computed (CPU share), so the op times "
                       "replayed include waiting for a core: how much of the unequal-ops part is the stages' and how "
                       "much the shared cores', this run cannot split.")
    return text + ("The larger part went between the ops." if abs(between) > abs(ops) else
                   "The larger part is unequal op times: the schedule's idle with these stages, which the simulation "
                   "with equal ones does not show.")


def stash_gaps(rows: list[dict]) -> dict[int, float]:
    """Per depth: the largest weight difference between the run without stashing and the stashed one."""
    from ..parallel import async_pipeline as ap

    by = {(r["p"], r["mode"]): r for r in rows}
    return {p: ap.max_difference(by[(p, "stashed")]["weights"], by[(p, "not stashed")]["weights"])
            for p in sorted({r["p"] for r in rows}) if (p, "not stashed") in by and (p, "stashed") in by}


def stash_resolved(gaps: dict[int, float], p: int, tol: float = ASYNC_TOLERANCE) -> bool:
    """Whether, at depth ``p``, the run without stashing drifted from the stashed one by more than ``tol``, the
    resolution the pipeline is compared with its replay to. Whether the drift grows with depth is
    :func:`staleness_reading`'s to say, from every depth (read r7c, seventh full run: the cell printed "grows with
    depth: True" from p = 2 against p = 4 alone, over 6.6e-07, 3.1e-06 and 3.1e-06, p = 2 below the resolution)."""
    return gaps[p] > tol


def async_equal(rows: list[dict], tol: float = ASYNC_TOLERANCE) -> bool:
    """Every run (both modes, every depth) equals its one-process replay within ``tol``."""
    return bool(rows) and all(r["replay_diff"] <= tol for r in rows)


def async_table(rows: list[dict]) -> Table:
    """Per depth and mode: staleness and versions held per stage, bubbles, the difference from the replay."""
    title = f"PipeDream's 1F1B without flushes, {rows[0]['n']} micro-batches, one SGD step each" if rows else ""
    # read f12h 10-H2: the steady state replayed with each op's duration (unequal ops) and the CPU share beside it
    t = Table(["p", "weights", "staleness per stage (updates)", "versions held at once per stage",
               "bubble, whole run: formula", "measured", "steady state: simulated (mean ops)", "replayed (each op)",
               "measured ", "forward per micro-batch (ms)", "CPU share", "|pipeline - replay|"], title=title)
    for r in rows:
        t.add(**{"p": r["p"], "weights": r["mode"], "staleness per stage (updates)": " ".join(map(str, r["staleness"])),
                 "versions held at once per stage": " ".join(map(str, r["held"])),
                 "bubble, whole run: formula": f"{r['bubble_formula']:.3f}", "measured": f"{r['bubble_measured']:.3f}",
                 # #37 (eighth full run, read r8c): "-0.000" for a simulated idle fraction of float rounding below 0
                 "steady state: simulated (mean ops)": f"{max(r['steady_simulated'], 0.0):.3f}",
                 "replayed (each op)": ("-" if r.get("steady_replayed") is None
                                        else f"{max(r['steady_replayed'], 0.0):.3f}"),
                 "measured ": f"{max(r['steady_measured'], 0.0):.3f}",
                 "forward per micro-batch (ms)": f"{r['forward_ms']:.2f}",
                 "CPU share": "-" if r.get("cpu_share") is None else f"{r['cpu_share']:.0%}",
                 "|pipeline - replay|": f"{r['replay_diff']:.1e}"})
    return t


def versions_table(row: dict, shown: int = 8) -> Table:
    """One run's first micro-batches: per stage, the version (updates applied) its forward used, the one its
    backward took the gradient at, and the one the update was applied to.

    read f12h 10-H5 (twelfth full run): the stashed run's table read "1 / 4" under "forward / backward" for
    micro-batch 4 on stage 0, the 4 being the version the update landed on, where the backward used version 1 (the
    stash). Rows recorded as pairs (forward's, updated) by older runs are read by the run's mode: stashed, the
    backward used the forward's version; not stashed, the current one (the updated)."""
    cols = [f"stage {s}: forward / backward / updated" for s in range(row["p"])]
    t = Table(["micro-batch"] + cols, title=f"weight versions, p = {row['p']}, {row['mode']} (updates applied)")

    def cell(v) -> str:
        if len(v) == 2:
            f, u = v
            v = (f, f if row["mode"] == "stashed" else u, u)
        return "{} / {} / {}".format(*v)

    for i in range(min(shown, row["n"])):
        t.add(**{"micro-batch": i}, **{cols[s]: cell(row["versions"][s][i]) for s in range(row["p"])})
    return t


def staleness_convergence(spec: dict) -> list[dict]:
    """The convergence study: for each depth in ``spec["depths"]`` and each mode, the replay of the
    pipeline's stale updates (``p = 1``: synchronous SGD, one mode): each micro-batch's loss and the final
    model's held-out loss."""
    from ..parallel import async_pipeline as ap

    out = []
    for p in spec["depths"]:
        for mode in ap.MODES if p > 1 else ap.MODES[:1]:
            r = ap.sequential_replay(spec, p, stash=mode == "stashed")
            out.append({"p": p, "mode": mode if p > 1 else "synchronous", "losses": r["losses"],
                        "held_out_loss": r["held_out_loss"]})
    return out


STALENESS_NOISE = 0.01  # relative held-out-loss differences below 1 % are read as no effect


def staleness_reading(conv: list[dict], gaps: dict[int, float], equal: bool, noise: float = STALENESS_NOISE) -> str:
    """What the asynchronous runs say, from their numbers: the replay's equality, how the held-out loss
    moves with depth (stashed) against synchronous SGD, and whether the unstashed run's distance from
    the stashed one grows with depth."""
    sync = next(r for r in conv if r["p"] == 1)["held_out_loss"]
    stashed = sorted((r["p"], r["held_out_loss"]) for r in conv if r["mode"] == "stashed" and r["p"] > 1)
    parts = [f"The asynchronous pipeline {'equals' if equal else 'does NOT equal'} its one-process replay "
             f"(the same stale updates) to {ASYNC_TOLERANCE:g}."]
    rel = [(p, (loss - sync) / sync) for p, loss in stashed]
    worse = [(p, d) for p, d in rel if d > noise]
    desc = ", ".join(f"p = {p}: {loss:.4f} ({_pct(d)})" for (p, loss), (_, d) in zip(stashed, rel))
    if worse and all(b[1] >= a[1] for a, b in zip(rel, rel[1:])):
        parts.append(f"Staleness cost convergence, more the deeper the pipeline: held-out loss {sync:.4f} "
                     f"synchronous, {desc} with weight stashing after the same number of micro-batches.")
    elif worse:
        parts.append(f"Staleness cost convergence at some depths but not in order of depth: held-out loss {sync:.4f} "
                     f"synchronous, {desc}.")
    else:
        parts.append(f"At this lr the staleness cost nothing measurable: held-out loss {sync:.4f} synchronous, {desc} "
                     f"(within {noise:.0%}); a larger lr would show it.")
    parts += _unstashed_cost(conv, dict(stashed), noise)
    if len(gaps) >= 2:
        ps = sorted(gaps)
        # at the figures printed (#37, full run of 2026-12-01: "3.1e-06 at p = 3, 3.1e-06 at p = 4: more the deeper")
        shown = {p: float(f"{gaps[p]:.1e}") for p in ps}
        grows = all(shown[b] > shown[a] for a, b in zip(ps, ps[1:]))
        partly = not grows and shown[ps[-1]] > shown[ps[0]]
        parts.append("Without stashing the weights drift from the stashed run's by "
                     + ", ".join(f"{gaps[p]:.1e} at p = {p}" for p in ps)
                     + (": more the deeper the pipeline (the older the forward's weights, the more the backward's "
                        "differ)." if grows else
                        f": more at p = {ps[-1]} than at p = {ps[0]}, but not at every step in depth." if partly else
                        ": NOT growing with depth here."))
        # #37 (second full run, read r3b): "6.6e-07 at p = 2" next to "equals its replay ... to 1e-06"
        small = [p for p in ps if gaps[p] <= ASYNC_TOLERANCE]
        if small:
            parts[-1] = parts[-1][:-1] + (f"; at p = {', '.join(map(str, small))} the drift is below the "
                                          f"{ASYNC_TOLERANCE:g} to which the pipeline is compared with its replay "
                                          "above: no drift resolved there.")
    return " ".join(parts)


def _pct(d: float) -> str:
    """A relative difference to 0.1 %, signed, with no "-0.0%" for a difference that rounds to nothing."""
    return f"{d:+.1%}" if f"{abs(d):.1%}" != "0.0%" else "0.0%"


def _unstashed_cost(conv: list[dict], stashed: dict[int, float], noise: float) -> list[str]:
    """What dropping the stash cost in held-out loss, depth by depth against the stashed run (#37, full run of
    2026-12-03, read r10d: the markdown promised the held-out loss "stashed and not" and the reading gave the stashed
    only, while the unstashed runs ended at 0.3551 and 0.3733 against 0.3553 and 0.3720 stashed)."""
    pairs = sorted((r["p"], r["held_out_loss"], stashed[r["p"]]) for r in conv
                   if r["mode"] == "not stashed" and r["p"] in stashed)
    if not pairs:
        return []
    rel = [(loss - ref) / ref for _, loss, ref in pairs]
    desc = ", ".join(f"p = {p}: {loss:.4f} against {ref:.4f} ({_pct(d)})" for (p, loss, ref), d in zip(pairs, rel))
    worse = [p for (p, _, _), d in zip(pairs, rel) if d > noise]
    return [f"Dropping the stash: held-out loss {desc} stashed; "
            + (f"it cost convergence at p = {', '.join(map(str, worse))}." if worse else
               f"within {noise:.0%} at every depth, it cost nothing measurable here.")]


def plot_staleness(conv: list[dict], window: int = 10):
    """Training loss (moving mean over ``window`` micro-batches) against micro-batches, per depth and mode."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for r in conv:
        losses = r["losses"]
        k = min(window, len(losses))
        smooth = [sum(losses[i - k + 1:i + 1]) / k for i in range(k - 1, len(losses))]
        ax.plot(range(k - 1, len(losses)), smooth, ls="--" if r["mode"] == "not stashed" else "-",
                label=f"p = {r['p']}, {r['mode']} (held-out {r['held_out_loss']:.3f})")
    ax.set_xlabel("micro-batches (one SGD step each)")
    ax.set_ylabel(f"training loss (mean of {window})")
    ax.set_title("stale weights: PipeDream's updates replayed, by pipeline depth", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig, ax


# --------------------------------------------------------------------------- deeper pipelines: p = 3 and 4 (#37)

DEEP_PIPELINE_PS = (3, 4)  # the synchronous pipeline's depths beyond the main launch's ranks


def deep_pipeline_spec(profile: str) -> dict:
    """GPipe and 1F1B at ``DEEP_PIPELINE_PS`` stages (``pipeline.pipeline_depths_worker``), in the 4-rank launch
    of the asynchronous pipeline: 12 layers (4 per stage at p = 3, 3 at p = 4), sized so one micro-batch's
    forward is about a millisecond at m = 8 in the full profile and the whole set runs in seconds."""
    return {"width": pick(profile, full=512, smoke=64), "depth": 12, "batch": pick(profile, full=256, smoke=32),
            "ms": pick(profile, full=[1, 4, 8], smoke=[1, 4]), "schedules": ["GPipe", "1F1B"],
            "repeats": pick(profile, full=3, smoke=1), "ps": list(DEEP_PIPELINE_PS)}


def four_rank_worker(rank: int, world_size: int, spec: dict) -> dict:
    """Lesson 10's second launch: the asynchronous pipeline (``spec["async"]``) and the synchronous one at
    3 and 4 stages (``spec["deep"]``), in the same processes (a launch costs seconds of start-up)."""
    from ..parallel import async_pipeline as ap

    return {"async": ap.async_worker(rank, world_size, spec["async"]),
            "deep": pipeline.pipeline_depths_worker(rank, world_size, spec["deep"])}


def usable_cores() -> int:
    """The cores this process may run on (its affinity: a SLURM job's or a container's share, not the host's)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def depth_reading(rows: list[dict], cores: int, goal: float = BUBBLE_GOAL_POINTS) -> str:
    """How the bubble grows with the stages, from :func:`bubble_table`'s rows at every depth measured (the
    main launch's p and ``DEEP_PIPELINE_PS``), with the table's rounding: GPipe at the largest m every depth
    ran, formula and measured, whether the measured bubble grew with depth as the formula's does, each
    depth's largest gap against ``goal``; where the stages outnumber ``cores`` (CPU processes sharing
    them), their CPU share while computing and what the timing then means."""
    ps = sorted({r["p"] for r in rows})
    common = set.intersection(*({r["m"] for r in rows if r["p"] == p} for p in ps))
    m = max(common)
    at = {p: next(r for r in rows if r["p"] == p and r["m"] == m and r["schedule"] == "GPipe") for p in ps}
    fmt = ", ".join(f"p = {p}: {at[p]['predicted']:.3f}" for p in ps)
    meas = ", ".join(f"{at[p]['measured']:.3f}" for p in ps)
    grew = all(round(at[a]["measured"], 3) < round(at[b]["measured"], 3) for a, b in zip(ps, ps[1:]))
    text = (f"GPipe at m = {m}: the formula's bubble grows with the stages ({fmt}); measured {meas}: "
            + ("it grew with depth as the formula's does. " if grew else "it did NOT grow with depth in order. "))
    largest = _largest_gaps(rows)
    worst, gaps = {p: w for p, (w, _) in largest.items()}, {p: g for p, (_, g) in largest.items()}
    outside = [p for p in ps if _outside_goal(gaps[p], goal)]
    text += ("The largest gap from the formula at each depth: "
             + ", ".join(f"p = {p} {gaps[p]:+.1f} points ({worst[p]['schedule']}, m = {worst[p]['m']})" for p in ps)
             + (f"; all within the goal of {goal:g} points. " if not outside else
                f"; outside the goal of {goal:g} points at p = {', '.join(map(str, outside))}. "))
    crowded = [p for p in ps if p > cores and at[p]["cpu_share"] is not None]
    if crowded:
        # read f12h 10-H4 (twelfth full run): "so an op's time there includes waiting for a core ... the schedule's
        # own is the formula plus the 'from unequal ops' column": that column replays those same op times, so where
        # the stages waited for a core (CPU share below BUSY_CPU_SHARE) it holds the stack's unequal stages and the
        # waits together, and this run cannot split them; only where they had their cores is it the schedule's own
        waited = [p for p in crowded if at[p]["cpu_share"] < BUSY_CPU_SHARE]
        had = [p for p in crowded if p not in waited]
        shares = ", ".join(f"{at[p]['cpu_share']:.0%} at p = {p}" for p in crowded)
        between = ", ".join(f"{100 * (at[p]['measured'] - at[p]['replayed']):+.1f}" for p in crowded)
        text += (f"At p = {', '.join(map(str, crowded))} the stages outnumber this machine's {cores} cores: while "
                 f"computing they had {shares} of a core (CPU share), and the time between ops ({between} points "
                 f"at m = {m}) includes a stage not yet scheduled. There the measured bubble is this machine's, not "
                 "the schedule's. ")
        if waited:
            at_w = ", ".join(map(str, waited))
            text += (f"At p = {at_w} an op's time also includes waiting for a core, and the 'from unequal ops' "
                     "column replays those op times (with nothing between them): it holds the stack's unequal "
                     f"stages and the waits for a core together, which this run cannot split at p = {at_w}, so the "
                     "schedule's own bubble there is not measured. ")
        if had:
            text += (f"At p = {', '.join(map(str, had))} the ops had their cores while they computed: the schedule's "
                     "own is the formula plus the 'from unequal ops' column (the measured op times replayed with "
                     "nothing between them). ")
        text += "The gradients are the check that does not depend on cores."
    return text
