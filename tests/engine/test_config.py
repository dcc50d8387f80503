"""EngineConfig validation, and how `pagedock serve` reports a config it refuses."""

from __future__ import annotations

import pytest

from engine.cli import build_serve_parser, main
from engine.config import EngineConfig
from engine.errors import InvalidRequestError

TP_NOT_IMPLEMENTED = (
    "tensor parallelism is not implemented in this pagedock version; tensor_parallel_size must be 1"
)


def test_tensor_parallel_size_above_one_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match=TP_NOT_IMPLEMENTED):
        EngineConfig(tensor_parallel_size=2)


def test_tensor_parallel_size_flag_defaults_to_one() -> None:
    assert build_serve_parser().parse_args([]).tensor_parallel_size == 1
    assert EngineConfig(tensor_parallel_size=1).tensor_parallel_size == 1


@pytest.mark.parametrize(
    ("argv", "env"),
    [(["serve", "--tensor-parallel-size", "2"], None), (["serve"], "4")],
)
def test_serve_with_tensor_parallelism_is_a_clean_cli_error(
    argv: list[str],
    env: str | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if env is not None:
        monkeypatch.setenv("PAGEDOCK_TENSOR_PARALLEL_SIZE", env)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pagedock serve: error: {TP_NOT_IMPLEMENTED}")
    assert "Traceback" not in err
