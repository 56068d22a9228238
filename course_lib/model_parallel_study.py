"""Lesson 10's measurements and their reading: tensor, pipeline, sharded and spatial parallelism.

The mechanics live in :mod:`course_lib.parallel` (``tensor``, ``pipeline``, ``sharded``,
``spatial``, ``hybrid``). This module says what lesson 10 runs on this machine
(:func:`lesson_spec`, one launch: :func:`lesson_worker`), turns the ranks' results into
tables, draws the pipeline timelines, prices BERT-base and BERT-large on a node of 8 GPUs
(memory and bytes per step, pure arithmetic), builds the decision table, and writes the
verdict from the learner's own numbers.
"""

from __future__ import annotations

import math

import torch

from .comm import cost
from .config import pick
from .models.bert import BertForMLM, bert_config
from .parallel import hybrid, pipeline, sharded, spatial, tensor
from .tables import Table

GiB = 2**30
# BERT-large (Devlin et al. 2018): 24 layers, hidden 1024, 16 heads, MLP 4096; both with
# BERT's WordPiece vocabulary of 30522, 512 positions and 2 segment types.
BERT_SHAPES = {
    "BERT-base": dict(preset="base"),
    "BERT-large": dict(preset="base", num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096),
}
TOLERANCE = 1e-5  # fp32, relative to the largest value compared: "equal to one process"


def lesson_spec(profile: str, mesh_dp: int | None = None) -> dict:
    """What lesson 10's one launch runs, by profile (smoke: every path, small sizes). With
    ``mesh_dp``, the launch also runs the mesh (``dp x (W / dp)``): when the mesh has as many
    ranks as the launch, one launch less to start."""
    return {"mesh_dp": mesh_dp,
        "tensor": {"batch": 5, "hidden": 12, "intermediate": 30, "heads": 3, "seq": 4},
        "pipeline": {"width": pick(profile, full=512, smoke=128), "depth": 8,
                     "batch": pick(profile, full=512, smoke=64), "ms": [1, 2, 4, 8],
                     "schedules": ["GPipe", "1F1B"], "repeats": pick(profile, full=5, smoke=1), "native": True},
        "sharded": {"preset": "tiny", "vocab_size": pick(profile, full=4096, smoke=1024),
                    "seq_len": pick(profile, full=64, smoke=16), "global_batch": pick(profile, full=16, smoke=4),
                    "steps": pick(profile, full=6, smoke=3), "lr": 1e-3},
        "halo": {"height": 13, "width": 9, "channels": 3, "kernel": 3, "layers": 2},
    }


def lesson_worker(rank: int, world_size: int, spec: dict) -> dict:
    """Lesson 10's measurements in one launch (each launch costs seconds of start-up)."""
    out = {"tensor": tensor.compare_with_full(rank, world_size, **spec["tensor"]),
           "dtensor": tensor.compare_dtensor(rank, world_size),
           "pipeline": pipeline.pipeline_worker(rank, world_size, spec["pipeline"]),
           "sharded": sharded.sharded_worker(rank, world_size, spec["sharded"]),
           "halo": spatial.compare_halo_conv(rank, world_size, **spec["halo"])}
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
    t.add(**{"implementation": "ours (ColumnParallelLinear -> RowParallelLinear)",
             "collectives counted (forward + backward)": ", ".join(f"{k}: {v}" for k, v in o["tensor"]["mlp_collectives"].items()),
             "weight shard on rank 0": f"fc: {o['tensor']['mlp_local_features']} of {o['tensor']['intermediate']} rows"})
    t.add(**{"implementation": "DTensor (parallelize_module)",
             "collectives counted (forward + backward)": ", ".join(f"{k}: {v}" for k, v in o["dtensor"]["dtensor_collectives"].items()),
             "weight shard on rank 0": f"fc: {o['dtensor']['dtensor_local_shape']}"})
    return t


# --------------------------------------------------------------------------- pipeline


def bubble_table(rows: list[dict]) -> Table:
    """Predicted vs measured bubble per schedule and m, and whether the gradients equal one process's."""
    t = Table(["schedule", "p", "m", "predicted (p-1)/(m+p-1)", "measured", "difference (points)",
               "gradients = one process", "torch.distributed.pipelining = one process"],
              title="the pipeline bubble: formula vs this machine (median over runs)")
    for r in rows:
        t.add(**{"schedule": r["schedule"], "p": r["p"], "m": r["m"], "predicted (p-1)/(m+p-1)": f"{r['predicted']:.3f}",
                 "measured": f"{r['measured']:.3f}", "difference (points)": f"{100 * (r['measured'] - r['predicted']):+.1f}",
                 "gradients = one process": _ok(r["grad_diff"]),
                 "torch.distributed.pipelining = one process": _ok(r["native_grad_diff"]) if r["native_grad_diff"] is not None
                 else "n/a (1F1B needs m >= p)"})
    return t


def worst_bubble_gap(rows: list[dict]) -> float:
    """The largest |measured - predicted| over the rows, in points."""
    return max(100 * abs(r["measured"] - r["predicted"]) for r in rows)


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


def in_flight_table(p: int, m: int) -> Table:
    """Micro-batches whose activations each stage holds at most, per schedule (the memory side)."""
    t = Table(["schedule"] + [f"stage {s}" for s in range(p)], title=f"activations held at once (micro-batches), p = {p}, m = {m}")
    for name, make in pipeline.SCHEDULES.items():
        t.add(schedule=name, **{f"stage {s}": v for s, v in enumerate(pipeline.peak_in_flight(make(p, m)))})
    return t


# --------------------------------------------------------------------------- sharded data parallelism


def memory_table(outs: list[dict]) -> Table:
    """Bytes each rank holds per scheme (measured by counting its tensors; rank 0) against the
    ZeRO arithmetic, bytes it sent in one step (counted from the collectives' tensors), step
    time, and the largest difference of the final weights from DDP's."""
    o = outs[0]
    w = len(outs)
    t = Table(["scheme", "parameters", "gradients", "optimizer state", "total", "vs DDP", "predicted total",
               "sent per step (vs DDP)", "step (ms)", "max |w - w_DDP| after the steps"],
              title=f"memory per rank, measured on rank 0 of {w} (BERT, {o['n_params']:,} parameters, AdamW, fp32)")
    ddp_total = sum(o["DDP"][k] for k in ("parameters", "gradients", "optimizer_state"))
    for name, scheme in (("DDP", "DDP"), ("ZeRO-1", "ZeRO-1"), ("FSDP2", "ZeRO-3 / FSDP")):
        r = o[name]
        total = r["parameters"] + r["gradients"] + r["optimizer_state"]
        pred = sharded.memory_per_rank(o["n_params"], w, scheme).total
        t.add(**{"scheme": name, "parameters": cost._human_bytes(r["parameters"]),
                 "gradients": cost._human_bytes(r["gradients"]), "optimizer state": cost._human_bytes(r["optimizer_state"]),
                 "total": cost._human_bytes(total), "vs DDP": f"{total / ddp_total:.2f}x",
                 "predicted total": cost._human_bytes(pred),
                 "sent per step (vs DDP)": f"{cost._human_bytes(r['sent_bytes'])} ({r['sent_bytes'] / o['DDP']['sent_bytes']:.2f}x)",
                 "step (ms)": f"{1e3 * max(x[name]['step_s'] for x in outs):.0f}",
                 "max |w - w_DDP| after the steps": f"{max(x[name]['max_diff_from_ddp'] for x in outs):.1e}"})
    return t


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
              title=f"communication per step, {cost._human_bytes(param_bytes)} of gradients, W = {world_size}")
    how = {"DDP": "all-reduce of the gradients", "ZeRO-1": "reduce-scatter gradients + all-gather parameters",
           "ZeRO-2": "reduce-scatter gradients + all-gather parameters",
           "ZeRO-3 / FSDP": "all-gather (forward) + all-gather (backward) + reduce-scatter"}
    ddp = sharded.comm_bytes_per_step(param_bytes, world_size, "DDP")
    for s in sharded.SCHEMES:
        b = sharded.comm_bytes_per_step(param_bytes, world_size, s)
        t.add(**{"scheme": s, "collectives per step": how[s], "bytes sent per rank": cost._human_bytes(b),
                 "vs DDP": f"{b / ddp:.1f}x"})
    return t


