"""LoRA end to end: three random PEFT adapters of different ranks and target modules, served
beside the base model in the same steps, give transformers + PEFT's greedy tokens through chunked
prefill, prefix-cache hits (within one adapter, never across) and preemption; with LoRA off
nothing changes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine import LLM, LoRARequest, SamplingParams
from engine.config import EngineConfig
from engine.inputs.engine_request import AdapterRef
from engine.kernels.cpu_kernels import load_cpu_kernels
from engine.lora.adapter_config import LORA_TARGETS
from engine.lora.lora_linear import LoRALinear
from engine.lora.lora_manager import LoRAManager
from engine.server.cli import build_parser
from engine.worker.cuda_graph_runner import EagerCapture
from pagedock.errors import ConfigError, InvalidRequestError, ModelLoadError
from pagedock.options import values_for
from tests.engine.conftest import hf_greedy, make_prompts
from tests.engine.lora_factories import make_peft_adapter, peft_reference

NUM_NEW_TOKENS = 12
GREEDY = SamplingParams(max_tokens=NUM_NEW_TOKENS, temperature=0.0, ignore_eos=True)
# Different ranks, scalings and target modules: q/v only, all seven (rsLoRA), and a mix that
# leaves q, v and up of the fused projections alone.
ADAPTERS: dict[str, dict[str, Any]] = {
    "sql": dict(r=4, lora_alpha=16, target_modules=("q_proj", "v_proj")),
    "chat": dict(r=8, lora_alpha=16, target_modules=LORA_TARGETS, use_rslora=True),
    "code": dict(
        r=16, lora_alpha=32, target_modules=("k_proj", "o_proj", "gate_proj", "down_proj")
    ),
}
KINDS: list[str | None] = [None, "sql", "chat", "code"]  # None: the base model

Expected = Callable[[str | None, list[int]], list[int]]


@pytest.fixture(scope="module")
def adapter_dirs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {
        name: make_peft_adapter(tiny_model_dir, root / name, seed=seed, **spec)
        for seed, (name, spec) in enumerate(ADAPTERS.items())
    }


@pytest.fixture(scope="module")
def expected(tiny_model_dir: Path, adapter_dirs: dict[str, Path], hf_tiny_model: Any) -> Expected:
    """transformers + PEFT's greedy tokens of a prompt under an adapter (None: the base)."""
    models = {None: hf_tiny_model}
    models |= {name: peft_reference(tiny_model_dir, path) for name, path in adapter_dirs.items()}
    cache: dict[tuple[str | None, tuple[int, ...]], list[int]] = {}

    def tokens(adapter: str | None, prompt: list[int]) -> list[int]:
        key = (adapter, tuple(prompt))
        if key not in cache:
            cache[key] = hf_greedy(models[adapter], prompt, NUM_NEW_TOKENS)
        return cache[key]

    return tokens


def make_llm(model_dir: Path, adapter_dirs: dict[str, Path], **overrides: Any) -> LLM:
    args: dict[str, Any] = dict(
        dtype="float32",
        num_kv_blocks=256,
        max_model_len=256,
        enable_lora=True,
        lora_modules=[f"{name}={path}" for name, path in adapter_dirs.items()],
    )
    args.update(overrides)
    return LLM(model=str(model_dir), **args)


def generate(llm: LLM, prompts: list[list[int]], adapters: list[str | None]) -> list[list[int]]:
    refs = [None if name is None else AdapterRef(name) for name in adapters]
    outputs = llm.generate(prompts, GREEDY, use_tqdm=False, lora_request=refs)
    return [o.token_ids for o in outputs]


