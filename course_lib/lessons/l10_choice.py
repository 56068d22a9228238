"""Lesson 10's question "which scheme, for which model?": lesson 09's model (:mod:`course_lib.perf.schemes`) of
BERT-base and BERT-large on a node of 8 GPUs (memory and bytes per step, and the step on quoted links), and
the decision table for this machine: every scheme, and DDP with gradient accumulation, at a micro-batch per
device, the choice and why."""

from __future__ import annotations

import functools

import torch

from . import l09_performance_model as performance_study
from ..comm import cost
from ..models.bert import BertForMLM, bert_config
from ..perf import schemes
from ..tables import Table

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
    """A step's time, in ms below 1 s, else in s (whole seconds from 100 s)."""
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s" if seconds < 100 else f"{seconds:,.0f} s"


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
    if p.scheme == schemes.ACCUMULATION:
        return f"DDP, {p.global_batch // p.world_size // p.micro_batch} micro-batches of {p.micro_batch}"
    if p.scheme == "tensor":
        return f"tensor parallel x{p.world_size}"
    if p.scheme == "pipeline":
        return f"pipeline x{p.world_size} (1F1B, m = {p.global_batch // p.micro_batch})"
    return p.scheme


def node_choice_table(by_link: dict[str, dict[str, list]], device_bytes: float) -> Table:
    """Per model, on the first link: the choice (the simplest scheme within ``schemes.SAME_SPEED`` of the fastest
    that fits, :func:`course_lib.perf.schemes.fastest_that_fits`), its step, the schemes as fast, tensor
    parallelism's step against the choice's on every link and the part of its excess that waits on the link, and
    the schemes over ``device_bytes``."""
    links = list(by_link)
    t = Table(["model", "choice", "step (ms)", "as fast (within 10 %)"]
              + [f"tensor / choice, {k}" for k in links] + ["tensor: excess (ms)", "of it, exposed comm. (ms)",
                                                             "over the memory"],
              title=f"what the model chooses on {links[0]}, {device_bytes / 1e9:.0f} GB per device")
    for name, preds in by_link[links[0]].items():
        best = schemes.fastest_that_fits(preds, device_bytes)
        too_big = ", ".join(_scheme_label(p) for p in preds if p.memory_bytes > device_bytes) or "-"
        if best is None:
            t.add(**{"model": name, "choice": "nothing fits", "over the memory": too_big})
            continue
        fits = [p for p in preds if p.memory_bytes <= device_bytes]
        fastest = min(p.step_s for p in fits)
        same = [_scheme_label(p) for p in fits if p is not best and p.step_s <= fastest * (1 + schemes.SAME_SPEED)]
        row = {"model": name, "choice": _scheme_label(best), "step (ms)": best.step_s * 1e3,
               "as fast (within 10 %)": ", ".join(same) or "-", "over the memory": too_big}
        tp = next((p for p in preds if p.scheme == "tensor"), None)
        for k in links:
            by = {p.scheme: p for p in by_link[k][name]}
            row[f"tensor / choice, {k}"] = f"{by['tensor'].step_s / by[best.scheme].step_s:.2f}x" if tp else "-"
        if tp is not None:
            row.update({"tensor: excess (ms)": (tp.step_s - best.step_s) * 1e3,
                        "of it, exposed comm. (ms)": tp.exposed_comm_s * 1e3})
        t.add(**row)
    return t


# --------------------------------------------------------------------------- choosing, for this machine


def decision_rows(names, *, world_size: int, device_bytes: float, micro_batch: int, seq_len: int, curves, link,
                  precision: str, op_overhead_s: float | None = None) -> list[dict]:
    """Per model of ``names``: lesson 09's prediction of every scheme on this machine (``world_size``
    devices of ``device_bytes``, ``curves``, ``link``; ``op_overhead_s``: :func:`lesson09_overhead`) at
    ``micro_batch`` sequences per device, and of DDP taking the same global batch in the fewest micro-batches
    that fit (:func:`course_lib.perf.schemes.predict_accumulated`), the choice
    (:func:`course_lib.perf.schemes.fastest_that_fits`) and why. When nothing fits, the largest smaller
    micro-batch (halving) at which something does. One device: DDP, accumulating or not. The counts
    are the node table's (the optimizer as one multi-tensor operation per step, as on a GPU: at these
    sizes a small part of the step on a CPU too)."""
    rows = []
    for name in names:
        a, b = bert_counts(name, seq_len, True)
        kinds = schemes.SCHEMES if world_size > 1 else ("DDP",)
        values = seq_len * bert_shape(name, seq_len).hidden_size
        model = dict(values_per_sample=values, precision=precision, op_overhead_s=op_overhead_s)

        def at(micro):
            return schemes.predict_all(a, b, curves, link, world_size=world_size, global_batch=micro * world_size,
                                       micro_batch=micro, schemes=kinds, **model)

        accumulated = schemes.predict_accumulated(a, b, curves, link, world_size=world_size,
                                                  global_batch=micro_batch * world_size, device_bytes=device_bytes,
                                                  **model)
        preds = at(micro_batch) + ([accumulated] if accumulated else [])
        best = schemes.fastest_that_fits(preds, device_bytes)
        smaller, micro = None, micro_batch
        while best is None and micro > 1 and smaller is None:
            micro //= 2
            found = schemes.fastest_that_fits(at(micro), device_bytes)
            smaller = (micro, found) if found else None
        rows.append({"model": name, "parameters": schemes._n_params(a), "micro_batch": micro_batch,
                     "predictions": preds, "choice": best, "smaller": smaller,
                     "why": decision_reason(preds, best, device_bytes, world_size)})
    return rows


