"""Sphinx configuration of the course's book (`make book`, ci/build_book.py).

The book is built from notebooks executed beforehand (`make course`'s runs/latest, else the test suite's
ci/executed): myst-nb renders their stored outputs and never executes one. It is offline by construction:
MathJax is a local copy of Debian's libjs-mathjax (ci/build_book.py copies it into _static/mathjax), the
theme is Sphinx's own alabaster, and no widget JavaScript is fetched from a CDN (widgets show their static
fallback, the figure or text the lesson also stores).
"""

project = "Large-batch training at scale"
author = "The large-batch course contributors"
copyright = "The large-batch course contributors; code under MIT, text under CC BY 4.0"

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # course_lib, for the reference page (autodoc)

extensions = ["myst_nb", "sphinx.ext.autodoc"]
autodoc_default_options = {"members": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# Never execute: the outputs are the ones the run measured on its machine.
nb_execution_mode = "off"
# No widget JavaScript from a CDN, and no widget views or scripts: their static fallback shows instead.
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [
    ("html", "application/vnd.jupyter.widget-view+json", None),
    ("html", "application/javascript", None),
]
nb_merge_streams = True

myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath", "amsmath"]

# MathJax 2 from the site itself (a relative path is taken relative to _static). myst marks pages "mathjax_ignore"
# and their math "math" for MathJax 3; MathJax 2 is told the same here (myst's own update is for MathJax 3 only).
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS_CHTML"
myst_update_mathjax = False
mathjax2_config = {
    "tex2jax": {
        "inlineMath": [["\\(", "\\)"]],
        "displayMath": [["\\[", "\\]"]],
        "processEscapes": True,
        "processClass": "tex2jax_process|mathjax_process|math|output_area",
        "ignoreClass": "tex2jax_ignore|mathjax_ignore",
    },
    "showMathMenu": False,
}

html_theme = "alabaster"
html_title = project
html_show_sourcelink = False
html_copy_source = False
html_show_sphinx = False
html_show_search_summary = False  # the summaries are fetched from each page, which file:// forbids
