"""pagedock.options: a dataclass's fields as flags and env vars, with one boolean parser."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from pagedock.options import (
    OptionError,
    add_options,
    from_env,
    option_meta,
    options,
    parse_bool,
    values_for,
)

PREFIX = "EXAMPLE_"


@dataclass
class Example:
    port: int = 8000
    """TCP port."""
    verbose: bool = False
    """Log every step."""
    caching: bool = field(default=True, metadata=option_meta(off_flag="--no-cache"))
    """Reuse cached blocks."""
    image: str = field(default="img:1", metadata=option_meta(env="OTHER_IMAGE"))
    """Image to run."""
    replicas: list[str] = field(default_factory=list, metadata=option_meta(flag="--replica"))
    """Replica URLs."""
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch."""
    memory: int | str | None = None
    """Bytes, or a size such as 2GiB."""


def parse(argv: list[str], environ: dict[str, str] | None = None) -> Example:
    parser = argparse.ArgumentParser(prog="example")
    add_options(parser, Example, PREFIX, environ=environ or {})
    return Example(**values_for(Example, parser.parse_args(argv)))


@pytest.mark.parametrize("raw", ["1", "true", "yes", "on", "TRUE", " On ", "Yes\n"])
def test_true_spellings_read_as_true(raw: str) -> None:
    assert parse_bool(raw) is True


@pytest.mark.parametrize("raw", ["0", "false", "no", "off", "False", " OFF ", "No\n"])
def test_false_spellings_read_as_false(raw: str) -> None:
    assert parse_bool(raw) is False


@pytest.mark.parametrize("raw", ["maybe", "", "2", "t", "enabled"])
def test_any_other_boolean_is_an_error_naming_the_variable_and_value(raw: str) -> None:
    with pytest.raises(OptionError) as e:
        parse_bool(raw, "PAGEDOCK_ONEDNN")
    expected = f"PAGEDOCK_ONEDNN={raw!r}: expected one of 0, 1, false, no, off, on, true, yes"
    assert str(e.value) == expected


def test_a_field_without_flag_or_env_keeps_its_default() -> None:
    assert parse([]) == Example()


def test_the_env_var_sets_the_default_of_its_flag() -> None:
    assert parse([], {"EXAMPLE_PORT": "9000", "EXAMPLE_VERBOSE": "yes"}).port == 9000
    assert parse([], {"EXAMPLE_VERBOSE": "yes"}).verbose is True


def test_a_flag_on_the_command_line_beats_the_env_var() -> None:
    assert parse(["--port", "7000"], {"EXAMPLE_PORT": "9000"}).port == 7000
    assert parse(["--no-verbose"], {"EXAMPLE_VERBOSE": "true"}).verbose is False


def test_env_false_turns_a_default_on_switch_off() -> None:
    assert parse([], {"EXAMPLE_CACHING": "false"}).caching is False


def test_the_off_flag_alias_turns_a_switch_off() -> None:
    assert parse(["--no-cache"]).caching is False
    assert parse(["--no-caching"]).caching is False


def test_an_env_name_override_replaces_the_prefixed_name() -> None:
    assert parse([], {"OTHER_IMAGE": "img:2"}).image == "img:2"
    assert parse([], {"EXAMPLE_IMAGE": "img:3"}).image == "img:1"


def test_a_list_field_is_comma_separated_in_the_env() -> None:
    config = parse([], {"EXAMPLE_REPLICAS": "a, b,,c", "EXAMPLE_NAMESPACES": "x,y"})
    assert config.replicas == ["a", "b", "c"]
    assert config.namespaces == ("x", "y")


def test_a_repeated_flag_replaces_the_env_list() -> None:
    config = parse(["--replica", "c", "--replica", "d"], {"EXAMPLE_REPLICAS": "a,b"})
    assert config.replicas == ["c", "d"]


def test_an_empty_value_leaves_a_number_at_its_default() -> None:
    assert parse([], {"EXAMPLE_PORT": " "}).port == 8000


def test_an_unreadable_number_is_an_error_naming_the_variable() -> None:
    with pytest.raises(OptionError, match=r"EXAMPLE_PORT='eighty': expected int"):
        from_env(Example, PREFIX, {"EXAMPLE_PORT": "eighty"})


def test_a_bad_env_value_is_a_usage_error_of_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse([], {"EXAMPLE_VERBOSE": "maybe"})
    assert e.value.code == 2
    assert "example: error: EXAMPLE_VERBOSE='maybe': expected one of" in capsys.readouterr().err


def test_a_union_of_types_is_read_as_text_for_the_dataclass_to_parse() -> None:
    assert parse(["--memory", "2GiB"]).memory == "2GiB"


def test_from_env_builds_the_dataclass_from_the_environment_alone() -> None:
    environ = {"EXAMPLE_PORT": "1", "EXAMPLE_CACHING": "off", "EXAMPLE_NAMESPACES": "a"}
    assert from_env(Example, PREFIX, environ) == Example(port=1, caching=False, namespaces=("a",))


def test_help_comes_from_the_field_docstring_and_names_the_env_var() -> None:
    (port,) = [o for o in options(Example, PREFIX) if o.name == "port"]
    assert (port.help, port.env, port.flag) == ("TCP port.", "EXAMPLE_PORT", "--port")
    parser = argparse.ArgumentParser()
    add_options(parser, Example, PREFIX, environ={})
    assert "TCP port. [env EXAMPLE_PORT; default 8000]" in " ".join(parser.format_help().split())


@dataclass
class Extended(Example):
    timeout_s: float = 1.0
    """Seconds to wait."""


def test_a_subclass_keeps_the_help_of_its_bases_fields() -> None:
    helps = {o.name: o.help for o in options(Extended, PREFIX)}
    assert (helps["port"], helps["timeout_s"]) == ("TCP port.", "Seconds to wait.")
