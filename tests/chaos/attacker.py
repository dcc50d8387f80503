"""The chaos test's attacker, as a process of its own: `python -m tests.chaos.attacker URL`.

It runs beside the measured good clients but not inside their interpreter: serialising and sending
a 7 MB body holds the GIL for tens of milliseconds, and in the clients' process that time would be
counted as the fleet's latency (on a slow 2-core runner, a third of the good requests' p99).

It stands for clients on other machines, so it runs at a lower CPU priority (nice 10) and reuses
one HTTP client per thread: on a 2-core runner its own client work would otherwise take a core
from the fleet it attacks. What it makes the fleet do (parse, refuse, tokenize 7 MB) is not
discounted: the fleet's processes keep their priority.

It prints `ready` once every attack has made its first round trip, attacks until its stdin closes,
then prints one JSON object: the attacks' failures (a 5xx for a poison body) and how many times
each poison body was answered, and exits.
"""

from __future__ import annotations

import json
import os
import random
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

POISON = [
    {"prompt": "hi", "stop_token_ids": [10**6], "min_tokens": 2},
    {"prompt": "hi", "top_k": 2**63},
    {"prompt": "hi", "n": 2, "seed": 2**64 - 1},
    {"prompt": [2**31]},
    {"prompt": "hi", "logprobs": 1000},
    {"prompt": "hi", "stop": ["x"] * 100_000},
    {"prompt": "a" * 7_000_000, "max_tokens": 1},
    # Issue 34: a schema too large to compile, a client's continuation, a batch of 20,000
    # prompts, a million-id prompt of the wrong shape (3 MB), the costly regex.
    {
        "prompt": "hi",
        "structured_outputs": {"json": {"properties": {f"p{i}": {} for i in range(600)}}},
    },
    {"prompt": "hi", "continuation": {"token_ids": [1] * 8000}, "seed": 1},
    {"prompt": [[1]] * 20_000, "max_tokens": 1},
    {"prompt": [1] * 1_000_000 + ["x"]},
    {"prompt": "hi", "max_tokens": 8, "structured_outputs": {"regex": "(.|..|...){1,5000}"}},
]
IDLE_SOCKETS, SLOWLORIS_COPIES, POISON_COPIES = 200, 20, 2


class Attacks:
    """Threads that each repeat one attack until stopped; what the attacks saw."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.failures: list[str] = []
        self.answered: Counter[int] = Counter()
        """Responses per poison body (its index in POISON)."""
        self.started: list[threading.Event] = []

    def run(self, step: Callable[[], None], copies: int = 1) -> None:
        for _ in range(copies):
            started = threading.Event()
            self.started.append(started)
            self.threads.append(threading.Thread(target=self._loop, args=(step, started)))
            self.threads[-1].start()

    def _loop(self, step: Callable[[], None], started: threading.Event) -> None:
        while not self.stop.is_set():
            try:
                step()
            except AssertionError as e:
                self.failures.append(str(e))
            except Exception:  # an attacker's own error (reset, timeout) is expected
                pass
            started.set()

    def wait_started(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        return all(e.wait(max(0.0, deadline - time.monotonic())) for e in self.started)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)


def poison(url: str, rng: random.Random, attacks: Attacks) -> Callable[[], None]:
    bodies = [json.dumps(body).encode() for body in POISON]  # serialised once, not per request
    client = httpx.Client(timeout=30, headers={"Content-Type": "application/json"})

    def step() -> None:
        index = rng.randrange(len(bodies))
        response = client.post(url + "/v1/completions", content=bodies[index])
        attacks.answered[index] += 1
        # Refused (4xx) or served (a wrapped seed is legal): never a server error.
        assert response.status_code < 500, f"{bodies[index][:80]!r} -> {response.status_code}"

    return step


def hold_idle_sockets(host: str, port: int, stop: threading.Event) -> Callable[[], None]:
    def step() -> None:
        sockets = [socket.create_connection((host, port)) for _ in range(IDLE_SOCKETS)]
        stop.wait(4)  # past the read deadline: the router closes them; open them again
        for s in sockets:
            s.close()

    return step


def slowloris(host: str, port: int, stop: threading.Event) -> Callable[[], None]:
    def step() -> None:
        with socket.create_connection((host, port), timeout=10) as s:
            for byte in b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n":
                s.sendall(bytes([byte]))
                if stop.wait(0.5):
                    return

    return step


def main(url: str) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    os.nice(10)
    attacks = Attacks()
    for copy in range(POISON_COPIES):
        attacks.run(poison(url, random.Random(copy), attacks))
    attacks.run(hold_idle_sockets(host, port, attacks.stop))
    attacks.run(slowloris(host, port, attacks.stop), copies=SLOWLORIS_COPIES)
    if not attacks.wait_started(timeout_s=60):
        attacks.failures.append("an attack made no round trip in 60 s")
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    attacks.close()
    answered = [attacks.answered[i] for i in range(len(POISON))]
    print(json.dumps({"failures": attacks.failures, "answered": answered}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
