"""The `pagedock` command: an overview, one module per command, imported only when it runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pagedock import cli
from pagedock.cli import Command, main

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: pagedock <command>")
    for command in ("serve", "download", "route", "operator"):
        assert f"\n  {command} " in out


def test_no_command_prints_the_overview_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "commands:" in capsys.readouterr().out


def test_an_unknown_command_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nope"]) == 2
    assert capsys.readouterr().err.startswith("pagedock: unknown command 'nope'")


def test_bench_is_not_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench"]) == 2
    assert "unknown command 'bench'" in capsys.readouterr().err


def test_a_program_missing_from_the_image_is_a_sentence_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(cli.COMMANDS, "serve", Command("no_such_program.cli", "engine", "serve"))
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "pagedock serve: the 'no_such_program' module is not installed in this image "
        "(pip install 'pagedock[engine]')\n"
    )


def test_commands_resolve_to_a_main_of_their_program() -> None:
    modules = {name: command.module for name, command in cli.COMMANDS.items()}
    assert modules == {
        "serve": "engine.server.cli",
        "download": "pagedock.models.download",
        "route": "router.server.cli",
        "operator": "llm_operator.controller.cli",
    }
    for command in cli.COMMANDS.values():
        assert callable(cli.load(command))


def test_python_dash_m_pagedock_runs_the_command_without_importing_a_program() -> None:
    script = (
        "import sys, runpy\n"
        "sys.argv = ['pagedock', '--help']\n"
        "try:\n"
        "    runpy.run_module('pagedock', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(loaded & {'engine', 'router', 'llm_operator', 'torch'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"
    assert "usage: pagedock <command>" in result.stdout
