"""Issue 34's attacks 4 to 8 against a live fleet (two `pagedock serve` replicas behind one
`pagedock route`), each measured by a concurrent good request: while the attack runs, every good
request succeeds and its median and slowest latency stay within 2x the quiet run's (or +250 ms,
the larger); the attacker gets a clear refusal (a 4xx or 503 in OpenAI's error shape, a gRPC
status on the picker port), and the router's memory stays within its byte budget.

Each attacker is a process of its own (multiprocessing, spawned) at nice 10, as in
tests/chaos/attacker.py: it stands for clients on other machines, and its own client work must not
be counted as the fleet's latency. It sets its attack up, reports what it got (`ready`), keeps
knocking (one more refused attempt at a time) until told to stop, then reports its counts.

Attack 7 (a tenant probing another's prompts in the prefix cache) is measured by what the prober
learns, not by latency; tests/router/test_cache_salt_live.py follows the same isolation through
the router's KV index and vLLM's events.

What these found, fixed: bodies sized to fill the router's body budget exactly left good requests
none of it (the budget now keeps a sixteenth for small bodies); a neighbour waited out a served
8,000-token continuation's whole prefill (the replicas run with --long-prefill-token-threshold);
a flood of idle KV event subscribers slowed one health check and the router gave its own stream's
place away (the router now keeps a live stream through a failed check).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import select
import signal
import socket
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import grpc
import httpx
import psutil
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from pagedock.http.internal_key import INTERNAL_KEY_HEADER
from pagedock.limits import MAX_BODY_BYTES, largest_body_within
from router.http.proxy import PREDICTED_CACHED_HEADER, REPLICA_HEADER
from tests.router.live import (
    Process,
    free_port,
    replica_process,
    replica_view,
    router_process,
    running_fleet,
    wait_synced,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
MIB = 1 << 20
INTERNAL_KEY = "fleet-internal-key"
PICKER_KEY = "gateway-key"
GATEWAY = (("authorization", f"Bearer {PICKER_KEY}"),)
BODY_BUDGET = 64 * MIB  # --max-buffered-body-bytes
LARGE_BODY_ROOM = largest_body_within(BODY_BUDGET)  # seven attack bodies; the rest for small ones
HOLD_BYTES = 25 * MIB  # --hold-queue-bytes: three attack bodies
ATTACK_BODY = 8_300_000  # "40 held 8.3 MB bodies" (issue 34), under the 8 MiB body limit
PICKER_BODY = 8_000_000  # "20 streams of 8 MB bodies"
PICKER_MAX_STREAMS, PICKER_IDLE_S = 32, 5
CONTINUATION_TOKENS, MAX_MODEL_LEN = 8_000, 8_448
KV_SUBSCRIBERS = 16  # the engine's --max-kv-event-subscribers default
RSS_MARGIN = 48 * MIB  # beyond the budget: the bodies' copies in flight, allocator slack
GOOD = {"prompt": "paged attention keeps the prefix cache warm", "max_tokens": 8}
# As many quiet requests as attacked ones: the slowest of more requests is slower by chance alone
# (of 16 and 8 from one distribution, the 16's slowest is the slower two times in three).
QUIET_RUNS = ATTACKED_RUNS = 16
# An 8,000-token prompt is prefilled this many tokens a step (docs/server.md): 128 kept its
# neighbours within 2x here (median 80 ms, slowest 153 ms, quiet 11-13 ms); 256 did not.
LONG_PREFILL_TOKEN_THRESHOLD = 128


@dataclass
class Fleet:
    router: Process
    replicas: list[Process]
    picker_port: int


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    from tests.tiny_model import make_tiny_llama_dir

    model = make_tiny_llama_dir(
        tmp_path_factory.mktemp("tiny"), max_position_embeddings=MAX_MODEL_LEN
    )
    logs = tmp_path_factory.mktemp("logs")
    replicas = [long_replica(model, logs) for _ in range(2)]
    picker_port = free_port()
    router = router_process(model, logs, [r.url for r in replicas], *router_flags(picker_port))
    with running_fleet([router], replicas):
        yield Fleet(router, replicas, picker_port)


def long_replica(model: Any, logs: Any) -> Process:
    """A replica with room for an 8,000-token continuation, behind the fleet's internal key."""
    replica = replica_process(model, logs, num_kv_blocks=1024)
    replica.args[replica.args.index("--max-model-len") + 1] = str(MAX_MODEL_LEN)
    replica.args += ["--internal-api-key", INTERNAL_KEY]
    replica.args += ["--long-prefill-token-threshold", str(LONG_PREFILL_TOKEN_THRESHOLD)]
    return replica


