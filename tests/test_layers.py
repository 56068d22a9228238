"""course_lib's shape: no import cycle, and no module imports from a layer below it (the map in __init__)."""

import ast
from pathlib import Path

import pytest

import course_lib

PACKAGE = Path(__file__).resolve().parent.parent / "course_lib"

# The layers of course_lib/__init__.py's map (course_lib.MAP), lowest first. A module may import from
# its own layer or the layers before it, never from a later one.
LAYERS = [{name.rstrip("/") for name, _ in entries} for _, entries in course_lib.MAP]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imports_of(name: str, path: Path) -> set[str]:
    """Every course_lib module ``name`` imports, at any depth of the file (function-local included)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("course_lib"):
                out.add(target)
                out |= {f"{target}.{a.name}" for a in node.names}  # "from . import dist"
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("course_lib")}
    known = {n for n, _ in modules()}
    # a module's own parent packages are initialised before it anyway: not an edge
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, len(name.split(".")))}
    return {t for t in out if t in known and t != name and t not in ancestors}


def top(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


GRAPH = {name: imports_of(name, path) for name, path in modules()}


def test_every_module_is_on_the_map_once():
    missing = sorted({top(n) for n in GRAPH if top(n)} - set(LAYER))
    assert not missing, f"modules missing from course_lib/__init__.py's MAP: {missing}"
    absent = sorted(set(LAYER) - {top(n) for n in GRAPH if top(n)})
    assert not absent, f"listed in course_lib/__init__.py's MAP but not in course_lib/: {absent}"
    names = [name for _, entries in course_lib.MAP for name, _ in entries]
    assert len(names) == len(set(names)), "a module listed twice in course_lib.MAP"
    packages = {name.rstrip("/") for name in names if name.endswith("/")}
    assert packages == {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}, \
        "a package in course_lib.MAP must end in / (and only a package)"


def test_every_notebook_has_its_lesson_module_and_imports_it():
    """lessons/lNN_<name>.py for every notebooks/NN_<name>.ipynb, listed in lessons/__init__.py, imported
    one way: `from course_lib.lessons import lNN_<name> as study`."""
    import json
    listed = (PACKAGE / "lessons" / "__init__.py").read_text()
    for nb in sorted((PACKAGE.parent / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        module = f"l{nb.stem}"
        assert (PACKAGE / "lessons" / f"{module}.py").exists(), f"{nb.name} has no course_lib/lessons/{module}.py"
        assert f"{module}.py" in listed, f"course_lib/lessons/__init__.py does not list {module}.py"
        code = "".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
        assert f"from course_lib.lessons import {module} as study" in code, \
            f"{nb.name} does not import its lesson module as `from course_lib.lessons import {module} as study`"
    # a large lesson's section module (lNN_<section>.py) belongs to notebook NN
    stray = sorted(p.stem for p in (PACKAGE / "lessons").glob("l*.py")
                   if not list((PACKAGE.parent / "notebooks").glob(f"{p.stem[1:3]}_*.ipynb")))
    assert not stray, f"lesson modules with no notebook of that name: {stray}"


def test_no_private_name_imported_across_modules():
    """A name that starts with _ is its module's own: shared names are public (or live where they are used)."""
    bad = []
    for name, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("course_lib")):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    bad.append(f"{name} imports {private} from {'.' * node.level}{node.module or ''}")
    for path in sorted((PACKAGE.parent / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course_lib"):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    bad.append(f"tests/{path.name} imports {private} from {node.module}")
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if top(n)))
def test_no_import_from_a_later_layer(name):
    bad = [t for t in GRAPH[name] if top(t) and top(t) != top(name) and LAYER[top(t)] > LAYER[top(name)]]
    assert not bad, f"{name} (layer {LAYER[top(name)]}) imports from a later layer: {bad}"


def test_no_import_cycle():
    state = {}

    def visit(n, stack):
        state[n] = "open"
        for m in sorted(GRAPH[n]):
            if state.get(m) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
            if m not in state:
                visit(m, stack + [m])
        state[n] = "done"

    for n in sorted(GRAPH):
        if n not in state:
            visit(n, [n])
