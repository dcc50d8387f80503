"""hf://org/name[@revision] sources: fetched with huggingface_hub into the cache, then an HF dir.

No hub is reachable here: `snapshot_download` is replaced by a fake that copies a tiny model repo,
honouring `allow_patterns` as the real one does, into the hub's cache layout.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import huggingface_hub
import pytest
from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

from pagedock.errors import ModelLoadError
from pagedock.models.hub import HfSource, parse_hf_uri
from pagedock.models.registry import resolve_model

REPO_URI = "hf://acme/tiny-llama"


@pytest.fixture(scope="module")
def bin_only_repo(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("hub") / "bin-only"
    shutil.copytree(tiny_repo, repo)
    for weights in repo.glob("*.safetensors*"):
        weights.unlink()
    return repo


@pytest.fixture(autouse=True)
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HOME", "HF_HUB_CACHE", "HF_REVISION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAGEDOCK_CACHE_DIR", str(tmp_path / "pagedock"))


def commit_of(revision: str | None) -> str:
    """The fake hub's commit hash of a revision (a commit hash names itself)."""
    revision = revision or "main"
    if re.fullmatch(r"[0-9a-f]{40}", revision):
        return revision
    return hashlib.sha1(revision.encode()).hexdigest()


def fake_hub(
    monkeypatch: pytest.MonkeyPatch, repo: Path, error: Exception | None = None
) -> list[dict[str, Any]]:
    """Replace snapshot_download with a copy of `repo`; returns the calls it received."""
    calls: list[dict[str, Any]] = []

    def snapshot_download(repo_id: str, **kwargs: Any) -> str:
        calls.append({"repo_id": repo_id, **kwargs})
        if error is not None:
            raise error
        folder = "models--" + repo_id.replace("/", "--")
        snapshot = Path(kwargs["cache_dir"]) / folder / "snapshots" / commit_of(kwargs["revision"])
        snapshot.mkdir(parents=True, exist_ok=True)
        for file in repo.iterdir():
            if any(fnmatch.fnmatch(file.name, p) for p in kwargs["allow_patterns"]):
                shutil.copy(file, snapshot / file.name)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return calls


