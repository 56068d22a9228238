"""`make book`: the executed lessons and docs/ as a static site, built offline and never executing a notebook.

The book is built here from a small executed notebook (a stream, a figure, math, a widget's static fallback)
with the network unavailable (``unshare -n``, as root; skipped elsewhere, saying why), in a stated time, and the
site is read back: every page there (the reference of course_lib's helpers included), the figure decoded from
the site's own folder, MathJax loaded from the site, no script, style sheet or image from outside it, and a zip
of it. (The browser's look at the pages is not part of this file.)
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from html import unescape
from pathlib import Path

import nbformat
import pytest

from _lab import browser_missing
from _timing import scaled

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "ci"))
import build_book  # noqa: E402

BUILD_S = 90  # the book of one small lesson, the docs pages and every exercise, on 2 busy cores
MISSING = build_book.sphinx_missing() or build_book.mathjax_missing()
OFFLINE = (None if os.geteuid() == 0 and shutil.which("unshare")
           else "building with the network unavailable needs root (unshare -n)")


def _png(width: int = 4, height: int = 3) -> bytes:
    raw = b"".join(b"\x00" + bytes([200, 30, 30]) * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def executed_run(root: Path) -> Path:
    """A run's folder as `make course` leaves it: notebooks/ executed, summary.md."""
    (root / "notebooks").mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    out = nbformat.v4.new_output
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 00 — A tiny lesson\n\nThe linear scaling rule: $\\eta_k = k\\,\\eta$.\n\n"
                                      "$$\\text{speedup} = \\frac{T_1}{T_k}$$"),
        nbformat.v4.new_code_cell("print('rate')", execution_count=1,
                                  outputs=[out("stream", name="stdout", text="measured 4242 samples/s\n")]),
        nbformat.v4.new_code_cell("figure()", execution_count=2, outputs=[out("display_data", data={
            "image/png": base64.b64encode(_png()).decode(), "text/plain": "<Figure>"})]),
        nbformat.v4.new_code_cell("widget()", execution_count=3, outputs=[out("display_data", data={
            "application/vnd.jupyter.widget-view+json": {"model_id": "m", "version_major": 2, "version_minor": 0},
            "text/plain": "the widget's static fallback"})]),
    ]
    nbformat.write(nb, root / "notebooks" / "00_tiny.ipynb")
    (root / "summary.md").write_text("# Course run — profile `smoke`\n\n| machine | cores |\n|---|---|\n| test | 2 |\n")
    return root


