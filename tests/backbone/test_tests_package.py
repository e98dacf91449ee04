"""The tests are a package tree with explicit imports: every folder of tests/ holding Python is a package, a helper
is imported by its package path (`from tests.support.waiting import wait_for`), never by bare name through a
`sys.path` entry, no test module imports another test module, and nothing imports a conftest (a fixture two folders
share lives in a tests/support/ module, each folder's conftest imports it: pytest reads fixtures from conftests only,
so a conftest importing another would register that one's fixtures twice, and a test reading a conftest's
constant couples it to one folder's setup). What tests share lives in tests/support/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

TESTS = Path(__file__).resolve().parents[1]


def python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def is_sys_path(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
        and node.value.id == "sys"


def changes_sys_path(node: ast.AST) -> bool:
    """`sys.path.insert(...)` (any method call on it), `sys.path = ...`, `sys.path[:0] = ...`, `sys.path += ...`,
    `del sys.path[0]`; reading it (a child's PYTHONPATH built from it) is fine."""
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Attribute) and is_sys_path(node.func.value)
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign | ast.Delete):
        targets = node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    return any(is_sys_path(t) or (isinstance(t, ast.Subscript) and is_sys_path(t.value)) for t in targets)


def violations(source: str, local: set[str]) -> list[str]:
    """What `source` does against the rules; `local` holds the module names of the files under tests/."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            if node.module == "sys" and any(a.name == "path" for a in node.names):
                found.append(f"line {node.lineno}: imports sys.path")
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.append(f"line {node.lineno}: relative import (spell the package path)")
        elif changes_sys_path(node):
            found.append(f"line {node.lineno}: changes sys.path")
        for module in modules:
            parts = module.split(".")
            if parts[0] != "tests" and parts[0] in local:
                found.append(f"line {node.lineno}: bare import of the test helper {module!r}")
            if parts[-1].startswith("test_"):
                found.append(f"line {node.lineno}: imports the test module {module!r}")
            if parts[-1] == "conftest" or (isinstance(node, ast.ImportFrom) and node.module == module
                                           and any(a.name == "conftest" for a in node.names)):
                found.append(f"line {node.lineno}: imports a conftest {module!r} (share it from tests/support/)")
    return found


def test_the_rules_catch_what_they_forbid() -> None:
    local = {"waiting", "test_detectors"}
    assert violations("from tests.support.waiting import wait_for\nimport os.path\n", local) == []
    assert len(violations("from waiting import wait_for", local)) == 1
    assert len(violations("import waiting", local)) == 1
    assert len(violations("from test_detectors import load", local)) == 2  # bare and a test module
    assert len(violations("from tests.analyzer.test_detectors import load", local)) == 1
    assert len(violations("import sys\nsys.path.insert(0, 'tests/chaos')", local)) == 1
    assert len(violations("def f():\n    import sys\n    sys.path[:0] = ['x']", local)) == 1
    assert len(violations("from sys import path", local)) == 1
    assert len(violations("from .waiting import wait_for", local)) == 1
    assert len(violations("import sys\nsys.path = ['x']\nsys.path += ['y']\ndel sys.path[0]", local)) == 3
    assert violations("import os, sys\nenv = os.pathsep.join(p for p in sys.path if p)", local) == []
    assert len(violations("from tests.recovery.conftest import live", local)) == 1
    assert len(violations("import tests.notify.conftest", local)) == 1
    assert len(violations("from tests.notify import conftest", local)) == 1
    assert violations("from tests.support.live import live", local) == []


def test_no_test_code_imports_by_bare_name_a_test_module_or_a_conftest_or_touches_sys_path() -> None:
    local = {p.stem for p in python_files()}
    bad = [f"{p.relative_to(TESTS.parent)} {v}" for p in python_files() for v in violations(p.read_text(), local)]
    assert bad == [], "\n".join(bad)


def test_every_folder_of_tests_holding_python_is_a_package() -> None:
    folders = {p.parent for p in python_files()}
    assert [str(f.relative_to(TESTS.parent)) for f in sorted(folders) if not (f / "__init__.py").exists()] == []
