"""Lesson 10's "which scheme, for which model?": lesson 09's model of BERT on a node of 8 GPUs, and on this one."""

from __future__ import annotations

import functools

from . import l09_performance_model as performance_study
from ..comm import cost
from ..models.bert import bert_config
from ..perf import schemes
from ..tables import Table

GiB = 2**30
# BERT-large (Devlin et al. 2018); 1.3B and 6.7B: GPT-3 XL's and 6.7B's layers (Brown et al. 2020, table 2.1),
# all with BERT's vocabulary (30522), 512 positions and 2 segment types
BERT_SHAPES = {
    "BERT-base": {},
    "BERT-large": dict(num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096),
    "BERT-1.3B": dict(num_layers=24, hidden_size=2048, num_heads=16, intermediate_size=8192),
    "BERT-6.7B": dict(num_layers=32, hidden_size=4096, num_heads=32, intermediate_size=16384),
}


def bert_shape(name: str, seq_len: int = 512):
    if name not in BERT_SHAPES:
        raise ValueError(f"unknown BERT {name!r}: choose one of {tuple(BERT_SHAPES)}")
    return bert_config("base", vocab_size=30522, type_vocab_size=2, max_position=max(seq_len, 512),
                       **BERT_SHAPES[name])


@functools.lru_cache(maxsize=16)
def bert_counts(name: str, seq_len: int) -> tuple:
    """Lesson 09's counts of the BERT step at 2 and 4 sequences (others interpolate), as on a GPU. Cached."""
    return tuple(performance_study.bert_step_counts(bert_shape(name, seq_len), (2, 4), seq_len, gpu=True))


def _predict(name, seq_len, micro_batch, world_size, **kw) -> list:
    """Every scheme of model ``name`` at ``micro_batch`` sequences per device (tensor, pipeline: per micro-batch)."""
    return schemes.predict_all(*bert_counts(name, seq_len), world_size=world_size,
                               global_batch=micro_batch * world_size, micro_batch=micro_batch,
                               values_per_sample=seq_len * bert_shape(name, seq_len).hidden_size, **kw)


def node_predictions(names, *, world_size: int, micro_batch: int, seq_len: int, **kw) -> dict[str, list]:
    return {name: _predict(name, seq_len, micro_batch, world_size, **kw) for name in names}


def _gib(x: float) -> str:
    return f"{x / GiB:.2f} GiB"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s" if seconds < 100 else f"{seconds:,.0f} s"


def _scheme_label(p) -> str:
    if p.scheme == schemes.ACCUMULATION:
        return f"DDP, {p.global_batch // p.world_size // p.micro_batch} micro-batches of {p.micro_batch}"
    if p.scheme == "tensor":
        return f"tensor x{p.world_size}"
    if p.scheme == "pipeline":
        return f"pipeline x{p.world_size} (1F1B, m = {p.global_batch // p.micro_batch})"
    return p.scheme


def _priced(p) -> str:
    return f"{_scheme_label(p)} ({_gib(p.memory_bytes)}, {_duration(p.step_s)})" if p else "-"


def node_table(by_link: dict[str, dict[str, list]]) -> Table:
    """Per model and scheme on each link of ``by_link`` (name -> :func:`node_predictions`): memory, bytes sent, step."""
    links = list(by_link)
    first = links[0]
    return Table(["model", "scheme", "memory", "activations", "sent"] + [f"step ms, {k}" for k in links]
                 + [f"exposed ms, {first}", f"seq/s, {first}"], [
        {"model": name, "scheme": _scheme_label(p), "memory": _gib(p.memory_bytes), "activations": _gib(p.activations),
         "sent": cost.human_bytes(p.sent_bytes),
         **{f"step ms, {k}": f"{by_link[k][name][i].step_s * 1e3:.1f}" for k in links},
         f"exposed ms, {first}": f"{p.exposed_comm_s * 1e3:.2f}", f"seq/s, {first}": f"{p.samples_per_s:,.0f}"}
        for name, preds in by_link[first].items() for i, p in enumerate(preds)])


