"""RouterContext: the router's parts, built once per app (no globals, so tests can run several)."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from pagedock.tenancy.quota_store import QuotaStore, open_quota_store
from pagedock.tracing.tracer import Tracing
from router.config import RouterConfig
from router.demand import DemandTracker
from router.flow.flow_controller import FlowController
from router.flow.flow_metrics import FlowMetrics
from router.flow.tenant_resolver import TenantResolver
from router.http.body_budget import BodyBudget
from router.http.hold_queue import HoldQueue
from router.http.proxy import Proxy
from router.http.request_parser import RequestParser
from router.kv.hot_prefixes import HotPrefixes
from router.kv.kv_index import KVIndex
from router.kv.prompt_hasher import PromptHasher, load_tokenizer
from router.kv.subscriber_base import cancel_and_wait
from router.metrics import RouterMetrics
from router.policies import make_policy
from router.policies.dispatcher import Dispatcher
from router.policies.response_owners import ResponseOwners
from router.replicas.discovery import Discovery, make_discovery
from router.replicas.replica_set import ReplicaSet
from router.replicas.warmer import Warmer

logger = logging.getLogger("pagedock.router")


@dataclass
class RouterContext:
    config: RouterConfig
    hasher: PromptHasher
    discovery: Discovery
    index: KVIndex = field(default_factory=KVIndex)
    metrics: RouterMetrics = field(init=False)
    client: httpx.AsyncClient = field(init=False)
    """Health checks and KV event streams; proxied requests go through the proxy's own aiohttp
    session (router/http/upstream.py)."""
    replica_set: ReplicaSet = field(init=False)
    dispatcher: Dispatcher = field(init=False)
    proxy: Proxy = field(init=False)
    demand: DemandTracker = field(init=False)
    hold: HoldQueue = field(init=False)
    """Requests waiting for a first ready replica (router/http/hold_queue.py)."""
    body_budget: BodyBudget = field(init=False)
    """The bytes of request bodies under way, bounded (router/http/body_budget.py)."""
    hot: HotPrefixes = field(init=False)
    """Recent hot prompt prefixes, to warm new replicas with (router/replicas/warmer.py)."""
    prompt_pool: ThreadPoolExecutor = field(init=False)
    """Hashes large request bodies off the event loop (two threads: bounded work)."""
    parser: RequestParser = field(init=False)
    """Parses and hashes request bodies, for the HTTP API and the endpoint picker alike (large
    bodies validated in a process of its own: pagedock/http/validation_process.py)."""
    tracing: Tracing | None = None
    """Where the requests' spans go (--otlp-traces-endpoint); None: tracing is off."""
    tenants: TenantResolver = field(init=False)
    """Who each request belongs to (router/flow/tenant_resolver.py)."""
    quotas: QuotaStore = field(init=False)
    """Each tenant's counts against its quotas (--quota-store)."""
    flow: FlowController = field(init=False)
    """Priority bands and fair shares while the fleet is busy (router/flow/flow_controller.py)."""
    flow_metrics: FlowMetrics = field(init=False)
    response_owners: ResponseOwners = field(init=False)
    """The replica that produced each Responses API response (its follow-ups go there)."""
    _discovery_task: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        c = self.config
        self.metrics = RouterMetrics(c.policy)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
        timeout = httpx.Timeout(c.request_timeout_s, connect=c.connect_timeout_s)
        self.client = httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False)
        self.replica_set = ReplicaSet(c, self.index, self.client, self.metrics)
        self.hold = HoldQueue(
            c.hold_queue_size,
            c.hold_timeout_s,
            lambda: bool(self.replica_set.healthy()),
            c.hold_queue_bytes,
        )
        self.body_budget = BodyBudget(c.max_buffered_body_bytes)
        self.tenants = TenantResolver(c)
        self.quotas = open_quota_store(c.quota_store)
        self.flow = FlowController(c, lambda: len(self.replica_set.healthy()))
        self.flow_metrics = FlowMetrics(self.metrics.registry, self.tenants.known_priorities())
        self.replica_set.on_ready = self._replica_ready
        self.hot = HotPrefixes(c.hot_prefix_entries, c.block_size)
        self.replica_set.warmer = Warmer(c, self.hot, self.client)
        self.dispatcher = Dispatcher(c, self.replica_set, self.index, make_policy(c))
        self.demand = DemandTracker()
        self.response_owners = ResponseOwners(
            c.response_owners_max_entries, c.response_owners_ttl_s
        )
        self.proxy = Proxy(
            self.dispatcher, self.replica_set, self.metrics, c.replica_api_key, self.demand
        )
        self.prompt_pool = ThreadPoolExecutor(2, thread_name_prefix="pagedock-prompt")
        self.parser = RequestParser(c, self.hasher, self.prompt_pool)

    def _replica_ready(self) -> None:
        """A replica turned ready: held requests go, and flow queues get its slots."""
        self.hold.release()
        self.flow.pump()

    @classmethod
    def from_config(cls, config: RouterConfig) -> RouterContext:
        tokenizer = load_tokenizer(config.model, config.chat_template) if config.model else None
        if tokenizer is None:
            logger.warning("no tokenizer: the router balances by load only, without cache affinity")
        return cls(config, PromptHasher(tokenizer), make_discovery(config))

    async def start(self) -> None:
        await self.proxy.start()
        self._discovery_task = asyncio.create_task(self.discovery.run(self.replica_set.update))

    async def stop(self) -> None:
        await cancel_and_wait(self._discovery_task)
        await self.replica_set.close()
        await self.client.aclose()
        await self.proxy.close()
        self.prompt_pool.shutdown(wait=False, cancel_futures=True)
        self.parser.validation.close()
        await self.quotas.close()
