"""A test file imports no other test file: what several files share lives in a helper module beside
them (tests/*bed.py, e2e/workloads.py, ...) or a conftest.py fixture (docs/architecture.md), so a
test module can be moved, split or deleted without breaking another."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (test_*.py) that `path` imports, by their import names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        found += [name for name in names if name.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_no_test_file_imports_another() -> None:
    offenders = {
        path.relative_to(REPO).as_posix(): imported
        for package in ("tests", "e2e")
        for path in sorted((REPO / package).rglob("*.py"))
        if (imported := imported_test_modules(path))
    }
    assert offenders == {}


def test_the_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    source = tmp_path / "test_x.py"
    source.write_text("from e2e.test_allocation import pod\nimport tests.test_cdi\nfrom e2e import kube\n")
    assert imported_test_modules(source) == ["e2e.test_allocation", "tests.test_cdi"]