# --------------------------------------------------------------------------- BERT-base and -large on 8 GPUs


def bert_parameters(name: str) -> dict:
    """Parameter count and shape of BERT-base / BERT-large, counted from ``models.bert`` on the meta device."""
    shape = dict(BERT_SHAPES[name])
    cfg = bert_config(shape.pop("preset"), vocab_size=30522, type_vocab_size=2, **shape)
    with torch.device("meta"):
        model = BertForMLM(cfg)
    largest_block = sum(p.numel() for p in model.blocks[0].parameters())
    return {"name": name, "n_params": model.num_parameters(), "cfg": cfg, "block_params": largest_block,
            "embedding_params": model.tok_emb.weight.numel()}


def _berts(precision: str):
    """``(name, parameters, config, gradient bytes)`` of BERT-base and BERT-large."""
    for name in BERT_SHAPES:
        info = bert_parameters(name)
        yield name, info["n_params"], info["cfg"], info["n_params"] * sharded.PRECISIONS[precision][1]


def bert_plan_table(world_size: int = 8, micro_batch: int = 32, seq_len: int = 512,
                    precision: str = "mixed") -> Table:
    """Per model and scheme on ``world_size`` GPUs: bytes per rank kept between steps (ZeRO's
    accounting), bytes each rank sends per step, and for tensor parallelism the activation
    bytes its all-reduces carry (4 per layer per micro-batch, 2 bytes per value)."""
    t = Table(["model", "parameters", "scheme", "memory per rank (params+grads+state)", "sent per rank per step"],
              title=f"BERT on {world_size} GPUs ({precision} precision, Adam; micro-batch {micro_batch} x {seq_len} tokens)")
    for name, n, cfg, grad_bytes in _berts(precision):
        for scheme in sharded.SCHEMES:
            mem = sharded.memory_per_rank(n, world_size, scheme, precision)
            t.add(**{"model": name, "parameters": f"{n / 1e6:.0f} M", "scheme": scheme,
                     "memory per rank (params+grads+state)": f"{mem.total / GiB:.2f} GiB",
                     "sent per rank per step": cost._human_bytes(sharded.comm_bytes_per_step(grad_bytes, world_size, scheme))})
        tp_mem = sharded.memory_per_rank(n, world_size, "DDP", precision).total / world_size
        act = 4 * cfg.num_layers * micro_batch * seq_len * cfg.hidden_size * 2  # values all-reduced per micro-batch
        t.add(**{"model": name, "parameters": f"{n / 1e6:.0f} M", "scheme": f"tensor parallel x{world_size}",
                 "memory per rank (params+grads+state)": f"{tp_mem / GiB:.2f} GiB (+ embeddings if not split)",
                 "sent per rank per step": f"{cost._human_bytes(2 * (world_size - 1) / world_size * act)} per micro-batch"})
        boundary = micro_batch * seq_len * cfg.hidden_size * 2
        t.add(**{"model": name, "parameters": f"{n / 1e6:.0f} M", "scheme": f"pipeline x{world_size}",
                 "memory per rank (params+grads+state)": f"{tp_mem / GiB:.2f} GiB (if stages are equal)",
                 "sent per rank per step": f"{cost._human_bytes(2 * boundary)} per micro-batch (one boundary, fwd + bwd)"})
    return t


