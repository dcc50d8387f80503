"""Compiles structured-outputs constraints into xgrammar grammars: off the caller's thread, with a
timeout, cached by constraint.

Compiling a JSON schema takes milliseconds to seconds (it grows with the schema and the
vocabulary), so neither the event loop nor the engine thread ever does it: both hand the work to
a small thread pool here and wait on a future. Equal constraints share one compilation (the
cache holds futures, so concurrent requests with one schema compile it once); a failure is not
cached. A compilation that outlives its timeout fails its request, but a pool thread can't be
interrupted: it finishes in the background, bounded by the size cap on constraints.
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
from pagedock.errors import InvalidRequestError

if TYPE_CHECKING:
    import xgrammar

    from pagedock.text.tokenizer import Tokenizer

logger = logging.getLogger("pagedock.engine")

DEFAULT_COMPILE_TIMEOUT_S = 30.0
"""How long one compilation may take before its request fails (a loaded CPU is slow)."""
DEFAULT_CACHE_SIZE = 256
"""Compiled grammars kept (least recently used dropped first)."""
_NUM_COMPILE_THREADS = 2

# xgrammar's C++ errors start with "[hh:mm:ss] /path/file.cc:123: "; the client needs the rest.
_CPP_PREFIX = re.compile(r"^\[[\d:]+\] \S+:\d+: ")


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
        self._lock = threading.Lock()

    def submit(self, params: StructuredOutputsParams) -> concurrent.futures.Future[Any]:
        """The compiled grammar, as a future (resolved at once on a cache hit). Its exception is
        an InvalidRequestError naming what is wrong with the constraint."""
        key = params.key
        with self._lock:
            future = self._cache.get(key)
            if future is not None:
                self._cache.move_to_end(key)
                return future
            future = self._pool.submit(self._compile, params)
            self._cache[key] = future
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        future.add_done_callback(lambda f: self._forget_failure(key, f))
        return future

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
            return self._compile_kind(params)
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
