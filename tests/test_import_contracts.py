"""The layers import one way. Each test is one rule of the README's "Architecture" section; a
failure names the module that broke it and the import that did.

Rules are checked on the source (tests/import_graph.py), lazy imports inside functions included,
and once more for real: the torch-free modules are imported in a process where torch cannot be.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.import_graph import ROOT, ImportGraph, under, under_any

HEAVY = ("torch", "triton")

# ---- the map: every folder has a rank; an import points only to a lower rank -----------------
#
# The foundation (`pagedock/`) is ranked on its own; each program (engine, router, operator)
# stands on all of it and ranks its own folders above it. A folder at rank r may import the
# foundation, and folders of its own program at a rank below r; folders of one rank are siblings
# and import neither each other nor anything above. Imports under `if TYPE_CHECKING:` are not
# ranked (they never run). README.md's "Architecture" lists the same ranks.
FOUNDATION: tuple[tuple[str, ...], ...] = (
    ("pagedock",),  # limits, errors, options, the `pagedock` command
    ("pagedock.protocol", "pagedock.tracing"),
    (
        "pagedock.http",
        "pagedock.kv",
        "pagedock.models",
        "pagedock.responses_store",
        "pagedock.tenancy",
    ),
    ("pagedock.text",),
)
PROGRAMS: dict[str, tuple[tuple[str, ...], ...]] = {
    "engine": (
        ("engine",),  # config, model_config, device
        # LoRA: the scheduler's slots (torch-free), adapters and the batched delta, which the
        # model (llama_lora), the worker and the runtime use
        ("engine.inputs", "engine.lora"),
        ("engine.spec_decode",),  # speculative decoding's drafts and their rules (torch-free)
        ("engine.core", "engine.kernels", "engine.distributed"),
        ("engine.attention",),
        ("engine.layers",),
        ("engine.models",),
        ("engine.loader",),
        ("engine.structured_outputs",),
        ("engine.sampling",),
        ("engine.worker",),
        ("engine.executor",),
        ("engine.runtime",),
        ("engine.tool_calls",),
        ("engine.server.kv_events", "engine.server.tenancy"),
        ("engine.server.openai",),
        # the Responses API, served by the chat path of engine.server.openai; embeddings
        ("engine.server.responses", "engine.server.embeddings"),
        ("engine.server",),
    ),
    "router": (
        ("router",),  # config, metrics, demand
        ("router.kv", "router.replicas.discovery", "router.flow"),
        ("router.replicas",),
        ("router.policies",),
        # the live web view's data (its routes are the server's)
        ("router.http", "router.dashboard"),
        ("router.picker",),
        ("router.server",),
    ),
    "llm_operator": (
        ("llm_operator",),  # API group constants, names, settings, conditions
        ("llm_operator.k8s",),
        ("llm_operator.api",),
        ("llm_operator.builders",),
        ("llm_operator.fleet",),
        ("llm_operator.autoscaler",),
        ("llm_operator.controller",),
    ),
}
# Entry points above every rank: the engine's lazy public names (`from engine import LLM`) and
# `python -m llm_operator`.
ENTRY_POINTS = ("engine", "llm_operator.__main__")

# Modules that must run without torch: the whole foundation, the engine's bookkeeping and inputs,
# and everything the router and the operator import.
TORCH_FREE_PACKAGES = (
    "pagedock",
    "engine.inputs",
    "engine.core",
    "engine.spec_decode",
    "engine.tool_calls",
)
TORCH_FREE_MODULES = (
    "engine",
    "engine.config",
    "engine.loader",
    "engine.lora",
    "engine.lora.adapter_config",
    "engine.lora.adapter_registry",
    "engine.lora.slots",
)


@dataclass(frozen=True)
class Rank:
    program: str  # "" for the foundation
    level: int
    folder: str


def rank_table() -> dict[str, Rank]:
    table = {f: Rank("", i, f) for i, level in enumerate(FOUNDATION) for f in level}
    for program, levels in PROGRAMS.items():
        table |= {f: Rank(program, i, f) for i, level in enumerate(levels) for f in level}
    return table


def folder_of(graph: ImportGraph, name: str) -> str:
    """The package a module lives in (a package's `__init__` lives in the package itself)."""
    module = graph.modules[name]
    return name if module.path.name == "__init__.py" else name.rpartition(".")[0]


def rank_of(table: dict[str, Rank], folder: str) -> Rank | None:
    """The rank of the closest ranked folder at or above `folder`."""
    while folder and folder not in table:
        folder = folder.rpartition(".")[0]
    return table.get(folder)


def may_import(source: Rank, target: Rank) -> bool:
    if source.folder == target.folder:
        return True
    if target.program == "":
        return source.program != "" or target.level < source.level
    return target.program == source.program and target.level < source.level


def rank_violations(graph: ImportGraph, table: dict[str, Rank]) -> list[str]:
    found = []
    for name, module in sorted(graph.modules.items()):
        if name in ENTRY_POINTS:
            continue
        source = rank_of(table, folder_of(graph, name))
        assert source is not None, f"{name} is in no ranked folder"
        for target_name in sorted(module.runtime):
            if target_name not in graph.modules:
                continue  # third party
            target = rank_of(table, folder_of(graph, target_name))
            assert target is not None, f"{target_name} is in no ranked folder"
            if not may_import(source, target):
                found.append(
                    f"{name} ({source.folder}, rank {source.level}) imports {target_name} "
                    f"({target.folder}, {target.program or 'foundation'} rank {target.level})"
                )
    return found


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


def test_the_router_imports_nothing_of_the_engine(graph: ImportGraph) -> None:
    wrong = {m: t for m, t in graph.importers_of("engine").items() if under(m, "router")}
    assert not wrong, f"router modules import the engine: {wrong}"


def test_every_import_points_to_a_lower_rank(graph: ImportGraph) -> None:
    broken = rank_violations(graph, rank_table())
    assert not broken, "imports that point up or sideways:\n" + "\n".join(broken)


def test_every_folder_has_a_rank(graph: ImportGraph) -> None:
    table = rank_table()
    folders = {folder_of(graph, name) for name in graph.modules}
    unranked = sorted(f for f in folders if f not in table and not _nested_in_ranked(f, table))
    assert not unranked, f"folders with no rank (add them to FOUNDATION or PROGRAMS): {unranked}"
    stale = sorted(f for f in table if f not in folders)
    assert not stale, f"ranked folders that do not exist: {stale}"


def _nested_in_ranked(folder: str, table: dict[str, Rank]) -> bool:
    """A sub-package of a ranked folder that is not a program's top: e.g. router.replicas.discovery
    is ranked itself, engine.kernels' csrc holds no Python."""
    parent = folder.rpartition(".")[0]
    return bool(parent) and parent in table and parent not in PROGRAMS and parent != "pagedock"


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


def test_the_rank_check_finds_an_upward_and_a_sideways_import(tmp_path: Path) -> None:
    for folder in ("engine/core", "engine/worker", "engine/kernels"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "engine" / "__init__.py").write_text("")
    (tmp_path / "engine/core/a.py").write_text("from engine.worker import b\n")
    (tmp_path / "engine/core/c.py").write_text("def f():\n    from engine.kernels import d\n")
    (tmp_path / "engine/worker/b.py").write_text("from engine.core import a\n")
    (tmp_path / "engine/kernels/d.py").write_text("")
    graph = ImportGraph({"engine": tmp_path})
    table = {
        "engine.core": Rank("engine", 1, "engine.core"),
        "engine.kernels": Rank("engine", 1, "engine.kernels"),
        "engine.worker": Rank("engine", 2, "engine.worker"),
        "engine": Rank("engine", 0, "engine"),
    }
    broken = rank_violations(graph, table)
    assert [b.split(" imports ")[0] for b in broken] == [
        "engine.core.a (engine.core, rank 1)",
        "engine.core.c (engine.core, rank 1)",
    ]


def test_a_program_may_not_import_another(tmp_path: Path) -> None:
    engine = Rank("engine", 5, "engine.server")
    router = Rank("router", 0, "router")
    foundation = Rank("", 3, "pagedock.text")
    assert not may_import(Rank("router", 6, "router.server"), engine)
    assert not may_import(engine, router)
    assert may_import(router, foundation)
    assert not may_import(Rank("", 1, "pagedock.protocol"), foundation)


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


# ---- rooms stay small enough to find things in --------------------------------------------

MAX_LOOSE_MODULES = 15
MAX_ENGINE_ROOT_MODULES = 6


def loose_modules(graph: ImportGraph) -> dict[str, list[str]]:
    """Each folder's modules, its `__init__` not counted."""
    folders: dict[str, list[str]] = {}
    for name, module in graph.modules.items():
        if module.path.name != "__init__.py":
            folders.setdefault(folder_of(graph, name), []).append(name)
    return folders


def test_no_folder_holds_more_than_fifteen_loose_modules(graph: ImportGraph) -> None:
    crowded = {f: len(m) for f, m in loose_modules(graph).items() if len(m) > MAX_LOOSE_MODULES}
    assert not crowded, f"group these folders' modules by concern: {crowded}"


def test_the_engine_root_holds_only_its_bottom(graph: ImportGraph) -> None:
    root = sorted(loose_modules(graph)["engine"])
    assert len(root) + 1 <= MAX_ENGINE_ROOT_MODULES, root  # + its __init__


# ---- the README's diagram is this map ------------------------------------------------------


def readme_ranks() -> dict[str, int]:
    """Folder -> rank as README.md's Architecture diagram lists them (`  3  engine/attention/`,
    a sibling's line with no number shares the rank above it)."""
    text = (ROOT / "README.md").read_text()
    diagram = text.split("## Architecture", 1)[1].split("```", 2)[1]
    ranks, rank = {}, -1
    for line in diagram.splitlines():
        match = re.match(r"^\s*(\d+)?\s+((?:llm_operator|engine|router|pagedock)/\S*)\s", line)
        if match:
            rank = int(match.group(1)) if match.group(1) else rank
            ranks[match.group(2).rstrip("/").replace("/", ".")] = rank
    return ranks


def test_the_readme_diagram_lists_the_same_ranks() -> None:
    table = {folder: rank.level for folder, rank in rank_table().items()}
    assert readme_ranks() == table
