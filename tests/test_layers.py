"""course_lib's shape: no import cycle, and no module imports from a layer below it (the map in __init__)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "course_lib"

# The layers of course_lib/__init__.py's map, lowest first. A module may import from its own
# layer or the layers before it, never from a later one.
LAYERS = [
    {"tables", "config", "fileio", "progress", "metrics", "_forkserver_preload"},
    {"hardware", "cluster"},
    {"precision", "dist", "node_loss"},
    {"tiers", "results", "plots", "diagrams"},
    {"data", "models", "optim", "settings"},
    {"parallel", "comm", "perf"},
    {"train"},
    {"search", "search_study", "ladder", "step_study", "mixed_precision", "optimizer_study", "layerwise", "data_parallel_study", "collectives_study", "performance_study", "model_parallel_study", "batch_science", "batch_science_study", "widgets", "lesson",
     "checks", "lessons"},
    {"summary", "bench", "run", "train_ddp"},
]
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


def test_every_module_is_on_the_map():
    missing = sorted({top(n) for n in GRAPH if top(n)} - set(LAYER))
    assert not missing, f"modules missing from LAYERS (and from course_lib/__init__.py's map): {missing}"


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
