"""StaticDiscovery: the --replica URLs, fixed for the router's life (laptops, tests)."""

from __future__ import annotations

from router.replicas.discovery import OnChange


class StaticDiscovery:
    def __init__(self, urls: list[str]) -> None:
        self.urls = list(urls)

    async def run(self, on_change: OnChange) -> None:
        on_change(set(self.urls))
