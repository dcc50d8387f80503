"""Compiles structured-outputs constraints into xgrammar grammars: off the caller's thread, with a
timeout, cached by constraint.

Compiling a JSON schema takes milliseconds to seconds (it grows with the schema and the
vocabulary), so neither the event loop nor the engine thread ever does it: both hand the work to
a small thread pool here and wait on a future. Equal constraints share one compilation (the
cache holds futures, so concurrent requests with one schema compile it once); a failure is not
cached. A compilation that outlives its timeout fails its request, but a pool thread can't be
interrupted: it finishes in the background, bounded by the size cap on constraints and the cap on
a schema's properties (compile time grows with their cube: 2,000 took 78 s).

The queue is bounded: past MAX_PENDING_COMPILES compilations waiting or running, a new constraint
is refused at once (429, CompileQueueFullError) instead of queueing behind them; a compilation
nobody waits for any more (its clients timed out or left) is cancelled before it starts. A
constraint the engine found too costly to evaluate (`condemn`, StructuredOutputManager's budget)
is refused from then on with the reason.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from engine.inputs.sampling_params import StructuredOutputsParams
from pagedock.errors import InvalidRequestError, PagedockError

if TYPE_CHECKING:
    import xgrammar

    from pagedock.text.tokenizer import Tokenizer

logger = logging.getLogger("pagedock.engine")

DEFAULT_COMPILE_TIMEOUT_S = 30.0
"""How long one compilation may take before its request fails (a loaded CPU is slow)."""
DEFAULT_CACHE_SIZE = 256
"""Compiled grammars kept (least recently used dropped first)."""
_NUM_COMPILE_THREADS = 2
MAX_PENDING_COMPILES = 32
"""Compilations queued or running at once; more are refused (429). Two threads compile, a typical
schema in ~0.2 s, the largest allowed (MAX_SCHEMA_PROPERTIES) in seconds: a longer queue would
only have its tail time out."""

# xgrammar's C++ errors start with "[hh:mm:ss] /path/file.cc:123: "; the client needs the rest.
_CPP_PREFIX = re.compile(r"^\[[\d:]+\] \S+:\d+: ")


class CompileQueueFullError(PagedockError):
    """Too many structured-outputs constraints are compiling: HTTP 429, try again later."""


class GrammarCompiler:
    """Thread-safe: `submit` may be called from any thread."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        vocab_size: int,
        stop_token_ids: list[int],
        cache_size: int = DEFAULT_CACHE_SIZE,
        timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
    ) -> None:
        self.vocab_size = vocab_size
        self.timeout_s = timeout_s
        self._cache_size = cache_size
        self._tokenizer = tokenizer
        self._stop_token_ids = stop_token_ids
        # Built by the first compilation, on a pool thread: it reads the whole vocabulary (~1 s).
        self._compiler: xgrammar.GrammarCompiler | None = None
        self._compiler_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            _NUM_COMPILE_THREADS, thread_name_prefix="pagedock-grammar"
        )
        self._cache: OrderedDict[tuple[str, str], concurrent.futures.Future[Any]] = OrderedDict()
        # Reentrant: a future's done callbacks run at once in the thread that finishes or
        # cancels it, which may hold the lock already.
        self._lock = threading.RLock()
        self._waiters: dict[concurrent.futures.Future[Any], int] = {}
        """Callers waiting on each compilation not finished yet (`submit` .. `give_up`)."""
        self._condemned: OrderedDict[tuple[str, str], str] = OrderedDict()
        """Constraints too costly to evaluate, and why: refused on sight."""

    def submit(self, params: StructuredOutputsParams) -> concurrent.futures.Future[Any]:
        """The compiled grammar, as a future (resolved at once on a cache hit). Its exception is
        an InvalidRequestError naming what is wrong with the constraint; CompileQueueFullError
        (raised, not in the future) when MAX_PENDING_COMPILES compilations are pending. A caller
        that stops waiting before the future is done calls `give_up` with it."""
        key = params.key
        with self._lock:
            reason = self._condemned.get(key)
            if reason is not None:
                return _failed(InvalidRequestError(reason, "structured_outputs"))
            future = self._cache.get(key)
            if future is not None:
                self._cache.move_to_end(key)
                self._wait_on(future)
                return future
            if len(self._waiters) >= MAX_PENDING_COMPILES:
                raise CompileQueueFullError(
                    f"{MAX_PENDING_COMPILES} structured-outputs constraints are compiling "
                    "already; retry shortly"
                )
            future = self._pool.submit(self._compile, params)
            self._cache[key] = future
            self._wait_on(future)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        future.add_done_callback(lambda f: self._forget_failure(key, f))
        return future

    def give_up(self, future: concurrent.futures.Future[Any]) -> None:
        """One caller no longer waits for `future`: when nobody does, a compilation not started
        is cancelled (one already running can't be stopped; it finishes into the cache)."""
        with self._lock:
            if future not in self._waiters:
                return
            self._waiters[future] -= 1
            if self._waiters[future] <= 0:
                future.cancel()  # its done callbacks (_finished, _forget_failure) tidy up

    def condemn(self, compiled: Any, reason: str) -> None:
        """`compiled` went over the engine's mask budget: its constraint is refused from now on,
        with `reason` (any thread)."""
        with self._lock:
            for key, future in list(self._cache.items()):
                if future.done() and future.exception() is None and future.result() is compiled:
                    del self._cache[key]
                    self._condemned[key] = reason
            while len(self._condemned) > self._cache_size:
                self._condemned.popitem(last=False)

    def _wait_on(self, future: concurrent.futures.Future[Any]) -> None:
        """(Under the lock.) One more caller waits for a compilation not finished yet."""
        if not future.done():
            self._waiters[future] = self._waiters.get(future, 0) + 1
            future.add_done_callback(self._finished)

    def _finished(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._waiters.pop(future, None)

    def compile(self, params: StructuredOutputsParams) -> xgrammar.CompiledGrammar:
        """Compile on the pool and wait (at most the timeout): for callers without an event loop."""
        future = self.submit(params)
        try:
            return future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            raise self.timeout_error(params) from None

    def timeout_error(self, params: StructuredOutputsParams) -> InvalidRequestError:
        return InvalidRequestError(
            f"compiling the structured-outputs {params.kind} constraint took longer than "
            f"{self.timeout_s:g} s; simplify it",
            "structured_outputs",
        )

    def warm_up(self) -> concurrent.futures.Future[Any]:
        """Build xgrammar's compiler and compile one small grammar, on the pool: what the first
        guided request would otherwise do (the import and the vocabulary's TokenizerInfo hold
        the GIL for up to half a second at a time, a stall of every other request). The server
        waits for it before it is ready."""
        return self._pool.submit(self._compile, StructuredOutputsParams(json_object=True))

    def cache_len(self) -> int:
        with self._lock:
            return len(self._cache)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _forget_failure(self, key: tuple[str, str], future: concurrent.futures.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            with self._lock:
                if self._cache.get(key) is future:
                    del self._cache[key]

    def _compile(self, params: StructuredOutputsParams) -> xgrammar.CompiledGrammar:
        try:
            compiled = self._compile_kind(params)
            _check_matches_something(compiled, self.vocab_size)
            return compiled
        except Exception as e:  # xgrammar raises RuntimeError from C++ for every bad input
            message = _CPP_PREFIX.sub("", str(e)).strip() or type(e).__name__
            raise InvalidRequestError(
                f"invalid structured-outputs {params.kind}: {message}", "structured_outputs"
            ) from None

    def _xgrammar_compiler(self) -> xgrammar.GrammarCompiler:
        with self._compiler_lock:
            if self._compiler is None:
                import xgrammar as xgr

                vocab = self._tokenizer.vocabulary()[: self.vocab_size]
                info = xgr.TokenizerInfo(
                    vocab,
                    xgr.VocabType.BYTE_LEVEL,
                    vocab_size=self.vocab_size,
                    stop_token_ids=self._stop_token_ids,
                )
                # Our cache is keyed by constraint and bounded by count; xgrammar's would be a
                # second copy.
                self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
            return self._compiler

    def _compile_kind(self, params: StructuredOutputsParams) -> xgrammar.CompiledGrammar:
        compiler = self._xgrammar_compiler()
        kind = params.kind
        if kind == "json":
            # Compact JSON (no free whitespace): a small model can otherwise pad forever.
            return compiler.compile_json_schema(json.dumps(params.json), any_whitespace=False)
        if kind == "json_object":
            return compiler.compile_json_schema(
                '{"type": "object"}', any_whitespace=False, strict_mode=False
            )
        if kind == "regex":
            assert params.regex is not None
            return compiler.compile_regex(params.regex)
        if kind == "choice":
            assert params.choice is not None
            # EBNF string literals take JSON's escapes, so each choice matches itself exactly.
            alternatives = " | ".join(json.dumps(c, ensure_ascii=False) for c in params.choice)
            return compiler.compile_grammar(f"root ::= {alternatives}")
        assert params.grammar is not None
        return compiler.compile_grammar(params.grammar)


def _check_matches_something(compiled: xgrammar.CompiledGrammar, vocab_size: int) -> None:
    """ValueError when no output can even begin: no token is allowed first and the empty text is
    not a match (a rule defined only by itself, `a ::= a`). Sampling would otherwise draw from a
    fully masked row and fail the request inside the engine."""
    import xgrammar as xgr

    from engine.structured_outputs.structured_output_manager import unpack_bitmask

    matcher = xgr.GrammarMatcher(compiled)
    bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    if matcher.is_completed() or bool(unpack_bitmask(bitmask, vocab_size).any()):
        return
    raise ValueError(
        "it matches no text: no token can start the output (does a rule refer only to itself, "
        "with no alternative that ends, as in `a ::= a`?)"
    )


def _failed(error: Exception) -> concurrent.futures.Future[Any]:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_exception(error)
    return future
