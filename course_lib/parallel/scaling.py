"""Strong and weak scaling: rows, table and figure from data-parallel runs (lesson 06)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..tables import Table


def scaling_rows(strong: dict, weak: dict) -> list[dict]:
    """Strong (fixed global batch) and weak (fixed per-rank batch) scaling, one row per run.

    ``strong``/``weak``: ``{world_size: result record}``. Efficiency is throughput over
    ``world_size x`` the one-rank throughput of the same mode (1.0 = perfect scaling); for
    strong scaling also time-to-target efficiency ``T(1) / (W T(W))``.
    """
    rows = []
    for mode, runs in (("strong", strong), ("weak", weak)):
        one = runs.get(1)
        for w in sorted(runs):
            r = runs[w]
            speedup = r["samples_per_s"] / one["samples_per_s"] if one else None
            ttt, ttt1 = r["time_to_target_s"], one["time_to_target_s"] if one else None
            comm = r.get("comm_time_s") or 0.0
            rows.append({
                "mode": mode, "world_size": w, "global_batch": r["config"]["global_batch_size"],
                "per_rank_batch": r["config"]["global_batch_size"] // w, "lr": r["config"]["peak_lr"],
                "samples_per_s": r["samples_per_s"], "speedup": speedup,
                "efficiency": speedup / w if speedup is not None else None,
                "time_to_target_s": ttt, "epochs_to_target": r["epochs_to_target"],
                "ttt_efficiency": ttt1 / (w * ttt) if (mode == "strong" and ttt and ttt1) else None,
                "comm_s": comm, "comm_share": comm / r["train_time_s"] if r["train_time_s"] else None,
                "final_hr": r["final_hr"]})
    return rows


def scaling_table(rows: list[dict]) -> Table:
    t = Table(["mode", "ranks", "global batch", "per-rank batch", "samples/s", "speedup", "efficiency",
               "time to target (s)", "epochs to target", "comm (s)", "comm share", "final HR@10"],
              title="Strong scaling (fixed global batch) and weak scaling (fixed per-rank batch)")
    for r in rows:
        t.add(**{"mode": r["mode"], "ranks": r["world_size"], "global batch": r["global_batch"],
                 "per-rank batch": r["per_rank_batch"], "samples/s": r["samples_per_s"],
                 "speedup": r["speedup"], "efficiency": r["efficiency"],
                 "time to target (s)": r["time_to_target_s"] if r["time_to_target_s"] is not None else "not reached",
                 "epochs to target": r["epochs_to_target"], "comm (s)": r["comm_s"],
                 "comm share": f"{r['comm_share']:.0%}" if r["comm_share"] is not None else None,
                 "final HR@10": r["final_hr"]})
    return t


def plot_scaling(rows: list[dict]):
    """Two panels: samples/s vs ranks (with the ideal line) and scaling efficiency vs ranks."""
    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(10, 3.6))
    for mode, color in (("strong", "tab:blue"), ("weak", "tab:orange")):
        rs = [r for r in rows if r["mode"] == mode]
        if not rs:
            continue
        w = [r["world_size"] for r in rs]
        ax_t.plot(w, [r["samples_per_s"] for r in rs], "o-", color=color, label=f"{mode} scaling")
        base = next((r["samples_per_s"] for r in rs if r["world_size"] == 1), None)
        if base:
            ax_t.plot(w, [base * x for x in w], ":", color=color, label=f"ideal ({mode})")
        ax_e.plot(w, [r["efficiency"] for r in rs], "o-", color=color, label=mode)
    ax_t.set(xlabel="ranks", ylabel="training samples/s", title="throughput")
    ax_e.axhline(1.0, color="gray", ls=":", lw=1)
    ax_e.set(xlabel="ranks", ylabel="efficiency = speedup / ranks", title="scaling efficiency", ylim=(0, 1.2))
    for ax in (ax_t, ax_e):
        ax.set_xticks(sorted({r["world_size"] for r in rows}))
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
