"""The operator's /metrics endpoint: a small aiohttp server on `metrics_port`, beside kopf's own
liveness endpoint (which serves /healthz only, on its own port).

NOTE: a port that cannot be bound is logged as an error and the operator goes on without
/metrics: reconciling matters more than being watched (the chart's alerts then see no series).
"""

import logging

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from llm_operator.operator_metrics import OperatorMetrics

logger = logging.getLogger(__name__)


class MetricsServer:
    def __init__(self, metrics: OperatorMetrics) -> None:
        self.metrics = metrics
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)

    async def start(self, port: int, host: str | None = None) -> bool:
        """Listen on `port` (all interfaces unless `host`); False when the port is taken."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError as error:
            logger.error("cannot serve /metrics on port %d: %s", port, error)
            await self._runner.cleanup()
            return False
        logger.info("serving /metrics on port %d", port)
        return True

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )
