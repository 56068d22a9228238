"""Lesson 10's measurements: tensor, pipeline, sharded and spatial parallelism.

The mechanics live in :mod:`course_lib.parallel` (``tensor``, ``pipeline``, ``sharded``,
``spatial``, ``hybrid``). This module says what lesson 10 runs on this machine
(:func:`lesson_spec`, one launch: :func:`lesson_worker`), turns the ranks' results into
tables and comparisons (the sharded steps against DDP and against lesson 09's model, with
lesson 09's per-step overhead), and gathers every exact check in one table. The pipelines (the
bubble, PipeDream's stale weights) are :mod:`.l10_pipelines`; BERT priced on a node of 8 GPUs and
the decision table, :mod:`.l10_choice`.
"""

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
from ..tables import Table

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


def equal_mark(diff: float | None) -> str:
    """A table cell for a largest difference from one process: "yes" within :data:`TOLERANCE`, "NO", or "n/a"."""
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
                 "equal (fp32)": equal_mark(d)})
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


# --------------------------------------------------------------------------- sharded data parallelism


MEASURED_SCHEMES = {"DDP": "DDP", "ZeRO-1": "ZeRO-1", "FSDP2": "FSDP"}  # measured here -> lesson 09's model
OVERHEAD_MISSING = ("lesson 09 has not saved its per-step overhead here: lesson 09's model below leaves it out "
                    "(each operation pays the probe's overhead only)")
OVERHEAD_NOT_GPU = ("lesson 09 measured its per-step overhead on CPU ranks and these ranks are GPUs: lesson 09's "
                    "model below leaves it out (each operation pays the probe's overhead only)")


def lesson09_overhead(saved09: dict | None, world_size: int, device: str) -> tuple[float | None, str]:
    """Lesson 09's per-step overhead of its BERT step (its data-parallel step's, on 2 ranks, when ``world_size``
    > 1), spread over that step's operations (:func:`course_lib.perf.model.overhead_per_op`): seconds per
    operation, or None where lesson 09 has not saved it or ``device`` is not the CPU it was measured on; and the
    status line that says which."""
    saved = (saved09 or {}).get("step_overhead", {}).get("bert")
    if not saved:
        return None, OVERHEAD_MISSING
    if device != "cpu":
        return None, OVERHEAD_NOT_GPU
    ranks = "2" if world_size > 1 and "2" in saved else "1"
    o = saved[ranks]
    per_op = M.overhead_per_op(o["overhead_s"], o["operations"])
    return per_op, (f"lesson 09's per-step overhead included: {o['overhead_s'] * 1e3:.2f} ms over the "
                    f"{o['operations']} operations of its BERT step on {ranks} rank(s), {per_op * 1e6:.1f} us "
                    "per operation")