def record_steps(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> list[set[str | None]]:
    """The adapters of each forward pass's requests, from now on."""
    runner = llm.engine.runner
    forward = runner.forward
    steps: list[set[str | None]] = []

    def recording(batch: Any) -> Any:
        steps.append({s.lora_name for s in batch})
        return forward(batch)

    monkeypatch.setattr(runner, "forward", recording)
    return steps


def test_mixed_steps_of_three_adapters_and_the_base_model_match_peft(
    tiny_model_dir: Path,
    adapter_dirs: dict[str, Path],
    expected: Expected,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 24 tokens a step: prompts of up to 60 are prefilled in chunks beside the others' decodes.
    llm = make_llm(tiny_model_dir, adapter_dirs, max_num_batched_tokens=24)
    prompts = make_prompts(12, 5, 60, seed=21)
    adapters = [KINDS[i % 4] for i in range(12)]
    steps = record_steps(llm, monkeypatch)
    want = [expected(a, p) for p, a in zip(prompts, adapters, strict=True)]
    assert generate(llm, prompts, adapters) == want
    assert any(step == set(KINDS) for step in steps), "no step held all three adapters and base"
    # Each adapter matters: on its prompts it generates other tokens than the base model.
    for prompt, adapter, tokens in zip(prompts, adapters, want, strict=True):
        assert adapter is None or tokens != expected(None, prompt), adapter


def test_prefix_cache_hits_stay_within_one_adapter(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path], expected: Expected
) -> None:
    llm = make_llm(tiny_model_dir, adapter_dirs, block_size=16)
    shared = make_prompts(1, 48, 48, seed=31)[0]  # three full blocks
    longer = shared + make_prompts(1, 10, 10, seed=32)[0]

    def hits(prompt: list[int], adapter: str | None) -> int:
        before = llm.stats().prefix_cache_hits
        assert generate(llm, [prompt], [adapter]) == [expected(adapter, prompt)]
        return llm.stats().prefix_cache_hits - before

    assert hits(shared, "sql") == 0
    assert hits(shared, "chat") == 0  # sql's blocks hold sql's KV: another adapter finds none
    assert hits(shared, None) == 0  # and neither does the base model
    assert hits(longer, "sql") == 48  # each finds its own three blocks
    assert hits(longer, "chat") == 48
    assert hits(longer, None) == 48
    assert hits(longer, "code") == 0


def test_preemption_with_adapters_matches_peft(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path], expected: Expected
) -> None:
    # 8 sequences of up to ~100 tokens need ~50 blocks; 16 force preemption by recompute.
    llm = make_llm(tiny_model_dir, adapter_dirs, num_kv_blocks=16, max_num_batched_tokens=32)
    prompts = make_prompts(8, 30, 90, seed=41)
    adapters = [KINDS[(i + 1) % 4] for i in range(8)]
    assert generate(llm, prompts, adapters) == [
        expected(a, p) for p, a in zip(prompts, adapters, strict=True)
    ]
    stats = llm.stats()
    assert stats.num_preemptions > 0
    assert stats.num_free_kv_blocks == 16
    slots = llm.engine.scheduler.lora_slots
    assert slots is not None and slots.pins == [0] * 4


def test_more_adapters_than_slots_wait_and_reuse_the_slots(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path], expected: Expected
) -> None:
    llm = make_llm(tiny_model_dir, adapter_dirs, max_loras=1, max_num_batched_tokens=32)
    prompts = make_prompts(8, 5, 30, seed=51)
    adapters = [KINDS[i % 4] for i in range(8)]
    assert generate(llm, prompts, adapters) == [
        expected(a, p) for p, a in zip(prompts, adapters, strict=True)
    ]
    slots, lora = llm.engine.scheduler.lora_slots, llm.engine.runner.lora
    assert slots is not None and lora is not None
    assert slots.pins == [0] and slots.num_evictions >= 2
    assert lora.num_slot_loads == slots.num_loads >= 3


