"""GET one engine pod's JSON endpoint (/startup, /drain) at its pod IP, on the operator's scrape
timeout; None for anything but a 200 with a JSON object."""

import math
from typing import Any

import aiohttp

Obj = dict[str, Any]


async def get_engine_json(ip: str, port: int, path: str, timeout_seconds: float) -> Obj | None:
    host = f"[{ip}]" if ":" in ip else ip
    timeout = aiohttp.ClientTimeout(total=timeout_seconds)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"http://{host}:{port}{path}") as response,
        ):
            if response.status != 200:
                return None
            body = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def finite_seconds(value: Any) -> float | None:
    """A JSON number of seconds an engine reported, to the millisecond; None for anything else
    (a bool, a string, NaN, infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return round(float(value), 3)
