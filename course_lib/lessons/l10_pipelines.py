"""Lesson 10's pipelines: the bubble of GPipe and 1F1B measured against ``(p-1)/(m+p-1)`` at 2, 3 and 4
stages, their timelines, and PipeDream's asynchronous pipeline (staleness, weight stashing, its replay).

The mechanics live in :mod:`course_lib.parallel.pipeline` and :mod:`course_lib.parallel.async_pipeline`; the
main launch of :mod:`.l10_model_parallelism` runs the 2-stage pipelines, :func:`four_rank_worker` the others.
"""

from __future__ import annotations

import math

from .. import compare
from ..config import pick
from ..parallel import pipeline
from ..tables import Table
from .l10_model_parallelism import TOLERANCE, equal_mark

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
                "gradients = one process": equal_mark(r["grad_diff"]),
                # 1F1B refuses m < p; elsewhere torch's pipelining runs only at the main launch's p
                "torch.distributed.pipelining = one process": equal_mark(r["native_grad_diff"])
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


def bubble_comparisons(rows: list[dict], goal: float = BUBBLE_GOAL_POINTS) -> list[compare.Comparison]:
    """Per depth: the measured bubble less the formula's, in points, its mean over the depth's rows (schedules
    and m) with the t interval of their spread, against ``goal``: "same" is a formula good to ``goal`` points.
    A depth with one row has no spread and no row."""
    out = []
    for p in sorted({r["p"] for r in rows}):
        gaps = [100 * (r["measured"] - r["predicted"]) for r in rows if r["p"] == p]
        if len(gaps) < 2:
            continue
        mean = sum(gaps) / len(gaps)
        se = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1) / len(gaps))
        out.append(compare.quantity(f"pipeline bubble, measured - (p-1)/(m+p-1), p = {p}", mean, se,
                                    needed=goal, df=len(gaps) - 1, resolution=0.0 if se else 0.1,
                                    unit="points", n=str(len(gaps)),
                                    basis=f"{len(gaps)} schedule x m rows"))
    return out


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
    one-process replay of the same stale updates (weights and losses). The simulation uses one mean forward and
    one mean backward for every stage, so it cannot show idle from unequal stages; ``steady_replayed``
    (:func:`pipeline.replay`) can, and splits the measured steady-state idle."""
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


def stash_gaps(rows: list[dict]) -> dict[int, float]:
    """Per depth: the largest weight difference between the run without stashing and the stashed one."""
    from ..parallel import async_pipeline as ap

    by = {(r["p"], r["mode"]): r for r in rows}
    return {p: ap.max_difference(by[(p, "stashed")]["weights"], by[(p, "not stashed")]["weights"])
            for p in sorted({r["p"] for r in rows}) if (p, "not stashed") in by and (p, "stashed") in by}


def stash_comparisons(gaps: dict[int, float], tol: float = ASYNC_TOLERANCE) -> list[compare.Comparison]:
    """Per depth: how far the run without stashing ended from the stashed one (the largest weight difference),
    against zero, with ``tol`` (the resolution the pipeline is compared with its replay to) as its interval:
    "higher" is a drift resolved, "unresolved" one within the resolution."""
    return [compare.quantity(f"weights, |not stashed - stashed|, p = {p}", g, 0.0, needed=compare.EXACT,
                             resolution=tol, basis=f"resolution {tol:g}: the pipeline against its replay", n="1")
            for p, g in sorted(gaps.items())]


def async_equal(rows: list[dict], tol: float = ASYNC_TOLERANCE) -> bool:
    """Every run (both modes, every depth) equals its one-process replay within ``tol``."""
    return bool(rows) and all(r["replay_diff"] <= tol for r in rows)


def async_table(rows: list[dict]) -> Table:
    """Per depth and mode: staleness and versions held per stage, bubbles, the difference from the replay."""
    title = f"PipeDream's 1F1B without flushes, {rows[0]['n']} micro-batches, one SGD step each" if rows else ""
    t = Table(["p", "weights", "staleness per stage (updates)", "versions held at once per stage",
               "bubble, whole run: formula", "measured", "steady state: simulated (mean ops)", "replayed (each op)",
               "measured ", "forward per micro-batch (ms)", "CPU share", "|pipeline - replay|"], title=title)
    for r in rows:
        t.add(**{"p": r["p"], "weights": r["mode"], "staleness per stage (updates)": " ".join(map(str, r["staleness"])),
                 "versions held at once per stage": " ".join(map(str, r["held"])),
                 "bubble, whole run: formula": f"{r['bubble_formula']:.3f}", "measured": f"{r['bubble_measured']:.3f}",
                 # a simulated idle fraction can round below 0: shown as 0
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
    backward took the gradient at, and the one the update was applied to. Rows recorded as pairs (forward's,
    updated) are read by the run's mode: stashed, the backward used the forward's version; not stashed, the
    current one (the updated)."""
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




def staleness_table(conv: list[dict]) -> Table:
    """Per depth and mode: the final model's held-out loss, relative to synchronous SGD and to the stashed run of
    the same depth. One seed each: a table, not a verdict (the markdown says what would make one)."""
    sync = next(r for r in conv if r["p"] == 1)["held_out_loss"]
    stashed = {r["p"]: r["held_out_loss"] for r in conv if r["mode"] == "stashed"}
    t = Table(["p", "weights", "held-out loss", "vs synchronous", "vs stashed"],
              title="what staleness cost: the held-out loss after the same micro-batches")
    for r in conv:
        loss = r["held_out_loss"]
        ref = stashed.get(r["p"])
        t.add(**{"p": r["p"], "weights": r["mode"], "held-out loss": f"{loss:.4f}",
                 "vs synchronous": f"{loss / sync - 1:+.1%}",
                 "vs stashed": f"{loss / ref - 1:+.1%}" if r["mode"] == "not stashed" and ref else "-"})
    return t


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


# --------------------------------------------------------------------------- deeper pipelines: p = 3 and 4

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
