"""The package layers (docs/architecture.md): no two packages of archsim import each other at module level or for
type hints. Imports inside a function (a command importing what it runs) are allowed and not counted."""

import ast
from collections import defaultdict

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.unit


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "archsim" and len(parts) > 1 else None


def _module_level_imports(body: list[ast.stmt]):
    """Imports a module runs when it is imported, or names for type hints (under `if TYPE_CHECKING:`)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            yield from _module_level_imports(node.body)
            yield from _module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            yield from _module_level_imports(node.body)


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in (REPO / "archsim").rglob("*.py"):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        me = _package(module) or "archsim"
        for node in _module_level_imports(ast.parse(path.read_text()).body):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                other = _package(name)
                if other and other != me:
                    graph[me].add(other)
    return graph


def test_no_two_packages_import_each_other():
    graph = _package_graph()

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    cycles = sorted((a, b) for a in graph for b in graph[a] if a in reaches(b))
    assert cycles == []
    assert "config" in graph["serving"] and "dram" in graph["config"]  # the graph is read at all


PNM_LAYERS = ("machine", "problem", "timed")  # bottom up: each imports only the layers below it


def _runtime_imports(body: list[ast.stmt]):
    """Module-level imports that run at import time (not those under `if TYPE_CHECKING:`)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            yield from _runtime_imports(node.body)
            yield from _runtime_imports(node.orelse)


def _pnm_modules() -> dict[str, ast.Module]:
    root = REPO / "archsim" / "pnm"
    return {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): ast.parse(p.read_text())
            for p in root.rglob("*.py")}


def test_pnm_layers_import_only_downward():
    upward = []
    for module, tree in _pnm_modules().items():
        parts = module.split(".")
        if len(parts) < 4:  # archsim.pnm itself and cli.py sit above the layers
            continue
        mine = PNM_LAYERS.index(parts[2])
        for node in _module_level_imports(tree.body):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("archsim.pnm."):
                layer = node.module.split(".")[2]
                if layer in PNM_LAYERS and PNM_LAYERS.index(layer) > mine:
                    upward.append((module, node.module))
    assert upward == []
    assert len([m for m in _pnm_modules() if m.startswith("archsim.pnm.timed.")]) >= 9  # the layers are read


def test_pnm_modules_import_without_cycles():
    modules = _pnm_modules()
    graph = {m: {n.module for n in _runtime_imports(tree.body)
                 if isinstance(n, ast.ImportFrom) and n.module in modules and n.module != m}
             for m, tree in modules.items()}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, " -> ".join(path + (module,))
        if module not in done:
            for nxt in graph[module]:
                visit(nxt, path + (module,))
            done.add(module)

    for module in graph:
        visit(module, ())
    assert "archsim.pnm.machine.semantics" in graph["archsim.pnm.machine.functional"]  # edges are read
