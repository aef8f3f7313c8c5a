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
