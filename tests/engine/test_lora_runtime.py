"""LoRA adapters loaded and unloaded while the engine runs (LLMEngine.add_lora, remove_lora,
list_loras): an adapter loaded at run time gives transformers + PEFT's tokens, loading is checked
as at start and is idempotent, ids are stable and never reused, and unloading drops no request
(those in flight finish, new ones are refused, the weights go after the last)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine import LLM, SamplingParams
from engine.config import EngineConfig
from engine.inputs.engine_request import AdapterRef, LoRARequest, UnknownAdapterError
from engine.lora.adapter_registry import LoRARegistry
from engine.lora.slots import LoRASlots
from engine.runtime.async_engine import AsyncEngine
from engine.runtime.llm_engine import LLMEngine
from engine.server.cli import build_parser
from pagedock.errors import ConfigError, InvalidRequestError, ModelLoadError
from pagedock.kv.block_hash import lora_root_hash
from pagedock.options import values_for
from tests.engine.conftest import hf_greedy, make_prompts
from tests.engine.lora_factories import make_peft_adapter, peft_reference, write_adapter

NUM_NEW_TOKENS = 10
GREEDY = SamplingParams(max_tokens=NUM_NEW_TOKENS, temperature=0.0, ignore_eos=True)
SPECS: dict[str, dict[str, Any]] = {
    "sql": dict(r=4, lora_alpha=16, target_modules=("q_proj", "v_proj")),
    "chat": dict(r=8, lora_alpha=16, target_modules=("o_proj", "down_proj")),
    "code": dict(r=8, lora_alpha=32, target_modules=("k_proj", "gate_proj", "up_proj")),
}


@pytest.fixture(scope="module")
def adapter_dirs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runtime-adapters")
    return {
        name: make_peft_adapter(tiny_model_dir, root / name, seed=seed + 10, **spec)
        for seed, (name, spec) in enumerate(SPECS.items())
    }


@pytest.fixture(scope="module")
def peft_tokens(tiny_model_dir: Path, adapter_dirs: dict[str, Path], hf_tiny_model: Any) -> Any:
    """transformers + PEFT's greedy tokens of a prompt under an adapter directory (None: base)."""
    models: dict[Path | None, Any] = {None: hf_tiny_model}

    def tokens(adapter_dir: Path | None, prompt: list[int]) -> list[int]:
        if adapter_dir not in models:
            assert adapter_dir is not None
            models[adapter_dir] = peft_reference(tiny_model_dir, adapter_dir)
        return hf_greedy(models[adapter_dir], prompt, NUM_NEW_TOKENS)

    return tokens


def make_engine(model_dir: Path, lora_modules: dict[str, Path], **overrides: Any) -> LLM:
    args: dict[str, Any] = dict(
        dtype="float32",
        num_kv_blocks=128,
        max_model_len=256,
        enable_lora=True,
        max_loras=2,
        lora_modules=[f"{name}={path}" for name, path in lora_modules.items()],
    )
    args.update(overrides)
    return LLM(model=str(model_dir), **args)


def generate(llm: LLM, prompts: list[list[int]], adapter: str | None) -> list[list[int]]:
    ref = None if adapter is None else AdapterRef(adapter)
    return [o.token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False, lora_request=ref)]


def run_to_completion(engine: LLMEngine) -> dict[str, list[int]]:
    """Step until nothing is left; every request's final tokens, by id."""
    tokens: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                tokens[output.request_id] = output.outputs[0].token_ids
    return tokens


def test_an_adapter_loaded_at_run_time_matches_peft(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path], peft_tokens: Any
) -> None:
    llm = make_engine(tiny_model_dir, {"sql": adapter_dirs["sql"]})
    prompts = make_prompts(3, 5, 30, seed=71)
    assert llm.engine.add_lora(LoRARequest("code", 0, str(adapter_dirs["code"]))) is True
    assert generate(llm, prompts, "code") == [peft_tokens(adapter_dirs["code"], p) for p in prompts]
    assert generate(llm, prompts, "sql") == [peft_tokens(adapter_dirs["sql"], p) for p in prompts]
    assert generate(llm, prompts, "code") != generate(llm, prompts, None)


