"""Streaming text from generated token ids: incremental detokenization and stop strings.

Decoding one token at a time is wrong twice over: a character may span tokens (its first bytes
alone decode to U+FFFD), and some decoders change a token's text by what precedes it (spaces).
So each step decodes a short window that starts a little before the new tokens:

    token ids:   ... | prefix_offset ......... read_offset ......... end
                       \\__ already emitted __/ \\__ new this step __/
    delta = decode(ids[prefix_offset:end])[len(decode(ids[prefix_offset:read_offset])):]

and emits nothing while the window's text ends in U+FFFD (a character still incomplete). The
concatenated deltas equal a one-shot decode of all output ids.

Stop strings are matched on the text, so they are found even when they span tokens; text that
could be the start of a stop string is held back until it is known not to be one, so a stream
never shows part of a stop string.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pagedock.text.stop_strings import StopStringMatcher

REPLACEMENT_CHAR = "\ufffd"
# Prompt tokens decoded ahead of the first output token, so that its spacing comes out right.
_NUM_PROMPT_CONTEXT_TOKENS = 5


class SupportsDecode(Protocol):
    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...


class IncrementalDetokenizer:
    """Per-request streaming text: feed generated ids, get the new text (stop strings applied)."""

    def __init__(
        self,
        tokenizer: SupportsDecode,
        prompt_token_ids: Sequence[int] = (),
        skip_special_tokens: bool = True,
        stop: Sequence[str] | None = None,
        include_stop_str_in_output: bool = False,
        min_tokens: int = 0,
    ) -> None:
        self.tokenizer = tokenizer
        # Stop strings apply from the step that reaches min_tokens generated tokens on (as in
        # vLLM): text from earlier steps is never matched.
        self.min_tokens = min_tokens
        self.num_generated = 0
        self.skip_special_tokens = skip_special_tokens
        # The window keeps a few prompt tokens as left context; they are never emitted.
        self._ids = list(prompt_token_ids[-_NUM_PROMPT_CONTEXT_TOKENS:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._stop = StopStringMatcher(stop or (), include_stop_str_in_output)
        # Pieces, joined on demand: `str +=` on an attribute copies the whole text every step.
        self._output_parts: list[str] = []

    @property
    def output_text(self) -> str:
        """Everything emitted so far."""
        return "".join(self._output_parts)

    @property
    def stop_reason(self) -> str | None:
        """The stop string that ended generation, if one did."""
        return self._stop.matched

    def update(
        self, new_token_ids: Sequence[int], finished: bool = False
    ) -> tuple[str, str | None]:
        """Add generated ids; return (text to emit now, matched stop string or None).

        `finished`: generation ends with these ids (EOS, length, ...), so text held back (an
        incomplete character, a possible stop-string start) is released now.
        """
        if self._stop.stopped:
            return "", self._stop.matched
        self.num_generated += len(new_token_ids)
        text = self.decode_step(new_token_ids)
        if finished:
            text += self._flush_window()
        if self.num_generated < self.min_tokens:
            self._output_parts.append(text)
            return text, None
        emitted = self._stop.feed(text)
        if finished and not self._stop.stopped:
            emitted += self._stop.flush()
        self._output_parts.append(emitted)
        return emitted, self._stop.matched

    def replay(self, token_ids: Sequence[int]) -> str:
        """Feed ids generated earlier one step at a time, as they were generated, and return the
        text that was emitted for them: a continuation's state is then exactly the original's
        (a stop string spanning the cut is still found, held-back text is released later)."""
        return "".join(self.update([token_id])[0] for token_id in token_ids)

    def decode_step(self, new_token_ids: Sequence[int]) -> str:
        """Decoded text that `new_token_ids` add (no stop strings); "" while a char is
        incomplete."""
        self._ids.extend(new_token_ids)
        prefix_text = self._decode(self._prefix_offset, self._read_offset)
        full_text = self._decode(self._prefix_offset, len(self._ids))
        if len(full_text) <= len(prefix_text) or full_text.endswith(REPLACEMENT_CHAR):
            return ""
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        return full_text[len(prefix_text) :]

    def _flush_window(self) -> str:
        """Whatever the window still holds back, U+FFFD and all (as a one-shot decode shows it)."""
        if self._read_offset == len(self._ids):
            return ""
        prefix_text = self._decode(self._prefix_offset, self._read_offset)
        full_text = self._decode(self._prefix_offset, len(self._ids))
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        return full_text[len(prefix_text) :]

    def _decode(self, start: int, end: int) -> str:
        return self.tokenizer.decode(
            self._ids[start:end], skip_special_tokens=self.skip_special_tokens
        )
