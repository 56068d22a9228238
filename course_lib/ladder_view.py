"""The ladder shown: its figure, and the talk's ladder beside this machine's (lessons 05-06, the run summary).

The seed talk (:data:`TALK_SOURCE`) trained NCF rung by rung on one GPU; :data:`TALK_LADDER` holds its figures as
it says them, and :func:`talk_table` sets each beside this machine's rung from :mod:`course_lib.ladder`, with what
this hardware cannot show (:func:`hardware_limit`, from the tier plan) in fixed words.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .hardware import detect
from .ladder import LADDER_STEPS, interval_cell, ladder_rows
from .plots import plot_ladder, plot_speedups_beside
from .tables import Table


def ladder_figure(directory: Path | None = None, path: Path | None = None, tier_plan=None):
    """The ladder as a bar chart (:func:`course_lib.plots.plot_ladder`) with, on the right, the talk's speedups beside
    this machine's (:func:`course_lib.plots.plot_speedups_beside`, from :func:`talk_rows`); written to ``path`` as
    PNG when given (the run summary's ``ladder.png``). Returns the figure, or None without rows."""
    rows = ladder_rows(directory)
    if not rows:
        return None
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 0.8 + 0.55 * max(len(rows), len(LADDER_STEPS))),
                             gridspec_kw={"width_ratios": [1, 1, 1.1]})
    axes[1].sharey(axes[0])
    plot_ladder(rows, axes=axes[:2])
    beside = talk_rows(directory, tier_plan)
    comps = [b["comparison"] for b in beside]
    plot_speedups_beside([b["step"] for b in beside], [b["talk_speedup"] for b in beside],
                         [b["speedup"] for b in beside], low=[c.low if c else None for c in comps],
                         high=[c.high if c else None for c in comps],
                         notes=[b["limit"] or (None if b["speedup"] else _this_machine(b["mine"])) for b in beside],
                         ax=axes[2])
    axes[2].set_title("the talk's speedups beside this machine's", fontsize=9)
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig

# --------------------------------------------------------------------------- the talk's ladder beside this machine's

TALK_SOURCE = ("Swetha Mandava (NVIDIA), \"Distributed Large Batch Training\", Deep Learning for Science School 2020 "
               "(https://dl4sci-school.lbl.gov/swetha-mandava): its first part trains NCF in a notebook to 90 % "
               "accuracy on one GPU it does not name, each timed rung for 10 epochs")


@dataclasses.dataclass(frozen=True)
class TalkRung:
    """One rung of the talk's NCF ladder: the course's slot it corresponds to, what the talk ran, its time to
    target as the talk says it, the speedup in the talk's words where it says one, and where in the talk."""

    step: str
    ran: str
    time_s: float
    says: str
    where: str


# The talk's figures, each as said (its transcript, checked rung by rung). It gives no time for warmup alone:
# its x192 rung (130 s; "I scaled the learning rate, also by 192", after "going from 16x to 192") is what it
# shows before explaining warmup, so it stands in the "+warmup" slot, the course's "a bigger batch still". Its
# mixed-precision rung starts "from 130": the x192 rung's time, not LARS's 135 s. Its "9x" is its own rounding:
# 1384 s / 172 s is 8.0x. It says "10 epochs" for the x16 rung ("again": as the baseline), the x192 rung and
# LARS; for mixed precision it names no epoch count.
TALK_LADDER = (
    TalkRung("baseline", "SGD, 10 epochs (said at the next rung)", 1384.0,
             "\"we want to reduce this 1384 as much as possible\"",
             "notebook, after loading the data (cells 5-6)"),
    TalkRung("+linear scaling", "batch and lr x16, 10 epochs", 172.0,
             "\"our time to target is at 172 ... We already have a 9x speed up\"",
             "notebook, after the linear scaling rule's three graphs"),
    TalkRung("+warmup", "batch and lr x192, 10 epochs", 130.0,
             "\"from 170 something seconds to 130 seconds\"",
             "notebook, just before warmup (cell 12)"),
    TalkRung("+LARS", "LARS, same data and parameters, 10 epochs", 135.0,
             "\"from 1300 something seconds to 135 seconds without losing any accuracy\"",
             "notebook, after LARS on AlexNet at batch 8192"),
    TalkRung("+mixed precision", "amp (fp16), from the x192 rung's 130 s", 70.0,
             "\"gone down from 130 to 70, which is a really simple, 2x speed up\"",
             "end of the notebook part, after amp.initialize and amp.scale_loss"),
)

