"""Each program reads its settings through pagedock.options: `pagedock serve` and `pagedock route`
from flags and PAGEDOCK_* env vars, the operator from PAGEDOCK_OPERATOR_* (and the names the chart
sets)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llm_operator.settings import ENV_PREFIX, OperatorSettings

from engine.config import EngineConfig
from engine.server import cli as serve_cli
from engine.server.openai.context import ServerOptions
from pagedock.options import OptionError, options, values_for
from router.config import RouterConfig
from router.server import cli as route_cli

ROOT = Path(__file__).resolve().parents[2]
CHART_DEPLOYMENT = ROOT / "charts" / "pagedock" / "templates" / "deployment.yaml"


def serve_config(argv: list[str]) -> EngineConfig:
    return EngineConfig(**values_for(EngineConfig, serve_cli.build_parser().parse_args(argv)))


def test_pagedock_onednn_false_turns_onednn_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAGEDOCK_ONEDNN", "false")
    assert serve_config([]).onednn is False


def test_engine_switches_are_flags() -> None:
    config = serve_config(["--no-onednn", "--no-cpu-kernels", "--no-weight-cache"])
    assert (config.onednn, config.cpu_kernels, config.weight_cache) == (False, False, False)
    assert (serve_config([]).onednn, serve_config([]).cpu_kernels) == (True, True)


def test_a_junk_engine_switch_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAGEDOCK_CPU_KERNELS", "maybe")
    with pytest.raises(SystemExit):
        serve_cli.build_parser()
    assert (
        "pagedock serve: error: PAGEDOCK_CPU_KERNELS='maybe': expected one of 0, 1"
        in capsys.readouterr().err
    )


def test_serve_keeps_the_vllm_aliases_and_the_positional_model() -> None:
    ns = serve_cli.build_parser().parse_args(
        ["m.gguf", "--no-prefix-caching", "--no-chunked-prefill"]
    )
    assert (ns.model_arg, ns.enable_prefix_caching, ns.enable_chunked_prefill) == (
        "m.gguf",
        False,
        False,
    )


def test_serve_has_a_flag_per_engine_and_server_field() -> None:
    dests = {action.dest for action in serve_cli.build_parser()._actions}
    for cls in (EngineConfig, ServerOptions):
        assert {o.name for o in options(cls, "PAGEDOCK_")} <= dests


def test_route_reads_replicas_and_log_level_from_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAGEDOCK_REPLICAS", "http://a:1, http://b:2")
    monkeypatch.setenv("PAGEDOCK_LOG_LEVEL", "debug")
    ns = route_cli.build_parser().parse_args([])
    assert RouterConfig(**values_for(RouterConfig, ns)).replicas == ["http://a:1", "http://b:2"]
    assert ns.log_level == "debug"


def test_route_replica_flags_replace_the_env_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAGEDOCK_REPLICAS", "http://a:1")
    ns = route_cli.build_parser().parse_args(["--replica", "http://c:3"])
    assert ns.replicas == ["http://c:3"]


def test_operator_settings_read_a_false_switch() -> None:
    settings = OperatorSettings.from_env({"PAGEDOCK_OPERATOR_SCRAPE_METRICS": "false"})
    assert settings.scrape_metrics is False


def test_operator_settings_refuse_a_junk_switch() -> None:
    with pytest.raises(
        OptionError, match=r"PAGEDOCK_OPERATOR_SCRAPE_METRICS='sometimes': expected one of"
    ):
        OperatorSettings.from_env({"PAGEDOCK_OPERATOR_SCRAPE_METRICS": "sometimes"})


def test_operator_settings_keep_the_chart_env_names() -> None:
    settings = OperatorSettings.from_env(
        {
            "PAGEDOCK_IMAGE_REPOSITORY": "r.test",
            "PAGEDOCK_IMAGE_TAG": "2",
            "PAGEDOCK_OPERATOR_PEERING": "",
            "PAGEDOCK_OPERATOR_NAMESPACES": "a,b",
            "PAGEDOCK_OPERATOR_LIVENESS_PORT": "0",
        }
    )
    assert (settings.image("engine-cuda"), settings.image("router")) == (
        "r.test/engine-cuda:2",
        "r.test/router:2",
    )
    assert (settings.peering_name, settings.namespaces, settings.liveness_port) == (
        "",
        ("a", "b"),
        0,
    )


def test_every_env_var_the_chart_sets_is_an_operator_setting() -> None:
    chart_names = set(re.findall(r"name: (PAGEDOCK_\w+)", CHART_DEPLOYMENT.read_text()))
    assert chart_names, CHART_DEPLOYMENT
    assert chart_names <= {o.env for o in options(OperatorSettings, ENV_PREFIX)}


def test_a_bad_operator_setting_stops_the_operator_with_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llm_operator.controller.cli import main

    monkeypatch.setenv("PAGEDOCK_OPERATOR_RESYNC_SECONDS", "soon")
    assert main(["run"]) == 2
    assert capsys.readouterr().err == (
        "pagedock operator: error: PAGEDOCK_OPERATOR_RESYNC_SECONDS='soon': expected float\n"
    )
