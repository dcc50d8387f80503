"""A replica that drains (SIGTERM) with streams that outlive its deadline hands them off; the
router resumes each on a replica serving the same weights, in the same client stream, and never on
other weights: there the stream ends with a clear error event (`replica_draining`) instead."""

from __future__ import annotations

import json
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.http.proxy import REPLICA_HEADER
from tests.router.live import Process, replica_process, router_process, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
MAX_TOKENS = 1500
PROMPTS = ["Paged attention keeps", "Prefix caching reuses", "Continuous batching"]


@dataclass
class Stream:
    body: dict[str, Any]
    replica: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False

    @property
    def text(self) -> str:
        return "".join(c["text"] for e in self.events for c in e.get("choices", []))

    def read(self, url: str, started: threading.Event) -> None:
        with httpx.stream("POST", url + "/v1/completions", json=self.body, timeout=120) as r:
            self.replica = r.headers[REPLICA_HEADER]
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    self.done = True
                elif line.startswith("data: "):
                    self.events.append(json.loads(line[6:]))
                    if len(self.events) == 5:
                        started.set()


def body(prompt: str) -> dict[str, Any]:
    return {
        "prompt": prompt,
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }


@contextmanager
def fleet(models: list[Path], logs: Path) -> Iterator[tuple[Process, list[Process]]]:
    """A round-robin router over one replica per model dir, each draining for 0.5 s at most."""
    replicas = []
    for model in models:
        replica = replica_process(model, logs, 512)
        replica.args[replica.args.index("--max-model-len") + 1] = "4096"
        replica.args += ["--drain-timeout", "0.5"]
        replicas.append(replica)
    urls = [r.url for r in replicas]
    router = router_process(models[0], logs, urls, "--policy", "round-robin")
    try:
        for p in replicas:
            p.start()
        for p in replicas:
            p.wait_ready()
        router.start().wait_ready(timeout_s=30)
        # Every replica healthy with its weights' identity known.
        wait_until(lambda: all(v["healthy"] and v["root_hash"] for v in view(router)), 30)
        yield router, replicas
    finally:
        for p in [router, *replicas]:
            p.kill()


def resumed(router: Process) -> float:
    """Streams this router resumed on another replica (not the attempts that found none)."""
    name = 'pagedock_router_stream_resumes_total{outcome="resumed"}'
    lines = httpx.get(router.url + "/metrics", timeout=5).text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name))


def view(router: Process) -> list[dict[str, Any]]:
    return list(httpx.get(router.url + "/router/replicas", timeout=5).json()["replicas"])


def drain_one_under_streams(router: Process, replicas: list[Process]) -> tuple[list[Stream], str]:
    """Streams through the router; once each is under way, SIGTERM the first one's replica."""
    streams = [Stream(body(p)) for p in PROMPTS]
    started = [threading.Event() for _ in streams]
    threads = [
        threading.Thread(target=s.read, args=(router.url, e))
        for s, e in zip(streams, started, strict=True)
    ]
    for t in threads:
        t.start()
    for e in started:
        assert e.wait(60), "a stream did not start"
    drained = next(r for r in replicas if r.url == streams[0].replica)
    drained.kill(signal.SIGTERM)
    for t in threads:
        t.join(120)
    return streams, drained.url


def test_streams_outliving_the_drain_deadline_go_on_where_the_weights_are_the_same(
    tmp_path: Path,
) -> None:
    from tests.tiny_model import make_tiny_llama_dir

    model = make_tiny_llama_dir(tmp_path / "model", max_position_embeddings=4096)
    copy = shutil.copytree(model, tmp_path / "copy")  # the same weights, elsewhere
    with fleet([model, copy], tmp_path) as (router, replicas):
        streams, drained = drain_one_under_streams(router, replicas)
        other = next(r for r in replicas if r.url != drained)
        moved = [s for s in streams if s.replica == drained]
        print(f"drained with {len(moved)} of {len(streams)} streams: {resumed(router):.0f} resumed")
        assert moved and resumed(router) == len(moved)
        for stream in streams:
            assert stream.done and all("error" not in e for e in stream.events), stream.events[-1]
            assert stream.events[-1]["choices"][0]["finish_reason"] == "length"
            assert len({e["id"] for e in stream.events}) == 1
        whole = {**moved[0].body, "stream": False}
        answer = httpx.post(other.url + "/v1/completions", json=whole, timeout=120).json()
        assert moved[0].text == answer["choices"][0]["text"]  # greedy: as if never cut


def test_a_stream_is_never_resumed_on_other_weights(tmp_path: Path) -> None:
    from tests.tiny_model import make_tiny_llama_dir

    model = make_tiny_llama_dir(tmp_path / "model", max_position_embeddings=4096)
    other_revision = make_tiny_llama_dir(
        tmp_path / "revision-2", max_position_embeddings=4096, initializer_range=0.21
    )
    with fleet([model, other_revision], tmp_path) as (router, replicas):
        roots = {v["root_hash"] for v in view(router)}
        assert len(roots) == 2
        streams, drained = drain_one_under_streams(router, replicas)
        for stream in streams:
            assert stream.done
            if stream.replica == drained:  # cut at the deadline: a clear error, no other text
                error = stream.events[-1]["error"]
                assert error["code"] == "replica_draining", error
                assert "same model weights" in error["message"]
            else:
                assert stream.events[-1]["choices"][0]["finish_reason"] == "length"
        assert resumed(router) == 0
