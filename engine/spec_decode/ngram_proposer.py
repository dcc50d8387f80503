"""N-gram drafts (vLLM's `ngram` method, prompt lookup): the request's own tokens predict it.

The longest suffix n-gram of the request's tokens (prompt and output), from prompt_lookup_max
down to prompt_lookup_min tokens, that occurred earlier in them proposes the up to
num_speculative_tokens tokens that followed its most recent earlier occurrence. Text being
copied or edited (code, a quoted document, a repeated list) drafts itself.

One call is O(length): a vectorised comparison of every position with the last token, then each
longer n-gram filters the positions still matching (a set that shrinks fast; all of them at
worst, for prompt_lookup_max rounds).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pagedock.speculative_config import SpeculativeConfig


class NgramProposer:
    def __init__(self, config: SpeculativeConfig) -> None:
        self.num_speculative_tokens = config.num_speculative_tokens
        self.prompt_lookup_min = config.prompt_lookup_min
        self.prompt_lookup_max = config.prompt_lookup_max

    def propose(
        self, token_ids: Sequence[int] | np.ndarray, max_num_tokens: int | None = None
    ) -> list[int]:
        """The draft for a request whose tokens so far are `token_ids`: at most
        num_speculative_tokens (and `max_num_tokens`) tokens; empty when no suffix n-gram of an
        allowed length occurred before."""
        k = self.num_speculative_tokens
        if max_num_tokens is not None:
            k = min(k, max_num_tokens)
        length = len(token_ids)
        if k <= 0 or length <= self.prompt_lookup_min:
            return []
        tokens = np.asarray(token_ids, dtype=np.int64)
        end = self._most_recent_match_end(tokens)
        if end < 0:
            return []
        return tokens[end + 1 : end + 1 + k].tolist()

    def _most_recent_match_end(self, tokens: np.ndarray) -> int:
        """Where the most recent earlier occurrence of the longest matching suffix n-gram ends
        (an index before the last token); -1 when none is long enough."""
        last = len(tokens) - 1
        # Candidate ends e < last of an earlier occurrence of the suffix n-gram of length n:
        # tokens[e - i] == tokens[last - i] for every i < n. Ascending, so the last is the newest.
        ends = np.flatnonzero(tokens[:last] == tokens[last])
        n, best = 1, -1
        while ends.size:
            if n >= self.prompt_lookup_min:
                best = int(ends[-1])
            if n == self.prompt_lookup_max:
                break
            ends = ends[ends >= n]
            ends = ends[tokens[ends - n] == tokens[last - n]]
            n += 1
        return best
