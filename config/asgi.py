import gc
import os

from django.core.asgi import get_asgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Read by config/settings.py: under ASGI each request runs its sync parts in a thread
# of its own, so a database connection kept open past the request (CONN_MAX_AGE) would
# be left behind with that thread, and they would pile up to PostgreSQL's limit.
os.environ["RELAY_SERVING_ASGI"] = "1"
django_app = get_asgi_application()

from api.agents.server import http_app  # noqa: E402 (needs Django set up)
from config.body_limits import with_body_limits  # noqa: E402

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


application = with_body_limits(routed)
