"""Every lesson and every exercise, run the way a learner runs it: in JupyterLab, in a browser.

papermill and nbval execute the notebooks but render nothing: a widget that shows up as the
text "VBox(children=...)", or a figure that never becomes an image, passes them. Here a
JupyterLab server (tests/_lab.py: 127.0.0.1, a free port, a token, the course kernel, the
smoke profile, one compute thread, GPUs hidden) serves a *copy* of notebooks/ and exercises/,
and headless Debian Chromium, driven by Playwright, opens each notebook, runs Run > Run All
Cells from the menu, waits for every cell to finish and the kernel to go idle, saves it, and
checks:

* no cell has an error output, and every code cell ran;
* every widget output is rendered as a live widget (a ``.jupyter-widgets`` element, no
  "Error displaying widget", no text fallback such as ``HBox(children=...)``): the server sets
  ``COURSE_WIDGETS=live`` since a kernel cannot see the browser and would otherwise take the
  smoke profile for CI and draw static figures (course_lib/widgets.py);
* every figure a cell outputs is an ``<img>`` in the page that the browser decoded;
* in a lesson with widgets, moving the first slider that drives an output (arrow keys on its
  handle, as a learner's keyboard or drag does) changes that output.

Exercises run as the learner gets them, stubs included (``raise NotImplementedError()``), not
the solutions: that is what a learner opens first, and the course promises that a stub makes
the check say "not implemented yet" instead of a traceback (course_lib/checks). So an exercise
passes when no cell raises, every cell ran, and every check cell reports NOT IMPLEMENTED YET
(tests/_exercise_stubs.py; where there is no browser, tests/test_exercises.py runs the same check
with papermill instead). The solutions' own checks are run by tests/test_notebooks.py (papermill,
strict checks).

A screenshot of each notebook after its run (at its first widget or figure) is saved to
ci/executed/browser/ for a reviewer. Each notebook is its own test, so pytest-xdist can spread
them over workers; each worker starts its own server (free port, private temp folder) and keeps
one JupyterLab page open, opening notebook after notebook in it as a learner does (``Tab``).
Each lesson runs alone, as a learner who opens it first finds it: the server's results
folder is emptied before each lesson, and a lesson that reads an earlier lesson's results (lesson
01's lr, the ladder, lesson 06's measurements) must also say, in a line each, which it did not find
and fell back from (tests/_alone.py). So the lessons need no order and spread over the workers like
the exercises, and tests/test_notebooks.py's papermill run of each lesson alone skips wherever these
tests run (tests/conftest.py); the lessons' chain with carried results is papermill's
(test_notebook_executes_in_smoke_profile) and nbval's. Without Chromium (``ci/browser-deps.sh``
installs it as root) or Playwright the tests skip, saying so, and papermill runs the lessons alone.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from _alone import missing_fallbacks, output_text
from _exercise_stubs import untouched_exercise_problems
from _lab import REPO, Lab, browser_missing
from _timing import scaled

MISSING = browser_missing()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]

LESSONS = sorted((REPO / "notebooks").glob("*.ipynb"))
EXERCISES = sorted((REPO / "exercises").glob("*.ipynb"))
NOTEBOOKS = [f"{p.parent.name}/{p.name}" for p in LESSONS + EXERCISES]
SHOTS = REPO / "ci" / "executed" / "browser"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# The text a widget leaves when no widget manager renders it: its repr.
FALLBACK = re.compile(
    r"\b[A-Z][A-Za-z]*(Box|Slider|Dropdown|Button|Output|Checkbox|Text|Tab|Accordion)\((children|value|"
    r"layout|description|options|outputs)="
)
# The cells of the notebook in the current tab.
CELLS = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell"
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="session")
def lab():
    """One JupyterLab per test session (per xdist worker), always stopped, leaving no process."""
    t0 = time.monotonic()
    server = Lab()
    print(f"\njupyter lab on {server.url}: up in {time.monotonic() - t0:.1f} s")
    try:
        yield server
    finally:
        alive = server.stop()
        print("browser test times: " + ", ".join(f"{k} {v:.0f} s" for k, v in TIMINGS.items()))
        assert not alive, f"processes left behind by jupyter lab: {[(p.pid, p.name()) for p in alive]}"


def _first_line(cell: dict) -> str:
    lines = [ln for ln in "".join(cell["source"]).splitlines() if ln.strip()]
    return lines[0].strip()[:80] if lines else "(empty)"


def _where(rel: str, i: int, cell: dict) -> str:
    return f"{rel} cell {i} (`{_first_line(cell)}`)"


def _session(lab: Lab, rel: str) -> dict | None:
    status, sessions = lab.api("sessions")
    assert status == 200, f"GET /api/sessions: HTTP {status}"
    return next((s for s in sessions if s.get("path") == rel), None)


def _wait(what: str, predicate, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def _menu(page, top: str, item: str) -> None:
    """Click menu bar entry ``top``, then the item whose label matches the regular expression ``item``."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{top}$")).click()
    page.locator(".lm-Menu-item", has=page.locator(".lm-Menu-itemLabel", has_text=re.compile(item))).first.click()


