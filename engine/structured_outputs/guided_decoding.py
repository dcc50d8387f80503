"""The engine's side of structured outputs: what LLMEngine calls when a guided request comes in,
finishes or is aborted. Holds the (thread-safe) compiler and, once the first guided request
arrives, the engine thread's StructuredOutputManager, which the model runner reads each step."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from engine.config import EngineConfig
from engine.inputs.sampling_params import StructuredOutputsParams
from engine.structured_outputs.grammar_compiler import GrammarCompiler
from pagedock.errors import InvalidRequestError

if TYPE_CHECKING:
    from engine.structured_outputs.structured_output_manager import StructuredOutputManager
    from engine.worker.model_runner import ModelRunner
    from pagedock.text.tokenizer import Tokenizer


class GuidedDecoding:
    def __init__(
        self,
        tokenizer: Tokenizer | None,
        vocab_size: int,
        eos_token_ids: list[int],
        config: EngineConfig | None = None,
    ) -> None:
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        budget_ms = (
            EngineConfig.max_grammar_mask_ms if config is None else config.max_grammar_mask_ms
        )
        self.max_mask_s = budget_ms / 1e3 or None
        """One token's mask budget, a row (StructuredOutputManager); None: unbounded."""
        self.compiler = (
            GrammarCompiler(tokenizer, vocab_size, eos_token_ids) if tokenizer is not None else None
        )
        self.manager: StructuredOutputManager | None = None

    @property
    def num_live(self) -> int:
        """Grammar states held now (the pagedock:structured_output_grammars gauge)."""
        return 0 if self.manager is None else self.manager.num_live

    def submit(self, params: StructuredOutputsParams) -> concurrent.futures.Future[Any]:
        """Start compiling (any thread); the future's error is an InvalidRequestError."""
        return self._compiler().submit(params)

    def give_up(self, future: concurrent.futures.Future[Any]) -> None:
        """A caller of `submit` stops waiting (GrammarCompiler.give_up)."""
        self._compiler().give_up(future)

    @property
    def timeout_s(self) -> float:
        return self._compiler().timeout_s

    def timeout_error(self, params: StructuredOutputsParams) -> InvalidRequestError:
        return self._compiler().timeout_error(params)

    def warm_up(self) -> concurrent.futures.Future[Any] | None:
        """Ready the grammar compiler ahead of the first guided request (None: this model has
        no tokenizer, so no structured outputs)."""
        return None if self.compiler is None else self.compiler.warm_up()

    def compiled(self, params: StructuredOutputsParams | None, compiled: Any) -> Any:
        """The request's compiled grammar: `compiled` when the caller compiled it already (off
        the engine thread), else compiled now on the pool and waited for, with the compiler's
        timeout (the offline path); None for an unguided request."""
        if params is None or compiled is not None:
            return compiled
        return self._compiler().compile(params)

    def register(
        self,
        runner: ModelRunner,
        request_ids: list[str],
        compiled: Any,
        stop_token_ids: Iterable[int],
        prior_output_token_ids: Sequence[int] = (),
    ) -> None:
        """A matcher per completion (n > 1: each child has its own); nothing when `compiled` is
        None. The grammar may end with an end-of-sequence token or one of `stop_token_ids`. A
        continuation's prior output is replayed into the matcher first; InvalidRequestError
        (nothing registered) when the grammar rejects it."""
        if compiled is None:
            return
        if self.manager is None:
            from engine.structured_outputs.structured_output_manager import (
                StructuredOutputManager,
            )

            self.manager = StructuredOutputManager(
                self.vocab_size, self.max_mask_s, self._compiler().condemn
            )
            runner.structured_outputs = self.manager
        stop = sorted({*self.eos_token_ids, *stop_token_ids})
        for request_id in request_ids:
            self.manager.register(request_id, compiled, stop)
            if not self.manager.replay(request_id, prior_output_token_ids):
                self.manager.release(request_ids)
                raise InvalidRequestError(
                    "the continuation's tokens do not follow the structured-outputs constraint",
                    "continuation",
                )

    def release(self, request_ids: Iterable[str]) -> None:
        if self.manager is not None:
            self.manager.release(request_ids)

    def release_unless(self, *is_live: Callable[[str], bool]) -> None:
        """Drop the state of every request none of `is_live` knows (a safety net behind the
        explicit releases: a state must never outlive its request)."""
        if self.manager is not None and self.manager.num_live:
            self.manager.release_unless(lambda r: any(live(r) for live in is_live))

    def shutdown(self) -> None:
        if self.compiler is not None:
            self.compiler.shutdown()

    def _compiler(self) -> GrammarCompiler:
        if self.compiler is None:
            raise InvalidRequestError(
                "structured outputs need a tokenizer; this model has none", "structured_outputs"
            )
        return self.compiler
