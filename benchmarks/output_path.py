"""The output path's own cost per generated token, with the model step stubbed out.

    python benchmarks/output_path.py [--tokens 2048] [--window 256] [--repeats 7]

One request generates a fixed script of real SmolLM2 tokens (with logprobs and a stop string
that never matches). Two measurements, each per 256-token window:

- inline: OutputProcessor.process (incremental detokenizer, stop strings, RequestOutput) plus the
  server's per-choice accumulation (Generation), on one thread: the CPU work per token;
- async: the same script through AsyncEngine (engine thread -> output path -> event loop ->
  RequestStream) into the server's Generation.deltas(), as an HTTP handler consumes it, in
  lockstep: the stub makes the next token once the consumer has the previous one, so a token's
  time is the whole path's latency (thread hand-offs included), and a stub that never waits
  cannot starve the other threads of the GIL.

A path that copies or re-slices each request's whole output every step costs more per token as
the request grows; one that sends each token once is flat: the last / first window ratio is ~1.
`--root` points the imports at another checkout (the same script ran on the previous layout).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import itertools
import json
import statistics
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

_STOP = "\x00never"  # a stop string, so the matcher runs on every token, that never matches


@dataclass
class _Prompt:
    """What Generation reads of a prompt."""

    token_ids: list[int]
    text: str | None = None


def _module(*names: str) -> Any:
    """The first of `names` that imports: the current layout first, then the previous one."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(names[0])


class StubEngine:
    """Stands in for LLMEngine: each model step yields the script's next token, at once."""

    def __init__(self, tokenizer: Any, script: list[int]) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.output_processor = _module("engine.runtime.output_processor").OutputProcessor(
            tokenizer
        )
        kv_events = _module("engine.core.kv_events", "engine.kv_events")
        self.kv_events = kv_events.KVEventLog()
        self.scheduler = SimpleNamespace(requests={})  # read by the previous AsyncEngine
        self._core = _module("engine.core.scheduler_output", "engine.scheduler_output")
        self._request_id: str | None = None
        self._position = 0
        try:  # this layout's AsyncEngine checks a request with the engine's input processor
            inputs = importlib.import_module("engine.inputs.input_processor")
            self.input_processor = inputs.InputProcessor(tokenizer, tokenizer.vocab_size, 1 << 20)
        except ModuleNotFoundError:
            pass  # the previous layout: the engine checked it (add_core_request)
        # Lockstep: set by the consumer when it has the previous token (None: never wait).
        self.gate: threading.Event | None = None

    def stats(self) -> Any:
        return SimpleNamespace(num_waiting=0, num_running=int(self._request_id is not None))

    def has_unfinished_requests(self) -> bool:
        return self._request_id is not None

    def add_core_request(
        self, request_id: str, prompt: list[int], params: Any, priority: int = 0, arrival: Any = 0
    ) -> Any:
        self._request_id, self._position = request_id, 0
        timing = _module("engine.core.request").RequestTiming(time.monotonic())
        new_request = _module("engine.runtime.output_processor").NewRequest
        return new_request(request_id, None, list(prompt), params, timing, [request_id])

    def add_engine_request(self, request: Any) -> Any:
        """This layout: the engine thread queues what the input processor made."""
        return self.add_core_request(
            request.request_id, request.prompt_token_ids, request.sampling_params
        )

    def add_request(
        self, request_id: str, prompt: list[int], params: Any, priority: int = 0, arrival: Any = 0
    ) -> None:
        """The previous layout: the engine registers with its output processor itself."""
        self._request_id, self._position = request_id, 0
        processor = self.output_processor
        processor.add_request(request_id, None, list(prompt), params, time.monotonic())

    def step_core(self) -> list[Any]:
        assert self._request_id is not None
        if self.gate is not None:
            if not self.gate.wait(timeout=30):
                raise TimeoutError("the consumer stopped taking tokens")
            self.gate.clear()
        token = self.script[self._position]
        self._position += 1
        done = self._position == len(self.script)
        sampled = self._core.SampledToken(token, -0.25, {token: -0.25, 0: -3.0})
        output = self._core.EngineCoreOutput(
            self._request_id, [token], "length" if done else None, logprobs=[sampled]
        )
        if done:
            self._request_id = None
        return [output]

    def step(self) -> list[Any]:
        """The previous layout: the step's outputs processed on the engine thread."""
        return list(self.output_processor.process(self.step_core()).outputs)

    def finish_stopped(self, request_ids: list[str]) -> None:
        pass


