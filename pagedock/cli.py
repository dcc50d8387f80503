"""The `pagedock` command: `serve`, `route` and `operator`, each a program of its own.

A command's module is imported only when that command runs (by name, from `COMMANDS`), so
`pagedock route` and `pagedock operator` never import torch, and an image built without a program
says so instead of failing with a traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from pagedock.limits import DEFAULT_MODEL

CommandMain = Callable[[list[str]], int]


@dataclass(frozen=True)
class Command:
    module: str
    """The module whose `main(argv) -> int` runs the command."""
    extra: str
    """The pip extra that installs what the command needs (`pagedock[extra]`)."""
    summary: str


COMMANDS = {
    "serve": Command(
        "engine.server.cli",
        "engine",
        f"run the engine's OpenAI-compatible server (default model: {DEFAULT_MODEL})",
    ),
    "download": Command(
        "pagedock.models.download",
        "engine",
        "fetch a model into the cache the engine reads, then exit (the operator's download Job)",
    ),
    "route": Command(
        "router.server.cli", "router", "run the prefix-aware router in front of engine replicas"
    ),
    "operator": Command(
        "llm_operator.controller.cli", "operator", "run the Kubernetes operator, or print its CRD"
    ),
}


def overview() -> str:
    lines = [f"  {name:<10} {command.summary}" for name, command in COMMANDS.items()]
    return "\n".join(
        [
            "usage: pagedock <command> [options]",
            "",
            "pagedock serves LLMs: a paged-attention engine with an OpenAI-compatible API, a",
            "prefix-aware router, and a Kubernetes operator.",
            "",
            "commands:",
            *lines,
            "",
            "`pagedock <command> --help` describes each command's options.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(overview())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    command = COMMANDS.get(name)
    if command is None:
        print(f"pagedock: unknown command {name!r}\n\n{overview()}", file=sys.stderr)
        return 2
    try:
        return load(command)(rest)
    except ModuleNotFoundError as e:
        # NOTE: each image installs one extra; a missing module means this image lacks the program
        # (or its dependencies), which deserves a sentence rather than a traceback.
        missing = f"the {e.name!r} module" if e.name else "a module it needs"
        print(
            f"pagedock {name}: {missing} is not installed in this image "
            f"(pip install 'pagedock[{command.extra}]')",
            file=sys.stderr,
        )
        return 2


def load(command: Command) -> CommandMain:
    """The command's `main`, imported now."""
    return cast(CommandMain, importlib.import_module(command.module).main)