@pytest.mark.skipif(load_cpu_kernels() is None, reason="padding rows need the C++ cache write")
def test_decode_graphs_are_not_replayed_for_steps_with_adapter_rows(
    tiny_model_dir: Path,
    adapter_dirs: dict[str, Path],
    expected: Expected,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The graphs hold no LoRA (EagerCapture stands in for CUDA graphs on the CPU)."""
    llm = make_llm(tiny_model_dir, adapter_dirs)
    runner = llm.engine.runner
    runner.capture_decode_graphs(8, 256, EagerCapture())
    graphs = runner.graphs
    assert graphs is not None
    replays: list[int] = []
    run = graphs.run

    def counting(batch: Any) -> Any:
        replays.append(len(batch))
        return run(batch)

    monkeypatch.setattr(graphs, "run", counting)
    prompts = make_prompts(4, 5, 20, seed=55)
    adapters: list[str | None] = ["sql", "chat", "code", "sql"]
    want = [expected(a, p) for p, a in zip(prompts, adapters, strict=True)]
    assert generate(llm, prompts, adapters) == want
    assert replays == []
    assert generate(llm, prompts, [None] * 4) == [expected(None, p) for p in prompts]
    assert replays  # base-only decode steps still replay


def test_with_lora_off_nothing_changes(tiny_model_dir: Path, expected: Expected) -> None:
    assert EngineConfig().enable_lora is False
    llm = LLM(model=str(tiny_model_dir), dtype="float32", num_kv_blocks=64, max_model_len=256)
    assert llm.engine.runner.lora is None and llm.engine.scheduler.lora_slots is None
    assert not any(isinstance(m, LoRALinear) for m in llm.engine.model.modules())
    prompts = make_prompts(3, 5, 40, seed=61)
    assert generate(llm, prompts, [None] * 3) == [expected(None, p) for p in prompts]
    with pytest.raises(InvalidRequestError, match="LoRA is off on this engine") as e:
        generate(llm, [[5, 6]], ["sql"])
    assert e.value.param == "lora_request"


def test_base_only_steps_of_a_lora_engine_do_no_lora_work(
    tiny_model_dir: Path,
    adapter_dirs: dict[str, Path],
    expected: Expected,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm = make_llm(tiny_model_dir, adapter_dirs)
    calls: list[Any] = []
    monkeypatch.setattr(LoRAManager, "apply", lambda *args: calls.append(args))
    prompts = make_prompts(3, 5, 40, seed=62)
    assert generate(llm, prompts, [None] * 3) == [expected(None, p) for p in prompts]
    assert calls == []
    assert llm.engine.runner.lora is not None and llm.engine.runner.lora.num_slot_loads == 0


def test_requests_for_adapters_the_engine_does_not_serve_are_refused(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path], expected: Expected
) -> None:
    llm = make_llm(tiny_model_dir, adapter_dirs)
    with pytest.raises(
        InvalidRequestError, match="unknown LoRA adapter 'nope'; this engine serves: 'sql', 'chat'"
    ):
        generate(llm, [[5, 6]], ["nope"])
    with pytest.raises(InvalidRequestError, match=r"LoRA adapter 'sql' is served from .*, not /x"):
        llm.generate([[5, 6]], GREEDY, use_tqdm=False, lora_request=AdapterRef("sql", "/x"))
    # vLLM's spelling: LoRARequest(lora_name, lora_int_id, lora_path)
    vllm_style = LoRARequest("sql", 1, str(adapter_dirs["sql"]))
    (out,) = llm.generate([[5, 6, 7]], GREEDY, use_tqdm=False, lora_request=vllm_style)
    assert out.token_ids == expected("sql", [5, 6, 7])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"enable_lora": True, "tensor_parallel_size": 2}, "does not work with tensor parallel"),
        ({"lora_modules": ["a=/x"]}, r"lora_modules \['a=/x'\] need enable_lora"),
        ({"enable_lora": True, "lora_modules": ["a"]}, "entries are name=path, got 'a'"),
        ({"enable_lora": True, "lora_modules": ["a=/x", "a=/y"]}, "names adapter 'a' twice"),
        ({"enable_lora": True, "max_loras": 0}, "max_loras must be at least 1"),
        ({"enable_lora": True, "max_lora_rank": 0}, "max_lora_rank must be at least 1"),
    ],
)
def test_bad_lora_settings_are_config_errors(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EngineConfig(**fields)


def test_the_serve_flags_carry_the_lora_settings() -> None:
    argv = ["--enable-lora", "--max-loras", "2", "--max-lora-rank", "16"]
    argv += ["--lora-modules", "sql=/a", "--lora-modules", "chat=/b"]
    config = EngineConfig(**values_for(EngineConfig, build_parser().parse_args(argv)))
    assert config.enable_lora and (config.max_loras, config.max_lora_rank) == (2, 16)
    assert config.lora_paths() == {"sql": "/a", "chat": "/b"}


def test_an_adapter_named_like_the_served_model_stops_the_engine(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path]
) -> None:
    with pytest.raises(ConfigError, match="'sql' is the base model's served name"):
        make_llm(tiny_model_dir, adapter_dirs, served_model_name="sql")


def test_an_unreadable_adapter_stops_the_engine(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"LoRA adapter 'broken': no adapter_config\.json"):
        make_llm(tiny_model_dir, {"broken": tmp_path})