def router_flags(picker_port: int) -> list[str]:
    return [
        "--no-predicted-cached-tokens-header",  # the default: router_process turns it on
        "--cache-salt-by-tenant",
        "--internal-api-key",
        INTERNAL_KEY,
        "--max-buffered-body-bytes",
        str(BODY_BUDGET),
        "--hold-queue-bytes",
        str(HOLD_BYTES),
        "--picker-port",
        str(picker_port),
        "--picker-api-key",
        PICKER_KEY,
        "--picker-max-streams",
        str(PICKER_MAX_STREAMS),
        "--picker-stream-idle-timeout-s",
        str(PICKER_IDLE_S),
    ]


# ---- measuring ----------------------------------------------------------------------------------


def completion_timer(client: httpx.Client, url: str) -> Callable[[], float]:
    """The good request, timed: it must succeed."""

    def send() -> float:
        start = time.perf_counter()
        response = client.post(url + "/v1/completions", json=GOOD, timeout=60)
        assert response.status_code == 200, f"a good request failed: {response.text[:300]}"
        return time.perf_counter() - start

    return send


def health_timer(client: httpx.Client, url: str) -> Callable[[], float]:
    def send() -> float:
        start = time.perf_counter()
        response = client.get(url + "/health", timeout=30)
        assert response.status_code == 200, f"/health answered {response.status_code}"
        return time.perf_counter() - start

    return send


def quietly(send: Callable[[], float]) -> list[float]:
    send()  # warm-up: a connection, the prompt's blocks cached
    return [send() for _ in range(QUIET_RUNS)]


def attacked(send: Callable[[], float]) -> list[float]:
    return [send() for _ in range(ATTACKED_RUNS)]


def assert_unharmed(what: str, quiet: list[float], attacked: list[float]) -> None:
    """Median and slowest within 2x the quiet run's (or +250 ms, the larger); printed."""
    figures = []
    stats: list[tuple[str, Callable[[list[float]], float]]] = [
        ("median", statistics.median),
        ("slowest", max),
    ]
    for name, stat in stats:
        q, a = stat(quiet), stat(attacked)
        figures.append((name, q, a, max(2 * q, q + 0.25)))
    print(
        f"\n{what}: "
        + "; ".join(
            f"{name} quiet {q * 1e3:.0f} ms, attacked {a * 1e3:.0f} ms (allowed {ok * 1e3:.0f})"
            for name, q, a, ok in figures
        )
        + f"; load {os.getloadavg()[0]:.2f}"
    )
    for name, _, a, ok in figures:
        assert a <= ok, f"{what}: the {name} good request took {a:.3f} s, past {ok:.3f} s"


def router_health(router: Process) -> dict[str, Any]:
    return dict(httpx.get(router.url + "/health", timeout=30).json())


def rss_bytes(p: Process) -> int:
    assert p.proc is not None
    return int(psutil.Process(p.proc.pid).memory_info().rss)


class PeakRss:
    """The largest resident set of a process while the block runs, sampled every 20 ms."""

    def __init__(self, p: Process) -> None:
        self.process = p
        self.peak = rss_bytes(p)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_bytes(self.process))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def print_rss(baseline: int, peak: int, after: int, budget: int) -> None:
    print(
        f"router RSS: baseline {baseline / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB "
        f"(+{(peak - baseline) / MIB:.0f}; budget {budget / MIB:.0f} + margin "
        f"{RSS_MARGIN / MIB:.0f}), after the attackers left {after / MIB:.0f} MiB"
    )


# ---- attackers, each a process of its own -------------------------------------------------------


@contextmanager
def attacking(attack: Callable[..., None], *args: Any) -> Iterator[dict[str, Any]]:
    """`attack(pipe, *args)` in a process of its own, from the moment it is ready to the block's
    end; the dict holds what it reported when ready and, once the block is left, its last
    report."""
    spawn = multiprocessing.get_context("spawn")
    ours, theirs = spawn.Pipe()
    proc = spawn.Process(target=attack, args=(theirs, *args), daemon=True)
    proc.start()
    report: dict[str, Any] = {}
    try:
        assert ours.poll(120), "the attacker was not ready within 120 s"
        try:
            report.update(ours.recv())
        except EOFError:
            proc.join(10)
            raise AssertionError(f"the attacker died (exit code {proc.exitcode})") from None
        yield report
    finally:
        if proc.is_alive():
            ours.send("stop")
            if ours.poll(60):
                report.update(ours.recv())
        proc.join(30)
        if proc.is_alive():
            proc.kill()


