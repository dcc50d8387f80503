"""The router's image has no torch: `pip install 'pagedock[router]'` into a fresh venv, then the
router starts, tokenizes (chat and completions) and proxies from there.

The venv is real (no import blocker): torch is simply not installed in it, as in the router image.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.router.fake_replica import FakeReplica, ServerThread
from tests.router.live import ROOT, free_port, wait_until
from tests.tiny_model import make_tiny_llama_dir

pytestmark = pytest.mark.slow

HASH_PROMPTS = """
import json, sys
from pagedock.protocol import ChatCompletionRequest, CompletionRequest
from router.kv.prompt_hasher import PromptHasher, load_tokenizer

hasher = PromptHasher(load_tokenizer(sys.argv[1]))
chat = ChatCompletionRequest(messages=[{"role": "user", "content": "add two numbers"}])
completion = CompletionRequest(prompt="def add(a, b):")
print(json.dumps({
    "chat": hasher.chat(chat).token_ids,
    "completion": hasher.completion(completion).token_ids,
    "torch": "torch" in sys.modules,
}))
"""


@pytest.fixture(scope="module")
def router_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A copy of the sources, so the build leaves nothing (build/, egg-info) in the checkout and
    # nothing stale from an earlier build reaches the venv.
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("engine", "router", "operator", "pagedock"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path_factory.mktemp("router-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"{source}[router]"], check=True, timeout=900, cwd=venv)
    return venv


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory as the engine serves it (made here, with torch): the router reads only
    its config and tokenizer."""
    return make_tiny_llama_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture
def replica() -> Iterator[FakeReplica]:
    fake = FakeReplica("ok")
    with ServerThread(fake.app) as server:
        fake.url = server.url  # type: ignore[attr-defined]
        yield fake


def run_in_venv(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(venv / "bin" / "python"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=venv,  # not the checkout: only what pip installed is importable
        env=env,
    )


def test_torch_is_not_installed_in_the_router_venv(router_venv: Path) -> None:
    result = run_in_venv(router_venv, "-c", "import torch")
    assert result.returncode != 0
    assert "No module named 'torch'" in result.stderr


def test_the_endpoint_picker_loads_from_the_router_extra_without_torch(router_venv: Path) -> None:
    """grpcio, grpcio-health-checking and xds-protos come with `pagedock[router]`."""
    code = "import sys, router.picker.picker_server; print('torch' in sys.modules)"
    result = run_in_venv(router_venv, "-c", code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "False"


def test_the_router_tokenizes_like_the_engine_without_torch(
    router_venv: Path, tokenizer_dir: Path
) -> None:
    from pagedock.protocol import ChatCompletionRequest, CompletionRequest
    from router.kv.prompt_hasher import PromptHasher, load_tokenizer

    result = run_in_venv(router_venv, "-c", HASH_PROMPTS, str(tokenizer_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout)
    here = PromptHasher(load_tokenizer(str(tokenizer_dir)))
    chat = ChatCompletionRequest(messages=[{"role": "user", "content": "add two numbers"}])
    completion = CompletionRequest(prompt="def add(a, b):")
    assert seen["torch"] is False
    assert seen["chat"] == here.chat(chat).token_ids  # type: ignore[union-attr]
    assert seen["completion"] == here.completion(completion).token_ids  # type: ignore[union-attr]


def test_the_router_starts_and_proxies_without_torch(
    router_venv: Path, tokenizer_dir: Path, replica: FakeReplica, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [str(router_venv / "bin" / "pagedock"), "route", "--port", str(port)]
    command += ["--replica", replica.url, "--model", str(tokenizer_dir)]  # type: ignore[attr-defined]
    log = tmp_path / "router.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=router_venv, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _answers(url + "/health"), timeout_s=60)
        response = httpx.post(
            url + "/v1/completions", json={"prompt": "def add(a, b):"}, timeout=30
        )
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["text"] == "hi"
    assert replica.calls == 1
    assert "Traceback" not in log.read_text()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False