def comm_seconds(bytes_per_rank: float, messages: int, alpha: float, beta: float) -> float:
    """Seconds to send ``bytes_per_rank`` in ``messages`` messages with the alpha-beta model (lesson 08)."""
    return messages * alpha + bytes_per_rank * beta


# --------------------------------------------------------------------------- choosing


def decision_table(device_bytes: float, world_size: int, activation_bytes: float = 0.0,
                   sizes=(110e6, 340e6, 1.3e9, 7e9, 70e9), precision: str = "mixed") -> Table:
    """For models of ``sizes`` parameters on ``world_size`` devices of ``device_bytes`` each: the
    simplest scheme whose per-rank memory (ZeRO's accounting + ``activation_bytes``) fits, and why."""
    t = Table(["parameters", "DDP needs per rank", "FSDP / ZeRO-3 needs per rank", "simplest that fits", "why"],
              title=f"what fits on {world_size} x {device_bytes / GiB:.1f} GiB ({precision} precision, Adam)")
    for n in sizes:
        need = {s: sharded.memory_per_rank(int(n), world_size, s, precision).total + activation_bytes
                for s in sharded.SCHEMES}
        choice = next((s for s in sharded.SCHEMES if need[s] <= device_bytes), None)
        if choice == "DDP":
            why = "everything fits on each device: replicate, one all-reduce per step"
        elif choice in ("ZeRO-1", "ZeRO-2"):
            why = "the replicated optimizer state (stage 2: and gradients) does not fit; sharding it sends no extra bytes"
        elif choice:
            why = "only with the parameters sharded too: 1.5x DDP's traffic"
        else:
            shards = math.ceil(need["ZeRO-3 / FSDP"] / device_bytes)
            why = (f"even fully sharded it needs {need['ZeRO-3 / FSDP'] / GiB:.1f} GiB per device: more devices "
                   f"(about {shards}x), or tensor/pipeline parallelism to split the activations and layers too")
            choice = "FSDP + tensor/pipeline"
        t.add(**{"parameters": f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M",
                 "DDP needs per rank": f"{need['DDP'] / GiB:.1f} GiB",
                 "FSDP / ZeRO-3 needs per rank": f"{need['ZeRO-3 / FSDP'] / GiB:.1f} GiB",
                 "simplest that fits": choice, "why": why})
    return t


def device_memory_bytes(hw, world_size: int) -> float:
    """Memory one rank may use: its GPU's, or this machine's RAM shared by ``world_size`` CPU ranks."""
    if hw.gpus:
        return min(g.memory_gib for g in hw.gpus) * GiB
    import psutil

    return psutil.virtual_memory().total / world_size


# --------------------------------------------------------------------------- the verdict


