"""The layers import one way. Each test is one rule of the README's "Architecture" section; a
failure names the module that broke it and the import that did.

Rules are checked on the source (tests/import_graph.py), lazy imports inside functions included,
and once more for real: the torch-free modules are imported in a process where torch cannot be.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.import_graph import ROOT, ImportGraph, under, under_any

HEAVY = ("torch", "triton")
# Modules that must run without torch: the bookkeeping, the text stack, finding models, the wire
# protocol, and everything the router and the operator import.
TORCH_FREE_PACKAGES = (
    "engine.core",
    "pagedock.text",
    "pagedock.protocol",
    "engine.tool_calls",
    "pagedock",
)
TORCH_FREE_MODULES = (
    "engine",
    "pagedock.errors",
    "engine.config",
    "engine.inputs.sampling_params",
    "engine.loader",
    "pagedock.models.registry",
    "pagedock.models.hub",
    "pagedock.models.download",
)
# What the router may take from the engine.
ROUTER_MAY_IMPORT = (
    "pagedock.kv.block_hash",
    "pagedock.text",
    "pagedock.models.registry",
    "pagedock.models.hub",
    "pagedock.protocol",
    "pagedock.errors",
)
# The C++/torch layers the torch-free core must never reach into.
DEVICE_LAYERS = (
    "engine.worker",
    "engine.attention",
    "engine.kernels",
    "engine.layers",
    "engine.models",
)


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return ImportGraph()


def torch_paths(graph: ImportGraph, start: str) -> list[str]:
    """For each heavy module reachable from `start`: the chain of imports that reaches it."""
    parent = graph.reachable(start)
    chains = []
    for heavy in (m for m in parent if under_any(m, HEAVY)):
        chain = [heavy]
        while chain[-1] != start:
            chain.append(parent[chain[-1]])
        chains.append(" <- ".join(chain))
    return chains


def modules_under(graph: ImportGraph, prefix: str) -> list[str]:
    return [name for name in graph.modules if under(name, prefix)]


def torch_free_modules(graph: ImportGraph) -> list[str]:
    packaged = {m for p in TORCH_FREE_PACKAGES for m in modules_under(graph, p)}
    return sorted(packaged | set(TORCH_FREE_MODULES))


@pytest.mark.parametrize("package", TORCH_FREE_PACKAGES + TORCH_FREE_MODULES)
def test_torch_free_modules_never_import_torch(graph: ImportGraph, package: str) -> None:
    modules = modules_under(graph, package) if package in TORCH_FREE_PACKAGES else [package]
    broken = [chain for m in modules for chain in torch_paths(graph, m)]
    assert not broken, "torch reached from a torch-free module:\n" + "\n".join(broken)


def test_only_the_server_imports_the_server(graph: ImportGraph) -> None:
    outside = {
        m: targets
        for m, targets in graph.importers_of("engine.server").items()
        if not under(m, "engine.server")
    }
    assert not outside, f"modules outside engine.server import it: {outside}"


def test_the_router_imports_only_the_torch_free_engine_parts(graph: ImportGraph) -> None:
    wrong = {}
    for name in modules_under(graph, "router"):
        engine_imports = {t for t in graph.modules[name].imports if under(t, "engine")}
        bad = {t for t in engine_imports if not under_any(t, ROUTER_MAY_IMPORT)}
        if bad:
            wrong[name] = bad
    assert not wrong, f"router modules import engine parts outside {ROUTER_MAY_IMPORT}: {wrong}"


def test_nothing_the_router_runs_imports_torch(graph: ImportGraph) -> None:
    broken = [chain for m in modules_under(graph, "router") for chain in torch_paths(graph, m)]
    assert not broken, "\n".join(broken)


def test_the_operator_imports_nothing_of_the_engine_or_router(graph: ImportGraph) -> None:
    wrong = {
        m: targets
        for prefix in ("engine", "router")
        for m, targets in graph.importers_of(prefix).items()
        if under(m, "llm_operator")
    }
    assert not wrong, wrong


def test_the_cli_package_imports_none_of_the_three_programs(graph: ImportGraph) -> None:
    """`pagedock` dispatches to each program by module name, so each image installs only its own."""
    wrong = {
        m: targets
        for prefix in ("engine", "router", "llm_operator")
        for m, targets in graph.importers_of(prefix).items()
        if under(m, "pagedock")
    }
    assert not wrong, wrong


def test_the_engine_imports_neither_router_nor_operator(graph: ImportGraph) -> None:
    wrong = {
        m: targets
        for prefix in ("router", "llm_operator")
        for m, targets in graph.importers_of(prefix).items()
        if under(m, "engine")
    }
    assert not wrong, wrong


def test_core_does_not_reach_into_the_device_layers(graph: ImportGraph) -> None:
    wrong = {
        name: bad
        for name in modules_under(graph, "engine.core") + modules_under(graph, "pagedock.text")
        if (bad := {t for t in graph.modules[name].imports if under_any(t, DEVICE_LAYERS)})
    }
    assert not wrong, wrong


# ---- the checker itself catches a violation ---------------------------------------------------


def test_the_checker_finds_a_lazy_torch_import_two_modules_away(tmp_path: Path) -> None:
    pkg = tmp_path / "engine"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("from engine.core import b\n")
    (pkg / "core" / "b.py").write_text("def f():\n    import torch\n")
    graph = ImportGraph({"engine": tmp_path})
    assert torch_paths(graph, "engine.core.a") == ["torch <- engine.core.b <- engine.core.a"]


def test_the_checker_ignores_type_checking_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "engine"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
    )
    graph = ImportGraph({"engine": tmp_path})
    assert torch_paths(graph, "engine.a") == []
    assert graph.modules["engine.a"].type_only == {"torch"}


# ---- and for real: the torch-free modules import with torch unavailable ----------------------

_BLOCK_TORCH = """
import importlib, sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "triton"):
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, NoTorch())
for name in sys.argv[1:]:
    importlib.import_module(name)
print("imported", len(sys.argv) - 1, "modules without torch")
"""


def test_the_torch_free_modules_import_with_torch_blocked(graph: ImportGraph) -> None:
    names = torch_free_modules(graph) + sorted(modules_under(graph, "router"))
    result = subprocess.run(
        [sys.executable, "-c", _BLOCK_TORCH, *names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
