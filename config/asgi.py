"""The web process's ASGI application: `/mcp` to the MCP server, the rest to Django, no
WebSocket, and each route's body limit enforced before Django reads a byte.

Only the routes that carry attachments (a send, a reply, and the MCP endpoint, whose
send_message takes them too) take a body as large as a message may be; every other route
takes BODY_LIMIT, so that no client makes the web process receive and parse megabytes of
JSON for a route that needs a few hundred bytes. A body over its route's limit is a 413
before a byte of it is read (by its Content-Length) or as soon as it passes the limit (a
chunked body, which Django would otherwise read whole)."""
import gc
import json
import os
import re

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

from api.agents.server import http_app  # noqa: E402 (needs Django set up)
from api.errors import MESSAGES, error_body  # noqa: E402

mcp_app = http_app()

# What the process holds from here on lives as long as it does (modules, the URLconf and
# the views it imports, the MCP server): moved out of the collector's sight, so that a
# full collection scans only what requests leave behind, and answers due meanwhile do not
# wait for a long one (docs/benchmarks.md, "MCP waits").
get_resolver().url_patterns  # noqa: B018 (imports every view now rather than at the first request)
gc.collect()
gc.freeze()


async def refuse_websocket(scope, receive, send):
    """Relay serves no WebSocket: an upgrade is closed before it is accepted, which the
    server answers with 403 (it reached Django before, whose refusal was a 500)."""
    if (await receive())["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": 1008})


async def routed(scope, receive, send):
    """`/mcp` is the MCP server (api/agents/server.py), which also owns the lifespan (its
    session manager runs for as long as the process); everything else is Django's, but
    for WebSocket upgrades, which nothing serves."""
    if scope["type"] == "websocket":
        await refuse_websocket(scope, receive, send)
    elif scope["type"] == "lifespan" or scope.get("path", "").rstrip("/") == "/mcp":
        await mcp_app(scope, receive, send)
    else:
        await django_app(scope, receive, send)


BODY_LIMIT = 1024 * 1024
# Routes whose bodies may carry attachments: up to DATA_UPLOAD_MAX_MEMORY_SIZE.
LARGE_BODIES = re.compile(r"^(/api/v1/mailboxes/[^/]+/messages(/[^/]+/reply)?|/mcp)/?$")


def limit_for(path: str) -> int:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE if LARGE_BODIES.match(path) else BODY_LIMIT


async def _too_large(send, limit: int) -> None:
    body = json.dumps(error_body(413, f"{MESSAGES[413]} This route takes at most {limit} bytes.")).encode()
    await send({"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


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
