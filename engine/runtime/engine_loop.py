"""The two threads behind AsyncEngine: the engine loop, and the output worker it feeds.

LLMEngine is not thread-safe, so exactly one thread ever touches its scheduler and model: the
engine thread. It drains a command queue between steps and runs only the engine half of each
step (`step_core`: token ids, finish reasons, logprobs). The output half (detokenizing, stop
strings, RequestOutputs) runs on one output worker thread that owns the OutputProcessor, fed by a
bounded queue: when the worker falls behind, the engine thread waits for it rather than piling up
outputs. Neither runs on the event loop; both post their results to it.

    event loop                   engine thread                       output worker
    ----------                   -------------                       -------------
    add / abort / call  ------>  commands (between steps)
                                 engine.step_core()  -- bounded -->  OutputProcessor.process()
    on_step()      <-----------  stats, new KV event batches
    on_outputs()   <-------------------------------------------------  RequestOutputs, stats
                                 engine.finish_stopped() <-- cmd ---  requests a stop string ended

A request's registration with the output path travels in the same queue as its core outputs, ahead
of them, so the worker always knows a request before its first output.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from engine.core.kv_events import KVEventBatch
from engine.core.scheduler_output import EngineCoreOutput
from engine.core.scheduler_stats import SchedulerStats
from engine.runtime.output_processor import NewRequest
from engine.runtime.outputs import IterationStats, RequestOutput

if TYPE_CHECKING:
    from engine.inputs.engine_request import EngineRequest
    from engine.runtime.llm_engine import LLMEngine

logger = logging.getLogger("pagedock.async_engine")
# How long the idle engine thread sleeps on its queue before looking at the stop flag again.
_IDLE_POLL_S = 0.5
# Steps the output worker may lag behind the engine before the engine thread waits for it.
_MAX_PENDING_STEPS = 32


@dataclass
class Command:
    """Work for the engine thread. `add` queues `request` (LLMEngine.add_engine_request: a
    NewRequest for the output worker); the others run `fn`, `abort` returning core outputs.
    `call` and `add` resolve `future` on the event loop."""

    kind: Literal["add", "abort", "call", "finish", "stop"]
    fn: Callable[[LLMEngine], Any] | None = None
    future: asyncio.Future[Any] | None = None
    request: EngineRequest | None = None


@dataclass
class StepReport:
    """Engine thread -> event loop, after every step or batch of commands."""

    stats: SchedulerStats
    kv_batches: list[KVEventBatch] | None  # None: the log dropped batches we had not read
    num_adds: int


@dataclass
class OutputBatch:
    """Output worker -> event loop: one step's outputs."""

    outputs: list[RequestOutput]
    stats: IterationStats


@dataclass
class _OutputWork:
    """Engine thread -> output worker: one step's core outputs, new requests first."""

    new_requests: list[NewRequest] = field(default_factory=list)
    core_outputs: list[EngineCoreOutput] = field(default_factory=list)
    time: float = 0.0


