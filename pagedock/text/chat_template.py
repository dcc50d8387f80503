"""Render a model's own Jinja chat template, sandboxed, the way transformers does.

A chat template is code that came with a model file, so it runs in Jinja's immutable sandbox:
no attribute access to Python internals, no mutation of the messages it is given. The
environment mirrors transformers' (trim_blocks, lstrip_blocks, loop controls, a `tojson` that
does not HTML-escape, `raise_exception`, `strftime_now`) so that a template renders here exactly
as it does there: the router and the engine must tokenize a chat identically.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

from pagedock.errors import ConfigError, InvalidRequestError, ModelLoadError

# Errors a template raises while rendering that come from what the request put in the messages.
_RENDER_ERRORS = (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError)


class ChatTemplate:
    """A compiled chat template plus the special tokens it may refer to (`bos_token`, ...)."""

    def __init__(self, source: str, special_tokens: Mapping[str, str | None] | None = None) -> None:
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        self._template = compile_chat_template(source)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        documents: list[dict[str, Any]] | None = None,
        **template_kwargs: Any,
    ) -> str:
        """The prompt text for `messages`; InvalidRequestError for bad messages.

        `add_generation_prompt` appends the header of the assistant's turn, so the model answers
        rather than continues the user's text. Extra keyword arguments reach the template as
        variables (e.g. `enable_thinking`).
        """
        checked = validate_messages(messages)
        context = {
            **self.special_tokens,
            **template_kwargs,
            "messages": checked,
            "add_generation_prompt": add_generation_prompt,
            "tools": tools,
            "documents": documents,
        }
        try:
            return self._template.render(**context)
        except _RENDER_ERRORS as e:
            raise InvalidRequestError(
                f"the model's chat template rejected the messages: {e}", param="messages"
            ) from e


def render_chat_template(
    source: str | None,
    messages: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool = True,
    special_tokens: Mapping[str, str | None] | None = None,
    model_name: str = "this model",
    **template_kwargs: Any,
) -> str:
    """Render `messages` with template `source`; InvalidRequestError when there is no template."""
    if not source:
        raise InvalidRequestError(
            f"{model_name} has no chat template, so it cannot serve chat requests; send a raw "
            "prompt to /v1/completions instead",
            param="messages",
        )
    template = ChatTemplate(source, special_tokens)
    return template.render(messages, add_generation_prompt, **template_kwargs)


SHIPPED_TEMPLATES_DIR = Path(__file__).parent / "templates"
# vLLM's rule for --chat-template: a value that names no file but holds one of these is a template.
_JINJA_CHARS = ("{", "}", "\n")


def chat_template_source(option: str | None, shipped: Path | None = None) -> str | None:
    """The template to render chats with: `--chat-template` when given (a file path, or the
    template itself), else the one pagedock ships for a built-in model, else None (the model's
    own). ConfigError for a path that is not there, ModelLoadError for a template that is not
    valid Jinja; both before serving starts."""
    if option:
        source = _read_template_option(option)
    elif shipped is not None:
        source = shipped.read_text(encoding="utf-8")
    else:
        return None
    compile_chat_template(source)
    return source


def _read_template_option(option: str) -> str:
    path = Path(option).expanduser()
    try:
        if path.is_file():
            return path.read_text(encoding="utf-8")
    except OSError as e:  # a template too long to be a file name, say
        if not any(c in option for c in _JINJA_CHARS):
            raise ConfigError(f"--chat-template {option!r}: cannot read it ({e})") from e
    if any(c in option for c in _JINJA_CHARS):
        return option
    raise ConfigError(
        f"--chat-template {option!r}: no such file, and not a Jinja template either (pass a "
        "file path or the template text)"
    )


def validate_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Check the OpenAI message shape and return plain-dict copies with string content.

    Content may be a string, a list of `{"type": "text", "text": ...}` parts (joined with
    newlines, as OpenAI clients send them), or None on an assistant message that carries
    `tool_calls`. Anything else is an InvalidRequestError naming the offending field.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidRequestError("messages must be a list of {role, content} objects", "messages")
    if not messages:
        raise InvalidRequestError("messages must not be empty", "messages")
    return [_validate_message(i, m) for i, m in enumerate(messages)]


def _validate_message(index: int, message: Any) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        raise InvalidRequestError(f"{where} must be an object with role and content", where)
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise InvalidRequestError(f"{where}.role must be a non-empty string", f"{where}.role")
    if "content" not in message:
        raise InvalidRequestError(f"{where} has no content", f"{where}.content")
    checked = dict(message)
    checked["content"] = _content_text(message["content"], message, f"{where}.content")
    return checked


def _content_text(content: Any, message: Mapping[str, Any], where: str) -> str | None:
    if isinstance(content, str):
        return content
    if content is None and message.get("tool_calls"):
        return None
    if isinstance(content, list) and content:
        texts = []
        for i, part in enumerate(content):
            if not (isinstance(part, Mapping) and part.get("type") == "text"):
                raise InvalidRequestError(
                    f"{where}[{i}]: only text content parts are supported", f"{where}[{i}]"
                )
            if not isinstance(part.get("text"), str):
                raise InvalidRequestError(f"{where}[{i}].text must be a string", f"{where}[{i}]")
            texts.append(part["text"])
        return "\n".join(texts)
    raise InvalidRequestError(
        f"{where} must be a string or a list of text parts, got {type(content).__name__}", where
    )


@functools.lru_cache(maxsize=8)
def compile_chat_template(source: str) -> jinja2.Template:
    """Compile a template once per distinct source; ModelLoadError when it is not valid Jinja."""
    try:
        return _environment().from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ModelLoadError(f"the model's chat template is not valid Jinja: {e}") from e


@functools.cache
def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationTag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["namespace"] = _SafeNamespace
    env.globals["dict"] = _make_dict
    return env


def _raise_exception(message: str) -> None:
    """Lets a template refuse a conversation (e.g. "roles must alternate")."""
    raise jinja2.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    """Templates that print today's date in the system prompt call this."""
    return datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; a prompt must carry them verbatim.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _make_dict(*args: Any, **kwargs: Any) -> dict[Any, Any]:
    # A plain function rather than the `dict` type: a template must not reach type internals.
    return dict(*args, **kwargs)


class _SafeNamespace(jinja2.utils.Namespace):
    """`namespace()` that refuses underscore-prefixed attributes (the sandbox only guards reads)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # Jinja's signature: self comes in args
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _SafeNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _SafeNamespace._check_name(name)
        super().__setitem__(name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"chat templates may not set underscore-prefixed attribute {name!r}"
            )


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: marks assistant text for training masks.

    Serving has no use for the mask, so the block just renders its body.
    """

    tags = {"generation"}  # noqa: RUF012 (Jinja reads this class attribute)

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_render_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_body(self, caller: Callable[[], str]) -> str:
        return caller()
