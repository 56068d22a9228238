"""Lesson 10's pipelines: GPipe's and 1F1B's bubble against ``(p-1)/(m+p-1)``, their timelines, and PipeDream's
asynchronous pipeline (staleness, weight stashing). The mechanics are :mod:`course_lib.parallel`'s."""

from __future__ import annotations

import math
import statistics

from .. import compare
from ..config import pick
from ..parallel import async_pipeline as ap
from ..parallel import pipeline
from ..tables import Table
from .l10_model_parallelism import TOLERANCE, equal_mark

BUBBLE_GOAL_POINTS = 10.0  # lesson 10's goal: measured within 10 points of the formula
ASYNC_TOLERANCE = 1e-6  # the pipeline against its one-process replay (the same stale updates)


def bubble_table(rows: list[dict]) -> Table:
    def pts(r, a, b):
        return f"{100 * (r[a] - r[b]):+.1f}"

    return Table(["schedule", "p", "m", "formula", "measured", "diff pts", "unequal ops", "between ops", "fwd ms",
                  "CPU", "grads", "torch"], [
        {**r, "formula": f"{r['predicted']:.3f}", "measured": f"{r['measured']:.3f}",
         "diff pts": pts(r, "measured", "predicted"), "unequal ops": pts(r, "replayed", "predicted"),
         "between ops": pts(r, "measured", "replayed"), "fwd ms": f"{r['forward_ms']:.2f}",
         "CPU": "n/a" if r["cpu_share"] is None else f"{r['cpu_share']:.0%}", "grads": equal_mark(r["grad_diff"]),
         # torch.distributed.pipelining: Schedule1F1B refuses m < p; it runs at the main launch's p only
         "torch": equal_mark(r["native_grad_diff"]) if r["native_grad_diff"] is not None
         else "n/a (m < p)" if r["schedule"] == "1F1B" and r["m"] < r["p"] else "not run"}
        for r in rows], title=f"median of {rows[0]['runs']} runs" if rows else "")


def worst_bubble_gap(rows: list[dict]) -> float:
    return max(100 * abs(r["measured"] - r["predicted"]) for r in rows)


def bubble_comparisons(rows: list[dict], goal: float = BUBBLE_GOAL_POINTS) -> list[compare.Comparison]:
    """Per depth with two rows or more: the mean of measured - formula (points) over its rows, against ``goal``."""
    out = []
    for p in sorted({r["p"] for r in rows}):
        gaps = [100 * (r["measured"] - r["predicted"]) for r in rows if r["p"] == p]
        if len(gaps) < 2:
            continue
        mean, se = statistics.fmean(gaps), statistics.stdev(gaps) / math.sqrt(len(gaps))
        out.append(compare.quantity(f"bubble - formula, p = {p}", mean, se, needed=goal, df=len(gaps) - 1,
                                    resolution=0.0 if se else 0.1, unit="points", n=str(len(gaps)),
                                    basis=f"{len(gaps)} schedule x m rows"))
    return out


def _mean_ops(events) -> tuple[float, float]:
    return tuple(sum(e.end - e.start for e in events if e.kind == k) / max(1, sum(e.kind == k for e in events))
                 for k in "FB")


def plot_timelines(per_rank: list[dict], m: int, run: int = 0):
    """``(fig, axes)``: per schedule, which rank computes what when, measured, then simulated at the mean op times."""
    import matplotlib.pyplot as plt

    names = [n for n in pipeline.SCHEDULES if any(r["schedule"] == n and r["m"] == m for r in per_rank[0]["rows"])]
    panels = [(n, kind) for kind in ("measured", "simulated") for n in names]
    p = len(per_rank)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 1.2 + 1.0 * len(panels) * p / 2), squeeze=False)
    colors = {"F": "#7fb3e0", "B": "#2f6ea8"}
    for ax, (name, kind) in zip(axes[:, 0], panels):
        events = pipeline.timeline(per_rank, name, m, run)
        if kind == "simulated":
            events = pipeline.simulate(pipeline.SCHEDULES[name](p, m), *_mean_ops(events))
        for e in events:
            ax.barh(e.stage, e.end - e.start, left=e.start, color=colors[e.kind], edgecolor="white", height=0.8)
            if e.end - e.start > 0.03 * max(x.end for x in events):
                ax.text((e.start + e.end) / 2, e.stage, f"{e.kind}{e.mb}", ha="center", va="center", fontsize=7,
                        color="black" if e.kind == "F" else "white")
        ax.set_yticks(range(p), [f"rank {s}" for s in range(p)])
        ax.invert_yaxis()
        ax.set_title(f"{name}, p = {p}, m = {m}, {kind}: idle {pipeline.idle_fraction(events):.0%} "
                     f"(formula {pipeline.bubble_fraction(p, m):.0%})", fontsize=9)
    axes[-1, 0].set_xlabel("seconds")
    fig.tight_layout()
    return fig, axes


