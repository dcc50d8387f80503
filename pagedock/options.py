"""One options convention for every pagedock program: a dataclass's fields become command-line
flags and environment variables.

    field `max_num_seqs: int = 256`  ->  flag --max-num-seqs N  and  env PAGEDOCK_MAX_NUM_SEQS

A flag given on the command line wins over the environment, which wins over the field's default.
The type comes from the field's hint: bool, int, float or str; `X | None` is X; a union of several
types is str (the dataclass parses it, e.g. '2GiB'); list[X] and tuple[X, ...] repeat the flag and
are comma-separated in the environment. The help text is the string literal under the field.
Field metadata made by `option_meta` renames the env var or the flag, or adds an off-switch flag.

Booleans have one spelling set everywhere: 1/true/yes/on and 0/false/no/off (any case); anything
else is an error that names the variable. An empty value counts as unset, except for str and list
fields, where it is the value.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import json
import os
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pagedock.errors import ConfigError

T = TypeVar("T")

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
_META_KEY = "pagedock.option"


class OptionError(ValueError):
    """An environment variable holds a value its option cannot take."""


@dataclasses.dataclass(frozen=True)
class OptionMeta:
    env: str | None = None
    """The full env var name, instead of <PREFIX><FIELD_NAME_UPPER>."""
    flag: str | None = None
    """The flag, instead of --field-name."""
    off_flag: str | None = None
    """An extra flag that sets a bool field to False (vLLM's --no-prefix-caching)."""
    metavar: str | None = None
    """The value's name in --help, instead of one derived from the type and field name."""


def option_meta(
    *,
    env: str | None = None,
    flag: str | None = None,
    off_flag: str | None = None,
    metavar: str | None = None,
) -> dict[str, OptionMeta]:
    """Field metadata: `field(default=..., metadata=option_meta(env="PAGEDOCK_ENGINE_IMAGE"))`."""
    return {_META_KEY: OptionMeta(env, flag, off_flag, metavar)}


@dataclasses.dataclass(frozen=True)
class Option:
    """One field of a dataclass, as a flag and an env var."""

    name: str
    kind: type
    """bool, int, float or str; of each item for a repeated option."""
    default: Any
    help: str
    env: str
    flag: str
    off_flag: str | None = None
    container: type | None = None
    """list or tuple for a repeated option, else None."""
    metavar: str | None = None


def options(cls: type, env_prefix: str) -> list[Option]:
    """The options of a dataclass, one per field, with env names `env_prefix + NAME`."""
    hints = typing.get_type_hints(cls)
    docs = _field_docstrings(cls)
    found = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_META_KEY, OptionMeta())
        kind, container = _option_type(hints[f.name])
        found.append(
            Option(
                name=f.name,
                kind=kind,
                default=_default(f),
                help=docs.get(f.name, ""),
                env=meta.env or env_prefix + f.name.upper(),
                flag=meta.flag or "--" + f.name.replace("_", "-"),
                off_flag=meta.off_flag,
                container=container,
                metavar=meta.metavar,
            )
        )
    return found


def json_object_option(value: str | dict[str, Any], flag: str, cls: type) -> dict[str, Any]:
    """A flag whose value is a JSON object of the dataclass `cls`'s fields (vLLM's
    --kv-events-config, --speculative-config), as a dict; the dict itself passes through.
    ConfigError for text that is not JSON, for anything but an object, and for a key that is no
    field of `cls`, naming it: a typo must not be dropped silently."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{flag} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag} must be a JSON object")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(f"{flag}: unknown keys {unknown}; known: {sorted(known)}")
    return value


# ---- the environment -------------------------------------------------------------------------


def parse_bool(raw: str, name: str = "value") -> bool:
    """1/true/yes/on -> True, 0/false/no/off -> False (any case); else an error naming `name`."""
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    expected = ", ".join(sorted(TRUE_WORDS | FALSE_WORDS))
    raise OptionError(f"{name}={raw!r}: expected one of {expected}")


def parse_env_value(option: Option, raw: str) -> Any:
    """The value of `option` that the env var text `raw` stands for."""
    if option.container is not None:
        items = [item.strip() for item in raw.split(",") if item.strip()]
        return option.container(_parse_scalar(option, item) for item in items)
    return _parse_scalar(option, raw)


def read_env(
    cls: type, env_prefix: str, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The parsed values of the options of `cls` that the environment sets (unset ones absent)."""
    env = os.environ if environ is None else environ
    values = {}
    for option in options(cls, env_prefix):
        raw = env.get(option.env)
        if raw is None or (not raw.strip() and _empty_means_unset(option)):
            continue
        values[option.name] = parse_env_value(option, raw)
    return values