def test_loading_is_idempotent_and_refuses_another_path_under_a_served_name(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path]
) -> None:
    llm = make_engine(tiny_model_dir, {"sql": adapter_dirs["sql"]})
    engine = llm.engine
    assert engine.add_lora(AdapterRef("sql", str(adapter_dirs["sql"]))) is False
    assert engine.add_lora(AdapterRef("chat", str(adapter_dirs["chat"]))) is True
    assert engine.add_lora(AdapterRef("chat", str(adapter_dirs["chat"]) + "/")) is False
    other = str(adapter_dirs["code"])
    with pytest.raises(InvalidRequestError, match=f"served from {adapter_dirs['sql']}.*{other}"):
        engine.add_lora(AdapterRef("sql", other))
    assert [(a.name, a.lora_id) for a in engine.list_loras()] == [("sql", 1), ("chat", 2)]


def test_loading_checks_the_adapter_as_the_start_does(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path], tmp_path: Path
) -> None:
    llm = make_engine(tiny_model_dir, {}, max_lora_rank=8)
    engine = llm.engine
    with pytest.raises(ModelLoadError, match=r"LoRA adapter 'broken': no adapter_config\.json"):
        engine.add_lora(AdapterRef("broken", str(tmp_path)))
    with pytest.raises(ModelLoadError, match="is not a directory"):
        engine.add_lora(AdapterRef("gone", str(tmp_path / "nowhere")))
    wide = write_adapter(tmp_path / "wide", r=16)
    with pytest.raises(ConfigError, match="rank 16, above max_lora_rank 8"):
        engine.add_lora(AdapterRef("wide", str(wide)))
    with pytest.raises(ConfigError, match="is the base model's served name"):
        engine.add_lora(AdapterRef(engine.served_model_name, str(adapter_dirs["sql"])))
    assert engine.list_loras() == []  # nothing half-loaded


def test_loading_needs_lora_on(tiny_model_dir: Path, adapter_dirs: dict[str, Path]) -> None:
    llm = LLM(model=str(tiny_model_dir), dtype="float32", num_kv_blocks=32, max_model_len=128)
    with pytest.raises(InvalidRequestError, match="LoRA is off on this engine"):
        llm.engine.add_lora(AdapterRef("sql", str(adapter_dirs["sql"])))


def test_ids_are_stable_one_based_and_never_reused(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path]
) -> None:
    llm = make_engine(tiny_model_dir, {"sql": adapter_dirs["sql"], "chat": adapter_dirs["chat"]})
    engine, registry = llm.engine, llm.engine.loras.registry
    assert (registry.lora_id("sql"), registry.lora_id("chat")) == (1, 2)
    engine.add_lora(AdapterRef("code", str(adapter_dirs["code"])))
    engine.remove_lora("sql")
    engine.add_lora(AdapterRef("sql", str(adapter_dirs["sql"])))
    assert [(a.name, a.lora_id) for a in engine.list_loras()] == [
        ("chat", 2),
        ("code", 3),
        ("sql", 4),
    ]
    assert engine.remove_lora(3) and registry.lora_id("code") is None  # vLLM removes by id


def test_unloading_an_unknown_adapter_is_an_error(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path]
) -> None:
    llm = make_engine(tiny_model_dir, {"sql": adapter_dirs["sql"]})
    with pytest.raises(
        UnknownAdapterError, match="'nope' is not loaded; this engine serves: 'sql'"
    ):
        llm.engine.remove_lora("nope")


