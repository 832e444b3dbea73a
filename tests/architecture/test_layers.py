"""The packages import each other one way only (README "Layers", docs/architecture.md "Layers").

Every ``import`` in the project's packages is read from the source (module level, inside functions and under
``TYPE_CHECKING`` alike): a package may import only packages of a lower layer. An import placed inside a
function does not hide a dependency from this check.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS: list[tuple[str, ...]] = [
    ("core",),
    ("generation",),
    ("scheduling",),
    ("accounts",),
    ("deployments",),
    ("model_routing",),
    ("chats",),
    ("moderation", "answer_cache", "memory"),
    ("runs",),
    ("feedback",),
    ("rollouts",),
    ("inference_workers", "openai_api", "web", "monitoring"),
    ("chatproject",),
]
"""Bottom to top. Packages on one line are siblings: none imports another."""

LAYER_OF = {package: level for level, packages in enumerate(LAYERS) for package in packages}
WIRING = {"urls.py", "asgi.py", "celery.py", "settings"}
"""The only parts of ``chatproject`` that may import the apps: it wires them together and is imported by none."""


@dataclass(frozen=True)
class Import:
    source: Path
    line: int
    target: str
    in_function: bool


def _imports(path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    function_nodes = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for child in ast.walk(node)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            yield Import(path.relative_to(ROOT), node.lineno, name.split(".")[0], id(node) in function_nodes)


def _project_imports() -> list[Import]:
    found: list[Import] = []
    for package in LAYER_OF:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            found.extend(i for i in _imports(path) if i.target in LAYER_OF and i.target != package)
    return found


def test_every_project_package_has_a_layer() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench"}
    assert packages == set(LAYER_OF), "add a new package to LAYERS (and to the README's layer diagram)"


def test_imports_only_point_down() -> None:
    upward = [
        f"{i.source}:{i.line} imports {i.target}"
        for i in _project_imports()
        if LAYER_OF[i.target] >= LAYER_OF[i.source.parts[0]]
    ]
    assert upward == []


def test_no_cross_package_import_hides_in_a_function() -> None:
    hidden = [f"{i.source}:{i.line} imports {i.target}" for i in _project_imports() if i.in_function]
    assert hidden == []


def test_only_the_wiring_files_of_chatproject_import_apps() -> None:
    outside = [
        f"{i.source}:{i.line} imports {i.target}"
        for i in _project_imports()
        if i.source.parts[0] == "chatproject" and i.source.parts[1] not in WIRING
    ]
    assert outside == []


@pytest.mark.parametrize("package", ["scheduling", "core", "generation"])
def test_low_layers_stay_free_of_the_apps(package: str) -> None:
    """``scheduling`` is pure policy (no Django at all); ``core`` may use Django but no app of ours; the
    generation contract may use ``core`` and nothing above it."""
    forbidden = {"django", "rest_framework", "celery"} if package == "scheduling" else set()
    allowed = {package, "core"} if package == "generation" else {package}
    found = [
        f"{i.source}:{i.line} imports {i.target}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for i in _imports(path)
        if i.target in forbidden or (i.target in LAYER_OF and i.target not in allowed)
    ]
    assert found == []
