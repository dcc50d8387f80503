"""LoRA adapters over HTTP, through the official `openai` client against a live `pagedock serve`
with four adapters (three from the start, one loaded at run time): the request's `model` names an
adapter, /v1/models lists them, vLLM's load/unload endpoints change them while requests run, and
no request is lost when its adapter is unloaded under it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from prometheus_client.parser import text_string_to_metric_families

from engine import LLM, SamplingParams
from engine.inputs.engine_request import AdapterRef
from tests.engine.lora_factories import make_peft_adapter, write_adapter
from tests.server.conftest import tiny_server_args
from tests.server.server_process import ServerProcess, start_server

API_KEY = "lora-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
SPECS: dict[str, dict[str, Any]] = {
    "sql": dict(r=4, lora_alpha=16, target_modules=("q_proj", "v_proj")),
    "chat": dict(r=8, lora_alpha=16, target_modules=("o_proj", "down_proj")),
    "code": dict(r=8, lora_alpha=32, target_modules=("k_proj", "gate_proj", "up_proj")),
    "math": dict(r=4, lora_alpha=8, target_modules=("q_proj", "k_proj", "v_proj", "o_proj")),
}
AT_START = ("sql", "chat", "code")  # "math" is loaded at run time
MAX_NUM_SEQS = 4
PROMPTS = [f"Request {i}: the quick brown fox {'jumps ' * i}over" for i in range(6)]
LONG_TOKENS = 400  # a stream that runs for hundreds of steps
Offline = Callable[[str | None, str, int], str]


@pytest.fixture(scope="module")
def adapter_dirs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("server-adapters")
    return {
        name: make_peft_adapter(tiny_model_dir, root / name, seed=seed + 20, **spec)
        for seed, (name, spec) in enumerate(SPECS.items())
    }


@pytest.fixture(scope="module")
def lora_server(
    tiny_model_dir: Path, adapter_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    modules = [arg for n in AT_START for arg in ("--lora-modules", f"{n}={adapter_dirs[n]}")]
    args = tiny_server_args(
        tiny_model_dir,
        *("--dtype", "float32", "--max-model-len", "512", "--num-kv-blocks", "256"),
        *("--max-num-seqs", str(MAX_NUM_SEQS), "--enable-lora", "--max-loras", "2"),
        "--allow-runtime-lora-updating",
        *modules,
    )
    log = tmp_path_factory.mktemp("logs") / "lora-server.log"
    server = start_server(args, log, env={"PAGEDOCK_API_KEY": API_KEY})
    response = post(
        server, "/v1/load_lora_adapter", lora_name="math", lora_path=adapter_dirs["math"]
    )
    assert response.status_code == 200, response.text
    yield server
    server.stop()


@pytest.fixture(scope="module")
def offline(tiny_model_dir: Path, adapter_dirs: dict[str, Path]) -> Offline:
    """The offline engine's greedy text for a prompt under an adapter (None: the base model)."""
    llm = LLM(
        model=str(tiny_model_dir),
        dtype="float32",
        num_threads=1,
        max_model_len=512,
        num_kv_blocks=256,
        enable_lora=True,
        lora_modules=[f"{name}={path}" for name, path in adapter_dirs.items()],
    )
    cache: dict[tuple[str | None, str, int], str] = {}

    def text(adapter: str | None, prompt: str, max_tokens: int) -> str:
        key = (adapter, prompt, max_tokens)
        if key not in cache:
            params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
            ref = None if adapter is None else AdapterRef(adapter)
            (out,) = llm.generate([prompt], params, use_tqdm=False, lora_request=ref)
            cache[key] = out.outputs[0].text
        return cache[key]

    return text


@pytest.fixture(scope="module")
def client(lora_server: ServerProcess) -> OpenAI:
    return OpenAI(base_url=f"{lora_server.url}/v1", api_key=API_KEY, max_retries=0, timeout=60)


def post(server: ServerProcess, path: str, **body: Any) -> httpx.Response:
    body = {k: str(v) if isinstance(v, Path) else v for k, v in body.items()}
    return httpx.post(f"{server.url}{path}", json=body, headers=AUTH, timeout=60)


def complete(client: OpenAI, model: str, prompt: str, max_tokens: int = 8) -> str:
    response = client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=0.0,
        extra_body={"ignore_eos": True},
    )
    assert response.model == model
    return response.choices[0].text


def served_ids(server: ServerProcess) -> list[str]:
    response = httpx.get(f"{server.url}/v1/models", headers=AUTH)
    return [card["id"] for card in response.json()["data"]]


def in_flight(server: ServerProcess) -> float:
    """Requests running or waiting, by the server's gauges (updated after every step)."""
    text = httpx.get(f"{server.url}/metrics").text
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting")
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in names
    )


def async_client(server: ServerProcess) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=120)


