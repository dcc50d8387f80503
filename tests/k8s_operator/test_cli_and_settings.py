"""`pagedock operator crd`, `python -m llm_operator`, and settings from the environment."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from llm_operator.controller.cli import build_parser, main
from llm_operator.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[2]


def test_crd_command_prints_the_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd"]) == 0
    documents = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert [d["metadata"]["name"] for d in documents] == ["llmdeployments.pagedock.dev"]


def test_python_dash_m_runs_the_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "llm_operator", "crd", "--peering"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT / "operator",
    )
    assert result.stdout == (ROOT / "manifests" / "crd.yaml").read_text()


def test_run_arguments_parse_namespaces_or_all() -> None:
    args = build_parser().parse_args(["run", "-n", "a", "--namespace", "b", "--verbose"])
    assert (args.namespaces, args.clusterwide, args.verbose) == (["a", "b"], False, True)
    assert build_parser().parse_args(["-A"]).clusterwide
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "-A", "-n", "a"])


def test_settings_come_from_the_environment() -> None:
    settings = OperatorSettings.from_env(
        {
            "PAGEDOCK_OPERATOR_NAMESPACES": "a, b",
            "PAGEDOCK_IMAGE_REPOSITORY": "registry.test/team/",
            "PAGEDOCK_IMAGE_TAG": "1",
            "PAGEDOCK_OPERATOR_LOG_LEVEL": "debug",
            "PAGEDOCK_OPERATOR_SCRAPE_METRICS": "false",
            "PAGEDOCK_OPERATOR_RESYNC_SECONDS": "15",
        }
    )
    assert settings.namespaces == ("a", "b")
    assert (settings.image("engine-cpu"), settings.log_level) == (
        "registry.test/team/engine-cpu:1",
        "DEBUG",
    )
    assert (settings.scrape_metrics, settings.resync_seconds) == (False, 15.0)
    assert OperatorSettings.from_env({}) == OperatorSettings()


@pytest.mark.parametrize("namespace", ["team-*", "!kube-system", "Team_A"])
def test_run_refuses_namespace_globs_it_cannot_serve(
    namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "-n", "team-a", "-n", namespace]) == 2
    assert f"not a namespace name: {namespace}" in capsys.readouterr().err
    assert "exact names: no globs" in " ".join(build_parser().format_help().split())
