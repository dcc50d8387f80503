from __future__ import annotations

from pathlib import Path

import pytest

from pagedock.errors import ConfigError
from pagedock.tenancy.tenants import load_tenants, parse_tenants

FILE = """
priority_classes: {interactive: 0, batch: 10}
default_priority: batch
tenants:
  - name: chat
    api_keys: [sk-chat]
    priority: interactive
    requests_per_minute: 60
  - name: sweep
    api_key_files: [KEYFILE]
"""


def test_a_file_maps_keys_and_names_to_tenants_with_their_priorities(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("sk-sweep\n")
    path = tmp_path / "tenants.yaml"
    path.write_text(FILE.replace("KEYFILE", str(key_file)))
    table = load_tenants(path)
    chat, sweep = table.by_key("sk-chat"), table.by_key("sk-sweep")
    assert chat is not None and chat.name == "chat" and chat.priority == 0
    assert chat.requests_per_minute == 60 and chat.tokens_per_minute is None
    assert sweep is not None and sweep.priority == 10  # the default class
    assert table.by_key("sk-other") is None and table.by_key(None) is None
    assert table.by_name("sweep") is sweep and table.num_keys == 2


def test_a_bare_list_and_json_are_files_too(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('[{"name": "a", "api_keys": ["k"], "priority": 3}]')
    tenant = load_tenants(path).by_key("k")
    assert tenant is not None and tenant.priority == 3


def test_a_request_never_runs_more_urgently_than_its_tenant() -> None:
    tenant = parse_tenants([{"name": "a", "priority": 5}]).by_name("a")
    assert tenant is not None
    assert tenant.effective_priority(None) == 5
    assert tenant.effective_priority(0) == 5  # asked for more urgent: its tenant's
    assert tenant.effective_priority(9) == 9  # less urgent is its own choice


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "at least one tenant"),
        ([{"name": "a b"}], "tenants.0.name"),
        ([{"name": "a", "limit": 1}], "tenants.0.limit"),
        ([{"name": "a", "tokens_per_minute": 0}], "tokens_per_minute"),
        ([{"name": "a"}, {"name": "a"}], "'a' is listed twice"),
        ([{"name": "a", "api_keys": ["k"]}, {"name": "b", "api_keys": ["k"]}], "share an API key"),
        ([{"name": "a", "priority": "gold"}], "'gold' is not a priority class"),
        ([{"name": "a", "api_key_files": ["/nonexistent/key"]}], "cannot read the API key file"),
        ([{"name": "default"}], "the tenant name 'default' is reserved"),
    ],
)
def test_a_bad_file_is_an_error_naming_the_problem(data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_tenants(data)


def test_an_unreadable_or_malformed_file_names_itself(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the tenants file"):
        load_tenants(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tenants: [")
    with pytest.raises(ConfigError, match=r"bad\.yaml is not valid YAML/JSON"):
        load_tenants(bad)
