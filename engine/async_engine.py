"""AsyncEngine: the LLMEngine loop on its own thread, an asyncio stream per request.

LLMEngine is not thread-safe, so exactly one thread ever touches it: the engine thread. The event
loop talks to it through a command queue that the thread drains between steps (add, abort,
snapshot of the KV cache, ...); results come back with `loop.call_soon_threadsafe`, once per step
for every output of the step together.

    event loop                               engine thread
    ----------                               -------------
    add_request() --- command queue ----->   drain commands (add / abort / call)
    abort()                                  engine.step()        (torch releases the GIL)
    _on_step()    <-- call_soon_threadsafe   outputs + stats + new KV event batches

Where the loop runs: `start()` gives it a thread of its own (tests, embedding); `pagedock serve`
instead runs it on the process's main thread (`run_on_this_thread`) with uvicorn on a second
thread. Measured on 2 cores, torch's OpenMP regions entered from a non-main thread ran 7-25 %
slower (the same decode work at batch 16: 171.6 against 184.7 generated tok/s), and that was most
of the gap between online and offline throughput.

Admission control lives here because only the step results say how many requests wait: the number
waiting after the last step plus the adds queued since then must stay below `max_waiting`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from engine.core.kv_events import KVEventBatch
from engine.errors import EngineDeadError, PagedockError, UnknownRequestError
from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams
from engine.server.request_metrics import record_finished, record_output
from engine.server.request_stream import RequestStream

if TYPE_CHECKING:
    from engine.llm_engine import EngineStats, LLMEngine
    from engine.server.metrics import EngineMetrics

logger = logging.getLogger("pagedock.async_engine")
T = TypeVar("T")
# How long the idle engine thread sleeps on its queue before looking at the stop flag again.
_IDLE_POLL_S = 0.5


class QueueFullError(PagedockError):
    """More requests wait than --max-waiting allows: HTTP 429, try again later."""


@dataclass
class KVSnapshot:
    """Every cached block hash, and the sequence number of the last event batch it includes."""

    seq: int
    block_size: int
    block_hashes: list[bytes]


@dataclass
class _Command:
    kind: Literal["add", "abort", "call", "stop"]
    fn: Callable[[LLMEngine], Any] | None = None
    future: asyncio.Future[Any] | None = None


@dataclass
class _StepResult:
    outputs: list[RequestOutput]
    stats: EngineStats
    kv_batches: list[KVEventBatch] | None  # None: the log dropped batches we had not read
    num_adds: int
    time: float


KVListener = Callable[[list[KVEventBatch] | None], None]


class AsyncEngine:
    def __init__(
        self,
        engine: LLMEngine,
        max_waiting: int | None = None,
        metrics: EngineMetrics | None = None,
        log_prompts: bool = False,
        own_thread: bool = True,
    ) -> None:
        self.engine = engine
        self.own_thread = own_thread
        self.max_waiting = max_waiting
        self.metrics = metrics
        self.log_prompts = log_prompts
        self.stats: EngineStats = engine.stats()
        self._streams: dict[str, RequestStream] = {}
        self._commands: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self._pending_adds = 0
        self._kv_listeners: list[KVListener] = []
        self._kv_seq = engine.kv_events.last_seq
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._running = False
        self._loop_ready = threading.Event()
        self._loop_done = threading.Event()
        self._dead: BaseException | None = None

    # ---- lifecycle (event loop) ---------------------------------------------------------------

    def start(self) -> None:
        """Bind to the running event loop. With own_thread the engine loop starts on a new
        thread; without, the thread blocked in `run_on_this_thread` takes it up."""
        self._loop = asyncio.get_running_loop()
        self._running = True
        if self.own_thread:
            self._thread = threading.Thread(target=self._run, name="pagedock-engine", daemon=True)
            self._thread.start()
        self._loop_ready.set()

    def run_on_this_thread(self, keep_waiting: Callable[[], bool]) -> bool:
        """Wait for `start()` (own_thread=False), then run the engine loop here until shutdown.
        Returns False if `keep_waiting()` turned false before the loop was started (the server
        never came up)."""
        while not self._loop_ready.wait(0.1):
            if not keep_waiting():
                return False
        self._run()
        return True

    async def shutdown(self, timeout_s: float = 10.0) -> None:
        if not self._running:
            return
        self.request_stop()
        await asyncio.to_thread(self._loop_done.wait, timeout_s)

    def request_stop(self) -> None:
        """Ask the engine loop to return at its next step boundary (from any thread)."""
        self._commands.put(_Command("stop"))

    @property
    def is_alive(self) -> bool:
        return self._dead is None and self._running and not self._loop_done.is_set()

    @property
    def num_in_flight(self) -> int:
        return len(self._streams)

    def add_kv_listener(self, listener: KVListener) -> None:
        """Called on the loop with each step's new KV event batches (None after a gap)."""
        self._kv_listeners.append(listener)

    # ---- requests (event loop) ----------------------------------------------------------------

    async def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        priority: int = 0,
        arrival_time: float | None = None,
        prompt_text: str | None = None,
    ) -> RequestStream:
        """Queue a request; its stream once the engine accepted it. InvalidRequestError (bad
        input), QueueFullError (admission), EngineDeadError."""
        self._check_admission()
        arrival = time.monotonic() if arrival_time is None else arrival_time
        stream = RequestStream(request_id, len(prompt_token_ids), arrival, prompt_text)
        self._streams[request_id] = stream
        self._pending_adds += 1

        def add(engine: LLMEngine) -> None:
            engine.add_request(request_id, prompt_token_ids, params, priority, arrival)

        try:
            await self._submit("add", add)
        except asyncio.CancelledError:
            # The client left while the add was queued: it may still land, so abort it too.
            self.abort(request_id)
            raise
        except BaseException:
            self._streams.pop(request_id, None)
            raise
        return stream

    def abort(self, request_id: str) -> None:
        """Stop a request at the next step boundary and free its blocks; a no-op once finished."""
        if not self._running or request_id not in self._streams:
            return

        def abort(engine: LLMEngine) -> RequestOutput | None:
            try:
                return engine.abort_request(request_id)
            except UnknownRequestError:
                return None

        self._commands.put(_Command("abort", abort))

    def abort_all(self) -> None:
        for request_id in list(self._streams):
            self.abort(request_id)

    async def call(self, fn: Callable[[LLMEngine], T]) -> T:
        """Run `fn(engine)` on the engine thread, between steps."""
        result: T = await self._submit("call", fn)
        return result

    async def kv_snapshot(self) -> KVSnapshot:
        """The cached-hash set and the seq it is current at, taken on the engine thread so that
        every batch after `seq` is a change to exactly this set."""
        return await self.call(_take_kv_snapshot)

    def _check_admission(self) -> None:
        if self._dead is not None or not self._running:
            raise EngineDeadError("the engine loop is not running")
        if self.max_waiting is None:
            return
        waiting = self.stats.num_waiting + self._pending_adds
        if waiting >= self.max_waiting:
            raise QueueFullError(
                f"the server is at capacity: {waiting} requests are waiting (limit "
                f"{self.max_waiting}); retry shortly"
            )

    async def _submit(self, kind: Literal["add", "call"], fn: Callable[[LLMEngine], Any]) -> Any:
        if self._dead is not None:
            raise EngineDeadError("the engine loop has stopped")
        assert self._loop is not None
        future: asyncio.Future[Any] = self._loop.create_future()
        self._commands.put(_Command(kind, fn, future))
        return await future

    # ---- the engine thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                commands = self._take_commands()
                if any(c.kind == "stop" for c in commands):
                    self._apply(c for c in commands if c.kind != "stop")
                    return
                outputs = self._apply(commands)
                if self.engine.has_unfinished_requests():
                    outputs.extend(self.engine.step())
                elif not commands:
                    continue  # idle: nothing changed, nothing to report
                self._post(self._on_step, self._step_result(outputs, commands))
        except BaseException as e:  # the loop must report its death, whatever killed it
            logger.exception("the engine loop died")
            self._post(self._on_dead, e)
        finally:
            self._loop_done.set()

    def _take_commands(self) -> list[_Command]:
        commands: list[_Command] = []
        if not self.engine.has_unfinished_requests():
            try:  # idle: sleep until there is something to do
                commands.append(self._commands.get(timeout=_IDLE_POLL_S))
            except queue.Empty:
                return commands
        while True:
            try:
                commands.append(self._commands.get_nowait())
            except queue.Empty:
                return commands

    def _apply(self, commands: Any) -> list[RequestOutput]:
        """Run the commands; outputs of aborted requests go back with the step's."""
        outputs: list[RequestOutput] = []
        for command in commands:
            assert command.fn is not None
            try:
                result = command.fn(self.engine)
            except Exception as e:
                if command.future is None:
                    logger.exception("engine command %s failed", command.kind)
                else:
                    self._post(_reject, command.future, e)
                continue
            if command.future is not None:
                self._post(_resolve, command.future, result)
            elif isinstance(result, RequestOutput):
                outputs.append(result)
        return outputs

    def _step_result(self, outputs: list[RequestOutput], commands: list[_Command]) -> _StepResult:
        _fill_queue_times(self.engine, outputs)
        kv_batches = self.engine.kv_events.since(self._kv_seq)
        self._kv_seq = self.engine.kv_events.last_seq
        num_adds = sum(c.kind == "add" for c in commands)
        return _StepResult(outputs, self.engine.stats(), kv_batches, num_adds, time.monotonic())

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        # A closed loop means the server is gone: nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(fn, *args)

    # ---- back on the event loop ---------------------------------------------------------------

    def _on_step(self, result: _StepResult) -> None:
        self._pending_adds -= result.num_adds
        self.stats = result.stats
        if self.metrics is not None:
            self.metrics.observe_stats(result.stats)
        for output in result.outputs:
            self._deliver(output, result.time)
        if result.kv_batches is None or result.kv_batches:
            for listener in self._kv_listeners:
                listener(result.kv_batches)

    def _deliver(self, output: RequestOutput, now: float) -> None:
        stream = self._streams.get(output.request_id)
        if stream is None:
            return
        record_output(self.metrics, stream, output, now)
        stream.put(output)
        if output.finished:
            del self._streams[output.request_id]
            record_finished(self.metrics, stream, output, now, self.log_prompts)

    def _on_dead(self, error: BaseException) -> None:
        self._dead = error
        dead = EngineDeadError(f"the engine loop died: {type(error).__name__}: {error}")
        for stream in self._streams.values():
            stream.fail(dead)
        self._streams.clear()
        while True:  # commands nobody will run: fail their callers
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                break
            if command.future is not None and not command.future.done():
                command.future.set_exception(dead)


def _resolve(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _reject(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _take_kv_snapshot(engine: LLMEngine) -> KVSnapshot:
    pool = engine.scheduler.kv_cache_manager.pool
    # NOTE: events the pool recorded since the last step (none today; aborts only free blocks)
    # are published first, so the snapshot never runs ahead of `seq`.
    engine.kv_events.publish(pool.take_events())
    return KVSnapshot(engine.kv_events.last_seq, pool.block_size, list(pool.cached_blocks))


def _fill_queue_times(engine: LLMEngine, outputs: list[RequestOutput]) -> None:
    """Copy the scheduler's first-scheduled time into the outputs' metrics (queue-time metric)."""
    requests = engine.scheduler.requests
    for output in outputs:
        m = output.metrics
        if m is None or m.first_scheduled_time is not None:
            continue
        request = requests.get(output.request_id)
        scheduled = None if request is None else request.scheduled_time
        if scheduled is not None:
            m.first_scheduled_time = scheduled
