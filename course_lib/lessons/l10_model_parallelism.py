"""Lesson 10's one launch: tensor, pipeline, sharded and spatial parallelism against one process, DDP and lesson 09."""

from __future__ import annotations

from . import l09_performance_model as performance_study
from .. import compare
from ..comm import cost
from ..comm.bench import allreduce_benchmark
from ..config import pick
from ..models.bert import bert_config
from ..parallel import hybrid, pipeline, sharded, spatial, tensor
from ..perf import model as M
from ..perf import schemes
from ..perf.probe import probe_hardware
from ..tables import Table

TOLERANCE = 1e-5  # fp32, relative to the largest value compared: "equal to one process"
TENSOR_KEYS = ("mlp_out", "mlp_input_grad", "mlp_weight_grads", "block_out", "block_input_grad",
               "block_weight_grads", "gathered_out", "row_full_input_out")
DTENSOR_KEYS = ("dtensor_out", "dtensor_input_grad", "dtensor_weight_grad", "dtensor_vs_ours")
MEASURED_SCHEMES = {"DDP": "DDP", "ZeRO-1": "ZeRO-1", "FSDP2": "FSDP"}  # measured here -> lesson 09's model
STEP_RESOLUTION = 0.10  # a step timed as the median of a few steps on a shared machine: good to about 10 %


def lesson_spec(profile: str, mesh_dp: int | None = None) -> dict:
    """What the launch runs, by profile (``mesh_dp``: also the ``dp x (W / dp)`` mesh). A pipeline's micro-batch
    (full: about 10 ms) must dwarf a gloo message (about 0.1 ms), which the bubble's formula takes as zero."""
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
        # the link between the ranks, for lesson 09's model (lesson 08's all-reduce fit)
        "allreduce": {"sizes": [2**k for k in range(8, pick(profile, full=23, smoke=19), 2)],
                      "iters": pick(profile, full=10, smoke=4)},
    }


def lesson_worker(rank: int, world_size: int, spec: dict) -> dict:
    """Every measurement in one launch (each launch costs seconds of start-up)."""
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


def equal_mark(diff: float | None) -> str:
    return "n/a" if diff is None else ("yes" if diff <= TOLERANCE else "NO")


def tensor_table(outs: list[dict]) -> Table:
    """Per quantity, the largest difference over the ranks from one process's full layer."""
    diffs = {key: max(o["tensor"][key] for o in outs) for key in TENSOR_KEYS}
    return Table(["quantity", "max |diff|", "equal"],
                 [{"quantity": k, "max |diff|": f"{d:.1e}", "equal": equal_mark(d)} for k, d in diffs.items()])


def tensor_max_diff(outs: list[dict]) -> float:
    """The largest difference from one process over the ranks, ours and DTensor's."""
    return max(o[part][k] for o in outs for part, keys in (("tensor", TENSOR_KEYS), ("dtensor", DTENSOR_KEYS))
               for k in keys)


def collectives_table(outs: list[dict]) -> Table:
    """The collectives one forward + backward of the MLP ran (CommDebugMode), and rank 0's shard of ``fc``."""
    ours, dt = outs[0]["tensor"], outs[0]["dtensor"]
    rows = [("ours", ours["mlp_collectives"], f"{ours['mlp_local_features']} of {ours['intermediate']} rows"),
            ("DTensor", dt["dtensor_collectives"], dt["dtensor_local_shape"])]
    return Table(["MLP", "collectives", "fc shard"], [
        {"MLP": n, "collectives": ", ".join(f"{k}: {v}" for k, v in c.items()), "fc shard": sh} for n, c, sh in rows])


def _held(o: dict, name: str) -> float:
    return sum(o[name][k] for k in ("parameters", "gradients", "optimizer_state"))


def lesson09_overhead(saved09: dict | None, world_size: int, device: str) -> tuple[float | None, str]:
    """Lesson 09's BERT step overhead per operation (data-parallel if ``world_size`` > 1) or None, and a line why."""
    saved = (saved09 or {}).get("step_overhead", {}).get("bert")
    if not saved:
        return None, "lesson 09 has not saved its per-step overhead here: the model leaves it out"
    if device != "cpu":
        return None, "lesson 09 measured its per-step overhead on CPU ranks: the model leaves it out"
    ranks = "2" if world_size > 1 and "2" in saved else "1"
    o = saved[ranks]
    per_op = M.overhead_per_op(o["overhead_s"], o["operations"])
    return per_op, (f"lesson 09's overhead: {o['overhead_s'] * 1e3:.2f} ms over {o['operations']} operations "
                    f"on {ranks} rank(s), {per_op * 1e6:.1f} us each")