def test_unloading_lets_requests_in_flight_finish_and_refuses_new_ones(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path], peft_tokens: Any
) -> None:
    # One request a step: with prompts queued behind running ones, some wait when it is unloaded.
    llm = make_engine(tiny_model_dir, {"sql": adapter_dirs["sql"]}, max_num_seqs=2)
    engine = llm.engine
    prompts = make_prompts(5, 5, 20, seed=81)
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, GREEDY, lora_request=AdapterRef("sql"))
    engine.step()
    assert engine.stats().num_waiting > 0 and engine.stats().num_running > 0
    engine.remove_lora("sql")
    assert engine.list_loras() == []
    with pytest.raises(UnknownAdapterError, match="unknown LoRA adapter 'sql'"):
        engine.add_request("late", prompts[0], GREEDY, lora_request=AdapterRef("sql"))
    lora, slots = engine.runner.lora, engine.scheduler.lora_slots
    assert lora is not None and slots is not None
    assert "sql" in lora.adapters  # still needed by the requests in flight
    finished = run_to_completion(engine)
    assert finished == {f"r{i}": peft_tokens(adapter_dirs["sql"], p) for i, p in enumerate(prompts)}
    assert "sql" not in lora.adapters and lora.slot_names == [None, None]
    assert slots.names == [None, None] and engine.loras.registry.unloading == []


def test_an_unused_adapter_is_released_at_once(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path]
) -> None:
    llm = make_engine(tiny_model_dir, {"sql": adapter_dirs["sql"]})
    generate(llm, make_prompts(1, 5, 5, seed=82), "sql")
    llm.engine.remove_lora("sql")
    lora = llm.engine.runner.lora
    assert lora is not None and lora.adapters == {} and lora.slot_names == [None, None]


def test_a_request_checked_before_an_unload_is_refused_when_queued(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path]
) -> None:
    """AsyncEngine checks a request on the event loop and queues it on the engine thread: an
    unload may come between."""
    llm = make_engine(tiny_model_dir, {"sql": adapter_dirs["sql"]})
    engine = llm.engine
    request = engine.input_processor.process("r", [5, 6, 7], GREEDY, lora_request=AdapterRef("sql"))
    engine.remove_lora("sql")
    with pytest.raises(UnknownAdapterError):
        engine.add_engine_request(request)
    assert not engine.has_unfinished_requests()


def test_a_name_still_unloading_cannot_be_loaded_again(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path]
) -> None:
    llm = make_engine(tiny_model_dir, {"sql": adapter_dirs["sql"]})
    engine = llm.engine
    engine.add_request("r", [5, 6, 7], GREEDY, lora_request=AdapterRef("sql"))
    engine.step()
    engine.remove_lora("sql")
    with pytest.raises(InvalidRequestError, match="'sql' is still unloading"):
        engine.add_lora(AdapterRef("sql", str(adapter_dirs["sql"])))
    run_to_completion(engine)
    assert engine.add_lora(AdapterRef("sql", str(adapter_dirs["sql"]))) is True


def test_a_name_loaded_again_with_other_weights_never_reuses_the_old_kv(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path], peft_tokens: Any
) -> None:
    llm = make_engine(tiny_model_dir, {"x": adapter_dirs["sql"]}, block_size=16)
    engine = llm.engine
    prompt = make_prompts(1, 40, 40, seed=83)[0]  # two full blocks
    assert generate(llm, [prompt], "x") == [peft_tokens(adapter_dirs["sql"], prompt)]
    engine.remove_lora("x")
    engine.add_lora(AdapterRef("x", str(adapter_dirs["chat"])))
    hits = engine.stats().prefix_cache_hits
    assert generate(llm, [prompt], "x") == [peft_tokens(adapter_dirs["chat"], prompt)]
    assert engine.stats().prefix_cache_hits == hits
    assert generate(llm, [prompt], "x") == [peft_tokens(adapter_dirs["chat"], prompt)]
    assert engine.stats().prefix_cache_hits == hits + 32  # its own blocks are found again


