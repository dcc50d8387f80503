"""xgrammar vs llguidance on this machine, with the built-in SmolLM2 tokenizer.

    python benchmarks/grammar_backends.py [--steps 24]
        [--out benchmarks/results/grammar_backends.json]

For each library: compile time per JSON schema (cache off; for llguidance, whose parser is lazy,
matcher construction plus the first mask), and the time to fill the token bitmask per decode
step at batch 1 and 64. Every row replays the tokens of a valid instance of its schema, so both
libraries walk the same paths through the same grammars; per token = per step / batch size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks.machine import git_commit, machine_info
from pagedock.models.registry import DEFAULT_MODEL, resolve_model
from pagedock.text.tokenizer import Tokenizer, load_tokenizer

# (schema, one valid instance): the instance's tokens are what every row consumes.
SCHEMAS: list[tuple[dict[str, Any], Any]] = [
    (
        {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
        },
        {"name": "Ada Lovelace", "age": 36},
    ),
    (
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "temperature": {"type": "number", "minimum": -50, "maximum": 60},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "temperature", "unit"],
        },
        {"city": "Paris", "temperature": 21.5, "unit": "celsius"},
    ),
    (
        {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                        "required": ["sku", "qty"],
                    },
                    "maxItems": 5,
                },
                "total": {"type": "number"},
            },
            "required": ["items", "total"],
        },
        {"items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}], "total": 30.25},
    ),
    (
        {
            "type": "object",
            "properties": {
                "user": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer", "minimum": 1},
                        "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$"},
                        "roles": {"type": "array", "items": {"enum": ["admin", "dev", "ops"]}},
                    },
                    "required": ["id", "email", "roles"],
                },
                "active": {"type": "boolean"},
            },
            "required": ["user", "active"],
        },
        {"user": {"id": 7, "email": "ada@example.com", "roles": ["dev"]}, "active": True},
    ),
    (
        {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1},
        ["red", "green", "blue"],
    ),
]


def instance_tokens(tokenizer: Tokenizer, instance: Any) -> list[int]:
    return tokenizer.encode(json.dumps(instance), add_special_tokens=False)


class XGrammarBackend:
    name = "xgrammar"

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, eos: list[int]) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        info = xgr.TokenizerInfo(
            tokenizer.vocabulary(),
            xgr.VocabType.BYTE_LEVEL,
            vocab_size=vocab_size,
            stop_token_ids=eos,
        )
        self.compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        self.batch = xgr.BatchGrammarMatcher()
        self.vocab_size = vocab_size

    def compile(self, schema: dict[str, Any]) -> Any:
        return self.compiler.compile_json_schema(json.dumps(schema))

    def matcher(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def bitmask(self, batch: int) -> torch.Tensor:
        return self.xgr.allocate_token_bitmask(batch, self.vocab_size)

    def fill(self, matchers: list[Any], bitmask: torch.Tensor) -> None:
        if len(matchers) == 1:
            matchers[0].fill_next_token_bitmask(bitmask, 0)
        else:
            self.batch.batch_fill_next_token_bitmask(matchers, bitmask)

    def accept(self, matcher: Any, token: int) -> None:
        assert matcher.accept_token(token)


class LLGuidanceBackend:
    name = "llguidance"

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, eos: list[int]) -> None:
        import llguidance
        import llguidance.torch

        self.ll = llguidance
        self.llt = llguidance.torch
        self.tokenizer = llguidance.LLTokenizer(
            tokenizer.to_json(), n_vocab=vocab_size, eos_token=eos
        )
        self.executor = llguidance.LLExecutor()
        self.vocab_size = vocab_size

    def compile(self, schema: dict[str, Any]) -> Any:
        grammar = self.ll.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        matcher = self.ll.LLMatcher(self.tokenizer, grammar)
        mask = self.bitmask(1)
        self.llt.fill_next_token_bitmask(matcher, mask, 0)  # the lazy parser's first real work
        assert not matcher.is_error(), matcher.get_error()
        return grammar

    def matcher(self, compiled: Any) -> Any:
        return self.ll.LLMatcher(self.tokenizer, compiled)

    def bitmask(self, batch: int) -> torch.Tensor:
        return self.llt.allocate_token_bitmask(batch, self.vocab_size)

    def fill(self, matchers: list[Any], bitmask: torch.Tensor) -> None:
        if len(matchers) == 1:
            self.llt.fill_next_token_bitmask(matchers[0], bitmask, 0)
        else:
            pairs = [(m, i) for i, m in enumerate(matchers)]
            self.llt.fill_next_token_bitmask_par(self.executor, pairs, bitmask)

    def accept(self, matcher: Any, token: int) -> None:
        assert matcher.consume_token(token), matcher.get_error()


def time_compiles(backend: Any, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for index, (schema, _) in enumerate(SCHEMAS):
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            backend.compile(schema)
            times.append(time.perf_counter() - started)
        rows.append({"schema": index, "compile_ms_median": 1e3 * statistics.median(times)})
    return rows


def time_masks(backend: Any, tokens: list[list[int]], batch: int, steps: int) -> dict[str, Any]:
    """Median and p90 time of one bitmask fill over `batch` rows, schemas assigned round-robin;
    a row that has replayed its whole instance starts it again with a fresh matcher."""
    compiled = [backend.compile(schema) for schema, _ in SCHEMAS]
    schema_of = [row % len(SCHEMAS) for row in range(batch)]
    matchers = [backend.matcher(compiled[s]) for s in schema_of]
    position = [0] * batch
    bitmask = backend.bitmask(batch)
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        backend.fill(matchers, bitmask)
        times.append(time.perf_counter() - started)
        for row, s in enumerate(schema_of):
            if position[row] == len(tokens[s]):
                matchers[row], position[row] = backend.matcher(compiled[s]), 0
            backend.accept(matchers[row], tokens[s][position[row]])
            position[row] += 1
    times.sort()
    step_ms = 1e3 * statistics.median(times)
    return {
        "batch": batch,
        "steps": steps,
        "step_ms_median": step_ms,
        "step_ms_p90": 1e3 * times[int(0.9 * (len(times) - 1))],
        "per_token_ms": step_ms / batch,
    }


def run(backend_type: Callable[..., Any], steps: int, repeats: int) -> dict[str, Any]:
    tokenizer = load_tokenizer(resolve_model(DEFAULT_MODEL).path)
    assert tokenizer is not None
    vocab_size = len(tokenizer.vocabulary())
    eos = sorted(tokenizer.eos_token_ids)
    started = time.perf_counter()
    backend = backend_type(tokenizer, vocab_size, eos)
    setup_s = time.perf_counter() - started
    tokens = [instance_tokens(tokenizer, instance) for _, instance in SCHEMAS]
    compiles = time_compiles(backend, repeats)
    return {
        "library": backend.name,
        "version": version(backend.name),
        "tokenizer_setup_s": setup_s,
        "compile": compiles,
        "compile_ms_mean_over_schemas": statistics.mean(r["compile_ms_median"] for r in compiles),
        "mask": [time_masks(backend, tokens, batch, steps) for batch in (1, 64)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/grammar_backends.json")
    args = parser.parse_args()
    results = [run(b, args.steps, args.repeats) for b in (XGrammarBackend, LLGuidanceBackend)]
    report = {
        "benchmark": "grammar_backends",
        "model_tokenizer": DEFAULT_MODEL,
        "commit": git_commit(Path(__file__).resolve().parents[1]),
        "machine": machine_info(),
        "note": "measured on a machine shared with five other engineers' builds and tests "
        "(2 cores): absolute times are inflated and noisy; compare the libraries within this run",
        "settings": {
            "steps": args.steps,
            "compile_repeats": args.repeats,
            "threads": torch.get_num_threads(),
        },
        "schemas": [schema for schema, _ in SCHEMAS],
        "results": results,
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
