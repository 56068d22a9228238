"""Saved results and the trick ladder (assembled across lessons 01-06).

Each lesson saves what it measured as JSON in the run's results directory
(``$COURSE_RESULTS_DIR``, set by ``make course``; else ``runs/interactive/results``).
The **trick ladder** is built from the rows lessons save with ``save_ladder_row``:
baseline, +linear scaling, +warmup, +LARS, +mixed precision, +data parallel — each with
time-to-target, speedup over the baseline and final HR@10, all measured on this machine.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from .tables import Table

LADDER_STEPS = ("baseline", "+linear scaling", "+warmup", "+LARS", "+mixed precision", "+data parallel")


def results_dir() -> Path:
    """Where this run's results go: ``$COURSE_RESULTS_DIR`` (set by ``make course``), else
    ``runs/interactive/results`` in the course checkout (or the current directory)."""
    if os.environ.get("COURSE_RESULTS_DIR"):
        return Path(os.environ["COURSE_RESULTS_DIR"])
    repo = Path(__file__).resolve().parent.parent
    root = repo if (repo / "pyproject.toml").exists() else Path.cwd()
    return root / "runs" / "interactive" / "results"


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _clean(value):
    """JSON-safe: NaN/inf become None (never a fake number), tensors become lists,
    devices and paths strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (Path,)) or type(value).__name__ == "device":
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "tolist"):
        return _clean(value.tolist())
    return value


def save_result(name: str, record, directory: Path | None = None, **extra) -> Path:
    """Write ``record`` (a dict, or a result with ``to_dict()``) plus ``extra`` fields as
    ``<name>.json`` in the results directory, atomically."""
    payload = record.to_dict() if hasattr(record, "to_dict") else dict(record)
    payload.update(extra)
    path = Path(directory or results_dir()) / f"{name}.json"
    _atomic_write(path, json.dumps(_clean(payload), indent=2, sort_keys=True))
    return path


def load_results(directory: Path | None = None) -> dict[str, dict]:
    d = Path(directory or results_dir())
    return {p.stem: json.loads(p.read_text()) for p in sorted(d.glob("*.json"))} if d.is_dir() else {}


def save_ladder_row(step: str, *, time_to_target_s: float | None, final_hr: float, target_hr: float,
                    directory: Path | None = None, **details) -> Path:
    """Save one rung of the trick ladder. ``time_to_target_s=None`` means "not reached"."""
    if step not in LADDER_STEPS:
        raise ValueError(f"unknown ladder step {step!r}; choose one of {LADDER_STEPS}")
    slug = LADDER_STEPS.index(step)
    row = {"step": step, "time_to_target_s": time_to_target_s, "final_hr": final_hr,
           "target_hr": target_hr, **details}
    return save_result(f"ladder_{slug}", row, directory)


def save_ladder_result(step: str, result, *, setting: str, directory: Path | None = None, **details) -> Path:
    """``save_ladder_row`` from a :class:`course_lib.train.TrainResult` (lessons 01-05): time to
    target, final HR@10 and the run's batch, lr, optimizer, precision and throughput."""
    c = result.config
    return save_ladder_row(step, time_to_target_s=result.time_to_target_s, final_hr=result.final_hr,
                           target_hr=result.target_hr, directory=directory, setting=setting,
                           batch_size=c["batch_size"], lr=c["lr"], optimizer=c["optimizer"],
                           precision=result.precision.get("mode", c["precision"]),
                           warmup_steps=c.get("warmup_steps", 0), steps_to_target=result.steps_to_target,
                           epochs_to_target=result.epochs_to_target, samples_per_s=result.samples_per_s,
                           device=result.device, world_size=result.world_size, config=c, **details)


def ladder_rows(directory: Path | None = None) -> list[dict]:
    """The saved ladder rows in the course's order, each with ``speedup`` over the baseline (or None)."""
    saved = {r["step"]: r for name, r in load_results(directory).items() if name.startswith("ladder_")}
    base = saved.get("baseline", {}).get("time_to_target_s")
    rows = []
    for step in LADDER_STEPS:
        if step in saved:
            r = dict(saved[step])
            ttt = r.get("time_to_target_s")
            r["speedup"] = base / ttt if (base and ttt) else None
            rows.append(r)
    return rows


def ladder_figure(directory: Path | None = None, path: Path | None = None):
    """The ladder as a bar chart (:func:`course_lib.plots.plot_ladder`); written to ``path`` as PNG
    when given (the run summary's ``ladder.png``). Returns the figure, or None without rows."""
    rows = ladder_rows(directory)
    if not rows:
        return None
    from .plots import plot_ladder

    fig = plot_ladder(rows)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def ladder_table(directory: Path | None = None) -> Table:
    """The trick ladder from saved rows, in the course's order, with speedups over the baseline."""
    rows = {r["step"]: r for name, r in load_results(directory).items() if name.startswith("ladder_")}
    t = Table(["step", "time to target (s)", "speedup", "final HR@10", "target", "setting"],
              title="The trick ladder (measured on this machine)")
    base = rows.get("baseline", {}).get("time_to_target_s")
    for step in LADDER_STEPS:
        if step not in rows:
            continue
        r = rows[step]
        ttt = r.get("time_to_target_s")
        speedup = f"{base / ttt:.1f}x" if (base and ttt) else "—"
        t.add(**{"step": step, "time to target (s)": ttt if ttt is not None else "not reached",
                 "speedup": speedup, "final HR@10": r.get("final_hr"), "target": r.get("target_hr"),
                 "setting": r.get("setting", "")})
    return t


def summary_markdown(directory: Path | None = None) -> str:
    """Markdown for a run summary: the ladder (if any rows) and every saved result's scalars."""
    results = load_results(directory)
    if not results:
        return "_No lesson saved results in this run._"
    parts = []
    if any(n.startswith("ladder_") for n in results):
        parts += [ladder_table(directory).to_markdown(), ""]
    for name, rec in results.items():
        if name.startswith("ladder_"):
            continue
        scalars = {k: v for k, v in rec.items() if isinstance(v, (int, float, str, bool)) or v is None}
        t = Table(["quantity", "value"], title=name)
        for k, v in scalars.items():
            t.add(quantity=k, value=v)
        parts += [t.to_markdown(), ""]
    return "\n".join(parts)


def figure_lines(directory: Path | None = None) -> list[str]:
    """One ``FIGURE <lesson>.<quantity> = <value>`` line per measured scalar (for ci/gpu-check.sh)."""
    lines = []
    for name, rec in load_results(directory).items():
        for key, value in sorted(rec.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                lines.append(f"FIGURE {name}.{key} = {value:.6g}")
            elif value is None and (key.endswith("_s") or "to_target" in key):  # a time or a step count
                lines.append(f"FIGURE {name}.{key} = not reached")
    return lines


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "--figures":
        raise SystemExit("usage: python -m course_lib.results --figures RESULTS_DIR")
    print("\n".join(figure_lines(Path(sys.argv[2]))) or "(no results saved)")
