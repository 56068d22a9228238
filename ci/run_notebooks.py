"""Execute the course's notebooks with papermill and write executed copies and a summary.

Used by ``make course`` (full profile, into ``runs/<timestamp>/``) and by ``make test``
(smoke profile, into ``ci/executed/``, which nbval then re-executes and compares).

    python ci/run_notebooks.py --profile smoke --out ci/executed notebooks solutions
    python ci/run_notebooks.py --profile full --out runs/20261129-0912 --kernel largebatch-course notebooks

Each notebook runs in its own directory (so a lesson can import a .py file beside it),
with ``COURSE_PROFILE`` and ``COURSE_RESULTS_DIR`` set; lessons save their measured
results as JSON there, and the summary collects them. A failing notebook does not
stop the others; the exit status is non-zero and the failing cell's error is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# A lesson cell quiet this long gets a line saying the lesson is still running (on a loaded
# 2-core machine lesson 01's lr sweep printed nothing for 23 minutes; cells of 1-2 minutes quiet on a quiet
# machine, lessons 05, 08, 12 and 13, take 3-5x that under load).
HEARTBEAT_S = float(os.environ.get("COURSE_HEARTBEAT_S") or 120)


@dataclass
class NotebookRun:
    notebook: str
    output: str
    ok: bool
    seconds: float
    error: str = ""
    failing_cell: int | None = None


@dataclass
class CourseRun:
    profile: str
    out_dir: str
    runs: list[NotebookRun] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)


def find_notebooks(paths: list[str]) -> list[Path]:
    """Notebooks under the given files/dirs, in lesson order (NN_ prefix), checkpoints skipped."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(q for q in p.glob("*.ipynb") if ".ipynb_checkpoints" not in q.parts)
        elif p.suffix == ".ipynb" and p.exists():
            found.append(p)
        else:
            raise SystemExit(f"run_notebooks: {p} is neither a notebook nor a directory")
    return found


class LessonLines:
    """Where papermill writes a kernel's printed lines (``stdout_file``/``stderr_file``): each complete line
    goes to ``stream`` at once, after ``prefix`` (``"  05 | "``), so ``make course`` shows every training
    run's progress lines as they come. (papermill's ``log_output=True`` sends them to its logger at INFO,
    and nothing configures that logger here: ``make course`` printed none of them. papermill 2.x
    ``clientwrap.PapermillNotebookClient.log_output_message`` writes and flushes the file per message.)"""

    def __init__(self, stream, prefix: str):
        self.stream, self.prefix, self._part = stream, prefix, ""
        self.last = time.monotonic()  # when the kernel last printed (Heartbeat reads it)

    def write(self, text: str) -> int:
        *lines, self._part = (self._part + text.replace("\r\n", "\n").replace("\r", "\n")).split("\n")
        for line in lines:
            if line.strip():
                self.stream.write(f"{self.prefix}{line}\n")
        if text.strip():
            self.last = time.monotonic()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        if self._part.strip():
            self.stream.write(f"{self.prefix}{self._part}\n")
        self._part = ""
        self.flush()


class Heartbeat(threading.Thread):
    """While a lesson runs, a line whenever its kernel has printed nothing for ``every_s`` seconds: how long
    it has been quiet and how far into the lesson (and its budget) it is, so a long cell on a slow machine
    is not mistaken for a hung one. One line per quiet stretch of ``every_s``, none while the kernel prints."""

    def __init__(self, lines: LessonLines, every_s: float = HEARTBEAT_S, budget_s: int | None = None):
        super().__init__(daemon=True)
        self.lines, self.every_s, self.budget_s = lines, every_s, budget_s
        self.start_s = time.monotonic()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(min(self.every_s / 4, 10.0)):
            now = time.monotonic()
            quiet = now - self.lines.last
            if quiet >= self.every_s:
                budget = f" (its budget: {self.budget_s} s)" if self.budget_s else ""
                self.lines.stream.write(f"{self.lines.prefix}... still running: no output for {quiet:.0f} s, "
                                        f"{now - self.start_s:.0f} s into the lesson{budget}\n")
                self.lines.flush()
                self.lines.last = now

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=5)


