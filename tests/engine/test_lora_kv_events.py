"""KV events name the adapter: blocks an adapter's request stores carry its id and name (vLLM's
`lora_id`, `lora_name`), base-model blocks neither, so a consumer can chain each from its root."""

from __future__ import annotations

from pathlib import Path

from engine import LLM
from engine.core.kv_events import BlockStored, KVEvent
from engine.inputs.engine_request import AdapterRef
from engine.inputs.sampling_params import SamplingParams
from pagedock.kv.block_hash import hash_blocks, lora_root_hash
from tests.engine.factories import ROOT, make_request, make_scheduler, run_to_completion
from tests.engine.lora_factories import write_adapter


def stored(events: list[KVEvent]) -> list[BlockStored]:
    return [e for e in events if isinstance(e, BlockStored)]


def test_an_adapters_blocks_are_stored_with_its_id_and_name() -> None:
    scheduler = make_scheduler(enable_lora=True, max_loras=2, block_size=8)
    tokens = list(range(10, 26))
    base, sql = make_request(prompt=tokens, max_tokens=1), make_request(prompt=tokens, max_tokens=1)
    sql.lora_name, sql.lora_id = "sql", 3  # as the engine queues it (its registry's id)
    scheduler.add_request(base)
    scheduler.add_request(sql)
    run_to_completion(scheduler)
    events = stored(scheduler.take_kv_events())
    by_adapter = {(e.lora_id, e.lora_name): e for e in events}
    assert set(by_adapter) == {(None, None), (3, "sql")}
    assert by_adapter[None, None].block_hashes == hash_blocks(tokens, 8, ROOT)
    sql_root = lora_root_hash(ROOT, "sql")
    assert by_adapter[3, "sql"].block_hashes == hash_blocks(tokens, 8, sql_root)


def test_the_engine_publishes_an_adapters_blocks_with_its_load_id(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    modules = [f"{name}={write_adapter(tmp_path / name)}" for name in ("sql", "chat")]
    llm = LLM(
        model=str(tiny_model_dir),
        dtype="float32",
        num_kv_blocks=64,
        max_model_len=128,
        block_size=8,
        enable_lora=True,
        lora_modules=modules,
    )
    params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    prompts = [list(range(20, 36))] * 2
    llm.generate(prompts, params, use_tqdm=False, lora_request=[None, AdapterRef("chat")])
    batches = llm.engine.kv_events.since(-1)
    assert batches is not None
    events = stored([e for batch in batches for e in batch.events])
    # Ids in load order from 1 (vLLM's lora_int_id of --lora-modules): chat is the second.
    assert {(e.lora_id, e.lora_name) for e in events} == {(None, None), (2, "chat")}