class LoopCallbacks:
    """Where the threads' results go; each is called on the event loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_step: Callable[[StepReport], None],
        on_outputs: Callable[[OutputBatch], None],
        on_dead: Callable[[BaseException], None],
    ) -> None:
        self.loop = loop
        self.on_step = on_step
        self.on_outputs = on_outputs
        self.on_dead = on_dead

    def post(self, fn: Callable[..., None], *args: Any) -> None:
        # A closed loop means the server is gone: nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(fn, *args)


class EngineLoop:
    def __init__(self, engine: LLMEngine, commands: queue.SimpleQueue[Command]) -> None:
        self.engine = engine
        self.commands = commands
        self.done = threading.Event()
        # When the loop last went round (a step done, or an idle poll): a hung step — a deadlocked
        # kernel, a stuck device — shows as this growing old. A float store is atomic, no lock.
        self.heartbeat = time.monotonic()
        self._kv_seq = engine.kv_events.last_seq
        # What killed the loop, if something did (read once `done` is set).
        self.error: BaseException | None = None

    def run(self, callbacks: LoopCallbacks) -> None:
        """The engine thread, until a `stop` command or death; starts and stops the worker."""
        self.heartbeat = time.monotonic()
        worker = OutputWorker(self.engine, self.commands, callbacks)
        worker.start()
        try:
            self._loop(worker, callbacks)
        except BaseException as e:  # the loop must report its death, whatever killed it
            logger.exception("the engine loop died")
            self.error = e
            callbacks.post(callbacks.on_dead, e)
        finally:
            worker.stop()
            self.done.set()

    def _loop(self, worker: OutputWorker, callbacks: LoopCallbacks) -> None:
        while True:
            self.heartbeat = time.monotonic()
            if worker.error is not None:
                raise worker.error
            self.engine.check_workers()  # a dead tensor-parallel rank ends the loop, idle or not
            commands = self._take_commands()
            stop = any(c.kind == "stop" for c in commands)
            work = self._apply((c for c in commands if c.kind != "stop"), callbacks)
            if not stop and self.engine.has_unfinished_requests():
                work.core_outputs.extend(self.engine.step_core())
            elif not commands:
                continue  # idle: nothing changed, nothing to report
            work.time = time.monotonic()
            if work.new_requests or work.core_outputs:
                worker.put(work)
            callbacks.post(callbacks.on_step, self._report(commands))
            if stop:
                return

    def _take_commands(self) -> list[Command]:
        commands: list[Command] = []
        if not self.engine.has_unfinished_requests():
            try:  # idle: sleep until there is something to do
                commands.append(self.commands.get(timeout=_IDLE_POLL_S))
            except queue.Empty:
                return commands
        while True:
            try:
                commands.append(self.commands.get_nowait())
            except queue.Empty:
                return commands

    def _apply(self, commands: Iterable[Command], callbacks: LoopCallbacks) -> _OutputWork:
        """Run the commands; new requests and abort outputs go to the worker with the step's."""
        work = _OutputWork()
        for command in commands:
            try:
                result = self._run(command)
            except Exception as e:
                if command.future is None:
                    logger.exception("engine command %s failed", command.kind)
                else:
                    callbacks.post(_reject, command.future, e)
                continue
            if command.kind == "add":
                work.new_requests.append(result)
                result = None
            elif command.kind == "abort":
                work.core_outputs.extend(result)
            if command.future is not None:
                callbacks.post(_resolve, command.future, result)
        return work

    def _run(self, command: Command) -> Any:
        if command.kind == "add":
            assert command.request is not None
            return self.engine.add_engine_request(command.request)
        assert command.fn is not None
        return command.fn(self.engine)

    def _report(self, commands: list[Command]) -> StepReport:
        kv_batches = self.engine.kv_events.since(self._kv_seq)
        self._kv_seq = self.engine.kv_events.last_seq
        num_adds = sum(c.kind == "add" for c in commands)
        return StepReport(self.engine.stats(), kv_batches, num_adds)


class OutputWorker:
    """The output path's thread: registers requests, processes core outputs, posts the results,
    and hands requests a stop string ended back to the engine thread."""

    def __init__(
        self, engine: LLMEngine, commands: queue.SimpleQueue[Command], callbacks: LoopCallbacks
    ) -> None:
        self.processor = engine.output_processor  # owned by this thread from now on
        self.commands = commands
        self.callbacks = callbacks
        self.error: BaseException | None = None
        self._queue: queue.Queue[_OutputWork | None] = queue.Queue(maxsize=_MAX_PENDING_STEPS)
        self._thread = threading.Thread(target=self._run, name="pagedock-output", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, work: _OutputWork) -> None:
        """Blocks while the worker is _MAX_PENDING_STEPS behind."""
        self._queue.put(work)

    def stop(self) -> None:
        """Process what is queued, then end the thread."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (work := self._queue.get()) is not None:
            if self.error is not None:
                continue  # dead: keep draining so the engine thread never blocks on put()
            try:
                self._process(work)
            except BaseException as e:
                # NOTE: the engine thread sees this at its next command check and dies with it.
                logger.exception("the output worker died")
                self.error = e

    def _process(self, work: _OutputWork) -> None:
        for new in work.new_requests:
            self.processor.add_request(new)
        processed = self.processor.process(work.core_outputs, work.time)
        stopped = processed.stopped_by_string
        if stopped:
            # Before the outputs go out: a caller that saw the final output and then asks the
            # engine anything finds the request finished and its blocks freed.
            self.commands.put(Command("finish", lambda engine: engine.finish_stopped(stopped)))
        callbacks = self.callbacks
        callbacks.post(callbacks.on_outputs, OutputBatch(processed.outputs, processed.stats))


def _resolve(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _reject(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
