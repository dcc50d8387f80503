"""AsyncEngine: the LLMEngine behind an asyncio API, one output stream per request.

The engine runs on an engine thread and its output path on an output worker thread (see
engine/runtime/engine_loop.py); this module is the event loop's side: commands in, RequestStreams
out, listeners for whoever records metrics (the server installs its own: nothing here knows HTTP).

Where the engine loop runs: `start()` gives it a thread of its own (tests, embedding); `pagedock
serve` instead runs it on the process's main thread (`run_on_this_thread`) with uvicorn on a
second thread. Measured on 2 cores, torch's OpenMP regions entered from a non-main thread ran
7-25 % slower (the same decode work at batch 16: 171.6 against 184.7 generated tok/s), and that
was most of the gap between online and offline throughput.

Admission control lives here because only the step results say how many requests wait: the number
waiting after the last step plus the adds queued since then must stay below `max_waiting`.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from engine.core.kv_events import KVEventBatch, KVSnapshot
from engine.core.scheduler_stats import SchedulerStats
from engine.inputs.engine_request import DEFAULT_TENANT, AdapterRef, EngineRequest
from engine.inputs.sampling_params import SamplingParams
from engine.lora.adapter_registry import ServedAdapter
from engine.runtime.engine_loop import Command, EngineLoop, LoopCallbacks, OutputBatch, StepReport
from engine.runtime.outputs import IterationStats
from engine.runtime.request_stream import RequestStream
from pagedock.errors import EngineDeadError, PagedockError, UnknownRequestError

if TYPE_CHECKING:
    from engine.core.scheduler_output import EngineCoreOutput
    from engine.inputs.input_processor import InputProcessor
    from engine.runtime.llm_engine import LLMEngine

__all__ = ["AsyncEngine", "QueueFullError", "RequestStream"]
T = TypeVar("T")

KVListener = Callable[[list[KVEventBatch] | None], None]
StatsListener = Callable[[SchedulerStats], None]
OutputListener = Callable[[IterationStats], None]


class QueueFullError(PagedockError):
    """More requests wait than --max-waiting allows: HTTP 429, try again later."""


class AsyncEngine:
    def __init__(
        self, engine: LLMEngine, max_waiting: int | None = None, own_thread: bool = True
    ) -> None:
        self.engine = engine
        self.own_thread = own_thread
        self.max_waiting = max_waiting
        self.stats: SchedulerStats = engine.stats()
        self._streams: dict[str, RequestStream] = {}
        self._commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._engine_loop = EngineLoop(engine, self._commands)
        self._pending_adds = 0
        self._kv_listeners: list[KVListener] = []
        self._stats_listeners: list[StatsListener] = []
        self._output_listeners: list[OutputListener] = []
        self._callbacks: LoopCallbacks | None = None
        self._running = False
        self._loop_ready = threading.Event()
        self._dead: BaseException | None = None
        # Set (and replaced) after every report from the engine thread: what waits for the engine
        # to change (a LoRA adapter's unloading to end) waits on it.
        self._stepped = asyncio.Event()

    # ---- lifecycle (event loop) ---------------------------------------------------------------

    def start(self) -> None:
        """Bind to the running event loop. With own_thread the engine loop starts on a new
        thread; without, the thread blocked in `run_on_this_thread` takes it up."""
        loop = asyncio.get_running_loop()
        self._callbacks = LoopCallbacks(loop, self._on_step, self._on_outputs, self._on_dead)
        self._running = True
        if self.own_thread:
            thread = threading.Thread(target=self._run, name="pagedock-engine", daemon=True)
            thread.start()
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
        await asyncio.to_thread(self._engine_loop.done.wait, timeout_s)

    def request_stop(self) -> None:
        """Ask the engine loop to return at its next step boundary (from any thread)."""
        self._commands.put(Command("stop"))

    @property
    def is_alive(self) -> bool:
        done = self._engine_loop.done.is_set()
        return self._dead is None and self._running and not done

    @property
    def loop_error(self) -> BaseException | None:
        """What killed the engine loop (None while it runs, or after a clean stop)."""
        return self._engine_loop.error

    @property
    def seconds_since_progress(self) -> float:
        """Seconds since the engine loop last went round; it goes round at least every idle poll,
        so a large value means one step (or one call) has not returned."""
        return time.monotonic() - self._engine_loop.heartbeat

    @property
    def input_processor(self) -> InputProcessor:
        """The engine's input processor (thread-safe): what `add_request` checks requests with,
        for callers that must refuse exactly what generation refuses (the render endpoints)."""
        return self.engine.input_processor

    @property
    def num_in_flight(self) -> int:
        return len(self._streams)

    def add_kv_listener(self, listener: KVListener) -> None:
        """Called on the loop with each step's new KV event batches (None after a gap)."""
        self._kv_listeners.append(listener)

    def add_stats_listener(self, listener: StatsListener) -> None:
        """Called on the loop with the scheduler's stats after each step."""
        self._stats_listeners.append(listener)

    def add_output_listener(self, listener: OutputListener) -> None:
        """Called on the loop with what each step's outputs add to the request metrics."""
        self._output_listeners.append(listener)

    # ---- requests (event loop) ----------------------------------------------------------------

    async def add_request(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, **kw: Any
    ) -> RequestStream:
        """`prepare_request` (its keywords too), then `queue_request`."""
        request = await self.prepare_request(request_id, prompt_token_ids, params, **kw)
        return await self.queue_request(request)

    async def prepare_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        priority: int = 0,
        arrival_time: float | None = None,
        prompt_text: str | None = None,
        prior_output_token_ids: list[int] | None = None,
        lora_request: AdapterRef | None = None,
        cache_salt: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> EngineRequest:
        """A request checked and ready to queue: InvalidRequestError (bad input), QueueFullError
        (admission). `prompt_text`: what the ids were made from, for the outputs and the request
        log; `prior_output_token_ids`: a continuation (engine/inputs/continuation.py); `tenant`:
        who it belongs to. A structured-outputs constraint is compiled first, on the compiler's
        pool: never on the event loop or the engine thread. Then the engine's input processor
        checks the request, here."""
        started = time.monotonic()
        grammar = await self._compile_grammar(params)
        waited = None if grammar is None else (started, time.monotonic())  # for its trace
        self.check_admission()
        return self.input_processor.process(
            request_id,
            prompt_token_ids,
            params,
            prompt_text=prompt_text,
            priority=priority,
            arrival_time=arrival_time,
            prior_output_token_ids=prior_output_token_ids or (),
            grammar=grammar,
            grammar_compile=waited,
            lora_request=lora_request,
            cache_salt=cache_salt,
            tenant=tenant,
        )

    async def queue_request(self, request: EngineRequest) -> RequestStream:
        """The add command: the engine thread queues a prepared request
        (LLMEngine.add_engine_request); its stream once it did. EngineDeadError."""
        request_id = request.request_id
        stream = self._streams[request_id] = RequestStream(request_id)
        self._pending_adds += 1
        try:
            await self._submit(Command("add", request=request))
        except asyncio.CancelledError:
            # The client left while the add was queued: it may still land, so abort it too.
            self.abort(request_id)
            raise
        except BaseException:
            self._streams.pop(request_id, None)
            raise
        return stream

    async def _compile_grammar(self, params: SamplingParams) -> object | None:
        constraint = params.structured_outputs
        if constraint is None:
            return None
        guided = self.engine.guided
        compiling = guided.submit(constraint)
        future = asyncio.wrap_future(compiling)
        try:
            # shield: the compilation is shared with every request of the same constraint, so
            # this request giving up (timeout, client gone) must not cancel it; give_up cancels
            # it once nobody waits.
            return await asyncio.wait_for(asyncio.shield(future), guided.timeout_s)
        except TimeoutError:
            raise guided.timeout_error(constraint) from None
        finally:
            if not compiling.done():
                guided.give_up(compiling)

    def abort(self, request_id: str) -> None:
        """Stop a request at the next step boundary and free its blocks; a no-op once finished."""
        if not self._running or request_id not in self._streams:
            return

        def abort(engine: LLMEngine) -> list[EngineCoreOutput]:
            try:
                return engine.abort_core_request(request_id)
            except UnknownRequestError:
                return []  # finished meanwhile: its final output is on its way

        self._commands.put(Command("abort", abort))

    def abort_all(self) -> None:
        for request_id in list(self._streams):
            self.abort(request_id)

    async def call(self, fn: Callable[[LLMEngine], T]) -> T:
        """Run `fn(engine)` on the engine thread, between steps."""
        result: T = await self._submit(Command("call", fn))
        return result

    # ---- LoRA adapters at run time (engine/runtime/lora_adapters.py) ---------------------------

    async def add_lora(self, lora_request: AdapterRef) -> bool:
        """Load and serve an adapter (LLMEngine.add_lora): its files are read and checked on a
        worker thread, never on the event loop or the engine thread, then the engine thread
        serves it between steps. False when it was already served from that path. A name still
        unloading (its requests in flight) is loaded once they have finished: unloading and
        loading again is how an adapter's weights are replaced."""
        loras = self.engine.loras
        while lora_request.name in loras.registry.unloading:
            if not self.is_alive:
                raise EngineDeadError("the engine loop is not running")
            await self._stepped.wait()  # each report may be the one after the last request
        if not loras.check_new(lora_request):  # (reads the registry only: any thread may)
            return False
        adapter = await asyncio.to_thread(loras.read, lora_request)
        return await self.call(lambda engine: engine.loras.serve(adapter, lora_request.path))

    async def remove_lora(self, name: str | int) -> bool:
        """Stop serving an adapter (LLMEngine.remove_lora): at once for new requests, after their
        last step for those in flight. UnknownAdapterError when it is not served."""
        return await self.call(lambda engine: engine.remove_lora(name))

    async def list_loras(self) -> list[ServedAdapter]:
        """The served adapters, in load order (the registry is readable from any thread)."""
        return self.engine.list_loras()

    async def kv_snapshot(self) -> KVSnapshot:
        """The cached-hash set and the seq it is current at, taken on the engine thread so that
        every batch after `seq` is a change to exactly this set."""
        return await self.call(lambda engine: engine.kv_snapshot())

    def check_admission(self, num_requests: int = 1) -> None:
        """QueueFullError unless `num_requests` more may wait (a batch is admitted whole or not
        at all); EngineDeadError when the loop is not running."""
        if self._dead is not None or not self._running:
            raise EngineDeadError("the engine loop is not running")
        if self.max_waiting is None:
            return
        waiting = self.stats.num_waiting + self._pending_adds
        if waiting + num_requests > self.max_waiting:
            batch = f" and this request adds {num_requests}" if num_requests > 1 else ""
            raise QueueFullError(
                f"the server is at capacity: {waiting} requests are waiting{batch} (limit "
                f"{self.max_waiting}); retry shortly"
            )

    async def _submit(self, command: Command) -> Any:
        """Queue an `add` or a `call` for the engine thread; what it returns, or raises."""
        if self._dead is not None:
            raise EngineDeadError("the engine loop has stopped")
        command.future = asyncio.get_running_loop().create_future()
        self._commands.put(command)
        if command.request is not None:  # a newcomer may cut the step in progress short
            self.engine.step_interrupter.offer(command.request.tenant, command.request.priority)
        return await command.future

    def _run(self) -> None:
        assert self._callbacks is not None
        self._engine_loop.run(self._callbacks)

    # ---- results, back on the event loop ------------------------------------------------------

    def _on_step(self, report: StepReport) -> None:
        self._stepped.set()
        self._stepped = asyncio.Event()
        self._pending_adds -= report.num_adds
        self.stats = report.stats
        for listener in self._stats_listeners:
            listener(report.stats)
        if report.kv_batches is None or report.kv_batches:
            for kv_listener in self._kv_listeners:
                kv_listener(report.kv_batches)

    def _on_outputs(self, batch: OutputBatch) -> None:
        for output in batch.outputs:
            stream = self._streams.get(output.request_id)
            if stream is None:
                continue
            stream.put(output)
            if output.finished:
                del self._streams[output.request_id]
        for listener in self._output_listeners:
            listener(batch.stats)

    def _on_dead(self, error: BaseException) -> None:
        self._dead = error
        self._stepped.set()
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
