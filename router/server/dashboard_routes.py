"""The router's live web view: GET /dashboard (a page) and the data it draws.

    /dashboard          the page (router/dashboard/dashboard.html): open, it holds no data
    /dashboard/state    the fleet snapshot as JSON (router/dashboard/fleet_snapshot.py)
    /dashboard/events   the same snapshot as Server-Sent Events, twice a second

The data routes sit behind the guard of /router/replicas (the router's API key, or a tenant's
key with --tenants). A browser can't send an Authorization header with a page load or an
EventSource, so the page asks for the key (or reads it from the URL's #key= fragment, which no
server or proxy log sees) and reads the events with fetch() and a Bearer header; no key ever goes
in a URL a server sees.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.resources import files

from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import HTMLResponse, StreamingResponse

from pagedock.http.errors import APIError
from router.dashboard.fleet_snapshot import fleet_snapshot
from router.dashboard.snapshot_feed import SnapshotFeed, TooManyViewers
from router.server.context import RouterContext

# The page runs only its own inline script and talks only to this router.
_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
_SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def dashboard_page() -> bytes:
    """The page as the package ships it (package data of router.dashboard)."""
    return files("router.dashboard").joinpath("dashboard.html").read_bytes()


def add_dashboard_routes(
    app: FastAPI, ctx: RouterContext, guard: Callable[[Request], Awaitable[None]]
) -> SnapshotFeed:
    page = dashboard_page()
    feed = SnapshotFeed(
        lambda: fleet_snapshot(ctx.config, ctx.replica_set.replicas, ctx.index, ctx.dispatcher.log)
    )

    @app.get("/dashboard", include_in_schema=False)
    async def dashboard() -> Response:
        return HTMLResponse(page, headers=_PAGE_HEADERS)

    @app.get("/dashboard/state", dependencies=[Depends(guard)])
    async def dashboard_state() -> Response:
        """The fleet as the dashboard draws it: replicas, their cache by prefix, decisions."""
        return Response(feed.current(), media_type="application/json")

    @app.get("/dashboard/events", dependencies=[Depends(guard)])
    async def dashboard_events() -> Response:
        """The snapshot as Server-Sent Events (`event: snapshot`), for as long as one reads."""
        try:
            stream = feed.join()
        except TooManyViewers as e:
            raise APIError(
                503, str(e), code="too_many_viewers", headers={"Retry-After": "10"}
            ) from e
        return StreamingResponse(stream, media_type="text/event-stream", headers=_SSE_HEADERS)

    return feed