def sharded_predictions(spec: dict, world_size: int, curves, link, gpu: bool = False,
                        op_overhead_s: float | None = None) -> dict:
    """Lesson 09's model of the sharded runs (the same BERT, batch and fp32 AdamW), per measured scheme."""
    cfg = bert_config(spec["preset"], vocab_size=spec["vocab_size"], dropout=0.0, attention_dropout=0.0,
                      max_position=spec["seq_len"])
    a, b = performance_study.bert_step_counts(cfg, (2, 4), spec["seq_len"], gpu=gpu)
    return {name: schemes.predict(a, b, curves, link, scheme=scheme, world_size=world_size,
                                  global_batch=spec["global_batch"], micro_batch=spec["global_batch"] // world_size,
                                  values_per_sample=spec["seq_len"] * cfg.hidden_size, precision="fp32",
                                  op_overhead_s=op_overhead_s)
            for name, scheme in MEASURED_SCHEMES.items()}


def _slowest(outs: list[dict], name: str) -> float:
    return max(x[name]["step_s"] for x in outs)


def _ms(seconds: float) -> str:
    """Three significant figures: a GPU's few-ms steps keep their digits."""
    return f"{seconds * 1e3:.3g}" if seconds < 1 else f"{seconds * 1e3:.0f}"


def memory_table(outs: list[dict], predicted: dict | None = None) -> Table:
    """Per scheme on rank 0: state, bytes sent, step (slowest rank), weights against DDP's, and the ``predicted``."""
    o, hb = outs[0], cost.human_bytes
    t = Table(["scheme", "parameters", "gradients", "optimizer", "total", "vs DDP", "model total", "sent",
               "model sent", "step ms", "model step ms", "max |w - w_DDP|"],
              title=f"rank 0 of {len(outs)}, {o['n_params']:,} parameters")
    for name in MEASURED_SCHEMES:
        r, p = o[name], (predicted or {}).get(name)
        t.add(**{"scheme": name, "parameters": hb(r["parameters"]), "gradients": hb(r["gradients"]),
                 "optimizer": hb(r["optimizer_state"]), "total": hb(_held(o, name)),
                 "vs DDP": f"{_held(o, name) / _held(o, 'DDP'):.2f}x", "model total": hb(p.state_bytes) if p else "-",
                 "sent": f"{hb(r['sent_bytes'])} ({r['sent_bytes'] / o['DDP']['sent_bytes']:.2f}x)",
                 "model sent": hb(p.sent_bytes) if p else "-", "step ms": _ms(_slowest(outs, name)),
                 "model step ms": _ms(p.step_s) if p else "-",
                 "max |w - w_DDP|": f"{max(x[name]['max_diff_from_ddp'] for x in outs):.1e}"})
    return t


def prediction_error(outs: list[dict], predicted: dict) -> dict:
    """Per measured scheme: the model's relative error on the bytes sent, the state held and the step."""
    o = outs[0]
    return {name: {"sent": p.sent_bytes / o[name]["sent_bytes"] - 1, "state": p.state_bytes / _held(o, name) - 1,
                   "step": p.step_s / _slowest(outs, name) - 1}
            for name, p in ((n, predicted[n]) for n in MEASURED_SCHEMES)}


def step_comparisons(outs: list[dict], predicted: dict | None, with_overhead: bool = True) -> list[compare.Comparison]:
    """FSDP2's step against DDP's, and each ``predicted`` against its measured one, to a stated resolution."""
    def res(*names):
        return STEP_RESOLUTION + max(max(x[n]["step_s"] for x in outs) / min(x[n]["step_s"] for x in outs) - 1
                                     for n in names)

    basis = "median; 10 % + rank spread"
    model_basis = f"{basis}; {'with' if with_overhead else 'without'} lesson 09's overhead"
    return [compare.ratio("step, FSDP2 / DDP", [_slowest(outs, "DDP")], [_slowest(outs, "FSDP2")],
                          needed=compare.SPEED_EFFECT, resolution=res("DDP", "FSDP2"), basis=basis)] + [
        compare.quantity_ratio(f"step, model / measured: {name}", predicted[name].step_s / _slowest(outs, name), 0.0,
                               needed=compare.MODEL_EFFECT, resolution=res(name), basis=model_basis, n="1")
        for name in (MEASURED_SCHEMES if predicted else ())]