def from_env(cls: type[T], env_prefix: str, environ: Mapping[str, str] | None = None) -> T:
    """An instance of the dataclass `cls` from the environment alone (programs without flags)."""
    return cls(**read_env(cls, env_prefix, environ))


def _parse_scalar(option: Option, raw: str) -> Any:
    if option.kind is bool:
        return parse_bool(raw, option.env)
    if option.kind is str:
        return raw
    try:
        return option.kind(raw.strip())
    except ValueError:
        raise OptionError(f"{option.env}={raw!r}: expected {option.kind.__name__}") from None


def _empty_means_unset(option: Option) -> bool:
    # NOTE: manifests often render an unset value as "": a number or switch then keeps its default.
    return option.container is None and option.kind is not str


# ---- the command line ------------------------------------------------------------------------


def add_options(
    parser: argparse.ArgumentParser,
    cls: type,
    env_prefix: str,
    *,
    title: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """A flag per field of `cls` on `parser` (in an argument group when `title` is given), each
    defaulting to its env var's value, else the field's default. A bad env value ends the program
    as a usage error does (exit status 2), naming the variable."""
    target: Any = parser.add_argument_group(title) if title else parser
    try:
        env_values = read_env(cls, env_prefix, environ)
    except OptionError as e:
        # NOTE: not parser.error(): its usage line would show a half-built parser.
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    for option in options(cls, env_prefix):
        _add_flag(target, option, env_values.get(option.name, option.default))


def values_for(cls: type, namespace: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `cls` from parsed flags (each flag's dest is its field's name)."""
    return {f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls)}


def _add_flag(target: Any, option: Option, default: Any) -> None:
    help_text = f"{option.help} [env {option.env}; default {_shown(option.default)}]"
    help_text = help_text.replace("%", "%%")  # argparse formats help with %
    if option.container is not None:
        target.add_argument(
            option.flag,
            dest=option.name,
            action=_Repeated,
            type=option.kind,
            default=default,
            metavar=_metavar(option),
            help=help_text + " (repeat the flag; comma-separated in the env)",
        )
    elif option.kind is bool:
        target.add_argument(
            option.flag,
            dest=option.name,
            action=argparse.BooleanOptionalAction,
            default=default,
            help=help_text,
        )
        if option.off_flag:
            target.add_argument(
                option.off_flag,
                dest=option.name,
                action="store_false",
                help=f"same as --no-{option.flag[2:]}",
            )
    else:
        target.add_argument(
            option.flag,
            dest=option.name,
            type=option.kind,
            default=default,
            metavar=_metavar(option),
            help=help_text,
        )


class _Repeated(argparse.Action):
    """`append`, except that the first use on the command line replaces the env/default list."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest)
        container = type(self.default) if isinstance(self.default, (list, tuple)) else list
        items = [] if current is self.default else list(current)
        setattr(namespace, self.dest, container([*items, values]))


def _metavar(option: Option) -> str:
    if option.metavar:
        return option.metavar
    if option.kind is int:
        return "N"
    if option.kind is float:
        return "SECONDS" if "timeout" in option.name or option.name.endswith("_s") else "X"
    word = option.name.split("_")[-1].upper()
    return word.removesuffix("S") if option.container else word


def _shown(default: Any) -> Any:
    if isinstance(default, (list, tuple)):
        return ",".join(map(str, default)) or "none"
    return default


# ---- reading the dataclass ------------------------------------------------------------------


def _option_type(hint: Any) -> tuple[type, type | None]:
    """(item type, container): list[str] -> (str, list); int | None -> (int, None)."""
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        args = [arg for arg in typing.get_args(hint) if arg is not Ellipsis]
        return (_scalar_type(args[0]) if args else str), origin
    return _scalar_type(hint), None


def _scalar_type(hint: Any) -> type:
    """int | None -> int; int | str | None -> str (the dataclass parses strings such as '2GiB')."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _scalar_type(args[0]) if len(args) == 1 else str
    return hint if hint in (bool, int, float, str) else str


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _field_docstrings(cls: type) -> dict[str, str]:
    """The string literal under each field of a dataclass (how pagedock documents its fields),
    its dataclass bases' fields included."""
    docs: dict[str, str] = {}
    for base in reversed(cls.__mro__[1:]):
        if dataclasses.is_dataclass(base):
            docs.update(_own_field_docstrings(base))
    return docs | _own_field_docstrings(cls)


def _own_field_docstrings(cls: type) -> dict[str, str]:
    try:
        tree = ast.parse(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for prev, node in itertools.pairwise(body):
        if (
            isinstance(prev, ast.AnnAssign)
            and isinstance(prev.target, ast.Name)
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docs[prev.target.id] = " ".join(node.value.value.split())
    return docs
