"""Every test module declares exactly one tier (docs/architecture.md, "Tests in tiers"), so `pytest -m unit`,
`-m component` and `-m system` together select the whole suite, and the tiers are registered markers."""

import ast
import tomllib

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.unit

TIERS = ("unit", "component", "system")
MODULES = sorted((REPO / "tests").glob("test_*.py"))


def _module_marks(path) -> list[str]:
    """The marker names of the module's `pytestmark = pytest.mark.X` (or a list of them)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            return [ast.unparse(v).removeprefix("pytest.mark.") for v in values]
    return []


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
def test_module_has_exactly_one_tier(path):
    tiers = [mark for mark in _module_marks(path) if mark in TIERS]
    assert len(tiers) == 1, f"{path.name}: add `pytestmark = pytest.mark.<{'|'.join(TIERS)}>` (has {tiers})"


def test_tiers_and_slow_are_registered_markers():
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {line.split(":", 1)[0] for line in options["markers"]}
    assert set(TIERS) | {"slow"} <= registered
    assert "--strict-markers" in options["addopts"].split()
