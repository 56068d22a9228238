"""Build the course's book: a static, offline site of the executed lessons and the docs/ pages.

    python ci/build_book.py [--source DIR] [--out DIR]

The lessons come executed from ``--source``: by default the latest ``make course`` (runs/latest), else the
test suite's smoke copies (ci/executed); no notebook is executed here (docs/conf.py: nb_execution_mode
"off"). Sphinx and myst-nb render them with the pages of docs/, the exercises as a learner gets them, and
the run's summary.md ("What this machine showed") when the source has one. MathJax is copied from Debian's
libjs-mathjax (``$COURSE_MATHJAX`` names another MathJax 2 folder), so the site needs no network. Writes
``<out>/html`` and a zip of it (``<out>/course-book.zip``, for an LMS or an offline node); the last line
printed is the path of the built index.html.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
MATHJAX = Path(os.environ.get("COURSE_MATHJAX", "/usr/share/javascript/mathjax"))
# What MathJax 2's TeX-AMS_CHTML configuration loads (1.5 MB of Debian's 54 MB)
MATHJAX_PARTS = ("MathJax.js", "config/TeX-AMS_CHTML.js", "jax/input/TeX", "jax/output/CommonHTML", "jax/element",
                 "extensions", "fonts/HTML-CSS/TeX/woff")
PAGES = ("getting-started", "instructors", "testing", "findings", "contributing")
LESSON_NAME = re.compile(r"^(\d\d)_(.+)$")


class BookError(RuntimeError):
    """What is missing to build the book, and what to do about it."""


def default_source() -> Path:
    """runs/latest when ``make course`` has run here, else ci/executed (``make test``'s smoke copies)."""
    for candidate in (REPO / "runs" / "latest", REPO / "ci" / "executed"):
        if list((candidate / "notebooks").glob("[0-9][0-9]_*.ipynb")):
            return candidate
    raise BookError("no executed lessons in runs/latest/notebooks or ci/executed/notebooks: "
                    "run `make course` (or `make test`) first; the book never executes a notebook")


def mathjax_missing() -> str | None:
    """Why the local MathJax cannot be copied (a skip reason), or None."""
    if not (MATHJAX / "MathJax.js").is_file():
        return (f"no MathJax 2 at {MATHJAX}: install Debian's libjs-mathjax (apt-get install libjs-mathjax), "
                "or name a MathJax 2 folder with $COURSE_MATHJAX")
    return None


def sphinx_missing() -> str | None:
    """Why Sphinx and myst-nb cannot be imported (a skip reason), or None."""
    try:
        import myst_nb  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed: pip install -e '.[book]' (make book does)"
    return None


def _shown(path: Path) -> str:
    """A path as the book names it: relative to the checkout when inside it."""
    try:
        return path.relative_to(REPO.resolve()).as_posix()
    except ValueError:
        return path.name


def _index(source: Path, lessons: list[str], exercises: list[str], machine: bool) -> str:
    def toctree(caption: str, entries: list[str]) -> str:
        return "\n".join(["```{toctree}", f":caption: {caption}", ":maxdepth: 1", "", *entries, "```", ""])

    return "\n".join([
        "# Large-batch training at scale", "",
        "A hands-on PyTorch course on distributed large-batch training: from a single-device baseline to the "
        "linear scaling rule, warmup, LARS, mixed precision, data parallelism, BERT with LAMB and beyond, "
        "measured on the learner's own hardware.", "",
        f"The lessons below show the outputs of one run of the course, read from `{_shown(source)}`; "
        + ("[What this machine showed](what-this-machine-showed.md) says on which machine and what it measured. "
           if machine else "")
        + "Your own run (`make course`) measures your hardware, and its numbers will differ.", "",
        toctree("Start here", ["getting-started"]),
        toctree("Lessons", [f"lessons/{n}" for n in lessons]),
        toctree("Exercises", [f"exercises/{n}" for n in exercises]),
        *([toctree("This run", ["what-this-machine-showed"])] if machine else []),
        toctree("For instructors and contributors", [p for p in PAGES if p != "getting-started"] + ["reference"]),
    ])


def _public_modules() -> list[tuple[str, list[tuple[str, str]]]]:
    """course_lib's module map (course_lib.MAP) as (layer, [(module, what it holds)]), public modules only."""
    sys.path.insert(0, str(REPO))
    try:
        from course_lib import MAP
    finally:
        sys.path.remove(str(REPO))
    # lessons/ is each lesson's own measurements and readings, shown in the lessons themselves, not a helper
    return [(layer, [(name.rstrip("/"), what) for name, what in modules
                     if not name.startswith("_") and name != "lessons/"]) for layer, modules in MAP]


def _users(module: str, lessons: list[Path]) -> list[str]:
    """The lessons whose code cells name ``course_lib.<module>`` (or import it from course_lib)."""
    pattern = re.compile(rf"course_lib\.{module}\b|from course_lib import [^\n]*\b{module}\b")
    found = []
    for nb in lessons:
        cells = json.loads(nb.read_text())["cells"]
        if any(pattern.search("".join(c["source"])) for c in cells if c["cell_type"] == "code"):
            found.append(nb.stem)
    return found


def reference_page(lessons: list[Path]) -> str:
    """The public helpers of course_lib, layer by layer as its map orders them, each module with the lessons
    that use it and its documented names (Sphinx autodoc)."""
    lines = ["# Reference: course_lib", "",
             "The tested helpers the lessons import, one concept per module, lowest layer first (the module map, "
             "`course_lib.MAP`). Each module names the lessons whose code uses it.", ""]
    for layer, modules in _public_modules():
        lines += [f"## {layer}", ""]
        for name, what in modules:
            users = _users(name, lessons)
            used = ", ".join(f"[{u}](lessons/{u}.ipynb)" for u in users) if users else "no lesson directly"
            lines += [f"### `course_lib.{name}`", "", f"{what}. Used in: {used}.", "",
                      "```{eval-rst}", f".. automodule:: course_lib.{name}", "   :members:", "```", ""]
    return "\n".join(lines)


def stage(source: Path, src: Path) -> None:
    """The book's source folder: the docs pages, the executed lessons, the exercises, the run's summary."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    for page in PAGES:
        shutil.copy2(DOCS / f"{page}.md", src / f"{page}.md")
    (src / "lessons").mkdir()
    lessons = sorted(p for p in (source / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for nb in lessons:
        shutil.copy2(nb, src / "lessons" / nb.name)
    (src / "exercises").mkdir()
    exercises = sorted((REPO / "exercises").glob("[0-9][0-9]_*.ipynb"))
    for nb in exercises:
        shutil.copy2(nb, src / "exercises" / nb.name)
    summary = source / "summary.md"
    if summary.is_file():
        text = re.sub(r"^# ", "## ", summary.read_text(), flags=re.M)
        (src / "what-this-machine-showed.md").write_text(
            "# What this machine showed\n\n"
            "The summary of the run whose outputs this book shows: the machine it ran on, what each lesson "
            "measured there, and the trick ladder.\n\n" + text)
        for image in source.glob("*.png"):
            shutil.copy2(image, src / image.name)
    (src / "reference.md").write_text(reference_page(lessons))
    (src / "index.md").write_text(_index(source, [p.stem for p in lessons], [p.stem for p in exercises],
                                         summary.is_file()))


def copy_mathjax(html: Path) -> None:
    dest = html / "_static" / "mathjax"
    if dest.exists():
        shutil.rmtree(dest)
    for part in MATHJAX_PARTS:
        src = MATHJAX / part
        (dest / part).parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dest / part, symlinks=False)
        else:
            shutil.copy2(src, dest / part)


def write_zip(html: Path, archive: Path) -> None:
    tmp = archive.with_suffix(".zip.part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(html.rglob("*")):
            if path.is_file():
                zf.write(path, Path("course-book") / path.relative_to(html))
    tmp.replace(archive)


def build(source: Path, out: Path, *, quiet: bool = False) -> Path:
    """Stage, render with Sphinx (never executing), copy MathJax, zip; returns the index.html."""
    for why in (sphinx_missing(), mathjax_missing()):
        if why:
            raise BookError(why)
    lessons = list((source / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not lessons:
        raise BookError(f"no executed lessons in {source / 'notebooks'}")
    src, html = out / "src", out / "html"
    stage(source, src)
    if html.exists():
        shutil.rmtree(html)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(DOCS), "-j", "1", "-E",
           "-d", str(out / "doctrees"), str(src), str(html)]
    run = subprocess.run(cmd + (["-q"] if quiet else []), cwd=REPO)
    if run.returncode != 0:
        raise BookError(f"sphinx-build failed (exit {run.returncode}): {' '.join(cmd)}")
    copy_mathjax(html)
    write_zip(html, out / "course-book.zip")
    return html / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=None,
                        help="a run's folder with notebooks/ executed (default: runs/latest, else ci/executed)")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "book", help="default: build/book")
    parser.add_argument("--quiet", action="store_true", help="Sphinx's warnings only")
    opts = parser.parse_args(argv)
    t0 = time.perf_counter()
    try:
        source = (opts.source or default_source()).resolve()
        print(f"book: the lessons as executed in {source}", flush=True)
        index = build(source, opts.out.resolve(), quiet=opts.quiet)
    except BookError as exc:
        print(f"book: {exc}", file=sys.stderr)
        return 1
    print(f"book: built in {time.perf_counter() - t0:.0f} s; zip for an LMS or an offline node: "
          f"{opts.out.resolve() / 'course-book.zip'}", flush=True)
    print(index, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