def sharded_predictions(spec: dict, world_size: int, curves, link, gpu: bool = False,
                        op_overhead_s: float | None = None) -> dict:
    """Lesson 09's model of the sharded runs measured here (the same BERT, batch and fp32 AdamW on
    ``world_size`` ranks of ``curves`` and ``link``; ``op_overhead_s``: :func:`lesson09_overhead`): per
    measured scheme, a :class:`~course_lib.perf.schemes.SchemePrediction` (memory, bytes sent, step)."""
    cfg = bert_config(spec["preset"], vocab_size=spec["vocab_size"], dropout=0.0, attention_dropout=0.0,
                      max_position=spec["seq_len"])
    a, b = performance_study.bert_step_counts(cfg, (2, 4), spec["seq_len"], gpu=gpu)
    per_rank = spec["global_batch"] // world_size
    return {name: schemes.predict(a, b, curves, link, scheme=scheme, world_size=world_size,
                                  global_batch=spec["global_batch"], micro_batch=per_rank,
                                  values_per_sample=spec["seq_len"] * cfg.hidden_size, precision="fp32",
                                  op_overhead_s=op_overhead_s)
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
    """A step of the memory table, in ms to three significant figures (a GPU's few-ms steps keep their digits)."""
    ms = seconds * 1e3
    return f"{ms:.3g}" if ms < 1000 else f"{ms:.0f}"


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


STEP_RESOLUTION = 0.10  # a step timed as the median of a few steps on a shared machine: good to about 10 %


def _rank_spread(outs: list[dict], name: str) -> float:
    """How far the ranks' step times of scheme ``name`` are apart (max / min - 1): one step, timed on every rank."""
    times = [x[name]["step_s"] for x in outs]
    return max(times) / min(times) - 1


def step_comparisons(outs: list[dict], predicted: dict | None, with_overhead: bool = True) -> list[compare.Comparison]:
    """FSDP2's measured step against DDP's, and (``predicted``: :func:`sharded_predictions`) lesson 09's model
    against each scheme's measured step (the slowest rank's), against :data:`course_lib.compare.MODEL_EFFECT`; the
    model rows' basis says whether it included lesson 09's per-step overhead (``with_overhead``). Each step was
    timed once per scheme: the interval is :data:`STEP_RESOLUTION` plus how far the ranks were apart."""
    def slowest(name):
        return max(x[name]["step_s"] for x in outs)

    def res(*names):
        return STEP_RESOLUTION + max(_rank_spread(outs, n) for n in names)

    basis = "median of the timed steps; resolution 10 % + the ranks' spread"
    model_basis = basis + ("; lesson 09's per-step overhead included" if with_overhead else
                           "; without the per-step overhead (lesson 09 has not measured it for these ranks)")
    out = [compare.ratio("step time, FSDP2 / DDP (measured)", [slowest("DDP")], [slowest("FSDP2")],
                         needed=compare.SPEED_EFFECT, resolution=res("DDP", "FSDP2"), basis=basis)]
    for name in MEASURED_SCHEMES if predicted else ():
        out.append(compare.quantity_ratio(f"step time, model / measured: {name}",
                                          predicted[name].step_s / slowest(name), 0.0, needed=compare.MODEL_EFFECT,
                                          resolution=res(name), basis=model_basis, n="1"))
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


# --------------------------------------------------------------------------- the checks, in one table


def checks_table(tensor_outs: list[dict], bubble_rows: list[dict], sharded_outs: list[dict], halo_outs: list[dict],
                 mesh_outs: list[dict], deep_rows: list[dict] | None = None) -> Table:
    """Every exact check of the lesson, one row each: the largest difference from one process (or the bytes held
    against their bound), the bound, and whether it holds."""
    t = Table(["check", "largest", "bound", "holds"], title="what must hold exactly: the lesson's checks")

    def add(check, value, bound, fmt="{:.1e}"):
        t.add(check=check, largest=fmt.format(value), bound=fmt.format(bound), holds="yes" if value <= bound else "NO")

    tensor = [v for o in tensor_outs for k, v in o["tensor"].items()
              if k.endswith(("_out", "_grad", "_grads")) and isinstance(v, float)]
    tensor += [o["dtensor"][k] for o in tensor_outs
               for k in ("dtensor_out", "dtensor_input_grad", "dtensor_weight_grad", "dtensor_vs_ours")]
    add(f"tensor parallel (ours and DTensor) = one process, {len(tensor_outs)} ranks", max(tensor), TOLERANCE)
    pipe = bubble_rows + list(deep_rows or [])
    ps = ", ".join(map(str, sorted({r["p"] for r in pipe})))
    add(f"pipeline gradients = one process, every schedule and m, p = {ps}", max(r["grad_diff"] for r in pipe),
        TOLERANCE)
    if all("bert_pipeline" in o for o in tensor_outs):
        add("pipeline over BERT's encoder = one process",
            max(r["grad_diff"] for o in tensor_outs for r in o["bert_pipeline"]["rows"]), TOLERANCE)
    o = sharded_outs[0]
    ddp = sum(o["DDP"][k] for k in ("parameters", "gradients", "optimizer_state"))
    ok, fsdp, bound = fsdp_within_goal(sharded_outs)
    add("FSDP2 bytes per rank / DDP's, against 1/W + the largest unit", fsdp / ddp, bound / ddp, "{:.2f}")
    rel = max(x[k]["max_diff_from_ddp"] / max(x["ddp_moved_from_init"], 1e-12) for x in sharded_outs
              for k in ("ZeRO-1", "FSDP2"))
    add("ZeRO-1 and FSDP2 weights = DDP's, relative to DDP's move", rel, 1e-4)
    add("halo convolution = the whole one", max(max(h["out"], h["input_grad"]) for h in halo_outs), TOLERANCE)
    if mesh_outs:
        add(f"mesh {len(mesh_outs) // len(mesh_outs[0]['tp_group'])} x {len(mesh_outs[0]['tp_group'])}: gradients "
            "= one process", max(m["grad_diff"] for m in mesh_outs), TOLERANCE)
    return t