def execute(nb: Path, out: Path, *, profile: str, kernel: str, results_dir: Path,
            log_output: bool, cell_timeout: int | None, budget_s: int | None = None) -> NotebookRun:
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    out.parent.mkdir(parents=True, exist_ok=True)
    results_dir.mkdir(parents=True, exist_ok=True)
    # The kernel inherits this process's environment; set for this notebook only, so that a test
    # process running other tests afterwards does not save its results into this run's folder.
    saved_env = {k: os.environ.get(k) for k in ("COURSE_PROFILE", "COURSE_RESULTS_DIR")}
    os.environ["COURSE_PROFILE"] = profile
    os.environ["COURSE_RESULTS_DIR"] = str(results_dir.resolve())
    t0 = time.perf_counter()
    prefix = f"  {nb.stem[:2]} | "
    lines = (LessonLines(sys.stdout, prefix), LessonLines(sys.stderr, prefix)) if log_output else (None, None)
    beat = Heartbeat(lines[0], budget_s=budget_s) if log_output else None
    if beat is not None:
        beat.start()
    try:
        # PROFILE is injected too, so re-executing the executed copy (nbval) uses the same profile.
        pm.execute_notebook(str(nb), str(out), parameters={"PROFILE": profile}, kernel_name=kernel,
                            cwd=str(nb.parent.resolve()), stdout_file=lines[0], stderr_file=lines[1],
                            log_output=False, progress_bar=log_output, execution_timeout=cell_timeout)
        return NotebookRun(str(nb), str(out), True, time.perf_counter() - t0)
    except PapermillExecutionError as exc:
        tb = "\n".join(exc.traceback) if exc.traceback else ""
        msg = f"cell {exc.exec_count}: {exc.ename}: {exc.evalue}\n{_strip_ansi(tb)}"
        return NotebookRun(str(nb), str(out), False, time.perf_counter() - t0, msg, exc.exec_count)
    except Exception as exc:  # dead kernel (often: out of memory), timeouts, bad notebook JSON
        hint = " (a dead kernel is often the machine running out of memory)" if "dead" in str(exc).lower() else ""
        return NotebookRun(str(nb), str(out), False, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}{hint}")
    finally:
        if beat is not None:
            beat.stop()
        for stream in lines:
            if stream is not None:
                stream.close()
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def record_failure(nb: Path, r: NotebookRun, results: Path, since: float) -> str:
    """The failure in the run's results (course_lib.summary.record_failure): the summary then says which
    lesson failed at which cell, and the ladder marks its rung "not run: lesson NN failed at cell K"."""
    try:
        sys.path.insert(0, str(REPO))
        from course_lib.summary import record_failure as record

        error = r.error.split("\n", 1)[0].split(": ", 1)[-1] if r.failing_cell is not None else r.error
        return record(str(nb), r.failing_cell, error, directory=results, since=since)
    except Exception as exc:  # the course goes on even if course_lib itself is what broke
        return f"{nb.name} failed (not recorded in the results: {exc})"


def _strip_ansi(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def write_summary(run: CourseRun) -> Path:
    """``summary.md`` and ``summary.json``: hardware, each notebook's status and time, results."""
    out = Path(run.out_dir)
    lines = [f"# Course run — profile `{run.profile}`", "", f"Written {time.strftime('%Y-%m-%d %H:%M:%S')}.", ""]
    try:
        sys.path.insert(0, str(REPO))
        from course_lib import hardware, ladder_view, summary

        lines += [hardware.detect().table().to_markdown(), ""]
        lines += [summary.summary_markdown(out / "results"), ""]
        if ladder_view.ladder_figure(out / "results", out / "ladder.png") is not None:
            lines += ["![The trick ladder](ladder.png)", ""]
    except Exception as exc:  # the summary must still be written if course_lib is broken
        lines += [f"(could not describe hardware/results: {exc})", ""]
    lines += ["## Notebooks", "", "| notebook | status | wall time (s) | executed copy |", "|---|---|---|---|"]
    for r in run.runs:
        status = "ok" if r.ok else f"FAILED (cell {r.failing_cell})" if r.failing_cell else "FAILED"
        lines.append(f"| {Path(r.notebook).name} | {status} | {r.seconds:.1f} | {Path(r.output).name} |")
    lines.append(f"\nTotal: {sum(r.seconds for r in run.runs):.1f} s for {len(run.runs)} notebook(s).")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps({"profile": run.profile, "ok": run.ok,
                                                   "notebooks": [asdict(r) for r in run.runs]}, indent=2))
    return out / "summary.md"