def test_a_name_loaded_again_with_the_same_weights_keeps_its_root_and_its_kv(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path], peft_tokens: Any
) -> None:
    """Its chains start where a router derives them (lora_root_hash(root, name)), before and after
    the reload, so the router's prefix affinity and the cached blocks both survive it; other
    weights under the name get a root of their own, which /v1/models lists (ServedAdapter)."""
    llm = make_engine(tiny_model_dir, {"x": adapter_dirs["sql"]}, block_size=16)
    engine = llm.engine
    named_root = lora_root_hash(engine.root_hash, "x").hex()
    assert [a.kv_root for a in engine.list_loras()] == [named_root]
    prompt = make_prompts(1, 40, 40, seed=84)[0]  # two full blocks
    generate(llm, [prompt], "x")
    engine.remove_lora("x")
    engine.add_lora(AdapterRef("x", str(adapter_dirs["sql"])))
    assert [a.kv_root for a in engine.list_loras()] == [named_root]
    hits = engine.stats().prefix_cache_hits
    assert generate(llm, [prompt], "x") == [peft_tokens(adapter_dirs["sql"], prompt)]
    assert engine.stats().prefix_cache_hits == hits + 32
    engine.remove_lora("x")
    engine.add_lora(AdapterRef("x", str(adapter_dirs["chat"])))
    other_root = engine.list_loras()[0].kv_root
    assert other_root not in ("", named_root)


def test_the_registry_reads_as_the_served_names_and_paths() -> None:
    registry = LoRARegistry()
    registry.add("a", "/a")
    registry.add("b", "/b")
    registry.remove("a")
    assert dict(registry) == {"b": "/b"} and registry.unloading == ["a"]
    assert (registry.lora_id("a"), registry.lora_id("b")) == (1, 2)  # "a" still has requests
    registry.finish_unloading("a")
    assert registry.lora_id("a") is None and registry.was_served("a")


def test_forgetting_an_idle_adapter_empties_its_slot() -> None:
    slots = LoRASlots(2)
    slot = slots.acquire("a")
    with pytest.raises(ValueError, match="still has running requests"):
        slots.forget("a")
    slots.release(slot)
    slots.forget("a")
    assert slots.names == [None, None] and slots.slot_of("a") is None
    assert slots.acquire("b") == 0


def test_runtime_updating_needs_lora_on() -> None:
    with pytest.raises(ConfigError, match=r"allow_runtime_lora_updating .* needs enable_lora"):
        EngineConfig(allow_runtime_lora_updating=True)
    assert EngineConfig(enable_lora=True, allow_runtime_lora_updating=True)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}, True),
        ({"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "0"}, False),
        ({"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "junk"}, False),  # vLLM: only 1 or true turn it on
        ({"PAGEDOCK_ALLOW_RUNTIME_LORA_UPDATING": "yes"}, True),
        (
            {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1", "PAGEDOCK_ALLOW_RUNTIME_LORA_UPDATING": "0"},
            False,  # pagedock's own variable wins
        ),
    ],
)
def test_runtime_updating_is_read_from_the_env(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: bool
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ns = build_parser().parse_args(["--enable-lora"])
    assert EngineConfig(**values_for(EngineConfig, ns)).allow_runtime_lora_updating is expected
    flag = build_parser().parse_args(["--enable-lora", "--allow-runtime-lora-updating"])
    assert EngineConfig(**values_for(EngineConfig, flag)).allow_runtime_lora_updating


@pytest.mark.asyncio
async def test_the_async_engine_loads_and_unloads_between_steps(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path], peft_tokens: Any
) -> None:
    llm = make_engine(tiny_model_dir, {}, num_threads=1)
    engine = AsyncEngine(llm.engine)
    engine.start()
    try:
        path = str(adapter_dirs["chat"])
        assert await engine.add_lora(AdapterRef("chat", path)) is True
        assert await engine.add_lora(AdapterRef("chat", path)) is False
        assert [(a.name, a.lora_id, a.path) for a in await engine.list_loras()] == [
            ("chat", 1, path)
        ]
        stream = await engine.add_request("r", [5, 6, 7], GREEDY, lora_request=AdapterRef("chat"))
        await engine.remove_lora("chat")  # queued behind the add: the request is in flight
        outputs = [o async for batch in stream.batches() for o in batch]
        assert outputs[-1].outputs[0].token_ids == peft_tokens(adapter_dirs["chat"], [5, 6, 7])
        assert await engine.list_loras() == []
        with pytest.raises(UnknownAdapterError):
            await engine.remove_lora("chat")
    finally:
        await engine.shutdown()
