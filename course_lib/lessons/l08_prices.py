"""Lesson 08's compression section, priced: what each method would cost on other links and at other rank counts.

The alpha-beta-gamma model prices each method's counted messages (:mod:`.l08_compression`'s runs) on this
machine's link and on the quoted GPU interconnects; the compute each step adds to is this machine's measured
step on its own link and lesson 09's step model of the GPU on the quoted ones (:func:`gpu_compute_s`).
"""

from __future__ import annotations

import math

from ..tables import Table
from .l08_compression import REFERENCE, bert_cfg, bert_data, method_row

NO_COMM_METHOD = "local SGD H=16"  # its median step sends nothing (one step in 16 averages)


def _comm_s(row: dict, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """A method's counted messages per step on ``p`` ranks, ring algorithms: an all-reduce with its reductions at
    ``gamma`` s/byte, an all-gather of ``p`` pieces (nothing added up)."""
    from ..comm import cost
    from ..comm.compression import message_time

    return sum(cost.ring_allreduce_time(n, p, alpha, beta, gamma) if op == "all_reduce" else
               message_time(op, n, p, alpha, beta) for op, n in row["messages"]) / row["steady_steps"]


def predicted_step_s(row: dict, compute_s: float, link: tuple, p: int) -> float:
    """A method's step on ``p`` ranks over ``link`` (``(alpha, beta)`` or ``(alpha, beta, gamma)``): ``compute_s``
    plus its counted messages priced on the link (:func:`_comm_s`). Delayed averaging overlaps its all-reduce with
    the next step (the larger of the two counts); the others add."""
    comm = _comm_s(row, p, *link)
    return max(compute_s, comm) if row["method"].startswith("delayed") else compute_s + comm


def gpu_compute_s(spec: dict, link_params: dict) -> dict[str, dict[str, float]]:
    """``{link: {model: seconds}}`` for each link of ``link_params`` that joins a GPU of lesson 09's table
    (:func:`.l08_collectives.link_device`): one rank's step at the runs' per-rank batch, counted on the course's
    own step here (one process, no communication) and priced by lesson 09's step model
    (:func:`course_lib.perf.model.predict_step`) on that GPU's datasheet (:data:`GPU_PEAK_SHARE`,
    :data:`GPU_OP_OVERHEAD_S`)."""
    from ..perf import model as M
    from ..perf.paleo import SpecDevice, spec_curves
    from ..perf.peaks import GPU_OP_OVERHEAD_S, GPU_PEAK_SHARE, REFERENCE_PEAKS
    from .l08_collectives import link_device

    devices = {link: REFERENCE_PEAKS[link_device(link)] for link in link_params if link_device(link)}
    counts = _step_counts(spec)
    curves = {link: spec_curves(SpecDevice(r.name, r.flops["fp32"], r.memory_bandwidth, GPU_PEAK_SHARE),
                                GPU_OP_OVERHEAD_S) for link, r in devices.items()}
    return {link: {model: M.predict_step(c, curves[link]).step_s for model, c in counts.items()} for link in devices}


def _step_counts(spec: dict) -> dict:
    """Each model's step counted at the per-rank batch of the 2-rank runs (after one step: optimizer state exists)."""
    import torch

    from ..data import load_implicit
    from ..perf import model as M
    from ..precision import Precision
    from ..parallel.data_parallel import DataParallel
    from ..train import mlm, ncf
    from ..train.engine import Engine

    dev, out = torch.device("cpu"), {}
    if "neumf" in spec["models"]:
        data = load_implicit(spec["dataset"], profile=spec["profile"])
        cfg = ncf.TrainConfig(global_batch_size=spec["neumf"]["batch"] // 2, optimizer="adam")
        engine, it = ncf.build_engine(data, cfg, dev), iter(ncf.make_batches(data, cfg))
        engine.step(next(it))
        out["NeuMF"] = M.count_step(engine, next(it), batch_size=cfg.global_batch_size)
    if "bert" in spec["models"]:
        s = spec["bert"]
        data, cfg = bert_data(s), bert_cfg(s, 0, s["lr"], s["batch"] // 2)
        model = mlm.build_model(cfg, data.vocab_size, data.seq_len)
        engine = Engine(model, mlm.make_optimizer(model, cfg), precision=Precision("fp32", dev),
                        parallel=DataParallel(cfg.global_batch_size, None, dev), loss_sum=mlm._mlm_loss_sum)
        gen = torch.Generator().manual_seed(0)
        engine.step(*mlm._global_batch(data, cfg, gen, dev))
        out[f"BERT-{s['preset']}"] = M.count_step(engine, *mlm._global_batch(data, cfg, gen, dev),
                                                  batch_size=cfg.global_batch_size)
    return out


def compression_verdict_rows(summary: list[dict], link_params: dict, ps=(2, 64), modelled: dict | None = None,
                             reference: str = REFERENCE, no_comm: str = NO_COMM_METHOD) -> list[dict]:
    """Per model, link and ``p``: each method's predicted time to the quality it reached, against the
    reference's time to the same quality (its steps less the steps the method lost); speedup > 1 pays.

    The compute of a step is the same for every method. On a link of ``modelled`` (``{link: {model: seconds}}``,
    :func:`gpu_compute_s`) it is that model's; elsewhere the fastest measured (median) step of any method of the
    model -- on a quiet machine that of ``no_comm``, whose steps send nothing; on a shared one the smallest is the
    least disturbed. A method's own compute (top-k's selection, PowerSGD's products) is left out of the
    prediction; the measured speedups (:func:`.l08_compression.speedup_comparisons`) include it."""
    out, modelled = [], modelled or {}
    for model in dict.fromkeys(r["model"] for r in summary):
        ref, quiet = method_row(summary, model, reference), method_row(summary, model, no_comm)
        if ref is None or quiet is None:
            raise ValueError(f"compression_verdict_rows: {model} needs a {reference!r} and a {no_comm!r} run")
        measured = min(r["step_s"] for r in summary if r["model"] == model)
        for name, link in link_params.items():
            compute = modelled.get(name, {}).get(model, measured)
            for p in ps:
                t_ref = predicted_step_s(ref, compute, link, p)
                for r in summary:
                    if r["model"] != model or r["method"] == reference:
                        continue
                    t = predicted_step_s(r, compute, link, p)
                    out.append({"model": model, "link": name, "p": p, "method": r["method"],
                                "bytes_ratio": r["bytes_ratio"], "steps_lost": r["steps_lost"], "steps": r["steps"],
                                "step_s": t, "reference_step_s": t_ref, "compute_s": compute,
                                "compute_from": "model" if name in modelled else "measured",
                                "speedup": ((r["steps"] - r["steps_lost"]) * t_ref) / (r["steps"] * t)
                                if t > 0 else math.inf})
    return out


def best_methods(rows: list[dict]) -> set[tuple[str, str, str]]:
    """The ``(model, link, method)`` with the largest predicted speedup per model, link and p."""
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["model"], r["link"], r["p"])
        if key not in best or r["speedup"] > best[key]["speedup"]:
            best[key] = r
    return {(r["model"], r["link"], r["method"]) for r in best.values()}


def compression_verdict_table(rows: list[dict], p: int | None = None, best_only: bool = False) -> Table:
    """:func:`compression_verdict_rows` per model, link and method: the compute each step adds to, and per ``p``
    (``p`` given: that one only) the step, the fp32 step and the speedup. ``best_only``: only the methods with the
    largest predicted speedup per model, link and p (:func:`best_methods`; every method on every link is ~50
    rows)."""
    ps = [p] if p is not None else list(dict.fromkeys(r["p"] for r in rows))
    per_p = [(q, f" at p = {q}" if p is None else "") for q in ps]
    named = best_methods(rows) if best_only else None
    t = Table(["model", "link", "method", "fp32/this bytes", "steps lost", "compute (ms)", "compute from"]
              + [c + tag for _, tag in per_p for c in ("step (ms)", "fp32 step (ms)", "speedup")],
              title=f"predicted at p = {', '.join(map(str, ps))} (compute: measured on this machine's link, lesson "
                    "09's model on the GPU links; speedup: to the same quality)"
                    + ("; per model, link and p the method predicted to pay most" if best_only else ""))
    for key in dict.fromkeys((r["model"], r["link"], r["method"]) for r in rows):
        if named is not None and key not in named:
            continue
        mine = {r["p"]: r for r in rows if (r["model"], r["link"], r["method"]) == key and r["p"] in ps}
        if not mine:
            continue
        r = next(iter(mine.values()))
        row = {"model": key[0], "link": key[1], "method": key[2], "fp32/this bytes": f"{r['bytes_ratio']:.1f}x",
               "steps lost": f"{r['steps_lost']}/{r['steps']}", "compute (ms)": r["compute_s"] * 1e3,
               "compute from": r.get("compute_from", "measured")}
        for q, tag in per_p:
            if q in mine:
                row.update({f"step (ms){tag}": mine[q]["step_s"] * 1e3,
                            f"fp32 step (ms){tag}": mine[q]["reference_step_s"] * 1e3,
                            f"speedup{tag}": mine[q]["speedup"]})
        t.add(**row)
    return t
