"""Steady streaming load for the rollout scenarios: clients that stream completions through the
routers one after another, each answer recorded with its start, time to first token, text and
how it ended; the figures the scenarios print (TTFT percentiles by phase, answers by revision)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

ROUTER_PORT = 8080
PROMPTS = [f"Request {i}: the paged cache keeps block {i * 7} of tenant {i % 3}" for i in range(8)]


@dataclass
class Answer:
    prompt: str
    router: str
    started: float
    ttft_s: float | None = None
    text: str = ""
    done: bool = False
    status: int = 0
    error: str | None = None
    ids: set[str] = field(default_factory=set)
    seconds: float = 0.0
    """From the request to the stream's end (or its error)."""
    replica: str = ""
    """The engine replica the router sent it to first (its x-pagedock-replica header)."""

    @property
    def failed(self) -> bool:
        return self.status != 200 or not self.done or self.error is not None


def body(prompt: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    return {
        "model": "tiny",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": stream,
    }


async def stream_once(http: aiohttp.ClientSession, answer: Answer, max_tokens: int) -> None:
    """Stream `answer`'s prompt through its router into it (an error raised is the caller's)."""
    url = f"http://{answer.router}:{ROUTER_PORT}/v1/completions"
    timeout = aiohttp.ClientTimeout(total=600)
    payload = body(answer.prompt, max_tokens, True)
    async with http.post(url, json=payload, timeout=timeout) as response:
        answer.status = response.status
        answer.replica = response.headers.get("x-pagedock-replica", "")
        async for raw in response.content:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                answer.done = True
            elif line.startswith("data: "):
                _take(answer, json.loads(line[6:]))
    answer.seconds = time.monotonic() - answer.started


def _take(answer: Answer, chunk: dict[str, Any]) -> None:
    if "error" in chunk:
        answer.error = f"{chunk['error'].get('code')}: {chunk['error'].get('message')}"
        return
    answer.ids.add(chunk["id"])
    for choice in chunk["choices"]:
        if choice.get("text") and answer.ttft_s is None:
            answer.ttft_s = time.monotonic() - answer.started
        answer.text += choice.get("text") or ""


async def reference(router: str, max_tokens: int) -> dict[str, str]:
    """Each prompt's whole answer (not streamed) from the fleet as it is now."""
    url = f"http://{router}:{ROUTER_PORT}/v1/completions"

    async def answer(http: aiohttp.ClientSession, prompt: str) -> str:
        payload = body(prompt, max_tokens, False)
        async with http.post(url, json=payload, timeout=aiohttp.ClientTimeout(total=600)) as r:
            assert r.status == 200, await r.text()
            return str((await r.json())["choices"][0]["text"])

    async with aiohttp.ClientSession() as http:
        texts = await asyncio.gather(*(answer(http, p) for p in PROMPTS))
    return dict(zip(PROMPTS, texts, strict=True))


class Load:
    """`num_clients` clients, spread over the routers, each streaming one answer after another
    until stopped. `routers()` names the router pods ready now: each request goes to one of them,
    as the router Service would send it (the e2e has no ClusterIPs), so a router rollout moves the
    new requests while the old router finishes its streams.

    NOTE: the clients run on an event loop of their own, in a thread. The test's loop also runs
    the emulated cluster (API server with admission, kubelet, probes), and when it ran late (up
    to 1.6 s in CI's run of fe6c5dd) every answer it timed read that lateness as time to first
    token. `routers()` is still asked on the test's loop, which owns the cluster's state, before
    the request's clock starts."""

    def __init__(
        self, routers: Callable[[], list[str]], num_clients: int, max_tokens: int, counted: str
    ) -> None:
        self.routers = routers
        self.num_clients = num_clients
        self.max_tokens = max_tokens
        self.answers: list[Answer] = []
        self.counter = RouterCounter(routers, counted)
        """The routers' `counted` sample, watched while the clients run."""
        self.lag = LoopLag()
        """How late the test's event loop (the emulated cluster's) ran while the clients did."""
        self.clients_lag = LoopLag()
        """How late the clients' own event loop ran: what their timings may be off by."""
        self._stop = asyncio.Event()
        self._halt = threading.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def start(self) -> None:
        main = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, args=(main,), name="load", daemon=True)
        self._thread.start()
        self._tasks.append(asyncio.create_task(self.counter.watch(self._stop)))
        self._tasks.append(asyncio.create_task(self.lag.watch(self._stop.is_set)))

    async def stop(self) -> None:
        """Stop the clients (each finishes the answer it is reading) and the counter's watch."""
        self._halt.set()
        self._stop.set()
        assert self._thread is not None
        await asyncio.to_thread(self._thread.join, 600)
        assert not self._thread.is_alive(), "the clients did not stop within 600 s"
        await asyncio.wait_for(asyncio.gather(*self._tasks), timeout=600)
        if self._failure is not None:
            raise self._failure

    def _run(self, main: asyncio.AbstractEventLoop) -> None:
        async def clients() -> None:
            lag = asyncio.create_task(self.clients_lag.watch(self._halt.is_set))
            await asyncio.gather(*(self._client(i, main) for i in range(self.num_clients)))
            await lag

        try:
            asyncio.run(clients())
        except BaseException as e:  # raised again by stop(), on the test's loop
            self._failure = e

    async def _ready_routers(self) -> list[str]:
        return self.routers()

    async def _client(self, index: int, main: asyncio.AbstractEventLoop) -> None:
        # NOTE: a new connection for each request, as kube-proxy gives one. A pooled keep-alive
        # connection to the router this client used two requests ago sat idle for a whole
        # stream on the other router, past uvicorn's 5 s keep-alive: the router had closed it,
        # and a request written on it just then got "Connection reset by peer" (CI's run of
        # 169e378), a race of this client's pool, not of the rollout.
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as http:
            n = 0
            while not self._halt.is_set():
                asked = asyncio.run_coroutine_threadsafe(self._ready_routers(), main)
                routers = await asyncio.wrap_future(asked)
                router = routers[(index + n) % len(routers)]
                prompt = PROMPTS[(index + n) % len(PROMPTS)]
                answer = Answer(prompt, router, time.monotonic())
                try:
                    await stream_once(http, answer, self.max_tokens)
                except (aiohttp.ClientError, TimeoutError) as e:
                    # NOTE: kept whole (its start, status, replica and what it read), to say
                    # which router and replica cut it and when.
                    answer.error = repr(e)
                    answer.seconds = time.monotonic() - answer.started
                self.answers.append(answer)
                n += 1

    def between(self, start: float, end: float) -> list[Answer]:
        return [a for a in self.answers if start <= a.started < end]


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of `values`; NaN when there are none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def ttfts(answers: list[Answer]) -> list[float]:
    return [a.ttft_s for a in answers if a.ttft_s is not None]


