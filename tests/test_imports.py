"""The import graph of jaxmodel/: no circles, and no import back up the floors.

The graph is read from the source (``ast``): every ``import`` and ``from ...
import`` of a jaxmodel module, at module level or inside a function.  Imports
under ``if TYPE_CHECKING:`` never run and cannot close a circle; they count
only where a rule says so.  ``from package import name`` is an edge to the
submodule ``package.name`` where one exists, else to the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "jaxmodel"

# What the models may import besides each other: the shared physics and the
# field and error types.  Everything else in jaxmodel/ is built on the models.
FOUNDATION = {"jaxmodel.errors", "jaxmodel.fields", "jaxmodel.numerics", "jaxmodel.collectives",
              "jaxmodel.precision", "jaxmodel.deferred"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("jaxmodel", *path.relative_to(PACKAGE).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(tree: ast.AST, type_only: bool = False):
    """(imported names, under TYPE_CHECKING) for every import statement in ``tree``:
    ``import a.b`` gives ``[a.b]``, ``from a import b, c`` gives ``[a.b, a]`` and
    ``[a.c, a]`` (the submodule if there is one, else the module)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield [alias.name], type_only
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                yield [f"{node.module}.{alias.name}", node.module], type_only
        else:
            inner = type_only or (isinstance(node, ast.If) and _is_type_checking(node))
            yield from _imports(node, inner)


def _graph(with_type_only: bool) -> dict[str, set[str]]:
    """``{module: the jaxmodel modules it imports}``."""
    modules = _modules()

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, path in modules.items():
        targets = set()
        for candidates, type_only in _imports(ast.parse(path.read_text(), str(path))):
            if type_only and not with_type_only:
                continue
            found = next((c for c in candidates if c in modules), None)
            target = found or resolve(candidates[-1])
            if target.startswith("jaxmodel") and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _below(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_graph_is_read():
    graph = _graph(with_type_only=False)
    # A few edges known from the source, so that an empty graph cannot pass.
    assert "jaxmodel.program" in graph["jaxmodel.engine"]
    assert "jaxmodel.dataset" in graph["jaxmodel.sink"]
    assert "jaxmodel.models.refined.moe" in graph["jaxmodel.models.refined.layer"]
    assert "jaxmodel.collectives" in graph["jaxmodel.models.refined.rates"]


def test_no_import_circles():
    assert _cycles(_graph(with_type_only=False)) == []


def test_a_circle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_models_import_only_each_other_and_the_foundation():
    graph = _graph(with_type_only=True)
    upward = sorted((name, target) for name, targets in graph.items()
                    if _below(name, "jaxmodel.models") for target in targets
                    if not _below(target, "jaxmodel.models") and target not in FOUNDATION)
    assert upward == []


def test_dataset_sink_program_engine_import_downwards():
    # The data flow: engine -> program -> sink -> dataset; none imports back,
    # not even for a type.
    graph = _graph(with_type_only=True)
    floors = ["jaxmodel.dataset", "jaxmodel.sink", "jaxmodel.program", "jaxmodel.engine"]
    back = [(low, high) for i, low in enumerate(floors) for high in floors[i + 1:]
            if high in graph[low]]
    assert back == []


def test_only_the_interfaces_import_the_api_package_cli_and_dashboard():
    graph = _graph(with_type_only=True)
    interfaces = ("jaxmodel.cli", "jaxmodel.dashboard")
    importers = sorted((name, target) for name, targets in graph.items() for target in targets
                       if (target == "jaxmodel" or any(_below(target, i) for i in interfaces))
                       and not any(_below(name, i) for i in interfaces) and name != "jaxmodel")
    assert importers == []
