"""Small by default (CONTRIBUTING.md): a file a reader can hold in their head, a function that
does one thing. Tests are exempt, and so are Triton kernels (`@triton.jit`), which cannot call
helpers cheaply."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.import_graph import ROOT

MAX_FILE_LINES = 350
MAX_FUNCTION_LINES = 50
SOURCE_DIRS = ("engine", "router", "operator", "pagedock", "benchmarks", "examples")


def source_files() -> list[Path]:
    files = [p for d in SOURCE_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    return [p for p in files if "__pycache__" not in p.parts]


def is_triton_kernel(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(
        (isinstance(d, ast.Attribute) and d.attr == "jit")
        or (isinstance(d, ast.Name) and d.id == "jit")
        for d in node.decorator_list
    )


def long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not is_triton_kernel(node):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_the_size_checks_see_the_source() -> None:
    assert len(source_files()) > 100


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_file_is_longer_than_the_limit(path: Path) -> None:
    num_lines = len(path.read_text().splitlines())
    assert num_lines <= MAX_FILE_LINES, f"{num_lines} lines: split it by concept"


def test_no_function_is_longer_than_the_limit() -> None:
    found = [f for path in source_files() for f in long_functions(path)]
    assert not found, "split these into named phases:\n" + "\n".join(found)
