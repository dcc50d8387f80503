"""Fixtures of the server tests: the tiny model on disk, and real `pagedock serve` processes.

Servers are shared per session or module (each start loads a model): the suite must stay well
under a few minutes on 2 cores.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config import EngineConfig
from tests.server.inprocess_server import InProcessServer
from tests.server.server_process import ServerProcess, start_server
from tests.tiny_model import make_tiny_llama_dir

# The shared tiny server's KV pool: small enough that a random workload evicts blocks.
TINY_NUM_KV_BLOCKS = 256
TINY_MAX_MODEL_LEN = 512
LONG_MAX_MODEL_LEN = 4096


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_llama_dir(tmp_path_factory.mktemp("server-tiny-llama"))


def tiny_server_args(model_dir: Path, *extra: str) -> list[str]:
    # One torch thread: the tiny model needs no more, and the tests' own client shares the cores.
    return ["--model", str(model_dir), "--num-threads", "1", "--log-level", "warning", *extra]


def start_tiny_server(
    model_dir: Path, tmp_path_factory: pytest.TempPathFactory, name: str, *extra: str
) -> ServerProcess:
    """A `pagedock serve` of the tiny model with the shared server's pool and context, plus
    `extra` flags; its log named after it."""
    args = tiny_server_args(
        model_dir,
        "--num-kv-blocks",
        str(TINY_NUM_KV_BLOCKS),
        "--max-model-len",
        str(TINY_MAX_MODEL_LEN),
        *extra,
    )
    return start_server(args, tmp_path_factory.mktemp("logs") / f"{name}.log")


@pytest.fixture(scope="session")
def tiny_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    server = start_tiny_server(
        tiny_model_dir, tmp_path_factory, "tiny-server", "--max-num-seqs", "64"
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def long_tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model with a 4096-token context, so that one request can run for seconds."""
    return make_tiny_llama_dir(
        tmp_path_factory.mktemp("long-tiny-llama"), max_position_embeddings=LONG_MAX_MODEL_LEN
    )


@pytest.fixture(scope="module")
def inprocess_server(tiny_model_dir: Path) -> Iterator[InProcessServer]:
    """The app in this process (uvicorn on a thread), its engine reachable by the test."""
    config = EngineConfig(
        model=str(tiny_model_dir), max_model_len=64, num_kv_blocks=64, num_threads=1
    )
    server = InProcessServer(config).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def model_name(tiny_model_dir: Path) -> str:
    return tiny_model_dir.name