def previous_seconds(out_dir: Path, profile: str) -> dict[str, float]:
    """Each notebook's wall time in the latest earlier run of this profile next to ``out_dir`` (``make
    course`` keeps them in ``runs/<timestamp>/``): the estimate of how long it takes on this machine."""
    earlier = sorted(p for p in out_dir.parent.glob("*/summary.json") if p.parent.resolve() != out_dir.resolve())
    for path in reversed(earlier):
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if saved.get("profile") == profile:
            return {Path(r["notebook"]).name: r["seconds"] for r in saved.get("notebooks", []) if r.get("ok")}
    return {}


def budgets(notebooks: list[Path], profile: str) -> tuple[dict[str, int], str]:
    """Each lesson's time budget (course_lib.budget, the full profile's: lessons size their runs to it) and the
    line ``make course`` prints up front; nothing for the smoke profile or notebooks without a budget."""
    if profile != "full":
        return {}, ""
    try:
        sys.path.insert(0, str(REPO))
        from course_lib.budget import BUDGETS_S, budget_line

        lessons = [nb.stem for nb in notebooks if nb.stem in BUDGETS_S]
        return {f"{n}.ipynb": BUDGETS_S[n] for n in lessons}, (budget_line(lessons) if lessons else "")
    except Exception as exc:  # the course runs even if course_lib itself is what broke
        return {}, f"(no time budgets: {exc})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=["notebooks"], help="notebooks or directories of notebooks")
    parser.add_argument("--profile", choices=["full", "smoke"], default=os.environ.get("COURSE_PROFILE") or "full",
                        help="run profile (default: $COURSE_PROFILE, else full)")
    parser.add_argument("--out", required=True, help="directory for executed copies, results and the summary")
    parser.add_argument("--kernel", default="python3", help="Jupyter kernel name (default: python3)")
    parser.add_argument("--cell-timeout", type=int, default=None, help="seconds per cell (default: none)")
    parser.add_argument("--quiet", action="store_true", help="don't stream cell output (CI)")
    opts = parser.parse_args(argv)

    notebooks = find_notebooks(opts.paths)
    if not notebooks:
        print("run_notebooks: no notebooks found in", opts.paths, file=sys.stderr)
        return 1
    out_dir = Path(opts.out)
    run = CourseRun(opts.profile, str(out_dir))
    t0 = time.perf_counter()
    before = previous_seconds(out_dir, opts.profile)
    budget, line = budgets(notebooks, opts.profile)
    if line:
        print(line, flush=True)
    for i, nb in enumerate(notebooks, 1):
        # executed copies keep their folder name so notebooks/ and solutions/ don't collide
        target = out_dir / nb.parent.name / nb.name
        known = [before[n.name] for n in notebooks[i - 1:] if n.name in before]
        estimate = (f"; {before[nb.name]:.0f} s in the previous {opts.profile} run here, the rest of the course "
                    f"~{sum(known) / 60:.0f} min" if nb.name in before else "")
        limit = f"; budget {budget[nb.name]} s" if nb.name in budget else ""
        print(f"[{i}/{len(notebooks)}] {nb} (profile {opts.profile}{limit}{estimate}) ...", flush=True)
        started = time.time()
        r = execute(nb, target, profile=opts.profile, kernel=opts.kernel, results_dir=out_dir / "results",
                    log_output=not opts.quiet, cell_timeout=opts.cell_timeout, budget_s=budget.get(nb.name))
        run.runs.append(r)
        print(f"[{i}/{len(notebooks)}] {nb}: {'ok' if r.ok else 'FAILED'} in {r.seconds:.1f} s", flush=True)
        if not r.ok:
            print(f"--- {nb} failed at {r.error}", file=sys.stderr, flush=True)
            print(f"[{i}/{len(notebooks)}] {record_failure(nb, r, out_dir / 'results', started)}", flush=True)
    summary = write_summary(run)
    failed = [r.notebook for r in run.runs if not r.ok]
    print(f"\nExecuted {len(run.runs)} notebook(s) in {time.perf_counter() - t0:.1f} s; "
          f"{len(failed)} failed{': ' + ', '.join(failed) if failed else ''}. Summary: {summary}", flush=True)
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())
