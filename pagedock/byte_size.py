"""parse_bytes: a size in bytes as a flag, a variable or a Kubernetes quantity writes it."""

from __future__ import annotations

import re

from pagedock.errors import ConfigError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "ki": 1024,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mi": 1024**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gi": 1024**3,
    "gib": 1024**3,
}


def parse_bytes(value: int | str) -> int:
    """'2GiB', '512Mi', '1.5G' or a plain integer, as Kubernetes quantities are written."""
    if isinstance(value, int):
        amount = value
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ConfigError(f"cannot read {value!r} as a size in bytes (e.g. '2GiB')")
        amount = int(float(match.group(1)) * _UNITS[unit])
    if amount <= 0:
        raise ConfigError(f"a memory size must be positive, got {value!r}")
    return amount
