"""The engine's tenancy settings (engine/tenancy_config.py): `pagedock serve --tenants FILE
--tenant-header NAME --fairness vtc|fcfs`, and the clean stop a bad tenants file makes."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.server.cli import build_parser
from pagedock.cli import main
from pagedock.errors import ConfigError
from pagedock.options import values_for


def test_the_flags_and_variables_set_the_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tenants.yaml"
    path.write_text("tenants: [{name: chat, api_keys: [k]}]\n")
    monkeypatch.setenv("PAGEDOCK_FAIRNESS", "fcfs")
    ns = build_parser().parse_args(["--tenants", str(path), "--tenant-header", "x-team"])
    config = EngineConfig(**values_for(EngineConfig, ns))
    assert (config.tenants, config.tenant_header, config.fairness) == (str(path), "x-team", "fcfs")
    table = config.tenant_table()
    assert table is not None and table.by_key("k") is table.tenants["chat"]


def test_by_default_there_are_no_tenants_and_the_queue_is_fair() -> None:
    config = EngineConfig()
    assert (config.tenants, config.tenant_header, config.fairness) == (None, None, "vtc")
    assert config.tenant_table() is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"fairness": "lottery"}, "fairness must be vtc or fcfs, got 'lottery'"),
        ({"tenant_header": "x-team"}, "--tenant-header needs --tenants"),
    ],
)
def test_bad_tenancy_settings_are_config_errors(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EngineConfig(**settings)


def test_a_bad_tenants_file_is_a_config_error_naming_the_file_and_the_problem(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tenants.yaml"
    path.write_text("tenants: [{name: chat, requests_per_minute: 0}]\n")
    with pytest.raises(ConfigError, match=r"tenants.yaml: tenants.0.requests_per_minute"):
        EngineConfig(tenants=str(path))
    with pytest.raises(ConfigError, match="cannot read the tenants file"):
        EngineConfig(tenants=str(tmp_path / "missing.yaml"))


def test_serve_stops_on_a_bad_tenants_file_before_loading_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tenants.json"
    path.write_text('{"tenants": []}')
    assert main(["serve", "--model", str(tmp_path / "no-such-model"), "--tenants", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"pagedock serve: error: {path}: tenants: " in err and "at least one tenant" in err
    assert "Traceback" not in err