def decision_reason(preds: list, best, device_bytes: float, world_size: int) -> str:
    """Why ``best`` (or nothing) was chosen among ``preds``, one of a few fixed reasons (the numbers are the
    decision table's columns)."""
    if best is None:
        return "nothing fits"
    if best.scheme == schemes.ACCUMULATION:
        return "DDP fits by accumulating: the simplest within 10 % of the fastest"
    if world_size == 1:
        return "fits on the one device"
    ddp = next(p for p in preds if p.scheme == "DDP")
    if best.scheme == "DDP":
        return "DDP fits: the simplest, within 10 % of the fastest"
    if ddp.memory_bytes <= device_bytes:
        return "DDP fits, but this is more than 10 % faster"
    if any(p.scheme == schemes.ACCUMULATION and p.memory_bytes <= device_bytes for p in preds):
        return "DDP fits by accumulating, but this is more than 10 % faster"
    return "DDP does not fit"


def _smaller(smaller) -> str:
    """The decision row's smaller micro-batch at which something fits: "4: ZeRO-3 (1.20 GiB, 50 ms)", or "-"."""
    if not smaller:
        return "-"
    m, p = smaller
    return f"{m}: {_scheme_label(p)} ({_gib(p.memory_bytes)}, {_duration(p.step_s)})"


def _accumulating(preds: list) -> str:
    """The decision row's DDP with accumulation: "DDP, 4 micro-batches of 8 (3.10 GiB, 2.1 s)", or "-"."""
    p = next((p for p in preds if p.scheme == schemes.ACCUMULATION), None)
    return f"{_scheme_label(p)} ({_gib(p.memory_bytes)}, {_duration(p.step_s)})" if p else "-"


def decision_table(rows: list[dict], device_bytes: float, world_size: int) -> Table:
    """The decision rows as a table: per model, DDP's memory, DDP accumulating, the choice, its memory and step,
    and why."""
    micro = rows[0]["micro_batch"] if rows else 0
    t = Table(["model", "parameters", "DDP needs per device", "DDP accumulating (memory, step)", "choice",
               "its memory", "its step", "DDP step / its", "why", "fits at (sequences per device)"],
              title=f"what fits on {world_size} x {device_bytes / GiB:.1f} GiB at {micro} sequences per device, and "
                    f"runs fastest (lesson 09's model; the simplest within {schemes.SAME_SPEED:.0%} of the fastest)")
    for r in rows:
        ddp = next(p for p in r["predictions"] if p.scheme == "DDP")
        c = r["choice"]
        n = r["parameters"]
        t.add(**{"model": r["model"], "parameters": f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M",
                 "DDP needs per device": _gib(ddp.memory_bytes),
                 "DDP accumulating (memory, step)": _accumulating(r["predictions"]),
                 "choice": _scheme_label(c) if c else "nothing",
                 "its memory": _gib(c.memory_bytes) if c else "-", "its step": _duration(c.step_s) if c else "-",
                 "DDP step / its": f"{ddp.step_s / c.step_s:.2f}x" if c else "-", "why": r["why"],
                 "fits at (sequences per device)": _smaller(r["smaller"])})
    return t


def device_memory_bytes(hw, world_size: int) -> float:
    """Memory one rank may use: its GPU's, or this machine's RAM shared by ``world_size`` CPU ranks."""
    if hw.gpus:
        return min(g.memory_gib for g in hw.gpus) * GiB
    import psutil

    return psutil.virtual_memory().total / world_size