def make_script(num_tokens: int) -> tuple[Any, list[int]]:
    """The SmolLM2 tokenizer and num_tokens ids of English text with some multi-byte chars."""
    registry = _module("pagedock.models.registry", "engine.model_registry")
    tokenizer_cls = _module("pagedock.text.tokenizer", "engine.tokenizer").Tokenizer
    tokenizer = tokenizer_cls.from_gguf(registry.resolve_model("smollm2-135m-instruct").path)
    ids: list[int] = []
    i = 0
    while len(ids) < num_tokens:
        ids += tokenizer.encode(
            f" Request {i} keeps its key-value cache in blocks of 16 tokens; the café's "
            f"scheduler → batches it with {i % 7} others ✓, and frees the blocks when done."
        )
        i += 1
    return tokenizer, ids[:num_tokens]


def sampling_params() -> Any:
    sampling = _module("engine.inputs.sampling_params")
    params = sampling.SamplingParams(max_tokens=None, logprobs=1, stop=[_STOP])
    kind = getattr(sampling, "RequestOutputKind", None)
    return params if kind is None else replace(params, output_kind=kind.DELTA)


def window_marks(marks: list[float], window: int) -> list[float]:
    """µs per token in each window, from the times the windows ended."""
    return [(b - a) * 1e6 / window for a, b in itertools.pairwise(marks)]


def run_inline(tokenizer: Any, script: list[int], window: int) -> list[float]:
    engine = StubEngine(tokenizer, script)
    params = sampling_params()
    if hasattr(engine.output_processor, "num_unfinished_requests"):
        engine.output_processor.add_request(engine.add_core_request("r", [1, 2, 3], params))
    else:
        engine.add_request("r", [1, 2, 3], params)
    gen = _generation([1, 2, 3])
    state = gen.choices[0]
    marks = [time.perf_counter()]
    for count in range(1, len(script) + 1):
        for output in engine.output_processor.process(engine.step_core()).outputs:
            for completion in output.outputs:
                if hasattr(state, "append"):
                    state.append(completion)  # deltas: append
                else:
                    gen._advance(0, completion)  # cumulative: slice off what was sent
        if count % window == 0:
            marks.append(time.perf_counter())
    return window_marks(marks, window)


async def run_async(tokenizer: Any, script: list[int], window: int) -> list[float]:
    engine = StubEngine(tokenizer, script)
    engine.gate = gate = threading.Event()
    async_engine = _module("engine.runtime.async_engine").AsyncEngine(engine, own_thread=True)
    async_engine.start()
    gen = _generation([1, 2, 3])
    stream = await async_engine.add_request("r", [1, 2, 3], sampling_params())
    gen.streams.append(stream)
    marks, count = [time.perf_counter()], 0
    gate.set()
    async for deltas in gen.deltas():
        for delta in deltas:
            count += len(delta.token_ids)
        while count >= len(marks) * window:
            marks.append(time.perf_counter())
        gate.set()
    await async_engine.shutdown()
    return window_marks(marks, window)


def _generation(prompt_ids: list[int]) -> Any:
    generation = _module("engine.server.openai.generation")
    return generation.Generation(None, [_Prompt(prompt_ids)], 1)


def _machine() -> Any:
    """benchmarks/machine.py beside this script, whichever checkout `--root` imports from."""
    spec = importlib.util.spec_from_file_location(
        "_machine", Path(__file__).with_name("machine.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summarise(name: str, runs: list[list[float]]) -> dict[str, Any]:
    """Each window's µs/token, the least disturbed of the repeats (on a shared machine the others
    carry other processes' time), and its median; the ratio last / first window of the least."""
    per_window = [min(values) for values in zip(*runs, strict=True)]
    medians = [statistics.median(values) for values in zip(*runs, strict=True)]
    ratio = per_window[-1] / per_window[0]
    cells = " ".join(f"{us:6.1f}" for us in per_window)
    print(f"{name:7s} µs/token per window: {cells}   last/first {ratio:.2f}")
    return {
        "us_per_token_per_window": per_window,
        "median_us_per_token_per_window": medians,
        "last_over_first": ratio,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "output_path.json"
    )
    parser.add_argument("--baseline", type=Path, help="an earlier result to embed, for comparison")
    args = parser.parse_args()
    sys.path.insert(0, str(args.root))
    tokenizer, script = make_script(args.tokens)
    run_inline(tokenizer, script[: args.window], args.window)  # warm-up
    print(f"{args.tokens} tokens in one request, windows of {args.window}, code at {args.root}")
    inline = [run_inline(tokenizer, script, args.window) for _ in range(args.repeats)]
    on_async = [asyncio.run(run_async(tokenizer, script, args.window)) for _ in range(args.repeats)]
    machine = _machine()
    result: dict[str, Any] = {
        "machine": machine.machine_info(),
        "code": f"{args.root} at {machine.git_commit(args.root)}",
        "tokens": args.tokens,
        "window": args.window,
        "repeats": args.repeats,
        "stamp": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "inline": summarise("inline", inline),
        "async": summarise("async", on_async),
    }
    if args.baseline is not None:
        result["baseline"] = json.loads(args.baseline.read_text())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
