"""Print the requirements a GPU check installs from a wheelhouse: the course's, minus torch.

    python ci/requirements.py            # one requirement per line, from pyproject.toml

GPU nodes bring their own CUDA build of torch (a wheelhouse torch would be the wrong build
and several GB); JupyterLab is for people, not for the check, so it stays out too, and so do
the browser and JupyterHub tests' packages (they run on CPU machines, in `make test`). Used by
``make wheelhouse`` (which downloads them) and ``ci/gpu-check.sh`` (which installs them
with no index).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
LEFT_OUT = {"torch", "jupyterlab", "playwright", "jupyterhub", "configurable-http-proxy"}
EXTRAS_LEFT_OUT = {"book"}  # the book is built where the course ran, not on a GPU node


def _parse_lists(text: str) -> dict:
    """dependencies and optional-dependencies of a pyproject, without tomllib (Python 3.10)."""
    sections = dict(re.findall(r"^\[([^\]]+)\]\s*$(.*?)(?=^\[|\Z)", text, flags=re.S | re.M))
    lists = lambda body: {k: re.findall(r'"([^"]+)"', v)
                          for k, v in re.findall(r"^([\w-]+)\s*=\s*\[(.*?)\]", body, flags=re.S | re.M)}
    return {"dependencies": lists(sections.get("project", "")).get("dependencies", []),
            "optional": lists(sections.get("project.optional-dependencies", ""))}


def requirements(pyproject: Path = PYPROJECT) -> list[str]:
    text = pyproject.read_text()
    if tomllib is not None:
        project = tomllib.loads(text)["project"]
        extras = project.get("optional-dependencies", {})
    else:
        lists = _parse_lists(text)
        project, extras = {"dependencies": lists["dependencies"]}, lists["optional"]
    reqs = list(project["dependencies"]) + [r for name, extra in extras.items() if name not in EXTRAS_LEFT_OUT
                                            for r in extra]
    name = lambda r: re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].strip().lower()
    return [r for r in reqs if name(r) not in LEFT_OUT]


if __name__ == "__main__":
    sys.stdout.write("".join(f"{r}\n" for r in requirements()))