class Tab:
    """The worker's one browser page, kept between notebooks as a learner keeps JupyterLab open.

    Loading JupyterLab costs seconds of a core (scripts parsed, extensions started, a workspace
    restored); a learner pays it once and then opens notebook after notebook. So does the suite:
    the first notebook is opened by URL, each later one with File > Open from Path, after the
    previous one was closed with File > Close and Shut Down Notebook (which also ends its kernel).
    A notebook whose test failed part-way may leave the page in any state: then the page is
    dropped (its kernel shut down through the server's API) and the next notebook starts afresh.
    """

    def __init__(self, browser, lab: Lab):
        self.browser, self.lab = browser, lab
        self.page, self.rel, self.session = None, None, None

    def open(self, rel: str) -> dict:
        """Open ``rel``; return its session once the course kernel is idle."""
        self.rel = rel  # from here on, a failure (even in the menu) makes close() drop the page
        if self.page is None:
            self.page = self.browser.new_page(viewport={"width": 1400, "height": 1000})
            self.page.goto(self.lab.notebook_url(rel))
        else:
            _menu(self.page, "File", r"^Open from Path")
            self.page.locator(".jp-Dialog input").fill(rel)
            self.page.locator(".jp-Dialog .jp-mod-accept").click()
        page = self.page
        page.wait_for_selector(CELLS, timeout=scaled(120) * 1000)
        def ready():
            dialog = page.locator(".jp-Dialog .jp-mod-accept")  # a kernel picker, should one still appear
            if dialog.count():
                dialog.first.click()
            s = _session(self.lab, rel)
            return s if s and s["kernel"]["execution_state"] == "idle" else None
        self.session = _wait(f"{rel}: the course kernel did not start and go idle", ready, scaled(180), every=0.25)
        assert self.session["kernel"]["name"] == "largebatch-course", \
            f"{rel} runs on kernel {self.session['kernel']['name']!r}"
        return self.session

    def close(self, clean: bool) -> None:
        """Close the notebook and shut its kernel down: from the menu after a clean run, else drop the page."""
        rel, self.rel, session, self.session = self.rel, None, self.session, None
        if self.page is None or rel is None:
            return
        if clean:
            try:
                _menu(self.page, "File", r"^Close and Shut Down Notebook")
                self.page.locator(".jp-Dialog .jp-mod-accept").click(timeout=scaled(30) * 1000)
                _wait(f"{rel}: File > Close and Shut Down Notebook left its kernel running",
                      lambda: _session(self.lab, rel) is None, scaled(60), every=0.1)
                return
            except Exception:  # noqa: BLE001 - the page is in a state we did not expect: start afresh
                pass
        self.page.close()
        self.page = None
        if session is not None:
            self.lab.api(f"sessions/{session['id']}", "DELETE")  # free the kernel's memory for the next one

    def quit(self) -> None:
        self.close(clean=False)
        if self.page is not None:
            self.page.close()


@pytest.fixture(scope="session")
def tab(lab, browser):
    """One JupyterLab page per test session (per xdist worker), reused notebook after notebook."""
    t = Tab(browser, lab)
    try:
        yield t
    finally:
        t.quit()


# In the page: how many code cells still wait or run ("[*]"), and how many have a number.
PROMPTS_JS = """() => {
  const ps = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook \
.jp-CodeCell .jp-InputPrompt')].map(e => e.textContent);
  return {busy: ps.filter(t => t.includes('*')).length, done: ps.filter(t => /\\[\\d+\\]/.test(t)).length,
          total: ps.length};
}"""


