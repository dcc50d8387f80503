"""Fleet health for the status: the engines' vLLM-named Prometheus gauges and counters, summed.

Engine pods are found through their headless Service's DNS name (no extra RBAC); each pod's
/metrics is read with a short timeout. Anything unreachable is skipped: health is best effort.
"""

import asyncio
import dataclasses
import math
import socket

import aiohttp

from llm_operator.names import ENGINE_PORT

SAMPLES = (
    "vllm:kv_cache_usage_perc",
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
)


@dataclasses.dataclass(frozen=True)
class FleetStats:
    kv_cache_usage: float
    prefix_cache_hit_rate: float | None
    num_requests_waiting: int
    num_requests_running: int

    def status_fields(self) -> dict[str, float | int]:
        """The status fields these give (a hit rate only once there were lookups)."""
        fields = {
            "kvCacheUsage": self.kv_cache_usage,
            "prefixCacheHitRate": self.prefix_cache_hit_rate,
            "numRequestsWaiting": self.num_requests_waiting,
            "numRequestsRunning": self.num_requests_running,
        }
        return {key: value for key, value in fields.items() if value is not None}


def parse_samples(text: str) -> dict[str, float]:
    """Sum of each wanted metric's samples (labels ignored) in a Prometheus text exposition."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{") if "{" in line else line.partition(" ")
        name = name.strip()
        wanted = name if name in SAMPLES else name.removesuffix("_total") + "_total"
        if wanted not in SAMPLES:
            continue
        value = float(rest.rsplit("}", 1)[-1].split()[0])
        if math.isfinite(value):
            totals[wanted] = totals.get(wanted, 0.0) + value
    return totals


def aggregate(per_pod: list[dict[str, float]]) -> FleetStats | None:
    if not per_pod:
        return None

    def total(key: str) -> float:
        return sum(sample.get(key, 0.0) for sample in per_pod)

    queries = total("vllm:prefix_cache_queries_total")
    hit_rate = round(total("vllm:prefix_cache_hits_total") / queries, 3) if queries else None
    return FleetStats(
        kv_cache_usage=round(total("vllm:kv_cache_usage_perc") / len(per_pod), 3),
        prefix_cache_hit_rate=hit_rate,
        num_requests_waiting=int(total("vllm:num_requests_waiting")),
        num_requests_running=int(total("vllm:num_requests_running")),
    )


async def scrape_fleet(service_host: str, timeout_seconds: float) -> FleetStats | None:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            service_host, ENGINE_PORT, type=socket.SOCK_STREAM
        )
    except OSError:
        return None
    addresses = sorted({str(info[4][0]) for info in infos})
    timeout = aiohttp.ClientTimeout(total=timeout_seconds)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        results = await asyncio.gather(*(_scrape(session, ip) for ip in addresses))
    return aggregate([sample for sample in results if sample is not None])


async def _scrape(session: aiohttp.ClientSession, ip: str) -> dict[str, float] | None:
    host = f"[{ip}]" if ":" in ip else ip
    try:
        async with session.get(f"http://{host}:{ENGINE_PORT}/metrics") as response:
            if response.status != 200:
                return None
            return parse_samples(await response.text())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