def _outside_references(html: str) -> list[str]:
    """What a page would load from outside the site: scripts, style sheets, images, frames, fonts."""
    loads = re.findall(r"<(?:script|img|iframe|source)\b[^>]*\bsrc=\"([^\"]+)\"", html)
    loads += re.findall(r"<link\b[^>]*\bhref=\"([^\"]+)\"", html)
    loads += re.findall(r"url\(['\"]?([^)'\"]+)", html)
    return [u for u in loads if re.match(r"(?:[a-z]+:)?//", u)]


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    """The book of a small executed run, built once for this file with the network unavailable."""
    if MISSING or OFFLINE:
        pytest.skip(MISSING or OFFLINE)
    tmp = tmp_path_factory.mktemp("book")
    source, out = executed_run(tmp / "run"), tmp / "book"
    t0 = time.monotonic()
    run = subprocess.run(["unshare", "-n", sys.executable, str(REPO / "ci" / "build_book.py"), "--source",
                          str(source), "--out", str(out), "--quiet"], capture_output=True, text=True,
                         timeout=scaled(4 * BUILD_S), cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return {"run": run, "took": time.monotonic() - t0, "out": out, "html": out / "html"}


def _internal_links(html: Path) -> list[str]:
    """Every link of the site to a page or an anchor of the site that is not there."""
    ids: dict[Path, set[str]] = {}
    bad = []
    for page in html.rglob("*.html"):
        for href in re.findall(r"<a\b[^>]*\bhref=\"([^\"]+)\"", page.read_text()):
            if re.match(r"(?:[a-z]+:)?//|mailto:", href):
                continue  # a citation's address: a link, not a load
            path, _, anchor = unescape(href).partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.is_file():
                bad.append(f"{page.relative_to(html)}: {href}")
            elif anchor and target.suffix == ".html":
                if target not in ids:
                    ids[target] = set(re.findall(r"\bid=\"([^\"]+)\"", target.read_text()))
                if anchor not in ids[target]:
                    bad.append(f"{page.relative_to(html)}: {href} (no such anchor)")
    return bad


@pytest.mark.slow
def test_the_book_builds_offline_from_executed_lessons(book):
    run, html, out = book["run"], book["html"], book["out"]
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1] == str(html / "index.html")  # the last line: the built index
    assert book["took"] < scaled(BUILD_S), f"the book took {book['took']:.0f} s, over its {BUILD_S} s"
    assert "WARNING" not in run.stderr and "ERROR" not in run.stderr, run.stderr

    pages = {p.relative_to(html).as_posix() for p in html.rglob("*.html")}
    wanted = {"index.html", "lessons/00_tiny.html", "what-this-machine-showed.html", "search.html", "reference.html"}
    wanted |= {f"{p}.html" for p in build_book.PAGES}
    wanted |= {f"exercises/{p.stem}.html" for p in (REPO / "exercises").glob("[0-9][0-9]_*.ipynb")}
    assert wanted <= pages, sorted(wanted - pages)

    lesson = (html / "lessons" / "00_tiny.html").read_text()
    assert "measured 4242 samples/s" in lesson and "the widget's static fallback" in unescape(lesson)
    assert "widget-view+json" not in lesson
    images = re.findall(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", lesson)
    assert images and all((html / "lessons" / src).resolve().read_bytes() == _png() for src in images)
    assert 'class="math' in lesson
    scripts = re.findall(r"<script\b[^>]*\bsrc=\"([^\"?]+)", lesson)
    mathjax = [s for s in scripts if s.endswith("MathJax.js")]
    assert mathjax and (html / "lessons" / mathjax[0]).resolve().is_file()
    assert (html / "_static" / "mathjax" / "jax" / "output" / "CommonHTML" / "jax.js").is_file()
    for path in [*html.rglob("*.html"), *html.glob("_static/*.css")]:
        assert not _outside_references(path.read_text()), (path.name, _outside_references(path.read_text()))
    assert not _internal_links(html)
    assert "What this machine showed" in (html / "what-this-machine-showed.html").read_text()
    reference = (html / "reference.html").read_text()  # autodoc of course_lib's public helpers, by the map
    assert "course_lib.compare" in reference and 'class="sig-name' in reference

    with zipfile.ZipFile(out / "course-book.zip") as zf:
        names = set(zf.namelist())
    assert {"course-book/index.html", "course-book/lessons/00_tiny.html"} <= names


BROWSER_MISSING = browser_missing()


@pytest.mark.slow
@pytest.mark.skipif(BROWSER_MISSING is not None, reason=str(BROWSER_MISSING))
def test_every_page_of_the_book_works_in_a_browser_that_reaches_nothing_outside_it(book, browser):
    """Chromium, every request that is not a local file refused: each lesson, exercise and page loads with no
    console error, every image decoded, the math typeset by the site's own MathJax; the search page finds a term."""
    html = book["html"]
    assert book["run"].returncode == 0, book["run"].stderr
    context = browser.new_context()
    outside: list[str] = []

    def local_only(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", local_only)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
    try:
        for path in sorted(html.rglob("*.html")):
            page.goto(path.as_uri(), wait_until="load", timeout=scaled(60) * 1000)
            if page.query_selector(".math"):
                page.wait_for_function("() => window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0 "
                                       "&& document.querySelectorAll('.math .mjx-chtml, .mjx-chtml').length > 0",
                                       timeout=scaled(60) * 1000)
            broken = page.evaluate("() => [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))"
                                   ".map(i => i.src)")
            assert not broken, (path.name, broken)
        page.goto((html / "lessons" / "00_tiny.html").as_uri(), wait_until="load")
        page.wait_for_function("() => document.querySelectorAll('.mjx-chtml').length >= 2", timeout=scaled(60) * 1000)
        page.goto((html / "search.html").as_uri() + "?q=warmup", wait_until="load")
        page.wait_for_function("() => document.querySelectorAll('#search-results li').length > 0",
                               timeout=scaled(60) * 1000)
    finally:
        context.close()
    assert not errors, errors
    assert not outside, outside


def test_the_book_reads_the_latest_course_run_first(tmp_path, monkeypatch):
    """runs/latest when `make course` ran, else ci/executed; neither: what to run, and no build."""
    monkeypatch.setattr(build_book, "REPO", tmp_path)
    with pytest.raises(build_book.BookError, match="run `make course`"):
        build_book.default_source()
    executed_run(tmp_path / "ci" / "executed")
    assert build_book.default_source() == tmp_path / "ci" / "executed"
    executed_run(tmp_path / "runs" / "20990101-000000")
    (tmp_path / "runs" / "latest").symlink_to("20990101-000000")
    assert build_book.default_source() == tmp_path / "runs" / "latest"


def test_the_book_never_executes_and_fetches_nothing():
    """docs/conf.py: outputs as the run stored them, no widget JavaScript from a CDN, MathJax from the site."""
    conf: dict = {"__file__": str(REPO / "docs" / "conf.py")}
    exec((REPO / "docs" / "conf.py").read_text(), conf)
    assert conf["nb_execution_mode"] == "off"
    assert conf["nb_ipywidgets_js"] == {}
    assert not re.match(r"(?:[a-z]+:)?//", conf["mathjax_path"])
