"""The benches import the tests never, and each other only through their library (``bench/README.md``).

Every ``import`` under ``bench/`` is read from the source (module level and inside functions alike). What
benches share lives in ``bench.lib``; a bench that is a package (``bench/fairness/``) is imported by its own
modules and by its command script (``bench/fairness_bench.py``) only. Tests may import ``bench``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``; relative imports resolved against its package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = list(path.relative_to(ROOT).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - (node.level - 1)] if node.level else []
            module = [*base, *([node.module] if node.module else [])]
            for alias in node.names:  # ``from bench import x`` may name a module: read it as ``bench.x``
                yield node.lineno, ".".join([*module, alias.name])


def _bench_files() -> list[Path]:
    return sorted(BENCH.rglob("*.py"))


def test_there_are_benches_to_read() -> None:
    assert (BENCH / "lib" / "processes.py").exists() and len(_bench_files()) > 10


def test_no_bench_module_imports_the_tests() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in _bench_files()
        for line, name in _imported_modules(path)
        if name == "tests" or name.startswith("tests.")
    ]
    assert found == []


def _may_import(path: Path, top: str) -> bool:
    """Whether the bench file ``path`` may import ``bench.<top>``: the library, or its own package."""
    parts = path.relative_to(BENCH).parts
    own_package = parts[0] if len(parts) > 1 else path.stem.removesuffix("_bench")
    return top == "lib" or top == own_package


def test_the_rule_tells_a_helper_of_another_bench_from_the_library() -> None:
    assert not _may_import(BENCH / "rollout_bench.py", "e2e_vs_vllm_bench")
    assert _may_import(BENCH / "rollout_bench.py", "lib")
    assert _may_import(BENCH / "fairness_bench.py", "fairness")
    assert _may_import(BENCH / "fairness" / "cli.py", "fairness")
    assert not _may_import(BENCH / "fairness" / "cli.py", "context_bench")


def test_benches_share_helpers_only_through_the_library() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in _bench_files()
        for line, name in _imported_modules(path)
        if name.startswith("bench.") and not _may_import(path, name.split(".")[1])
    ]
    assert found == []


def test_the_library_imports_no_bench() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sorted((BENCH / "lib").rglob("*.py"))
        for line, name in _imported_modules(path)
        if name.startswith("bench.") and not name.startswith("bench.lib")
    ]
    assert found == []
