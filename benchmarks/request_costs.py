"""What single requests cost the server before and after issue 34's bounds, on this machine.

    python -m benchmarks.request_costs [--out benchmarks/results/request_costs.json]

- prompt_shape: validating a completions `prompt` of 1.6 million token ids with one string at the
  end, as a plain union of its four shapes (what pagedock did) and as PromptInput (the first
  element picks the shape, lists stop at their first bad element), then listing the errors as
  the server's 400 handler does: seconds and error count.
- schema_compile: compiling an object schema of N string properties with xgrammar and SmolLM2's
  vocabulary (the cap is MAX_SCHEMA_PROPERTIES).
- first_mask: one token mask of a typical JSON schema and of `(.|..|...){1,5000}` on the same
  vocabulary (the budget is --max-grammar-mask-ms), CPU time of the filling thread.
- held_body: memory of an 8 MiB chat body of short messages held as bytes and as the parsed
  request (tracemalloc's peak while parsing, and what the parsed request keeps).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError

from benchmarks.machine import git_commit, machine_info
from engine.inputs.sampling_params import StructuredOutputsParams
from engine.structured_outputs.grammar_compiler import GrammarCompiler
from pagedock.limits import MAX_INT32, MAX_SCHEMA_PROPERTIES
from pagedock.models.registry import DEFAULT_MODEL, resolve_model
from pagedock.protocol import ChatCompletionRequest, CompletionRequest
from pagedock.text.tokenizer import load_tokenizer

_Id = Annotated[int, Field(ge=0, le=MAX_INT32)]
POISON_REGEX = "(.|..|...){1,5000}"
TYPICAL_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


class PlainUnionPrompt(BaseModel):
    """The `prompt` field as pagedock declared it before."""

    prompt: str | list[str] | list[_Id] | list[list[_Id]]


def prompt_shape() -> list[dict[str, Any]]:
    body = json.dumps({"prompt": [1] * 1_600_000 + ["x"]}).encode()
    rows = []
    models: list[tuple[str, type[BaseModel]]] = [
        ("plain_union", PlainUnionPrompt),
        ("prompt_input", CompletionRequest),
    ]
    for name, model in models:
        started = time.perf_counter()
        try:
            model.model_validate_json(body)
            errors = 0
        except ValidationError as e:
            errors = len(e.errors())  # what FastAPI's handler reads
        seconds = time.perf_counter() - started
        rows.append({"model": name, "body_bytes": len(body), "seconds": seconds, "errors": errors})
    return rows


def schema_compile(compiler: GrammarCompiler) -> list[dict[str, Any]]:
    rows = []
    compiler.compile(StructuredOutputsParams(json={"type": "object"}))  # reads the vocabulary
    for n in (64, 128, 256, MAX_SCHEMA_PROPERTIES, 2 * MAX_SCHEMA_PROPERTIES):
        properties = {f"p{i}": {"type": "string"} for i in range(n)}
        schema = {"type": "object", "properties": properties}
        # Compiled directly: the request-side cap would refuse the largest.
        started = time.perf_counter()
        compiler._xgrammar_compiler().compile_json_schema(json.dumps(schema), any_whitespace=False)
        rows.append({"properties": n, "seconds": time.perf_counter() - started})
    return rows


def first_mask(compiler: GrammarCompiler) -> list[dict[str, Any]]:
    import xgrammar as xgr

    rows = []
    for name, params in [
        ("typical_schema", StructuredOutputsParams(json=TYPICAL_SCHEMA)),
        ("poison_regex", StructuredOutputsParams(regex=POISON_REGEX)),
    ]:
        compiled = compiler.compile(params)
        times = []
        for _ in range(3):
            matcher = xgr.GrammarMatcher(compiled)
            bitmask = xgr.allocate_token_bitmask(1, compiler.vocab_size)
            started = time.thread_time()
            matcher.fill_next_token_bitmask(bitmask)
            times.append(time.thread_time() - started)
        rows.append({"constraint": name, "cpu_ms_median": 1e3 * statistics.median(times)})
    return rows


def held_body() -> dict[str, Any]:
    messages = [{"role": "user", "content": "hi there"}] * 200_000
    body = json.dumps({"messages": messages})
    body = json.dumps({"messages": messages[: int(len(messages) * 8 * 2**20 / len(body))]})
    raw = body.encode()
    tracemalloc.start()
    parsed = ChatCompletionRequest.model_validate_json(raw)
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del parsed
    return {
        "body_mib": len(raw) / 2**20,
        "messages": len(json.loads(raw)["messages"]),
        "parsed_kept_mib": kept / 2**20,
        "parse_peak_mib": peak / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/request_costs.json")
    args = parser.parse_args()
    tokenizer = load_tokenizer(resolve_model(DEFAULT_MODEL).path)
    assert tokenizer is not None
    vocab_size = len(tokenizer.vocabulary())
    compiler = GrammarCompiler(
        tokenizer, vocab_size, sorted(tokenizer.eos_token_ids), timeout_s=600
    )
    report = {
        "benchmark": "request_costs",
        "model_tokenizer": DEFAULT_MODEL,
        "vocab_size": vocab_size,
        "commit": git_commit(Path(__file__).resolve().parents[1]),
        "machine": machine_info(),
        "results": {
            "prompt_shape": prompt_shape(),
            "schema_compile": schema_compile(compiler),
            "first_mask": first_mask(compiler),
            "held_body": held_body(),
        },
    }
    compiler.shutdown()
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["results"], indent=2))


if __name__ == "__main__":
    main()
