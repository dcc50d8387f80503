"""EngineConfig validation, and how `pagedock serve` reports a config it refuses."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.server.cli import build_parser
from pagedock.byte_size import parse_bytes
from pagedock.cli import main
from pagedock.errors import ConfigError, InvalidRequestError

# The built-in SmolLM2 has 9 attention heads and 3 KV heads.
TP_DOES_NOT_FIT = (
    "tensor_parallel_size 2 does not fit this model: num_attention_heads (9) is not divisible by "
    "it; num_key_value_heads (3) neither divides it nor is divisible by it"
)


def test_a_bad_setting_is_a_config_error_not_a_bad_request() -> None:
    with pytest.raises(ConfigError) as e:
        EngineConfig(block_size=24)
    assert not isinstance(e.value, InvalidRequestError)


def test_an_unreadable_size_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot read 'lots' as a size in bytes"):
        parse_bytes("lots")


def test_tensor_parallel_size_flag_defaults_to_one() -> None:
    assert build_parser().parse_args([]).tensor_parallel_size == 1
    assert EngineConfig(tensor_parallel_size=1).tensor_parallel_size == 1


@pytest.mark.parametrize(
    ("argv", "env"),
    [(["serve", "--tensor-parallel-size", "2"], None), (["serve"], "2")],
)
def test_serve_with_a_tensor_parallel_size_the_model_cannot_split_is_a_clean_cli_error(
    argv: list[str],
    env: str | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if env is not None:
        monkeypatch.setenv("PAGEDOCK_TENSOR_PARALLEL_SIZE", env)
    assert main(argv) == 2
    err = capsys.readouterr().err
    # The last line: the first use of the built-in model prints its one-time fetch before it.
    assert err.strip().splitlines()[-1].startswith(f"pagedock serve: error: {TP_DOES_NOT_FIT}")
    assert "Traceback" not in err