class RouterCounter:
    """A counter summed over every router pod there was: each pod's last value, read while it
    serves (a router replaced by a rollout takes its counters with it)."""

    def __init__(self, routers: Callable[[], list[str]], sample: str) -> None:
        self.routers = routers
        self.sample = sample
        self.last: dict[str, float] = {}

    @property
    def total(self) -> float:
        return sum(self.last.values())

    async def watch(self, stop: asyncio.Event) -> None:
        """Read every second until `stop`, then once more."""
        while not stop.is_set():
            await self.read()
            # NOTE: not `asyncio.wait_for`, which on Python 3.11 can lose a cancellation (the
            # loop's teardown after a failed scenario then waits forever): kubelet.py.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await stop.wait()
        await self.read()

    async def read(self) -> float:
        async with aiohttp.ClientSession() as http:
            for router in self.routers():
                url = f"http://{router}:{ROUTER_PORT}/metrics"
                try:
                    async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
                        text = await response.text()
                except (aiohttp.ClientError, TimeoutError):
                    continue  # leaving: its last value stands
                values = [
                    float(line.rsplit(" ", 1)[1])
                    for line in text.splitlines()
                    if line.startswith(self.sample + " ")
                ]
                self.last[router] = sum(values)
        return self.total


class LoopLag:
    """How late the event loop it watches on ran: the worst lateness, and each stall of at least
    STALL_S (when it began and ended). (kmock's scan of its whole request history once made the
    test's loop run 10 s late: tests/e2e/apiserver.py.)"""

    PERIOD_S = 0.05
    STALL_S = 0.25

    def __init__(self) -> None:
        self.worst_s = 0.0
        self.stalls: list[tuple[float, float]] = []

    async def watch(self, stopped: Callable[[], bool]) -> None:
        while not stopped():
            before = time.monotonic()
            await asyncio.sleep(self.PERIOD_S)
            after = time.monotonic()
            late = after - before - self.PERIOD_S
            self.worst_s = max(self.worst_s, late)
            if late >= self.STALL_S:
                self.stalls.append((before, after))

    def overlaps(self, start: float, end: float) -> bool:
        """Did a stall fall within [start, end]: a time measured over it is the loop's too?"""
        return any(s < end and start < e for s, e in self.stalls)


def timed_cleanly(answers: list[Answer], lag: LoopLag) -> list[Answer]:
    """The answers whose time to first token no stall of the clients' loop overlapped (a stalled
    loop reads its own lateness as the router's and engines'; they run in other processes)."""
    return [
        a
        for a in answers
        if a.ttft_s is not None and not lag.overlaps(a.started, a.started + a.ttft_s)
    ]
