"""In-flight failover: a replica that hangs (SIGSTOP) or dies (kill -9) mid-stream costs no
stream. The router resumes each of its streams on the other replica as a continuation of the
tokens already relayed, in the same client stream: every stream completes with the tokens it
asked for, and greedy and seeded ones with exactly the text of an uninterrupted run."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from router.http.proxy import REPLICA_HEADER
from tests.router.live import (
    Process,
    metric_sum,
    replica_process,
    replica_view,
    router_process,
    running_fleet,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
MAX_TOKENS = 300
INTERNAL_KEY = "fleet-internal-key"
PROMPTS = ["Paged attention keeps", "Prefix caching reuses", "Continuous batching", "def add(a"]


@dataclass
class Fleet:
    router: Process
    replicas: dict[str, Process] = field(default_factory=dict)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    from tests.tiny_model import make_tiny_llama_dir

    model, logs = (
        make_tiny_llama_dir(tmp_path_factory.mktemp("tiny")),
        tmp_path_factory.mktemp("logs"),
    )
    replicas = [replica_process(model, logs, 256) for _ in range(2)]
    for r in replicas:  # continuations and KV events for the router only, as in a real fleet
        r.args += ["--internal-api-key", INTERNAL_KEY]
    # Round-robin: the streams of one burst spread over both replicas.
    # A health timeout that a loaded CI machine's replicas meet: only the frozen one misses it.
    router = router_process(
        model,
        logs,
        [r.url for r in replicas],
        "--policy",
        "round-robin",
        "--stall-eject-s",
        "1",
        "--health-timeout-s",
        "3",
        "--internal-api-key",
        INTERNAL_KEY,
    )
    with running_fleet([router], replicas):  # synced: the internal key works for KV events
        yield Fleet(router, {r.url: r for r in replicas})


def request_body(prompt: str, **extra: Any) -> dict[str, Any]:
    return {
        "prompt": prompt,
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "temperature": 0,
        **extra,
    }


@dataclass
class Stream:
    body: dict[str, Any]
    replica: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    done: bool = False

    @property
    def longest_gap_s(self) -> float:
        """The longest wait between two chunks: for a resumed stream, detection plus resumption."""
        return max(b - a for a, b in zip(self.arrivals, self.arrivals[1:], strict=False))

    @property
    def text(self) -> str:
        return "".join(c["text"] for e in self.events for c in e.get("choices", []))

    def read(self, url: str, started: threading.Event) -> None:
        with httpx.stream(
            "POST", url + "/v1/completions", json={**self.body, "stream": True}, timeout=120
        ) as response:
            self.replica = response.headers[REPLICA_HEADER]
            for line in response.iter_lines():
                if line == "data: [DONE]":
                    self.done = True
                elif line.startswith("data: "):
                    self.events.append(json.loads(line[6:]))
                    self.arrivals.append(time.monotonic())
                    if len(self.events) == 10:
                        started.set()


def run_streams(
    fleet: Fleet, bodies: list[dict[str, Any]], fault: Any
) -> tuple[list[Stream], float]:
    """Start one stream per body; once they all have a few chunks, `fault(replica)` on the first
    stream's replica; wait for every stream. Returns them and the seconds from the fault to the
    last stream's end."""
    streams = [Stream(b) for b in bodies]
    started = [threading.Event() for _ in streams]
    threads = [
        threading.Thread(target=s.read, args=(fleet.router.url, e))
        for s, e in zip(streams, started, strict=True)
    ]
    for t in threads:
        t.start()
    for e in started:
        assert e.wait(60), "a stream did not start"
    faulted_at = time.monotonic()
    fault(fleet.replicas[streams[0].replica])
    for t in threads:
        t.join(120)
    return streams, time.monotonic() - faulted_at


