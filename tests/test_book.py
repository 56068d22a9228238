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


@pytest.mark.slow
@pytest.mark.skipif(MISSING is not None or OFFLINE is not None, reason=str(MISSING or OFFLINE))
def test_the_book_builds_offline_from_executed_lessons(tmp_path):
    source, out = executed_run(tmp_path / "run"), tmp_path / "book"
    t0 = time.monotonic()
    run = subprocess.run(["unshare", "-n", sys.executable, str(REPO / "ci" / "build_book.py"), "--source",
                          str(source), "--out", str(out), "--quiet"], capture_output=True, text=True,
                         timeout=scaled(4 * BUILD_S), cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    took = time.monotonic() - t0
    assert run.returncode == 0, run.stdout + run.stderr
    html = out / "html"
    assert run.stdout.strip().splitlines()[-1] == str(html / "index.html")  # the last line: the built index
    assert took < scaled(BUILD_S), f"the book took {took:.0f} s, over its {BUILD_S} s"
    assert "WARNING" not in run.stderr, run.stderr

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
    assert "What this machine showed" in (html / "what-this-machine-showed.html").read_text()
    reference = (html / "reference.html").read_text()  # autodoc of course_lib's public helpers, by the map
    assert "course_lib.compare" in reference and 'class="sig-name' in reference

    with zipfile.ZipFile(out / "course-book.zip") as zf:
        names = set(zf.namelist())
    assert {"course-book/index.html", "course-book/lessons/00_tiny.html"} <= names


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