# What this hardware cannot show, in fixed words: a rung whose gain needs what the tier plan says is missing
NO_16_BIT_UNITS = "no 16-bit units"  # "auto" precision is fp32: 16-bit math is emulated, slower than fp32
ONE_DEVICE = "one device"  # the data-parallel ranks share one CPU (or, beside one GPU, are CPU processes)


def hardware_limit(step: str, tier_plan) -> str | None:
    """What this hardware cannot show for the rung ``step``, from the tier plan (:func:`course_lib.tiers.plan`):
    :data:`NO_16_BIT_UNITS` for mixed precision where "auto" means fp32, :data:`ONE_DEVICE` for data parallel where
    the ranks are CPU processes; None where the hardware can show the rung's gain."""
    if step == "+mixed precision" and tier_plan.precision == "fp32":
        return NO_16_BIT_UNITS
    if step == "+data parallel" and tier_plan.dp_device != "cuda":
        return ONE_DEVICE
    return None


def talk_speedup(rung: TalkRung) -> float:
    """The talk's speedup over its baseline from its own times (the same basis as this machine's speedup)."""
    return TALK_LADDER[0].time_s / rung.time_s


def _this_machine(r: dict) -> str:
    """This machine's rung where it has no speedup, in fixed words."""
    if not r:
        return "not saved"
    return "not run" if r.get("not_run") else "not reached"


def talk_rows(directory: Path | None = None, tier_plan=None) -> list[dict]:
    """One row per slot of :data:`LADDER_STEPS`: ``talk`` (its :class:`TalkRung`, None where the talk has none) and
    ``talk_speedup``; ``mine`` (this machine's rung, :func:`ladder_rows`; {} where none is saved), ``comparison`` (its
    speedup over the baseline) and ``speedup``; ``limit``: what this hardware cannot show (:func:`hardware_limit`;
    ``tier_plan``: default this machine's)."""
    if tier_plan is None:
        from .tiers import plan
        tier_plan = plan(detect())
    mine = {r["step"]: r for r in ladder_rows(directory)}
    talk = {t.step: t for t in TALK_LADDER}
    return [{"step": step, "talk": talk.get(step), "talk_speedup": talk_speedup(talk[step]) if step in talk else None,
             "mine": mine.get(step, {}), "comparison": mine.get(step, {}).get("comparison"),
             "speedup": mine.get(step, {}).get("speedup"), "limit": hardware_limit(step, tier_plan)}
            for step in LADDER_STEPS]


TALK_COLUMNS = ["rung", "the talk ran", "talk's time (s)", "talk's speedup", "the talk says", "this machine's speedup",
                "interval", "outcome", "this hardware"]


def talk_table(directory: Path | None = None, tier_plan=None) -> Table:
    """The talk's ladder (:data:`TALK_LADDER`) beside this machine's, one row per slot (:func:`talk_rows`): what the
    talk ran, its time, its speedup over its baseline from its times, its words; this machine's speedup over the
    baseline at lesson 01's pace with its interval and outcome; what this hardware cannot show."""
    table = Table(TALK_COLUMNS, title="The talk's ladder beside this machine's (speedups over each one's baseline)")
    for row in talk_rows(directory, tier_plan):
        t, r, c = row["talk"], row["mine"], row["comparison"]
        table.add(**{"rung": row["step"], "the talk ran": t.ran if t else "—",
                     "talk's time (s)": f"{t.time_s:g}" if t else "—",
                     "talk's speedup": f"{row['talk_speedup']:.3g}x" if t else "—",
                     "the talk says": t.says if t else "—",
                     "this machine's speedup": r.get("speedup_shown") or _this_machine(r),
                     "interval": interval_cell(c), "outcome": c.outcome if c else "—",
                     "this hardware": row["limit"] or "—"})
    return table
