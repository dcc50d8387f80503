"""Replaying what benchmark clients (GuideLLM, `vllm bench serve`) sent, and reading the answers
the way they read them.

The requests are captured shapes (tests/server/data/*_requests.json: method, path, headers and
body as each tool sent them to a pagedock server behind a logging proxy); the readers below
take only the fields those tools' parsers take, so a field pagedock stops sending, or a chunk that
would throw off their counts, fails here without the tools installed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

DATA_DIR = Path(__file__).parent / "data"
# Sent by the client library, or recomputed for the replayed body.
_DROPPED_HEADERS = {"host", "content-length"}


def captured(tool: str) -> dict[str, Any]:
    """tests/server/data/<tool>_requests.json."""
    return dict(json.loads((DATA_DIR / f"{tool}_requests.json").read_text()))


@dataclass
class Answer:
    """One replayed request's answer as a benchmark client reads it."""

    status: int
    content_type: str
    chunks: list[dict[str, Any]] = field(default_factory=list)
    """A stream's `data:` events, parsed, without the final `[DONE]`."""
    done: bool = False
    body: dict[str, Any] | None = None
    """A non-streamed answer's JSON."""

    @property
    def usage(self) -> dict[str, Any]:
        """The usage a client keeps: the answer's, or a stream's last one."""
        if self.body is not None:
            return dict(self.body["usage"])
        usages = [c["usage"] for c in self.chunks if c.get("usage")]
        assert usages, f"no chunk carried usage: {self.chunks}"
        return dict(usages[-1])

    @property
    def token_chunks(self) -> list[dict[str, Any]]:
        """The chunks with choices: each one is a token arrival to `vllm bench serve`."""
        return [c for c in self.chunks if c.get("choices")]


def replay(http: httpx.Client, request: dict[str, Any], model: str) -> Answer:
    """Send one captured request (its body's `model` replaced by the served one)."""
    headers = {k: v for k, v in request["headers"].items() if k not in _DROPPED_HEADERS}
    body = request.get("body")
    if body is not None and "model" in body:
        body = {**body, "model": model}
    with http.stream(
        request["method"], request["path"], headers=headers, json=body, timeout=60
    ) as response:
        content_type = response.headers.get("content-type", "")
        if "text/event-stream" not in content_type:
            response.read()
            parsed = response.json() if "json" in content_type else None
            return Answer(response.status_code, content_type, body=parsed)
        answer = Answer(response.status_code, content_type)
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                answer.done = True
            else:
                answer.chunks.append(json.loads(data))
        return answer


def prompt_ids(http: httpx.Client, body: dict[str, Any], model: str) -> list[int]:
    """The prompt's token ids as the server renders and tokenizes it (chat template included)."""
    key = "messages" if "messages" in body else "prompt"
    response = http.post("/tokenize", json={"model": model, key: body[key]})
    assert response.status_code == 200, response.text
    return list(response.json()["tokens"])


@dataclass
class PrefixCacheModel:
    """What a server's prefix cache holds after the prompts it has been sent (none evicted),
    and so how many tokens of the next prompt it reports as cached: the longest prefix shared
    with an earlier prompt, in whole blocks, at most all but the prompt's last token (which is
    always computed, to sample from)."""

    block_size: int
    seen: list[list[int]] = field(default_factory=list)

    def expected_cached(self, ids: list[int]) -> int:
        shared = max((_common_prefix(ids, s) for s in self.seen), default=0)
        shared = min(shared, len(ids) - 1)
        return shared // self.block_size * self.block_size

    def add(self, ids: list[int]) -> None:
        self.seen.append(ids)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