def bert_pipeline_equal(outs: list[dict]) -> bool:
    return all(r["grad_diff"] <= TOLERANCE for o in outs for r in o["bert_pipeline"]["rows"])


def in_flight_table(p: int, m: int) -> Table:
    """Micro-batches whose activations each stage holds at most, per schedule."""
    return Table(["schedule"] + [f"stage {s}" for s in range(p)], [
        {"schedule": name, **{f"stage {s}": v for s, v in enumerate(pipeline.peak_in_flight(make(p, m)))}}
        for name, make in pipeline.SCHEDULES.items()])


def four_rank_spec(profile: str) -> dict:
    """The 4-rank launch: PipeDream's pipeline, GPipe and 1F1B at 3 and 4 stages, and the stale updates' replay.
    Convergence's lr 1.0: the largest of 0.5 / 1 / 2 / 3 at which synchronous SGD kept improving on our runs."""
    return {"async": {"width": pick(profile, full=256, smoke=32), "depth": 8,
                      "micro_batch": pick(profile, full=64, smoke=16), "n": pick(profile, full=48, smoke=12),
                      "lr": 0.5, "depths": [2, 3, 4]},
            "deep": {"width": pick(profile, full=512, smoke=64), "depth": 12, "ps": [3, 4],
                     "batch": pick(profile, full=256, smoke=32), "ms": pick(profile, full=[1, 4, 8], smoke=[1, 4]),
                     "schedules": ["GPipe", "1F1B"], "repeats": pick(profile, full=3, smoke=1)},
            "convergence": {"width": 32, "depth": 8, "micro_batch": 16, "n": pick(profile, full=400, smoke=40),
                            "lr": 1.0, "depths": [1, 2, 4]}}


def four_rank_worker(rank: int, world_size: int, spec: dict) -> dict:
    """The asynchronous pipeline and the deeper synchronous ones, in the same processes (a launch costs seconds)."""
    return {"async": ap.async_worker(rank, world_size, spec["async"]),
            "deep": pipeline.pipeline_depths_worker(rank, world_size, spec["deep"])}


def async_rows(outs: list[dict], spec: dict) -> list[dict]:
    """Per depth and mode: the steady state's idle simulated at the mean op time, replayed with each op's, measured."""
    rows = []
    for r in ap.collect([o["async"] if "async" in o else o for o in outs]):
        p, n, ev = r["p"], spec["n"], r["events"]
        sched = ap.pipedream_schedule(p, n)
        ref = ap.sequential_replay(spec, p, stash=r["mode"] == "stashed")
        tf, tb = _mean_ops(ev)
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


def stash_gaps(rows: list[dict]) -> dict[int, float]:
    """Per depth: the largest weight difference between the run without stashing and the stashed one."""
    by = {(r["p"], r["mode"]): r for r in rows}
    return {p: ap.max_difference(by[(p, "stashed")]["weights"], by[(p, "not stashed")]["weights"])
            for p in sorted({r["p"] for r in rows}) if (p, "not stashed") in by and (p, "stashed") in by}


def stash_comparisons(gaps: dict[int, float], tol: float = ASYNC_TOLERANCE) -> list[compare.Comparison]:
    """Per depth: the unstashed run's drift from the stashed one against zero, resolved to the replay's ``tol``."""
    return [compare.quantity(f"drift unstashed, p = {p}", g, 0.0, needed=compare.EXACT, resolution=tol,
                             basis=f"resolution {tol:g}: replay", n="1")
            for p, g in sorted(gaps.items())]


