"""The web process's ASGI application: `/mcp` to the MCP server, the rest to Django, no
WebSocket, and each route's body limit enforced before Django reads a byte.

Only the routes that carry attachments (a send, a reply, and the MCP endpoint, whose
send_message takes them too) take a body as large as a message may be; every other route
takes BODY_LIMIT, so that no client makes the web process receive and parse megabytes of
JSON for a route that needs a few hundred bytes. A body over its route's limit is a 413
before a byte of it is read (by its Content-Length) or as soon as it passes the limit (a
chunked body, which Django would otherwise read whole)."""
import asyncio
import contextlib
import gc
import json
import logging
import os
import re
import time

import django
from django.conf import settings
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Read by config/settings.py: under ASGI a request's thread-sensitive sync parts run on a
# thread that is not the pooled views' (core.pools.KeptThreadsASGIHandler), so a database connection kept
# open past the request there (CONN_MAX_AGE) would pile up to PostgreSQL's limit.
os.environ["RELAY_SERVING_ASGI"] = "1"
django.setup(set_prefix=False)

from core.pools import KeptThreadsASGIHandler  # noqa: E402 (needs Django set up)

django_app = KeptThreadsASGIHandler()

from api.errors import MESSAGES, error_body  # noqa: E402

logger = logging.getLogger(__name__)


def _lasting() -> None:
    """Move what the process holds now, and keeps as long as it lives, out of the
    collector's sight, so that a full collection scans only what requests leave behind and
    answers due meanwhile do not wait for a long one (docs/benchmarks.md, "MCP waits")."""
    gc.collect()
    gc.freeze()


def _mcp_built():
    from api.agents.server import http_app

    app = http_app()
    _lasting()
    return app


class BuiltOnFirstUse:
    """The MCP server (api/agents/server.py), imported and built at the first request to
    `/mcp`, off the event loop, and its lifespan (the SDK's session manager) run from then
    until the process's end. The SDK and the tools' models cost a web process more CPU to
    import and build (0.7-0.9 s) than all of Django and Relay; a process that never serves
    MCP never pays it, and one that does pays it once, at its first MCP request. A build
    that fails (Django's check `relay.E001` catches that at `migrate`) answers 503 and is
    tried again after RETRY_SECONDS; a session manager that ends on its own is built again
    at the next request."""

    RETRY_SECONDS = 5

    def __init__(self, build) -> None:
        self.build = build
        self.app = None
        self.starting: asyncio.Future | None = None
        self.failed_at: float | None = None
        self.stopping = False
        self.lifespan_inbox: asyncio.Queue | None = None
        self.lifespan: asyncio.Task | None = None

    async def __call__(self, scope, receive, send):
        if self.app is None:
            if self.starting is None:
                if self.stopping or (self.failed_at is not None
                                     and time.monotonic() - self.failed_at < self.RETRY_SECONDS):
                    return await _unavailable(send, self.RETRY_SECONDS)
                self.starting = asyncio.ensure_future(self._start())
            try:
                # Shielded: a client that leaves while it is built does not stop it for the rest.
                await asyncio.shield(self.starting)
            except Exception:
                return await _unavailable(send, self.RETRY_SECONDS)
        await self.app(scope, receive, send)

    async def _start(self) -> None:
        try:
            app = await asyncio.to_thread(self.build)
            inbox, started = asyncio.Queue(), asyncio.get_running_loop().create_future()

            async def send(message):
                if message["type"].startswith("lifespan.startup") and not started.done():
                    started.set_result(message)

            def ended(task: asyncio.Task) -> None:
                if not started.done():
                    failure = None if task.cancelled() else task.exception()
                    started.set_exception(failure or RuntimeError("the MCP server's lifespan ended before it started"))
                elif self.lifespan is task and not self.stopping:
                    logger.error("the MCP server's session manager ended on its own; it is built again at the next "
                                 "/mcp request")
                    self.app = self.lifespan = None

            lifespan = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                                 inbox.get, send))
            lifespan.add_done_callback(ended)
            await inbox.put({"type": "lifespan.startup"})
            message = await started
            if message["type"] != "lifespan.startup.complete":
                raise RuntimeError(f"the MCP server did not start: {message.get('message', '')}")
            self.app, self.lifespan_inbox, self.lifespan, self.failed_at = app, inbox, lifespan, None
        except Exception:
            logger.exception("the MCP server could not be built; /mcp answers 503 and tries again in %s s",
                             self.RETRY_SECONDS)
            self.failed_at = time.monotonic()
            raise
        finally:
            self.starting = None

    async def stop(self) -> None:
        """End the MCP server's lifespan, if it was started (waiting for a build under way)."""
        self.stopping = True
        if self.starting is not None:
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.starting), 30)
        if self.lifespan is not None and not self.lifespan.done():
            await self.lifespan_inbox.put({"type": "lifespan.shutdown"})
            with contextlib.suppress(Exception):
                await self.lifespan


async def _error_answer(send, status: int, message: str, headers: list) -> None:
    """An error in the API's JSON shape, answered before Django or the MCP server sees the request."""
    body = json.dumps(error_body(status, message)).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


async def _unavailable(send, retry_after: int) -> None:
    await _error_answer(send, 503, "The MCP server is not available on this web process; try again shortly.",
                        [(b"retry-after", str(retry_after).encode())])


mcp_app = BuiltOnFirstUse(_mcp_built)

get_resolver().url_patterns  # noqa: B018 (imports every view now rather than at the first request)
_lasting()


async def refuse_websocket(scope, receive, send):
    """Relay serves no WebSocket: an upgrade is closed before it is accepted, which the
    server answers with 403 (it reached Django before, whose refusal was a 500)."""
    if (await receive())["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": 1008})


async def lifespan(receive, send) -> None:
    """The process's lifespan: nothing to start; at the end, the MCP server's, if it ran."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await mcp_app.stop()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def routed(scope, receive, send):
    """`/mcp` is the MCP server, built at its first request; everything else is Django's,
    but for WebSocket upgrades, which nothing serves."""
    if scope["type"] == "websocket":
        await refuse_websocket(scope, receive, send)
    elif scope["type"] == "lifespan":
        await lifespan(receive, send)
    elif scope.get("path", "").rstrip("/") == "/mcp":
        await mcp_app(scope, receive, send)
    else:
        await django_app(scope, receive, send)


BODY_LIMIT = 1024 * 1024
# Routes whose bodies may carry attachments: up to DATA_UPLOAD_MAX_MEMORY_SIZE.
LARGE_BODIES = re.compile(r"^(/api/v1/mailboxes/[^/]+/messages(/[^/]+/reply)?|/mcp)/?$")


def limit_for(path: str) -> int:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE if LARGE_BODIES.match(path) else BODY_LIMIT


async def _too_large(send, limit: int) -> None:
    await _error_answer(send, 413, f"{MESSAGES[413]} This route takes at most {limit} bytes.",
                        [(b"connection", b"close")])


def with_body_limits(app):
    async def limited(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        limit = limit_for(scope.get("path", ""))
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > limit:
                return await _too_large(send, limit)
            return await app(scope, receive, send)
        # No length given (chunked): read up to the limit, then hand what was read on.
        received, size = [], 0
        while True:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > limit:
                return await _too_large(send, limit)
            if not message.get("more_body"):
                break

        async def replay():
            return received.pop(0) if received else await receive()

        return await app(scope, replay, send)

    return limited


application = with_body_limits(routed)
