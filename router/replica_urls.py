"""Replica URLs as the command line gives them (--replica, --vllm-replica): normalized, so one
replica has one name wherever it is compared (discovery, the KV index, the vLLM port map)."""

from __future__ import annotations

from pagedock.errors import ConfigError


def vllm_replica(entry: str) -> tuple[str, tuple[int, int] | None]:
    """`URL` or `URL@EVENTS_PORT:REPLAY_PORT` -> (normalized URL, ports or None)."""
    url, _, ports = entry.partition("@")
    if not ports:
        return normalize_url(url), None
    events, _, replay = ports.partition(":")
    if not (events.isdigit() and replay.isdigit()):
        raise ConfigError(
            f"--vllm-replica {entry!r}: write URL@EVENTS_PORT:REPLAY_PORT, "
            "e.g. http://10.0.0.5:8000@5557:5558"
        )
    return normalize_url(url), (int(events), int(replay))


def normalize_url(url: str) -> str:
    """http://host:port without a trailing slash; a bare host:port gets http://."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"a replica URL must be http(s), got {url!r}")
    return url