def until_stopped(pipe: Connection, knock: Callable[[], None] | None = None) -> int:
    """Knock (one attempt at a time) until the test says stop; how many knocks."""
    knocks = 0
    while not pipe.poll(0 if knock else None):
        assert knock is not None
        knock()
        knocks += 1
    pipe.recv()
    return knocks


def read_answer(sock: socket.socket) -> tuple[int, dict[str, Any] | None]:
    """An HTTP answer's status and, past its head, its JSON body (none for a 1xx or a 200: a
    stream's body is never read)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data[:200]!r}")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    if status < 201:
        return status, None
    fields = dict(line.split(":", 1) for line in lines[1:])
    length = int({k.lower(): v for k, v in fields.items()}.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, json.loads(rest[:length])


def refusal(status: int, body: dict[str, Any] | None) -> str:
    """`STATUS CODE` of an answer in OpenAI's error shape; anything else as it came."""
    error = (body or {}).get("error")
    if isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}:
        return f"{status} {error['code']}"
    return f"{status} {body!r:.100}"


def post_head(port: int, size: int, extra: str = "") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\n{extra}\r\n"
    )
    sock.sendall(head.encode())
    return sock


def stalled_body(port: int, size: int) -> tuple[socket.socket | None, str]:
    """A request announcing a `size`-byte body, with Expect: 100-continue: admitted (the router
    asks for the body), all of it but its last byte is sent and the socket kept; refused, the
    refusal."""
    sock = post_head(port, size, "Expect: 100-continue\r\n")
    status, body = read_answer(sock)
    if status != 100:
        sock.close()
        return None, refusal(status, body)
    sock.sendall(b"{" + b" " * (size - 2))  # the closing brace never comes
    return sock, "admitted"


def stalled_bodies(pipe: Connection, port: int, count: int, size: int) -> None:
    """Attack 4, bodies being read: `count` requests whose bodies stall a byte short of their
    end, held in the router's memory until their clients go."""
    os.nice(10)
    hold_sockets(pipe, count, lambda: stalled_body(port, size))


def hold_sockets(
    pipe: Connection, count: int, attempt: Callable[[], tuple[socket.socket | None, str]]
) -> None:
    """`count` attempts, the sockets admitted held; ready; more attempts until stopped."""
    held: list[socket.socket] = []
    answers: Counter[str] = Counter()

    def knock() -> None:
        sock, answer = attempt()
        answers[answer] += 1
        if sock is not None:
            held.append(sock)

    for _ in range(count):
        knock()
    pipe.send({"held": len(held), "answers": dict(answers)})
    answers.clear()
    knocks = until_stopped(pipe, knock)
    pipe.send({"knocks": knocks, "knock_answers": dict(answers), "held_at_end": len(held)})
    for sock in held:
        sock.close()


def held_body(port: int, size: int) -> tuple[socket.socket | None, str]:
    """A whole request of `size` bytes (a short prompt, padded with JSON whitespace), sent while
    no replica is ready: held (the router's held_body_bytes grows by it) or refused."""
    url = f"http://127.0.0.1:{port}/health"
    before = httpx.get(url, timeout=30).json()["held_body_bytes"]
    prefix = b'{"prompt": "hi", "max_tokens": 1'
    sock = post_head(port, size)
    sock.sendall(prefix + b" " * (size - len(prefix) - 1) + b"}")
    while True:
        if select.select([sock], [], [], 0.02)[0]:
            status, body = read_answer(sock)
            sock.close()
            return None, refusal(status, body)
        if httpx.get(url, timeout=30).json()["held_body_bytes"] >= before + size:
            return sock, "held"


def held_bodies(pipe: Connection, port: int, count: int, size: int) -> None:
    """Attack 4, the hold queue: `count` whole bodies sent while no replica is ready."""
    os.nice(10)
    hold_sockets(pipe, count, lambda: held_body(port, size))


def picker_attack(pipe: Connection, port: int, router_port: int, mode: str) -> None:
    """Attack 5 on the endpoint picker's port: `bodies`, 20 streams with the gateway's key that
    send 8 MB bodies and never end them (kept alive with empty frames), while waves of 200 streams
    without the key knock; `half_open`, 200 streams with the key that take a destination and then
    say nothing, while one more knocks past the cap. Once stopped, it waits for the picker to end
    every stream it still held."""
    os.nice(10)
    asyncio.run(_picker_attack(pipe, port, router_port, mode))


