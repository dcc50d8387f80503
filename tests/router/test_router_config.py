"""RouterConfig: configurations that would be unsafe are refused at start-up."""

from __future__ import annotations

import pytest

from pagedock.errors import ConfigError
from tests.router.factories import make_config


def test_a_replica_api_key_without_a_client_api_key_is_refused_naming_both_flags() -> None:
    # The router would add the replicas' key for any client: keyless clients would get through.
    with pytest.raises(ConfigError, match=r"--replica-api-key.*--api-key"):
        make_config(replica_api_key="replica-key")


def test_a_replica_api_key_with_a_client_api_key_is_accepted() -> None:
    config = make_config(replica_api_key="replica-key", api_key="client-key")
    assert config.replica_api_key == "replica-key"