def async_equal(rows: list[dict], tol: float = ASYNC_TOLERANCE) -> bool:
    return bool(rows) and all(r["replay_diff"] <= tol for r in rows)


def async_table(rows: list[dict]) -> Table:
    """:func:`async_rows` as a table (an idle fraction that rounds below 0 shows as 0)."""
    return Table(["p", "weights", "staleness", "versions", "bubble formula", "bubble", "steady simulated",
                  "steady replayed", "steady", "fwd ms", "CPU", "|pipe - replay|"], [
        {"p": r["p"], "weights": r["mode"], "staleness": " ".join(map(str, r["staleness"])),
         "versions": " ".join(map(str, r["held"])), "bubble formula": f"{r['bubble_formula']:.3f}",
         "bubble": f"{r['bubble_measured']:.3f}", "steady simulated": f"{max(r['steady_simulated'], 0.0):.3f}",
         "steady replayed": "-" if r.get("steady_replayed") is None else f"{max(r['steady_replayed'], 0):.3f}",
         "steady": f"{max(r['steady_measured'], 0.0):.3f}", "fwd ms": f"{r['forward_ms']:.2f}",
         "CPU": "-" if r.get("cpu_share") is None else f"{r['cpu_share']:.0%}",
         "|pipe - replay|": f"{r['replay_diff']:.1e}"}
        for r in rows], title=f"{rows[0]['n']} micro-batches" if rows else "")


def versions_table(row: dict, shown: int = 8) -> Table:
    """Per stage: the versions its forward, backward and update used (a pair: the backward's is read by the mode)."""
    t = Table(["micro-batch"] + [f"stage {s}" for s in range(row["p"])], title=f"p = {row['p']}, {row['mode']}")
    for i in range(min(shown, row["n"])):
        cells = {}
        for s in range(row["p"]):
            v = row["versions"][s][i]
            if len(v) == 2:
                v = (v[0], v[0] if row["mode"] == "stashed" else v[1], v[1])
            cells[f"stage {s}"] = "{} / {} / {}".format(*v)
        t.add(**{"micro-batch": i}, **cells)
    return t


def staleness_convergence(spec: dict) -> list[dict]:
    """Per depth and mode, the replay of the pipeline's stale updates (p = 1: synchronous SGD)."""
    out = []
    for p in spec["depths"]:
        for mode in ap.MODES if p > 1 else ap.MODES[:1]:
            r = ap.sequential_replay(spec, p, stash=mode == "stashed")
            out.append({"p": p, "mode": mode if p > 1 else "synchronous", "losses": r["losses"],
                        "held_out_loss": r["held_out_loss"]})
    return out


def staleness_table(conv: list[dict]) -> Table:
    """The held-out losses against synchronous SGD and the stashed run (one seed each: no verdict)."""
    sync = next(r for r in conv if r["p"] == 1)["held_out_loss"]
    stashed = {r["p"]: r["held_out_loss"] for r in conv if r["mode"] == "stashed"}
    return Table(["p", "weights", "held-out loss", "vs sync", "vs stashed"], [
        {"p": r["p"], "weights": r["mode"], "held-out loss": f"{r['held_out_loss']:.4f}",
         "vs sync": f"{r['held_out_loss'] / sync - 1:+.1%}",
         "vs stashed": f"{r['held_out_loss'] / stashed[r['p']] - 1:+.1%}"
         if r["mode"] == "not stashed" and stashed.get(r["p"]) else "-"} for r in conv])


def plot_staleness(conv: list[dict], window: int = 10):
    """Training loss (moving mean over ``window`` micro-batches, one SGD step each) per depth and mode."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for r in conv:
        losses = r["losses"]
        k = min(window, len(losses))
        smooth = [sum(losses[i - k + 1:i + 1]) / k for i in range(k - 1, len(losses))]
        ax.plot(range(k - 1, len(losses)), smooth, ls="--" if r["mode"] == "not stashed" else "-",
                label=f"p = {r['p']}, {r['mode']} (held-out {r['held_out_loss']:.3f})")
    ax.set(xlabel="micro-batches", ylabel=f"loss, mean of {window}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig, ax
