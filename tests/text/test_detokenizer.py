"""Streaming detokenization equals a one-shot decode; stop strings never leak into the stream."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as BackendTokenizer

from pagedock.text.detokenizer import (
    IncrementalDetokenizer,
    StopStringMatcher,
)
from pagedock.text.tokenizer import Tokenizer
from tests.text.test_tokenizer import SAMPLES


def stream(detok: IncrementalDetokenizer, ids: Sequence[int], chunk: int = 1) -> list[str]:
    """Feed ids `chunk` at a time, the last call marked finished; return the deltas."""
    deltas = []
    for start in range(0, len(ids), chunk):
        piece = ids[start : start + chunk]
        text, _ = detok.update(piece, finished=start + chunk >= len(ids))
        deltas.append(text)
    return deltas


@pytest.mark.parametrize("text", SAMPLES.values(), ids=SAMPLES.keys())
@pytest.mark.parametrize("chunk", [1, 3])
def test_stream_equals_one_shot_decode(smollm2_tokenizer: Tokenizer, text: str, chunk: int) -> None:
    ids = smollm2_tokenizer.encode(text)
    for skip in (True, False):
        deltas = stream(
            IncrementalDetokenizer(smollm2_tokenizer, skip_special_tokens=skip), ids, chunk
        )
        assert "".join(deltas) == smollm2_tokenizer.decode(ids, skip_special_tokens=skip)
        assert not any("\ufffd" in d for d in deltas)  # never a broken character


def test_character_split_over_tokens_is_held_until_complete(smollm2_tokenizer: Tokenizer) -> None:
    ids = smollm2_tokenizer.encode("🤖!")  # the emoji's 4 bytes span 3 tokens
    assert len(ids) == 4
    assert stream(IncrementalDetokenizer(smollm2_tokenizer), ids) == ["", "", "🤖", "!"]


def test_random_token_streams_equal_one_shot_decode(smollm2_tokenizer: Tokenizer) -> None:
    """Arbitrary ids, including stray UTF-8 continuation and lead bytes that never complete."""
    rng = random.Random(0)
    for _ in range(200):
        ids = [rng.randrange(smollm2_tokenizer.vocab_size) for _ in range(rng.randrange(1, 24))]
        deltas = stream(IncrementalDetokenizer(smollm2_tokenizer), ids, rng.choice([1, 2, 5]))
        assert "".join(deltas) == smollm2_tokenizer.decode(ids)


def test_prompt_gives_context_but_is_not_emitted(smollm2_tokenizer: Tokenizer) -> None:
    prompt = smollm2_tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=True
    )
    assert isinstance(prompt, list)
    output = smollm2_tokenizer.encode("Hello there, how are you?")
    detok = IncrementalDetokenizer(smollm2_tokenizer, prompt)
    assert "".join(stream(detok, output)) == "Hello there, how are you?"
    assert detok.output_text == "Hello there, how are you?"


def byte_fallback_tokenizer() -> Tokenizer:
    """A llama-style (sentencepiece) BPE: ▁ for spaces, <0xNN> tokens for unknown characters."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece in ["▁", "h", "i", "e", "l", "o", "▁h", "▁hi", "he", "ll", "▁he", "▁hell", "▁hello"]:
        vocab[piece] = len(vocab)
    merges = [("▁", "h"), ("▁h", "i"), ("h", "e"), ("l", "l"), ("▁h", "e"), ("▁he", "ll")]
    merges.append(("▁hell", "o"))
    backend = BackendTokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    backend.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    backend.add_special_tokens([AddedToken(t, special=True) for t in ("<unk>", "<s>", "</s>")])
    return Tokenizer(backend, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})


def test_byte_fallback_tokens_stream_with_right_spacing() -> None:
    tokenizer = byte_fallback_tokenizer()
    ids = [*tokenizer.encode("hello hi 你好 héllo 🤖 hi"), 2]
    assert {"<0xE4>", "<0xF0>"} <= set(tokenizer.convert_ids_to_tokens(ids))  # byte fallback
    expected = tokenizer.decode(ids)
    assert expected == "hello hi 你好 héllo 🤖 hi"
    deltas = stream(IncrementalDetokenizer(tokenizer), ids)
    assert "".join(deltas) == expected
    assert not any("\ufffd" in d for d in deltas)
    # Decoding token by token would drop every word's leading space (the decoder strips it).
    assert "".join(tokenizer.decode([i]) for i in ids) != expected


def test_stream_ending_mid_character_shows_what_a_one_shot_decode_shows() -> None:
    tokenizer = byte_fallback_tokenizer()
    ids = tokenizer.encode("hi 你")[:-1]  # the last byte of 你 never arrives
    deltas = stream(IncrementalDetokenizer(tokenizer), ids)
    assert "".join(deltas) == tokenizer.decode(ids) == "hi \ufffd\ufffd"