async def open_stream(client: AsyncOpenAI, model: str, prompt: str) -> Any:
    """A streaming completion, returned once the server answered its headers: the request is
    in the engine (queued or running) from then on."""
    return await client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=LONG_TOKENS,
        temperature=0.0,
        stream=True,
        extra_body={"ignore_eos": True},
    )


async def read_stream(stream: Any) -> tuple[str, str | None]:
    """The stream's whole text and its finish reason."""
    text, finish_reason = [], None
    async for chunk in stream:
        if chunk.choices:
            text.append(chunk.choices[0].text)
            finish_reason = chunk.choices[0].finish_reason or finish_reason
    return "".join(text), finish_reason


def test_each_adapter_answers_as_the_offline_engine_and_unlike_the_base(
    client: OpenAI, model_name: str, offline: Offline
) -> None:
    prompt = PROMPTS[1]
    base = complete(client, model_name, prompt)
    assert base == offline(None, prompt, 8)
    for name in SPECS:
        answer = complete(client, name, prompt)
        assert answer == offline(name, prompt, 8), name
        assert answer != base, name


def test_a_chat_names_an_adapter_as_its_model(client: OpenAI, model_name: str) -> None:
    messages = [{"role": "user", "content": "Tell me about foxes"}]
    params: dict[str, Any] = dict(max_tokens=8, temperature=0.0, extra_body={"ignore_eos": True})
    with_adapter = client.chat.completions.create(model="chat", messages=messages, **params)  # type: ignore[arg-type]
    base = client.chat.completions.create(model=model_name, messages=messages, **params)  # type: ignore[arg-type]
    assert with_adapter.model == "chat"
    assert with_adapter.choices[0].message.content != base.choices[0].message.content


def test_an_unknown_model_is_a_404_in_openai_shape(
    client: OpenAI, lora_server: ServerProcess, model_name: str
) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        complete(client, "nope", "Hello")
    assert e.value.code == "model_not_found" and e.value.param == "model"
    assert f"'{model_name}', 'sql', 'chat', 'code', 'math'" in e.value.message
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    response = post(lora_server, "/tokenize", model="nope", prompt="Hello")
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"


def test_tokenize_and_render_take_an_adapter_as_the_model(lora_server: ServerProcess) -> None:
    base = post(lora_server, "/tokenize", prompt="Hello there")
    tokenized = post(lora_server, "/tokenize", model="sql", prompt="Hello there")
    assert tokenized.status_code == 200 and tokenized.json()["tokens"] == base.json()["tokens"]
    rendered = post(lora_server, "/v1/completions/render", model="code", prompt="Hello")
    assert rendered.status_code == 200 and rendered.json()[0]["model"] == "code"
    chat = post(lora_server, "/v1/chat/completions/render", model="chat", messages=[])
    assert chat.status_code == 400  # checked as generation checks it, adapter or not


def test_models_lists_each_adapter_with_its_parent_and_path(
    lora_server: ServerProcess, model_name: str, adapter_dirs: dict[str, Path]
) -> None:
    cards = httpx.get(f"{lora_server.url}/v1/models", headers=AUTH).json()["data"]
    assert cards[0]["id"] == model_name and cards[0]["parent"] is None
    adapters = {c["id"]: c for c in cards[1:]}
    assert list(adapters) == ["sql", "chat", "code", "math"]
    for name, card in adapters.items():
        assert (card["parent"], card["root"]) == (model_name, str(adapter_dirs[name]))
        assert card["object"] == "model"


def test_load_and_unload_at_run_time(
    client: OpenAI, lora_server: ServerProcess, adapter_dirs: dict[str, Path], offline: Offline
) -> None:
    path = adapter_dirs["code"]
    loaded = post(lora_server, "/v1/load_lora_adapter", lora_name="extra", lora_path=path)
    assert (loaded.status_code, loaded.text) == (
        200,
        "Success: LoRA adapter 'extra' added successfully.",
    )
    again = post(lora_server, "/v1/load_lora_adapter", lora_name="extra", lora_path=path)
    assert again.status_code == 200 and "already loaded" in again.text
    other = post(
        lora_server, "/v1/load_lora_adapter", lora_name="extra", lora_path=adapter_dirs["sql"]
    )
    assert other.status_code == 400
    assert str(path) in other.text and str(adapter_dirs["sql"]) in other.text
    assert complete(client, "extra", PROMPTS[2]) == offline("code", PROMPTS[2], 8)
    unloaded = post(lora_server, "/v1/unload_lora_adapter", lora_name="extra")
    assert (unloaded.status_code, unloaded.text) == (
        200,
        "Success: LoRA adapter 'extra' removed successfully.",
    )
    assert "extra" not in served_ids(lora_server)
    with pytest.raises(openai.NotFoundError):
        complete(client, "extra", PROMPTS[2])
    missing = post(lora_server, "/v1/unload_lora_adapter", lora_name="extra")
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "lora_name"


