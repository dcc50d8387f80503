"""PromptHasher: the router's token ids are the engine server's, so its block hashes are too."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.core.block_hash import hash_blocks, root_hash
from engine.protocol import ChatCompletionRequest, CompletionRequest
from engine.server.prompts import completion_prompts, render_chat
from engine.text.tokenizer import Tokenizer
from router.prompt_hasher import PromptHasher, load_tokenizer

MESSAGES = [
    {"role": "system", "content": "You route requests to the replica that holds their blocks."},
    {"role": "user", "content": "Which replica holds my prefix? " * 8},
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    from tests.tiny_model import make_tiny_llama_dir

    return Tokenizer.from_hf_dir(make_tiny_llama_dir(tmp_path_factory.mktemp("tiny")))


def test_chat_token_ids_equal_the_engine_servers(tokenizer: Tokenizer) -> None:
    body = ChatCompletionRequest.model_validate({"messages": MESSAGES})
    blocks = PromptHasher(tokenizer).chat(body)
    assert blocks is not None
    assert blocks.token_ids == render_chat(tokenizer, body.template_messages(), True).token_ids


@pytest.mark.parametrize(
    "prompt",
    [
        "plain text prompt " * 10,
        [5, 6, 7] * 20,
        ["first prompt " * 9, "second"],
        [[9] * 40, [3, 4]],
    ],
    ids=["text", "ids", "text-batch", "ids-batch"],
)
def test_completion_token_ids_equal_the_engine_servers(tokenizer: Tokenizer, prompt: object) -> None:  # fmt: skip
    body = CompletionRequest.model_validate({"prompt": prompt})
    blocks = PromptHasher(tokenizer).completion(body)
    engine_prompts = completion_prompts(tokenizer, body.prompt)
    assert blocks is not None
    assert blocks.token_ids == engine_prompts[0].token_ids
    assert blocks.num_prompt_tokens == sum(len(p.token_ids) for p in engine_prompts)


def test_hashes_use_the_replicas_root_and_block_size(tokenizer: Tokenizer) -> None:
    body = ChatCompletionRequest.model_validate({"messages": MESSAGES})
    blocks = PromptHasher(tokenizer).chat(body)
    assert blocks is not None
    root = root_hash("tiny:float32")
    assert blocks.hashes(root, 16) == hash_blocks(blocks.token_ids, 16, root)
    assert blocks.hashes(root, 8) == hash_blocks(blocks.token_ids, 8, root)


def test_without_a_tokenizer_text_cannot_be_hashed_but_token_ids_can() -> None:
    hasher = PromptHasher(None)
    assert hasher.chat(ChatCompletionRequest.model_validate({"messages": MESSAGES})) is None
    assert hasher.completion(CompletionRequest.model_validate({"prompt": "text"})) is None
    ids = hasher.completion(CompletionRequest.model_validate({"prompt": [1, 2, 3]}))
    assert ids is not None and ids.token_ids == [1, 2, 3]


def test_the_engine_publishes_its_root_hash_in_the_kv_snapshot(tmp_path: Path) -> None:
    from engine.async_engine import KVSnapshot
    from engine.server.kv_events_stream import encode_snapshot

    line = encode_snapshot(KVSnapshot(seq=3, block_size=16, block_hashes=[b"\x01" * 32]), "i", root_hash=b"\x02".hex())  # fmt: skip
    assert b'"root_hash":"02"' in line


def test_an_unreachable_hf_tokenizer_leaves_the_router_balancing_by_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import huggingface_hub

    def offline(repo_id: str, **kwargs: object) -> str:
        raise ConnectionError("hub unreachable")

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    assert load_tokenizer("hf://acme/tiny-llama") is None