async def _picker_attack(pipe: Connection, port: int, router_port: int, mode: str) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalProcessorStub(channel)
        held: list[HeldStream] = []
        kept = asyncio.Event()
        keep_alive = asyncio.ensure_future(trickle(held, kept))
        if mode == "bodies":
            answers = await body_streams(stub, router_port, held, 20)
            knock = lambda: silent_wave(stub, 200)  # noqa: E731
        else:
            answers = await half_open_streams(stub, held, 200)
            knock = lambda: silent_wave(stub, 1, GATEWAY)  # noqa: E731
        pipe.send({"held": len(held), "answers": dict(answers)})
        knock_answers: Counter[str] = Counter()
        knocks = 0
        while not pipe.poll(0):
            knock_answers.update(await knock())
            knocks += 1
        pipe.recv()
        kept.set()
        await keep_alive  # NOTE: not cancelled: a write cancelled mid-way cancels its stream
        ended = await asyncio.gather(*(ended_by_the_picker(s) for s in held))
        report = {"knocks": knocks, "knock_answers": dict(knock_answers), "ended": Counter(ended)}
        pipe.send({**report, "held_at_end": len(held)})


@dataclass
class HeldStream:
    """An attacker's admitted ext_proc stream."""

    call: Any
    reading: asyncio.Future[Any]
    """The stream's next read: its end, when the picker closes it."""
    has_body: bool


async def trickle(held: list[HeldStream], done: asyncio.Event) -> None:
    """An empty body frame on each held body stream every second until `done`: never idle, never
    ended. (Half-open streams have nothing left to send: the idle timeout ends them.)"""
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 1)
            return
        for stream in [s for s in held if s.has_body]:
            with contextlib.suppress(Exception):  # ended by the picker: seen when it is read
                await stream.call.write(pb.ProcessingRequest(request_body=pb.HttpBody(body=b"")))


async def body_streams(
    stub: Any, router_port: int, held: list[HeldStream], count: int
) -> Counter[str]:
    answers: Counter[str] = Counter()
    url = f"http://127.0.0.1:{router_port}/health"
    for _ in range(count):
        before = httpx.get(url, timeout=30).json()["buffered_body_bytes"]
        stream = stub.Process(metadata=GATEWAY)
        reading = asyncio.ensure_future(stream.read())
        try:
            await stream.write(headers())
            for offset in range(0, PICKER_BODY, MIB):
                piece = b"x" * min(MIB, PICKER_BODY - offset)
                await stream.write(pb.ProcessingRequest(request_body=pb.HttpBody(body=piece)))
        except Exception:  # refused mid-body: the answer says why
            pass
        while not reading.done():
            if httpx.get(url, timeout=30).json()["buffered_body_bytes"] >= before + PICKER_BODY:
                break
            await asyncio.sleep(0.02)
        if reading.done():
            answers[immediate_refusal(reading)] += 1
        else:
            held.append(HeldStream(stream, reading, has_body=True))
            answers["held"] += 1
    return answers


def immediate_refusal(reading: asyncio.Future[Any]) -> str:
    """`STATUS CODE` of the picker's immediate response (or the stream's gRPC status)."""
    if reading.exception() is not None:
        return f"grpc {reading.exception()}"
    answer = reading.result().immediate_response
    return refusal(int(answer.status.code), json.loads(answer.body))


async def silent_wave(stub: Any, count: int, metadata: Any = None) -> Counter[str]:
    """`count` streams at once (with `metadata`, the key) that send nothing: each refused before
    its first message, or admitted and, silent, ended by the picker's idle timeout.

    NOTE: nothing is written: a write racing the refusal fails in the client's grpc core
    (INTERNAL), which would hide the status the picker sent (tests/router/test_picker_limits.py)."""

    async def one() -> str:
        try:
            answer = await stub.Process(metadata=metadata).read()
        except grpc.aio.AioRpcError as e:
            return str(e.code().name)
        return "ended by the picker" if answer is grpc.aio.EOF else "answered"

    return Counter(await asyncio.gather(*(one() for _ in range(count))))


async def half_open_streams(stub: Any, held: list[HeldStream], count: int) -> Counter[str]:
    """`count` streams with the key: as many as the cap at once, each a request without a body
    that takes a destination (and a pick) and then says nothing, held; the rest at once while
    those fill the cap, refused."""

    async def admitted() -> str:
        stream = stub.Process(metadata=GATEWAY)
        await stream.write(headers(end_of_stream=True))
        destination_header(await stream.read())
        held.append(HeldStream(stream, asyncio.ensure_future(stream.read()), has_body=False))
        return "held"

    answers = Counter(await asyncio.gather(*(admitted() for _ in range(PICKER_MAX_STREAMS))))
    return answers + await silent_wave(stub, count - PICKER_MAX_STREAMS, GATEWAY)


