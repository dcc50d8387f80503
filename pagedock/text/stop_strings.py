"""StopStringMatcher: stop strings found in streamed text, in time linear in the text.

Each stop string carries a Knuth-Morris-Pratt automaton whose state is the length of the longest
prefix of the string that the text so far ends with. A new character moves each state in
amortized constant time, so a step costs (new characters x stop strings), never (held text x stop
strings x their length): 64 stop strings of 1,024 characters cannot make a step slow for the
batch. The state also says how much text to hold back (the longest state): text that could
still become a stop string is not shown.
"""

from __future__ import annotations

from collections.abc import Sequence


def failure_table(s: str) -> list[int]:
    """KMP: for each prefix s[:i+1], the length of its longest proper border."""
    table = [0] * len(s)
    k = 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = table[k - 1]
        if s[i] == s[k]:
            k += 1
        table[i] = k
    return table


class StopStringMatcher:
    """Finds stop strings in streamed text; says what may be shown so far.

    Semantics are those of a character-by-character scan, whatever the chunking: generation stops
    at the first position where some stop string is complete (earliest end; on a tie, the
    longest). The stop string itself is excluded unless `include_stop_str_in_output`.
    """

    def __init__(self, stop: Sequence[str], include_stop_str_in_output: bool = False) -> None:
        self.stop = tuple(s for s in stop if s)
        self.include_stop_str_in_output = include_stop_str_in_output
        self.matched: str | None = None
        self._held = ""  # text not yet emitted because it could begin a stop string
        self._failures = [failure_table(s) for s in self.stop]
        self._states = [0] * len(self.stop)

    @property
    def stopped(self) -> bool:
        return self.matched is not None

    def feed(self, delta: str) -> str:
        """Add newly decoded text; return the part that may be emitted now."""
        if self.stopped:
            return ""
        text = self._held + delta
        for offset, char in enumerate(delta):
            matched = self._advance(char)
            if matched is not None:
                self.matched, self._held = matched, ""
                end = len(text) - len(delta) + offset + 1  # just past the stop string in `text`
                return text[: end if self.include_stop_str_in_output else end - len(matched)]
        keep = max(self._states, default=0)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        """At the end of generation: release text held back as a possible stop-string start."""
        held, self._held = ("" if self.stopped else self._held), ""
        return held

    def _advance(self, char: str) -> str | None:
        """Move every automaton by one character; the longest stop string completed, if any."""
        matched: str | None = None
        for i, s in enumerate(self.stop):
            k, table = self._states[i], self._failures[i]
            while k and s[k] != char:
                k = table[k - 1]
            if s[k] == char:
                k += 1
            if k == len(s):
                if matched is None or len(s) > len(matched):
                    matched = s
                k = table[k - 1]
            self._states[i] = k
        return matched