def fsdp_within_goal(outs: list[dict]) -> tuple[bool, float, float]:
    """Is FSDP2's total per rank at most DDP's / W plus the largest unit? (ok, measured, bound)."""
    worst = max(_held(o, "FSDP2") for o in outs)
    bound = _held(outs[-1], "DDP") / len(outs) + outs[-1]["largest_unit_bytes"]
    return worst <= bound, worst, bound


def sharded_equal(outs: list[dict], rel: float = 1e-4) -> bool:
    """ZeRO-1 and FSDP2 end where DDP ends (relative to how far DDP moved the weights)."""
    return all(o[k]["max_diff_from_ddp"] <= rel * max(o["ddp_moved_from_init"], 1e-12) + 1e-7
               for o in outs for k in ("ZeRO-1", "FSDP2"))


def comm_table(param_bytes: float, world_size: int) -> Table:
    """Bytes each rank sends per step, per scheme, with ring collectives."""
    how = {"DDP": "AR", "ZeRO-1": "RS + AG", "ZeRO-2": "RS + AG", "ZeRO-3 / FSDP": "AG + AG + RS"}
    sent = {s: sharded.comm_bytes_per_step(param_bytes, world_size, s) for s in sharded.SCHEMES}
    return Table(["scheme", "collectives", "sent per rank", "vs DDP"], [
        {"scheme": s, "collectives": how[s], "sent per rank": cost.human_bytes(b), "vs DDP": f"{b / sent['DDP']:.1f}x"}
        for s, b in sent.items()], title=f"{cost.human_bytes(param_bytes)} of gradients, W = {world_size}")


def learner_curves(device: str, precision: str, repeats: int = 2):
    """``(curves, probe)`` of this device as lesson 09 probes it (a CPU: one thread); mixed GPU: the 16-bit peak."""
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
            curves = M.scale_curves(curves, flops_factor=fast / probe.matmul_by_dtype["fp32"][0])
    return curves, probe


def checks_table(tensor_outs: list[dict], bubble_rows: list[dict], sharded_outs: list[dict], halo_outs: list[dict],
                 mesh_outs: list[dict], deep_rows: list[dict] | None = None) -> Table:
    """Every exact check: the largest difference from one process (or bytes held over DDP's) against its bound."""
    t = Table(["check", "largest", "bound", "holds"])

    def add(check, value, bound=TOLERANCE, fmt="{:.1e}"):
        t.add(check=check, largest=fmt.format(value), bound=fmt.format(bound), holds="yes" if value <= bound else "NO")

    add(f"tensor parallel, {len(tensor_outs)} ranks", tensor_max_diff(tensor_outs))
    pipe = bubble_rows + list(deep_rows or [])
    add(f"pipeline, p = {', '.join(map(str, sorted({r['p'] for r in pipe})))}", max(r["grad_diff"] for r in pipe))
    if all("bert_pipeline" in o for o in tensor_outs):
        add("pipeline, BERT", max(r["grad_diff"] for o in tensor_outs for r in o["bert_pipeline"]["rows"]))
    ddp = _held(sharded_outs[0], "DDP")
    _, fsdp, bound = fsdp_within_goal(sharded_outs)
    add("FSDP2 bytes / DDP's", fsdp / ddp, bound / ddp, "{:.2f}")
    add("ZeRO-1, FSDP2 weights", max(x[k]["max_diff_from_ddp"] / max(x["ddp_moved_from_init"], 1e-12)
                                     for x in sharded_outs for k in ("ZeRO-1", "FSDP2")), 1e-4)
    add("halo convolution", max(max(h["out"], h["input_grad"]) for h in halo_outs))
    if mesh_outs:
        tp = len(mesh_outs[0]["tp_group"])
        add(f"mesh {len(mesh_outs) // tp} x {tp}", max(m["grad_diff"] for m in mesh_outs))
    return t
