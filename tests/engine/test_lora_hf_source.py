"""LoRA adapters from the Hugging Face Hub (`hf://org/name[@revision]`), through the loopback
stand-in for the Hub: fetched into the hub's cache once, then read as a local directory; offline
from that cache; and refused with the adapter's name and the cause when the repo, its files or
the cache are missing.

Each step runs as a process of its own: huggingface_hub reads HF_ENDPOINT and HF_HUB_OFFLINE once,
when it is imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.lora_factories import write_adapter
from tests.hub_stand_in import HubStandIn

ROOT = Path(__file__).resolve().parents[2]
REPO_ID = "acme/sql-lora"
DEAD_ENDPOINT = "http://127.0.0.1:9"  # the discard port: nothing answers there
# The engine's own loader (torch): the adapter's directory and what it targets.
LOAD = """
import sys, torch
from engine.lora.adapter import load_adapter
from tests.engine.lora_factories import TINY_CONFIG, tiny_shapes
adapter = load_adapter("sql", sys.argv[1], max_rank=64, shapes=tiny_shapes(),
                       num_layers=TINY_CONFIG.num_hidden_layers, dtype=torch.float32)
print(adapter.path)
print(",".join(adapter.target_modules))
"""
# The torch-free resolver alone (what the loader calls for an hf:// source).
RESOLVE = """
import sys
from pagedock.models.hub import fetch_hf_adapter
print(fetch_hf_adapter("sql", sys.argv[1]))
"""


@pytest.fixture(scope="module")
def adapter_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An adapter repo as the Hub holds one, with a file pagedock must not download."""
    repo = write_adapter(tmp_path_factory.mktemp("hub") / "sql-lora", targets=("q_proj", "o_proj"))
    (repo / "README.md").write_text("# sql adapter\n")
    return repo


def run(script: str, uri: str, hf_home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PAGEDOCK_"))},
        "HF_HOME": str(hf_home),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", script, uri],
        env=environ,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def snapshot(hf_home: Path, hub: HubStandIn) -> Path:
    return hf_home / "hub" / ("models--" + REPO_ID.replace("/", "--")) / "snapshots" / hub.commit


def test_an_hf_adapter_is_fetched_once_then_loads_offline_from_the_cache(
    adapter_repo: Path, tmp_path: Path
) -> None:
    uri = f"hf://{REPO_ID}@v1"
    with HubStandIn(REPO_ID, adapter_repo, revisions=("v1",)) as hub:
        first = run(LOAD, uri, tmp_path, HF_ENDPOINT=hub.endpoint)
        assert first.returncode == 0, first.stderr
        directory, targets = first.stdout.strip().splitlines()[-2:]
        assert Path(directory) == snapshot(tmp_path, hub)
        assert targets == "o_proj,q_proj"
        assert sorted(p.name for p in Path(directory).iterdir()) == [
            "adapter_config.json",
            "adapter_model.safetensors",
        ]
        weights = Path(directory) / "adapter_model.safetensors"
        assert weights.read_bytes() == (adapter_repo / "adapter_model.safetensors").read_bytes()
        before = len(hub.requests)
        offline = run(RESOLVE, uri, tmp_path, HF_HUB_OFFLINE="1", HF_ENDPOINT=DEAD_ENDPOINT)
        assert hub.requests[before:] == []
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout.strip().splitlines()[-1] == directory


def test_an_adapter_takes_its_revision_from_its_uri_not_hf_revision(
    adapter_repo: Path, tmp_path: Path
) -> None:
    # $HF_REVISION is the base model's revision (the operator sets it): an adapter never uses it.
    with HubStandIn(REPO_ID, adapter_repo) as hub:
        result = run(
            RESOLVE, f"hf://{REPO_ID}", tmp_path, HF_ENDPOINT=hub.endpoint, HF_REVISION="v9"
        )
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip().splitlines()[-1]) == snapshot(tmp_path, hub)


def test_an_unknown_adapter_repo_is_refused_naming_the_adapter_and_the_cause(
    adapter_repo: Path, tmp_path: Path
) -> None:
    with HubStandIn(REPO_ID, adapter_repo) as hub:
        result = run(LOAD, "hf://acme/no-such-lora", tmp_path, HF_ENDPOINT=hub.endpoint)
    assert result.returncode != 0
    assert "ModelLoadError: LoRA adapter 'sql': hf://acme/no-such-lora" in result.stderr
    assert "no such repo" in result.stderr


def test_a_repo_without_safetensors_weights_is_refused_naming_the_missing_file(
    tmp_path: Path,
) -> None:
    repo = write_adapter(tmp_path / "repo")
    (repo / "adapter_model.safetensors").rename(repo / "adapter_model.bin")
    with HubStandIn(REPO_ID, repo) as hub:
        result = run(RESOLVE, f"hf://{REPO_ID}", tmp_path / "home", HF_ENDPOINT=hub.endpoint)
    assert result.returncode != 0
    assert f"LoRA adapter 'sql': hf://{REPO_ID} has no adapter_model.safetensors" in result.stderr
    assert "adapter_model.bin is not read" in result.stderr


def test_a_repo_that_is_no_adapter_is_refused_naming_both_files(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.json").write_text("{}")  # a model's repo, not an adapter's
    with HubStandIn(REPO_ID, repo) as hub:
        result = run(RESOLVE, f"hf://{REPO_ID}", tmp_path / "home", HF_ENDPOINT=hub.endpoint)
    assert result.returncode != 0
    assert "has no adapter_config.json and no adapter_model.safetensors" in result.stderr


def test_offline_without_the_adapter_in_the_cache_is_refused(tmp_path: Path) -> None:
    result = run(
        RESOLVE, f"hf://{REPO_ID}@v1", tmp_path, HF_HUB_OFFLINE="1", HF_ENDPOINT=DEAD_ENDPOINT
    )
    assert result.returncode != 0
    assert f"LoRA adapter 'sql': hf://{REPO_ID}@v1: cannot download" in result.stderr
    assert "not in the cache yet" in result.stderr


def test_a_malformed_hf_uri_is_refused_naming_the_adapter(tmp_path: Path) -> None:
    result = run(RESOLVE, "hf://acme/sql-lora/extra", tmp_path, HF_ENDPOINT=DEAD_ENDPOINT)
    assert result.returncode != 0
    assert "LoRA adapter 'sql': hf://acme/sql-lora/extra: not a Hugging Face" in result.stderr