@pytest.mark.parametrize(
    ("name", "path", "param", "message"),
    [
        ("gone", "/nowhere/at/all", "lora_path", "/nowhere/at/all is not a directory"),
        ("empty", "EMPTY", "lora_path", "no adapter_config.json"),
        ("wide", "WIDE", "lora_path", "rank 128, above max_lora_rank 64"),
        ("MODEL", "SQL", "lora_name", "is the base model's served name"),
        ("", "SQL", "lora_name", "lora_name"),
    ],
)
def test_a_bad_adapter_is_a_400_naming_the_cause(
    lora_server: ServerProcess,
    adapter_dirs: dict[str, Path],
    model_name: str,
    tmp_path: Path,
    name: str,
    path: str,
    param: str,
    message: str,
) -> None:
    (tmp_path / "empty").mkdir()
    paths = {
        "EMPTY": tmp_path / "empty",
        "WIDE": write_adapter(tmp_path / "wide", r=128),
        "SQL": adapter_dirs["sql"],
    }
    name = model_name if name == "MODEL" else name
    response = post(
        lora_server, "/v1/load_lora_adapter", lora_name=name, lora_path=paths.get(path, path)
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error["message"] and error["param"] == param
    assert error["type"] == "invalid_request_error"


def test_the_adapter_endpoints_need_the_api_key(lora_server: ServerProcess) -> None:
    for path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        response = httpx.post(f"{lora_server.url}{path}", json={"lora_name": "sql"})
        assert response.status_code == 401


def test_the_adapter_endpoints_are_absent_without_the_flag(tiny_server: ServerProcess) -> None:
    body = {"lora_name": "x", "lora_path": "/x"}
    response = httpx.post(f"{tiny_server.url}/v1/load_lora_adapter", json=body)
    assert response.status_code == 404


def test_unloading_under_load_loses_no_request(
    lora_server: ServerProcess, adapter_dirs: dict[str, Path], offline: Offline
) -> None:
    """More streams than --max-num-seqs: at the unload some run and some wait; all finish, on the
    weights they started with, while the name is loaded again from other weights."""
    sql, code = adapter_dirs["sql"], adapter_dirs["code"]
    assert post(lora_server, "/v1/load_lora_adapter", lora_name="doomed", lora_path=sql).is_success

    async def run() -> tuple[list[tuple[str, str | None]], httpx.Response]:
        async with async_client(lora_server) as aclient:
            streams = await asyncio.gather(*(open_stream(aclient, "doomed", p) for p in PROMPTS))
            unloaded = await asyncio.to_thread(
                post, lora_server, "/v1/unload_lora_adapter", lora_name="doomed"
            )
            assert unloaded.status_code == 200, unloaded.text
            assert in_flight(lora_server) > 0  # its requests are still queued or running
            # New requests for it are refused; a load of the name waits for the old ones.
            with pytest.raises(openai.NotFoundError):
                await aclient.completions.create(model="doomed", prompt="x", max_tokens=2)
            reload = asyncio.create_task(
                asyncio.to_thread(
                    post, lora_server, "/v1/load_lora_adapter", lora_name="doomed", lora_path=code
                )
            )
            results = await asyncio.gather(*(read_stream(s) for s in streams))
            return results, await reload

    results, reload = asyncio.run(run())
    assert [finish for _, finish in results] == ["length"] * len(PROMPTS)
    assert [text for text, _ in results] == [offline("sql", p, LONG_TOKENS) for p in PROMPTS]
    assert reload.text == "Success: LoRA adapter 'doomed' added successfully."
    client = OpenAI(base_url=f"{lora_server.url}/v1", api_key=API_KEY, max_retries=0)
    assert complete(client, "doomed", PROMPTS[3]) == offline("code", PROMPTS[3], 8)
    assert post(lora_server, "/v1/unload_lora_adapter", lora_name="doomed").is_success


def test_loading_while_other_adapters_requests_run(
    client: OpenAI, lora_server: ServerProcess, adapter_dirs: dict[str, Path], offline: Offline
) -> None:
    prompts = PROMPTS[:3]

    async def run() -> list[tuple[str, str | None]]:
        async with async_client(lora_server) as aclient:
            streams = await asyncio.gather(*(open_stream(aclient, "chat", p) for p in prompts))
            loaded = await asyncio.to_thread(
                post,
                lora_server,
                "/v1/load_lora_adapter",
                lora_name="late",
                lora_path=adapter_dirs["math"],
            )
            assert loaded.status_code == 200, loaded.text
            late = await aclient.completions.create(
                model="late",
                prompt=PROMPTS[4],
                max_tokens=8,
                temperature=0.0,
                extra_body={"ignore_eos": True},
            )
            assert late.choices[0].text == offline("math", PROMPTS[4], 8)
            return await asyncio.gather(*(read_stream(s) for s in streams))

    results = asyncio.run(run())
    assert results == [(offline("chat", p, LONG_TOKENS), "length") for p in prompts]
    assert post(lora_server, "/v1/unload_lora_adapter", lora_name="late").is_success
