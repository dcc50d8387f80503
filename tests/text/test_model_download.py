"""`pagedock download` against a loopback stand-in for the Hub, then the engine offline from that
cache: what the operator's download Job and the engine pods on the cache claim do.

Each step runs as a process of its own, as in the pods: huggingface_hub reads HF_ENDPOINT and
HF_HUB_OFFLINE once, when it is imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hub_stand_in import HubStandIn

ROOT = Path(__file__).resolve().parents[2]
REPO_ID = "acme/tiny-llama"
MODEL = f"hf://{REPO_ID}@v1"
DEAD_ENDPOINT = "http://127.0.0.1:9"  # the discard port: nothing answers there


def run(args: list[str], hf_home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PAGEDOCK_"))},
        "HF_HOME": str(hf_home),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "operator")]),
        **env,
    }
    return subprocess.run(
        [sys.executable, *args], env=environ, cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def download(hub: HubStandIn, hf_home: Path, model: str = MODEL) -> subprocess.CompletedProcess:
    return run(["-m", "pagedock", "download", model], hf_home, HF_ENDPOINT=hub.endpoint)


def tree_state(root: Path) -> dict[str, float]:
    """Every path under root with its mtime: what a read-only mount would keep unchanged."""
    return {str(p.relative_to(root)): p.lstat().st_mtime for p in root.rglob("*")}


def snapshot(hf_home: Path, hub: HubStandIn) -> Path:
    folder = "models--" + REPO_ID.replace("/", "--")
    return hf_home / "hub" / folder / "snapshots" / hub.commit


def test_download_fills_the_cache_with_what_the_engine_reads_once(
    tiny_repo: Path, tmp_path: Path
) -> None:
    with HubStandIn(REPO_ID, tiny_repo, revisions=("v1",)) as hub:
        first = download(hub, tmp_path)
        assert first.returncode == 0, first.stderr
        files = sorted(p.name for p in snapshot(tmp_path, hub).iterdir())
        assert "model.safetensors" in files and "tokenizer.json" in files
        assert "README.md" not in files and "pytorch_model.bin" not in files
        fetched = len(
            [
                r
                for r in hub.requests
                if r == ("GET", f"/{REPO_ID}/resolve/{hub.commit}/model.safetensors")
            ]
        )
        assert fetched == 1
        before = len(hub.requests)
        again = download(hub, tmp_path)
        assert again.returncode == 0, again.stderr
        assert not [path for _, path in hub.requests[before:] if "/resolve/" in path]


def test_download_of_an_unknown_repo_fails_with_the_hubs_reason(
    tiny_repo: Path, tmp_path: Path
) -> None:
    with HubStandIn(REPO_ID, tiny_repo) as hub:
        result = download(hub, tmp_path, "hf://acme/no-such-model")
    assert result.returncode == 1
    assert "pagedock download: error: hf://acme/no-such-model" in result.stderr
    assert "no such repo" in result.stderr


OFFLINE_ENGINE = """
from engine.runtime.llm import LLM
from pagedock.models.registry import resolve_model
from engine.inputs.sampling_params import SamplingParams

assert resolve_model("{model}", weights=False).path.is_dir()  # the router's tokenizer fetch
llm = LLM(model="{model}", num_kv_blocks=32, max_model_len=64)
[out] = llm.generate([[5, 6, 7, 8]], SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)
print(len(out.outputs[0].token_ids))
"""


@pytest.mark.slow
def test_engine_loads_the_downloaded_model_offline(tiny_repo: Path, tmp_path: Path) -> None:
    with HubStandIn(REPO_ID, tiny_repo, revisions=("v1",)) as hub:
        assert download(hub, tmp_path).returncode == 0
        before, cache = len(hub.requests), tree_state(tmp_path)
        script = OFFLINE_ENGINE.format(model=MODEL)
        result = run(["-c", script], tmp_path, HF_HUB_OFFLINE="1", HF_ENDPOINT=DEAD_ENDPOINT)
        assert hub.requests[before:] == []
    assert result.returncode == 0, result.stderr
    assert tree_state(tmp_path) == cache  # the engine pods mount the claim read-only
    assert result.stdout.strip().splitlines()[-1] == "3"
