"""--speculative-config: vLLM's JSON, read into SpeculativeConfig; a bad one stops the start with
a message that names the problem."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.server.cli import build_parser
from pagedock.cli import main
from pagedock.errors import ConfigError
from pagedock.speculative_config import SpeculativeConfig

NGRAM = (
    '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, '
    '"prompt_lookup_max": 3}'
)


def test_the_flag_reads_vllms_json() -> None:
    args = build_parser().parse_args(["--speculative-config", NGRAM])
    config = EngineConfig(speculative_config=args.speculative_config)
    assert config.speculative == SpeculativeConfig("ngram", 4, 2, 3)


def test_the_environment_variable_reads_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAGEDOCK_SPECULATIVE_CONFIG", NGRAM)
    args = build_parser().parse_args([])
    assert EngineConfig(speculative_config=args.speculative_config).speculative is not None


def test_speculation_is_off_by_default() -> None:
    assert build_parser().parse_args([]).speculative_config is None
    assert EngineConfig().speculative is None


def test_the_offline_api_takes_a_dict() -> None:
    config = EngineConfig(speculative_config={"method": "ngram", "num_speculative_tokens": 2})
    assert config.speculative == SpeculativeConfig("ngram", 2, 5, 5)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"method": "eagle", "num_speculative_tokens": 2}', "method 'eagle' is not served"),
        ('{"num_speculative_tokens": 2}', "method is required"),
        ('{"method": "ngram"}', "num_speculative_tokens is required"),
        ('{"method": "ngram", "num_speculative_tokens": 0}', "must be in 1..16, got 0"),
        ('{"method": "ngram", "num_speculative_tokens": "4"}', "must be an integer"),
        (
            '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 3, '
            '"prompt_lookup_max": 2}',
            "prompt_lookup_min <= prompt_lookup_max",
        ),
        ('{"method": "ngram", "num_speculative_tokens": 2, "model": "x"}', "unknown keys"),
    ],
)
def test_a_bad_config_is_a_config_error_naming_the_problem(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--speculative-config") as e:
        EngineConfig(speculative_config=value)
    assert message in str(e.value)


def test_tensor_parallelism_is_refused_for_now() -> None:
    with pytest.raises(ConfigError, match="speculative_config does not work with tensor"):
        EngineConfig(speculative_config=NGRAM, tensor_parallel_size=2)


def test_serve_with_a_bad_speculative_config_is_a_clean_cli_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    medusa = '{"method": "medusa", "num_speculative_tokens": 2}'
    assert main(["serve", "--speculative-config", medusa]) == 2
    err = capsys.readouterr().err
    assert "pagedock serve: error: --speculative-config: method 'medusa' is not served" in err
    assert "Traceback" not in err