def node_choice_table(by_link: dict[str, dict[str, list]], device_bytes: float) -> Table:
    """Per model on the first link: the choice, the schemes as fast, TP against it on every link, those too big."""
    links = list(by_link)
    t = Table(["model", "choice", "step ms", "as fast"] + [f"TP / choice, {k}" for k in links]
              + ["TP excess ms", "TP exposed ms", "too big"])
    for name, preds in by_link[links[0]].items():
        best = schemes.fastest_that_fits(preds, device_bytes)
        too_big = ", ".join(_scheme_label(p) for p in preds if p.memory_bytes > device_bytes) or "-"
        if best is None:
            t.add(model=name, choice="nothing fits", **{"too big": too_big})
            continue
        fits = [p for p in preds if p.memory_bytes <= device_bytes]
        fastest = min(p.step_s for p in fits)
        same = [_scheme_label(p) for p in fits if p is not best and p.step_s <= fastest * (1 + schemes.SAME_SPEED)]
        row = {"model": name, "choice": _scheme_label(best), "step ms": best.step_s * 1e3,
               "as fast": ", ".join(same) or "-", "too big": too_big}
        tp = next((p for p in preds if p.scheme == "tensor"), None)
        if tp is not None:
            for k in links:
                by = {p.scheme: p for p in by_link[k][name]}
                row[f"TP / choice, {k}"] = f"{by['tensor'].step_s / by[best.scheme].step_s:.2f}x"
            row.update({"TP excess ms": (tp.step_s - best.step_s) * 1e3, "TP exposed ms": tp.exposed_comm_s * 1e3})
        t.add(**row)
    return t


def decision_rows(names, *, world_size: int, device_bytes: float, micro_batch: int, seq_len: int, curves, link,
                  precision: str, op_overhead_s: float | None = None) -> list[dict]:
    """Per model: every scheme on this machine and DDP accumulating, the choice, why, and a smaller micro-batch."""
    kw = dict(curves=curves, link=link, precision=precision, op_overhead_s=op_overhead_s)
    kinds = schemes.SCHEMES if world_size > 1 else ("DDP",)
    rows = []
    for name in names:
        accumulated = schemes.predict_accumulated(
            *bert_counts(name, seq_len), world_size=world_size, global_batch=micro_batch * world_size,
            device_bytes=device_bytes, values_per_sample=seq_len * bert_shape(name, seq_len).hidden_size, **kw)
        preds = _predict(name, seq_len, micro_batch, world_size, schemes=kinds, **kw) + [accumulated] * (
            accumulated is not None)
        best = schemes.fastest_that_fits(preds, device_bytes)
        smaller, micro = None, micro_batch
        while best is None and micro > 1 and smaller is None:
            micro //= 2
            found = schemes.fastest_that_fits(_predict(name, seq_len, micro, world_size, schemes=kinds, **kw),
                                              device_bytes)
            smaller = (micro, found) if found else None
        rows.append({"model": name, "parameters": schemes._n_params(bert_counts(name, seq_len)[0]),
                     "micro_batch": micro_batch, "predictions": preds, "choice": best, "smaller": smaller,
                     "why": decision_reason(preds, best, device_bytes, world_size), "accumulated": accumulated})
    return rows


def decision_reason(preds: list, best, device_bytes: float, world_size: int) -> str:
    """Why ``best`` (or nothing) was chosen, in a few words the notebook explains."""
    if best is None:
        return "nothing fits"
    if best.scheme == schemes.ACCUMULATION:
        return "DDP accumulating, simplest"
    if world_size == 1:
        return "one device"
    if best.scheme == "DDP":
        return "DDP, simplest"
    if next(p for p in preds if p.scheme == "DDP").memory_bytes <= device_bytes:
        return "faster than DDP"
    if any(p.scheme == schemes.ACCUMULATION and p.memory_bytes <= device_bytes for p in preds):
        return "faster than accumulating"
    return "DDP too big"


def decision_table(rows: list[dict], device_bytes: float, world_size: int) -> Table:
    micro = rows[0]["micro_batch"] if rows else 0
    t = Table(["model", "params", "DDP memory", "DDP accumulating", "choice", "memory", "step", "DDP / choice",
               "why", "fits at"], title=f"{world_size} x {device_bytes / GiB:.1f} GiB, micro-batch {micro}")
    for r in rows:
        ddp = next(p for p in r["predictions"] if p.scheme == "DDP")
        c, n = r["choice"], r["parameters"]
        t.add(model=r["model"], params=f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M",
              why=r["why"], choice=_scheme_label(c) if c else "nothing",
              memory=_gib(c.memory_bytes) if c else "-", step=_duration(c.step_s) if c else "-",
              **{"DDP memory": _gib(ddp.memory_bytes),
                 "DDP accumulating": _priced(r["accumulated"]),
                 "DDP / choice": f"{ddp.step_s / c.step_s:.2f}x" if c else "-",
                 "fits at": f"{r['smaller'][0]}: {_priced(r['smaller'][1])}" if r["smaller"] else "-"})
    return t


def device_memory_bytes(hw, world_size: int) -> float:
    """Memory one rank may use: its GPU's, or this machine's RAM shared by ``world_size`` CPU ranks."""
    if hw.gpus:
        return min(g.memory_gib for g in hw.gpus) * GiB
    import psutil

    return psutil.virtual_memory().total / world_size