def test_hf_source_downloads_into_the_cache_and_resolves_to_an_hf_dir(
    tiny_repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls = fake_hub(monkeypatch, tiny_repo)
    resolved = resolve_model(REPO_URI)
    assert resolved.kind == "hf_dir"
    assert resolved.path.is_relative_to(tmp_path / "pagedock" / "huggingface" / "hub")
    files = {p.name for p in resolved.path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    assert not files & {"README.md", "pytorch_model.bin"}
    assert calls[0]["repo_id"] == "acme/tiny-llama" and calls[0]["revision"] is None
    assert "fetching model hf://acme/tiny-llama" in capsys.readouterr().err


def test_served_name_is_the_repo_name(tiny_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_hub(monkeypatch, tiny_repo)
    assert resolve_model(f"{REPO_URI}@v1.0").name == "tiny-llama"
    assert resolve_model("hf://tiny-llama").name == "tiny-llama"


def test_hf_home_is_the_download_cache(
    tiny_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "volume" / "huggingface"))
    fake_hub(monkeypatch, tiny_repo)
    path = resolve_model(REPO_URI).path
    assert path.is_relative_to(tmp_path / "volume" / "huggingface" / "hub")


@pytest.mark.parametrize(
    ("uri", "env_revision", "expected"),
    [
        ("hf://acme/tiny-llama", None, HfSource("acme/tiny-llama")),
        ("hf://acme/tiny-llama@v1.0", None, HfSource("acme/tiny-llama", "v1.0")),
        ("hf://acme/tiny-llama@refs/pr/3", None, HfSource("acme/tiny-llama", "refs/pr/3")),
        ("hf://acme/tiny-llama", "abc123", HfSource("acme/tiny-llama", "abc123")),
        ("hf://acme/tiny-llama@v1.0", "abc123", HfSource("acme/tiny-llama", "v1.0")),
        ("hf://gpt2", None, HfSource("gpt2")),
    ],
)
def test_revision_comes_from_the_uri_else_hf_revision(
    uri: str, env_revision: str | None, expected: HfSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env_revision:
        monkeypatch.setenv("HF_REVISION", env_revision)
    assert parse_hf_uri(uri) == expected


def test_revision_is_passed_to_the_hub_then_pinned_to_its_commit(
    tiny_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_hub(monkeypatch, tiny_repo)
    monkeypatch.setenv("HF_REVISION", "v1.0")
    path = resolve_model(REPO_URI).path
    assert [call["revision"] for call in calls] == ["v1.0", commit_of("v1.0")]
    assert path.name == commit_of("v1.0")


def test_only_the_shards_the_index_names_are_downloaded(
    tiny_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = shutil.copytree(tiny_repo, tmp_path / "sharded")
    shard = "model-00001-of-00001.safetensors"
    (repo / "model.safetensors").rename(repo / shard)
    index = {"metadata": {}, "weight_map": {"lm_head.weight": shard, "model.norm.weight": shard}}
    (repo / "model.safetensors.index.json").write_text(json.dumps(index))
    (repo / "consolidated.safetensors").write_bytes(b"another format's checkpoint")
    fake_hub(monkeypatch, repo)
    files = {p.name for p in resolve_model(REPO_URI).path.iterdir()}
    assert {shard, "model.safetensors.index.json"} <= files
    assert "consolidated.safetensors" not in files


@pytest.mark.parametrize("uri", ["hf://", "hf://acme/", "hf://a/b/c", "hf://acme/tiny-llama@"])
def test_malformed_hf_uri_is_rejected(uri: str) -> None:
    with pytest.raises(ModelLoadError, match="expected hf://org/name or hf://org/name@revision"):
        resolve_model(uri)


def test_repo_with_only_bin_weights_is_rejected(
    bin_only_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_hub(monkeypatch, bin_only_repo)
    with pytest.raises(ModelLoadError, match=r"hf://acme/tiny-llama: .*no \*\.safetensors.*\.bin"):
        resolve_model(REPO_URI)
    assert not any(fnmatch.fnmatch("pytorch_model.bin", p) for p in calls[0]["allow_patterns"])


def _repo_not_found() -> Exception:
    url = "https://huggingface.co/api/models/acme/tiny-llama/revision/main"
    response = httpx.Response(404, request=httpx.Request("GET", url))
    return RepositoryNotFoundError(
        f"404 Client Error. Repository Not Found for url: {url}", response=response
    )


@pytest.mark.parametrize(
    ("make_error", "cause"),
    [
        (_repo_not_found, "no such repo, or it is private"),
        (lambda: LocalEntryNotFoundError("connection refused"), "the Hub is unreachable"),
        (lambda: ConnectionError("Name or service not known"), "ConnectionError: Name or service"),
    ],
)
def test_hub_error_is_a_model_load_error_naming_repo_and_cause(
    make_error: Callable[[], Exception],
    cause: str,
    tiny_repo: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_hub(monkeypatch, tiny_repo, error=make_error())
    with pytest.raises(ModelLoadError, match="hf://acme/tiny-llama@v2: cannot download") as info:
        resolve_model(f"{REPO_URI}@v2")
    assert cause in str(info.value)


def test_router_fetches_the_tokenizer_files_only(
    tiny_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_hub(monkeypatch, tiny_repo)
    resolved = resolve_model(REPO_URI, weights=False)
    files = {p.name for p in resolved.path.iterdir()}
    assert "tokenizer.json" in files and "config.json" in files
    assert not any(name.endswith(".safetensors") for name in files)


@pytest.mark.parametrize("uri", ["s3://bucket/model", "gs://bucket/model", "https://x/m.gguf"])
def test_object_stores_and_urls_are_rejected(uri: str) -> None:
    with pytest.raises(ModelLoadError, match=r"model sources are not supported; pass hf://"):
        resolve_model(uri)


@pytest.mark.parametrize("uri", ["pvc://models/llama", "file:///models/llama"])
def test_operator_sources_are_rejected_with_the_path_hint(uri: str) -> None:
    with pytest.raises(ModelLoadError, match="the operator turns into a path"):
        resolve_model(uri)
