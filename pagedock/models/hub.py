"""`hf://org/name[@revision]` sources: fetch from the Hugging Face Hub what the engine reads, for a
model or for a LoRA adapter.

Only the files pagedock loads are downloaded (config, safetensors weights and their index,
tokenizer.json and the files beside it that carry special tokens and the chat template), into the
hub's own cache layout, so a restart or a second engine on the same cache volume downloads nothing.

A model's revision comes from the URI (`hf://org/name@v1.0`), else from `$HF_REVISION` (the operator
sets it from `spec.model.revision`), else the repo's default branch; an adapter's from its URI, else
the default branch ($HF_REVISION is the base model's). An adapter is PEFT's two files,
adapter_config.json and adapter_model.safetensors. The token is huggingface_hub's own:
`$HF_TOKEN`, or a `huggingface-cli login`. Torch-free; huggingface_hub is imported only when used.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from pagedock.errors import ModelLoadError

HF_SCHEME = "hf://"
TOKENIZER_PATTERNS = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.*",
)
SAFETENSORS_INDEX = "model.safetensors.index.json"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass(frozen=True)
class HfSource:
    """A model repo on the Hugging Face Hub, at a revision (None: the repo's default branch)."""

    repo_id: str
    revision: str | None = None

    @property
    def name(self) -> str:
        """The served model name: the repo's name without its organisation."""
        return self.repo_id.rsplit("/", 1)[-1]

    def __str__(self) -> str:
        at_revision = f"@{self.revision}" if self.revision else ""
        return f"{HF_SCHEME}{self.repo_id}{at_revision}"


def parse_hf_uri(uri: str, *, revision_from_env: bool = True) -> HfSource:
    """`hf://org/name[@revision]`; without `@revision`, `$HF_REVISION` when it is set (and
    `revision_from_env`)."""
    repo_id, at, revision = uri.removeprefix(HF_SCHEME).partition("@")
    parts = repo_id.split("/")
    if not uri.startswith(HF_SCHEME) or len(parts) > 2 or not all(parts) or (at and not revision):
        raise ModelLoadError(
            f"{uri}: not a Hugging Face model URI; expected hf://org/name or hf://org/name@revision"
        )
    env_revision = os.environ.get("HF_REVISION") if revision_from_env else None
    return HfSource(repo_id, revision or env_revision or None)


def hf_cache_dir() -> Path:
    """Where hub downloads live: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else pagedock's cache.

    NOTE: the operator points HF_HOME into the pod's cache volume (`/cache/huggingface`), so the
    downloads land on that volume (a PVC when `model.cacheVolumeClaim` is set) and survive restarts.
    """
    if hub_cache := os.environ.get("HF_HUB_CACHE"):
        return Path(hub_cache).expanduser()
    if hf_home := os.environ.get("HF_HOME"):
        return Path(hf_home).expanduser() / "hub"
    from pagedock.models.registry import cache_dir  # here: model_registry imports this module

    return cache_dir() / "huggingface" / "hub"


def fetch_hf_model(source: HfSource, *, weights: bool = True) -> Path:
    """Download the files pagedock reads (only config and tokenizer files when not `weights`).

    Returns the snapshot directory. Raises ModelLoadError naming the repo and the cause.
    """
    what = "model" if weights else "tokenizer of"
    print(
        f"pagedock: fetching {what} {source} from the Hugging Face Hub into {hf_cache_dir()} "
        "(files already there are reused)",
        file=sys.stderr,
        flush=True,
    )
    path = Path(_snapshot_download(source, [*TOKENIZER_PATTERNS, SAFETENSORS_INDEX]))
    if not weights:
        return path
    # NOTE: the second call names the commit the first one resolved (the snapshot folder's name),
    # so a push to the branch in between cannot mix two revisions in one directory.
    pinned = HfSource(source.repo_id, path.name)
    path = Path(_snapshot_download(pinned, _weight_patterns(path), shown_as=source))
    if not any(path.glob("*.safetensors")):
        raise ModelLoadError(
            f"{source}: the repo has no *.safetensors weights; pagedock loads safetensors only, "
            "not PyTorch .bin checkpoints. Pick a revision that has safetensors (the Hub's "
            "conversion bot often offers one as refs/pr/N) or convert the weights and serve them "
            "from a pvc:// or local directory"
        )
    print(f"pagedock: {source} is in {path}", file=sys.stderr, flush=True)
    return path


def fetch_hf_adapter(name: str, uri: str) -> Path:
    """The snapshot directory of the LoRA adapter `name` at `uri` (hf://org/name[@revision]),
    its PEFT files downloaded into the hub's cache (or found there: offline, nothing is fetched).
    ModelLoadError names the adapter, the source and the cause."""
    adapter = f"LoRA adapter {name!r}"
    try:
        source = parse_hf_uri(uri, revision_from_env=False)
        print(
            f"pagedock: fetching {adapter} from {source} into {hf_cache_dir()} "
            "(files already there are reused)",
            file=sys.stderr,
            flush=True,
        )
        path = Path(_snapshot_download(source, list(ADAPTER_FILES)))
    except ModelLoadError as e:
        raise ModelLoadError(f"{adapter}: {e}") from e
    missing = [file for file in ADAPTER_FILES if not (path / file).is_file()]
    if missing:
        raise ModelLoadError(
            f"{adapter}: {source} has no {' and no '.join(missing)}; a PEFT LoRA adapter's repo "
            f"holds {' and '.join(ADAPTER_FILES)} (safetensors only: adapter_model.bin is not read)"
        )
    return path


def _weight_patterns(path: Path) -> list[str]:
    """The shards the index names (a repo may hold other formats' safetensors too), else all."""
    index = path / SAFETENSORS_INDEX
    if not index.is_file():
        return ["*.safetensors"]
    try:
        weight_map = json.loads(index.read_text()).get("weight_map", {})
    except (OSError, ValueError, AttributeError) as e:
        raise ModelLoadError(f"{index}: not a readable safetensors index ({e})") from e
    return [SAFETENSORS_INDEX, *sorted(set(weight_map.values()))]


def _snapshot_download(
    source: HfSource, patterns: list[str], shown_as: HfSource | None = None
) -> str:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:
        raise ModelLoadError(
            f"{shown_as or source}: hf:// sources need huggingface_hub "
            "(pip install 'pagedock[engine]')"
        ) from e
    try:
        # Progress bars go to stderr (huggingface_hub's tqdm default). The token is None: the hub
        # client reads $HF_TOKEN or the stored login itself.
        return snapshot_download(
            source.repo_id,
            revision=source.revision,
            cache_dir=hf_cache_dir(),
            allow_patterns=patterns,
        )
    except Exception as e:  # the hub client raises many types (HTTP, offline, validation, OS)
        raise ModelLoadError(
            f"{shown_as or source}: cannot download from the Hugging Face Hub: {_cause(e)}"
        ) from e


def _cause(error: Exception) -> str:
    """The error as a person can act on it, with a hint for the common causes."""
    kind = type(error).__name__
    hints = {
        "RepositoryNotFoundError": "no such repo, or it is private and no token was given "
        "(set HF_TOKEN)",
        "GatedRepoError": "the repo is gated: accept its terms on the Hub and set HF_TOKEN",
        "RevisionNotFoundError": "no such revision (branch, tag or commit) in the repo",
        "LocalEntryNotFoundError": "the Hub is unreachable (or HF_HUB_OFFLINE is set) and the "
        "files are not in the cache yet",
    }
    first_line = (str(error).strip().splitlines() or [""])[0]
    hint = hints.get(kind)
    return f"{hint} ({kind}: {first_line})" if hint else f"{kind}: {first_line}"