# --- stop strings -------------------------------------------------------------------------


def test_stop_string_spanning_tokens_ends_the_stream_without_it(
    smollm2_tokenizer: Tokenizer,
) -> None:
    ids = smollm2_tokenizer.encode("The answer is 42.\nUser: and then more")
    detok = IncrementalDetokenizer(smollm2_tokenizer, stop=["\nUser:"])
    deltas = []
    for token_id in ids:
        text, stop = detok.update([token_id])
        deltas.append(text)
        if stop is not None:
            break
    assert stop == "\nUser:"
    assert "".join(deltas) == detok.output_text == "The answer is 42."
    assert detok.update([ids[-1]]) == ("", "\nUser:")  # nothing more after the stop


def test_text_that_may_start_a_stop_string_is_held_then_released() -> None:
    matcher = StopStringMatcher(["STOP"])
    assert matcher.feed("go S") == "go "
    assert matcher.feed("T") == ""
    assert matcher.feed("AR") == "STAR"  # not the stop string after all
    assert matcher.feed(" ST") == " "
    assert matcher.flush() == "ST"  # generation ended: the held tail is plain text


def test_stop_string_can_be_kept_in_the_output() -> None:
    matcher = StopStringMatcher(["</answer>"], include_stop_str_in_output=True)
    assert matcher.feed("42</ans") == "42"
    assert matcher.feed("wer> trailing") == "</answer>"
    assert matcher.matched == "</answer>" and matcher.feed("more") == ""


def test_first_completed_stop_string_wins() -> None:
    first = StopStringMatcher(["abcd", "bc"])
    assert (first.feed("abcd"), first.matched) == ("a", "bc")  # bc completes first
    tie = StopStringMatcher(["abc", "bc"])
    assert (tie.feed("xabc"), tie.matched) == ("x", "abc")  # same end: the longer one
    none = StopStringMatcher(["z"])
    assert (none.feed("abc"), none.matched) == ("abc", None)


def test_only_a_possible_start_of_a_stop_string_is_held() -> None:
    assert StopStringMatcher(["end", "xyz"]).feed("the e") == "the "
    assert StopStringMatcher(["end"]).feed("the en") == "the "
    assert StopStringMatcher(["aab"]).feed("aaa") == "a"  # "aa" may still become "aab"


def reference_scan(text: str, stops: list[str]) -> tuple[str, str | None]:
    """What a character-by-character scan shows and stops on (the specification)."""
    for end in range(1, len(text) + 1):
        done = [s for s in stops if text[:end].endswith(s)]
        if done:
            longest = max(done, key=len)
            return text[: end - len(longest)], longest
    return text, None


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="ab", max_size=30),
    stops=st.lists(st.text(alphabet="ab", min_size=1, max_size=6), min_size=1, max_size=4),
)
def test_matching_equals_a_character_by_character_scan(text: str, stops: list[str]) -> None:
    matcher = StopStringMatcher(stops)
    shown = matcher.feed(text) + matcher.flush()
    assert (shown, matcher.matched) == reference_scan(text, stops)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet="ab\n", max_size=24),
    stops=st.lists(st.text(alphabet="ab\n", min_size=1, max_size=4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=24), max_size=6),
)
def test_stop_matching_does_not_depend_on_chunking(
    text: str, stops: list[str], cuts: list[int]
) -> None:
    whole = StopStringMatcher(stops)
    expected = whole.feed(text) + whole.flush()
    chunked = StopStringMatcher(stops)
    bounds = [0, *sorted(c for c in cuts if c <= len(text)), len(text)]
    emitted = []
    for start, end in itertools.pairwise(bounds):
        piece = chunked.feed(text[start:end])
        emitted.append(piece)
        # What was shown can never be taken back: it is a prefix of the final text.
        assert expected.startswith("".join(emitted))
    assert "".join(emitted) + chunked.flush() == expected
    assert chunked.matched == whole.matched
    assert (expected, whole.matched) == reference_scan(text, stops)


def test_stop_strings_are_not_matched_before_min_tokens(smollm2_tokenizer: Tokenizer) -> None:
    ids = smollm2_tokenizer.encode("stop here, then stop again", add_special_tokens=False)
    eager = IncrementalDetokenizer(smollm2_tokenizer, stop=["stop"])
    patient = IncrementalDetokenizer(smollm2_tokenizer, stop=["stop"], min_tokens=3)
    assert "".join(stream(eager, ids)) == ""
    text = "".join(stream(patient, ids))
    assert text.startswith("stop here")
    assert patient.stop_reason == "stop" and "again" not in text