async def ended_by_the_picker(stream: HeldStream) -> str:
    """How a held stream ended, waiting up to 30 s: `OK` when the picker closed it."""
    try:
        await asyncio.wait_for(stream.reading, 30)
        return str((await stream.call.code()).name)
    except TimeoutError:
        return "still open"
    except asyncio.CancelledError:
        return "cancelled by the attacker"
    except grpc.aio.AioRpcError as e:
        return str(e.code().name)


def continuation_body(salt: int) -> dict[str, Any]:
    """A seeded continuation 8,000 tokens in, four left to generate; `salt` varies its ids so
    no two share cached blocks."""
    ids = [3 + (i * 7 + salt) % 500 for i in range(CONTINUATION_TOKENS)]
    return {
        "prompt": "hi",
        "stream": True,  # a continuation resumes a stream
        "max_tokens": CONTINUATION_TOKENS + 4,
        "temperature": 1.0,
        "seed": 1,
        "continuation": {"token_ids": ids},
    }


def continuations(pipe: Connection, router: str, replica: str, trusted: bool) -> None:
    """Attack 6: a client's continuations, to the router and to the replica without the internal
    key (refused); or, `trusted`, the internal key holder's to the replica (served), back to back.
    """
    os.nice(10)
    answers: Counter[str] = Counter()
    durations: list[float] = []
    with httpx.Client(timeout=120) as client:

        def attempt() -> None:
            body = continuation_body(len(durations) + sum(answers.values()))
            if trusted:
                start = time.perf_counter()
                answers[f"replica {trusted_continuation(client, replica, body)}"] += 1
                durations.append(time.perf_counter() - start)
                return
            for name, url in [("router", router), ("replica", replica)]:
                response = client.post(url + "/v1/completions", json=body)
                answers[f"{name} {refusal(response.status_code, response.json())}"] += 1

        attempt()
        pipe.send({"answers": dict(answers)})
        knocks = until_stopped(pipe, attempt)
    pipe.send({"knocks": knocks, "answers": dict(answers), "durations": durations})


def trusted_continuation(client: httpx.Client, replica: str, body: dict[str, Any]) -> str:
    """The internal key holder's continuation, streamed to its end: `200` when served whole."""
    key = {INTERNAL_KEY_HEADER: INTERNAL_KEY}
    with client.stream("POST", replica + "/v1/completions", json=body, headers=key) as response:
        if response.status_code != 200:
            return f"{response.status_code} {response.read()[:200]!r}"
        lines = list(response.iter_lines())
    return "200" if lines and "data: [DONE]" in lines else f"200 but cut: {lines[-3:]}"


def idle_subscribers(pipe: Connection, port: int, count: int) -> None:
    """Attack 8: `count` sockets that ask a replica for its KV event stream (with the internal
    key, the worst case) and never read past the answer's head; then one more at a time."""
    os.nice(10)
    request = (
        f"GET /v1/kv/events HTTP/1.1\r\nHost: replica\r\n{INTERNAL_KEY_HEADER}: {INTERNAL_KEY}"
        "\r\n\r\n"
    ).encode()
    sockets = []
    for _ in range(count):
        sockets.append(socket.create_connection(("127.0.0.1", port), timeout=60))
        sockets[-1].sendall(request)
    answers = Counter(subscription_answer(sock) for sock in sockets)
    pipe.send({"answers": dict(answers)})

    def attempt() -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        sock.sendall(request)
        answer = subscription_answer(sock)
        answers[answer] += 1
        if answer == "200":
            sockets.append(sock)  # a place freed: held too
        else:
            sock.close()

    answers.clear()
    knocks = until_stopped(pipe, attempt)
    pipe.send({"knocks": knocks, "knock_answers": dict(answers)})
    for sock in sockets:
        sock.close()


def subscription_answer(sock: socket.socket) -> str:
    status, body = read_answer(sock)
    return "200" if status == 200 else refusal(status, body)


# ---- the attacks, measured ----------------------------------------------------------------------