def check_every_stream_completed(streams: list[Stream], healthy: Process) -> None:
    for stream in streams:
        assert stream.done and all("error" not in e for e in stream.events), stream.events[-2:]
        assert stream.events[-1]["choices"][0]["finish_reason"] == "length"
        assert len({e["id"] for e in stream.events}) == 1  # one stream, as the client sees it
        assert stream.text == uninterrupted_from(healthy, stream.body)


def uninterrupted_from(replica: Process, body: dict[str, Any]) -> str:
    response = httpx.post(replica.url + "/v1/completions", json=body, timeout=120)
    return str(response.json()["choices"][0]["text"])


BODIES = [
    request_body(PROMPTS[0]),
    request_body(PROMPTS[1]),
    request_body(PROMPTS[2], temperature=0.8, seed=7),  # seeded: same draws after the cut
    request_body(PROMPTS[3], frequency_penalty=1.0),
]


def test_streams_of_a_replica_that_hangs_are_resumed_on_the_other(fleet: Fleet) -> None:
    frozen: list[Process] = []

    def freeze(replica: Process) -> None:
        assert replica.proc is not None
        replica.proc.send_signal(signal.SIGSTOP)
        frozen.append(replica)

    resumes_before = metric_sum(fleet.router.url, "pagedock_router_stream_resumes_total")
    streams, seconds = run_streams(fleet, BODIES, freeze)
    healthy = next(r for r in fleet.replicas.values() if r is not frozen[0])
    moved = sum(s.replica == frozen[0].url for s in streams)
    gap = max(s.longest_gap_s for s in streams if s.replica == frozen[0].url)
    print(
        f"SIGSTOP: {moved} of {len(streams)} streams resumed, longest pause {gap:.2f} s; "
        f"all done {seconds:.1f} s after the fault"
    )
    check_every_stream_completed(streams, healthy)
    resumed = metric_sum(fleet.router.url, "pagedock_router_stream_resumes_total") - resumes_before
    assert moved >= 1 and resumed == moved
    assert frozen[0].proc is not None
    frozen[0].proc.send_signal(signal.SIGCONT)  # back for the next test
    wait_until(lambda: httpx.get(frozen[0].url + "/health", timeout=2).status_code == 200, 30)


def test_streams_of_a_replica_killed_mid_stream_are_resumed_on_the_other(fleet: Fleet) -> None:
    killed: list[Process] = []

    def kill(replica: Process) -> None:
        replica.kill(signal.SIGKILL)
        killed.append(replica)

    wait_until(lambda: all(v["healthy"] for v in replica_view(fleet.router).values()), 30)
    resumes_before = metric_sum(fleet.router.url, "pagedock_router_stream_resumes_total")
    # Non-streamed requests under way meanwhile: read whole before the client gets anything, so
    # the one on the killed replica is simply retried from the start on the other.
    whole: list[httpx.Response] = []
    posts = [
        threading.Thread(
            target=lambda b=b: whole.append(
                httpx.post(fleet.router.url + "/v1/completions", json=b, timeout=120)
            )
        )
        for b in BODIES[:2]
    ]
    for post in posts:
        post.start()
    streams, seconds = run_streams(fleet, BODIES, kill)
    for post in posts:
        post.join(120)
    healthy = next(r for r in fleet.replicas.values() if r is not killed[0])
    assert sorted(r.json()["choices"][0]["text"] for r in whole) == sorted(
        uninterrupted_from(healthy, b) for b in BODIES[:2]
    )
    moved = sum(s.replica == killed[0].url for s in streams)
    gap = max(s.longest_gap_s for s in streams if s.replica == killed[0].url)
    print(
        f"kill -9: {moved} of {len(streams)} streams resumed, longest pause {gap:.2f} s; "
        f"all done {seconds:.1f} s after the fault"
    )
    check_every_stream_completed(streams, healthy)
    resumed = metric_sum(fleet.router.url, "pagedock_router_stream_resumes_total") - resumes_before
    assert moved >= 1 and resumed == moved