def _run_all(page, lab: Lab, rel: str, timeout: float) -> None:
    """Run > Run All Cells from the menu bar; wait until no cell waits and the kernel is idle."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-item", has=page.locator(".lm-Menu-itemLabel",
                                                   has_text=re.compile(r"^Run All Cells$"))).click()
    _wait(f"{rel}: Run All Cells started nothing",
          lambda: (lambda s: s["busy"] or s["done"])(page.evaluate(PROMPTS_JS)), scaled(60))

    def finished():
        state = page.evaluate(PROMPTS_JS)
        s = _session(lab, rel)
        return state["busy"] == 0 and s is not None and s["kernel"]["execution_state"] == "idle"
    try:
        _wait(f"{rel}: the run did not finish", finished, timeout, every=0.25)
        time.sleep(0.5)  # idle between two cells is possible: ask again
        _wait(f"{rel}: the run did not finish", finished, timeout, every=0.25)
    except AssertionError as e:
        state = page.evaluate(PROMPTS_JS)
        raise AssertionError(f"{e} ({state['done']} of {state['total']} code cells done, "
                             f"{state['busy']} waiting)") from None


def _save(page, lab: Lab, rel: str) -> dict:
    """File > Save Notebook; return the saved notebook (the server's copy, read from its folder)."""
    path = lab.root / rel
    before = path.stat().st_mtime_ns
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^File$")).click()
    page.locator(".lm-Menu-item[data-command='docmanager:save']").click()
    _wait(f"{rel}: File > Save did not write the notebook", lambda: path.stat().st_mtime_ns != before, scaled(60))
    return _wait(f"{rel}: the saved notebook cannot be read", lambda: _read(path), scaled(30))


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _errors(rel: str, nb: dict) -> list[str]:
    problems = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or not "".join(cell["source"]).strip():
            continue
        for out in cell.get("outputs", []):
            if out["output_type"] == "error":
                problems.append(f"{_where(rel, i, cell)} raised {out['ename']}: {out['evalue']}")
        if cell.get("execution_count") is None and not problems:
            problems.append(f"{_where(rel, i, cell)} never ran")
    return problems


def _cell_view(page, i: int) -> dict:
    """What the browser shows in cell ``i``'s outputs."""
    return page.evaluate("""(i) => {
      const cell = document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')[i];
      const area = cell.querySelector('.jp-Cell-outputArea, .jp-OutputArea');
      if (!area) return {text: '', widgets: 0, imgs: 0, broken: 0};
      const imgs = [...area.querySelectorAll('img')];
      return {text: area.innerText, widgets: area.querySelectorAll('.jupyter-widgets').length,
              imgs: imgs.length, broken: imgs.filter(im => !(im.complete && im.naturalWidth > 0)).length};
    }""", i)


def _rendering(page, rel: str, nb: dict) -> tuple[list[str], int | None, int | None]:
    """Problems with widgets and figures; the first widget cell and the first figure cell."""
    problems, first_widget, first_figure = [], None, None
    for i, cell in enumerate(nb["cells"]):
        outs = cell.get("outputs", []) if cell["cell_type"] == "code" else []
        n_widgets = sum(WIDGET_MIME in o.get("data", {}) for o in outs)
        n_images = sum(any(k.startswith("image/") for k in o.get("data", {})) for o in outs)
        if not (n_widgets or n_images or outs):
            continue
        view = _cell_view(page, i)
        if n_widgets:
            first_widget = i if first_widget is None else first_widget
            try:
                view = _wait("", lambda: (lambda v: v if v["widgets"] and "Loading widget" not in v["text"] else None)(
                    _cell_view(page, i)), scaled(30), every=0.25)
            except AssertionError:
                view = _cell_view(page, i)
                problems.append(f"{_where(rel, i, cell)}: {n_widgets} widget output(s) not rendered as live widgets "
                                f"(the page shows: {view['text'][:200]!r})")
        if "Error displaying widget" in view["text"]:
            problems.append(f"{_where(rel, i, cell)}: the page says 'Error displaying widget'")
        fallback = FALLBACK.search(view["text"])
        if fallback:
            problems.append(f"{_where(rel, i, cell)}: a widget shown as text, not live: "
                            f"{view['text'][fallback.start():fallback.start() + 80]!r}")
        if n_images:
            first_figure = i if first_figure is None else first_figure
            if view["imgs"] < n_images or view["broken"]:
                problems.append(f"{_where(rel, i, cell)}: {n_images} figure(s) in the outputs, {view['imgs']} <img> in "
                                f"the page, {view['broken']} not decoded")
    return problems, first_widget, first_figure


def _page_text(page) -> str:
    """The text of every output area in the page, widget outputs included (they are not in the saved cells)."""
    return page.evaluate("""() => [...document.querySelectorAll(
      '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-OutputArea')].map(e => e.innerText).join('\\n')""")


def _alone_problems(page, rel: str, nb: dict) -> list[str]:
    """A lesson run in a fresh results folder must say which earlier results it fell back from (tests/_alone.py)."""
    name = rel.removeprefix("notebooks/")
    missing = missing_fallbacks(name, output_text(nb))
    if missing:
        missing = missing_fallbacks(name, _page_text(page))
    return [f"{rel}, run alone in a fresh results folder, did not say it fell back to its defaults: "
            f"no line with {missing}"] if missing else []


def _slider_moves_output(page, rel: str, nb: dict) -> str | None:
    """Move the first slider whose cell also has a widget Output; None if that output changed, else why not."""
    cells = page.locator(CELLS)
    for i in range(cells.count()):
        cell = cells.nth(i)
        handle, output = cell.locator(".widget-slider .noUi-handle"), cell.locator(".widget-output")
        if not (handle.count() and output.count()):
            continue
        where = _where(rel, i, nb["cells"][i])
        before = output.first.inner_html()
        handle.first.scroll_into_view_if_needed()
        handle.first.focus()
        for _ in range(3):
            page.keyboard.press("ArrowRight")
        try:
            _wait("", lambda: output.first.inner_html() != before, scaled(60))
        except AssertionError:
            return f"{where}: moving the slider (3 x ArrowRight on its handle) did not change its output"
        return None
    return f"{rel}: has widgets, but no cell with a slider and a widget Output to move"


def _screenshot(page, rel: str, cell: int | None) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    if cell is not None:
        page.locator(CELLS).nth(cell).scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / (rel.replace("/", "__").removesuffix(".ipynb") + ".png")))


