"""Print the requirements a GPU check installs from a wheelhouse: the course's, minus torch.

    python ci/requirements.py            # one requirement per line, from pyproject.toml
    python ci/requirements.py --image    # what the course's OCI image installs (container/build.sh)

GPU nodes bring their own CUDA build of torch (a wheelhouse torch would be the wrong build
and several GB); JupyterLab is for people, not for the check, so it stays out too, and so do
the browser, JupyterHub and nbgrader tests' packages (they run on CPU machines, in `make test`). Used by
``make wheelhouse`` (which downloads them) and ``ci/gpu-check.sh`` (which installs them
with no index). The image (``--image``) is the other way round: the course's own dependencies, torch
included (the CPU wheel), and pytest to run the suite's tier tests inside it; no dev tools.
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
LEFT_OUT = {"torch", "jupyterlab", "playwright", "jupyterhub", "configurable-http-proxy", "nbgrader"}
EXTRAS_LEFT_OUT = {"book"}  # the book is built where the course ran, not on a GPU node


def _parse_lists(text: str) -> dict:
    """dependencies and optional-dependencies of a pyproject, without tomllib (Python 3.10)."""
    sections = dict(re.findall(r"^\[([^\]]+)\]\s*$(.*?)(?=^\[|\Z)", text, flags=re.S | re.M))
    lists = lambda body: {k: re.findall(r'"([^"]+)"', v)
                          for k, v in re.findall(r"^([\w-]+)\s*=\s*\[(.*?)\]", body, flags=re.S | re.M)}
    return {"dependencies": lists(sections.get("project", "")).get("dependencies", []),
            "optional": lists(sections.get("project.optional-dependencies", ""))}


def _name(r: str) -> str:
    return re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].strip().lower()


def _lists(pyproject: Path) -> tuple[list[str], dict[str, list[str]]]:
    text = pyproject.read_text()
    if tomllib is not None:
        project = tomllib.loads(text)["project"]
        return list(project["dependencies"]), dict(project.get("optional-dependencies", {}))
    lists = _parse_lists(text)
    return lists["dependencies"], lists["optional"]


def requirements(pyproject: Path = PYPROJECT) -> list[str]:
    deps, extras = _lists(pyproject)
    reqs = deps + [r for name, extra in extras.items() if name not in EXTRAS_LEFT_OUT for r in extra]
    return [r for r in reqs if _name(r) not in LEFT_OUT]


def image_requirements(pyproject: Path = PYPROJECT) -> list[str]:
    deps, extras = _lists(pyproject)
    return deps + [r for r in extras.get("dev", []) if _name(r) == "pytest"]


if __name__ == "__main__":
    reqs = image_requirements() if "--image" in sys.argv[1:] else requirements()
    sys.stdout.write("".join(f"{r}\n" for r in reqs))