def verdict(tensor_outs: list[dict], bubble_rows: list[dict], sharded_outs: list[dict], halo_outs: list[dict],
            mesh_outs: list[dict]) -> str:
    """What this machine's runs say, in sentences computed from them."""
    lines = []
    eq = tensor_all_equal(tensor_outs)
    lines.append(f"Tensor parallel (ours and DTensor's) {'equals' if eq else 'does NOT equal'} one process "
                 f"on {len(tensor_outs)} ranks, outputs and every shard's gradient.")
    gap = worst_bubble_gap(bubble_rows)
    grads = all(r["grad_diff"] <= TOLERANCE for r in bubble_rows)
    p = bubble_rows[0]["p"]
    lines.append(f"Pipeline: gradients {'equal' if grads else 'differ from'} one process's for every schedule and m; "
                 f"the measured bubble is within {gap:.0f} points of (p-1)/(m+p-1) at p = {p} "
                 + ("(within the 10-point goal)." if gap <= 10 else
                    "(more than 10 points: on a busy or oversubscribed CPU a stage that is descheduled or slow to "
                    "post its message makes its neighbour wait, and that wait counts as bubble)."))
    ok, measured, bound = fsdp_within_goal(sharded_outs)
    o = sharded_outs[0]
    ddp = sum(o["DDP"][k] for k in ("parameters", "gradients", "optimizer_state"))
    z1 = sum(o["ZeRO-1"][k] for k in ("parameters", "gradients", "optimizer_state"))
    lines.append(f"Sharding on {len(sharded_outs)} ranks: stage 1 keeps {z1 / ddp:.2f}x DDP's bytes per rank, FSDP2 "
                 f"{measured / ddp:.2f}x ({'within' if ok else 'ABOVE'} 1/W of DDP's plus the largest layer, "
                 f"{bound / ddp:.2f}x); both end {'equal to' if sharded_equal(sharded_outs) else 'AWAY from'} DDP's "
                 f"weights; in one step FSDP2 sent {o['FSDP2']['sent_bytes'] / o['DDP']['sent_bytes']:.2f}x DDP's bytes "
                 f"and stage 1 {o['ZeRO-1']['sent_bytes'] / o['DDP']['sent_bytes']:.2f}x; FSDP2's step took "
                 f"{o['FSDP2']['step_s'] / o['DDP']['step_s']:.1f}x DDP's here.")
    halo_ok = all(max(h["out"], h["input_grad"]) <= TOLERANCE for h in halo_outs)
    lines.append(f"Halo exchange: the split convolution {'equals' if halo_ok else 'does NOT equal'} the whole one; "
                 f"each rank sent {max(h['halo_bytes_per_exchange'] for h in halo_outs)} bytes per exchange for a strip "
                 f"of {max(h['strip_bytes'] for h in halo_outs)} bytes.")
    if mesh_outs:
        m0 = mesh_outs[0]
        lines.append(f"Mesh {len(mesh_outs) // len(m0['tp_group'])} x {len(m0['tp_group'])}: tensor-parallel groups "
                     f"{sorted({tuple(m['tp_group']) for m in mesh_outs})} carried activations "
                     f"({m0['elements_tp']} values per rank per step), data-parallel groups "
                     f"{sorted({tuple(m['dp_group']) for m in mesh_outs})} the gradient shards ({m0['elements_dp']}); "
                     f"gradients {'equal' if all(m['grad_diff'] <= TOLERANCE for m in mesh_outs) else 'differ from'} "
                     "one process's.")
    return "\n".join(lines)


def comm_time_table(world_size: int, links: dict, micro_batch: int = 32, seq_len: int = 512,
                    precision: str = "mixed") -> Table:
    """Seconds of communication per step for BERT-base/large per scheme, on each link of
    ``links`` (name -> (alpha s, beta s/byte)): ring collectives, ``W - 1`` messages per pass;
    tensor parallelism per micro-batch (4 all-reduces per layer)."""
    t = Table(["model", "link", "DDP / ZeRO-1", "FSDP", "tensor parallel (per micro-batch)"],
              title=f"communication seconds per step on {world_size} GPUs (alpha-beta model, no overlap)")
    for name, n, cfg, grad_bytes in _berts(precision):
        act = micro_batch * seq_len * cfg.hidden_size * 2
        for link, (alpha, beta) in links.items():
            ddp = comm_seconds(sharded.comm_bytes_per_step(grad_bytes, world_size, "DDP"), 2 * (world_size - 1), alpha, beta)
            fsdp = comm_seconds(sharded.comm_bytes_per_step(grad_bytes, world_size, "ZeRO-3 / FSDP"),
                                3 * (world_size - 1) * cfg.num_layers, alpha, beta)
            tp = 4 * cfg.num_layers * cost.ring_allreduce_time(act, world_size, alpha, beta)
            t.add(**{"model": name, "link": link, "DDP / ZeRO-1": f"{ddp * 1e3:.2f} ms", "FSDP": f"{fsdp * 1e3:.2f} ms",
                     "tensor parallel (per micro-batch)": f"{tp * 1e3:.2f} ms"})
    return t
