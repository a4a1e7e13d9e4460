import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Read by config/settings.py: under ASGI each request runs its sync parts in a thread
# of its own, so a database connection kept open past the request (CONN_MAX_AGE) would
# be left behind with that thread, and they would pile up to PostgreSQL's limit.
os.environ["RELAY_SERVING_ASGI"] = "1"
django_app = get_asgi_application()

from api.agents.server import http_app  # noqa: E402 (needs Django set up)

mcp_app = http_app()


async def application(scope, receive, send):
    """`/mcp` is the MCP server (api/agents/server.py), which also owns the lifespan (its
    session manager runs for as long as the process); everything else is Django's."""
    if scope["type"] == "lifespan" or scope.get("path", "").rstrip("/") == "/mcp":
        await mcp_app(scope, receive, send)
    else:
        await django_app(scope, receive, send)