@pytest.mark.parametrize("rel", NOTEBOOKS)
def test_notebook_runs_in_jupyterlab(rel, lab, tab):
    t0 = time.monotonic()
    shot_at, clean = None, False
    try:
        lesson = rel.startswith("notebooks/")
        if lesson:  # each lesson alone, in a fresh results folder (the previous notebook's kernel is shut down)
            lab.fresh_results()
        tab.open(rel)
        page = tab.page
        _run_all(page, lab, rel, timeout=scaled(1200))
        nb = _save(page, lab, rel)
        problems = _errors(rel, nb)
        render, first_widget, first_figure = _rendering(page, rel, nb)
        problems += render
        if lesson:  # after the widgets rendered: a line printed in a widget Output is in the page only
            problems += _alone_problems(page, rel, nb)
        shot_at = first_widget if first_widget is not None else first_figure
        if first_widget is not None and lesson and not problems:
            moved = _slider_moves_output(page, rel, nb)
            if moved:
                problems.append(moved)
        if rel.startswith("exercises/"):
            problems += untouched_exercise_problems(rel, nb)
        assert not problems, f"{rel} in JupyterLab:\n" + "\n".join(problems)
        clean = True
    finally:
        try:
            if tab.page is not None:
                _screenshot(tab.page, rel, shot_at)
        finally:
            tab.close(clean)
            TIMINGS[rel] = time.monotonic() - t0
            print(f"{rel}: {TIMINGS[rel]:.1f} s in the browser")


def test_a_stopped_lab_leaves_no_process_and_no_folder():
    """Stopping the server ends it, its kernels (in sessions of their own) and removes its folder."""
    server = Lab(folders=())
    try:
        status, kernel = server.api("kernels", "POST", {"name": "largebatch-course"})
        assert status == 201, f"starting a kernel: HTTP {status} {kernel}"
        family = _wait("the kernel process did not appear", server.service.descendants, scaled(60))
    finally:
        alive = server.stop()
    assert not alive, f"left behind: {[(p.pid, p.name()) for p in alive]}"
    assert server.service.proc.poll() is not None
    assert not [p for p in family if p.is_running() and p.status() != "zombie"]
    assert not server.tmp.exists()
