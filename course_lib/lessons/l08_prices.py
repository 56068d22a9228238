"""Lesson 08's compression section priced on other links and rank counts: each method's counted messages under the
alpha-beta-gamma model, added to this machine's measured step or to lesson 09's step model of the GPU a link joins."""

from __future__ import annotations

import math

from ..tables import Table
from .l08_compression import MODELS, REFERENCE, method_row


def predicted_step_s(row: dict, compute_s: float, link: tuple, p: int) -> float:
    """``compute_s`` plus a method's counted messages per step (delayed averaging: overlapped with the step)."""
    from ..comm import cost
    from ..comm.compression import message_time

    comm = sum(cost.ring_allreduce_time(n, p, *link) if op == "all_reduce" else message_time(op, n, p, *link[:2])
               for op, n in row["messages"]) / row["steady_steps"]
    return max(compute_s, comm) if row["method"].startswith("delayed") else compute_s + comm


def gpu_compute_s(spec: dict, link_params: dict) -> dict[str, dict[str, float]]:
    """``{link: {model: seconds}}``: one rank's step priced by lesson 09's step model on the quoted links' GPU."""
    from ..perf import model as M
    from ..perf.paleo import SpecDevice, spec_curves
    from ..perf.peaks import GPU_OP_OVERHEAD_S, GPU_PEAK_SHARE, REFERENCE_PEAKS
    from .l08_collectives import LINK_GPU, MEASURED_LINK

    counts = {}
    for key in spec["models"]:
        name, build, batches, _, _ = MODELS[key](spec)
        batch = spec[key]["batch"] // 2
        engine = build(0, spec[key]["lr"], batch, None)
        next_batch = batches(0, engine)
        engine.step(*next_batch())  # counted after one step: the optimizer state exists
        counts[name] = M.count_step(engine, *next_batch(), batch_size=batch)
    r = REFERENCE_PEAKS[LINK_GPU]
    curves = spec_curves(SpecDevice(r.name, r.flops["fp32"], r.memory_bandwidth, GPU_PEAK_SHARE), GPU_OP_OVERHEAD_S)
    return {link: {model: M.predict_step(c, curves).step_s for model, c in counts.items()}
            for link in link_params if link != MEASURED_LINK}


def compression_verdict_rows(summary: list[dict], link_params: dict, ps=(2, 64),
                             modelled: dict | None = None) -> list[dict]:
    """Per model, link, ``p`` and method: fp32's predicted time to the method's quality over the method's, on the
    GPU's compute (``modelled``) or the fastest measured step; a method's own compute is left out."""
    out, modelled = [], modelled or {}
    for model in dict.fromkeys(r["model"] for r in summary):
        ref = method_row(summary, model, REFERENCE)
        if ref is None:
            raise ValueError(f"no {REFERENCE} run of {model}")
        measured = min(r["step_s"] for r in summary if r["model"] == model)
        for name, link in link_params.items():
            compute = modelled.get(name, {}).get(model, measured)
            for p in ps:
                t_ref = predicted_step_s(ref, compute, link, p)
                for r in summary:
                    if r["model"] == model and r["method"] != REFERENCE:
                        t = predicted_step_s(r, compute, link, p)
                        speedup = (r["steps"] - r["steps_lost"]) * t_ref / (r["steps"] * t) if t > 0 else math.inf
                        out.append({"model": model, "link": name, "p": p, "method": r["method"], "step_s": t,
                                    "reference_step_s": t_ref, "compute_s": compute, "speedup": speedup,
                                    "compute_from": "model" if name in modelled else "measured",
                                    **{k: r[k] for k in ("bytes_ratio", "steps_lost", "steps")}})
    return out


def best_methods(rows: list[dict]) -> set[tuple[str, str, str]]:
    """The ``(model, link, method)`` with the largest predicted speedup per model, link and p."""
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["model"], r["link"], r["p"])
        best[key] = max(best.get(key, r), r, key=lambda x: x["speedup"])  # the first of equals
    return {(r["model"], r["link"], r["method"]) for r in best.values()}


def compression_verdict_table(rows: list[dict], best_only: bool = False) -> Table:
    """One row per model, link and method, the times per ``p``; ``best_only``: those of :func:`best_methods`."""
    keep, out = best_methods(rows) if best_only else None, {}
    for r in rows:
        key = (r["model"], r["link"], r["method"])
        if keep is None or key in keep:
            row = out.setdefault(key, {"model": key[0], "link": key[1], "method": key[2],
                                       "fp32/this": f"{r['bytes_ratio']:.1f}x",
                                       "steps lost": f"{r['steps_lost']}/{r['steps']}",
                                       "compute (ms)": r["compute_s"] * 1e3, "from": r["compute_from"]})
            row.update({f"step (ms) p={r['p']}": r["step_s"] * 1e3,
                        f"fp32 (ms) p={r['p']}": r["reference_step_s"] * 1e3, f"speedup p={r['p']}": r["speedup"]})
    return Table(list(next(iter(out.values()), {})), list(out.values()))