def test_bodies_stalled_in_the_router_stay_within_its_budget_and_good_requests_go_on(
    fleet: Fleet,
) -> None:
    router = fleet.router
    with httpx.Client() as client:
        send = completion_timer(client, router.url)
        quiet = quietly(send)
        baseline = rss_bytes(router)
        with (
            PeakRss(router) as rss,
            attacking(stalled_bodies, router.port, 40, ATTACK_BODY) as report,
        ):
            during = router_health(router)
            hurt = attacked(send)
        wait_until(lambda: router_health(router)["buffered_body_bytes"] == 0, 30)
        after = rss_bytes(router)
    fits = LARGE_BODY_ROOM // ATTACK_BODY
    print(f"\nstalled bodies: {report}")
    print_rss(baseline, rss.peak, after, BODY_BUDGET)
    assert report["answers"] == {"admitted": fits, "503 router_memory_full": 40 - fits}
    assert report["held_at_end"] == fits and during["buffered_body_bytes"] >= fits * ATTACK_BODY
    assert report["knocks"] > 0 and set(report["knock_answers"]) == {"503 router_memory_full"}
    assert_unharmed("good requests beside 40 stalled 8.3 MB bodies", quiet, hurt)
    assert rss.peak <= baseline + BODY_BUDGET + RSS_MARGIN


def test_bodies_that_fill_the_budget_exactly_still_leave_room_for_good_requests(
    fleet: Fleet,
) -> None:
    router = fleet.router
    with httpx.Client() as client:
        send = completion_timer(client, router.url)
        quiet = quietly(send)
        try:
            with attacking(stalled_bodies, router.port, 40, MAX_BODY_BYTES) as report:
                during = router_health(router)
                hurt = attacked(send)
        finally:  # the budget back for the tests after this one
            wait_until(lambda: router_health(router)["buffered_body_bytes"] == 0, 30)
    print(f"\nbodies of the largest size: {report}")
    assert report["held_at_end"] == LARGE_BODY_ROOM // MAX_BODY_BYTES
    assert during["buffered_body_bytes"] == LARGE_BODY_ROOM // MAX_BODY_BYTES * MAX_BODY_BYTES
    assert_unharmed("good requests beside stalled 8 MiB bodies", quiet, hurt)


@contextmanager
def paused(replicas: list[Process]) -> Iterator[Callable[[], None]]:
    """The replicas stopped (SIGSTOP: their health checks time out); the block may resume them,
    and they are resumed when it ends."""

    def resume() -> None:
        for p in replicas:
            assert p.proc is not None
            p.proc.send_signal(signal.SIGCONT)

    for p in replicas:
        assert p.proc is not None
        p.proc.send_signal(signal.SIGSTOP)
    try:
        yield resume
    finally:
        resume()


def test_bodies_held_while_no_replica_is_ready_stay_within_the_hold_queues_bytes(
    fleet: Fleet,
) -> None:
    router = fleet.router
    with httpx.Client() as client, httpx.Client() as good, ThreadPoolExecutor(1) as pool:
        probe = health_timer(client, router.url)
        quiet = quietly(probe)
        baseline = rss_bytes(router)
        with PeakRss(router) as rss, paused(fleet.replicas) as resume:
            wait_until(lambda: router_health(router)["healthy_replicas"] == 0, 30)
            with attacking(held_bodies, router.port, 40, ATTACK_BODY) as report:
                served = pool.submit(completion_timer(good, router.url))  # held beside them
                wait_until(lambda: router_health(router)["held_requests"] == report["held"] + 1)
                during = router_health(router)
                hurt = attacked(probe)
            resume()
            waited = served.result(60)
        after = rss_bytes(router)
    wait_synced(router, [r.url for r in fleet.replicas], 30)
    fits = HOLD_BYTES // ATTACK_BODY
    print(f"\nheld bodies: {report}; the good request held beside them: {waited:.2f} s")
    print_rss(baseline, rss.peak, after, BODY_BUDGET)
    assert report["answers"] == {"held": fits, "503 hold_queue_full": 40 - fits}
    assert during["held_body_bytes"] >= fits * ATTACK_BODY
    assert report["knocks"] > 0 and set(report["knock_answers"]) == {"503 hold_queue_full"}
    assert_unharmed("the router's /health beside 40 held 8.3 MB bodies", quiet, hurt)
    assert rss.peak <= baseline + BODY_BUDGET + RSS_MARGIN


def headers(end_of_stream: bool = False) -> pb.ProcessingRequest:
    """A completions request's headers, as Envoy's ext_proc filter sends them."""
    fields = {":method": "POST", ":path": "/v1/completions", "content-type": "application/json"}
    header_map = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in fields.items()]
    )
    return pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(headers=header_map, end_of_stream=end_of_stream)
    )


def destination_header(response: pb.ProcessingResponse) -> str:
    """The endpoint the picker chose (a refusal, an immediate response, has none)."""
    common = getattr(response, str(response.WhichOneof("response"))).response
    [endpoint] = [
        h.header.raw_value.decode()
        for h in common.header_mutation.set_headers
        if h.header.key == "x-gateway-destination-endpoint"
    ]
    return str(endpoint)


