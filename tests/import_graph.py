"""The project's import graph, read from the source with `ast` (nothing is imported).

An edge `a -> b` means module `a` has an `import` statement naming module `b`, at module level or
inside a function (a lazy import still runs when that code runs); imports under
`if TYPE_CHECKING:` are kept apart, since they never run. Importing a module also runs its parent
packages' `__init__`, so `reachable()` follows those too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Top-level package -> the folder that holds it.
PACKAGES = {
    "engine": ROOT,
    "router": ROOT,
    "llm_operator": ROOT / "operator",
    "pagedock": ROOT,
}


@dataclass
class Module:
    name: str
    path: Path
    runtime: set[str] = field(default_factory=set)
    """Modules imported when this one runs (module level or lazily in a function)."""
    type_only: set[str] = field(default_factory=set)
    """Modules imported only for type checkers (under `if TYPE_CHECKING:`)."""

    @property
    def imports(self) -> set[str]:
        return self.runtime | self.type_only


class ImportGraph:
    def __init__(self, packages: dict[str, Path] | None = None) -> None:
        self.packages = PACKAGES if packages is None else packages
        self.modules: dict[str, Module] = {}
        for package, folder in self.packages.items():
            for path in sorted((folder / package).rglob("*.py")):
                name = _module_name(path.relative_to(folder))
                self.modules[name] = Module(name, path)
        for module in self.modules.values():
            self._read_imports(module)

    def importers_of(self, prefix: str) -> dict[str, set[str]]:
        """Each project module that imports something under `prefix`, with what it imports."""
        found = {}
        for module in self.modules.values():
            hits = {t for t in module.imports if under(t, prefix)}
            if hits:
                found[module.name] = hits
        return found

    def reachable(self, start: str) -> dict[str, str]:
        """Every module (project or third party) that importing `start` runs, each mapped to the
        project module that imports it (for the error message)."""
        seen: dict[str, str] = {start: start}
        stack = [start]
        while stack:
            name = stack.pop()
            module = self.modules.get(name)
            if module is None:
                continue  # third party: not followed
            for target in module.runtime | set(_parents(name)):
                if target not in seen:
                    seen[target] = name
                    stack.append(target)
        return seen

    def _read_imports(self, module: Module) -> None:
        tree = ast.parse(module.path.read_text(), str(module.path))
        type_only_nodes = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            targets = self._targets(module, node)
            if targets:
                kept = module.type_only if id(node) in type_only_nodes else module.runtime
                kept.update(targets)

    def _targets(self, module: Module, node: ast.AST) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        if not isinstance(node, ast.ImportFrom):
            return []
        base = node.module or ""
        if node.level:  # relative: resolve against this module's package
            package = module.name.split(".")
            if module.path.name != "__init__.py":
                package = package[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join([*package, *([base] if base else [])])
        # `from pkg import mod` imports the module pkg.mod when there is one.
        return [
            f"{base}.{a.name}" if f"{base}.{a.name}" in self.modules else base for a in node.names
        ]


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def under_any(name: str, prefixes: Iterable[str]) -> bool:
    return any(under(name, p) for p in prefixes)


def _module_name(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside `if TYPE_CHECKING:` blocks."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                ids.update(id(n) for n in ast.walk(child))
    return ids


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
