"""`LLM.chat(..., tools=...)` offline: the tools render as the server renders them, and a call
forced with tool_call_schema through structured outputs parses with `parse_tool_calls`, as
docs/tool-calling.md shows. The tiny model's choices are noise and its tokens single characters;
the guidance makes them a call."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from engine import LLM, SamplingParams
from engine.inputs.sampling_params import StructuredOutputsParams
from engine.tool_calls import parse_tool_calls, tool_call_schema
from pagedock.errors import InvalidRequestError
from pagedock.text.chat_template import SHIPPED_TEMPLATES_DIR
from pagedock.text.prompt_renderer import read_conversation, render_chat

PARAMETERS = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"enum": [1, 2, 3]}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def llm(tiny_model_dir: Path) -> LLM:
    template = str(SHIPPED_TEMPLATES_DIR / "chatml_tools.jinja")
    return LLM(model=str(tiny_model_dir), chat_template=template, num_kv_blocks=64, num_threads=1)


def test_chat_renders_the_tools_as_the_server_does(llm: LLM) -> None:
    [out] = llm.chat(ASK, SamplingParams(max_tokens=1), use_tqdm=False, tools=[WEATHER])
    served = render_chat(llm.engine.tokenizer, read_conversation(ASK, tools=[WEATHER]))
    assert out.prompt_token_ids == served.token_ids
    assert served.text is not None and json.dumps(WEATHER) in served.text


def test_a_call_forced_by_the_tool_call_schema_parses_and_validates(llm: LLM) -> None:
    schema = tool_call_schema([WEATHER], function_name="get_weather", parallel_tool_calls=False)
    params = SamplingParams(
        max_tokens=128, temperature=0.0, structured_outputs=StructuredOutputsParams(json=schema)
    )
    [out] = llm.chat(ASK, params, use_tqdm=False, tools=[WEATHER])
    assert out.finish_reason == "stop"
    [call] = parse_tool_calls(out.text, "json_list").calls
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), PARAMETERS)


def test_bad_tools_are_refused_before_generation(llm: LLM) -> None:
    with pytest.raises(InvalidRequestError) as error:
        llm.chat(ASK, tools=[{"type": "function", "function": {"name": "bad name"}}])
    assert error.value.param == "tools"