def pick_timer(stub: Any) -> Callable[[], float]:
    """The gateway's good ext_proc stream (its key, a small body), timed: it must be given a
    destination."""
    last = pb.HttpBody(body=json.dumps(GOOD).encode(), end_of_stream=True)

    def pick() -> float:
        start = time.perf_counter()
        messages = [headers(), pb.ProcessingRequest(request_body=last)]
        responses = list(stub.Process(iter(messages), metadata=GATEWAY, timeout=30))
        assert destination_header(responses[0])
        return time.perf_counter() - start

    return pick


def test_the_picker_refuses_strangers_and_bodies_past_the_budget_and_serves_the_gateway(
    fleet: Fleet,
) -> None:
    router = fleet.router
    with (
        grpc.insecure_channel(f"127.0.0.1:{fleet.picker_port}") as channel,
        httpx.Client() as client,
    ):
        pick = pick_timer(pb_grpc.ExternalProcessorStub(channel))
        send = completion_timer(client, router.url)
        quiet_pick, quiet_http = quietly(pick), quietly(send)
        baseline = rss_bytes(router)
        with (
            PeakRss(router) as rss,
            attacking(picker_attack, fleet.picker_port, router.port, "bodies") as report,
        ):
            during = router_health(router)
            hurt_pick, hurt_http = attacked(pick), attacked(send)
        wait_until(lambda: router_health(router)["buffered_body_bytes"] == 0, 30)
        after = rss_bytes(router)
    fits = LARGE_BODY_ROOM // PICKER_BODY
    print(f"\npicker bodies and strangers: {report}")
    print_rss(baseline, rss.peak, after, BODY_BUDGET)
    assert report["answers"] == {"held": fits, "503 router_memory_full": 20 - fits}
    assert during["buffered_body_bytes"] >= fits * PICKER_BODY
    assert report["knocks"] > 0
    assert report["knock_answers"] == {"UNAUTHENTICATED": 200 * report["knocks"]}
    assert report["ended"] == {"OK": fits}  # by the idle timeout, once no longer kept alive
    assert_unharmed("the gateway's streams beside the picker's attackers", quiet_pick, hurt_pick)
    assert_unharmed("good HTTP requests beside the picker's attackers", quiet_http, hurt_http)
    assert rss.peak <= baseline + BODY_BUDGET + RSS_MARGIN


def num_inflight(router: Process) -> int:
    return int(httpx.get(router.url + "/router/demand", timeout=30).json()["num_inflight"])


def test_half_open_picker_streams_past_the_cap_are_refused_and_ended_when_idle(
    fleet: Fleet,
) -> None:
    router = fleet.router
    with (
        grpc.insecure_channel(f"127.0.0.1:{fleet.picker_port}") as channel,
        httpx.Client() as client,
    ):
        pick = pick_timer(pb_grpc.ExternalProcessorStub(channel))
        send = completion_timer(client, router.url)
        quiet = quietly(send)
        with attacking(picker_attack, fleet.picker_port, router.port, "half_open") as report:
            inflight = num_inflight(router)
            hurt = attacked(send)
        wait_until(lambda: num_inflight(router) == 0, 30)
        pick()  # the gateway's streams are admitted again
    held = report["held_at_end"]
    print(f"\nhalf-open picker streams: {report}; picks held meanwhile {inflight}")
    assert report["answers"] == {"held": PICKER_MAX_STREAMS, "RESOURCE_EXHAUSTED": 200 - 32}
    assert inflight >= PICKER_MAX_STREAMS
    assert report["knocks"] > 0 and report["knock_answers"]["RESOURCE_EXHAUSTED"] > 0
    assert set(report["knock_answers"]) <= {"RESOURCE_EXHAUSTED", "ended by the picker"}
    assert report["ended"] == {"OK": held}  # each by the idle timeout: its pick released
    assert_unharmed("good HTTP requests beside 200 half-open picker streams", quiet, hurt)


def test_a_clients_continuations_are_refused_and_its_neighbours_unharmed(fleet: Fleet) -> None:
    router, replica = fleet.router, fleet.replicas[0]
    with httpx.Client() as client:
        send = completion_timer(client, router.url)
        quiet = quietly(send)
        with attacking(continuations, router.url, replica.url, False) as report:
            hurt = attacked(send)
    print(f"\na client's continuations: {report['answers']}")
    rounds = report["knocks"] + 1
    assert report["answers"] == {
        "router 400 continuation_not_allowed": rounds,
        "replica 403 continuation_not_allowed": rounds,
    }
    assert report["knocks"] > 0
    assert_unharmed("good requests beside a client's 8,000-token continuations", quiet, hurt)


def test_a_trusted_8000_token_continuation_leaves_its_neighbours_within_2x(fleet: Fleet) -> None:
    """A served continuation recomputes its KV as a chunked prefill, as a plain 8,000-token
    prompt is: with --long-prefill-token-threshold its chunks are small, so a neighbour starts
    within a short step and decodes beside them (without, it waited for the whole prompt: its
    median went from 20 ms to 0.74-1.65 s)."""
    router, replica = fleet.router, fleet.replicas[0]
    with httpx.Client() as client:
        send = completion_timer(client, replica.url)  # its neighbour on the same engine
        quiet = quietly(send)
        with attacking(continuations, router.url, replica.url, True) as report:
            hurt = attacked(send)
    durations = ", ".join(f"{d:.2f}" for d in report["durations"])
    print(f"\ntrusted continuations: {report['answers']}, each took {durations} s")
    assert report["answers"] == {"replica 200": report["knocks"] + 1}
    assert report["knocks"] > 0  # one at least ran beside the measured neighbours
    assert_unharmed("a neighbour beside 8,000-token seeded continuations", quiet, hurt)


@dataclass
class Probe:
    cached_tokens: int
    replica: str
    headers: httpx.Headers


def probe(router: Process, key: str, prompt: list[int]) -> Probe:
    """`prompt` sent through the router by the tenant with bearer key `key`."""
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0}
    auth = {"authorization": f"Bearer {key}"}
    response = httpx.post(router.url + "/v1/completions", json=body, headers=auth, timeout=60)
    assert response.status_code == 200, response.text
    cached = response.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    return Probe(int(cached), response.headers[REPLICA_HEADER], response.headers)


def test_a_tenant_probing_anothers_prompt_finds_nothing_cached(fleet: Fleet) -> None:
    router, prompt = fleet.router, list(range(3, 103))  # 100 ids: six full blocks of 16
    blocks = {url: view["cached_blocks"] for url, view in replica_view(router).items()}
    first = probe(router, "tenant-a", prompt)
    known = blocks[first.replica]
    wait_until(lambda: replica_view(router)[first.replica]["cached_blocks"] >= known + 6, 30)
    again = probe(router, "tenant-a", prompt)
    strangers: list[Probe] = []
    while len(strangers) < 20 and (not strangers or strangers[-1].replica != first.replica):
        strangers.append(probe(router, f"tenant-b{len(strangers)}", prompt))
    print(
        f"\nprefix probing: tenant A {first.cached_tokens} then {again.cached_tokens} cached; "
        f"strangers {[s.cached_tokens for s in strangers]} on "
        f"{[s.replica == first.replica for s in strangers]} (A's replica)"
    )
    assert first.cached_tokens == 0 and again.cached_tokens >= 96
    assert again.replica == first.replica and strangers[-1].replica == first.replica
    assert all(s.cached_tokens == 0 for s in strangers)
    for answer in [first, again, *strangers]:
        assert PREDICTED_CACHED_HEADER not in answer.headers
    for replica in fleet.replicas:  # the engines' KV events are the routers' alone
        events = httpx.get(replica.url + "/v1/kv/events", timeout=30)
        assert (events.status_code, refusal(events.status_code, events.json())) == (
            401,
            "401 invalid_internal_key",
        )


def test_idle_kv_event_subscribers_leave_requests_and_health_served(fleet: Fleet) -> None:
    router, replica = fleet.router, fleet.replicas[1]
    with httpx.Client() as via_router, httpx.Client() as direct:
        timers = [
            completion_timer(via_router, router.url),
            completion_timer(direct, replica.url),
            health_timer(direct, replica.url),
        ]
        quiet = [quietly(timer) for timer in timers]
        with attacking(idle_subscribers, replica.port, 2100) as report:
            hurt = [attacked(timer) for timer in timers]
            view = replica_view(router)[replica.url]
    answers = report["answers"]
    print(f"\nidle KV event subscribers: {answers}; knocks {report['knock_answers']}")
    # The router's own stream holds one of the places.
    assert 1 <= answers["200"] <= KV_SUBSCRIBERS - 1 and sum(answers.values()) == 2100
    assert set(answers) <= {"200", "503 too_many_kv_event_subscribers", "503 too_many_connections"}
    assert report["knocks"] > 0 and set(report["knock_answers"]) <= set(answers) - {"200"}
    assert view["healthy"] and view["kv_synced"]
    names = ["good requests via the router", "good requests to the replica", "its /health"]
    for name, q, a in zip(names, quiet, hurt, strict=True):
        assert_unharmed(f"{name} beside 2,100 idle KV event subscribers", q, a)
